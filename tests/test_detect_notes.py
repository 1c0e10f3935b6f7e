"""Detection's notes and warnings are messages: a stable code, the English text (JSON, logs,
records) and the arguments, shown in the chosen language on the System screen and in the
command line's summary (hpcwizard.notes: Note and its texts)."""
from __future__ import annotations

import ast
import gettext
import json
from pathlib import Path

import pytest

from hpcwizard import i18n
from hpcwizard.detect import detect
from hpcwizard.notes import NOTES, note
from hpcwizard.detect.summary import format_summary
from hpcwizard.facts import Facts, Note

DETECT = Path(__file__).resolve().parent.parent / "wizard" / "detect"
ZH_NONE = "nvidia-smi 未安装，内核也没有列出 NVIDIA GPU：没有 GPU。"
ZH_CRASHED = "无法检查{label}：{error}"


class FakeChinese(gettext.NullTranslations):
    """The zh catalogue with two notes and a probe label translated (the real catalogue
    gets its entries from the lead's extraction; this test is about the mechanism)."""

    TABLE = {NOTES["gpu.none"]: ZH_NONE, NOTES["probe.crashed"]: ZH_CRASHED, "the GPUs": "GPU"}

    def gettext(self, message: str) -> str:
        return self.TABLE.get(message, message)


@pytest.fixture
def chinese(monkeypatch):
    monkeypatch.setitem(i18n._loaded, "zh", FakeChinese())
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr in ("note", "warn")) or (
                    isinstance(f, ast.Name) and f.id == "note"):
                yield node


def test_every_note_a_probe_gives_has_a_known_code():
    """found.note / found.warn / note(...) in wizard/detect take a code of NOTES (a literal, or
    a choice between literals), never an English sentence: that would show untranslated."""
    seen = set()
    for path in sorted(DETECT.glob("*.py")):
        for call in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            if not call.args:
                continue
            first = call.args[0]
            options = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
            for option in options:
                if isinstance(option, ast.Name):  # found.warn(w): a Note made by note()
                    continue
                assert isinstance(option, ast.Constant) and option.value in NOTES, (
                    f"{path.name}:{call.lineno}: {ast.unparse(option)} is not a code of NOTES")
                seen.add(option.value)
    assert len(seen) >= 40  # the scan found the probes' calls
    assert not set(NOTES) - seen, f"codes nobody gives: {sorted(set(NOTES) - seen)}"


def test_every_template_is_filled_by_its_arguments():
    for code, template in NOTES.items():
        fields = {f for _, f, _, _ in __import__("string").Formatter().parse(template) if f}
        n = note(code, **{f: "x" for f in fields})
        assert n.code == code and "{" not in n, code


def test_a_note_is_its_english_text_with_a_code():
    n = note("net.ip-failed", output="RTNETLINK answers: Permission denied")
    assert n == "`ip -j addr` failed (RTNETLINK answers: Permission denied); read /sys/class/net instead."
    assert n.code == "net.ip-failed" and n.args == {"output": "RTNETLINK answers: Permission denied"}
    with pytest.raises(AttributeError):
        n.code = "other"  # type: ignore[misc]


def test_detect_json_keeps_code_text_and_arguments(tmp_path):
    """A tree without os-release: detect --json's note says which code and what text."""
    f = detect(str(tmp_path))
    data = json.loads(json.dumps(f.to_dict()))
    missing = [n for n in data["notes"] if n["code"] == "os.missing"]
    assert missing and missing[0]["text"].startswith("No /etc/os-release")
    assert any(n["code"] == "detect.no-commands-sysroot" and n["args"] == {"sysroot": str(tmp_path)}
               for n in data["notes"]), data["notes"]
    back = Facts.from_dict(data)
    assert back == f and [n.code for n in back.notes] == [n.code for n in f.notes]


def test_older_facts_with_plain_notes_still_read():
    f = Facts.from_dict({"notes": ["something a 0.1 hpcwizard said"], "warnings": []})
    assert f.notes == ("something a 0.1 hpcwizard said",)
    assert isinstance(f.notes[0], Note) and f.notes[0].code == ""
    assert f.notes[0].shown() == "something a 0.1 hpcwizard said"


def test_shown_in_chinese_with_translated_labels(chinese):
    assert note("gpu.none").shown() == ZH_NONE
    crashed = note("probe.crashed", label="the GPUs", error="RuntimeError: boom")
    assert crashed == "Could not check the GPUs: RuntimeError: boom"  # the English text kept
    assert crashed.shown() == "无法检查GPU：RuntimeError: boom"
    # a code without a translation yet: English, never an error
    assert note("net.none").shown() == NOTES["net.none"]


def test_the_summary_prints_notes_in_the_chosen_language(chinese):
    f = Facts(notes=(note("gpu.none"),), warnings=(note("probe.crashed", label="the GPUs",
                                                        error="RuntimeError: boom"),))
    text = format_summary(f)
    assert f"  - {ZH_NONE}" in text
    assert "  ! 无法检查GPU：RuntimeError: boom" in text
    assert "nvidia-smi is not installed" not in text


def test_the_system_screen_shows_notes_in_the_chosen_language(chinese, tmp_path):
    pytest.importorskip("textual")
    import asyncio

    from _tui_fixtures import bare_container, make_app, text_of, wait_for

    facts = bare_container()
    assert [n.code for n in facts.notes] == ["gpu.none"]

    async def go() -> str:
        app = make_app(tmp_path, facts=facts)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.screen.__class__.__name__ == "SystemScreen"
                           and app.screen.ready)
            return text_of(app.screen.query_one("#system-warnings"))

    shown = asyncio.run(go())
    assert ZH_NONE in shown.replace("\n", "") and "nvidia-smi is not installed" not in shown
