"""Which package mirrors are configured here, and does any of them answer?

The sources are read from files under the sysroot (so a mounted image shows its mirrors too):
apt's /etc/apt/sources.list, sources.list.d/*.list and deb822 *.sources; dnf/yum's
/etc/yum.repos.d/*.repo (baseurl, mirrorlist, metalink); zypper's /etc/zypp/repos.d/*.repo;
apk's /etc/apk/repositories. Disabled entries and source-package lines are left out.

Only on this machine with commands allowed is reachability tried: one TCP connection to each
distinct host:port (80 for http, 443 for https, or the URL's port), all at once, each with a
short timeout, the whole probe bounded. When an http(s) proxy is configured (the
http_proxy/https_proxy variables, apt's Acquire::http(s)::Proxy, dnf/yum's proxy=) the
package manager talks to the proxy, so the proxy is what is tried. A TCP connection is
the cheap half of "a mirror works": it does not prove the repository is there, but no
connection means nothing can be installed.
"""
from __future__ import annotations

import re
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from .base import Context, Found

CONNECT_TIMEOUT = 2.0  # per connection; a mirror that needs longer is no use to apt either
SLACK = 0.5  # on top of it, for name resolution (getaddrinfo has no timeout of its own)
MAX_HOSTS = 16  # connections tried at most: a machine with more sources is still judged
MAX_FILES = 64  # files read per directory
DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21}
LOCAL_SCHEMES = ("file", "copy", "cdrom")
# A host name or address as it may appear in text we print: nothing else gets through.
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|[0-9A-Fa-f:.]{2,45})$")
_PATH = re.compile(r"^/[A-Za-z0-9._+/-]{0,255}$")  # a local repository's path, to print
_APT_PROXY = re.compile(r'^\s*Acquire::(https?)::Proxy\s+"([^"]*)"\s*;', re.I | re.M)

Endpoint = Tuple[str, int]


# --- reading the sources ---------------------------------------------------------------------

