"""The translation layer (hpcwizard.i18n) and its catalogues (recipes/locale).

- every _()/N_() message and Binding description in wizard/ and screens/ is in the .po files,
  and no .po has an entry the code no longer uses (tools/i18n_catalog.py extract);
- the .mo files are compiled from the .po files as they are now (not stale);
- zh_CN is complete, and each translation keeps its message's {placeholders};
- the obvious user-facing places (BadInput, widget constructors, BINDINGS, notify, verify's
  Check texts) never take a bare string literal or f-string: new text cannot slip past _();
- the CLI speaks Chinese under LANG=zh_CN.UTF-8, --lang overrides it, and the exported
  files' commands are byte-identical in both languages.
"""
from __future__ import annotations

import ast
import importlib.util
import io
import os
import re
import subprocess
import sys
import gettext
from pathlib import Path

import pytest

from hpcwizard import i18n
from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.export import render_export
from hpcwizard.plan import build_plan

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"


def _tool():
    spec = importlib.util.spec_from_file_location("i18n_catalog", ROOT / "tools" / "i18n_catalog.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


TOOL = _tool()


def _exe() -> str:
    exe = Path(sys.executable).with_name("hpcwizard")
    return str(exe) if exe.exists() else "hpcwizard"


def run_cli(*argv: str, lang_env: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG",
                                                            "LANGUAGE")}
    if lang_env:
        env["LANG"] = lang_env
    return subprocess.run([_exe(), *argv], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)


# --- the catalogues -------------------------------------------------------------------------

def test_every_message_in_the_code_is_in_the_catalogues_and_nothing_else():
    used = set(TOOL.extract())
    for lang in TOOL.LANGS:
        have = {m for m in TOOL.read_po(TOOL.po_path(lang)) if m}
        assert not used - have, (f"{lang}: messages missing from the catalogue (run "
                                 f"tools/i18n_catalog.py extract): {sorted(used - have)[:10]}")
        assert not have - used, (f"{lang}: catalogue entries the code no longer uses (run "
                                 f"tools/i18n_catalog.py extract): {sorted(have - used)[:10]}")


def test_po_files_read_back_as_extract_writes_them():
    """The .po format round-trips (escapes, multi-line messages); the #: places may lag
    behind the code (they are comments), the entries may not."""
    messages = TOOL.extract()
    for lang in TOOL.LANGS:
        path = TOOL.po_path(lang)
        rewritten = path.parent / "roundtrip.tmp"
        try:
            rewritten.write_text(TOOL.expected_po(lang, messages), encoding="utf-8")
            assert TOOL.read_po(rewritten) == TOOL.read_po(path), \
                f"{path} is out of date: run tools/i18n_catalog.py extract"
        finally:
            rewritten.unlink()


def test_mo_files_are_compiled_from_the_po_files_as_they_are():
    for lang in TOOL.COMPILED:
        mo = TOOL.mo_path(lang)
        assert mo.exists(), f"{mo} is missing: run tools/i18n_catalog.py compile"
        assert mo.read_bytes() == TOOL.compile_mo(TOOL.read_po(TOOL.po_path(lang))), \
            f"{mo} is stale: run tools/i18n_catalog.py compile"


def test_a_stale_mo_is_caught(tmp_path):
    entries = TOOL.read_po(TOOL.po_path("zh_CN"))
    changed = dict(entries, **{"Quit": "离开"})
    assert TOOL.compile_mo(changed) != TOOL.compile_mo(entries)


def test_compiled_catalogue_reads_back_with_gettext():
    entries = TOOL.read_po(TOOL.po_path("zh_CN"))
    t = gettext.GNUTranslations(io.BytesIO(TOOL.compile_mo(entries)))
    for msgid, msgstr in entries.items():
        if msgid:
            assert t.gettext(msgid) == msgstr


def test_entries_that_repeat_their_msgid_are_left_out_and_still_answer():
    zh = TOOL.read_po(TOOL.po_path("zh_CN"))
    same = [m for m, v in zh.items() if m and v == m]  # names: "SSH", "MPI"
    assert same, "the zh catalogue keeps some names as they are"
    data = TOOL.compile_mo(zh)
    count = int.from_bytes(data[8:12], "little")  # the .mo header's number of strings
    assert count == sum(1 for m, v in zh.items() if v and v != m) == \
        sum(1 for v in zh.values() if v) - len(same)
    t = gettext.GNUTranslations(io.BytesIO(data))
    assert all(t.gettext(m) == m for m in same)


