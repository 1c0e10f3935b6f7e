"""Untrusted text (a log, a remote command's output, a step's output) reaches the terminal
only through safe_text.visible: control characters shown as escapes, a long line cut, and
diagnose stays linear on a hostile log."""
import io
import re

import pytest

from hpcwizard.apply import StepOutput
from hpcwizard.cli import main
from hpcwizard.diagnose import MATCH_LIMIT, diagnose, signatures
from hpcwizard.report import ConsoleSink
from hpcwizard import validate
from hpcwizard.report_verify import check_text
from hpcwizard.safe_text import LINE_LIMIT, visible
from hpcwizard.verify.results import Check

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[H\r\x9b31m\u202eevil\x00"


@pytest.mark.parametrize("raw, shown", [
    ("\x1b[2J", "\\x1b[2J"),
    ("title\x1b]0;x\x07", "title\\x1b]0;x\\x07"),
    ("a\rb\nc", "a\\x0db\\x0ac"),
    ("\x9b31m", "\\x9b31m"),
    ("\x7f", "\\x7f"),
    ("\u202egnp.exe", "\\u202egnp.exe"),
    ("col1\tcol2", "col1\tcol2"),            # a tab is kept
    ("[bold red]not markup[/]", "[bold red]not markup[/]"),  # shown as plain text
    ("中文 ünïcode", "中文 ünïcode"),
])
def test_control_characters_are_made_visible(raw, shown):
    assert visible(raw) == shown


def test_a_long_line_is_cut_and_says_how_much_was_left_out():
    line = "y" * (10 * LINE_LIMIT)
    shown = visible(line)
    assert shown == "y" * LINE_LIMIT + f"… (+{9 * LINE_LIMIT})"
    assert visible("z" * LINE_LIMIT) == "z" * LINE_LIMIT


def test_an_escape_is_not_cut_in_half():
    shown = visible("a" * (LINE_LIMIT - 1) + "\x1b[2J")
    assert shown.startswith("a" * (LINE_LIMIT - 1) + "\\x1b… (+3)")


def test_diagnose_shows_the_matched_line_safe_and_cut(tmp_path, capsys):
    log = tmp_path / "hostile.log"
    log.write_text(HOSTILE + " No space left on device " + "x" * 2_000_000 + "\n")
    # apply's "no space" signature: a log not headed as apply's is read as a job's
    assert main(["diagnose", "--scope", "apply", str(log)]) == 0
    out = capsys.readouterr().out
    assert "[no-space]" in out
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", out)
    assert "\\x9b31m\\u202eevil\\x00 No space" in out  # the line after the \\r
    assert max(len(line) for line in out.splitlines()) < LINE_LIMIT + 100


def test_a_signature_is_looked_for_in_the_start_of_a_long_line_only():
    far = "x" * MATCH_LIMIT + " No space left on device"
    assert diagnose([far]) == []
    assert [d.id for d in diagnose(["No space left on device " + "x" * 10 * MATCH_LIMIT])] \
        == ["no-space"]


def test_no_signature_has_an_unbounded_wildcard():
    """`a.*b` over a line of many `a`s costs the line's length for each `a`: quadratic."""
    for s in signatures():
        assert not re.search(r"(?<!\\)\.[*+]", s.pattern.pattern), s.id


def test_apply_prints_a_steps_output_safe():
    stream = io.StringIO()
    ConsoleSink(stream)(StepOutput(0, HOSTILE + "z" * 5000))
    out = stream.getvalue()
    assert "\x1b" not in out and "\\x1b[2J" in out and len(out) < LINE_LIMIT + 100


def test_verify_shows_remote_output_safe():
    c = Check("peer/n2/login", "login", "fail", detail=HOSTILE + "q" * 5000,
              explain="\x1b[31mred")
    text = "\n".join(check_text(c))
    assert "\x1b" not in text and "\\x1b[2J" in text and "\\x1b[31mred" in text
    assert len(text) < 2 * LINE_LIMIT


@pytest.mark.parametrize("check", [validate.user_name, validate.host_name, validate.host_pattern,
                                   validate.sha256, validate.url, validate.port,
                                   lambda v: validate.choice("framework", v, ("mpi",))])
def test_a_refusal_quotes_a_pasted_value_cut(check):
    """A 10,000-character paste is refused at its field (TUI) or in one line (CLI) without
    repeating all of it."""
    with pytest.raises(validate.BadInput) as exc:
        check("\u00e9" * 10_000)
    message = str(exc.value)
    assert len(message) < LINE_LIMIT + 300 and f"(+{10_000 - LINE_LIMIT})" in message
