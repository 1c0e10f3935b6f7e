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

    from hpcwizard.runtime import platform_variables

    # every variable recipes/runtime.sh reads hosts or the rank from (Kubeflow's too): a test
    # run inside such a pod must not see its job; NPROC_PER_NODE is the launch's own setting
    for var in (*platform_variables(), "NPROC_PER_NODE"):
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("VC_") and v.endswith("_HOSTS")]:
        monkeypatch.delenv(var)


@pytest.fixture(autouse=True)
def _own_machine_lock(request, tmp_path_factory, monkeypatch):
    """The wizard's and the command line's runs take the machine-wide lock when a step runs
    as root (hpcwizard.session): a unit test's fake run takes one of its own, so that it
    never waits on, or is refused by, a real hpcwizard (or another test process) on this
    machine. The system tests keep the real /run/lock/hpcwizard.lock."""
    if "system" in request.path.parts:
        return
    from hpcwizard import lock

    monkeypatch.setattr(lock, "MACHINE_LOCK",
                        str(tmp_path_factory.mktemp("machine-lock") / "hpcwizard.lock"))
