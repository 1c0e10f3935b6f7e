# hpcwizard.pyz: the zipapp's __main__ (tools/build_pyz.py copies this file in and fills in
# @SUPPORTED_PYTHON@ / @MIN_PYTHON@). Its syntax parses on every Python, 2.7 included, and it
# checks the version before importing anything: an old Python gets one line and exit status 2,
# not a SyntaxError from deep inside a dependency.
import sys

if sys.version_info < @MIN_PYTHON@:
    sys.stderr.write("hpcwizard: needs Python @SUPPORTED_PYTHON@, this is Python %s (%s); "
                     "run it with a newer python3\n"
                     % (sys.version.split()[0], sys.executable or "python"))
    sys.exit(2)

# zipimport never writes bytecode; this keeps the rest of the run from writing any either,
# except into the unpacked copy (_hpcwizard_pyz.enter), where it is what the copy is for.
sys.dont_write_bytecode = True

_CACERT = []


def _cacert_where():
    """certifi.where() for the zipapp run from the archive itself. certifi's own would
    extract cacert.pem from the zip to a temporary file on every run that imports requests;
    this keeps one copy in the zipapp's private cache directory (~/.cache/hpcwizard/pyz/),
    rewritten only when it differs. CA certificates decide whom a download trusts: where
    that directory is not provably ours (root under sudo with another user's HOME), or
    cannot be written, certifi's own."""
    if _CACERT:
        return _CACERT[0]
    import os
    import _hpcwizard_pyz as unpack
    import certifi

    data = certifi.contents()
    root = None
    try:
        root = unpack.private_root()
    except OSError:
        pass
    path = None
    if root is not None:
        path = os.path.join(root, "certifi-%s-cacert.pem" % certifi.__version__)
        try:
            with open(path, encoding="ascii") as f:
                current = f.read()
        except (OSError, ValueError):
            current = None
        if current != data:
            tmp = "%s.%d.tmp" % (path, os.getpid())
            try:
                with open(tmp, "w", encoding="ascii") as f:
                    f.write(data)
                os.replace(tmp, path)
            except OSError:  # no space, say: no half-written file is left
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                path = None
    _CACERT.append(path or _certifi_where())
    return _CACERT[0]


def _run():
    global _certifi_where
    import os

    try:
        import _hpcwizard_pyz  # tools/pyz_cache.py

        unpacked = _hpcwizard_pyz.enter(os.path.dirname(__file__), "@BUILD_ID@")
    except KeyboardInterrupt:  # Ctrl-C while it unpacks: nothing half-made is left in use
        sys.stderr.write("hpcwizard: interrupted\n")
        sys.exit(130)
    if not unpacked:  # run from the archive itself: certifi's file is inside the zip
        import certifi
        import certifi.core

        _certifi_where = certifi.core.where
        certifi.where = certifi.core.where = _cacert_where  # before requests imports it

    from hpcwizard.cli import run

    run()


_run()
