"""The tests' line reader (_pipes.lines) leaves what it has not returned to communicate():
two lines written at once, the first read, the second still there."""
import subprocess
import sys

from _pipes import lines


def test_a_line_read_leaves_the_next_one_to_communicate():
    proc = subprocess.Popen([sys.executable, "-c", "import os; os.write(2, b'one\\ntwo\\nthr')"],
                            stderr=subprocess.PIPE, text=True)
    assert next(lines(proc.stderr)) == "one\n"
    _, rest = proc.communicate(timeout=60)
    assert rest == "two\nthr"


def test_the_last_line_without_a_newline_is_a_line():
    proc = subprocess.Popen([sys.executable, "-c", "import os; os.write(2, b'a\\nb')"],
                            stderr=subprocess.PIPE, text=True)
    assert list(lines(proc.stderr)) == ["a\n", "b"]
    proc.wait(timeout=60)
