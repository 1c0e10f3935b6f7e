"""hosts (the wizard's hosts field and the platform's variables): every source, which one was
used, and every name validated. tests/test_runtime.py holds it and recipes/runtime.sh to one
table of inputs; these are hosts.py's own limits (refused before expanding, as the user
types) and files."""
import pytest

from hpcwizard.hosts import (expand_nodelist, expand_pattern, from_environment,
                              hosts_from_text, parse_hostfile)
from hpcwizard.runtime import discover
from hpcwizard.validate import BadInput


def find_hosts(hosts=None, hostfile=None, env=None):
    """--hosts through the hosts field, --hostfile through the library (only the launch and
    verify take it), the environment through from_environment."""
    if hosts is not None:
        return hosts_from_text(hosts, "--hosts")
    if hostfile is not None:
        return discover(None, hostfile, env or {})
    return from_environment(env or {})


def test_hosts_list_and_pattern():
    h = find_hosts("node1,node2", env={})
    assert h.names == ("node1", "node2") and h.source == "--hosts"
    assert find_hosts("job-worker-{0..3}", env={}).names == tuple(f"job-worker-{i}" for i in range(4))
    assert expand_pattern("n{08..11}") == ["n08", "n09", "n10", "n11"]
    assert find_hosts("node[1-2],x", env={}).names == ("node1", "node2", "x")


def test_slurm_nodelist():
    assert expand_nodelist("node[01-03,07]") == ["node01", "node02", "node03", "node07"]
    assert expand_nodelist("a[1-2]-b[1-2],c") == ["a1-b1", "a1-b2", "a2-b1", "a2-b2", "c"]
    h = find_hosts(env={"SLURM_JOB_NODELIST": "gpu[1-2]"})
    assert h.names == ("gpu1", "gpu2") and h.source == "SLURM_JOB_NODELIST"


def test_hostfile_formats(tmp_path):
    names, slots = parse_hostfile("# c\nnode1 slots=4 max_slots=8\nnode2:2\n\nnode3\n")
    assert names == ["node1", "node2", "node3"] and slots == [4, 2, 1]
    f = tmp_path / "hf"
    f.write_text("a slots=2\nb slots=2\n")
    h = find_hosts(hostfile=str(f), env={})
    assert h.names == ("a", "b") and h.slots == (2, 2) and h.source.startswith("--hostfile")
    h = find_hosts(env={"OMPI_MCA_orte_default_hostfile": str(f)})
    assert h.names == ("a", "b") and "OMPI_MCA_orte_default_hostfile" in h.source
    h = find_hosts(env={"PRTE_MCA_prte_default_hostfile": str(f)})
    assert "PRTE" in h.source


def test_volcano_master_first():
    h = find_hosts(env={"VC_WORKER_HOSTS": "job-worker-0,job-worker-1",
                        "VC_MASTER_HOSTS": "job-master-0"})
    assert h.names == ("job-master-0", "job-worker-0", "job-worker-1")
    assert "VC_MASTER_HOSTS" in h.source


def test_master_addr_world_size():
    h = find_hosts(env={"MASTER_ADDR": "train-master-0", "WORLD_SIZE": "3"})
    assert h.names == ("train-master-0", "train-worker-0", "train-worker-1")
    h = find_hosts(env={"MASTER_ADDR": "job-0.svc", "WORLD_SIZE": "2"})
    assert h.names == ("job-0.svc", "job-1.svc")
    with pytest.raises(BadInput):
        find_hosts(env={"MASTER_ADDR": "10.0.0.1", "WORLD_SIZE": "2"})


