"""The zipapp's extracted copy: hpcwizard.pyz runs from the user's cache directory once the
archive has been unpacked there, because Python never caches bytecode for what it imports
from a zip file, and compiling textual, rich and hpcwizard again on every start cost the
wizard about two seconds before its first screen with facts.

tools/build_pyz.py puts this file at the archive's root as _hpcwizard_pyz.py; the archive's
__main__ calls enter() first. Standard library and platformdirs only, and Python 3.9's.

    ~/.cache/hpcwizard/pyz/<build id>/      the archive's files, and the __pycache__ Python
                                            writes beside them as it imports; .complete last

A copy is used only when it is provably ours: every directory from it up to / belongs to
this user or root, nobody else can write in it (as OpenSSH's StrictModes asks of ~/.ssh)
and none is a link once the path has been resolved; pyz/ and the build's directory are
private (0700); and its .complete names the very build that runs. In our own private pyz/,
one that is not is replaced. It is unpacked into a private temporary directory beside it
and renamed into place whole, so that a kill in the middle leaves nothing that is used.
Anything else —
a home that belongs to another user (root under sudo keeps HOME=/home/alice), a cache that
is not writable, a full disk, PYTHONDONTWRITEBYTECODE or -B (no bytecode would be kept),
HPCWIZARD_PYZ_CACHE=off — runs from the archive, as before, and writes nothing there.
"""
import os
import shutil
import stat
import sys
import tempfile
import time
import zipfile

MARKER = ".complete"
KEEP_OTHER_BUILDS = 2  # besides the one running: an older wizard still open may import more
STALE_UNPACK_S = 3600.0  # a temporary directory this old was left by a kill, not an unpack
LOCK_WAIT_S = 30.0


def cache_root():
    """Where the builds are unpacked: platformdirs' user cache directory for hpcwizard."""
    from platformdirs import user_cache_dir

    return os.path.join(user_cache_dir("hpcwizard"), "pyz")


def _safe_dir(st, private):
    """A directory that only this user (or root) can change; private: only this user reads."""
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        return False
    if private:
        return st.st_uid == uid and not st.st_mode & 0o077
    if st.st_uid not in (uid, 0):
        return False
    # /tmp and the like: others may write, but not move or replace what is ours inside
    return not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX and st.st_uid == 0)


def trusted(path, private_from):
    """Every directory from path up to / is safe (see _safe_dir), and none is a symbolic
    link: path is checked as it is written, which is how it will be used (resolve it first,
    once). Those at or below private_from are private too."""
    here = os.path.abspath(path)
    private_from = os.path.abspath(private_from).rstrip("/") + "/"
    while True:
        try:
            st = os.lstat(here)  # a link is not a directory: refused
        except OSError:
            return False
        if not _safe_dir(st, (here.rstrip("/") + "/").startswith(private_from)):
            return False
        parent = os.path.dirname(here)
        if parent == here:
            return True
        here = parent


