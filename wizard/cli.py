"""The front door. With no arguments and a terminal: the TUI (imported only then). Otherwise
the subcommands below. Exit status: 0 done, 1 a step or check failed, 2 bad input,
130 interrupted. Bad input is one line on stderr, never a traceback, and changes nothing."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Tuple

from . import SUPPORTED_PYTHON, __version__
from .exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from .i18n import N_, _, field, set_language
from .validate import BadInput

if TYPE_CHECKING:
    from .apply import Runner
    from .catalog import Catalog
    from .choices import Choices
    from .facts import Facts
    from .plan import Plan
    from .record import Record

LANGUAGES = ("en", "zh")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # kept lazy: the wizard's start builds no parser
        from .argparse_i18n import error_text

        raise BadInput(error_text(message))


class _NotEmpty(argparse.Action):
    """A value that may not be empty: leaving the option out is how one asks for its
    default, and an empty value (often a variable that was not set: --user "$JOB_USER") took
    the default in silence. HINT says what to give instead."""

    HINT = ""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: Optional[str] = None) -> None:
        if not str(values).strip():
            raise argparse.ArgumentError(self, _("the value is empty: {hint}").format(
                hint=_(self.HINT)))
        setattr(namespace, self.dest, values)


class _User(_NotEmpty):
    HINT = N_("give a user name, or leave out --user for you")


class _Peers(_NotEmpty):
    HINT = N_("give ssh Host patterns, or leave out --peers for the platform's host list")


class _Output(_NotEmpty):
    HINT = N_("give a file name, or leave out -o (or give '-') for standard output")


def _add_choices(p: argparse.ArgumentParser, required: bool = True) -> None:
    from . import vocab  # the values and defaults, as the Choose screen and make_choices have them

    g = p.add_argument_group(_("choices"))
    for choice in (vocab.FRAMEWORK, vocab.NETWORK):
        g.add_argument(choice.flag, choices=choice.ids, required=required)
    mode = g.add_mutually_exclusive_group()
    for value in vocab.MODE.values:  # a flag for each but the default (--preset, --manual)
        if value.id != vocab.MODE.default:
            mode.add_argument(f"--{value.id}", dest="mode", action="store_const", const=value.id,
                              help=_(value.help))
    g.add_argument("--user", default=vocab.DEFAULT_USER, action=_User, help=_("the job's user (default: you)"))
    g.add_argument("--ssh-port", default=str(vocab.DEFAULT_SSH_PORT),
                   help=_("SSH port between instances (default {port})").format(
                       port=vocab.DEFAULT_SSH_PORT))
    g.add_argument(vocab.HOST_KEYS.flag, choices=vocab.HOST_KEYS.ids,
                   default=vocab.HOST_KEYS.default,
                   help=_("pinned: trust only this image's host key (default); off: as the guide"))
    g.add_argument("--peers", default=None, metavar="PATTERNS", action=_Peers,
                   help=_("the job's hosts as ssh Host patterns, space separated ('job-worker-* "
                          "node1'), the only hosts the SSH client settings apply to (default: "
                          "from the platform's host list, else this host's name; '*' is every "
                          "host, git over ssh included)"))
    g.add_argument("--ucx-url", default="",
                   help=_("MPI over IB: install UCX from this .deb/.rpm instead of the distribution's"))
    g.add_argument("--ucx-sha256", default="", help=_("the expected sha256 of the --ucx-url file"))
    g.add_argument("--sysroot", default="/", help=_("read facts from this root (detect/plan/export)"))


def _detect_args(d: argparse.ArgumentParser) -> None:
    d.add_argument("--json", action="store_true")
    d.add_argument("--sysroot", default="/")


def _plan_args(pl: argparse.ArgumentParser) -> None:
    _add_choices(pl)
    pl.add_argument("--json", action="store_true")


def _apply_args(ap: argparse.ArgumentParser) -> None:
    _add_choices(ap)
    ap.add_argument("--yes", action="store_true", help=_("do not ask before running"))
    ap.add_argument("--dry-run", action="store_true", help=_("show what would run and what is done"))
    ap.add_argument("--record", help=_("write the record here (default: the state directory)"))


def _export_args(ex: argparse.ArgumentParser) -> None:
    # kept lazy: detect and --version build no choice options
    from . import vocab

    _add_choices(ex)
    ex.add_argument("--format", choices=vocab.EXPORT_FORMATS, required=True)
    ex.add_argument("-o", "--output", action=_Output,
                    help=_("file to write ('-' or none: standard output)"))
    ex.add_argument("--force", action="store_true",
                    help=_("with -o: replace files already at the export's names (default: "
                           "refuse)"))


def _record_args(r: argparse.ArgumentParser) -> None:
    r.add_argument("record")
    r.add_argument("--yes", action="store_true")


def _verify_args(v: argparse.ArgumentParser) -> None:
    _add_choices(v, required=False)
    v.add_argument("--record", help=_("verify what this apply record configured (its choices, "
                                      "instead of --framework/--network ...) and keep the "
                                      "outcome in it"))
    vh = v.add_mutually_exclusive_group()
    vh.add_argument("--hosts", help=_("the job's hosts: node1,node2 or job-worker-{0..3} or node[1-3]"))
    vh.add_argument("--hostfile", help=_("an OpenMPI/MPICH hostfile naming the job's hosts"))
    v.add_argument("--here", action="store_true", help=_("only the checks on this instance"))
    v.add_argument("--bandwidth", action="store_true", help=_(
        "also measure the links between instances (ib_write_bw, TCP, the all_reduce's bus "
        "bandwidth) against their line rate; this loads them"))
    v.add_argument("--jobs", default=None, help=_("how many hosts to check at once (default 16)"))
    v.add_argument("--json", action="store_true")


def _diagnose_args(dg: argparse.ArgumentParser) -> None:
    dg.add_argument("logfile", help=_("the log file ('-' for standard input)"))
    dg.add_argument("--json", action="store_true")


# Each command: its line in --help, and what adds its arguments.
SUBCOMMANDS = {
    "detect": (N_("show what this machine is and has"), _detect_args),
    "plan": (N_("show every step and its exact commands; change nothing"), _plan_args),
    "apply": (N_("configure this machine"), _apply_args),
    "export": (N_("write the plan as a file"), _export_args),
    "undo": (N_("take back what a record says was done"), _record_args),
    "replay": (N_("apply a record's choices on this machine"), _record_args),
    "verify": (N_("check SSH, names, MPI/PyTorch here and across instances"), _verify_args),
    "diagnose": (N_("explain the known failures in an ssh/mpirun/UCX/NCCL log (exit 0: found, "
                    "1: nothing recognised, 2: unreadable)"), _diagnose_args),
}


def build_parser(commands: Optional[Iterable[str]] = None) -> argparse.ArgumentParser:
    """The whole command line; with `commands`, only those commands get their arguments
    (the rest keep their line in --help). Building all eight is a third of what `detect`
    costs beyond the interpreter, and one command line uses one of them."""
    full = set(SUBCOMMANDS if commands is None else commands)
    p = _Parser(prog="hpcwizard", description=_(
        "Prepare this container for multi-instance MPI and PyTorch jobs. Run with no "
        "arguments in a terminal for the wizard."))
    p.add_argument("--version", action="store_true", help=_("print the version and exit"))
    p.add_argument("--lang", choices=LANGUAGES, default=None,
                   help=_("language of what hpcwizard says (default: from LANG/LC_ALL); "
                          "commands and files are the same in every language"))
    # --lang after the command too (hpcwizard plan --lang zh ...): every subparser knows it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--lang", choices=LANGUAGES, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    for name, (help_text, add_arguments) in SUBCOMMANDS.items():
        command = sub.add_parser(name, parents=[common], help=_(help_text))
        if name in full:
            add_arguments(command)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    set_language(_lang_option(argv))  # before any message, the parser's help included
    try:
        if not [a for i, a in enumerate(argv) if not (
                a == "--lang" or a.startswith("--lang=") or (i and argv[i - 1] == "--lang"))]:
            return _start_tui()  # no arguments (but --lang): the wizard
        # kept lazy: the wizard's start builds no parser
        from .argparse_i18n import translated

        with translated():  # argparse's own words (errors, --help) in the chosen language
            args = build_parser(commands=set(argv) & set(SUBCOMMANDS)).parse_args(argv)
        if args.version:
            print(f"hpcwizard {__version__} (Python {sys.version.split()[0]}; "
                  f"supports Python {SUPPORTED_PYTHON})")
            return EXIT_OK
        if not args.command:
            raise BadInput(_("no command given: try 'hpcwizard --help'"))
        return COMMANDS[args.command](args)
    except BadInput as exc:
        print(_("hpcwizard: {error}").format(error=exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(_("hpcwizard: interrupted"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (`hpcwizard plan | head`): not an error of ours. Point stdout at
        # /dev/null so that the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def run() -> None:
    """The process's entry (python -m hpcwizard, the hpcwizard script, the zipapp): main()
    on sys.argv, then exit with its status."""
    sys.exit(main())


def _lang_option(argv: List[str]) -> Optional[str]:
    """--lang VALUE or --lang=VALUE anywhere in argv (the last wins); None: the environment."""
    lang = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(argv):
            lang = argv[i + 1]
        elif arg.startswith("--lang="):
            lang = arg.split("=", 1)[1]
    return lang if lang in LANGUAGES else None


def _start_tui() -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise BadInput(_("no terminal: run 'hpcwizard' in a terminal for the wizard, or use "
                         "the commands (hpcwizard --help)"))
    # The first frame is on the terminal before Textual loads (most of a second on a slow
    # instance); Textual paints over it. Lazy: the core never imports textual.
    from .screens.early_frame import EarlyFrame

    with EarlyFrame() as frame:
        from .screens.app import run_tui

        return run_tui(frame)


# --- shared pieces ----------------------------------------------------------------------------

def _facts(sysroot: str, mpi_components: bool = True) -> Facts:
    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .detect import detect

    if not os.path.isdir(sysroot):
        raise BadInput(_("sysroot {path!r} is not a directory").format(path=sysroot))
    return detect(sysroot=sysroot, mpi_components=mpi_components)


def _choices(args: argparse.Namespace) -> Choices:
    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .choices import make_choices

    # options that do not apply are refused, not ignored: only MPI gets SSH settings
    # (mpirun starts its ranks over SSH; torchrun needs no SSH server or client config)
    from . import vocab

    ssh_only = [flag for flag, given in (
        ("--peers", args.peers is not None), ("--host-keys off", args.host_keys == "off"),
        # at its default it is no choice (as verify --record takes it); another port would
        # only be written into the job's header
        ("--ssh-port", args.ssh_port != str(vocab.DEFAULT_SSH_PORT))) if given]
    if not vocab.uses_ssh(args.framework) and ssh_only:
        raise BadInput(_("{flags}: SSH is configured for MPI only (mpirun starts its ranks "
                         "over SSH); PyTorch gets no SSH settings: leave out {flags}").format(
            flags=", ".join(ssh_only)))
    return make_choices(framework=args.framework, network=args.network, mode=args.mode or "auto",
                        user=args.user, ssh_port=args.ssh_port, host_keys=args.host_keys,
                        peers=args.peers, ucx_source="url" if args.ucx_url else "distro",
                        ucx_url=args.ucx_url, ucx_sha256=args.ucx_sha256)


def _plan(args: argparse.Namespace, choices: Optional[Choices] = None) -> Tuple[Facts, Plan]:
    from concurrent.futures import ThreadPoolExecutor

    choices = choices or _choices(args)  # validate before detecting: bad input costs nothing
    # Detection waits on its probes (ompi_info alone takes a quarter of a second) while
    # this thread imports the planner and reads the recipes.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hpcwizard-facts")
    try:
        facts_ahead = pool.submit(_facts, getattr(args, "sysroot", "/"),
                                  mpi_components=choices.network == "ib")
        # kept lazy: a command loads only what it runs (not --version, not the first frame)
        from .plan import build_plan

        catalog = _catalog()
        facts = facts_ahead.result()
    finally:
        pool.shutdown(wait=False)
    return facts, build_plan(facts, choices, catalog)


def _catalog() -> Catalog:
    """The recipes; a broken one (an edited installation) is one line, not a traceback."""
    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .catalog import RecipeError, load_catalog

    try:
        return load_catalog()
    except RecipeError as exc:
        raise BadInput(_("the recipes installed with hpcwizard are broken: {error}").format(
            error=exc)) from None


# --- commands -------------------------------------------------------------------------------

def cmd_detect(args: argparse.Namespace) -> int:
    facts = _facts(args.sysroot)
    if args.json:
        print(json.dumps(facts.to_dict(), indent=2, ensure_ascii=False))
    else:
        # kept lazy: a command loads only what it runs (not --version, not the first frame)
        from .detect.summary import format_summary

        print(format_summary(facts))
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .report import file_diffs, format_plan

    _facts_here, plan = _plan(args)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False))
    elif args.sysroot == "/":
        from .apply import ShellRunner

        # the diffs against this machine's files, read-only (a sysroot's files are not ours
        # to run the operations on)
        print(format_plan(plan, diffs=file_diffs(plan, ShellRunner(plan.target.user))))
    else:
        print(format_plan(plan))
    return EXIT_OK


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise BadInput(_("not a terminal, so nothing can be confirmed: add --yes to run"))
    answer = input(_("{question} [y/N] ").format(question=question)).strip().lower()
    if answer not in ("y", "yes", _("y"), _("yes")):
        raise KeyboardInterrupt


def _sudo_once(needed: bool, sudo: str) -> None:
    """The command line's way to ask for the sudo password once (session.sudo_once): on the
    terminal; refused at once when there is no terminal to type it in."""
    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .session import ask_sudo_password, sudo_once

    def ask() -> bool:
        if not _has_terminal():
            # sudo would fail at the first root step, after the user steps had run
            raise BadInput(_("the system steps need your sudo password and there is no "
                             "terminal to type it in: run this in a terminal, as root, or "
                             "with passwordless sudo; nothing was changed"))
        return ask_sudo_password()

    sudo_once(needed, sudo, ask)


def _has_terminal() -> bool:
    """The password is read from /dev/tty, whatever stdin is: a terminal is one that opens
    (without a controlling terminal it fails with ENXIO)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def _terminate_as_interrupt() -> None:
    """SIGTERM ends a run the way Ctrl-C does: the record is finished truthfully."""
    def handler(signum: int, frame: Optional[FrameType]) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _run_plan(plan: Plan, facts: Facts, record_path: Optional[str], yes: bool, dry_run: bool,
              runner: Optional[Runner] = None) -> int:
    from pathlib import Path

    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .apply import ShellRunner
    from .record import new_record_path
    from .report import ConsoleSink, format_dry_run, format_plan, format_recommendation
    from .session import Session

    runner = runner or ShellRunner(plan.target.user)
    mode = plan.choices.mode
    if mode == "preset" or (mode == "auto" and plan.recommendation.path == "preset"):
        print(format_recommendation(plan))
        if mode == "auto":
            print(_("Nothing was changed. To configure this machine anyway: add --manual."))
        return EXIT_FAILED if mode == "auto" else EXIT_OK
    if dry_run:
        print(format_dry_run(plan, [runner.check(s.as_, s.check) for s in plan.steps]))
        return EXIT_OK
    # --record FILE: refused before anything runs if anything is there (never written over)
    path = new_record_path(Path(record_path)) if record_path else None
    session = Session(plan, facts, runner, record_path=path)
    session.preflight("apply")
    print(format_plan(plan, brief=True))
    _confirm(_("Run these {n} steps?").format(n=len(plan.steps)), yes)
    _sudo_once(session.goes_through_sudo("apply"), facts.user.sudo)
    record = session.begin()  # the lock first: a second hpcwizard stops there, having written nothing
    try:
        _terminate_as_interrupt()
        session.run("apply", ConsoleSink(titles=[field(s, "title") for s in plan.steps]))
    except OSError as exc:
        return _record_failed(record, exc)
    finally:
        session.release()
    return session.exit_code()


