"""The commands that plan and change this machine: plan, apply, export, undo, replay and
verify. Each validates its input before anything is detected or run."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Optional, Tuple

from .. import vocab
from ..apply import UNDO_STATUSES, Runner, ShellRunner
from ..catalog import Catalog, RecipeError, load_catalog
from ..choices import Choices, choices_from_mapping, make_choices
from ..detect.user import current_user
from ..exit_codes import EXIT_FAILED, EXIT_OK
from ..export import render_export
from ..facts import Facts
from ..hosts import Hosts
from ..i18n import _, field
from ..inputs import number
from ..plan import Plan, build_plan
from ..record import Record, new_record_path
from ..report import ConsoleSink, file_diffs, format_dry_run, format_plan, format_recommendation
from ..report_fleet import format_fleet_check
from ..report_verify import format_report, keep_in_record
from ..runtime import discover, rank_of
from ..session import Session, ask_sudo_password, sudo_once, write_export
from ..validate import BadInput
from ..verify import verify
from ..verify.fleetcheck import check_fleet
from ..verify.jobenv import more_names
from .detect import facts_here


def _choices(args: argparse.Namespace) -> Choices:
    # options that do not apply are refused, not ignored: only MPI gets SSH settings
    # (mpirun starts its ranks over SSH; torchrun needs no SSH server or client config)
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
    choices = choices or _choices(args)  # validate before detecting: bad input costs nothing
    # Detection waits on its probes (ompi_info alone takes a quarter of a second) while
    # this thread reads the recipes.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hpcwizard-facts")
    try:
        facts_ahead = pool.submit(facts_here, getattr(args, "sysroot", "/"),
                                  mpi_components=choices.network == "ib")
        catalog = _catalog()
        facts = facts_ahead.result()
    finally:
        pool.shutdown(wait=False)
    return facts, build_plan(facts, choices, catalog)


def _catalog() -> Catalog:
    """The recipes; a broken one (an edited installation) is one line, not a traceback."""
    try:
        return load_catalog()
    except RecipeError as exc:
        raise BadInput(_("the recipes installed with hpcwizard are broken: {error}").format(
            error=exc)) from None


def cmd_plan(args: argparse.Namespace) -> int:
    _facts_here, plan = _plan(args)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2, ensure_ascii=False))
    elif args.sysroot == "/":
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
    record = Record.load(Path(args.record), use="replay")
    choices = choices_from_mapping(record.data["choices"])
    facts = facts_here("/")
    plan = build_plan(facts, choices, _catalog())
    return _run_plan(plan, facts, None, args.yes, False)


def cmd_verify(args: argparse.Namespace) -> int:
    if args.sysroot != "/":
        raise BadInput(_("verify checks this machine: --sysroot is for detect, plan and export"))
    record = None
    if args.record:
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
        if args.bandwidth or args.fleet:
            raise BadInput(_("{flag} measures the links between instances: leave out "
                             "--here").format(flag="--fleet" if args.fleet else "--bandwidth"))
    else:
        # the hosts the launch script finds, in its order (the same library decides). None
        # only when no source names any: the checks here only, said in the report. A source
        # set but unreadable is bad input naming it, never "here only".
        hosts = discover(args.hosts, args.hostfile, os.environ)
        if hosts is not None and any(os.environ.get(v) for v in (
                "NODE_RANK", "PET_NODE_RANK", hosts.rank_var) if v):
            # a NODE_RANK (or Kubeflow's PET_NODE_RANK, or the platform's own) that is none
            # of the ranks is bad input now, not after the checks
            rank_of(hosts.names, os.environ, hosts.rank_var)
    if args.fleet:
        return _fleet(args, choices, hosts, jobs)
    if vocab.uses_ssh(choices.framework):
        more_names(os.environ)  # FORWARD_ENV refused here as the launch script refuses it
    facts, plan = _plan(args, choices)
    report = verify(plan, facts, hosts, max_workers=jobs, bandwidth=args.bandwidth)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
    if record is not None:
        try:
            keep_in_record(record, report)
        except OSError as exc:  # the checks ran and are printed: say what was not kept
            print(_("hpcwizard: could not keep the outcome in {path}: {error}").format(
                path=record.path, error=exc.strerror or exc), file=sys.stderr)
            return EXIT_FAILED
    return EXIT_OK if report.ok else EXIT_FAILED


def _fleet(args: argparse.Namespace, choices: Choices, hosts: Optional[Hosts], jobs: int) -> int:
    """verify --fleet: every instance's health, then the pair rounds, as text (a matrix) or
    JSON; a record gives the choices (user, port) and keeps verify's checks, not these."""
    if args.bandwidth:
        raise BadInput(_("--fleet is a check of its own: leave out --bandwidth"))
    if hosts is None or len(hosts.names) < 2:
        raise BadInput(_("--fleet measures between the job's instances: give at least two "
                         "with --hosts or --hostfile"))
    facts, plan = _plan(args, choices)
    verdict = check_fleet(plan, facts, hosts, max_workers=jobs)
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_fleet_check(verdict, color=sys.stdout.isatty()), end="")
    return EXIT_OK if verdict.ok else EXIT_FAILED


COMMANDS = {"plan": cmd_plan, "apply": cmd_apply, "export": cmd_export, "undo": cmd_undo,
            "replay": cmd_replay, "verify": cmd_verify}
