"""Fresh Debian roots for the system tests (tests/system/test_system_debian_roots.py): a bare
root per suite made with debootstrap and cached as a tarball, a chroot with its mounts, and a
network namespace with a way out (NAT) for the apt downloads of an apply inside it.

    suite = SUITES["trixie"]
    root = Root(new_root_dir(suite))
    seconds, how = fresh_root(suite, root.path)      # how: "cached" or "built"
    root.mount()                                     # /proc, /sys, /dev, /dev/pts, /run ...
    net = Uplink("trixie", 13); net.create()         # namespace hpcwr-trixie, NAT to the mirrors
    subprocess.run(net.argv(["python3", "/opt/x.pyz", "plan"], root.path, "node1"),
                   env=CHROOT_ENV)
    net.cleanup(); root.cleanup()                    # both safe to call twice

Everything made here is taken back by the cleanups, even after a partial setup: processes by
the pids found in the namespace or the root (never by name), mounts in reverse order, the
nftables table of this module and net.ipv4.ip_forward as they were. A root's directory is
removed only when nothing is mounted under it any more.

Not a test module. Root only (mount, chroot, ip netns, nft, debootstrap).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from netns import ns_argv

MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
# CI machines start empty, so a CI run builds the bare roots (debootstrap, about a minute
# each) and later runs on the same machine reuse them while they are younger than MAX_AGE.
CACHE_DIR = Path(os.environ.get("HPCWIZARD_CI_ROOTS", "/var/cache/hpcwizard-ci/roots"))
MAX_AGE = 7 * 24 * 3600
WORK_DIR = Path("/var/tmp")  # roots are extracted here (not /tmp, which may be a small tmpfs)
CHROOT_ENV = {  # what a root shell in a fresh container has; nothing of this machine's
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
    "LANG": "C.UTF-8", "TERM": "dumb",
}
# Bump when prepare_image() changes: the cache key includes it.
IMAGE_VERSION = "2"
POLICY_RC_D = ("#!/bin/sh\n# as in Debian's container images: no service starts on install\n"
               "exit 101\n")


class RootError(RuntimeError):
    pass


def _sh(argv: Sequence[str], check: bool = True, timeout: float = 60,
        input: Optional[str] = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                          timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise RootError(f"{' '.join(argv)} -> exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return proc


@dataclass(frozen=True)
class Suite:
    name: str          # bookworm
    version: str       # 12
    include: Tuple[str, ...] = ("python3",)

    @property
    def label(self) -> str:
        extra = [p for p in self.include if p != "python3"]
        return f"Debian {self.version} ({self.name})" + "".join(f" +{p}" for p in extra)

    def sources(self) -> str:
        """The sources.list of Debian's container image of this release: the release, its
        updates and its security suite (bullseye's is bullseye-security too)."""
        return (f"deb {MIRROR} {self.name} main\n"
                f"deb {MIRROR} {self.name}-updates main\n"
                f"deb {SECURITY_MIRROR} {self.name}-security main\n")

    def cache_key(self) -> str:
        text = "\n".join([self.name, "minbase", ",".join(self.include), MIRROR, self.sources(),
                          IMAGE_VERSION])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# A bare root has python3 and nothing else a minbase lacks, as a fresh container has no
# python3 either until someone installs it. HPCWIZARD_CI_INCLUDE=iproute2,... adds packages
# (a diagnosis: to look past a failure that a missing tool causes; cached under its own key).
EXTRA_INCLUDE = tuple(p.strip() for p in os.environ.get("HPCWIZARD_CI_INCLUDE", "").split(",")
                      if p.strip())
SUITES: Dict[str, Suite] = {s.name: s for s in (
    Suite("bullseye", "11", ("python3", *EXTRA_INCLUDE)),
    Suite("bookworm", "12", ("python3", *EXTRA_INCLUDE)),
    Suite("trixie", "13", ("python3", *EXTRA_INCLUDE)),
)}


# --- bare roots and their cache ------------------------------------------------------------

def _compressor() -> Tuple[str, List[str]]:
    """(suffix, tar's compression option): zstd where it is installed, else gzip."""
    if shutil.which("zstd"):
        return ".tar.zst", ["--use-compress-program=zstd -T0 -3 -q"]
    return ".tar.gz", ["-z"]


def tarball_path(suite: Suite) -> Path:
    return CACHE_DIR / f"{suite.name}-{suite.cache_key()}{_compressor()[0]}"


def debootstrap(suite: Suite, dest: Path, timeout: float = 900) -> None:
    """debootstrap --variant=minbase --include=... SUITE dest MIRROR, prepare_image, and up to
    date with the release's updates and security suite."""
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(suite.include)}",
            suite.name, str(dest), MIRROR]
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        try:
            log = (dest / "debootstrap" / "debootstrap.log").read_text(errors="replace")[-4000:]
        except OSError:
            log = "(no debootstrap.log)"
        raise RootError(f"{' '.join(argv)} -> exit {proc.returncode}\n{proc.stdout[-3000:]}"
                        f"{proc.stderr[-3000:]}\n--- debootstrap.log:\n{log}")
    prepare_image(suite, dest)
    _upgrade_here(dest)


