"""build_plan over fixture Facts: OS family × who runs hpcwizard × whose job it is."""
from __future__ import annotations

import dataclasses
import os
import pwd

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.facts import OsInfo, UserInfo
from hpcwizard.plan import build_plan
from hpcwizard.validate import BadInput

from _core_fixtures import (ALICE, DEBIAN_PACKAGES, OSES, RHEL_PACKAGES, ROOT, facts,
                            fake_passwd, patch_users)

CATALOG = load_catalog()
MPI_BASE = next(p for p in CATALOG.presets if p.id == "mpi-base")

USERS = {"root": ROOT, **{f"sudo-{m}": u for m, u in ALICE.items()}}
FAMILY = {"debian12": "debian", "ubuntu2204": "debian", "rocky9": "rhel", "centos7": "rhel",
          "openeuler": "rhel"}


def by_id(plan):
    ids = [s.id for s in plan.steps]
    assert len(ids) == len(set(ids)), f"step ids repeat: {ids}"
    return {s.id: s for s in plan.steps}


@pytest.fixture
def users(monkeypatch):
    """'Other' users the plan may target: bob (non-root) and root."""
    patch_users(monkeypatch, fake_passwd("bob", 1001, "/home/bob"), fake_passwd("root", 0, "/root"))


@pytest.mark.parametrize("target", ["self", "other"])
@pytest.mark.parametrize("who", list(USERS))
@pytest.mark.parametrize("os_key", list(OSES))
def test_plan_matrix(users, os_key, who, target):
    me = USERS[who]
    family = FAMILY[os_key]
    pm = OSES[os_key].package_manager
    wanted = DEBIAN_PACKAGES if family == "debian" else RHEL_PACKAGES
    installed_one = "openmpi-bin" if family == "debian" else "openmpi"
    f = facts(os_key, me, packages={installed_one: "4.1", "bash": "5.2"})
    if target == "self":
        choice_user = ""
    else:
        choice_user = "bob" if me.is_root else "root"
    plan = build_plan(f, make_choices(user=choice_user), CATALOG)
    steps = by_id(plan)
    target_root = plan.target.is_root
    assert target_root == ((who == "root") == (target == "self"))
    assert plan.target.user == (me.name if target == "self" else choice_user)

    # one packages step, first, with the family's names, less what is installed
    pk = [s for s in plan.steps if s.recipe == "packages"]
    assert len(pk) == 1 and plan.steps[0] is pk[0]
    assert pk[0].as_ == "root"
    assert list(pk[0].packages) == [p for p in wanted if p != installed_one]
    assert installed_one not in pk[0].run.split()
    if family == "debian":
        assert {"openssh-client", "bind9-dnsutils"} <= set(pk[0].packages)
        assert "openssh-clients" not in pk[0].packages and "bind-utils" not in pk[0].packages
        assert pk[0].run == "hw_packages apt --lock-timeout 120 " + " ".join(pk[0].packages)
    else:
        assert {"openssh-clients", "bind-utils"} <= set(pk[0].packages)
        assert "openssh-client" not in pk[0].packages and "dnsutils" not in pk[0].packages
        assert pk[0].run == f"hw_packages {pm} " + " ".join(pk[0].packages)
    # one call of the operation; its check and undo are the same call in those modes
    assert pk[0].operation == "hw_packages"
    assert pk[0].check == f"export HW_MODE=check\n{pk[0].run}"
    assert pk[0].undo == f"export HW_MODE=undo\n{pk[0].run}"

    # sshd: system-wide for root, per-user otherwise
    home = plan.target.home
    if target_root:
        assert steps["ssh/host-keys"].as_ == "root"
        assert steps["ssh/host-keys"].run == "hw_ssh_host_keys"
        cfg = steps["ssh/sshd-config"]
        assert (cfg.operation, cfg.as_) == ("hw_sshd_config", "root")
        assert cfg.run.startswith("hw_sshd_config <<'EOF'\nPort ")  # the system sshd's
        assert steps["ssh/sshd-start"].as_ == "root"
        assert "--config" not in steps["ssh/sshd-start"].run  # the system configuration
        assert ".sshd_config" not in steps["ssh/sshd-start"].run
    else:
        assert home.startswith("/home/")
        assert steps["ssh/host-keys"].as_ == "user"
        assert f"{home}/.ssh/hpcwizard_host_ed25519_key" in steps["ssh/host-keys"].run
        cfg = steps["ssh/sshd-config"]
        assert (cfg.operation, cfg.as_) == ("hw_sshd_config", "user")
        assert cfg.run.startswith(f"hw_sshd_config --config {home}/.sshd_config ")
        assert "/etc/ssh" not in cfg.run
        start = steps["ssh/sshd-start"]
        assert start.as_ == "user"
        assert start.run == (f"hw_sshd --port 2222 --config {home}/.sshd_config "
                             f"--pidfile {home}/.ssh/sshd.pid")
    for sid in ("ssh/user-key", "ssh/authorized-keys", "ssh/client-config", "ssh/known-hosts"):
        assert steps[sid].as_ == "user"
        assert home in steps[sid].run
    assert ("openmpi/mpi-path" in steps) == (family == "rhel")

    # recommendation
    rec = plan.recommendation
    if me.sudo == "none" and plan.needs_root:
        assert rec.path == "preset"
        assert rec.preset == MPI_BASE
        assert any(MPI_BASE.image in r for r in rec.reasons)
        assert any("cannot use sudo" in r for r in rec.reasons)
    else:
        assert rec.path == "configure"
        assert any(f"packages to install with {pm}" in r for r in rec.reasons)
    assert plan.os_label == OSES[os_key].pretty_name
    assert not plan.warnings