def test_english_reads_no_catalogue(monkeypatch):
    """The msgid is the English text, plurals by English rules: nothing is read (a 100 kB
    catalogue parsed on every start, before), and no English .mo is shipped."""
    monkeypatch.setattr(i18n, "_loaded", {})
    monkeypatch.setattr(i18n, "catalogue_bytes", lambda lang: pytest.fail("read " + lang))
    msgid = next(m for m in TOOL.read_po(TOOL.po_path("en")) if m)
    assert i18n.translations("en").gettext(msgid) == msgid
    assert (i18n.translations("en").ngettext("{n} host", "{n} hosts", 1),
            i18n.translations("en").ngettext("{n} host", "{n} hosts", 2)) == \
        ("{n} host", "{n} hosts")
    assert not TOOL.mo_path("en").exists() and "en" not in TOOL.COMPILED


def test_zh_is_complete_and_keeps_placeholders():
    placeholder = re.compile(r"\{[^{}]*\}")
    for msgid, msgstr in TOOL.read_po(TOOL.po_path("zh_CN")).items():
        if not msgid:
            continue
        assert msgstr, f"untranslated: {msgid!r}"
        assert sorted(placeholder.findall(msgid)) == sorted(placeholder.findall(msgstr)), \
            f"placeholders differ: {msgid!r} -> {msgstr!r}"


def test_en_catalogue_is_the_identity():
    for msgid, msgstr in TOOL.read_po(TOOL.po_path("en")).items():
        if msgid:
            assert msgstr == msgid


def test_catalogues_ship_in_the_package_data():
    text = (ROOT / "pyproject.toml").read_text()
    assert "locale/*/LC_MESSAGES/*.mo" in text
    assert i18n.catalogue_bytes("zh") == TOOL.mo_path("zh_CN").read_bytes()


# --- no bare user-facing literals -------------------------------------------------------------

WIDGETS = {"Button", "Label", "Static", "Checkbox", "RadioButton"}
# Names that are the same in every language: products, protocols, commands
NAMES = {"MPI", "PyTorch", "TCP", "InfiniBand", "GPUs", "RDMA", "NCCL", "UCX", "torch",
         "ulimit", "localhost", "sshd", "uverbs", "memlock", "GPUDirect", "Jupyter", "ssh"}


def _words(text: str) -> bool:
    """text has a word a translator would translate (not only names and symbols)."""
    return any(w not in NAMES for w in re.findall(r"[A-Za-z]{2,}", text))
CHECK_TEXTS = {"title", "detail", "explain"}  # verify's Check fields a person reads