def prepare_image(suite: Suite, dest: Path) -> None:
    """Make a debootstrap root look like Debian's container image of the release: its
    sources.list, no apt lists or downloaded .debs, services kept from starting on install
    (policy-rc.d), an /etc/hosts with localhost (a container runtime writes one)."""
    (dest / "etc/apt/sources.list").write_text(suite.sources())
    policy = dest / "usr/sbin/policy-rc.d"
    policy.write_text(POLICY_RC_D)
    policy.chmod(0o755)
    hosts = dest / "etc/hosts"
    if not hosts.exists() or not hosts.read_text().strip():
        hosts.write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    for d in (dest / "var/lib/apt/lists", dest / "var/cache/apt/archives"):
        for p in d.glob("*"):
            if p.is_file() and p.name != "lock":
                p.unlink()
    for p in (dest / "var/cache/apt").glob("*.bin"):
        p.unlink()


UPGRADE = ("set -e; export DEBIAN_FRONTEND=noninteractive; apt-get -q update; "
           "apt-get -q -y dist-upgrade; apt-get clean; rm -rf /var/lib/apt/lists/*")


def upgrade_argv() -> List[str]:
    """Bring a root up to date with its release's updates and security suite, then drop the
    apt lists again, as Debian's container images are built. Without this, installing a
    package may upgrade libc6 or perl-base first, which no undo can take back."""
    return ["sh", "-c", UPGRADE]


def _upgrade_here(dest: Path) -> None:
    """upgrade_argv() chrooted in dest, through this machine's network (while building)."""
    root = Root(dest)
    root.mount()
    try:
        proc = root.run(upgrade_argv(), timeout=900)
        if proc.returncode != 0:
            raise RootError(f"upgrading {dest} failed (exit {proc.returncode}):\n"
                            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    finally:
        root.umount()


def _tar_create(src: Path, out: Path) -> None:
    _sh(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--one-file-system",
         *_compressor()[1], "-cf", str(out), "-C", str(src), "."], timeout=900)


def extract(tarball: Path, dest: Path) -> None:
    """A fresh copy of a cached root in dest (the tarball is only read)."""
    dest.mkdir(parents=True, exist_ok=True)
    _sh(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-p",
         *_compressor()[1], "-xf", str(tarball), "-C", str(dest)], timeout=900)


