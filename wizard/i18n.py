"""What language does a person read? One translation layer for everything hpcwizard shows:
stdlib gettext, English text as the msgid, catalogues compiled to .mo and shipped inside the
data package (hpcwizard.recipes: recipes/locale/<lang>/LC_MESSAGES/hpcwizard.mo), read as
bytes through the package's loader so that they load from a zipapp too. English needs none:
the msgid is the English text.

    from .i18n import _
    print(_("port {port} is out of range").format(port=n))   # placeholders, never "+"

Texts that travel with recipe data (a step's title, why, note; a preset's title; a diagnosis'
cause and fix) carry their translations beside them (title_zh = "..."): `pick()` chooses.

The language: set_language("zh"|"en") (the CLI's --lang, the TUI's key), else the
environment (LC_ALL, LC_MESSAGES, LANG: zh_CN.UTF-8 -> "zh"), else English. Commands, file
contents and record keys never go through here: they are the same in every language.

Nothing is read at import: a catalogue is loaded on its first use (a few kB).
"""
from __future__ import annotations

import gettext
import io
import os
import unicodedata
from typing import Any, Dict, Mapping, Optional

from . import recipes

DOMAIN = "hpcwizard"
LANGUAGES = ("en", "zh")
CATALOGUES = {"en": "en", "zh": "zh_CN"}  # our language -> its catalogue directory

_language: Optional[str] = None  # None: not chosen yet, follow the environment
_loaded: Dict[str, gettext.NullTranslations] = {}


def normalise(lang: str) -> str:
    """'zh', 'zh_CN', 'zh_CN.UTF-8', 'zh-Hans' -> 'zh'; 'en_US.UTF-8', 'C', '' -> 'en'."""
    text = (lang or "").strip().lower().replace("-", "_")
    return "zh" if text.startswith("zh") else "en"


def language_from_env(environ: Optional[Mapping[str, str]] = None) -> str:
    """The language the locale environment asks for, as POSIX orders it: the first of
    LC_ALL, LC_MESSAGES, LANG that is set and not empty."""
    env = os.environ if environ is None else environ
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(var, "")
        if value:
            return normalise(value)
    return "en"


def set_language(lang: Optional[str]) -> str:
    """Choose the language ('en' or 'zh'; None: follow the environment again)."""
    global _language
    _language = None if lang is None else normalise(lang)
    return get_language()


def get_language() -> str:
    global _language
    if _language is None:
        _language = language_from_env()
    return _language


def catalogue_bytes(lang: str) -> Optional[bytes]:
    """The compiled catalogue of lang as shipped in the package, or None."""
    try:
        return recipes.read_bytes(f"locale/{CATALOGUES[lang]}/LC_MESSAGES/{DOMAIN}.mo")
    except OSError:
        return None


def translations(lang: Optional[str] = None) -> gettext.NullTranslations:
    lang = normalise(lang) if lang else get_language()
    t = _loaded.get(lang)
    if t is None:
        # English is the msgid, and its catalogue says so for every message: nothing to read
        data = None if lang == "en" else catalogue_bytes(lang)
        t = gettext.GNUTranslations(io.BytesIO(data)) if data else gettext.NullTranslations()
        _loaded[lang] = t
    return t


def _(message: str) -> str:
    """The message in the chosen language (the English msgid when it has no translation)."""
    if not message:
        return message
    return translations().gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return translations().ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Marks a message for the catalogue without translating it now (module constants):
    translate it where it is shown, with _(CONSTANT)."""
    return message


def pick(text_en: str, i18n: Optional[Mapping[str, Mapping[str, str]]], key: str,
         lang: Optional[str] = None) -> str:
    """A recipe-carried text in the chosen language: i18n[lang][key] when there is one,
    else the English text (step.title vs step.i18n["zh"]["title"])."""
    lang = normalise(lang) if lang else get_language()
    if lang != "en" and i18n:
        text = (i18n.get(lang) or {}).get(key, "")
        if text:
            return text
    return text_en


def field(obj: Any, key: str, lang: Optional[str] = None) -> str:
    """pick() for an object with the attribute key and an i18n mapping (Step, Preset,
    Diagnosis, Recipe): field(step, "title")."""
    return pick(getattr(obj, key, "") or "", getattr(obj, "i18n", None), key, lang)


# --- wide characters in a terminal -------------------------------------------------------------

def width(text: str) -> int:
    """Terminal cells text takes: CJK and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else
               0 if unicodedata.combining(ch) else 1 for ch in text)


def ljust(text: str, cells: int) -> str:
    """text padded with spaces to `cells` terminal cells (str.ljust counts characters)."""
    return text + " " * max(0, cells - width(text))


def clip(text: str, cells: int) -> str:
    """text cut to at most `cells` terminal cells (a wide character is not cut in half)."""
    while text and width(text) > cells:
        text = text[:-1]
    return text


def comment(text: str, prefix: str = "# ") -> str:
    """A translated text as shell/Dockerfile comment lines: every line starts with prefix."""
    return "\n".join((prefix + line).rstrip() for line in text.split("\n"))
