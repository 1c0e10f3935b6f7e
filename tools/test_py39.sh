#!/usr/bin/env bash
# The unit and TUI tests on Python 3.9, the oldest Python hpcwizard supports (CI runs this
# beside the main test run). Makes a venv with pyenv's 3.9 (kept between runs), installs the
# package with its test extra there, and runs pytest without the system tests (root, they
# change the machine and run in the main run) and without test_pyz.py (it runs the .pyz on
# 3.9 itself). Arguments go to pytest.
#   HPCWIZARD_PY39   the 3.9 interpreter (default: pyenv's newest 3.9)
#   HPCWIZARD_PY39_VENV  where the venv lives (default ~/.cache/hpcwizard-ci/py39-venv)
set -euo pipefail
cd "$(dirname "$0")/.."

py="${HPCWIZARD_PY39:-}"
if [ -z "$py" ]; then
  root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
  for candidate in "$root"/versions/3.9*/bin/python3.9 /root/.pyenv/versions/3.9*/bin/python3.9 \
                   /usr/local/bin/python3.9 /usr/bin/python3.9; do
    [ -x "$candidate" ] && py="$candidate"  # the glob sorts: the last is the newest
  done
fi
if [ -z "$py" ] || ! "$py" -c 'import sys; assert sys.version_info[:2] == (3, 9)' 2>/dev/null; then
  echo "test_py39: no Python 3.9 found (pyenv root versions/3.9*, or set HPCWIZARD_PY39)" >&2
  exit 1
fi

venv="${HPCWIZARD_PY39_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/hpcwizard-ci/py39-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 9)' 2>/dev/null; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
fi
echo "test_py39: $("$venv/bin/python" --version) in $venv"
# The dependencies at the versions the .pyz bundles (all allow 3.9); without them 3.9's pip
# backtracks for many minutes through releases that need a newer Python.
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  -c tools/pyz-requirements.txt -e '.[test]'

# The venv's bin first: the tmux test runs the venv's `hpcwizard`, i.e. on 3.9 too.
export PATH="$venv/bin:$PATH"
unset HPCWIZARD_SYSTEM_TESTS VIRTUAL_ENV
exec "$venv/bin/python" -m pytest -q -ra -p no:cacheprovider \
  --ignore=tests/system --ignore=tests/test_pyz.py "$@"
