"""A real JupyterLab 4 on loopback and headless Chromium driven by selenium, for the system test
in the Jupyter terminal (test_system_jupyterlab.py) and bench/tui_start.py --jupyter. Not a
test module.

The terminal's text is read from xterm.js's own buffer (`term.buffer.active`) through the app
JupyterLab exposes with `expose_app_in_browser`: JupyterLab 4 draws the terminal on a canvas
(WebGL or 2D), so there is no `.xterm-rows` text in the DOM to read."""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Tuple

CHROMIUM = ("chromium", "chromium-browser")
CHROMEDRIVER = ("chromedriver",)
# set in JupyterLab's environment, so inherited by every terminal's shell and what runs there:
# the processes a run left behind are found by it, whatever session or group they made
MARKER = "HPCWIZARD_JUPYTER_TEST"


def missing_tools() -> List[str]:
    """What this machine lacks to run JupyterLab in Chromium ([] when nothing)."""
    missing = []
    if not any(shutil.which(n) for n in CHROMIUM):
        missing.append("chromium (apt: chromium)")
    if not any(shutil.which(n) for n in CHROMEDRIVER):
        missing.append("chromedriver (apt: chromium-driver)")
    for module, package in (("jupyterlab", "jupyterlab"), ("selenium", "selenium")):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{package} (pip: the test extra)")
    return missing


def wait_until(what: str, probe: Callable[[], object], timeout: float,
               shown: Callable[[], str] = lambda: "", every: float = 0.05) -> object:
    """Poll `probe` until it returns something true, and return that; fail after `timeout`
    seconds with `what` and `shown()` (what was on screen) in the message."""
    end = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout:g} s; the screen:\n{shown()}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _marked_pids(marker_value: str) -> List[int]:
    """The processes whose environment carries MARKER=marker_value."""
    wanted = f"{MARKER}={marker_value}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours to read
    return pids


