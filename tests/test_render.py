"""The rendered shell text of each step kind, run for real with bash on files in tmp_path:
check before/after, idempotent run, exact undo, validation that puts the old file back.
And shellcheck over every rendered text of several plans."""
from __future__ import annotations

import os
import stat

import pytest

from hpcwizard import render
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.plan import build_plan

from _core_fixtures import ALICE, ROOT, bash, facts, fake_passwd, patch_users, shellcheck

CONTENT = "Port 2345\nPasswordAuthentication no\nHost 'quoted' $HOME `x`\n"
INCLUDE = r"^[[:space:]]*Include[[:space:]]+/etc/ssh/sshd_config\.d/\*\.conf"


def check(text: str) -> bool:
    return bash(text, strict=False).returncode == 0


def run_ok(text: str) -> None:
    r = bash(text)
    assert r.returncode == 0, r.stderr


def listing(d):
    return sorted(os.listdir(d))


# --- file -------------------------------------------------------------------------------

def test_file_new(tmp_path):
    path = tmp_path / "sub" / "x.conf"
    r = render.render("file", path=str(path), content=CONTENT, mode="0600")
    assert not check(r.check)
    run_ok(r.run)
    assert path.read_bytes() == CONTENT.encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert check(r.check)
    run_ok(r.undo)
    assert not path.exists()
    assert listing(path.parent) == []
    assert not check(r.check)


def test_file_new_run_twice_same_bytes(tmp_path):
    path = tmp_path / "x.conf"
    r = render.render("file", path=str(path), content=CONTENT, mode="0600")
    run_ok(r.run)
    before = path.read_bytes()
    run_ok(r.run)
    assert path.read_bytes() == before == CONTENT.encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert check(r.check)


def test_file_new_run_twice_then_undo_removes_it(tmp_path):
    path = tmp_path / "x.conf"
    r = render.render("file", path=str(path), content=CONTENT, mode="0600")
    run_ok(r.run)
    run_ok(r.run)
    # The marker says hpcwizard created the file; no backup of its own file is made.
    assert listing(tmp_path) == ["x.conf", "x.conf.hpcwizard-new"]
    run_ok(r.undo)
    assert listing(tmp_path) == []


def test_file_check_notices_wrong_mode(tmp_path):
    path = tmp_path / "x.conf"
    r = render.render("file", path=str(path), content=CONTENT, mode="0600")
    run_ok(r.run)
    os.chmod(path, 0o644)
    assert not check(r.check)
    run_ok(r.run)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert check(r.check)


@pytest.mark.parametrize("original", [b"old\ncontent\n", b"old\nno newline", b""])
def test_file_restores_pre_existing_file_exactly(tmp_path, original):
    path = tmp_path / "x.conf"
    path.write_bytes(original)
    os.chmod(path, 0o640)
    r = render.render("file", path=str(path), content=CONTENT, mode="0600")
    assert not check(r.check)
    run_ok(r.run)
    assert path.read_bytes() == CONTENT.encode()
    assert check(r.check)
    run_ok(r.run)  # second run keeps the first backup (the original), not our content
    assert (tmp_path / "x.conf.hpcwizard-orig").read_bytes() == original
    run_ok(r.undo)
    assert path.read_bytes() == original
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert listing(tmp_path) == ["x.conf"]


def test_file_content_cmd(tmp_path):
    src = tmp_path / "key.pub"
    src.write_text("ssh-ed25519 AAAA test\n")
    path = tmp_path / "copy"
    r = render.render("file", path=str(path), content_cmd=f"cat {src}", mode="0644")
    assert not check(r.check)
    run_ok(r.run)
    assert path.read_bytes() == src.read_bytes()
    assert check(r.check)
    src.write_text("ssh-ed25519 BBBB changed\n")
    assert not check(r.check)  # the check follows the command's output


# --- block ------------------------------------------------------------------------------

OTHERS = b"# written by somebody else\nHost other\n    Port 22\n"


