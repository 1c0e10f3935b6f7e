"""Issue 17: for MPI over InfiniBand, a step writes the job user's ~/.openmpi/mca-params.conf
so that any mpirun (a job script's too) asks for UCX, not only the launch script's. The plan
has it only for mpi + ib; its text is one for Open MPI 4.x, 5.x and a version not known yet;
the real step text runs here with the operations library on a home under tmp_path, with an
ompi_info stand-in (tests/system/test_system_mca_params.py runs Debian's real one)."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from hpcwizard import ops
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import UserInfo
from hpcwizard.plan import build_plan

from _ib_fixtures import PRIVILEGES, ROOT, make_facts

CATALOG = load_catalog()
STEP = "openmpi-ucx/mca-params"
WANTED = ("pml = ucx", "osc = ucx", "btl = ^openib,uct,ofi")

# What ompi_info --parsable --all says of the selection settings: the value the user's file
# gives, else Debian's system file's (enough for the step's in-effect check; the real
# precedence is the system test's to prove). $FAKE_PML_ENV stands for OMPI_MCA_pml in the
# environment, which outranks every file.
FAKE_OMPI_INFO = r"""#!/bin/bash
f="$HOME/.openmpi/mca-params.conf"
for fw in pml osc btl; do
  case $fw in pml) v='^ucx' ;; osc) v='^ucx,pt2pt' ;; btl) v='^uct,openib,ofi' ;; esac
  if [ -f "$f" ]; then
    mine=$(sed -n "s/^$fw = //p" "$f" | tail -n 1)
    [ -z "$mine" ] || v=$mine
  fi
  if [ "$fw" = pml ] && [ -n "${FAKE_PML_ENV:-}" ]; then v=$FAKE_PML_ENV; fi
  echo "mca:$fw:base:param:$fw:value:$v"
  echo "mca:$fw:base:param:${fw}_base_verbose:value:error"
done
"""


def plan_for(facts, **choices):
    return build_plan(facts, make_choices(**choices), CATALOG)


def step_of(plan):
    return next((s for s in plan.steps if s.id == STEP), None)


def user(home: Path) -> UserInfo:
    return UserInfo(name="alice", uid=os.geteuid(), gid=os.getegid(), home=str(home),
                    sudo="none")


# --- the plan ---------------------------------------------------------------------------

@pytest.mark.parametrize("framework,network", [("mpi", "tcp"), ("pytorch", "ib"),
                                               ("pytorch", "tcp")])
def test_only_mpi_over_infiniband_gets_the_step(framework, network):
    plan = plan_for(make_facts("debian12"), framework=framework, network=network)
    assert step_of(plan) is None
    assert not any("mca-params.conf" in s.run for s in plan.steps)


@pytest.mark.parametrize("tree", ["debian12", "ubuntu2204", "rocky9"])
def test_mpi_over_infiniband_gets_a_block_in_the_users_own_file(tree):
    plan = plan_for(make_facts(tree, PRIVILEGES["sudo"]), framework="mpi", network="ib")
    step = step_of(plan)
    assert step is not None and step.as_ == "user" and step.kind == "block"
    assert step.run.startswith("hw_block /home/alice/.openmpi/mca-params.conf --mode 0644 ")
    body = step.run.split("<<'EOF'\n", 1)[1].splitlines()
    assert [line for line in body if not line.startswith("#")] == [*WANTED, "EOF"]
    # after the check that Open MPI has UCX, and after the packages step that installs it
    ids = [s.id for s in plan.steps]
    assert ids.index("packages/install") < ids.index("openmpi-ucx/pml-ucx") < ids.index(STEP)
    # undo takes back the block whatever it held: no contents
    assert "<<" not in step.undo and "HW_MODE=undo" in step.undo
    # nothing in PRRTE's file: pml/osc/btl are Open MPI's own, the ssh args stay on mpirun's line
    assert not any(".prte" in s.run for s in plan.steps)
    assert "plm_rsh_args" in plan.mpirun_args


def test_root_target_writes_roots_own_file():
    step = step_of(plan_for(make_facts("debian12", ROOT), framework="mpi", network="ib"))
    assert step.run.startswith("hw_block /root/.openmpi/mca-params.conf ")


def test_ompi_info_of_rhel_is_looked_for_where_rhel_installs_it():
    debian = step_of(plan_for(make_facts("debian12"), framework="mpi", network="ib"))
    rocky = step_of(plan_for(make_facts("rocky9"), framework="mpi", network="ib"))
    assert "--in-effect 'ompi_info --parsable --all" in debian.run
    assert "--in-effect 'PATH=/usr/lib64/openmpi/bin:$PATH ompi_info --parsable --all" in rocky.run


@pytest.mark.parametrize("version", ["4.1.4", "4.0.3", "5.0.7", ""])
def test_one_text_for_open_mpi_4_and_5_and_a_version_not_known_yet(version):
    """Decided once for both (the note says why): btl ^openib is 4.x's, and an exclusion
    naming a component 5.x does not have is no error in Open MPI's component search."""
    unknown = step_of(plan_for(make_facts("debian12"), framework="mpi", network="ib"))
    software = {"mpi_flavour": "openmpi", "mpi_version": version} if version else {}
    facts = make_facts("debian12", **software, ompi_pml=("ob1", "ucx") if version else ())
    assert facts.software.ompi_major == (int(version[0]) if version else None)
    step = step_of(plan_for(facts, framework="mpi", network="ib"))
    assert step.run == unknown.run
    assert "4.x and 5.x" in step.note and "btl ^openib" in step.note