def test_order_of_sources():
    env = {"HOSTS": "a,b", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert find_hosts(env=env).source == "HOSTS"
    assert find_hosts("x", env=env).source == "--hosts"


@pytest.mark.parametrize("bad", ["a;rm -rf /", "node_1,x", "a,a", "-x", "n{3..1}", "n[1-2"])
def test_bad_names_refused(bad):
    with pytest.raises(BadInput):
        find_hosts(bad, env={})


def test_nothing_given():
    assert from_environment({}) is None and discover(None, None, {}) is None
    with pytest.raises(BadInput, match="names no hosts"):
        find_hosts(" ", env={})


@pytest.mark.parametrize("text, expand", [
    ("x{0..4095}{0..4095}", expand_pattern),  # 16.7 million names, each range under the cap
    ("x{0..99}{0..99}{0..99}", expand_pattern),
    ("r[0-4095]-n[0-4095]", expand_nodelist),
    (",".join(f"n{i}-[0-99]" for i in range(50)), expand_nodelist),  # 5000 in 50 items
    (",".join(f"n{i}-{{0..99}}" for i in range(50)), lambda t: find_hosts(hosts=t)),
    (",".join(f"n{i}-{{0..99}}" for i in range(50)), lambda t: discover(t, None, {})),
])
def test_too_many_hosts_are_refused_before_they_are_built(text, expand):
    """The wizard checks the hosts field at every key: ranges that multiply past the cap are
    refused from their sizes, not after building millions of names."""
    with pytest.raises(BadInput, match="more than 4096 hosts"):
        expand(text)


def test_the_cap_itself_still_expands():
    assert len(expand_pattern("n{1..64}-{1..64}")) == 4096
    assert len(expand_nodelist("r[1-64]-n[1-64]")) == 4096


# --- issue 13: no recursion, stated limits, ASCII digits, platform variables ------------------

@pytest.mark.parametrize("text, words", [
    ("a" + "{0..0}" * 1200, "more than 16 ranges"),  # was RecursionError
    ("a" + "[0]" * 1200, "more than 16 ranges"),
    ("n{0.." + "9" * 5000 + "}", "more than 4096 hosts"),  # int() refuses 4300+ digits
    ("n[0-" + "9" * 5000 + "]", "more than 4096 hosts"),
    ("n[" + ",".join(["1"] * 100000) + "]", "more than 4096 hosts"),
    ("x" * (2 * 1024 * 1024), "longer than"),
    ("n{٠..٣}", "is not valid"),  # Arabic-Indic digits are not a range
    ("n[１-３]", "is not N or N-M"),
    ("a[[1]]", "unmatched bracket"),
])
def test_pattern_bombs_are_one_line_refusals(text, words):
    with pytest.raises(BadInput, match=words) as info:
        find_hosts(text, env={})
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_sixteen_ranges_still_expand():
    assert expand_pattern("a" + "{0..0}" * 16) == ["a" + "0" * 16]
    assert expand_nodelist("a" + "[0]" * 16) == ["a" + "0" * 16]
    assert expand_pattern("n{1..2}-{08..09}") == ["n1-08", "n1-09", "n2-08", "n2-09"]
    assert expand_nodelist("n[1,3-4]x[7]") == ["n1x7", "n3x7", "n4x7"]


@pytest.mark.parametrize("line", ["a slots=²", "a:٢", "a cpu=２", "a slots=", "a:", "a slots=0",
                                  "a slots=70000", "a slots=many"])
def test_a_hostfile_count_that_is_not_a_number_names_its_line(line):
    with pytest.raises(BadInput, match="line 2: the count in"):
        parse_hostfile("ok slots=1\n" + line + "\n")


def test_hostfiles_are_read_as_regular_files_only(tmp_path):
    import os

    os.mkfifo(tmp_path / "fifo")
    for path in (str(tmp_path / "fifo"), "/dev/zero", str(tmp_path)):
        with pytest.raises(BadInput, match="--hostfile .* is not a regular file"):
            find_hosts(hostfile=path, env={})
        with pytest.raises(BadInput, match="^HOSTFILE .* is not a regular file"):
            find_hosts(env={"HOSTFILE": path})
    (tmp_path / "big").write_bytes(b"n1\n" * 400000)
    with pytest.raises(BadInput, match="larger than 1 MiB"):
        find_hosts(hostfile=str(tmp_path / "big"), env={})


@pytest.mark.parametrize("env, words", [
    ({"HOSTS": "$(id)"}, "^HOSTS: "),
    ({"HOSTS": "`id`"}, "^HOSTS: "),
    ({"HOSTS": "n{3..1}"}, "^HOSTS: .*counts down"),
    ({"HOSTFILE": "/no/such"}, "^HOSTFILE /no/such does not exist"),
    ({"OMPI_MCA_orte_default_hostfile": "/no/such"}, "^OMPI_MCA_orte_default_hostfile "),
    ({"OMPI_MCA_prte_default_hostfile": "/no/such"}, "^OMPI_MCA_prte_default_hostfile "),
    ({"PRTE_MCA_prte_default_hostfile": "/no/such"}, "^PRTE_MCA_prte_default_hostfile "),
    ({"SLURM_JOB_NODELIST": "node[1-3"}, "^SLURM_JOB_NODELIST: .*unmatched bracket"),
    ({"SLURM_NODELIST": "node[a-b]"}, "^SLURM_NODELIST: "),
    ({"VC_WORKER_HOSTS": "w;id"}, "^VC_WORKER_HOSTS: "),
    ({"MASTER_ADDR": "$(id)", "WORLD_SIZE": "2"}, "^MASTER_ADDR: "),
    ({"MASTER_ADDR": "job-0", "WORLD_SIZE": "abc"}, "^WORLD_SIZE 'abc'"),
    ({"MASTER_ADDR": "job-0", "WORLD_SIZE": "٢"}, "^WORLD_SIZE '٢'"),
    ({"WORLD_SIZE": "abc"}, "^WORLD_SIZE 'abc'"),
    ({"WORLD_SIZE": "2"}, "^WORLD_SIZE is set but MASTER_ADDR is not"),
    ({"MASTER_ADDR": "job-0"}, "^MASTER_ADDR is set but WORLD_SIZE is not"),
])
def test_a_platform_variable_set_but_invalid_is_an_error_naming_it(env, words):
    """Never None ("no hosts given": verify would check this instance only)."""
    with pytest.raises(BadInput, match=words):
        from_environment(env)


def test_none_only_when_no_platform_variable_is_set():
    assert from_environment({}) is None
    assert from_environment({"HOSTS": " ", "SLURM_JOB_NODELIST": "", "WORLD_SIZE": "",
                             "VC_WORKER_HOSTS": " ", "PATH": "/bin"}) is None
