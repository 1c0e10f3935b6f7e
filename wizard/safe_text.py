"""Text from outside (a log, a remote command's output, a step's output) as a terminal may
show it: control characters made visible, a long line cut. A terminal obeys escape
sequences (title change, clear screen, cursor moves), so untrusted text never reaches it raw;
and a line of megabytes is no help to a reader.

    print(visible(line))   # '\\x1b[2J' printed as the four characters \\x1b, then '[2J'

Every place that shows untrusted text goes through visible(); markup (Rich's `[bold]`) is
left as it is: the screens show this text as plain Text, never as markup.
"""
from __future__ import annotations

import re

LINE_LIMIT = 300  # characters of one line shown; the rest is counted, not shown

# C0 controls except tab, DEL, C1 controls (0x9b is CSI on some terminals), and the bidi
# overrides and isolates that reorder what a reader sees.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def _escape(m: "re.Match[str]") -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def cut(value: object, limit: int = LINE_LIMIT) -> object:
    """A text longer than `limit`: its start, an ellipsis and how many characters were left
    out (a refusal quotes a pasted value without repeating all of it); anything else as is."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}… (+{len(value) - limit})"
    return value


def visible(text: str, limit: int = LINE_LIMIT) -> str:
    """text with every control character shown as an escape (tab kept), cut to `limit`
    characters of the original (so an escape never is cut in half)."""
    safe = _UNSAFE.sub(_escape, text[:limit])
    return f"{safe}… (+{len(text) - limit})" if len(text) > limit else safe
