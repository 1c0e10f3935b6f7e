"""export -o: what stands at a companion's name (the Dockerfile's setup script) is refused as
at the named file, and a file system that refuses the write is one line, status 2: never a
traceback, with --force too."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from _ib_fixtures import make_facts
from hpcwizard import cli
from hpcwizard.dockerfile import SETUP_NAME

ARGV = ["export", "--framework", "mpi", "--network", "tcp"]


@pytest.fixture(autouse=True)
def facts(monkeypatch):
    monkeypatch.setattr(cli, "_facts", lambda sysroot, **_: make_facts("rocky9"))


def one_line_refusal(capsys, argv) -> str:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_force_refuses_a_directory_or_fifo_at_the_companions_name(tmp_path, capsys, kind):
    companion = tmp_path / SETUP_NAME
    if kind == "directory":
        companion.mkdir()
    else:
        os.mkfifo(companion)
    err = one_line_refusal(capsys, ARGV + ["--format", "dockerfile",
                                           "-o", str(tmp_path / "Dockerfile"), "--force"])
    assert str(companion) in err
    assert not (tmp_path / "Dockerfile").exists()  # nothing written
    assert companion.is_dir() if kind == "directory" else companion.is_fifo()


def test_a_write_the_file_system_refuses_is_one_line(tmp_path, capsys, monkeypatch):
    from hpcwizard import record

    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(record.tempfile, "mkstemp", refuse)
    err = one_line_refusal(capsys, ARGV + ["--format", "sbatch",
                                           "-o", str(tmp_path / "job.sbatch")])
    assert "Permission denied" in err and str(tmp_path / "job.sbatch") in err
    assert not Path(tmp_path / "job.sbatch").exists()