def test_the_note_says_the_user_file_wins_and_the_system_file_stays():
    step = step_of(plan_for(make_facts("debian12", PRIVILEGES["sudo"]), framework="mpi",
                            network="ib"))
    assert "/home/alice/.openmpi/mca-params.conf before /etc/openmpi/openmpi-mca-params.conf" \
        in step.note
    assert "highest precedence" in step.note and "system file is left alone" in step.note
    assert step.i18n["zh"]["note"] and "alice" in step.i18n["zh"]["title"]
    check = next(s for s in plan_for(make_facts("debian12"), framework="mpi",
                                     network="ib").steps if s.id == "openmpi-ucx/pml-ucx")
    assert "still left alone" in check.note and "mca-params.conf" in check.note


# --- the step's text, run with the operations library -----------------------------------

@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home" / "alice"
    h.mkdir(parents=True)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ompi_info").write_text(FAKE_OMPI_INFO)
    (fake / "ompi_info").chmod(0o755)
    return h


def texts(home: Path) -> "tuple[str, str, str]":
    step = step_of(plan_for(make_facts("debian12", user(home)), framework="mpi", network="ib"))
    return step.check, step.run, step.undo


def run(home: Path, text: str, **env: str):
    full = dict(os.environ, HOME=str(home), HW_STATE=str(home.parent.parent / "state"),
                PATH=f"{home.parent.parent / 'bin'}:{os.environ['PATH']}", **env)
    full.pop("OMPI_MCA_pml", None)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", ops.runnable(text)], env=full,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)


def tree(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (
            stat.S_IMODE(st.st_mode), os.readlink(p) if p.is_symlink()
            else p.read_bytes() if p.is_file() else "dir")
    return out


def test_absent_before_absent_after_directory_included(home: Path):
    check, text, undo = texts(home)
    assert run(home, check).returncode != 0
    done = run(home, text)
    assert done.returncode == 0, done.stderr
    conf = home / ".openmpi" / "mca-params.conf"
    lines = conf.read_text().splitlines()
    assert lines[0] == "# BEGIN hpcwizard" and lines[-1] == "# END hpcwizard"
    assert all(w in lines for w in WANTED)
    assert run(home, check).returncode == 0
    again = run(home, text)
    assert again.returncode == 0 and conf.read_text().splitlines() == lines
    back = run(home, undo)
    assert back.returncode == 0, back.stderr
    assert not (home / ".openmpi").exists(), "undo left the ~/.openmpi it made"


def test_a_users_own_lines_stay_through_apply_and_undo(home: Path):
    (home / ".openmpi").mkdir(mode=0o755)
    conf = home / ".openmpi" / "mca-params.conf"
    mine = b"# my settings\nmpi_show_mca_params = enviro\nbtl_tcp_if_include = eth0"  # no final newline
    conf.write_bytes(mine)
    conf.chmod(0o640)
    before = tree(home)
    check, text, undo = texts(home)
    done = run(home, text)
    assert done.returncode == 0, done.stderr
    now = conf.read_text()
    assert now.startswith(mine.decode() + "\n# BEGIN hpcwizard\n") and "pml = ucx\n" in now
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640
    assert run(home, undo).returncode == 0
    assert tree(home) == before, "undo did not give back the file byte for byte"


def test_settings_not_in_effect_fail_the_step_and_change_nothing(home: Path):
    """OMPI_MCA_pml in the environment outranks every file: the step says so and puts the
    file back (here: none, and no ~/.openmpi)."""
    _, text, _ = texts(home)
    before = tree(home)
    failed = run(home, text, FAKE_PML_ENV="ob1")
    assert failed.returncode != 0
    assert "pml is '= ob1' in effect, not '= ucx'" in failed.stderr
    assert tree(home) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file another user owns")
def test_a_link_to_another_users_file_is_refused_in_one_line(home: Path, tmp_path: Path):
    other = tmp_path / "elsewhere.conf"
    other.write_bytes(b"pml = ob1\n")
    os.chown(other, 54321, 54321)
    (home / ".openmpi").mkdir()
    (home / ".openmpi" / "mca-params.conf").symlink_to(other)
    state = tmp_path / "state"
    before = tree(home), other.read_bytes(), state.exists()
    _, text, _ = texts(home)
    refused = run(home, text)
    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: ") \
        and "leads to " + str(other) in lines[0] and "nothing was changed" in lines[0], lines
    assert (tree(home), other.read_bytes(), state.exists()) == before


def test_a_link_to_the_users_own_file_is_followed(home: Path, tmp_path: Path):
    dotfiles = home / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "mca-params.conf").write_text("mpi_show_mca_params = enviro\n")
    (home / ".openmpi").mkdir()
    (home / ".openmpi" / "mca-params.conf").symlink_to(dotfiles / "mca-params.conf")
    before = tree(home)
    _, text, undo = texts(home)
    assert run(home, text).returncode == 0
    assert (home / ".openmpi" / "mca-params.conf").is_symlink()
    assert "pml = ucx" in (dotfiles / "mca-params.conf").read_text()
    assert run(home, undo).returncode == 0
    assert tree(home) == before