def _bare(node: ast.AST) -> bool:
    """A string a person would read, not passed through _(): a literal with letters, an
    f-string with letters in its text, or a "+" of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _words(node.value)
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and _words(str(v.value)) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _bare(node.left) or _bare(node.right)
    if isinstance(node, ast.IfExp):
        return _bare(node.body) or _bare(node.orelse)
    return False


def _name(func: ast.AST) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) \
        else ""


def unwrapped_literals(tree: ast.AST, rel: str):
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        args = []
        if name == "BadInput" or name in ("notify", "_say", "_skip") or name in WIDGETS:
            args = node.args[:1] if name not in ("_skip",) else node.args[1:3]
        if name == "Input":
            args = [k.value for k in node.keywords if k.arg == "placeholder"]
        if name == "ConfirmScreen":
            args = node.args[:1] + [k.value for k in node.keywords if k.arg in ("yes", "no")]
        if name in ("Check", "_check"):
            args = node.args[1:2] + [k.value for k in node.keywords
                                     if k.arg in CHECK_TEXTS | {"plain"}]
            if name == "Check":
                args += node.args[4:6]
        if name == "add_row" and rel.startswith("screens/"):
            args = node.args[:1]
        for a in args:
            if _bare(a):
                yield f"{rel}:{node.lineno}: {name}() takes text not passed through _()"


def test_no_bare_literals_in_user_facing_places():
    found = []
    for path in TOOL.source_files():
        rel = path.relative_to(ROOT).as_posix()
        found += list(unwrapped_literals(ast.parse(path.read_text(encoding="utf-8")), rel))
    assert not found, "\n".join(found)


def test_the_scan_catches_bare_text():
    code = ('raise BadInput(f"port {p} is bad")\nyield Button("Quit")\n'
            'Input(placeholder="name")\nself.notify("done")\n'
            'Check("id", "a title", FAIL, "", "detail text", "explain text")\n')
    assert len(list(unwrapped_literals(ast.parse(code), "screens/x.py"))) == 7
    ok = ('raise BadInput(_("port {p} is bad").format(p=p))\nyield Button(_("Quit"))\n'
          'Input(placeholder=_("name"))\nyield Button("⏎")\n')
    assert not list(unwrapped_literals(ast.parse(ok), "screens/x.py"))


def test_binding_descriptions_are_in_the_catalogue():
    messages = TOOL.extract()
    for desc in ("Keys", "Next", "Use preset", "Configure here", "Write export", "中文"):
        assert desc in messages


# --- the language -----------------------------------------------------------------------------

@pytest.mark.parametrize("env,lang", [
    ({"LANG": "zh_CN.UTF-8"}, "zh"), ({"LANG": "zh_TW"}, "zh"), ({"LANG": "en_US.UTF-8"}, "en"),
    ({"LANG": "C"}, "en"), ({}, "en"), ({"LANG": "en_US.UTF-8", "LC_ALL": "zh_CN.UTF-8"}, "zh"),
    ({"LANG": "zh_CN.UTF-8", "LC_MESSAGES": "C"}, "en"),
    ({"LANG": "zh_CN.UTF-8", "LC_ALL": ""}, "zh"),
])
def test_language_from_env(env, lang):
    assert i18n.language_from_env(env) == lang


def test_set_language_and_gettext():
    i18n.set_language("zh_CN.UTF-8")
    assert i18n.get_language() == "zh"
    assert i18n._("Quit") == "退出"
    assert i18n._("port {port} is out of range: give a TCP port from 1 to 65535").format(
        port=70000) == "端口 70000 超出范围：请给出 1 到 65535 之间的 TCP 端口"
    i18n.set_language("en")
    assert i18n._("Quit") == "Quit"


def test_pick_recipe_texts():
    plan = build_plan(_facts(), make_choices(framework="mpi", network="tcp"), load_catalog())
    step = next(s for s in plan.steps if s.recipe == "ssh")
    assert i18n.field(step, "title") == step.title
    i18n.set_language("zh")
    assert i18n.field(step, "title") == step.i18n["zh"]["title"] != step.title
    assert i18n.pick("English", {}, "title") == "English"


def test_width_of_wide_characters():
    assert i18n.width("abc") == 3 and i18n.width("中文") == 4
    assert i18n.ljust("中文", 6) == "中文  "


# --- what a person sees, and what stays the same -----------------------------------------------

def _facts():
    from _tui_fixtures import bare_container

    return bare_container()


def _plan(**kw):
    return build_plan(_facts(), make_choices(**kw), load_catalog())


def _commands(text: str) -> str:
    """The script without its comment lines (shebang and shellcheck directives kept)."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#") and not s.startswith(("#!", "# shellcheck")):
            continue
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("fmt", ["setup", "dockerfile", "launch"])
@pytest.mark.parametrize("framework,network", [("mpi", "tcp"), ("pytorch", "ib"), ("mpi", "ib")])
def test_exports_commands_are_byte_identical_across_languages(fmt, framework, network):
    en = render_export(_plan(framework=framework, network=network, mode="manual"), fmt)
    i18n.set_language("zh")
    zh = render_export(_plan(framework=framework, network=network, mode="manual"), fmt)
    assert _commands(en).encode() == _commands(zh).encode()
    comments_en = [ln for ln in en.splitlines() if ln.startswith("# ") and ln not in zh]
    assert comments_en, "the Chinese export has no translated comment"
    # comments in the chosen language only: no line of the English header is left
    header_zh = zh.split("set -euo pipefail")[0] if fmt != "dockerfile" else zh
    assert not re.search(r"^# (Written by|Run as root|planned on|Planned on)", header_zh, re.M)


