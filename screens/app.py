"""The wizard: System → Choose → Recommend → Review → Run → Done.

The App holds the state (facts, catalog, plan, record) and the workers: detection (while the
System screen is already up) and apply/undo. Workers post messages (messages.py); the App
hands them to the screen. The screens show Facts, collect Choices, show the Plan and draw
apply events: every decision is the core's (choices, plan, apply, export).

Testing and demo aid: HPCWIZARD_FACTS=path/to/facts.json makes run_tui() read the facts
from that file (the JSON of `hpcwizard detect --json`) instead of detecting this machine.
Whatever runs still runs on this machine: use it to show or test the screens, not to apply.
"""
from __future__ import annotations

import json
import os
import threading
import time
from importlib import resources as _resources
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Callable, ContextManager, Dict, List, MutableMapping,
                    Optional, Union)

from textual import work
from textual.app import App
from textual.binding import Binding

from hpcwizard.exit_codes import EXIT_OK
from hpcwizard.facts import Facts
from hpcwizard.i18n import _, get_language, set_language
from hpcwizard.inputs import SMALL_FILE_LIMIT, read_text
from hpcwizard.validate import BadInput

from .input_bytes import read_input_leniently
from .messages import DetectFailed, FactsReady, RunEnded, RunEvents, VerifyChecked, VerifyEnded
from .system import SystemScreen
from .widgets import ConfirmScreen, KeysScreen, WizardScreen, keys_of, translate_bindings

if TYPE_CHECKING:
    from hpcwizard.apply import Runner
    from hpcwizard.catalog import Catalog
    from hpcwizard.hosts import Hosts
    from hpcwizard.plan import Plan
    from hpcwizard.record import Record
    from hpcwizard.session import Session
    from hpcwizard.verify import System

    from .done import DoneScreen
    from .early_frame import EarlyFrame
    from .run import RunScreen

FLUSH_SECONDS = 0.05  # output lines reach the UI at most this late, in one message
FLUSH_ITEMS = 500  # or as soon as this many events are waiting


class BatchingSink:
    """The apply sink for the TUI: events wait in a list and leave as one RunEvents message
    every FLUSH_SECONDS (or FLUSH_ITEMS), in order. Never one message per line."""

    def __init__(self, post: Callable[[RunEvents], object], interval: float = FLUSH_SECONDS,
                 max_items: int = FLUSH_ITEMS) -> None:
        self._post = post
        self._interval = interval
        self._max = max_items
        self._items: List[object] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hpcwizard-ui-flush",
                                        daemon=True)

    def __enter__(self) -> "BatchingSink":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.flush()

    def __call__(self, event: object) -> None:
        with self._lock:
            self._items.append(event)
            full = len(self._items) >= self._max
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:  # posting under the lock keeps batches in order
            if self._items:
                items, self._items = self._items, []
                self._post(RunEvents(items))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()


class StoppableRunner:
    """Wraps the Runner so that Ctrl+C in the TUI (a key, not a signal: the terminal is in raw
    mode) stops the running step the way Ctrl+C stops `hpcwizard apply`: the child gets
    SIGINT (SIGTERM after a grace period) and apply_record sees KeyboardInterrupt."""

    GRACE = 5.0

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.stopping = threading.Event()

    def via_sudo(self, as_: str) -> bool:
        return self.inner.via_sudo(as_)

    def check(self, as_: str, text: str) -> bool:
        if self.stopping.is_set():
            raise KeyboardInterrupt
        return self.inner.check(as_, text)

    def run(self, as_: str, text: str, on_line: Callable[[str], None]) -> int:
        if self.stopping.is_set():
            raise KeyboardInterrupt
        code = self.inner.run(as_, text, on_line)
        if self.stopping.is_set():
            raise KeyboardInterrupt
        return code

    def interrupt(self) -> None:
        # kept lazy: Textual's first frame does not wait for apply (and what it imports)
        from hpcwizard.apply import interrupt_step

        self.stopping.set()
        interrupt_step(self.inner, self.GRACE)

    def reset(self) -> None:
        self.stopping.clear()


