"""Issue 15: the SSH client settings are for the job's hosts only. default_peers for every
source (the platform's host list, this host's name, '*' with a warning), the plan that uses
it (the record keeps it; '*' is a warning), and the real thing: the plan's client-config
block applied by the operations library to a user's ~/.ssh/config in a temporary home and
read back with the real `ssh -G -F` (github.com byte for byte as before, a peer with the
job's settings, undo byte for byte), its known_hosts line read back with `ssh-keygen -F`."""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Optional

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import UserInfo
from hpcwizard.peers import (MAX_PATTERNS, compact, default_peers, every_host, pattern_list,
                             resolve_peers)
from hpcwizard.ops import checked, undo_call
from hpcwizard.plan import build_plan, peer_sample
from hpcwizard.recipes import __file__ as _recipes_init
from hpcwizard.validate import BadInput

from _ib_fixtures import PRIVILEGES, make_facts

OPS = Path(_recipes_init).with_name("ops.sh")
MPI = dict(framework="mpi", network="tcp", mode="manual")


def ssh_matches(patterns: str, host: str) -> bool:
    """ssh_config's Host rule for patterns without '!': any pattern matches, '*' any text,
    '?' one character, case ignored (the host names here have no '[')."""
    return any(fnmatch.fnmatchcase(host.lower(), p.lower()) for p in patterns.split(" "))


# --- the platform's host names --------------------------------------------------------------

@pytest.mark.parametrize("env, pattern, source", [
    ({"HOSTS": "job-worker-{0..15}"}, "job-worker-*", "HOSTS, 16 hosts"),
    ({"HOSTS": "node1,node2,node3"}, "node?", "HOSTS, 3 hosts"),
    ({"HOSTS": "alpha beta"}, "alpha beta", "HOSTS, 2 hosts"),
    ({"HOSTS": "10.0.0.5,10.0.0.6,10.0.1.7"}, "10.0.0.* 10.0.1.7", "HOSTS, 3 hosts"),
    ({"SLURM_JOB_NODELIST": "gpu-[001-128]"}, "gpu-*", "SLURM_JOB_NODELIST, 128 hosts"),
    ({"SLURM_NODELIST": "node[1-16]"}, "node? node??", "SLURM_NODELIST, 16 hosts"),
    ({"SLURM_JOB_NODELIST": "rack[1-2]-n[1-2]"}, "rack1-n? rack2-n?", "4 hosts"),
    ({"VC_MASTER_HOSTS": "job-master-0.job", "VC_WORKER_HOSTS": "job-worker-0.job,job-worker-1.job"},
     "job-master-0.job job-worker-*.job", "VC_MASTER_HOSTS, VC_WORKER_HOSTS, 3 hosts"),
    ({"MASTER_ADDR": "job-master-0", "WORLD_SIZE": "5"}, "job-master-0 job-worker-*",
     "MASTER_ADDR and WORLD_SIZE (Kubeflow naming"),
    ({"MASTER_ADDR": "trainer-0", "WORLD_SIZE": "4"}, "trainer-*", "4 hosts"),
    ({"MASTER_ADDR": "solo", "WORLD_SIZE": "1"}, "solo", "MASTER_ADDR and WORLD_SIZE, 1 host"),
])
def test_the_platforms_hosts_make_the_pattern(env, pattern, source):
    from hpcwizard.runtime import from_environment

    peers = default_peers(env, "unrelated-name-9")
    assert peers.pattern == pattern
    assert source in peers.source and not peers.warning
    for name in from_environment(env).names:  # every host of the job, and not github.com
        assert ssh_matches(peers.pattern, name), name
    assert not ssh_matches(peers.pattern, "github.com")


