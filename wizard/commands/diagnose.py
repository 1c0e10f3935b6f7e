"""hpcwizard diagnose: the known failures in a job's log (ssh, mpirun, UCX, NCCL, PyTorch,
Slurm) or in hpcwizard apply's own log."""
from __future__ import annotations

import argparse
import json

from ..diagnose import diagnose_log
from ..exit_codes import EXIT_FAILED, EXIT_OK
from ..i18n import _, field
from ..inputs import LOG_LIMIT, read_text
from ..log_origin import as_data, describe


def cmd_diagnose(args: argparse.Namespace) -> int:
    """Exit 0: at least one known failure found; 1: nothing recognised; 2: unreadable file."""
    # a regular file or standard input, up to LOG_LIMIT: a FIFO or /dev/zero is refused
    text = read_text(args.logfile, _("log"), LOG_LIMIT, stdin=True)
    found = diagnose_log(text.splitlines(), getattr(args, "scope", None))
    if args.json:
        print(json.dumps([{"id": d.id, "line": d.line, "origin": as_data(d.origin),
                           "cause": d.cause, "fix": d.fix,
                           "cause_zh": d.i18n.get("zh", {}).get("cause", ""),
                           "fix_zh": d.i18n.get("zh", {}).get("fix", "")} for d in found],
                         indent=2, ensure_ascii=False))
    elif not found:
        print(_("{path}: no known failure recognised").format(path=args.logfile))
    else:
        for d in found:
            print(f"[{d.id}] {d.line}")
            if d.origin:
                print(_("  from:  {origin}").format(origin=describe(d.origin)))
            print(_("  cause: {cause}").format(cause=field(d, "cause")))
            print(_("  fix:   {fix}").format(fix=field(d, "fix")))
    return EXIT_OK if found else EXIT_FAILED