def test_plan_json_and_record_keys_do_not_change():
    en = _plan(framework="mpi", network="tcp").to_dict()
    i18n.set_language("zh")
    zh = _plan(framework="mpi", network="tcp").to_dict()
    assert en.keys() == zh.keys()
    assert [s["run"] for s in en["steps"]] == [s["run"] for s in zh["steps"]]
    assert [s["title"] for s in en["steps"]] == [s["title"] for s in zh["steps"]]  # English


def test_cli_diagnose_speaks_chinese_under_lang_zh():
    log = str(FIXTURES / "logs" / "ssh-publickey.log")
    zh = run_cli("diagnose", log, lang_env="zh_CN.UTF-8")
    assert zh.returncode == 0, zh.stderr
    assert "原因：" in zh.stdout and "解决：" in zh.stdout
    en = run_cli("--lang", "en", "diagnose", log, lang_env="zh_CN.UTF-8")
    assert "cause:" in en.stdout and "原因" not in en.stdout
    also = run_cli("diagnose", log, "--lang", "en", lang_env="zh_CN.UTF-8")
    assert also.stdout == en.stdout


def test_cli_plan_speaks_chinese_and_lang_overrides():
    argv = ["plan", "--framework", "mpi", "--network", "tcp", "--sysroot",
            str(FIXTURES / "sysroots" / "debian12")]
    zh = run_cli(*argv, lang_env="zh_CN.UTF-8")
    assert zh.returncode == 0, zh.stderr
    assert "推荐" in zh.stdout and "操作库" in zh.stdout
    en = run_cli("--lang", "en", *argv, lang_env="zh_CN.UTF-8")
    assert "Recommended" in en.stdout and "推荐" not in en.stdout
    forced = run_cli("--lang", "zh", *argv)
    assert forced.stdout == zh.stdout


def test_cli_bad_input_in_chinese_is_still_one_line_exit_2():
    p = run_cli("plan", "--framework", "mpi", "--network", "tcp", "--ssh-port", "70000",
                lang_env="zh_CN.UTF-8")
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: ") and "端口 70000" in lines[0]


def test_cli_export_commands_identical_across_languages():
    argv = ["export", "--framework", "mpi", "--network", "tcp", "--manual", "--format", "setup",
            "--sysroot", str(FIXTURES / "sysroots" / "debian12")]
    en, zh = run_cli(*argv), run_cli(*argv, lang_env="zh_CN.UTF-8")
    assert en.returncode == zh.returncode == 0
    assert en.stdout != zh.stdout and _commands(en.stdout) == _commands(zh.stdout)


def test_importing_loads_no_catalogue():
    """Catalogues load on first use, not at import (start-up stays fast)."""
    code = ("import hpcwizard.cli, hpcwizard.plan, hpcwizard.verify; "
            "from hpcwizard import i18n; print(len(i18n._loaded))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, LANG="zh_CN.UTF-8"))
    assert out.stdout.strip().splitlines()[-1] == "0"


@pytest.mark.parametrize("text,cells,clipped", [("hpcwizard", 3, "hpc"), ("正在检测", 3, "正"),
                                                ("正在检测", 4, "正在"), ("ab", 5, "ab"),
                                                ("正", 1, ""), ("abc", 0, "")])
def test_clip_cuts_to_terminal_cells_never_halving_a_wide_character(text, cells, clipped):
    assert i18n.clip(text, cells) == clipped
    assert i18n.width(i18n.clip(text, cells)) <= cells


@pytest.mark.parametrize("fmt,framework", [("mpijob", "mpi"), ("volcano", "mpi"),
                                           ("pytorchjob", "pytorch"), ("trainjob", "pytorch")])
def test_kubernetes_headers_name_the_engine_in_chinese(fmt, framework):
    """The engine's name goes into the header translated, not as English inside Chinese."""
    i18n.set_language("zh")
    first = render_export(_plan(framework=framework, network="tcp", mode="manual"),
                          fmt).splitlines()[0]
    assert "生成" in first and not re.search(r"\ba (Kubeflow|Volcano)\b", first), first


def test_plan_header_says_the_host_keys_setting_in_chinese():
    from hpcwizard.report import format_plan

    i18n.set_language("zh")
    line = format_plan(_plan(framework="mpi", network="tcp", mode="manual")).splitlines()[1]
    assert "已固定" in line and "pinned" not in line, line
    off = format_plan(_plan(framework="mpi", network="tcp", mode="manual", host_keys="off"))
    assert "off" not in off.splitlines()[1]
