"""argparse's own messages (usage errors, --help's headings) in Chinese with --lang zh or
LANG=zh_CN.UTF-8, English unchanged; one line and exit status 2 either way. The msgids are
read from the running Python's argparse, so a version whose text differs fails here instead
of silently staying English."""
import argparse
import ast
import sys

import pytest

from hpcwizard import argparse_i18n as A
from hpcwizard.cli import main
from hpcwizard.i18n import set_language, translations


def argparse_msgids():
    """Every literal argparse passes to _() or ngettext() on this Python."""
    tree = ast.parse(open(argparse.__file__, encoding="utf-8").read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("_", "ngettext"):
            n = 1 if node.func.id == "_" else 2
            out.update(a.value for a in node.args[:n] if isinstance(a, ast.Constant))
    return out


# Which Pythons have the msgids that differ between 3.9 and 3.13 (from their argparse.py)
BY_VERSION = {
    "optional arguments": lambda v: v < (3, 10),
    "options": lambda v: v >= (3, 10),
    "argument %(argument_name)s: %(message)s": lambda v: v >= (3, 11),
    "subcommands": lambda v: v >= (3, 13),
    "%(heading)s:": lambda v: v >= (3, 13),
    "%(prog)s: warning: %(message)s\n": lambda v: v >= (3, 13),
    "show program's version number and exit": lambda v: v >= (3, 13),
}


def test_the_running_argparse_has_the_msgids_expected_of_its_version():
    found = argparse_msgids()
    v = sys.version_info[:2]
    assert {m for m, has in BY_VERSION.items() if has(v)} <= found
    assert not {m for m, has in BY_VERSION.items() if not has(v)} & found
    for always in ("usage: ", "show this help message and exit",
                   "invalid choice: %(value)r (choose from %(choices)s)",
                   "the following arguments are required: %s"):
        assert always in found


def test_every_argparse_message_a_user_meets_is_translated():
    found = argparse_msgids()
    unknown = found - set(A.ARGPARSE) - set(A.NOT_SHOWN)
    assert not unknown, f"argparse {sys.version.split()[0]} has msgids neither translated " \
                        f"nor listed as not shown: {sorted(unknown)}"
    zh = translations("zh")
    missing = [m for m in found & set(A.ARGPARSE) if zh.gettext(m) == m]
    assert not missing


def run(argv, capsys, lang="zh"):
    set_language(lang)
    try:
        rc = main(argv)
    finally:
        set_language(None)
    out, err = capsys.readouterr()
    return rc, out, err


def test_an_invalid_choice_in_chinese(capsys):
    rc, out, err = run(["--lang", "zh", "plan", "--framework", "foo", "--network", "tcp"],
                       capsys)
    assert rc == 2 and out == ""
    # how the choices are quoted is argparse's (it changed in later 3.12 and 3.13 releases)
    assert err.startswith("hpcwizard: 参数 --framework：无效的取值：'foo'（可选：")
    assert err.endswith("pytorch'）\n") or err.endswith("pytorch）\n")
    assert err.count("\n") == 1


def test_a_missing_required_argument_in_chinese_from_lang(capsys, monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    for var in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(var, raising=False)
    set_language(None)
    rc = main(["plan", "--network", "tcp"])
    out, err = capsys.readouterr()
    assert rc == 2 and err == "hpcwizard: 缺少必需的参数：--framework\n"


def test_help_headings_in_chinese(capsys):
    set_language("zh")
    try:
        with pytest.raises(SystemExit) as done:
            main(["--lang", "zh", "plan", "--help"])
    finally:
        set_language(None)
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert out.startswith("用法：hpcwizard plan")
    assert "-h, --help            显示此帮助信息并退出" in out
    assert "\n选项:" in out or "\n选项：" in out  # 3.13 puts the colon through gettext
    assert "usage:" not in out and "options:" not in out and "show this help" not in out


def test_english_is_unchanged_and_argparse_is_left_as_it_was(capsys):
    rc, out, err = run(["plan", "--framework", "foo", "--network", "tcp"], capsys, lang="en")
    assert rc == 2
    assert err.startswith("hpcwizard: argument --framework: invalid choice: 'foo' (choose "
                          "from ") and err.count("\n") == 1
    rc, out, err = run(["--lang", "zh", "plan", "--network", "tcp"], capsys)
    assert argparse._("usage: ") == "usage: "  # restored after the Chinese parse
    set_language("en")
    try:
        with pytest.raises(SystemExit):
            main(["plan", "--help"])
    finally:
        set_language(None)
    out = capsys.readouterr().out
    assert out.startswith("usage: hpcwizard plan") and "show this help message and exit" in out