def fresh_root(suite: Suite, dest: Path) -> Tuple[float, str]:
    """A bare root of suite in dest (an empty directory): extracted from the cache when its
    tarball is younger than MAX_AGE, else made with debootstrap (and cached when the cache
    directory can be written). Returns (seconds, "cached" | "built" | "built, not cached: ...").
    One lock per suite: concurrent callers build a suite once."""
    start = time.monotonic()
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = open(CACHE_DIR / f"{suite.name}.lock", "a")
    except OSError as exc:
        debootstrap(suite, dest)
        return time.monotonic() - start, f"built, not cached: {exc}"
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tarball = tarball_path(suite)
        if tarball.exists() and time.time() - tarball.stat().st_mtime < MAX_AGE:
            extract(tarball, dest)
            return time.monotonic() - start, "cached"
        debootstrap(suite, dest)
        for old in CACHE_DIR.glob(f"{suite.name}-*.tar.*"):  # this one's stale copy, others'
            if old == tarball or time.time() - old.stat().st_mtime >= MAX_AGE:  # old ones
                old.unlink()
        tmp = tarball.with_name(f".{tarball.name}.{os.getpid()}.tmp")
        try:
            _tar_create(dest, tmp)
            tmp.chmod(0o600)
            os.replace(tmp, tarball)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return time.monotonic() - start, "built"


def cache_state() -> Dict[str, Tuple[int, int]]:
    """name -> (size, mtime_ns) of every cached tarball: a test proves it left them alone."""
    if not CACHE_DIR.is_dir():
        return {}
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns)
            for p in CACHE_DIR.glob("*.tar.*")}


# --- a chroot with its mounts ----------------------------------------------------------------

def mounts_under(path: Path) -> List[str]:
    """Mount points at or under path, in this mount namespace."""
    p = str(path).rstrip("/")
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == p or point.startswith(p + "/"):
            out.append(point)
    return out


def pids_in_root(path: Path) -> List[int]:
    """Processes whose root directory is path (chrooted there), seen through /proc."""
    p = str(path).rstrip("/")
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            r = os.readlink(d / "root")
        except OSError:
            continue
        if r == p or r.startswith(p + "/"):
            pids.append(int(d.name))
    return pids


def kill_pids(pids: Sequence[int]) -> List[int]:
    """SIGTERM, then SIGKILL what is left after 3 s; returns the pids still alive."""
    left = list(pids)
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            left = [p for p in left if _alive(p)]
            if left:
                time.sleep(0.05)
        if not left:
            return []
    return left


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class Root:
    """A root file system in path, chroot-ready: the root itself a private bind mount (so
    nothing mounted in it spreads to other mount namespaces), /proc, /sys, /dev, /dev/pts,
    /dev/shm and /run (tmpfs) in it, this machine's /etc/resolv.conf copied in."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mounted: List[Path] = []

    def _mount(self, target: Path, *argv: str) -> None:
        target.mkdir(parents=True, exist_ok=True)
        _sh(["mount", *argv, str(target)])
        self._mounted.append(target)

    def mount(self) -> None:
        try:
            p = self.path
            self._mount(p, "--bind", str(p))
            _sh(["mount", "--make-private", str(p)])
            self._mount(p / "proc", "-t", "proc", "-o", "nosuid,nodev,noexec", "proc")
            self._mount(p / "sys", "-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs")
            self._mount(p / "dev", "--bind", "/dev")
            self._mount(p / "dev/pts", "--bind", "/dev/pts")
            self._mount(p / "dev/shm", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs")
            self._mount(p / "run", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "tmpfs")
            resolv = p / "etc/resolv.conf"
            if resolv.is_symlink():
                resolv.unlink()
            resolv.write_bytes(Path("/etc/resolv.conf").read_bytes())
        except BaseException:
            self.umount()
            raise

    def run(self, argv: Sequence[str], timeout: float = 120,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        """argv chrooted in the root, in this machine's namespaces (for dpkg-query and such)."""
        return subprocess.run(["chroot", str(self.path), *argv], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout,
                              env=env or CHROOT_ENV, cwd="/")

    def host(self, path: str) -> Path:
        return self.path / path.lstrip("/")

    def umount(self) -> None:
        left = kill_pids(pids_in_root(self.path))
        if left:
            raise RootError(f"processes in {self.path} survived SIGKILL: {left}")
        for target in reversed(self._mounted):
            if _sh(["umount", str(target)], check=False).returncode != 0:
                _sh(["umount", "-l", str(target)])
        self._mounted.clear()
        # what a killed run left mounted in its root (this object did not mount it), deepest first
        for target in sorted(mounts_under(self.path), key=lambda m: m.count("/"), reverse=True):
            if _sh(["umount", target], check=False).returncode != 0:
                _sh(["umount", "-l", target], check=False)
        still = mounts_under(self.path)
        if still:
            raise RootError(f"still mounted under {self.path}: {still}")

    def cleanup(self) -> None:
        """Stop what runs in the root, unmount, delete it; refuses to delete while anything
        is mounted under it (a bind mount of /dev would take this machine's /dev with it)."""
        if not self.path.name.startswith(ROOT_PREFIX):
            raise RootError(f"not deleting {self.path}: not a root of this module's")
        self.umount()
        if self.path.exists():
            if mounts_under(self.path):
                raise RootError(f"not deleting {self.path}: something is mounted under it")
            _sh(["rm", "-rf", "--one-file-system", "--", str(self.path)], timeout=600)