def urls_from_list(text: str) -> List[str]:
    """apt's one-line format: `deb [options] URI suite [components]`; deb-src left out."""
    urls = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        words = line.split()
        if not words or words[0] != "deb":
            continue
        rest = words[1:]
        if rest and rest[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if rest:
            urls.append(rest[0])
    return urls


def _stanzas(text: str) -> Iterable[Dict[str, str]]:
    """deb822 paragraphs: Field: value, continuation lines indented, '#' lines comments."""
    fields: Dict[str, str] = {}
    key = ""
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, ""
        elif line[0] in " \t" and key:
            fields[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()


def urls_from_deb822(text: str) -> List[str]:
    """apt's deb822 *.sources: Types, URIs (several), Enabled."""
    urls = []
    for s in _stanzas(text):
        if "deb" not in s.get("types", "").split():
            continue
        if s.get("enabled", "yes").strip().lower() in ("no", "false", "0"):
            continue
        urls.extend(s.get("uris", "").split())
    return urls


def _ini(text: str) -> Dict[str, Dict[str, str]]:
    """yum/dnf/zypper .repo files: [section] key=value, values continued on indented lines."""
    sections: Dict[str, Dict[str, str]] = {}
    current: Optional[Dict[str, str]] = None
    key = ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        if line[0] in " \t" and current is not None and key:
            current[key] += " " + line.strip()
        elif line.startswith("["):
            current = sections.setdefault(line.strip().strip("[]").strip(), {})
            key = ""
        elif "=" in line and current is not None:
            key, _, value = line.partition("=")
            key = key.strip().lower()
            current[key] = value.strip()
    return sections


def repos_from_ini(text: str) -> List[Tuple[List[str], Optional[str]]]:
    """Each enabled repository's URLs (baseurl entries, mirrorlist, metalink) and its own
    proxy= (None when it sets none; "" when it turns the proxy off)."""
    repos = []
    for name, kv in _ini(text).items():
        if name.lower() == "main" or kv.get("enabled", "1").strip().lower() in ("0", "no", "false"):
            continue
        urls: List[str] = []
        for k in ("baseurl", "mirrorlist", "metalink"):
            urls.extend(u for u in re.split(r"[\s,]+", kv.get(k, "")) if u)
        if urls:
            proxy = kv.get("proxy")
            repos.append((urls, None if proxy is None else _no_proxy_word(proxy)))
    return repos


def urls_from_apk(text: str) -> List[str]:
    """/etc/apk/repositories: a URL (or a local path) a line, maybe tagged `@edge URL`."""
    urls = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words and words[0].startswith("@"):
            words = words[1:]
        if words:
            urls.append(words[0] if "://" in words[0] else "file:" + words[0])
    return urls


def _no_proxy_word(value: str) -> str:
    value = value.strip().strip('"')
    return "" if value.lower() in ("", "_none_", "none", "direct", "false") else value


# --- proxies -----------------------------------------------------------------------------------

def apt_proxies(text: str) -> Dict[str, str]:
    """Acquire::http::Proxy / Acquire::https::Proxy from apt.conf text (the one-line form)."""
    found: Dict[str, str] = {}
    for scheme, value in _APT_PROXY.findall(text):
        found[scheme.lower()] = _no_proxy_word(value)
    return found


def env_proxy(scheme: str, host: str, env: Mapping[str, str]) -> str:
    """The proxy the environment gives a scheme ("" for none), unless no_proxy exempts host."""
    proxy = env.get(f"{scheme}_proxy") or env.get(f"{scheme.upper()}_PROXY") or ""
    if not proxy:
        return ""
    for entry in (env.get("no_proxy") or env.get("NO_PROXY") or "").split(","):
        entry = entry.strip().lstrip(".").lower()
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return ""
    return proxy


# --- endpoints ---------------------------------------------------------------------------------

def endpoint(url: str, default_scheme: str = "http") -> Optional[Endpoint]:
    """(host, port) for a network URL; None for a local one, a variable in the host, a scheme
    nothing here speaks, or text that is not a host name."""
    if "://" not in url:
        if ":/" in url:  # file:/srv/repo, cdrom:[...]/: a scheme and a path, no host
            return None
        url = f"{default_scheme}://{url}"  # a proxy written as host:port
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower().rsplit("+", 1)[-1]  # mirror+http, tor+https
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:  # a port that is not a number
        return None
    if scheme not in DEFAULT_PORTS or not _HOST.match(host):
        return None
    return host, port or DEFAULT_PORTS[scheme]


def local_path(url: str) -> Optional[str]:
    """The directory of a file:/copy:/cdrom: source, None for anything else."""
    scheme, sep, rest = url.partition(":")
    if not sep or scheme.lower().rsplit("+", 1)[-1] not in LOCAL_SCHEMES:
        return None
    return "/" + rest.lstrip("/") if scheme.lower() != "cdrom" else ""


def show(ep: Endpoint) -> str:
    host, port = ep
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def reachable(endpoints: Sequence[Endpoint], timeout: float = CONNECT_TIMEOUT,
              connect: Optional[Callable[..., Any]] = None) -> bool:
    """Does a TCP connection to any of them open? All are tried at once; the answer comes at
    the first success, or when all failed, and never later than timeout + SLACK (a name that
    takes longer to resolve counts as failed; its thread is left to end by itself)."""
    return Reaching(endpoints, timeout, connect).result()


class Reaching:
    """reachable() begun now, answered by result(): the probe starts it with the programs
    (detect.commands), so that name resolution and the connection (milliseconds here, tens
    of them on a cloud machine) go on while the other probes read."""

    def __init__(self, endpoints: Sequence[Endpoint], timeout: float = CONNECT_TIMEOUT,
                 connect: Optional[Callable[..., Any]] = None) -> None:
        self.endpoints = tuple(endpoints)
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._state: Dict[str, Any] = {"left": len(self.endpoints), "ok": False, "at": None}
        self._until = time.monotonic() + timeout + SLACK
        self.began = time.monotonic()
        if not self.endpoints:
            self._state["at"] = self.began
            self._done.set()
            return
        connect = connect or socket.create_connection
        done, lock, state = self._done, self._lock, self._state

        def attempt(ep: Endpoint) -> None:
            ok = False
            try:
                connect(ep, timeout=timeout).close()
                ok = True
            except (OSError, ValueError):
                pass
            with lock:
                state["left"] -= 1
                state["ok"] = state["ok"] or ok
                if ok or state["left"] == 0:
                    if state["at"] is None:
                        state["at"] = time.monotonic()
                    done.set()

        for ep in self.endpoints:
            # daemon threads: a resolver stuck past the bound must not hold up the exit
            threading.Thread(target=attempt, args=(ep,), daemon=True,
                             name="hpcwizard-mirror").start()

    def result(self) -> bool:
        self._done.wait(max(0.0, self._until - time.monotonic()))
        with self._lock:
            return bool(self._state["ok"])

    def waited(self) -> float:
        """How long the connections took to answer (or the bound, for those that did not):
        begun early, the answer may have waited longer still for the probe to take it, and
        that is no time a mirror was given."""
        with self._lock:
            at = self._state["at"]
        return (min(time.monotonic(), self._until) if at is None else at) - self.began


# --- the probe -------------------------------------------------------------------------------

def _files(ctx: Context, directory: str, suffix: str) -> List[str]:
    return [f"{directory}/{n}" for n in ctx.listdir(directory) if n.endswith(suffix)][:MAX_FILES]


def sources(ctx: Context) -> List[Tuple[str, Optional[str]]]:
    """Every enabled source as (URL, the proxy its package manager's configuration sets for
    it: "" for none or turned off, None for "not set, the environment decides")."""
    found: List[Tuple[str, Optional[str]]] = []
    conf_files = ["etc/apt/apt.conf"] + _files(ctx, "etc/apt/apt.conf.d", "")
    apt_conf = "\n".join(filter(None, (ctx.read(p) for p in conf_files)))
    apt = apt_proxies(apt_conf)
    lists = ["etc/apt/sources.list"] + _files(ctx, "etc/apt/sources.list.d", ".list")
    apt_urls = [u for p in lists for u in urls_from_list(ctx.read(p) or "")]
    apt_urls += [u for p in _files(ctx, "etc/apt/sources.list.d", ".sources")
                 for u in urls_from_deb822(ctx.read(p) or "")]
    for url in apt_urls:
        scheme = url.split(":", 1)[0].lower().rsplit("+", 1)[-1]
        # apt's https method falls back on the http proxy setting
        found.append((url, apt.get(scheme, apt.get("http"))))
    main: Dict[str, str] = {}
    for conf in ("etc/dnf/dnf.conf", "etc/yum.conf"):
        text = ctx.read(conf)
        if text is not None:
            main = _ini(text).get("main", {})
            break
    main_proxy = None if "proxy" not in main else _no_proxy_word(main["proxy"])
    for directory in ("etc/yum.repos.d", "etc/zypp/repos.d"):
        for path in _files(ctx, directory, ".repo"):
            for urls, proxy in repos_from_ini(ctx.read(path) or ""):
                own = proxy if proxy is not None else (main_proxy if directory.startswith(
                    "etc/yum") else None)
                found.extend((u, own) for u in urls)
    found.extend((u, None) for u in urls_from_apk(ctx.read("etc/apk/repositories") or ""))
    return found


def start(ctx: Context) -> None:
    """Begin the probe's connections now (detect.commands, with the programs), where the
    probe will connect: the probe takes them (ctx.begun), or starts its own."""
    if ctx.run_commands and ctx.local:
        where = _where(ctx)
        targets, local = where[1:3]
        if targets and not local:
            # with what it was begun for: the probe reads the sources once, here
            ctx.begun["mirrors"] = (where, Reaching(targets[:MAX_HOSTS],
                                                    min(CONNECT_TIMEOUT, ctx.timeout)))


def probe(ctx: Context, found: Found) -> None:
    describe(ctx, found, may_connect=ctx.run_commands and ctx.local)


def _where(ctx: Context) -> Tuple[List[str], List[Endpoint], bool, List[str]]:
    """(the mirrors as shown, the endpoints to connect to, whether a source is a local
    directory, the proxies as shown)."""
    mirrors: List[str] = []
    targets: List[Endpoint] = []
    proxies: List[str] = []
    local = False
    for url, configured in sources(ctx):
        path = local_path(url)
        if path is not None:
            # a repository on this machine's disk needs no network (a cdrom: only if mounted,
            # which is not ours to tell: it counts as no source)
            if path and ctx.isdir(path):
                local = True
                shown = f"file:{path}" if _PATH.match(path) else "file:(a local directory)"
                if shown not in mirrors:
                    mirrors.append(shown)
            continue
        ep = endpoint(url)
        if ep is None:
            continue
        if show(ep) not in mirrors:
            mirrors.append(show(ep))
        scheme = url.split(":", 1)[0].lower().rsplit("+", 1)[-1]
        proxy = configured if configured is not None else env_proxy(scheme, ep[0], ctx.env)
        target = endpoint(proxy) if proxy else ep
        if target is None:  # a proxy we cannot read: try the mirror itself
            target = ep
        elif proxy and show(target) not in proxies:
            proxies.append(show(target))
        if target not in targets:
            targets.append(target)
    return mirrors, targets, local, proxies


def describe(ctx: Context, found: Found, may_connect: bool,
             timeout: float = CONNECT_TIMEOUT) -> None:
    """The probe, with whether to connect given (tests point it at a sysroot and connect)."""
    where, reaching = ctx.begun.pop("mirrors", (None, None))
    mirrors, targets, local, proxies = where or _where(ctx)
    found.set("mirrors", tuple(mirrors))
    found.set("mirrors_proxy", ", ".join(proxies))
    if not may_connect:
        return
    if local:
        found.set("mirrors_reachable", True)
        return
    if not targets:
        found.note("mirrors.none-configured")
        return
    if reaching is None:
        reaching = Reaching(targets[:MAX_HOSTS], min(timeout, ctx.timeout))
    ok = reaching.result()
    found.set("mirrors_reachable", ok)
    if not ok:
        tried = ", ".join(show(t) for t in targets[:MAX_HOSTS])
        found.note("mirrors.none-answered", seconds=f"{reaching.waited():.1f}",
                   tried=tried)