def _record_failed(record: Record, exc: OSError) -> int:
    """The record (or the log) could not be written, e.g. a full disk: one line, exit 1.
    The record on disk is the last one written whole (writes are atomic), and no further
    step ran."""
    where = getattr(exc, "filename", None) or record.path
    print(f"hpcwizard: cannot write {where}: {exc.strerror or exc}; stopped before the next "
          f"step. The record {record.path} and the log {record.log_path} hold what was done "
          "up to the last write.", file=sys.stderr)
    return EXIT_FAILED


def cmd_apply(args: argparse.Namespace) -> int:
    if args.sysroot != "/":
        raise BadInput(_("apply changes this machine: --sysroot is for detect, plan and export"))
    facts, plan = _plan(args)
    return _run_plan(plan, facts, args.record, args.yes, args.dry_run)


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .export import render_export
    from .session import write_export

    to_stdout = args.output in (None, "-")
    if to_stdout and args.force:
        # --force says "replace my files": printing instead would leave them as they are
        raise BadInput(_("--force replaces files that -o FILE writes; the export goes to "
                         "standard output: give -o FILE, or leave out --force"))
    _facts_here, plan = _plan(args)
    if to_stdout:
        sys.stdout.write(render_export(plan, args.format))
        return EXIT_OK
    for path in write_export(plan, args.format, Path(args.output), force=args.force):
        print(_("wrote {path}").format(path=path))
    return EXIT_OK


