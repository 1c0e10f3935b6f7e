"""export -o: what stands at a companion's name (the Dockerfile's setup script) is refused as
at the named file, and a file system that refuses the write is one line, status 2: never a
traceback, with --force too."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from _ib_fixtures import make_facts
from hpcwizard import cli
from hpcwizard.render.dockerfile import SETUP_NAME

ARGV = ["export", "--framework", "mpi", "--network", "tcp"]


@pytest.fixture(autouse=True)
def facts(monkeypatch):
    monkeypatch.setattr("hpcwizard.commands.configure.facts_here",
                        lambda sysroot, **_: make_facts("rocky9"))


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


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_the_named_file_cannot_be_its_own_companion(tmp_path, capsys, monkeypatch, force):
    """-o hpcwizard-setup.sh: the Dockerfile would be written over its own setup script (and
    COPY itself); refused before anything is written, with --force too."""
    monkeypatch.chdir(tmp_path)
    err = one_line_refusal(capsys, ARGV + ["--format", "dockerfile", "-o", SETUP_NAME] + force)
    assert SETUP_NAME in err and "another name" in err
    assert os.listdir(tmp_path) == []
    one_line_refusal(capsys, ARGV + ["--format", "dockerfile", "-o",
                                     str(tmp_path / "." / SETUP_NAME)] + force)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt,name", [("setup", "x" * 300 + ".sh"), ("dockerfile", "x" * 300)])
def test_a_name_too_long_is_one_line_and_writes_nothing(tmp_path, capsys, fmt, name):
    err = one_line_refusal(capsys, ARGV + ["--format", fmt, "-o", str(tmp_path / name)])
    assert "too long" in err
    assert os.listdir(tmp_path) == []


def test_a_failed_named_file_takes_back_the_companion_it_made(tmp_path, capsys, monkeypatch):
    """The companions are written first: when the named file then fails, the new companion
    goes too (nothing is left of an export that was refused)."""
    from hpcwizard import session

    real = session.write_private

    def fail_on_dockerfile(path, *a, **k):
        if Path(path).name == "Dockerfile":
            raise PermissionError(13, "Permission denied")
        return real(path, *a, **k)

    monkeypatch.setattr(session, "write_private", fail_on_dockerfile)  # the export's writer
    one_line_refusal(capsys, ARGV + ["--format", "dockerfile", "-o", str(tmp_path / "Dockerfile")])
    assert os.listdir(tmp_path) == []