@pytest.mark.parametrize("os_key", list(OSES))
def test_nothing_installed_lists_every_package(os_key):
    plan = build_plan(facts(os_key, ROOT, packages={}), make_choices(), CATALOG)
    (pk,) = [s for s in plan.steps if s.recipe == "packages"]
    want = DEBIAN_PACKAGES if FAMILY[os_key] == "debian" else RHEL_PACKAGES
    assert pk.packages == want


def test_unknown_installed_packages_means_no_undo():
    plan_f = facts("debian12", ROOT)
    plan_f = dataclasses.replace(plan_f, software=dataclasses.replace(plan_f.software, packages=None))
    pk = by_id(build_plan(plan_f, make_choices(), CATALOG))["packages/install"]
    # unknown to the plan, known to the operation: what its transaction newly installs
    assert pk.packages == DEBIAN_PACKAGES
    assert pk.undo == "export HW_MODE=undo\n" + pk.run
    assert "nothing that was there before" in pk.note


def test_everything_installed_keeps_a_satisfied_packages_step_that_needs_no_root():
    # Kept so that an export made here still installs the packages elsewhere; here its
    # check skips it, it undoes nothing, and it needs no privilege.
    f = facts("debian12", ALICE["none"], packages={p: "1" for p in DEBIAN_PACKAGES})
    plan = build_plan(f, make_choices(), CATALOG)
    (pk,) = [s for s in plan.steps if s.recipe == "packages"]
    assert pk.satisfied and "installed here already" in pk.note
    assert not plan.needs_root or any(s.as_ == "root" and s.recipe != "packages" for s in plan.steps)


@pytest.mark.parametrize("systemd", [True, False])
def test_systemd_picks_the_sshd_start(systemd):
    plan = build_plan(facts("ubuntu2204", ROOT, systemd=systemd), make_choices(), CATALOG)
    start = by_id(plan)["ssh/sshd-start"]
    if systemd:
        assert start.run == "hw_sshd --port 2222 --systemd"
        assert "no systemd" not in start.title
    else:
        assert start.run == "hw_sshd --port 2222"
        assert "no systemd" in start.title


