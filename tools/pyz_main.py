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

# zipimport never writes bytecode; this keeps the rest of the run from writing any either.
sys.dont_write_bytecode = True

_CACERT = []


def _cacert_where():
    """certifi.where() for the zipapp. certifi's own would extract cacert.pem from the zip to
    a temporary file on every run that imports requests; this keeps one copy in the user's
    cache directory (~/.cache/hpcwizard/), rewritten only when it differs."""
    if _CACERT:
        return _CACERT[0]
    import os
    import certifi
    from platformdirs import user_cache_dir

    data = certifi.contents()
    cache = user_cache_dir("hpcwizard")
    path = os.path.join(cache, "certifi-%s-cacert.pem" % certifi.__version__)
    try:
        with open(path, encoding="ascii") as f:
            current = f.read()
    except (OSError, ValueError):
        current = None
    if current != data:
        try:
            os.makedirs(cache, mode=0o700, exist_ok=True)
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "w", encoding="ascii") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            path = _certifi_where()  # cache not writable: certifi's temporary file after all
    _CACERT.append(path)
    return path


def _run():
    global _certifi_where
    import certifi
    import certifi.core

    _certifi_where = certifi.core.where
    certifi.where = certifi.core.where = _cacert_where  # before requests imports it

    from hpcwizard.cli import run

    run()


_run()