@pytest.mark.parametrize("position", ["end", "top"])
def test_block_on_file_with_trailing_newline(tmp_path, position):
    path = tmp_path / "config"
    path.write_bytes(OTHERS)
    os.chmod(path, 0o640)
    r = render.render("block", path=str(path), content=CONTENT, mode="0600", position=position)
    assert not check(r.check)
    run_ok(r.run)
    text = path.read_bytes()
    block = (render.BEGIN + "\n" + CONTENT + render.END + "\n").encode()
    assert text == (OTHERS + block if position == "end" else block + OTHERS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the owner's mode is kept
    assert check(r.check)
    run_ok(r.run)
    assert path.read_bytes() == text  # idempotent
    run_ok(r.undo)
    assert path.read_bytes() == OTHERS
    assert listing(tmp_path) == ["config"]


def test_block_top_on_file_without_trailing_newline(tmp_path):
    original = b"Host other\n    Port 22"
    path = tmp_path / "config"
    path.write_bytes(original)
    r = render.render("block", path=str(path), content=CONTENT, position="top")
    run_ok(r.run)
    assert path.read_bytes().startswith(render.BEGIN.encode())
    assert path.read_bytes().endswith(b"    Port 22")
    assert check(r.check)
    run_ok(r.undo)
    assert path.read_bytes() == original


def test_block_end_on_file_without_trailing_newline_goes_first(tmp_path):
    """Appending would need a newline undo could not tell from the user's own, so the block
    goes first; the user's bytes follow unchanged and the check and re-run agree."""
    original = b"Host other\n    Port 22"
    path = tmp_path / "config"
    path.write_bytes(original)
    r = render.render("block", path=str(path), content=CONTENT, position="end")
    run_ok(r.run)
    text = path.read_bytes()
    assert text.startswith(render.BEGIN.encode() + b"\n") and text.endswith(original)
    assert check(r.check)
    run_ok(r.run)
    assert path.read_bytes() == text


def test_block_end_without_trailing_newline_undo_is_exact(tmp_path):
    original = b"Host other\n    Port 22"
    path = tmp_path / "config"
    path.write_bytes(original)
    r = render.render("block", path=str(path), content=CONTENT, position="end")
    run_ok(r.run)
    run_ok(r.undo)
    assert path.read_bytes() == original


def test_block_keeps_lines_added_by_others_after_run(tmp_path):
    path = tmp_path / "authorized_keys"
    path.write_bytes(b"ssh-rsa AAA first\n")
    r = render.render("block", path=str(path), content="ssh-ed25519 OURS me\n")
    run_ok(r.run)
    with open(path, "ab") as fh:
        fh.write(b"ssh-rsa BBB later\n")  # somebody else appends after our block
    assert check(r.check)
    run_ok(r.undo)
    assert path.read_bytes() == b"ssh-rsa AAA first\nssh-rsa BBB later\n"


def test_block_replaces_a_stale_block(tmp_path):
    path = tmp_path / "config"
    r_old = render.render("block", path=str(path), content="Port 1111\n")
    r_new = render.render("block", path=str(path), content="Port 2222\n")
    path.write_bytes(OTHERS)
    run_ok(r_old.run)
    assert not check(r_new.check)
    run_ok(r_new.run)
    text = path.read_bytes()
    assert b"Port 2222" in text and b"Port 1111" not in text
    assert text.count(render.BEGIN.encode()) == 1
    run_ok(r_new.undo)
    assert path.read_bytes() == OTHERS


def test_block_new_file_is_created_and_removed(tmp_path):
    path = tmp_path / "dotssh" / "config"
    r = render.render("block", path=str(path), content=CONTENT, mode="0600")
    assert not check(r.check)
    run_ok(r.run)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert check(r.check)
    run_ok(r.undo)
    assert not path.exists()
    run_ok(r.undo)  # undo twice is harmless


def test_block_undo_keeps_a_pre_existing_empty_file(tmp_path):
    path = tmp_path / "authorized_keys"
    path.write_bytes(b"")
    r = render.render("block", path=str(path), content=CONTENT)
    run_ok(r.run)
    assert check(r.check)
    run_ok(r.undo)
    assert path.exists() and path.read_bytes() == b""


def test_block_content_cmd(tmp_path):
    pub = tmp_path / "id.pub"
    pub.write_text("ssh-ed25519 AAAA me@host\n")
    path = tmp_path / "authorized_keys"
    r = render.render("block", path=str(path), content_cmd=f"cat {pub}")
    run_ok(r.run)
    assert b"ssh-ed25519 AAAA me@host" in path.read_bytes()
    assert check(r.check)
    pub.write_text("ssh-ed25519 BBBB me@host\n")
    assert not check(r.check)


# --- dropin -----------------------------------------------------------------------------

def dropin(tmp_path, validate: str = ""):
    fallback = tmp_path / "sshd_config"
    d = tmp_path / "sshd_config.d"
    path = d / "50-hpcwizard.conf"
    r = render.render("dropin", path=str(path), fallback=str(fallback), include=INCLUDE,
                      content=CONTENT, mode="0644", validate=validate)
    return r, path, fallback


@pytest.mark.parametrize("validate", ["", "true"])
def test_dropin_with_include_writes_the_dropin(tmp_path, validate):
    r, path, fallback = dropin(tmp_path, validate)
    main = b"# main file\nInclude /etc/ssh/sshd_config.d/*.conf\nPort 22\n"
    fallback.write_bytes(main)
    assert not check(r.check)
    run_ok(r.run)
    assert path.read_bytes() == CONTENT.encode()
    assert fallback.read_bytes() == main  # untouched
    assert check(r.check)
    run_ok(r.undo)
    assert not path.exists()
    assert fallback.read_bytes() == main
    assert listing(path.parent) == []


def test_dropin_run_twice_then_undo_removes_it(tmp_path):
    r, path, fallback = dropin(tmp_path)
    fallback.write_bytes(b"Include /etc/ssh/sshd_config.d/*.conf\n")
    run_ok(r.run)
    run_ok(r.run)
    assert path.read_bytes() == CONTENT.encode()
    run_ok(r.undo)
    assert not path.exists()


@pytest.mark.parametrize("validate", ["", "true"])
def test_dropin_without_include_puts_a_block_at_the_top(tmp_path, validate):
    r, path, fallback = dropin(tmp_path, validate)
    main = b"# main file\nPort 22\nSubsystem sftp internal-sftp\n"
    fallback.write_bytes(main)
    assert not check(r.check)
    run_ok(r.run)
    assert not path.exists()
    text = fallback.read_bytes()
    assert text.startswith((render.BEGIN + "\n" + CONTENT + render.END + "\n").encode())
    assert text.endswith(main)
    assert check(r.check)
    run_ok(r.run)
    assert fallback.read_bytes() == text
    run_ok(r.undo)
    assert fallback.read_bytes() == main
    assert not path.exists()


@pytest.mark.parametrize("with_include", [True, False])
@pytest.mark.parametrize("had_dropin", [True, False])
def test_dropin_failed_validation_puts_everything_back(tmp_path, with_include, had_dropin):
    r, path, fallback = dropin(tmp_path, validate="false")
    main = (b"Include /etc/ssh/sshd_config.d/*.conf\n" if with_include else b"") + b"Port 22"
    fallback.write_bytes(main)
    os.chmod(fallback, 0o600)
    if had_dropin:
        path.parent.mkdir()
        path.write_bytes(b"Port 9999\n")
    res = bash(r.run)
    assert res.returncode != 0
    assert "previous one was put back" in res.stderr
    assert fallback.read_bytes() == main
    assert stat.S_IMODE(fallback.stat().st_mode) == 0o600
    if had_dropin:
        assert path.read_bytes() == b"Port 9999\n"
    else:
        assert not path.exists()
    assert not check(r.check)


def test_file_failed_validation_puts_previous_file_back(tmp_path):
    path = tmp_path / "sshd_config"
    path.write_bytes(b"Port 22\nno newline at end")
    r = render.render("file", path=str(path), content=CONTENT, validate="false")
    res = bash(r.run)
    assert res.returncode != 0
    assert path.read_bytes() == b"Port 22\nno newline at end"


def test_file_failed_validation_removes_new_file(tmp_path):
    path = tmp_path / "new.conf"
    r = render.render("file", path=str(path), content=CONTENT, validate="false")
    assert bash(r.run).returncode != 0
    assert not path.exists()


def test_block_failed_validation_puts_previous_file_back(tmp_path):
    path = tmp_path / "config"
    path.write_bytes(OTHERS)
    r = render.render("block", path=str(path), content=CONTENT, validate="false")
    assert bash(r.run).returncode != 0
    assert path.read_bytes() == OTHERS


def test_validation_sees_the_new_file(tmp_path):
    path = tmp_path / "x.conf"
    r = render.render("file", path=str(path), content="Port 2345\n",
                      validate=f"grep -qx 'Port 2345' {path}")
    run_ok(r.run)
    assert path.read_bytes() == b"Port 2345\n"


def test_shell_kind_is_the_recipe_text():
    r = render.render("shell", check=" test -e /x \n", run="\ntouch /x\n", undo="rm -f /x\n")
    assert r == render.Rendered("test -e /x", "touch /x", "rm -f /x")


def test_unknown_kind():
    with pytest.raises(ValueError):
        render.render("template")


# --- shellcheck over every rendered text of several plans ---------------------------------

def _plans(monkeypatch):
    patch_users(monkeypatch, fake_passwd("bob", 1001, "/home/bob"))
    cat = load_catalog()
    out = []
    for os_key, user, choice, systemd in [
        ("debian12", ROOT, {}, False),
        ("ubuntu2204", ROOT, {"host_keys": "off"}, True),
        ("rocky9", ROOT, {"user": "bob", "ssh_port": 2345}, False),
        ("centos7", ALICE["nopasswd"], {"peers": "node-*"}, True),
        ("openeuler", ALICE["none"], {"host_keys": "off"}, False),
        ("debian12", ROOT, {"network": "ib"}, False),
    ]:
        out.append(build_plan(facts(os_key, user, systemd=systemd), make_choices(**choice), cat))
    return out


def test_rendered_step_texts_pass_shellcheck(tmp_path, monkeypatch):
    plans = _plans(monkeypatch)
    kinds = {s.kind for p in plans for s in p.steps}
    assert kinds == {"shell", "file", "block", "dropin"}
    problems = []
    n = 0
    for p in plans:
        for s in p.steps:
            for part in ("check", "run", "undo"):
                text = getattr(s, part)
                if not text:
                    continue
                n += 1
                res = shellcheck("#!/usr/bin/env bash\n" + text + "\n", tmp_path)
                if res.returncode != 0:
                    problems.append(f"{s.id} {part}:\n{res.stdout}")
    assert n > 40
    assert not problems, "\n".join(problems)


# --- the shipped recipes' user steps, for real, in a home under tmp_path --------------------

@pytest.mark.skipif(not __import__("shutil").which("ssh-keygen"), reason="needs ssh-keygen")
def test_shipped_user_steps_run_and_undo_in_a_scratch_home(tmp_path, monkeypatch):
    home = tmp_path / "home" / "bob"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    others = b"ssh-rsa AAAA somebody-else\n"
    (home / ".ssh" / "authorized_keys").write_bytes(others)
    patch_users(monkeypatch, fake_passwd("bob", 1001, str(home)))
    plan = build_plan(facts("debian12", ROOT), make_choices(user="bob", ssh_port=2345,
                                                            peers="node-*"), load_catalog())
    steps = {s.id: s for s in plan.steps}
    chosen = [steps[i] for i in ("ssh/user-key", "ssh/authorized-keys", "ssh/client-config")]
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    for s in chosen:
        assert not check(s.check), s.id
        run_ok(s.run)
        assert check(s.check), s.id
    pub = (home / ".ssh" / "id_ed25519.pub").read_bytes()
    keys = (home / ".ssh" / "authorized_keys").read_bytes()
    assert keys.startswith(others) and pub in keys
    config = (home / ".ssh" / "config").read_text()
    assert "Host node-*\n    Port 2345\n" in config and "StrictHostKeyChecking yes" in config
    for s in reversed(chosen):
        run_ok(s.undo)
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert after == before