@pytest.mark.parametrize("var", ["HOSTFILE", "OMPI_MCA_orte_default_hostfile"])
def test_a_hostfile_makes_the_pattern(var, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node01 slots=8\nnode02 slots=8\n# spare\nnode10 slots=8\n")
    peers = default_peers({var: str(hostfile)}, "node01")
    assert peers.pattern == "node??"
    assert peers.source == f"{var}={hostfile}, 3 hosts"


def test_the_platforms_hosts_come_before_this_hosts_name():
    assert default_peers({"HOSTS": "a-1,a-2"}, "job-abc-worker-3").pattern == "a-*"


def test_a_set_but_unreadable_variable_is_refused_naming_it_and_peers():
    with pytest.raises(BadInput) as exc:
        default_peers({"HOSTS": "node1;touch /tmp/x"}, "node1")
    message = str(exc.value)
    assert message.startswith("HOSTS: ") and "--peers" in message and "\n" not in message
    assert exc.value.field == "peers"


def test_too_many_patterns_fall_back_to_this_hosts_name():
    names = [f"h{a}{b}x" for a in "abcdefg" for b in "abcdef"]  # 42 names, no number
    peers = default_peers({"HOSTS": ",".join(names)}, "gpu-node-7")
    assert peers.pattern == "gpu-node-*"
    assert "42 hosts of HOSTS have no short pattern" in peers.source and not peers.warning
    assert default_peers({"HOSTS": ",".join(names)}, "c0ffee").pattern == "*"
    assert "git over ssh" in default_peers({"HOSTS": ",".join(names)}, "c0ffee").warning


def test_compact_keeps_the_order_and_one_name_alone_as_it_is():
    assert compact(["job-master-0", "job-worker-0", "job-worker-1", "login"]) == [
        "job-master-0", "job-worker-*", "login"]
    assert compact(["node", "node1", "node2"]) == ["node", "node?"]


# --- this instance's own name ----------------------------------------------------------------

@pytest.mark.parametrize("hostname, pattern, source", [
    ("job-abc-worker-3", "job-abc-worker-*", "this host's name job-abc-worker-3"),
    ("node07", "node*", "this host's name node07"),
    ("gpu-node-7", "gpu-node-*", "this host's name gpu-node-7"),
    ("node07.cluster.example.com", "node*.cluster.example.com", "this host's name"),
    ("trainer-5d8f9-x2kqp", "trainer-5d8f9-*", "this host's name"),  # a pod's random suffix
    ("box.lab.example.com", "*.lab.example.com", "this host's domain (host name box.lab"),
    ("10.0.0.5", "10.0.0.*", "this host's address 10.0.0.5"),
])
def test_this_hosts_name_makes_the_pattern(hostname, pattern, source):
    peers = default_peers({}, hostname)
    assert peers.pattern == pattern
    assert source in peers.source
    # a domain or an address block holds more than the job: the plan says so
    wide = source.startswith(("this host's domain", "this host's address"))
    assert bool(peers.warning) == wide
    if wide:
        assert f"apply to '{pattern}'" in peers.warning and "--peers" in peers.warning
    assert ssh_matches(peers.pattern, hostname)
    assert not ssh_matches(peers.pattern, "github.com")


@pytest.mark.parametrize("hostname", ["c0ffee", "localhost", "", "0123456789ab", "n1",
                                      "myhost.localdomain", "bad_name!", "my-laptop"])
def test_a_host_name_without_a_pattern_is_every_host_with_a_warning(hostname):
    peers = default_peers({}, hostname)
    assert peers.pattern == "*"
    assert "git over ssh" in peers.warning and "--peers" in peers.warning
    if hostname:
        assert repr(hostname) in peers.warning  # says which name had no pattern
    else:  # no /etc/hostname in a sysroot: not "the host name ''"
        assert "this host's name is unknown" in peers.warning and "''" not in peers.warning
        assert "''" not in peers.source and "unknown" in peers.source


# --- what the user gives --------------------------------------------------------------------

def test_a_given_list_is_checked_and_its_spaces_normalised():
    assert pattern_list("  job-worker-*   node1 ") == "job-worker-* node1"
    assert pattern_list("") == ""
    for bad in ("job-*,node1", "job-*\tnode1", "job-*\nMatch all", "!job-*", "a'b",
                " ".join(f"n{i}" for i in range(MAX_PATTERNS + 1))):
        with pytest.raises(BadInput) as exc:
            pattern_list(bad)
        assert exc.value.field == "peers" and "\n" not in str(exc.value)


def test_every_host_is_a_pattern_of_wildcards_only():
    assert every_host("*") and every_host("?*") and every_host("job-* *")
    assert not every_host("job-*") and not every_host("*.example.com") and not every_host("??")


def test_resolve_peers():
    env = {"HOSTS": "job-worker-{0..3}"}
    derived = resolve_peers("", env, "node1")
    assert derived.pattern == "job-worker-*" and derived.source.startswith("HOSTS")
    # what the wizard's field starts with, passed back: still says where it is from
    assert resolve_peers("job-worker-*", env, "node1") == derived
    other = resolve_peers("node-*", env, "node1")
    assert (other.pattern, other.source, other.warning) == ("node-*", "your choice (--peers)", "")
    assert "git over ssh" in resolve_peers("*", env, "node1").warning
    # given peers do not need the platform's variables
    assert resolve_peers("node-*", {"HOSTS": "a;b"}, "node1").pattern == "node-*"


@pytest.mark.parametrize("pattern", ["job-*", "job-worker-* node1", "node?? node?",
                                     "*.example.com", "node1", "*"])
def test_peer_sample_is_a_host_the_list_matches(pattern):
    assert ssh_matches(pattern, peer_sample(pattern))


# --- the plan -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_the_plan_uses_and_keeps_the_derived_peers(catalog):
    env = {"SLURM_JOB_NODELIST": "node[01-16]"}
    plan = build_plan(make_facts(), make_choices(**MPI), catalog, env=env)
    assert plan.choices.peers == "node??"
    assert plan.to_dict()["choices"]["peers"] == "node??"  # what the record keeps
    steps = {s.id: s for s in plan.steps}
    client = steps["ssh/client-config"]
    assert "\nHost node??\n" in client.run and "--in-effect 'ssh -G -- nodexx'" in client.run
    assert "from SLURM_JOB_NODELIST, 16 hosts" in client.note
    assert "SLURM_JOB_NODELIST" in client.i18n["zh"]["note"]
    assert "'[node??]:2222,[127.0.0.1]:2222'" in steps["ssh/known-hosts"].run
    assert not any("git over ssh" in w for w in plan.warnings)
    # replay and verify build the plan again from the record's choices: the same steps,
    # wherever they run (no platform variable there)
    again = build_plan(make_facts(), make_choices(**plan.choices.to_dict()), catalog, env={})
    assert [s.run for s in again.steps] == [s.run for s in plan.steps]


def test_the_plan_warns_when_the_peers_are_every_host(catalog):
    plan = build_plan(make_facts(), make_choices(**MPI, peers="*"), catalog, env={})
    assert any("every host ('*')" in w and "git over ssh" in w for w in plan.warnings)
    found = build_plan(dataclasses.replace(make_facts(), hostname="c0ffee"), make_choices(**MPI),
                       catalog, env={})
    assert found.choices.peers == "*"
    assert any("'c0ffee' has no naming pattern" in w for w in found.warnings)
    # a sysroot without /etc/hostname: no name, not "the host name ''"
    unnamed = build_plan(dataclasses.replace(make_facts(), hostname=""), make_choices(**MPI),
                         catalog, env={})
    assert unnamed.choices.peers == "*"
    assert any("this host's name is unknown" in w for w in unnamed.warnings)
    assert not any("''" in w for w in unnamed.warnings), unnamed.warnings
    named = build_plan(make_facts(), make_choices(**MPI), catalog, env={})
    assert named.choices.peers == "node*" and not any("'*'" in w for w in named.warnings)


def test_host_keys_off_warns_naming_the_peers_used(catalog):
    plan = build_plan(make_facts(), make_choices(**MPI, host_keys="off"), catalog,
                      env={"HOSTS": "job-worker-{0..3}"})
    assert any("answering to 'job-worker-*'" in w for w in plan.warnings)


def test_an_unreadable_variable_stops_an_mpi_plan_but_not_a_pytorch_one(catalog):
    env = {"HOSTS": "node1;reboot"}
    with pytest.raises(BadInput) as exc:
        build_plan(make_facts(), make_choices(**MPI), catalog, env=env)
    assert "HOSTS" in str(exc.value) and exc.value.field == "peers"
    plan = build_plan(make_facts(), make_choices(framework="pytorch", network="tcp"), catalog,
                      env=env)
    assert plan.choices.peers == ""  # PyTorch gets no SSH settings, so no peers either


def test_the_cli_refuses_peers_for_pytorch_only_when_given():
    from hpcwizard.cli import build_parser
    from hpcwizard.commands.configure import _choices

    parse = build_parser().parse_args
    assert _choices(parse(["plan", "--framework", "pytorch", "--network", "tcp"])).peers == ""
    assert _choices(parse(["plan", "--framework", "mpi", "--network", "tcp"])).peers == ""
    for given in ("*", ""):
        with pytest.raises(BadInput, match="--peers"):
            _choices(parse(["plan", "--framework", "pytorch", "--network", "tcp",
                            "--peers", given]))


# --- for real: ssh -G and ssh-keygen -F on a temporary home ---------------------------------

needs_ssh = pytest.mark.skipif(not (shutil.which("ssh") and shutil.which("ssh-keygen")),
                               reason="openssh-client is not installed")


def plan_for_home(home: Path, catalog, peers: str = "", port: int = 2222,
                  env: Optional[Dict[str, str]] = None):
    """The plan of a job user whose home is home (the facts' own user: no passwd entry)."""
    user = dataclasses.replace(PRIVILEGES["sudo"], home=str(home))
    return build_plan(make_facts("debian12", user), make_choices(**MPI, peers=peers,
                                                                 ssh_port=port),
                      catalog, env=env if env is not None else {"HOSTS": "job-worker-{0..15}"})


def ops(call: str, home: Path) -> subprocess.CompletedProcess:
    """A step's call as apply runs it: the library, then the call (its check and undo set
    HW_MODE themselves), under bash -euo pipefail; HOME and the state directory in the
    test's tree."""
    env = dict(os.environ, HOME=str(home), HW_STATE=str(home.parent / "state"), HW_MODE="run")
    return subprocess.run(["bash", "-euo", "pipefail", "-c", f". {OPS}\n{call}"],
                          capture_output=True, text=True, env=env, cwd=str(home), timeout=60)


def ssh_g(config: Path, host: str) -> bytes:
    """`ssh -G` for host with config alone: -F leaves out /etc/ssh/ssh_config, and the real
    ~/.ssh/config is never read."""
    r = subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def settings(output: bytes) -> Dict[str, list]:
    out: Dict[str, list] = {}
    for line in output.decode().splitlines():
        key, _sep, value = line.partition(" ")
        out.setdefault(key, []).append(value)
    return out


def client_call(plan, config: Path) -> str:
    """The plan's client-config call, its in-effect check pointed at config (-F): the same
    block, the same check, without the real ~/.ssh/config."""
    run = next(s.run for s in plan.steps if s.id == "ssh/client-config")
    pointed = run.replace("--in-effect 'ssh -G ", f"--in-effect 'ssh -G -F {config} ", 1)
    assert pointed != run, run
    return pointed


USER_CONFIGS = {
    "a-host-block": b"Host github.com\n    User git\n    IdentityFile ~/.ssh/github\n",
    "host-star-port-22-first": b"Host *\n    Port 22\n    ServerAliveInterval 30\n"
                               b"Host github.com\n    User git\n",
    "global-options-no-final-newline": b"User alice\nServerAliveInterval 60\nCompression yes\n"
                                       b"Host github.com\n    IdentityFile ~/.ssh/gh",
}


@needs_ssh
@pytest.mark.parametrize("case", list(USER_CONFIGS))
def test_ssh_sees_the_settings_for_peers_only_and_undo_gives_the_file_back(case, tmp_path,
                                                                            catalog):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    config = home / ".ssh" / "config"
    config.write_bytes(USER_CONFIGS[case])
    config.chmod(0o600)
    github_before = ssh_g(config, "github.com")
    worker_before = settings(ssh_g(config, "job-worker-3"))
    plan = plan_for_home(home, catalog)
    assert plan.choices.peers == "job-worker-*"
    call = client_call(plan, config)

    applied = ops(call, home)
    assert applied.returncode == 0, applied.stderr
    assert ssh_g(config, "github.com") == github_before  # byte for byte
    worker = settings(ssh_g(config, "job-worker-3"))
    assert worker["port"] == ["2222"] and worker["batchmode"] == ["yes"]
    assert worker["stricthostkeychecking"] == ["true"]
    assert worker["identityfile"][0] == f"{home}/.ssh/id_ed25519"
    if case == "global-options-no-final-newline":  # the user's options: every host still
        github = settings(github_before)
        assert github["user"] == ["alice"] and github["serveraliveinterval"] == ["60"]
        assert worker["user"] == ["alice"] and worker["compression"] == ["yes"]
    if case == "host-star-port-22-first":
        assert settings(github_before)["port"] == ["22"] and worker_before["port"] == ["22"]
    assert ops(checked(call), home).returncode == 0  # done: apply again changes nothing

    undone = ops(undo_call(call), home)
    assert undone.returncode == 0, undone.stderr
    assert config.read_bytes() == USER_CONFIGS[case]
    assert settings(ssh_g(config, "job-worker-3")) == worker_before


@needs_ssh
def test_ssh_sees_the_settings_for_every_pattern_of_a_list(tmp_path, catalog):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    config = home / ".ssh" / "config"
    plan = plan_for_home(home, catalog, env={"MASTER_ADDR": "job-master-0", "WORLD_SIZE": "3"})
    assert plan.choices.peers == "job-master-0 job-worker-*"
    assert ops(client_call(plan, config), home).returncode == 0
    for host in ("job-master-0", "job-worker-1"):
        assert settings(ssh_g(config, host))["port"] == ["2222"], host
    for host in ("job-master-1", "github.com", "gitlab.example.com"):
        assert settings(ssh_g(config, host))["port"] == ["22"], host


def known_hosts_for(tmp_path: Path, catalog, **plan_kw) -> Path:
    """The plan's known-hosts step run for real, with a host key made for the test."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "hpcwizard_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "host", "-f", str(key)],
                   check=True, timeout=60)
    plan = plan_for_home(home, catalog, **plan_kw)
    step = next(s for s in plan.steps if s.id == "ssh/known-hosts")
    assert f" -f1,2 {key}.pub)\" | hw_block " in step.run
    r = ops(step.run, home)
    assert r.returncode == 0, r.stderr
    return home / ".ssh" / "known_hosts"


def known(known_hosts: Path, host: str) -> bool:
    r = subprocess.run(["ssh-keygen", "-F", host, "-f", str(known_hosts)], capture_output=True,
                       timeout=30)
    return r.returncode == 0


@needs_ssh
def test_known_hosts_pins_the_key_for_the_peers_on_the_port_only(tmp_path, catalog):
    kh = known_hosts_for(tmp_path, catalog, peers="job-worker-* node1")
    line = next(l for l in kh.read_text().splitlines() if not l.startswith("#"))
    assert line.startswith("[job-worker-*]:2222,[node1]:2222,[127.0.0.1]:2222 ssh-ed25519 ")
    assert known(kh, "[job-worker-3]:2222") and known(kh, "[node1]:2222")
    assert known(kh, "[127.0.0.1]:2222")  # this instance itself, where verify logs in
    for other in ("[github.com]:2222", "[job-worker-3]:22", "job-worker-3", "[node2]:2222"):
        assert not known(kh, other), other


@needs_ssh
def test_known_hosts_on_port_22_uses_the_bare_names(tmp_path, catalog):
    kh = known_hosts_for(tmp_path, catalog, peers="job-worker-*", port=22)
    assert known(kh, "job-worker-3")  # ssh looks a host on port 22 up by its name alone
    assert not known(kh, "github.com")


# --- the wizard's Instances field -----------------------------------------------------------

@pytest.mark.parametrize("env, value, hint", [
    ({}, "gpu-node-*", "from this host's name gpu-node-7"),
    ({"HOSTS": "job-worker-{0..3}"}, "job-worker-*", "from HOSTS, 4 hosts"),
    ({"HOSTS": "node1;reboot"}, "", "HOSTS: host name 'node1;reboot' is not valid"),
])
def test_the_instances_field_starts_with_the_derived_peers(env, value, hint, tmp_path,
                                                           monkeypatch):
    pytest.importorskip("textual")
    import asyncio

    from textual.widgets import Input, Static

    from _tui_fixtures import gpu_ib, make_app, text_of, to_choose, wait_for

    for key, text in env.items():
        monkeypatch.setenv(key, text)
    app = make_app(tmp_path, facts=gpu_ib())

    async def go():
        async with app.run_test(size=(100, 30)) as pilot:
            await to_choose(pilot)
            field = app.screen.query_one("#peers", Input)
            shown = (field.value, text_of(app.screen.query_one("#peers-hint", Static)))
            field.value = "job-* login1"  # the user's edit is what the plan uses
            await pilot.press("ctrl+n")
            await wait_for(pilot, lambda: app.plan is not None)
            return shown, app.plan.choices.peers

    (shown_value, shown_hint), planned = asyncio.run(go())
    assert shown_value == value
    assert hint in shown_hint and "\n" not in shown_hint.strip()
    assert planned == "job-* login1"
