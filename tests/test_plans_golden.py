"""Plans for the seven images of the issue (os-release fixture trees) x the four
framework/network choices x root / sudo / no privilege, compared with golden files: one small
JSON per case (recommendation and reasons, step ids, packages, launch settings), reviewed by
eye once. Regenerate after an intended change with

    HPCWIZARD_UPDATE_GOLDEN=1 python -m pytest tests/test_plans_golden.py

and read the diff before committing it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.plan import build_plan

from _ib_fixtures import H100, OS_TREES, PRIVILEGES, make_facts

GOLDEN = Path(__file__).parent / "golden" / "plans"
UPDATE = os.environ.get("HPCWIZARD_UPDATE_GOLDEN") == "1"
CATALOG = load_catalog()
CHOICES = [("mpi", "tcp"), ("mpi", "ib"), ("pytorch", "tcp"), ("pytorch", "ib")]
CASES = [(tree, fw, net, priv) for tree in OS_TREES for fw, net in CHOICES for priv in PRIVILEGES]


def summary(plan) -> dict:
    rec = plan.recommendation
    pk = next((s for s in plan.steps if s.id == "packages/install"), None)
    return {
        "os": plan.os_label,
        "family": plan.os.family,
        "package_manager": plan.os.package_manager,
        "recommendation": rec.path,
        "preset": rec.preset.id if rec.preset else "",
        "reasons": list(rec.reasons),
        "packages": list(pk.packages) if pk else [],
        "steps": [f"{s.id} ({s.as_})" for s in plan.steps],
        "launch_env": dict(plan.launch_env),
        "mpirun_args": list(plan.mpirun_args),
    }


def check_golden(name: str, data: dict) -> None:
    path = GOLDEN / f"{name}.json"
    # One key per line, each value on one line: small files whose diffs read well.
    text = "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                              for k, v in data.items()) + "\n}\n"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with HPCWIZARD_UPDATE_GOLDEN=1 once and review it"
    assert json.loads(path.read_text(encoding="utf-8")) == data, (
        f"{name}: the plan changed; if intended, regenerate with HPCWIZARD_UPDATE_GOLDEN=1 "
        "and review the diff")


@pytest.mark.parametrize("tree,fw,net,priv", CASES, ids=["-".join(c) for c in CASES])
def test_plan_matches_golden(tree, fw, net, priv):
    facts = make_facts(tree, PRIVILEGES[priv], ib=True, gpus=H100 if fw == "pytorch" else ())
    plan = build_plan(facts, make_choices(framework=fw, network=net), CATALOG)
    check_golden(f"{tree}-{fw}-{net}-{priv}", summary(plan))


# The rendered plan, as `hpcwizard plan` prints it: the text a person reviews, held whole
# (every image for MPI over TCP as root; Debian 12 for every choice and privilege).
TEXT_GOLDEN = Path(__file__).parent / "golden" / "plan-texts"
TEXT_CASES = sorted({(tree, "mpi", "tcp", "root") for tree in OS_TREES}
                    | {("debian12", fw, net, priv) for fw, net in CHOICES for priv in PRIVILEGES})


@pytest.mark.parametrize("tree,fw,net,priv", TEXT_CASES)
def test_rendered_plan_matches_golden_text(tree, fw, net, priv):
    from hpcwizard.report import format_plan

    plan = build_plan(make_facts(tree, PRIVILEGES[priv], gpus=H100 if fw == "pytorch" else ()),
                      make_choices(framework=fw, network=net, mode="manual"), CATALOG)
    text = format_plan(plan)
    path = TEXT_GOLDEN / f"{tree}-{fw}-{net}-{priv}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with HPCWIZARD_UPDATE_GOLDEN=1 once and review it"
    assert path.read_text(encoding="utf-8") == text, (
        f"{path.name}: the rendered plan changed; if intended, regenerate with "
        "HPCWIZARD_UPDATE_GOLDEN=1 and review the diff")


@pytest.mark.parametrize("tree", sorted(OS_TREES))
def test_the_mpi_tcp_plan_reads_like_the_guide(tree):
    """At most 90 lines (it was 224), each sshd setting on a line of its own, and none of the
    temp-file, marker and rollback plumbing of the operations in what is shown."""
    from hpcwizard.report import format_plan

    plan = build_plan(make_facts(tree, PRIVILEGES["root"]),
                      make_choices(framework="mpi", network="tcp", mode="manual"), CATALOG)
    text = format_plan(plan)
    assert len(text.splitlines()) <= 90, len(text.splitlines())
    for setting in ("Port 2222", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                    "PubkeyAuthentication yes", "PermitRootLogin prohibit-password"):
        assert f"\n      {setting}\n" in text, setting
    for plumbing in ("mktemp", "prev0=", "printf '%s\\n'", ".hpcwizard-orig", "trap "):
        assert plumbing not in text, plumbing


def test_every_golden_file_belongs_to_a_case():
    """A renamed or removed case must not leave a stale golden file behind."""
    names = {"-".join(c) for c in CASES}
    stale = sorted(p.stem for p in GOLDEN.glob("*.json") if p.stem not in names)
    assert not stale, f"golden files without a case: {stale}"


# The facts the golden files rest on, asserted directly so a wrong golden file cannot hide
# them: family decides package names, privilege decides the recommendation.

@pytest.mark.parametrize("tree", list(OS_TREES))
def test_family_package_names(tree):
    plan = build_plan(make_facts(tree), make_choices(framework="mpi", network="ib"), CATALOG)
    pk = next(s for s in plan.steps if s.id == "packages/install")
    if plan.os.family == "debian":
        assert {"libibverbs1", "ibverbs-providers", "libucx0", "ucx-utils", "openmpi-bin"} <= set(pk.packages)
        assert "rdma-core" not in pk.packages and pk.run.startswith("hw_packages apt ")
    else:
        assert plan.os.family == "rhel", tree
        assert {"rdma-core", "libibverbs", "librdmacm", "libibumad", "libnl3",
                "libibverbs-utils", "ucx", "ucx-ib", "openmpi"} <= set(pk.packages)
        assert not any(p.startswith("libibverbs1") or p == "libucx0" for p in pk.packages)
        assert pk.run.startswith("hw_packages yum " if tree == "centos7" else "hw_packages dnf ")


@pytest.mark.parametrize("tree", list(OS_TREES))
@pytest.mark.parametrize("fw,net", [("mpi", "tcp"), ("mpi", "ib"), ("pytorch", "ib")])
def test_no_privilege_means_preset(tree, fw, net):
    plan = build_plan(make_facts(tree, PRIVILEGES["none"]), make_choices(framework=fw, network=net), CATALOG)
    assert plan.recommendation.path == "preset"
    assert "cannot use sudo" in plan.recommendation.reasons[0]
    assert "only way" in plan.recommendation.reasons[0]


@pytest.mark.parametrize("priv", list(PRIVILEGES))
def test_pytorch_tcp_configures_here_for_anyone(priv):
    plan = build_plan(make_facts("rocky9", PRIVILEGES[priv]),
                      make_choices(framework="pytorch", network="tcp"), CATALOG)
    assert plan.recommendation.path == "configure"
    assert not plan.needs_root
    assert any(r.startswith("Nothing needs installing") for r in plan.recommendation.reasons)
