"""Host inputs too large or too odd for a row of tests/fixtures/host-inputs.toml (made by
code, or files that are no regular file), through wizard/runtime.py: the wizard's hosts field
(hosts_from_text), the platform's variables (from_environment) and --hostfile (discover)."""
import os

import pytest

from hpcwizard.hosts import Hosts
from hpcwizard.runtime import discover, from_environment, hosts_from_text
from hpcwizard.validate import BadInput


def test_typed_hosts_and_none_given():
    assert hosts_from_text("node1,node2", "--hosts") == Hosts(("node1", "node2"), "--hosts")
    assert from_environment({}) is None and discover(None, None, {}) is None


@pytest.mark.parametrize("text", [
    ",".join(f"n{i}-[0-99]" for i in range(50)),  # 5000 in 50 items
    ",".join(f"n{i}-{{0..99}}" for i in range(50)),
])
def test_too_many_hosts_across_items_are_refused_before_they_are_built(text):
    """The cap counts the names of the items before, not each item alone."""
    with pytest.raises(BadInput, match="more than 4096 hosts"):
        hosts_from_text(text, "--hosts")


@pytest.mark.parametrize("text, words", [
    ("n{0.." + "9" * 5000 + "}", "more than 4096 hosts"),
    ("n[0-" + "9" * 5000 + "]", "more than 4096 hosts"),
    ("n[" + ",".join(["1"] * 100000) + "]", "more than 4096 hosts"),
    ("x" * (2 * 1024 * 1024), "longer than"),
])
def test_pattern_bombs_are_one_line_refusals(text, words):
    with pytest.raises(BadInput, match=words) as info:
        hosts_from_text(text, "--hosts")
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_hostfiles_are_read_as_regular_files_only(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path in (str(tmp_path / "fifo"), "/dev/zero", str(tmp_path)):
        with pytest.raises(BadInput, match="--hostfile .* is not a regular file"):
            discover(None, path, {})
        with pytest.raises(BadInput, match="^HOSTFILE .* is not a regular file"):
            from_environment({"HOSTFILE": path})
    (tmp_path / "big").write_bytes(b"n1\n" * 400000)
    with pytest.raises(BadInput, match="larger than 1 MiB"):
        discover(None, str(tmp_path / "big"), {})