def cmd_undo(args: argparse.Namespace) -> int:
    from pathlib import Path

    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .apply import UNDO_STATUSES, ShellRunner
    from .detect.user import current_user
    from .record import Record
    from .report import ConsoleSink
    from .session import Session

    record = Record.load(Path(args.record), use="undo", update=True)
    done = [s for s in record.steps if s.outcome.status in UNDO_STATUSES]
    if not done:
        print(_("{record}: nothing to undo (no step was done)").format(record=args.record))
        return EXIT_OK
    runner = ShellRunner(record.data["target"]["user"], library=record.library)
    session = Session.of_record(record, runner)
    # an undo text always changes something: no check can spare it sudo
    session.preflight("undo")
    _confirm(_("Undo {n} steps of {record}?").format(n=len(done), record=args.record), args.yes)
    # as apply does: the password once, before anything is undone (root's steps, or another
    # user's, go through sudo)
    if session.goes_through_sudo("undo"):
        _sudo_once(True, current_user().sudo)
    _terminate_as_interrupt()
    try:
        session.run("undo", ConsoleSink())
    except OSError as exc:
        return _record_failed(record, exc)
    return session.exit_code()


def cmd_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .choices import choices_from_mapping
    from .plan import build_plan
    from .record import Record

    record = Record.load(Path(args.record), use="replay")
    choices = choices_from_mapping(record.data["choices"])
    facts = _facts("/")
    plan = build_plan(facts, choices, _catalog())
    return _run_plan(plan, facts, None, args.yes, False)


