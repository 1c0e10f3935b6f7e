"""The front door. With no arguments and a terminal: the TUI (imported only then). Otherwise
the subcommands below. Exit status: 0 done, 1 a step or check failed, 2 bad input,
130 interrupted. Bad input is one line on stderr, never a traceback, and changes nothing."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, List, Optional

from . import SUPPORTED_PYTHON, __version__
from .validate import BadInput

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(message)


def _add_choices(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("choices")
    g.add_argument("--framework", choices=("mpi", "pytorch"), required=True)
    g.add_argument("--network", choices=("tcp", "ib"), required=True)
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--preset", dest="mode", action="store_const", const="preset",
                      help="start the job from a preset image instead of configuring here")
    mode.add_argument("--manual", dest="mode", action="store_const", const="manual",
                      help="configure this machine even when a preset image is recommended")
    g.add_argument("--user", default="", help="the job's user (default: you)")
    g.add_argument("--ssh-port", default="2222", help="SSH port between instances (default 2222)")
    g.add_argument("--host-keys", choices=("pinned", "off"), default="pinned",
                   help="pinned: trust only this image's host key (default); off: as the guide")
    g.add_argument("--peers", default="*",
                   help="ssh Host pattern the client settings apply to (default '*')")
    g.add_argument("--ucx-url", default="",
                   help="MPI over IB: install UCX from this .deb/.rpm instead of the distribution's")
    g.add_argument("--ucx-sha256", default="", help="the expected sha256 of the --ucx-url file")
    g.add_argument("--sysroot", default="/", help="read facts from this root (detect/plan/export)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hpcwizard", description="Prepare this container for multi-instance MPI "
                "and PyTorch jobs. Run with no arguments in a terminal for the wizard.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    d = sub.add_parser("detect", help="show what this machine is and has")
    d.add_argument("--json", action="store_true")
    d.add_argument("--sysroot", default="/")

    pl = sub.add_parser("plan", help="show every step and its exact commands; change nothing")
    _add_choices(pl)
    pl.add_argument("--json", action="store_true")

    ap = sub.add_parser("apply", help="configure this machine")
    _add_choices(ap)
    ap.add_argument("--yes", action="store_true", help="do not ask before running")
    ap.add_argument("--dry-run", action="store_true", help="show what would run and what is done")
    ap.add_argument("--record", help="write the record here (default: the state directory)")

    ex = sub.add_parser("export", help="write the plan as a file")
    _add_choices(ex)
    ex.add_argument("--format", choices=("setup", "dockerfile", "launch"), required=True)
    ex.add_argument("-o", "--output", help="file to write (default: standard output)")

    u = sub.add_parser("undo", help="take back what a record says was done")
    u.add_argument("record")
    u.add_argument("--yes", action="store_true")

    r = sub.add_parser("replay", help="apply a record's choices on this machine")
    r.add_argument("record")
    r.add_argument("--yes", action="store_true")

    v = sub.add_parser("verify", help="check SSH, names, MPI/PyTorch here and across instances")
    _add_choices(v)
    vh = v.add_mutually_exclusive_group()
    vh.add_argument("--hosts", help="the job's hosts: node1,node2 or job-worker-{0..3} or node[1-3]")
    vh.add_argument("--hostfile", help="an OpenMPI/MPICH hostfile naming the job's hosts")
    v.add_argument("--here", action="store_true", help="only the checks on this instance")
    v.add_argument("--jobs", default="16", help="how many hosts to check at once (default 16)")
    v.add_argument("--json", action="store_true")

    dg = sub.add_parser("diagnose", help="explain the known failures in an ssh/mpirun/UCX/NCCL log"
                        " (exit 0: found, 1: nothing recognised, 2: unreadable)")
    dg.add_argument("logfile", help="the log file ('-' for standard input)")
    dg.add_argument("--json", action="store_true")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if not argv:
            return _start_tui()
        args = build_parser().parse_args(argv)
        if args.version:
            print(f"hpcwizard {__version__} (Python {sys.version.split()[0]}; "
                  f"supports Python {SUPPORTED_PYTHON})")
            return EXIT_OK
        if not args.command:
            raise BadInput("no command given: try 'hpcwizard --help'")
        return COMMANDS[args.command](args)
    except BadInput as exc:
        print(f"hpcwizard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("hpcwizard: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (`hpcwizard plan | head`): not an error of ours. Point stdout at
        # /dev/null so that the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _start_tui() -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise BadInput("no terminal: run 'hpcwizard' in a terminal for the wizard, or use the "
                       "commands (hpcwizard --help)")
    from .screens.app import run_tui  # lazy: the core never imports textual

    return run_tui()


# --- shared pieces ----------------------------------------------------------------------------

def _facts(sysroot: str) -> Any:
    from .detect import detect

    if not Path(sysroot).is_dir():
        raise BadInput(f"sysroot {sysroot!r} is not a directory")
    return detect(sysroot=sysroot)


def _choices(args: argparse.Namespace) -> Any:
    from .choices import make_choices

    return make_choices(framework=args.framework, network=args.network, mode=args.mode or "auto",
                        user=args.user, ssh_port=args.ssh_port, host_keys=args.host_keys,
                        peers=args.peers, ucx_source="url" if args.ucx_url else "distro",
                        ucx_url=args.ucx_url, ucx_sha256=args.ucx_sha256)


def _plan(args: argparse.Namespace, choices: Any = None) -> "tuple[Any, Any]":
    from .catalog import load_catalog
    from .plan import build_plan

    choices = choices or _choices(args)  # validate before detecting: bad input costs nothing
    facts = _facts(getattr(args, "sysroot", "/"))
    return facts, build_plan(facts, choices, load_catalog())


# --- commands -------------------------------------------------------------------------------

def cmd_detect(args: argparse.Namespace) -> int:
    facts = _facts(args.sysroot)
    if args.json:
        print(json.dumps(facts.to_dict(), indent=2, ensure_ascii=False))
    else:
        from .detect.summary import format_summary

        print(format_summary(facts))
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from .report import format_plan

    _, plan = _plan(args)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_plan(plan))
    return EXIT_OK


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise BadInput("not a terminal, so nothing can be confirmed: add --yes to run")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise KeyboardInterrupt


def _sudo_once(plan: Any, facts: Any) -> None:
    """Ask for the sudo password once, before the run; never inside it."""
    import subprocess

    if plan.needs_root and facts.user.sudo == "password":
        if subprocess.run(["sudo", "-v"]).returncode != 0:
            raise BadInput("sudo did not accept the password: nothing was changed")


def _terminate_as_interrupt() -> None:
    """SIGTERM ends a run the way Ctrl-C does: the record is finished truthfully."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _run_plan(plan: Any, facts: Any, record_path: Optional[str], yes: bool, dry_run: bool) -> int:
    from .apply import ShellRunner, apply_record
    from .record import Record
    from .report import ConsoleSink, format_dry_run, format_plan, format_recommendation

    runner = ShellRunner(plan.target.user)
    mode = plan.choices.mode
    if mode == "preset" or (mode == "auto" and plan.recommendation.path == "preset"):
        print(format_recommendation(plan))
        if mode == "auto":
            print("Nothing was changed. To configure this machine anyway: add --manual.")
        return EXIT_FAILED if mode == "auto" else EXIT_OK
    if dry_run:
        print(format_dry_run(plan, [runner.check(s.as_, s.check) for s in plan.steps]))
        return EXIT_OK
    print(format_plan(plan, brief=True))
    _confirm(f"Run these {len(plan.steps)} steps?", yes)
    _sudo_once(plan, facts)
    record = Record.new(plan, facts, Path(record_path) if record_path else None)
    record.save()
    _terminate_as_interrupt()
    from .lock import run_lock

    with run_lock():
        status = apply_record(record, runner, ConsoleSink())
    return {"done": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(status, EXIT_FAILED)


def cmd_apply(args: argparse.Namespace) -> int:
    if args.sysroot != "/":
        raise BadInput("apply changes this machine: --sysroot is for detect, plan and export")
    facts, plan = _plan(args)
    return _run_plan(plan, facts, args.record, args.yes, args.dry_run)


def cmd_export(args: argparse.Namespace) -> int:
    from .export import render_export
    from .record import write_private

    _, plan = _plan(args)
    text = render_export(plan, args.format)
    if not args.output:
        sys.stdout.write(text)
        return EXIT_OK
    out = Path(args.output)
    if out.is_dir():
        raise BadInput(f"{out} is a directory: give a file name")
    if not out.parent.is_dir():
        raise BadInput(f"directory {out.parent} does not exist")
    write_private(out, text.encode("utf-8"))
    os.chmod(out, 0o700)
    print(f"wrote {out}")
    if args.format == "dockerfile":  # its build context: the setup script beside it
        from .dockerfile import companion_files

        for name, body in companion_files(plan).items():
            write_private(out.parent / name, body.encode("utf-8"))
            os.chmod(out.parent / name, 0o700)
            print(f"wrote {out.parent / name}")
    return EXIT_OK


def cmd_undo(args: argparse.Namespace) -> int:
    from .apply import ShellRunner, undo_record
    from .lock import run_lock
    from .record import Record
    from .report import ConsoleSink

    record = Record.load(Path(args.record))
    done = [s for s in record.steps if s["status"] in ("done", "failed", "interrupted", "undo-failed")]
    if not done:
        print(f"{args.record}: nothing to undo (no step was done)")
        return EXIT_OK
    _confirm(f"Undo {len(done)} steps of {args.record}?", args.yes)
    _terminate_as_interrupt()
    with run_lock():
        status = undo_record(record, ShellRunner(record.data["target"]["user"]), ConsoleSink())
    return {"undone": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(status, EXIT_FAILED)


def cmd_replay(args: argparse.Namespace) -> int:
    from .catalog import load_catalog
    from .choices import choices_from_mapping
    from .plan import build_plan
    from .record import Record

    record = Record.load(Path(args.record))
    choices = choices_from_mapping(record.data["choices"])
    facts = _facts("/")
    plan = build_plan(facts, choices, load_catalog())
    return _run_plan(plan, facts, None, args.yes, False)


def cmd_verify(args: argparse.Namespace) -> int:
    from .hosts import find_hosts
    from .report_verify import format_report
    from .verify import verify

    if args.sysroot != "/":
        raise BadInput("verify checks this machine: --sysroot is for detect, plan and export")
    choices = _choices(args)
    hosts = None
    if not args.here:
        try:
            hosts = find_hosts(args.hosts, args.hostfile)
        except BadInput:
            if args.hosts is not None or args.hostfile is not None:
                raise
            hosts = None  # no hosts anywhere: the checks here only, said in the report
    facts, plan = _plan(args, choices)
    jobs = args.jobs.strip()
    if not jobs.isdigit() or not 1 <= int(jobs) <= 256:
        raise BadInput(f"--jobs {args.jobs!r} is not a number from 1 to 256")
    report = verify(plan, facts, hosts, max_workers=int(jobs))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
    return EXIT_OK if report.ok else EXIT_FAILED


def cmd_diagnose(args: argparse.Namespace) -> int:
    """Exit 0: at least one known failure found; 1: nothing recognised; 2: unreadable file."""
    from .diagnose import diagnose

    try:
        if args.logfile == "-":
            text = sys.stdin.read()
        else:
            text = Path(args.logfile).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BadInput(f"cannot read {args.logfile}: {exc.strerror or exc}") from None
    found = diagnose(text.splitlines())
    if args.json:
        print(json.dumps([{"id": d.id, "line": d.line, "cause": d.cause, "fix": d.fix,
                           "cause_zh": d.i18n.get("zh", {}).get("cause", ""),
                           "fix_zh": d.i18n.get("zh", {}).get("fix", "")} for d in found],
                         indent=2, ensure_ascii=False))
    elif not found:
        print(f"{args.logfile}: no known failure recognised")
    else:
        for d in found:
            print(f"[{d.id}] {d.line}\n  cause: {d.cause}\n  fix:   {d.fix}")
    return EXIT_OK if found else EXIT_FAILED


COMMANDS = {"detect": cmd_detect, "plan": cmd_plan, "apply": cmd_apply, "export": cmd_export,
            "undo": cmd_undo, "replay": cmd_replay, "verify": cmd_verify,
            "diagnose": cmd_diagnose}