ROOT_PREFIX = "hpcwizard-root-"


def new_root_dir(suite: Suite) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{suite.name}-", dir=str(WORK_DIR)))
    d.chmod(0o755)  # a root's / is 0755 (mkdtemp makes 0700)
    return d


def stale_root_dirs() -> List[Path]:
    """Roots a killed run left in WORK_DIR."""
    return sorted(WORK_DIR.glob(f"{ROOT_PREFIX}*"))


# --- a network namespace with a way out ------------------------------------------------------

NAT_TABLE = "hpcwizard_ci"
UPLINK_NET = "10.81"  # 10.81.N.0/30 per uplink; the netns clusters use 10.77-10.80
FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
FORWARD_SAVED = Path("/run/hpcwizard-ci-ip_forward")  # the value before, for a killed run


class _Nat:
    """One nftables table masquerading 10.81.0.0/16 and net.ipv4.ip_forward on, while any
    Uplink exists; both as they were when the last goes."""

    def __init__(self) -> None:
        self.users = 0
        self.lock = threading.Lock()

    def acquire(self) -> None:
        with self.lock:
            if self.users == 0:
                self._setup()
            self.users += 1

    def release(self) -> None:
        with self.lock:
            if self.users == 0:
                return
            self.users -= 1
            if self.users == 0:
                self._teardown()

    def _setup(self) -> None:
        self._teardown()  # a killed run's table and forwarding setting
        FORWARD_SAVED.write_text(FORWARD.read_text())
        FORWARD.write_text("1\n")
        rules = f"""table ip {NAT_TABLE} {{
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr {UPLINK_NET}.0.0/16 ip daddr != {UPLINK_NET}.0.0/16 masquerade
  }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    ip saddr {UPLINK_NET}.0.0/16 accept
    ip daddr {UPLINK_NET}.0.0/16 ct state established,related accept
  }}
}}
"""
        try:
            _sh(["nft", "-f", "-"], input=rules)
        except BaseException:
            self._teardown()
            raise

    def _teardown(self) -> None:
        if _nat_table_exists():
            _sh(["nft", "delete", "table", "ip", NAT_TABLE])
        if FORWARD_SAVED.exists():
            FORWARD.write_text(FORWARD_SAVED.read_text())
            FORWARD_SAVED.unlink()


NAT = _Nat()


def _nat_table_exists() -> bool:
    return _sh(["nft", "list", "table", "ip", NAT_TABLE], check=False).returncode == 0


def host_net_state(prefixes: Sequence[str] = ("hpcwr",)) -> Dict[str, str]:
    """What the uplinks (and clusters named with prefixes) change on this machine, to prove
    that cleanup put it back. Only names with these prefixes: other system tests may have
    namespaces of their own meanwhile."""
    def ours(name: str) -> bool:
        return name.startswith(tuple(prefixes))

    links = [line.split()[0].split("@")[0]
             for line in _sh(["ip", "-br", "link"]).stdout.splitlines() if line.strip()]
    spaces = [line.split()[0] for line in _sh(["ip", "netns", "list"]).stdout.splitlines()
              if line.strip()]
    return {
        "ip_forward": FORWARD.read_text().strip(),
        "nft table": str(_nat_table_exists()),
        "links": " ".join(sorted(filter(ours, links))),
        "netns": " ".join(sorted(filter(ours, spaces))),
    }


