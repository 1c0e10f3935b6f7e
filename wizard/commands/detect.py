"""hpcwizard detect: what this machine is and has. Light on purpose: it loads detection
alone, never the planner (importlib.resources and pathlib included)."""
from __future__ import annotations

import argparse
import json
import os

from ..detect import detect
from ..detect.summary import format_summary
from ..exit_codes import EXIT_OK
from ..facts import Facts
from ..i18n import _
from ..validate import BadInput


def facts_here(sysroot: str, mpi_components: bool = True) -> Facts:
    """The facts of the machine at sysroot; a sysroot that is no directory is bad input."""
    if not os.path.isdir(sysroot):
        raise BadInput(_("sysroot {path!r} is not a directory").format(path=sysroot))
    return detect(sysroot=sysroot, mpi_components=mpi_components)


def cmd_detect(args: argparse.Namespace) -> int:
    facts = facts_here(args.sysroot)
    if args.json:
        print(json.dumps(facts.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_summary(facts))
    return EXIT_OK
