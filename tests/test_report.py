"""The console sink and the CLI when their reader goes away."""
import subprocess

from hpcwizard.apply import RunFinished, StepOutput, StepStarted
from hpcwizard.report import ConsoleSink


class _ClosedPipe:
    def __init__(self):
        self.writes = 0

    def write(self, text):
        self.writes += 1
        raise BrokenPipeError

    def flush(self):
        raise BrokenPipeError


def test_console_sink_stops_printing_but_does_not_raise_when_the_reader_left():
    stream = _ClosedPipe()
    sink = ConsoleSink(stream)
    sink(StepStarted(0, 2, "a/b", "title"))  # would abort apply_record if it raised
    sink(StepOutput(0, "line"))
    sink(RunFinished("done", "/tmp/r.toml"))
    assert sink.closed and stream.writes == 1


def test_plan_into_a_closed_pipe_ends_quietly():
    proc = subprocess.run("hpcwizard plan --framework mpi --network tcp | head -1",
                          shell=True, capture_output=True, text=True, executable="/bin/bash")
    assert proc.stdout.startswith("hpcwizard plan: mpi over TCP")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