@dataclass
class JupyterLab:
    """`jupyter lab` on 127.0.0.1 with a token, serving `root` (also the terminals' working
    directory), with its config, runtime, settings and workspaces inside `root` so that
    nothing of the user's or of an earlier run is read or left."""

    root: Path
    port: int
    token: str
    proc: subprocess.Popen
    log: Path

    @classmethod
    def start(cls, root: Path, env: dict, timeout: float = 180.0) -> "JupyterLab":
        state = root / ".jupyter-state"
        port, token = free_port(), secrets.token_hex(24)
        env = dict(env, JUPYTER_CONFIG_DIR=str(state / "config"),
                   JUPYTER_RUNTIME_DIR=str(state / "runtime"),
                   JUPYTERLAB_SETTINGS_DIR=str(state / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"),
                   **{MARKER: str(root)})
        log = root.parent / f"{root.name}-jupyterlab.log"
        with open(log, "wb") as out:
            # the launcher asks for the terminal in the file browser's folder, "" at the top,
            # which jupyter-server-terminals resolves against its own working directory
            proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
                 f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
                 f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
                 "--allow-root"],
                cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        lab = cls(root, port, token, proc, log)
        try:
            wait_until("JupyterLab answering on its port", lab._answers, timeout,
                       shown=lab.log_tail, every=0.2)
        except BaseException:
            lab.stop()
            raise
        return lab

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/lab?token={self.token}"

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited {self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/api/status?token={self.token}", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """JupyterLab's process group, then whatever its terminals started: terminado gives
        each terminal's shell a session of its own, outside JupyterLab's group."""
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        for pid in _marked_pids(str(self.root)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.log.unlink()
        except OSError:
            pass


@dataclass
class Browser:
    """Headless Chromium on JupyterLab's page, through chromedriver in a process group of its
    own (Chromium's renderers are its children), so that stop() ends them all."""

    driver: object
    driver_pid: int = 0
    terminals: List[str] = field(default_factory=list)  # their tabs' widget ids

    @classmethod
    def start(cls, url: str, size: Tuple[int, int], timeout: float = 180.0) -> "Browser":
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = next(shutil.which(n) for n in CHROMIUM if shutil.which(n))
        # --no-sandbox: the test runs as root, where Chromium's sandbox refuses to start
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--no-first-run", "--disable-extensions",
                    f"--window-size={size[0]},{size[1]}"):
            options.add_argument(arg)
        driver_path = next(shutil.which(n) for n in CHROMEDRIVER if shutil.which(n))
        service = Service(driver_path, popen_kw={"start_new_session": True})
        driver = webdriver.Chrome(service=service, options=options)
        browser = cls(driver, service.process.pid)
        try:
            driver.set_page_load_timeout(timeout)
            driver.get(url)
            browser.wait_js("JupyterLab's launcher", "return !!document.querySelector("
                            "'.jp-LauncherCard[title=\"Start a new terminal session\"]')"
                            " && !!window.jupyterapp", timeout)
        except BaseException:
            browser.stop()
            raise
        return browser

    def js(self, script: str, *args: object) -> object:
        return self.driver.execute_script(script, *args)

    def wait_js(self, what: str, script: str, timeout: float) -> object:
        return wait_until(what, lambda: self.js(script), timeout, every=0.1)

    def open_terminal(self, timeout: float = 60.0) -> "Terminal":
        """A new terminal from the launcher's Terminal tile (a new launcher tab first if the
        current tab is not one)."""
        from selenium.webdriver.common.by import By

        if not self.js("return !!document.querySelector('.lm-Widget.jp-Launcher:not(.lm-mod-hidden)"
                       " .jp-LauncherCard[title=\"Start a new terminal session\"]')"):
            self.js("window.jupyterapp.commands.execute('launcher:create'); return null;")
        before = set(self.terminals)
        tile = wait_until("the launcher's Terminal tile", lambda: [
            e for e in self.driver.find_elements(
                By.CSS_SELECTOR, '.jp-LauncherCard[title="Start a new terminal session"]')
            if e.is_displayed()], timeout)[0]
        tile.click()
        # terminado reuses a closed terminal's name: the tab's widget id is what is new
        widget = wait_until("a new terminal in the main area", lambda: self.js(
            "const w = window.jupyterapp.shell.currentWidget;"
            "const c = w && w.content;"
            "return c && c._term && c.session && c._isReady && !arguments[0].includes(w.id)"
            " ? w.id : null;", sorted(before)), timeout)
        self.terminals.append(str(widget))
        return Terminal(self, str(widget))

    def set_size(self, width: int, height: int) -> None:
        self.driver.set_window_size(width, height)

    def stop(self) -> None:
        try:
            self.driver.quit()
        except Exception:  # noqa: BLE001 - a browser that died is what stop() cleans up after
            pass
        if self.driver_pid:
            try:
                os.killpg(self.driver_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class Terminal:
    """One JupyterLab terminal: type into it and read what xterm.js shows."""

    browser: Browser
    widget: str  # the id of its tab in JupyterLab's main area (also its DOM node's)
    work: Optional[Path] = None  # where the program typed into it runs, if the caller says
    first_paint: float = 0.0  # enter_and_time's last answer

    def _term(self, expression: str, *args: object) -> object:
        """Run `expression` with `t` the xterm.js Terminal, `args` as arguments[1...]."""
        return self.browser.js(
            "const w = window.jupyterapp.shell.currentWidget;"
            "if (!w || w.id !== arguments[0])"
            "  throw new Error('terminal ' + arguments[0] + ' is not the current tab');"
            "const t = w.content._term;" + expression, self.widget, *args)

    def lines(self) -> List[str]:
        """The rows on screen now, each padded to the terminal's width."""
        return list(self._term(
            "const b = t.buffer.active; const out = [];"
            "for (let i = 0; i < t.rows; i++) {"
            "  const line = b.getLine(b.viewportY + i);"
            "  out.push(line ? line.translateToString(false, 0, t.cols) : '');"
            "} return out;"))

    def style_of(self, row_with: str, word: str) -> Optional[Tuple[int, int, bool]]:
        """(foreground, background, bold) of the first cell of `word` on the first row that
        has `row_with`, or None when no row has both; where the focus or a choice is shows
        only in these (rows of narrow characters only: a wide one shifts the columns)."""
        found = self._term(
            "const b = t.buffer.active;"
            "for (let i = 0; i < t.rows; i++) {"
            "  const line = b.getLine(b.viewportY + i); if (!line) continue;"
            "  const text = line.translateToString(false, 0, t.cols);"
            "  const x = text.indexOf(arguments[2]);"
            "  if (!text.includes(arguments[1]) || x < 0) continue;"
            "  const c = line.getCell(x);"
            "  return [c.getFgColor(), c.getBgColor(), !!c.isBold()];"
            "} return null;", row_with, word)
        return None if found is None else (int(found[0]), int(found[1]), bool(found[2]))

    def screen(self) -> str:
        return "\n".join(line.rstrip() for line in self.lines())

    def buffer_type(self) -> str:
        """'normal' (the shell's screen) or 'alternate' (a full-screen program's)."""
        return str(self._term("return t.buffer.active.type;"))

    def size(self) -> Tuple[int, int]:
        cols, rows = self._term("return [t.cols, t.rows];")
        return int(cols), int(rows)

    def wait_for(self, text: str, timeout: float = 60.0, wrapped: bool = False) -> str:
        """The screen once `text` is on it; `wrapped`: also when it wraps across rows (as a
        long command line does)."""
        def shown() -> str:
            screen = "".join(self.lines()) if wrapped else self.screen()
            return screen if text in screen else ""
        return str(wait_until(f"{text!r} on the terminal", shown, timeout, shown=self.screen))

    def wait_until(self, what: str, probe: Callable[[], object], timeout: float = 60.0) -> object:
        return wait_until(what, probe, timeout, shown=self.screen)

    def _textarea(self) -> object:
        from selenium.webdriver.common.by import By

        return self.browser.driver.find_element(
            By.CSS_SELECTOR, f"[id='{self.widget}'] .xterm-helper-textarea")

    def type(self, *keys: str) -> None:
        """Keys as a person types them into the terminal (selenium Keys for the special ones)."""
        self._textarea().send_keys(*keys)

    def press(self, *names: str) -> None:
        """Special keys by selenium's name for them: "ENTER", "TAB", "ARROW_RIGHT", "F2"."""
        from selenium.webdriver.common.keys import Keys

        self.type(*(getattr(Keys, name) for name in names))

    def ctrl(self, letter: str) -> None:
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        self._textarea()  # fails here if the terminal is gone
        (ActionChains(self.browser.driver).key_down(Keys.CONTROL).send_keys(letter)
         .key_up(Keys.CONTROL).perform())

    def close(self) -> None:
        """Shut the terminal's session down (its shell and what runs there get SIGHUP) and
        close its tab."""
        self.browser.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const w = Array.from(window.jupyterapp.shell.widgets('main')).find("
            "  (x) => x.id === arguments[0]);"
            "if (!w) { done(false); return; }"
            "w.content.session.shutdown().catch(() => null)"
            "  .then(() => { w.dispose(); done(true); });",
            self.widget)

    def enter_and_time(self, first: str, *either: str,
                       timeout: float = 60.0) -> Tuple[float, Optional[float]]:
        """Press Enter; return the seconds, by the page's clock, from the key reaching
        xterm.js to `first` being in its buffer (checked at each write xterm.js parses, a
        frame before it is on the canvas), and to the first of `either` (None without them)."""
        from selenium.webdriver.common.keys import Keys

        texts = [first, *either]
        self._term(
            "const texts = arguments[1]; window.__hpcw = {sent: null, seen: {}};"
            "const shown = () => { const b = t.buffer.active; const rows = [];"
            "  for (let i = 0; i < t.rows; i++) {"
            "    const line = b.getLine(b.viewportY + i);"
            "    rows.push(line ? line.translateToString(true) : ''); }"
            "  return rows.join('\\n'); };"
            "const sub = t.onWriteParsed(() => {"
            "  if (window.__hpcw.sent === null) return;"
            "  const now = performance.now(); const screen = shown();"
            "  for (const text of texts)"
            "    if (!(text in window.__hpcw.seen) && screen.includes(text))"
            "      window.__hpcw.seen[text] = now;"
            "  if (Object.keys(window.__hpcw.seen).length === texts.length) sub.dispose(); });"
            "t.textarea.addEventListener('keydown', (e) => {"
            "  if (e.key === 'Enter' && window.__hpcw.sent === null)"
            "    window.__hpcw.sent = performance.now(); }, {capture: true, once: true});"
            "return true;", texts)
        self.type(Keys.ENTER)

        def times() -> Optional[Tuple[float, Optional[float]]]:
            got = self.browser.js("return window.__hpcw;")
            if not got or got["sent"] is None or first not in got["seen"]:
                return None
            later = [got["seen"][t] for t in either if t in got["seen"]]
            if either and not later:
                return None
            since = lambda at: (float(at) - float(got["sent"])) / 1000.0  # noqa: E731
            return since(got["seen"][first]), since(min(later)) if later else None

        then = f" then one of {', '.join(map(repr, either))}" if either else ""
        return self.wait_until(f"{first!r}{then} after Enter", times, timeout)