@pytest.mark.parametrize("systemd", [True, False])
def test_per_user_sshd_never_uses_systemctl(systemd):
    f = facts("rocky9", ALICE["nopasswd"], systemd=systemd)
    start = by_id(build_plan(f, make_choices(), CATALOG))["ssh/sshd-start"]
    assert "--systemd" not in start.run
    assert "--config /home/alice/.sshd_config" in start.run


def test_host_keys_off():
    plan = build_plan(facts("debian12", ROOT), make_choices(host_keys="off", peers="job-*"), CATALOG)
    steps = by_id(plan)
    assert "ssh/known-hosts" not in steps
    client = steps["ssh/client-config"]
    assert "StrictHostKeyChecking no" in client.run
    assert "UserKnownHostsFile /dev/null" in client.run
    assert "StrictHostKeyChecking yes" not in client.run
    assert "WARNING" in client.note and "job-*" in client.note
    assert len(plan.warnings) == 1
    assert "not checked" in plan.warnings[0] and "job-*" in plan.warnings[0]


def test_host_keys_pinned():
    plan = build_plan(facts("debian12", ROOT), make_choices(), CATALOG)
    steps = by_id(plan)
    assert "StrictHostKeyChecking yes" in steps["ssh/client-config"].run
    assert "StrictHostKeyChecking no" not in steps["ssh/client-config"].run
    assert "/etc/ssh/ssh_host_ed25519_key.pub" in steps["ssh/known-hosts"].run
    assert plan.warnings == ()


def test_no_root_no_sudo_packages_missing_recommends_preset():
    plan = build_plan(facts("debian12", ALICE["none"], packages={}), make_choices(), CATALOG)
    rec = plan.recommendation
    assert rec.path == "preset"
    assert rec.preset is not None and rec.preset.id == "mpi-base"
    assert any("mpi-base" in r for r in rec.reasons)
    assert plan.to_dict()["recommendation"]["image"] == MPI_BASE.image


def test_no_sudo_everything_installed_self_target_configures():
    f = facts("debian12", ALICE["none"], packages={p: "1" for p in DEBIAN_PACKAGES})
    plan = build_plan(f, make_choices(), CATALOG)
    assert not plan.needs_root
    assert all(s.as_ == "user" or s.satisfied for s in plan.steps)
    assert plan.recommendation.path == "configure"
    assert any("need no root" in r for r in plan.recommendation.reasons)


def test_no_sudo_everything_installed_other_target_needs_root(users):
    f = facts("debian12", ALICE["none"], packages={p: "1" for p in DEBIAN_PACKAGES})
    plan = build_plan(f, make_choices(user="root"), CATALOG)
    assert plan.needs_root
    assert plan.recommendation.path == "preset"


def test_unknown_package_manager_is_a_blocker():
    alpine = OsInfo(id="alpine", version_id="3.20", pretty_name="Alpine Linux v3.20",
                    family="alpine", package_manager="apk")
    plan = build_plan(facts(user=ROOT, os_info=alpine), make_choices(), CATALOG)
    assert not [s for s in plan.steps if s.recipe == "packages"]
    rec = plan.recommendation
    assert any("No supported package manager" in r and "Alpine" in r for r in rec.reasons)
    assert rec.path == "preset"


def test_unknown_package_manager_without_preset_is_still_a_blocker():
    f = facts(user=ROOT, os_info=OsInfo(id="mystery", package_manager=""))
    plan = build_plan(f, make_choices(framework="mpi", network="tcp"),
                      dataclasses.replace(CATALOG, presets=()))
    rec = plan.recommendation
    assert rec.path == "configure" and rec.preset is None
    assert any("No supported package manager" in r and "mystery" in r for r in rec.reasons)
    assert any("likely fail" in r for r in rec.reasons)


def test_unreachable_mirrors_are_a_blocker():
    f = dataclasses.replace(facts("debian12", ROOT), mirrors_reachable=False)
    rec = build_plan(f, make_choices(), CATALOG).recommendation
    assert rec.path == "preset"
    assert any("mirrors cannot be reached" in r for r in rec.reasons)


