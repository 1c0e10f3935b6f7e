"""The core never imports textual: the CLI and every core module load without it (checked
in a fresh interpreter, where sys.modules shows everything that was imported)."""
from __future__ import annotations

import json
import subprocess
import sys

CORE = ["hpcwizard.cli", "hpcwizard.plan", "hpcwizard.apply", "hpcwizard.export",
        "hpcwizard.detect", "hpcwizard.catalog", "hpcwizard.ops", "hpcwizard.record",
        "hpcwizard.choices", "hpcwizard.diagnose", "hpcwizard.facts", "hpcwizard.validate"]


def imported_after(modules):
    code = ("import json, sys\n"
            + "".join(f"import {m}\n" for m in modules)
            + "print(json.dumps(sorted(sys.modules)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout))


def test_core_does_not_import_textual():
    mods = imported_after(["hpcwizard.cli", "hpcwizard.plan", "hpcwizard.apply",
                           "hpcwizard.export", "hpcwizard.detect"])
    assert "hpcwizard.cli" in mods and "hpcwizard.detect" in mods  # the imports happened
    assert "textual" not in mods
    assert not [m for m in mods if m.startswith(("textual.", "hpcwizard.screens"))]


def test_every_core_module_alone_does_not_import_textual():
    for module in CORE:
        mods = imported_after([module])
        assert module in mods
        assert "textual" not in mods, f"{module} imports textual"


def test_the_probe_itself_sees_textual():
    """The check can fail: importing textual does show up in sys.modules."""
    assert "textual" in imported_after(["textual"])