def cmd_verify(args: argparse.Namespace) -> int:
    from pathlib import Path

    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .inputs import number
    from .report_verify import format_report
    from .verify import verify

    if args.sysroot != "/":
        raise BadInput(_("verify checks this machine: --sysroot is for detect, plan and export"))
    record = None
    if args.record:
        from .choices import choices_from_mapping
        from .record import Record

        from . import vocab

        given = [flag for flag, value, default in (
            ("--framework", args.framework, None), ("--network", args.network, None),
            ("--preset/--manual", args.mode, None), ("--user", args.user, vocab.DEFAULT_USER),
            ("--ssh-port", args.ssh_port, str(vocab.DEFAULT_SSH_PORT)),
            ("--host-keys", args.host_keys, vocab.HOST_KEYS.default),
            ("--peers", args.peers, None), ("--ucx-url", args.ucx_url, ""),
            ("--ucx-sha256", args.ucx_sha256, "")) if value != default]
        if given:
            raise BadInput(_("give --record or the choices ({flags}), not both: the record "
                             "has its own").format(flags=", ".join(given)))
        # as its owner (the choices' "you" mean that user, and the record stays theirs):
        # the one trusted load, which refuses anyone else's record
        record = Record.load(Path(args.record), use="verify --record", update=True)
        choices = choices_from_mapping(record.data["choices"])
    elif not (args.framework and args.network):
        raise BadInput(_("verify needs --framework and --network, or --record FILE"))
    else:
        choices = _choices(args)
    jobs = number(args.jobs if args.jobs is not None else "16", "--jobs", 1, 256)
    hosts = None
    if args.here and args.jobs is not None:
        raise BadInput(_("--jobs is how many hosts are checked at once; --here checks this "
                         "instance only: leave out --jobs, or --here"))
    if args.here:
        if args.hosts is not None or args.hostfile is not None:
            raise BadInput(_("--here checks this instance only: leave out --hosts and "
                             "--hostfile, or --here"))
        if args.bandwidth:
            raise BadInput(_("--bandwidth measures the links between instances: leave out "
                             "--here"))
    else:
        from .runtime import discover

        # the hosts the launch script finds, in its order (the same library decides). None
        # only when no source names any: the checks here only, said in the report. A source
        # set but unreadable is bad input naming it, never "here only".
        hosts = discover(args.hosts, args.hostfile, os.environ)
        if hosts is not None and (os.environ.get("NODE_RANK") or os.environ.get("PET_NODE_RANK")):
            from .runtime import rank_of

            # a NODE_RANK (or Kubeflow's PET_NODE_RANK) that is none of the ranks is bad
            # input now, not after the checks
            rank_of(hosts.names, os.environ)
    facts, plan = _plan(args, choices)
    report = verify(plan, facts, hosts, max_workers=jobs, bandwidth=args.bandwidth)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
    if record is not None:
        from .report_verify import keep_in_record

        try:
            keep_in_record(record, report)
        except OSError as exc:  # the checks ran and are printed: say what was not kept
            print(_("hpcwizard: could not keep the outcome in {path}: {error}").format(
                path=record.path, error=exc.strerror or exc), file=sys.stderr)
            return EXIT_FAILED
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_diagnose(args: argparse.Namespace) -> int:
    """Exit 0: at least one known failure found; 1: nothing recognised; 2: unreadable file."""
    # kept lazy: a command loads only what it runs (not --version, not the first frame)
    from .diagnose import diagnose

    from .inputs import LOG_LIMIT, read_text

    # a regular file or standard input, up to LOG_LIMIT: a FIFO or /dev/zero is refused
    text = read_text(args.logfile, _("log"), LOG_LIMIT, stdin=True)
    found = diagnose(text.splitlines())
    if args.json:
        print(json.dumps([{"id": d.id, "line": d.line, "cause": d.cause, "fix": d.fix,
                           "cause_zh": d.i18n.get("zh", {}).get("cause", ""),
                           "fix_zh": d.i18n.get("zh", {}).get("fix", "")} for d in found],
                         indent=2, ensure_ascii=False))
    elif not found:
        print(_("{path}: no known failure recognised").format(path=args.logfile))
    else:
        for d in found:
            print(f"[{d.id}] {d.line}")
            print(_("  cause: {cause}").format(cause=field(d, "cause")))
            print(_("  fix:   {fix}").format(fix=field(d, "fix")))
    return EXIT_OK if found else EXIT_FAILED


COMMANDS = {"detect": cmd_detect, "plan": cmd_plan, "apply": cmd_apply, "export": cmd_export,
            "undo": cmd_undo, "replay": cmd_replay, "verify": cmd_verify,
            "diagnose": cmd_diagnose}