def test_port_user_and_peers_appear_in_the_steps(users):
    plan = build_plan(facts("rocky9", ROOT),
                      make_choices(user="bob", ssh_port=2345, peers="node-*"), CATALOG)
    steps = by_id(plan)
    assert plan.target.user == "bob" and plan.target.uid == 1001
    assert "\nPort 2345\n" in steps["ssh/sshd-config"].run  # a setting a line
    assert "2345" in steps["ssh/sshd-config"].title and "bob" in steps["ssh/sshd-config"].title
    assert "--port 2345" in steps["ssh/sshd-start"].check
    client = steps["ssh/client-config"].run
    assert "\nHost node-*\n" in client and "\n    Port 2345\n" in client
    assert "--in-effect 'ssh -G -- node-hpcwizard-peer'" in client
    assert "/home/bob/.ssh/id_ed25519" in client
    assert "bob@hpcwizard" in steps["ssh/user-key"].run
    assert "/home/bob/.ssh/hpcwizard_host_ed25519_key.pub" in steps["ssh/known-hosts"].run
    assert "2345" in steps["ssh/known-hosts"].run
    assert "2222" not in "".join(s.run + s.check for s in plan.steps)
    assert "{{" not in "".join(s.run + s.check + s.undo + s.title + s.note for s in plan.steps)


def test_self_target_is_the_current_process_user():
    pw = pwd.getpwuid(os.getuid())
    me = UserInfo(name=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid, home=pw.pw_dir,
                  sudo="root" if pw.pw_uid == 0 else "nopasswd")
    plan = build_plan(facts("debian12", me), make_choices(user=pw.pw_name), CATALOG)
    assert (plan.target.user, plan.target.uid, plan.target.home) == (pw.pw_name, pw.pw_uid, pw.pw_dir)
    run = by_id(plan)["ssh/sshd-config"].run
    assert ("--config" in run) == (pw.pw_uid != 0)


def test_unknown_user_is_bad_input(users):
    with pytest.raises(BadInput) as exc:
        build_plan(facts("debian12", ROOT), make_choices(user="ghost"), CATALOG)
    assert "'ghost'" in str(exc.value) and "does not exist" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_home_with_shell_characters_is_bad_input(monkeypatch):
    patch_users(monkeypatch, fake_passwd("eve", 1002, "/home/eve; rm -rf ~"))
    with pytest.raises(BadInput):
        build_plan(facts("debian12", ROOT), make_choices(user="eve"), CATALOG)


@pytest.mark.parametrize("raw", [{"ssh_port": 0}, {"ssh_port": 70000}, {"ssh_port": "22; id"},
                                 {"user": "Bob Smith"}, {"peers": "a,b"}, {"peers": "a\tb"}, {"framework": "spark"},
                                 {"host_keys": "maybe"}])
def test_bad_choices_are_bad_input(raw):
    with pytest.raises(BadInput):
        make_choices(**raw)


def test_plan_to_dict_is_plain_data():
    import json

    plan = build_plan(facts("debian12", ROOT), make_choices(), CATALOG)
    d = json.loads(json.dumps(plan.to_dict()))
    assert [s["id"] for s in d["steps"]] == [s.id for s in plan.steps]
    assert d["choices"]["ssh_port"] == 2222


def test_alternatives_are_missing_only_when_none_of_them_is_installed():
    from hpcwizard.plan import install_step

    group = "systemd-standalone-sysusers|systemd|systemd-sysusers"
    step = install_step("apt", ("nano", group), {"nano": "7", "systemd": "257"})
    assert step.satisfied and step.packages == ("nano", group)
    step = install_step("apt", ("nano", group), {"nano": "7", "systemd-sysusers": "257"})
    assert step.satisfied
    step = install_step("apt", ("nano", group), {"nano": "7"})
    assert not step.satisfied and step.packages == (group,)
    assert f"'{group}'" in step.run  # one word for the shell, as the plan shows it