class Uplink:
    """Network namespace hpcwr-NAME: lo, and eth0 at 10.81.N.2/30 whose peer hpcwrN on this
    machine (10.81.N.1) is its default route, masqueraded to the outside."""

    PREFIX = "hpcwr-"

    def __init__(self, name: str, n: int) -> None:
        if not 1 <= n <= 254:
            raise ValueError("n: 1 to 254")
        self.ns = f"{self.PREFIX}{name}"
        self.host_if = f"hpcwr{n}"
        self.host_ip = f"{UPLINK_NET}.{n}.1"
        self.ip = f"{UPLINK_NET}.{n}.2"
        self._made = False
        self._nat = False

    def create(self) -> None:
        try:
            self._delete()  # left by a killed run
            _sh(["ip", "netns", "add", self.ns])
            self._made = True
            _sh(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "eth0",
                 "netns", self.ns])
            _sh(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if])
            _sh(["ip", "link", "set", self.host_if, "up"])
            _sh(["ip", "-n", self.ns, "link", "set", "lo", "up"])
            _sh(["ip", "-n", self.ns, "addr", "add", f"{self.ip}/30", "dev", "eth0"])
            _sh(["ip", "-n", self.ns, "link", "set", "eth0", "up"])
            _sh(["ip", "-n", self.ns, "route", "add", "default", "via", self.host_ip])
            NAT.acquire()
            self._nat = True
        except BaseException:
            self.cleanup()
            raise

    def argv(self, argv: Sequence[str], root: Optional[Path], hostname: str) -> List[str]:
        return ns_argv(self.ns, hostname, argv, root=root)

    def pids(self) -> List[int]:
        return [int(p) for p in _sh(["ip", "netns", "pids", self.ns], check=False).stdout.split()]

    def _delete(self) -> None:
        if self.ns in _sh(["ip", "netns", "list"]).stdout.split():
            left = kill_pids(self.pids())
            if left:
                raise RootError(f"processes in namespace {self.ns} survived SIGKILL: {left}")
            _sh(["ip", "netns", "del", self.ns])
        # Deleting the namespace takes the veth pair with it, a moment later.
        deadline = time.monotonic() + 5
        while self._host_if_exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._host_if_exists():
            _sh(["ip", "link", "del", self.host_if], check=False)
            if self._host_if_exists():
                raise RootError(f"cannot delete {self.host_if}")

    def _host_if_exists(self) -> bool:
        return _sh(["ip", "link", "show", self.host_if], check=False).returncode == 0

    def cleanup(self) -> None:
        """Stop its processes, delete it and its veth, release the NAT. Idempotent."""
        try:
            self._delete()
        finally:
            if self._nat:
                self._nat = False
                NAT.release()


def cleanup_stale(prefixes: Sequence[str] = ("hpcwr",)) -> List[str]:
    """What a killed run left: namespaces named with prefixes (their processes first), this
    module's veths, its nftables table and ip_forward setting, and roots in WORK_DIR.
    Returns what it removed."""
    done = []
    for line in _sh(["ip", "netns", "list"]).stdout.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if ns.startswith(tuple(prefixes)):
            pids = [int(p) for p in _sh(["ip", "netns", "pids", ns], check=False).stdout.split()]
            kill_pids(pids)
            _sh(["ip", "netns", "del", ns], check=False)
            done.append(f"namespace {ns}")
    for line in _sh(["ip", "-br", "link"]).stdout.splitlines():
        name = line.split()[0].split("@")[0] if line.strip() else ""
        if name.startswith(Uplink.PREFIX.rstrip("-")) and name[len("hpcwr"):].isdigit():
            _sh(["ip", "link", "del", name], check=False)
            done.append(f"link {name}")
    if NAT.users == 0 and (FORWARD_SAVED.exists() or _nat_table_exists()):
        NAT._teardown()
        done.append(f"nft table {NAT_TABLE}, ip_forward")
    for d in stale_root_dirs():
        Root(d).cleanup()
        done.append(str(d))
    return done

