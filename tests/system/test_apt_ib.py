"""Real apt on this Debian machine: the InfiniBand user-space libraries and UCX install
through the plan's own packages step (the text review shows and apply runs), detection reads
them back (`ucx_info -v`; `ibv_devinfo` without a device is "no RDMA device", not an error),
and undo purges exactly what was installed. Only the ib-verbs and ucx recipes' packages are
planned: the ssh and openmpi parts belong to other system tests running beside this one, and
apt waits for their dpkg lock (DPkg::Lock::Timeout=120)."""
from __future__ import annotations

import dataclasses
import subprocess

import pytest

from hpcwizard.apply import ShellRunner, apply_record, undo_record
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import detect
from hpcwizard.detect.summary import format_summary
from hpcwizard.plan import build_plan, chosen_recipes, packages_step
from hpcwizard.record import Record


def installed(name: str) -> bool:
    res = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", name],
                         capture_output=True, text=True)
    return res.returncode == 0 and res.stdout.startswith("ii")


def test_ib_userspace_and_ucx_install_are_detected_and_undone(tmp_path):
    facts = detect()
    if facts.os.package_manager != "apt":
        pytest.skip("system test: needs an apt machine (Debian family)")
    choices = make_choices(framework="mpi", network="ib", mode="manual")
    catalog = load_catalog()
    recipes = [r for r in chosen_recipes(facts, choices, catalog) if r.id in ("ib-verbs", "ucx")]
    assert [r.id for r in recipes] == ["ib-verbs", "ucx"]
    step = packages_step(facts, recipes)
    assert step is not None
    for name in ("ibverbs-providers", "libibumad3", "libibverbs1", "librdmacm1", "ibverbs-utils",
                 "libucx0", "ucx-utils"):
        assert name in step.packages or installed(name), name
    missing = [p for p in step.packages if not installed(p)]
    plan = dataclasses.replace(build_plan(facts, choices, catalog), steps=(step,))
    record = Record.new(plan, facts, tmp_path / "ib.toml")
    record.save()
    events = []
    try:
        status = apply_record(record, ShellRunner(plan.target.user), events.append)
        log = (tmp_path / "ib.log").read_text(errors="replace")
        assert status == "done", log[-3000:]
        assert all(installed(p) for p in step.packages)

        after = detect()
        # ucx_info -v is read back, and it is the version of the package apt installed
        ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libucx0"],
                             capture_output=True, text=True).stdout
        assert after.software.ucx_version and ver.startswith(after.software.ucx_version)
        # no RDMA device here: ibv_devinfo says so, and detection reports none, not an error
        ibv = subprocess.run(["ibv_devinfo"], capture_output=True, text=True)
        assert "No IB devices found" in ibv.stdout + ibv.stderr or ibv.returncode != 0
        assert after.hcas == ()
        assert not [n for n in after.notes + after.warnings if "ibv_devinfo" in n], after.notes
        assert "(no RDMA devices)" in format_summary(after)
    finally:
        undo = undo_record(record, ShellRunner(plan.target.user), events.append)
    assert undo == "undone"
    assert [p for p in missing if installed(p)] == [], "undo left packages installed"
