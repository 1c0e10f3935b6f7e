"""The terminal's bytes as Textual reads them. Textual's input thread decodes them as strict
UTF-8 (textual/drivers/linux_driver.py: getincrementaldecoder("utf-8")()), so one byte that
is not UTF-8 (a pasted 0x9b, a Latin-1 terminal) ends the app with a UnicodeDecodeError
traceback. Read leniently, such a byte becomes U+FFFD, which a field then refuses."""
from __future__ import annotations

import codecs
import functools
from typing import Any, Callable


def _lenient(encoding: str) -> Callable[..., Any]:
    return functools.partial(codecs.getincrementaldecoder(encoding), errors="replace")


def read_input_leniently() -> None:
    """The drivers' decoder factory, made lenient: the name is looked up when their input
    thread starts, and nothing else in them uses it."""
    from textual.drivers import linux_driver, linux_inline_driver

    for module in (linux_driver, linux_inline_driver):
        module.getincrementaldecoder = _lenient  # type: ignore[attr-defined]
