"""Every test runs in English unless it asks for another language: CI's environment may set
LANG (zh_CN.UTF-8, say), and the language is process-wide (hpcwizard.i18n). And no test sees
the job hosts the machine's platform may name (HOSTS, SLURM_JOB_NODELIST, ...): a test that
wants them sets them."""
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


@pytest.fixture(autouse=True)
def _no_platform_hosts(monkeypatch):
    import os

    from hpcwizard.hosts import HOSTFILE_VARS, SLURM_VARS

    for var in ("HOSTS", "HOSTFILE", "MASTER_ADDR", "WORLD_SIZE", *HOSTFILE_VARS, *SLURM_VARS):
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("VC_") and v.endswith("_HOSTS")]:
        monkeypatch.delenv(var)