class WizardApp(App[int]):
    """hpcwizard's wizard. Everything it touches can be injected (tests, demos):

    facts      Facts to show instead of detecting (no detection worker then)
    detect     a function returning Facts, run in the detection worker (default detect())
    runner     a Runner, or a function plan -> Runner (default ShellRunner for the job user)
    catalog    a Catalog (default load_catalog())
    state_dir  where records go (default hpcwizard.record.state_dir())
    clock      monotonic seconds for the elapsed time (tests freeze it)
    sudo       function asking for the sudo password once, -> bool (default: ask_sudo_password)
    sudo_bash  function -> whether sudo then lets bash run as root (default: sudo -n -l bash)
    lock       lock(machine=, directory=) -> the context manager held during apply/undo
               (default hpcwizard.lock.run_lock, as the command line)
    record_name  the record's file name (default: time stamp, framework, network)
    verify_system  the hpcwizard.verify.System the Done screen's checks run through
               (default: a new System per verification, running commands on this machine)
    """

    # The stylesheet is read through importlib.resources, not CSS_PATH (which textual open()s
    # as a file): from dist/hpcwizard.pyz there is no file to open.
    CSS = _resources.files(__name__.rpartition(".")[0]).joinpath("wizard.tcss").read_text("utf-8")
    TITLE = "hpcwizard"
    ENABLE_COMMAND_PALETTE = False
    # Screen classes wizard.tcss uses to fit a small terminal (JupyterLab's can be 60x12)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (72, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (20, "-tall")]
    BINDINGS = [
        Binding("question_mark,f1", "keys", "Keys"),
        # F2 switches the language; its label names the other language in its own words
        Binding("f2", "toggle_language", "中文"),
        Binding("ctrl+c", "interrupt", "Stop the run, or quit", show=False, priority=True),
        Binding("ctrl+q", "quit_app", "Quit", show=False, priority=True),
    ]

    def __init__(self, *, facts: Optional[Facts] = None,
                 detect: Optional[Callable[[], Facts]] = None,
                 runner: Union[Runner, Callable[[Plan], Runner], None] = None,
                 catalog: Optional[Catalog] = None, state_dir: Optional[Path] = None,
                 clock: Callable[[], float] = time.monotonic,
                 sudo: Optional[Callable[[], bool]] = None,
                 sudo_bash: Optional[Callable[[], bool]] = None,
                 lock: Optional[Callable[..., ContextManager[Any]]] = None,
                 record_name: str = "", verify_system: Optional[System] = None) -> None:
        super().__init__()
        self.facts = facts
        self.catalog = catalog
        self._detect = detect
        self._runner = runner
        self._state_dir = state_dir
        self.clock = clock
        self._sudo = sudo or self._ask_sudo
        self._sudo_bash = sudo_bash
        self._lock = lock
        self._record_name = record_name
        self.plan: Optional[Plan] = None
        self.session: Optional[Session] = None  # the run's, once started
        self.run_status: Optional[str] = None
        self.running = False
        self.system_screen: Optional[SystemScreen] = None
        self.run_screen: Optional[RunScreen] = None
        self.stoppable: Optional[StoppableRunner] = None
        self._verify_system = verify_system
        self.verifying: Optional[System] = None  # the verification in flight
        self.verify_stopped = False  # it was stopped (quit): what it found is not kept
        self.verify_ok: Optional[bool] = None  # the last verification's outcome
        self.verify_started = 0.0
        self.done_screen: Optional[DoneScreen] = None

    # --- start and detection ----------------------------------------------------------------

    def on_mount(self) -> None:
        translate_bindings(self)
        self.system_screen = SystemScreen()
        self.push_screen(self.system_screen)
        # Neither detection nor the recipes hold up the first paint: both load in a worker.
        if self.facts is None or self.catalog is None:
            self.detect_worker()

    @work(thread=True, exit_on_error=False, group="detect")
    def detect_worker(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                # the recipes are read while detection waits on its probes' programs
                catalog = pool.submit(self._load_catalog) if self.catalog is None else None
                facts = self.facts
                if facts is None:
                    if self._detect is None:
                        # kept lazy: Textual's first frame does not wait for detect
                        from hpcwizard.detect import detect

                        facts = detect()
                    else:
                        facts = self._detect()
                loaded = catalog.result() if catalog is not None else self.catalog
        except Exception as exc:  # noqa: BLE001 - shown on the System screen
            self.post_message(DetectFailed(f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(FactsReady(facts, loaded))

    @staticmethod
    def _load_catalog() -> Catalog:
        # kept lazy: Textual's first frame does not wait for catalog (and what it imports)
        from hpcwizard.catalog import load_catalog

        return load_catalog()

    def on_facts_ready(self, message: FactsReady) -> None:
        self.facts = message.facts
        self.catalog = message.catalog
        if self.system_screen is not None and self.system_screen.is_mounted:
            self.system_screen.show_facts(message.facts)

    def on_detect_failed(self, message: DetectFailed) -> None:
        if self.system_screen is not None:
            self.system_screen.show_error(message.error)

    # --- the flow (each step asks the core) -------------------------------------------------

    def goto_choose(self) -> None:
        # kept lazy: a screen loads when first shown (Textual's first frame needs one)
        from .choose import ChooseScreen

        self.push_screen(ChooseScreen())

    def _build(self, **raw: Any) -> Plan:
        """make_choices and build_plan: BadInput goes back to the screen that asked."""
        # kept lazy: Textual's first frame does not wait for choices (and what it imports)
        from hpcwizard.choices import make_choices
        from hpcwizard.plan import build_plan

        choices = make_choices(**raw)
        if self.catalog is None:  # asked for before the worker delivered it
            self.catalog = self._load_catalog()
        return build_plan(self.facts, choices, self.catalog)

    def choose(self, raw: dict) -> None:
        # kept lazy: a screen loads when first shown (Textual's first frame needs one)
        from .recommend import RecommendScreen

        self.plan = self._build(**raw, mode="auto")
        self.push_screen(RecommendScreen(self.plan))

    def take_preset(self) -> None:
        # kept lazy: a screen loads when first shown (Textual's first frame needs one)
        from .done import DoneScreen

        self.plan = self._build(**dict(self.plan.choices.to_dict(), mode="preset"))
        self.push_screen(DoneScreen(self.plan))

    def configure_here(self) -> None:
        # kept lazy: a screen loads when first shown (Textual's first frame needs one)
        from .review import ReviewScreen

        mode = "manual" if self.plan.recommendation.path == "preset" else "auto"
        self.plan = self._build(**dict(self.plan.choices.to_dict(), mode=mode))
        self.push_screen(ReviewScreen(self.plan))

    def runner_for(self, plan: Plan) -> Runner:
        if self._runner is None:
            # kept lazy: Textual's first frame does not wait for apply (and what it imports)
            from hpcwizard.apply import ShellRunner

            return ShellRunner(plan.target.user)
        if hasattr(self._runner, "check"):
            return self._runner
        return self._runner(plan)

    def _ask_sudo(self) -> bool:
        # kept lazy: Textual's first frame does not wait for session (and what it imports)
        from hpcwizard.session import ask_sudo_password

        with self.suspend():
            print(_("hpcwizard: the system steps need sudo; it asks for your password once, "
                    "now."))
            ok = ask_sudo_password()
        return ok

    @property
    def record(self) -> Optional[Record]:
        return self.session.record if self.session is not None else None

    def start_run(self, plan: Plan) -> None:
        """The session's order, as on the command line: its checks and sudo once (before the
        run, never inside it), the lock, a new record, then the worker."""
        # kept lazy: Textual's first frame does not wait for session (and what it imports)
        from hpcwizard.session import Session, sudo_once

        # kept lazy: a screen loads when first shown (Textual's first frame needs one)
        from .run import RunScreen

        if self.running:
            return
        self.plan = plan
        self.stoppable = StoppableRunner(self.runner_for(plan))
        session = Session(plan, self.facts, self.stoppable, state_dir=self._state_dir,
                          record_name=self._record_name, lock=self._lock)
        # A new record under a free name (two runs in the same second do not collide), its
        # first save creating the file; Retry, Skip and Undo go on with this same session.
        try:
            session.preflight("apply")
            sudo_once(session.goes_through_sudo("apply"), self.facts.user.sudo, self._sudo,
                      **({"allows_bash": self._sudo_bash} if self._sudo_bash else {}))
            session.begin()
        except BadInput as exc:  # refused before anything ran: another run holds the lock...
            self.notify(str(exc), severity="error", timeout=10)
            return
        except OSError as exc:
            self.notify(_("cannot write the record: {error}; nothing was run.").format(
                error=f"{exc.filename}: {exc.strerror}" if exc.filename else exc),
                severity="error", timeout=10)
            return
        self.session = session
        self.run_screen = RunScreen(plan, session.record)
        self.push_screen(self.run_screen)  # its on_mount calls start_worker("apply")

    def start_worker(self, action: str) -> None:
        """Start the App's apply (or retry, skip, undo) worker; the Run screen draws its
        events."""
        assert self.stoppable is not None and self.session is not None
        self.stoppable.reset()
        self.running = True
        if self.run_screen is not None:
            self.run_screen.start("undo" if action == "undo" else "apply")
        self.apply_worker(action, self.session)

    @work(thread=True, exit_on_error=False, group="apply")
    def apply_worker(self, action: str, session: Session) -> None:
        status, error = "error", ""
        try:
            with BatchingSink(self.post_message) as sink:
                status = session.run(action, sink)
        except Exception as exc:  # noqa: BLE001 - a lock held elsewhere, a broken record
            error = str(exc) if type(exc).__name__ == "BadInput" else f"{type(exc).__name__}: {exc}"
        self.post_message(RunEnded("undo" if action == "undo" else "apply", status, error))

    def on_run_events(self, message: RunEvents) -> None:
        if self.run_screen is not None:
            self.run_screen.apply_events(message.events)

    def on_run_ended(self, message: RunEnded) -> None:
        self.running = False
        self.run_status = message.status
        if self.run_screen is not None:
            self.run_screen.ended_with(message.action, message.status, message.error)

    def resume_run(self, how: str) -> None:
        """After a failure: retry the failed step, skip it, or undo what was done."""
        if self.running or self.session is None:
            return
        self.start_worker(how)

    def finish_run(self, quit: bool) -> None:
        # kept lazy: a screen loads when first shown (Textual's first frame needs one)
        from .done import DoneScreen

        if quit:
            self.exit_with_status()
            return
        self.done_screen = DoneScreen(self.plan, self.record, self.run_status or "")
        self.switch_screen(self.done_screen)

    # --- verification (the Done screen) ----------------------------------------------------------

    def start_verify(self, hosts: Optional[Hosts]) -> bool:
        """hpcwizard.verify.verify for the plan, here and across hosts (None: here only), in
        a worker; the checks reach the Done screen as they finish. False if one is running."""
        if self.verifying is not None or self.plan is None:
            return False
        # kept lazy: Textual's first frame does not wait for verify (and what it imports)
        from hpcwizard.verify import System

        self.verifying = self._verify_system or System()
        self.verify_started = self.clock()
        self.verify_worker(self.plan, self.facts, hosts, self.verifying)
        return True

    @work(thread=True, exit_on_error=False, group="verify")
    def verify_worker(self, plan: Plan, facts: Facts, hosts: Optional[Hosts],
                      system: System) -> None:
        # kept lazy: Textual's first frame does not wait for verify (and what it imports)
        from hpcwizard.verify import verify

        report, error = None, ""
        try:
            report = verify(plan, facts, hosts, system=system,
                            on_check=lambda check: self.post_message(VerifyChecked(check)))
        except Exception as exc:  # noqa: BLE001 - shown on the Done screen
            error = f"{type(exc).__name__}: {exc}"
        self.post_message(VerifyEnded(report, error))

    def on_verify_checked(self, message: VerifyChecked) -> None:
        if self.done_screen is not None:
            self.done_screen.verify_checked(message.check)

    def on_verify_ended(self, message: VerifyEnded) -> None:
        stopped = self.verify_stopped
        self.verifying, self.verify_stopped = None, False
        if stopped:  # killed on the way out: its failures are ours, not the machine's
            return
        seconds = self.clock() - self.verify_started
        self.verify_ok = message.report is not None and message.report.ok
        if message.report is not None and self.record is not None:
            # kept lazy: Textual's first frame does not wait for report_verify (and what it imports)
            from hpcwizard.report_verify import keep_in_record

            try:
                keep_in_record(self.record, message.report)
            except OSError as exc:
                self.notify(_("could not keep the verification in the record {path}: {error}")
                            .format(path=self.record.path, error=exc), severity="error",
                            timeout=10)
        if self.done_screen is not None:
            self.done_screen.verify_ended(message.report, seconds, message.error)

    def exit_with_status(self) -> None:
        if self.verifying is not None:
            self.verify_stopped = True
            self.verifying.stop()  # ssh and mpirun would hold the exit until their time-outs
        if self.session is not None:
            self.session.release()
        code = EXIT_OK if self.session is None else self.session.exit_code(self.verify_ok)
        self.exit(code, return_code=code)

    # --- keys everywhere ----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple) -> Optional[bool]:
        """A dialog neither lists keys nor switches language (its text was given to it in
        one): its footer does not offer them."""
        from textual.screen import ModalScreen

        if action in ("keys", "toggle_language") and isinstance(self.screen, ModalScreen):
            return False
        return True

    def action_keys(self) -> None:
        from textual.screen import ModalScreen

        if isinstance(self.screen, ModalScreen):
            return
        title = self.screen.sub_title or self.screen.__class__.__name__
        self.push_screen(KeysScreen(title, keys_of(self.screen)))

    def action_interrupt(self) -> None:
        """Ctrl+C: during a run, ask before stopping the running step; else ask to quit."""
        if isinstance(self.screen, ConfirmScreen):
            return
        if self.running:
            def answer(stop: Optional[bool]) -> None:
                if stop and self.running and self.stoppable is not None:
                    self.stoppable.interrupt()
                    self.notify(_("Stopping the running step…"))

            self.push_screen(ConfirmScreen(
                _("A step is running. Stop it? What it did so far stays; Undo can take it back."),
                yes=_("Stop"), no=_("Keep running")), answer)
        else:
            self.action_quit_app()

    def action_quit_app(self) -> None:
        if isinstance(self.screen, ConfirmScreen):
            return
        if self.running:
            self.action_interrupt()
            return

        def answer(yes: Optional[bool]) -> None:
            if yes:
                self.exit_with_status()

        self.push_screen(ConfirmScreen(_("Quit hpcwizard?"), yes=_("Quit"), no=_("Stay")), answer)

    async def action_toggle_language(self) -> None:
        """F2: English <-> 中文. Every plan a screen shows is built again (its reasons are
        sentences in the language: Recommend's plan is not the one Review or the preset
        path built from it), then every screen on the stack is drawn again, each keeping what
        the user typed and chose. Commands, records and files do not change."""
        from textual.screen import ModalScreen

        if isinstance(self.screen, ModalScreen):
            return
        set_language("en" if get_language() == "zh" else "zh")
        translate_bindings(self)
        again = self._plans_in_this_language()
        if self.plan is not None:
            self.plan = again(self.plan)
        for screen in self.screen_stack:
            if getattr(screen, "plan", None) is not None:
                screen.plan = again(screen.plan)  # type: ignore[attr-defined]
        for screen in list(self.screen_stack):
            if isinstance(screen, WizardScreen):
                await screen.refresh_language()
        self.refresh_bindings()

    def _plans_in_this_language(self) -> Callable[[Plan], Plan]:
        """plan -> the same choices built again; a plan shared by screens stays shared."""
        # kept lazy: Textual's first frame does not wait for plan (and what it imports)
        from hpcwizard.plan import build_plan
        built: Dict[int, Plan] = {}

        def again(plan: Plan) -> Plan:
            if id(plan) not in built:
                try:
                    built[id(plan)] = build_plan(self.facts, plan.choices, self.catalog)
                except BadInput:
                    built[id(plan)] = plan
            return built[id(plan)]

        return again


def load_facts_file(path: str) -> Facts:
    try:
        # a regular file of at most SMALL_FILE_LIMIT: a FIFO or /dev/zero is refused at once
        return Facts.from_dict(json.loads(read_text(path, "HPCWIZARD_FACTS", SMALL_FILE_LIMIT)))
    except BadInput:
        raise
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise BadInput(_("HPCWIZARD_FACTS={path}: cannot read facts from it: {error}").format(
            path=path, error=exc)) from None


# Set by some terminals (JupyterLab's exports both) to the size at start: Textual asks
# shutil.get_terminal_size, which reads them before the terminal itself, so with them set
# every resize reports the old size (shrunk: a blank screen; grown: the old layout).
FIXED_SIZE_VARS = ("COLUMNS", "LINES")


def forget_fixed_size(environ: MutableMapping[str, str] = os.environ) -> None:
    """The terminal's live size from here on: what the window is now, at every resize."""
    for var in FIXED_SIZE_VARS:
        environ.pop(var, None)


def run_tui(frame: Optional[EarlyFrame] = None) -> int:
    """Start the wizard on this terminal; returns the exit status: 0 done (and verified, if
    verified) or nothing run; 1 a step failed or was skipped, or the verification failed;
    130 interrupted. frame: the EarlyFrame on the terminal, handed over to Textual here."""
    facts_file = os.environ.get("HPCWIZARD_FACTS", "")
    facts = load_facts_file(facts_file) if facts_file else None
    forget_fixed_size()
    read_input_leniently()
    app = WizardApp(facts=facts)
    if frame is not None:
        frame.hand_over()
    result = app.run()
    if isinstance(result, int):
        return result
    return app.return_code or 0