def make_private_dirs(path):
    """Create what is missing of path, each new directory 0700 whatever the umask. What is
    there already is left as it is (never chmod what may be another's, or a link to it); it
    must be a directory, else OSError."""
    missing = []
    here = path
    while not os.path.lexists(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:  # another start made it: checked by trusted() after
            continue
        os.chmod(d, 0o700)  # ours, just made: mkdir's mode passed through the umask


def nearest_existing(path):
    """path, or its nearest ancestor that exists (as anything: a file there is not skipped)."""
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _complete(build_dir, build_id):
    try:
        with open(os.path.join(build_dir, MARKER), encoding="ascii") as f:
            return f.read().strip() == build_id
    except (OSError, ValueError):
        return False


class _Locked:
    """root/.lock held exclusively: one start at a time unpacks, replaces or removes builds.
    Given up after LOCK_WAIT_S (a start stopped while holding it): then no copy."""

    def __init__(self, root):
        self.fd = os.open(os.path.join(root, ".lock"),
                          os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

    def __enter__(self):
        import fcntl

        start = time.monotonic()
        said = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited > LOCK_WAIT_S:
                    os.close(self.fd)
                    raise
                if waited > 1.0 and not said:  # a stopped start (Ctrl-Z) holds it, say
                    sys.stderr.write("hpcwizard: waiting for another start to unpack "
                                     "hpcwizard.pyz (%ds at most)\n" % LOCK_WAIT_S)
                    said = True
                time.sleep(0.05)

    def __exit__(self, *exc):
        os.close(self.fd)  # and with it the lock


def _in_use(build_dir):
    """A wizard of this build is running: it holds a shared lock on its .complete (enter)."""
    import fcntl

    try:
        fd = os.open(os.path.join(build_dir, MARKER), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _remove(root, path):
    """Rename path aside under an unpack- name first, then remove it: a kill in the middle
    leaves no build with its .complete and part of its files."""
    aside = tempfile.mkdtemp(prefix="unpack-", dir=root)
    os.rename(path, os.path.join(aside, "old"))
    shutil.rmtree(aside, ignore_errors=True)


def _unpack(archive, root, build_id):
    """Unpack archive into root/build_id through a private temporary directory, renamed into
    place whole once .complete is written."""
    final = os.path.join(root, build_id)
    tmp = tempfile.mkdtemp(prefix="unpack-", dir=root)  # 0700
    try:
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        with open(os.path.join(tmp, MARKER), "w", encoding="ascii") as f:
            f.write(build_id + "\n")
        os.rename(tmp, final)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _tidy(root, build_id):
    """Remove what kills left behind, and builds beyond the KEEP_OTHER_BUILDS used last
    that no running wizard uses. Under the lock."""
    now = time.time()
    others = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or name == build_id:
            continue
        if name.startswith("unpack-"):
            if now - st.st_mtime > STALE_UNPACK_S:
                shutil.rmtree(path, ignore_errors=True)
            continue
        try:
            used = os.stat(os.path.join(path, MARKER)).st_mtime
        except OSError:
            used = st.st_mtime
        others.append((used, path))
    others.sort(reverse=True)
    for _, path in others[KEEP_OTHER_BUILDS:]:
        if not _in_use(path):
            _remove(root, path)


def switch():
    """HPCWIZARD_PYZ_CACHE: True for on (the default), False for off; SystemExit(2) with one
    line for anything else."""
    value = os.environ.get("HPCWIZARD_PYZ_CACHE", "on").strip().lower()
    if value in ("on", "1", "yes", ""):
        return True
    if value in ("off", "0", "no"):
        return False
    sys.stderr.write("hpcwizard: HPCWIZARD_PYZ_CACHE=%s: give on or off\n"
                     % os.environ["HPCWIZARD_PYZ_CACHE"])
    raise SystemExit(2)


def private_root():
    """The resolved pyz/ directory, made private where missing; None where it is not
    provably ours (or cannot be made). Resolved once: the path returned is the one checked,
    so that a link on the way that another user swaps afterwards changes nothing."""
    # resolved once (a link of ours on the way, ~/.cache to a larger disk, say); a link that
    # realpath leaves unresolved (a loop, a missing target) is refused by trusted()
    root = os.path.realpath(cache_root())
    # nothing is created where the directories on the way are someone else's, or open to
    # others (root under sudo with another user's HOME)
    if not trusted(nearest_existing(root), root):
        return None
    make_private_dirs(root)
    return root if trusted(root, root) and os.path.realpath(root) == root else None


def unpacked(archive, build_id):
    """The directory holding this build's files, unpacked now if they are not yet; None where
    the archive should run as it is (the module docstring says when)."""
    if not switch() or sys.flags.dont_write_bytecode or not build_id.isalnum():
        return None
    try:
        root = private_root()
        if root is None:
            return None
        final = os.path.join(root, build_id)
        # trusted before anything is read there: a .complete that is another user's FIFO
        # would hold the start forever
        if trusted(final, root) and _complete(final, build_id):
            return final
        with _Locked(root):
            if trusted(final, root) and _complete(final, build_id):
                return final  # another start unpacked it while this one waited
            if os.path.lexists(final):
                # in our private directory, yet not a private, complete copy (opened up
                # with chmod since, say): not used, but replaced
                _remove(root, final)
            final = _unpack(archive, root, build_id)
            _tidy(root, build_id)
        return final if trusted(final, root) and _complete(final, build_id) else None
    except Exception:  # noqa: BLE001 - whatever stops the copy, the archive itself still runs
        return None


_HELD = []  # the shared lock on the running build's .complete, held until the exit


def _hold(build_dir):
    """Mark the build as used: a shared lock for _tidy, and .complete's time for the order."""
    import fcntl

    marker = os.path.join(build_dir, MARKER)
    fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)
    held, there = os.fstat(fd), os.stat(marker)
    if (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino):
        os.close(fd)  # removed (renamed aside) between the check and the lock
        raise OSError("%s: removed while starting" % build_dir)
    _HELD.append(fd)
    try:
        os.utime(os.path.join(build_dir, MARKER))
    except OSError:  # a read-only home still runs from its copy
        pass


def enter(archive, build_id):
    """Import everything after this from the unpacked copy when there is one (True); leave
    sys.path as it is otherwise (False)."""
    where = unpacked(archive, build_id)
    if where is None:
        return False
    try:
        _hold(where)
    except OSError:
        return False
    archive = os.path.realpath(archive)
    sys.path[:] = [where] + [p for p in sys.path if os.path.realpath(p) != archive]
    sys.path_importer_cache.clear()
    # Python keeps bytecode again, into the copy's __pycache__ above all, which is what the
    # copy is for (the rest of sys.path is the interpreter's own, compiled when installed)
    sys.dont_write_bytecode = False
    return True
