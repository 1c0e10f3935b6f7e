"""Every test runs in English unless it asks for another language: CI's environment may set
LANG (zh_CN.UTF-8, say), and the language is process-wide (hpcwizard.i18n)."""
from __future__ import annotations

import pytest

from hpcwizard import i18n

LOCALE_VARS = ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE")


@pytest.fixture(autouse=True)
def _english(monkeypatch):
    for var in LOCALE_VARS:
        monkeypatch.delenv(var, raising=False)
    i18n.set_language("en")
    yield
    i18n.set_language("en")
