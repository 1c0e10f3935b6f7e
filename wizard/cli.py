"""The front door. With no arguments and a terminal: the TUI (imported only then). Otherwise
the subcommands, parsed here and run by hpcwizard.commands. Exit status: 0 done, 1 a step
or check failed, 2 bad input, 130 interrupted. Bad input is one line on stderr, never a
traceback, and changes nothing."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Iterable, List, Optional

from . import SUPPORTED_PYTHON, __version__
from .exit_codes import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK
from .i18n import N_, _, set_language
from .validate import BadInput

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
    v.add_argument("--fleet", action="store_true", help=_(
        "only the fleet check: every instance's health (GPU ECC errors, NVLinks, InfiniBand "
        "error counters) compared, then TCP throughput between pairs of the job's instances "
        "in rounds of disjoint pairs; the odd node or slow link named; this loads the links"))
    v.add_argument("--jobs", default=None, help=_("how many hosts to check at once (default 16)"))
    v.add_argument("--json", action="store_true")


def _diagnose_args(dg: argparse.ArgumentParser) -> None:
    dg.add_argument("logfile", help=_("the log file ('-' for standard input)"))
    dg.add_argument("--json", action="store_true")
    dg.add_argument("--scope", choices=("job", "apply"), default=None, help=_(
        "read it as a job's log (only a job's failures) or as hpcwizard apply's output "
        "(apply's failures first); default: apply for hpcwizard's own apply log, job for "
        "any other"))


# Each command: its line in --help, and what adds its arguments.
SUBCOMMANDS = {
    "detect": (N_("show what this machine is and has"), _detect_args),
    "plan": (N_("show every step and its exact commands; change nothing"), _plan_args),
    "apply": (N_("configure this machine"), _apply_args),
    "export": (N_("write the plan as a file"), _export_args),
    "undo": (N_("take back what a record says was done"), _record_args),
    "replay": (N_("apply a record's choices on this machine"), _record_args),
    "verify": (N_("check SSH, names, MPI/PyTorch here and across instances"), _verify_args),
    "diagnose": (N_("explain the known failures in a job's log (ssh, mpirun, UCX, NCCL, PyTorch, "
                    "Slurm) or in apply's (exit 0: found, 1: nothing recognised, 2: "
                    "unreadable)"), _diagnose_args),
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
        return command(args.command)(args)
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


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs the subcommand `name`."""
    # kept lazy: a command loads its own module only; --version and the first frame load none
    if name == "detect":  # detection alone, never the planner
        from .commands.detect import cmd_detect

        return cmd_detect
    if name == "diagnose":
        from .commands.diagnose import cmd_diagnose

        return cmd_diagnose
    from .commands.configure import COMMANDS

    return COMMANDS[name]


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
