"""argparse's own messages in the language hpcwizard speaks. argparse translates through its
module's `_` and `ngettext` (gettext's, on the 'argparse' domain, for which no catalogue is
installed anywhere we run): while the CLI builds and parses, `translated()` points them at our
catalogue, which carries argparse's msgids (ARGPARSE below, marked for the extractor). In
English the msgid is the text argparse shows.

The msgids are argparse's, as Python 3.9 to 3.13 write them (3.9 'optional arguments' became
'options' in 3.10; 3.11 put 'argument %(argument_name)s: %(message)s' under gettext; 3.13
added the deprecation warnings, 'subcommands' and '%(heading)s:'). tests/test_i18n_argparse.py
reads the running argparse's source: a message it has that is neither here nor in
NOT_SHOWN fails there, so a new Python's text does not silently stay English.
"""
from __future__ import annotations

import argparse
import re
import sys
from contextlib import contextmanager
from typing import Iterator

from .i18n import N_, _, get_language, translations

# What a user of hpcwizard can meet: usage errors, --help's headings and its -h line.
ARGPARSE = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("optional arguments"),  # 3.9
    N_("subcommands"),  # 3.13
    N_("%(heading)s:"),  # 3.13
    N_(" (default: %(default)s)"),  # 3.13's ArgumentDefaultsHelpFormatter
    N_("show this help message and exit"),
    N_("show program's version number and exit"),  # 3.13
    N_("argument %(argument_name)s: %(message)s"),  # 3.11 on; earlier: _Parser.error
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("invalid %(type)s value: %(value)r"),
    N_("the following arguments are required: %s"),
    N_("one of the arguments %s is required"),
    N_("not allowed with argument %s"),
    N_("unrecognized arguments: %s"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("ignored explicit argument %r"),
    N_("unexpected option string: %s"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("expected %s argument"),  # ngettext: singular and plural are two msgids here
    N_("expected %s arguments"),
    N_("unknown parser %(parser_name)r (choices: %(choices)s)"),
    N_("can't open '%(filename)s': %(error)s"),
    N_("%(prog)s: warning: %(message)s\n"),  # 3.13
    N_("option '%(option)s' is deprecated"),  # 3.13
    N_("argument '%(argument_name)s' is deprecated"),  # 3.13
    N_("command '%(parser_name)s' is deprecated"),  # 3.13
)

# argparse's msgids no user meets: mistakes in how a program builds its parser, FileType's
# "-" and the error format _Parser.error replaces (our one line: "hpcwizard: ...").
NOT_SHOWN = (
    "%(prog)s: error: %(message)s\n", "%r is not callable", ".__call__() not defined",
    "'required' is an invalid argument for positionals", "argument \"-\" with mode %r",
    "cannot have multiple subparser arguments", "cannot merge actions - two groups are named %r",
    "conflicting option string: %s", "conflicting option strings: %s",
    "conflicting subparser alias: %s", "conflicting subparser: %s",
    "dest= is required for options like %r", "invalid conflict_resolution value: %r",
    "invalid option string %(option)r: must start with a character %(prefix_chars)r",
    "mutually exclusive arguments must be optional",
)


def _gettext(message: str) -> str:
    return translations().gettext(message) if message else message


def _ngettext(singular: str, plural: str, n: int) -> str:
    # Chinese has one form: the catalogue has each as a msgid of its own
    return _gettext(singular if n == 1 else plural)


@contextmanager
def translated() -> Iterator[None]:
    """argparse speaks the chosen language inside (building a parser: its -h line and group
    headings are made then; parsing: its errors, --help)."""
    saved = argparse._, argparse.ngettext  # type: ignore[attr-defined]
    argparse._, argparse.ngettext = _gettext, _ngettext  # type: ignore[attr-defined]
    try:
        yield
    finally:
        argparse._, argparse.ngettext = saved  # type: ignore[attr-defined]


_ARGUMENT = re.compile(r"argument (?P<name>\S+): (?P<message>.*)", re.DOTALL)


def error_text(message: str) -> str:
    """A usage error's text. Before 3.11 argparse put 'argument X: ' in front untranslated."""
    if sys.version_info < (3, 11) and get_language() != "en":
        m = _ARGUMENT.fullmatch(message)
        if m:
            return _("argument %(argument_name)s: %(message)s") % dict(
                argument_name=m["name"], message=m["message"])
    return message
