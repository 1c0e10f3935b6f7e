"""Issue 6, bad input, table-driven: every input of the CLI (ports, user names, host names and
lists, hostfiles, patterns, URLs and sha256 values, sysroots, records, recipes, environment
variables) and every field of the TUI's Choose screen, fed values it must refuse.

CLI: exit status 2, exactly one line on stderr ("hpcwizard: ..." naming the problem), no
traceback, and nothing changed: /etc/ssh, ~/.ssh, /etc/hosts byte for byte, no state
directory, no file left in the working directory. TUI: the field shows one line naming the
problem and the wizard does not move on. Needs no root; changes nothing.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from _core_fixtures import wizard_exe

MPI_TCP = ["--framework", "mpi", "--network", "tcp"]
MPI_IB = ["--framework", "mpi", "--network", "ib"]
APPLY = ["apply", *MPI_TCP, "--manual", "--yes"]
PLAN = ["plan", *MPI_TCP]
VERIFY = ["verify", *MPI_TCP]
SHA = "a" * 64
URL = "https://example.org/ucx-1.16.deb"

GOOD_RECORD = """schema = 1
tool = "hpcwizard 0.1.0"
status = "done"
log = "{tmp}/r.log"
[choices]
framework = "mpi"
network = "tcp"
[target]
user = "root"
uid = 0
home = "/root"
[[steps]]
id = "ssh/user-key"
status = "done"
as = "user"
run = "true"
undo = "true"
"""

# name -> (argv, extra environment, files to create {name: bytes, or FIFO for a named pipe});
# {tmp} is the test's dir.
FIFO = None
Case = Tuple[List[str], Dict[str, str], Dict[str, Optional[bytes]]]
HERE = ["verify", *MPI_TCP, "--here"]
BOMB_BRACES = "a" + "{0..0}" * 1200  # a group each: recursion once per group was 1200 deep
BOMB_BRACKETS = "a" + "[0]" * 1200
HUGE = "9" * 5000  # int() refuses more than 4300 digits
NOT_ASCII = {"superscript": "²²²²", "arabic-indic": "٢٢٢٢", "fullwidth": "２２２２"}
CASES: Dict[str, Case] = {
    # ports
    "port-0": (APPLY + ["--ssh-port", "0"], {}, {}),
    "port-65536": (APPLY + ["--ssh-port", "65536"], {}, {}),
    "port-negative": (PLAN + ["--ssh-port=-1"], {}, {}),
    "port-letters": (PLAN + ["--ssh-port", "ssh"], {}, {}),
    "port-float": (PLAN + ["--ssh-port", "22.5"], {}, {}),
    "port-exponent": (PLAN + ["--ssh-port", "1e3"], {}, {}),
    "port-quoted-dollar": (PLAN + ["--ssh-port", "$2222"], {}, {}),
    "port-shell": (APPLY + ["--ssh-port", "2222;touch {tmp}/pwned"], {}, {}),
    "port-empty": (PLAN + ["--ssh-port", ""], {}, {}),
    # user names
    "user-semicolon": (APPLY + ["--user", "a;b"], {}, {}),
    "user-capital": (PLAN + ["--user", "Root"], {}, {}),
    "user-space": (PLAN + ["--user", "bad user"], {}, {}),
    "user-subst": (APPLY + ["--user", "$(touch {tmp}/pwned)"], {}, {}),
    "user-too-long": (PLAN + ["--user", "u" * 33], {}, {}),
    "user-missing": (APPLY + ["--user", "nosuchuser-hpcw"], {}, {}),
    "user-dash": (PLAN + ["--user=-rf"], {}, {}),
    # ssh Host patterns (--peers)
    "peers-slash": (PLAN + ["--peers", "job/*"], {}, {}),
    "peers-comma": (PLAN + ["--peers", "job-*,node-*"], {}, {}),
    "peers-tab": (PLAN + ["--peers", "job-*\tnode-*"], {}, {}),
    "peers-negation": (PLAN + ["--peers", "!job-*"], {}, {}),
    "peers-too-many": (PLAN + ["--peers", " ".join(f"n{i}" for i in range(33))], {}, {}),
    "peers-backtick": (APPLY + ["--peers", "`touch {tmp}/pwned`"], {}, {}),
    "peers-newline": (PLAN + ["--peers", "job-*\nMatch all"], {}, {}),
    # a value that starts with '-' becomes an option of the command it reaches (ssh -G PATTERN)
    "peers-leading-dash": (PLAN + ["--peers=-oProxyCommand"], {}, {}),
    "peers-leading-dash-second": (APPLY + ["--peers", "job-* -oProxyCommand"], {}, {}),
    "export-peers-leading-dash": (["export", *MPI_TCP, "--format", "setup", "--peers=-v"], {},
                                  {}),
    "hosts-leading-dash-second": (VERIFY + ["--hosts", "node1,-oProxyCommand"], {}, {}),
    "env-hosts-leading-dash": (VERIFY, {"HOSTS": "-v"}, {}),
    # the launch script refuses such a word before sshd starts; verify before its checks
    "env-forward-env-not-a-name": (VERIFY + ["--hosts", "node1,node2"],
                                   {"FORWARD_ENV": "HF_HOME;touch {tmp}/pwned"}, {}),
    "user-leading-dash": (APPLY + ["--user=-v"], {}, {}),
    # the job's hosts the SSH client settings are derived from (no --peers)
    "env-hosts-for-peers-shell": (PLAN, {"HOSTS": "node1;touch {tmp}/pwned"}, {}),
    "env-slurm-for-peers-bracket": (APPLY, {"SLURM_JOB_NODELIST": "node[1-"}, {}),
    # the platforms' lists and rank variables (verify refuses a bad rank before its checks)
    "env-skypilot-rank-past-the-list": (VERIFY, {"SKYPILOT_NODE_IPS": "203.0.113.10\n203.0.113.11",
                                                 "SKYPILOT_NODE_RANK": "2"}, {}),
    "env-dstack-count": (VERIFY, {"DSTACK_NODES_IPS": "203.0.113.20\n203.0.113.21",
                                  "DSTACK_NODES_NUM": "3"}, {}),
    "env-mlp-for-peers-shell": (PLAN, {"MLP_WORKER_ALL_HOSTS": "a;touch {tmp}/pwned"}, {}),
    "env-pai-dlc-rank": (VERIFY, {"MASTER_ADDR": "dlc1-master-0", "WORLD_SIZE": "2",
                                  "RANK": "5"}, {}),
    # host names and lists (verify --hosts)
    "hosts-semicolon": (VERIFY + ["--hosts", "node1;touch {tmp}/pwned"], {}, {}),
    "hosts-twice": (VERIFY + ["--hosts", "node1,node1"], {}, {}),
    "fleet-one-host": (VERIFY + ["--hosts", "node1", "--fleet"], {}, {}),
    "fleet-here": (VERIFY + ["--here", "--fleet"], {}, {}),
    "fleet-and-bandwidth": (VERIFY + ["--hosts", "node1,node2", "--fleet", "--bandwidth"],
                            {}, {}),
    "hosts-underscore": (VERIFY + ["--hosts", "node_1"], {}, {}),
    "hosts-leading-dash": (VERIFY + ["--hosts", "-node1,node2"], {}, {}),
    "hosts-bracket": (VERIFY + ["--hosts", "node[1-"], {}, {}),
    "hosts-empty": (VERIFY + ["--hosts", ","], {}, {}),
    "hosts-label-too-long": (VERIFY + ["--hosts", "n" * 64], {}, {}),
    "hosts-and-hostfile": (VERIFY + ["--hosts", "a", "--hostfile", "{tmp}/hf"], {},
                           {"hf": b"a\n"}),
    # hostfiles
    "hostfile-missing": (VERIFY + ["--hostfile", "{tmp}/no-such-hostfile"], {}, {}),
    "hostfile-directory": (VERIFY + ["--hostfile", "{tmp}"], {}, {}),
    "hostfile-shell": (VERIFY + ["--hostfile", "{tmp}/hf"], {},
                       {"hf": b"node1 slots=1\n$(touch /tmp/pwned) slots=1\n"}),
    "hostfile-quote": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": b"node1\nnode'2 slots=1\n"}),
    "hostfile-empty": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": b"# nothing\n"}),
    "hostfile-binary": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": b"\x00\xff\xfe\n"}),
    # bash's read drops a NUL: 'node1<NUL>node2' was one host 'node1node2'
    "hostfile-nul": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": b"node1\x00node2\n"}),
    "env-hostfile-nul": (VERIFY, {"HOSTFILE": "{tmp}/hf"}, {"hf": b"node1\nnode2\x00\n"}),
    # URLs and sha256 values
    "url-ftp": (["plan", *MPI_IB, "--ucx-url", "ftp://example.org/ucx.deb"], {}, {}),
    "url-quote": (["plan", *MPI_IB, "--ucx-url", "https://example.org/u'x.deb"], {}, {}),
    "url-space": (["plan", *MPI_IB, "--ucx-url", "https://example.org/u x.deb"], {}, {}),
    "url-not-package": (["plan", *MPI_IB, "--ucx-url", "https://example.org/ucx.tar.gz"], {}, {}),
    "url-subst": (["plan", *MPI_IB, "--ucx-url", "https://$(touch /tmp/pwned)/u.deb"], {}, {}),
    "sha-short": (["plan", *MPI_IB, "--ucx-url", URL, "--ucx-sha256", SHA[:63]], {}, {}),
    "sha-not-hex": (["plan", *MPI_IB, "--ucx-url", URL, "--ucx-sha256", "g" * 64], {}, {}),
    "sha-without-url": (["plan", *MPI_IB, "--ucx-sha256", SHA], {}, {}),
    # sysroots
    "sysroot-missing": (PLAN + ["--sysroot", "{tmp}/no-such-root"], {}, {}),
    "sysroot-file": (PLAN + ["--sysroot", "{tmp}/f"], {}, {"f": b"x"}),
    "sysroot-on-apply": (APPLY + ["--sysroot", "{tmp}"], {}, {}),
    # records
    "record-missing": (["undo", "{tmp}/no-such-record.toml", "--yes"], {}, {}),
    "record-not-toml": (["undo", "{tmp}/r.toml", "--yes"], {}, {"r.toml": b"this is [not toml\n"}),
    "record-binary": (["undo", "{tmp}/r.toml", "--yes"], {}, {"r.toml": b"\x89PNG\r\n\x1a\n\x00"}),
    "record-empty": (["replay", "{tmp}/r.toml", "--yes"], {}, {"r.toml": b""}),
    "record-truncated": (["undo", "{tmp}/r.toml", "--yes"], {},
                         {"r.toml": GOOD_RECORD.encode()[:200]}),
    "record-newer-schema": (["undo", "{tmp}/r.toml", "--yes"], {},
                            {"r.toml": GOOD_RECORD.replace("schema = 1", "schema = 99").encode()}),
    "record-no-schema": (["replay", "{tmp}/r.toml", "--yes"], {},
                         {"r.toml": GOOD_RECORD.replace("schema = 1\n", "").encode()}),
    "record-bad-choice": (["replay", "{tmp}/r.toml", "--yes"], {},
                          {"r.toml": GOOD_RECORD.replace('network = "tcp"',
                                                         'network = "tcp"\nssh_port = "22;id"')
                           .encode()}),
    "record-wrong-type": (["replay", "{tmp}/r.toml", "--yes"], {},
                          {"r.toml": GOOD_RECORD.replace('network = "tcp"',
                                                         'network = "tcp"\nuser = 5').encode()}),
    "record-directory": (["undo", "{tmp}", "--yes"], {}, {}),
    # commands and choices
    "no-command-no-terminal": ([], {}, {}),
    "unknown-command": (["bogus"], {}, {}),
    "framework-foo": (["apply", "--framework", "foo", "--network", "tcp", "--manual", "--yes"],
                      {}, {}),
    "network-missing": (["plan", "--framework", "mpi"], {}, {}),
    "host-keys-maybe": (PLAN + ["--host-keys", "maybe"], {}, {}),
    "export-format": (["export", *MPI_TCP, "--format", "rpm"], {}, {}),
    "export-into-missing-dir": (["export", *MPI_TCP, "--format", "setup", "-o",
                                 "{tmp}/no/such/dir/setup.sh"], {}, {}),
    "export-under-a-file": (["export", *MPI_TCP, "--format", "setup", "-o", "{tmp}/f/x"], {},
                            {"f": b"x"}),
    "export-onto-directory": (["export", *MPI_TCP, "--format", "setup", "-o", "{tmp}"], {}, {}),
    "diagnose-missing": (["diagnose", "{tmp}/no-such.log"], {}, {}),
    # where the lock, records and logs go: under a file, a file, a directory nobody writes
    "state-dir-under-dev-null": (APPLY, {"HPCWIZARD_STATE_DIR": "/dev/null/x"}, {}),
    "state-dir-under-a-file": (APPLY, {"HPCWIZARD_STATE_DIR": "{tmp}/f/state"}, {"f": b"x"}),
    "state-dir-a-file": (APPLY, {"HPCWIZARD_STATE_DIR": "{tmp}/f"}, {"f": b"x"}),
    "state-dir-records-a-file": (APPLY, {"HPCWIZARD_STATE_DIR": "{tmp}/s"},
                                 {"s/records": b"x"}),
    "state-dir-unwritable": (APPLY, {"HPCWIZARD_STATE_DIR": "/proc/1/state"}, {}),
    "xdg-state-home-under-a-file": (APPLY, {"HPCWIZARD_STATE_DIR": "",
                                            "XDG_STATE_HOME": "{tmp}/f/state"}, {"f": b"x"}),
    "state-dir-on-undo": (["undo", "{tmp}/r.toml", "--yes"], {"HPCWIZARD_STATE_DIR": "/dev/null/x"},
                          {"r.toml": GOOD_RECORD.encode()}),
    "record-under-dev-null": (APPLY + ["--record", "/dev/null/x/r.toml"], {}, {}),
    "record-under-a-file": (APPLY + ["--record", "{tmp}/f/r.toml"], {}, {"f": b"x"}),
    # environment read at plan time
    "env-apt-lock-timeout": (PLAN, {"HPCWIZARD_APT_LOCK_TIMEOUT": "soon"}, {}),
    "env-apt-lock-timeout-shell": (APPLY, {"HPCWIZARD_APT_LOCK_TIMEOUT": "1;touch /tmp/pwned"}, {}),
    # --- issue 13: digits that are not ASCII, in every numeric input (int('٢٢٢٢') is 2222,
    # '²'.isdigit() is True): the port, --jobs, WORLD_SIZE, hostfile counts, the apt timeout
    **{f"port-{kind}": (PLAN + ["--ssh-port", d], {}, {}) for kind, d in NOT_ASCII.items()},
    **{f"jobs-{kind}": (HERE + ["--jobs", d[:1]], {}, {}) for kind, d in NOT_ASCII.items()},
    **{f"env-world-size-{kind}": (VERIFY, {"MASTER_ADDR": "job-0", "WORLD_SIZE": d[:1]}, {})
       for kind, d in NOT_ASCII.items()},
    **{f"env-apt-lock-timeout-{kind}": (PLAN, {"HPCWIZARD_APT_LOCK_TIMEOUT": d}, {})
       for kind, d in NOT_ASCII.items()},
    "hostfile-slots-superscript": (VERIFY + ["--hostfile", "{tmp}/hf"], {},
                                   {"hf": "node1 slots=²\n".encode()}),
    "hostfile-count-arabic-indic": (VERIFY + ["--hostfile", "{tmp}/hf"], {},
                                    {"hf": "node1:٢\n".encode()}),
    "hostfile-cpu-fullwidth": (VERIFY + ["--hostfile", "{tmp}/hf"], {},
                               {"hf": "node1 cpu=２\n".encode()}),
    "hosts-brace-arabic-indic": (VERIFY + ["--hosts", "n{٠..٣}"], {}, {}),
    "hosts-bracket-fullwidth": (VERIFY + ["--hosts", "n[１-３]"], {}, {}),
    # recursion and size bombs in every pattern: --hosts, HOSTS, the Slurm node lists
    "hosts-brace-groups": (VERIFY + ["--hosts", BOMB_BRACES], {}, {}),
    "hosts-bracket-groups": (VERIFY + ["--hosts", BOMB_BRACKETS], {}, {}),
    "hosts-brace-product": (VERIFY + ["--hosts", "x{0..4095}{0..4095}"], {}, {}),
    "hosts-bracket-product": (VERIFY + ["--hosts", "r[0-4095]-n[0-4095]"], {}, {}),
    "hosts-brace-huge-number": (VERIFY + ["--hosts", "n{0.." + HUGE + "}"], {}, {}),
    "hosts-bracket-huge-number": (VERIFY + ["--hosts", "n[0-" + HUGE + "]"], {}, {}),
    "hosts-bracket-many-ranges": (VERIFY + ["--hosts", "n[" + ",".join(["1"] * 50000) + "]"],
                                  {}, {}),
    "env-hosts-brace-groups": (VERIFY, {"HOSTS": BOMB_BRACES}, {}),
    "env-hosts-bracket-groups": (VERIFY, {"HOSTS": BOMB_BRACKETS}, {}),
    "env-hosts-product": (VERIFY, {"HOSTS": "x{0..4095}{0..4095}"}, {}),
    "env-slurm-bracket-groups": (VERIFY, {"SLURM_JOB_NODELIST": BOMB_BRACKETS}, {}),
    "env-slurm-product": (VERIFY, {"SLURM_JOB_NODELIST": "r[0-4095]-n[0-4095]"}, {}),
    "env-slurm-huge-number": (VERIFY, {"SLURM_NODELIST": "n[0-" + HUGE + "]"}, {}),
    # files that are not regular (read at once, never blocking) or too large
    "hostfile-dev-zero": (VERIFY + ["--hostfile", "/dev/zero"], {}, {}),
    "hostfile-fifo": (VERIFY + ["--hostfile", "{tmp}/hf"], {}, {"hf": FIFO}),
    "hostfile-too-large": (VERIFY + ["--hostfile", "{tmp}/hf"], {},
                           {"hf": b"node1\n" * (200 * 1024)}),
    "env-hostfile-fifo": (VERIFY, {"HOSTFILE": "{tmp}/hf"}, {"hf": FIFO}),
    "env-ompi-hostfile-dev-zero": (VERIFY, {"OMPI_MCA_orte_default_hostfile": "/dev/zero"}, {}),
    "diagnose-dev-zero": (["diagnose", "/dev/zero"], {}, {}),
    "diagnose-fifo": (["diagnose", "{tmp}/log"], {}, {"log": FIFO}),
    "diagnose-directory": (["diagnose", "{tmp}"], {}, {}),
    # every platform host variable set but invalid: an error naming it, never "no hosts"
    # (which verified this instance only, and a user believed the cluster passed)
    "env-hosts-subst": (VERIFY, {"HOSTS": "$(touch {tmp}/pwned)"}, {}),
    "env-hosts-backtick": (VERIFY, {"HOSTS": "`touch {tmp}/pwned`"}, {}),
    "env-hosts-countdown": (VERIFY, {"HOSTS": "n{3..1}"}, {}),
    "env-hostfile-missing": (VERIFY, {"HOSTFILE": "{tmp}/no-such-hostfile"}, {}),
    "env-hostfile-bad-name": (VERIFY, {"HOSTFILE": "{tmp}/hf"}, {"hf": b"node1\nn;id\n"}),
    "env-ompi-orte-hostfile-missing": (VERIFY, {"OMPI_MCA_orte_default_hostfile": "{tmp}/nope"},
                                       {}),
    "env-ompi-prte-hostfile-missing": (VERIFY, {"OMPI_MCA_prte_default_hostfile": "{tmp}/nope"},
                                       {}),
    "env-prte-hostfile-bad-count": (VERIFY, {"PRTE_MCA_prte_default_hostfile": "{tmp}/hf"},
                                    {"hf": b"node1 slots=many\n"}),
    "env-slurm-job-nodelist-bracket": (VERIFY, {"SLURM_JOB_NODELIST": "node[1-3"}, {}),
    "env-slurm-nodelist-letters": (VERIFY, {"SLURM_NODELIST": "node[a-b]"}, {}),
    "env-vc-hosts-shell": (VERIFY, {"VC_WORKER_HOSTS": "w0,w1;touch {tmp}/pwned"}, {}),
    "env-master-addr-subst": (VERIFY, {"MASTER_ADDR": "$(id)", "WORLD_SIZE": "2"}, {}),
    "env-master-addr-alone": (VERIFY, {"MASTER_ADDR": "job-0"}, {}),
    "env-world-size-letters": (VERIFY, {"MASTER_ADDR": "job-0", "WORLD_SIZE": "abc"}, {}),
    "env-world-size-alone": (VERIFY, {"WORLD_SIZE": "abc"}, {}),
    "env-world-size-zero": (VERIFY, {"MASTER_ADDR": "job-0", "WORLD_SIZE": "0"}, {}),
    # options that do not apply to the choices are refused, not ignored
    "ucx-url-with-tcp": (PLAN + ["--ucx-url", URL], {}, {}),
    "ucx-url-with-pytorch": (["plan", "--framework", "pytorch", "--network", "ib",
                              "--ucx-url", URL], {}, {}),
    "ucx-sha-with-tcp": (APPLY + ["--ucx-url", URL, "--ucx-sha256", SHA], {}, {}),
    "peers-with-pytorch": (["plan", "--framework", "pytorch", "--network", "tcp",
                            "--peers", "job-*"], {}, {}),
    "host-keys-off-with-pytorch": (["apply", "--framework", "pytorch", "--network", "tcp",
                                    "--manual", "--yes", "--host-keys", "off"], {}, {}),
    "here-with-hosts": (HERE + ["--hosts", "node1,node2"], {}, {}),
    "jobs-with-here": (HERE + ["--jobs", "4"], {}, {}),
    "ssh-port-with-pytorch": (["plan", "--framework", "pytorch", "--network", "tcp",
                               "--ssh-port", "2200"], {}, {}),
    "force-without-output": (["export", *MPI_TCP, "--format", "setup", "--force"], {}, {}),
    "force-to-stdout": (["export", *MPI_TCP, "--format", "setup", "-o", "-", "--force"], {}, {}),
    # empty values: leaving the option out is how one asks for its default (an empty one was
    # taken for it in silence; -o '' printed the export instead of writing it)
    "user-empty": (PLAN + ["--user", ""], {}, {}),
    "user-blank": (APPLY + ["--user", " "], {}, {}),
    "peers-empty": (PLAN + ["--peers", ""], {}, {}),
    "peers-blank": (APPLY + ["--peers", "  "], {}, {}),
    "output-empty": (["export", *MPI_TCP, "--format", "setup", "-o", ""], {}, {}),
    # host names do not tell case apart: A and a are one host, checked twice
    "hosts-twice-in-another-case": (VERIFY + ["--hosts", "node1,NODE1"], {}, {}),
    "hosts-brace-list": (VERIFY + ["--hosts", "n{1,2}"], {}, {}),
    "hostfile-twice-in-another-case": (VERIFY + ["--hostfile", "{tmp}/hf"], {},
                                       {"hf": b"Node1\nnode1\n"}),
    "env-hosts-twice-in-another-case": (VERIFY, {"HOSTS": "n1 N1"}, {}),
}


def snapshot(*roots: Path) -> Dict[str, str]:
    """sha256 (and mode) of every file under roots; a file itself is one entry."""
    out: Dict[str, str] = {}

    def entry(p: Path) -> str:
        st = p.lstat()
        if not stat.S_ISREG(st.st_mode):
            return f"{stat.S_IFMT(st.st_mode):o}"
        try:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        except PermissionError:  # not root: a private host key; its metadata
            digest = f"unreadable {st.st_size} {st.st_mtime_ns}"
        return f"{stat.S_IMODE(st.st_mode):04o} {digest}"

    for root in roots:
        if not root.exists():
            out[str(root)] = "absent"
        elif root.is_file():
            out[str(root)] = entry(root)
        else:
            for dirpath, _dirs, files in os.walk(root):
                out[dirpath] = "dir"
                for name in files:
                    out[str(Path(dirpath, name))] = entry(Path(dirpath, name))
    return out


ROOTS = (Path("/etc/ssh"), Path.home() / ".ssh", Path("/etc/hosts"), Path("/var/lib/hpcwizard"))


def test_the_table_has_at_least_40_inputs() -> None:
    assert len(CASES) + len(TUI_CASES) >= 40


@pytest.mark.parametrize("case", list(CASES))
def test_cli_bad_input(case: str, tmp_path: Path) -> None:
    argv, env, files = CASES[case]
    work = tmp_path / "work"
    work.mkdir()
    for name, body in files.items():
        if body is FIFO:  # nobody writes to it: a reader that opens it blocking hangs
            os.mkfifo(work / name)
        else:
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(body.replace(b"{tmp}", str(work).encode()))
    argv = [a.replace("{tmp}", str(work)) for a in argv]
    env = {k: v.replace("{tmp}", str(work)) for k, v in env.items()}
    state = tmp_path / "state"
    before = snapshot(*ROOTS)
    listing = sorted(os.listdir(work))
    full_env = {**os.environ, "HPCWIZARD_STATE_DIR": str(state), **env}
    # 20 s: each case is refused in well under a second; a hang fails fast
    proc = subprocess.run([wizard_exe(), *argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=20, cwd=str(work), env=full_env)
    shown = (f"\n$ hpcwizard {' '.join(map(repr, argv))}\n--- stdout:\n{proc.stdout}"
             f"\n--- stderr:\n{proc.stderr}")
    assert proc.returncode == 2, f"exit {proc.returncode}, expected 2{shown}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: "), \
        f"stderr is not one 'hpcwizard: ...' line{shown}"
    assert len(lines[0]) > len("hpcwizard: ") + 10, f"the line names no problem{shown}"
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert snapshot(*ROOTS) == before, f"bad input changed the system{shown}"
    assert not state.exists(), f"bad input wrote to the state directory{shown}"
    assert sorted(os.listdir(work)) == listing, f"bad input left files behind{shown}"
    assert not (work / "pwned").exists() and not Path("/tmp/pwned").exists(), shown


# what some refusals must say (the table above holds them to one line and exit 2)
SAYS = {
    "env-forward-env-not-a-name": "FORWARD_ENV: 'HF_HOME;touch' is not a variable name",
    "export-under-a-file": "/f is not a directory: ",
    "peers-leading-dash": "not starting with '-'",
    "record-under-a-file": "/f is not a directory",
    "hostfile-nul": "holds a NUL byte",
    "hosts-brace-list": "--hosts: the brace list {1,2} is not supported",
    "hosts-twice-in-another-case": "--hosts names NODE1 twice: node1 and NODE1 are one host",
    "user-empty": "argument --user: the value is empty",
    "output-empty": "argument -o/--output: the value is empty",
    "force-without-output": "--force replaces files that -o FILE writes",
    "jobs-with-here": "--jobs is how many hosts are checked at once",
    "ssh-port-with-pytorch": "--ssh-port: SSH is configured for MPI only",
    "env-skypilot-rank-past-the-list": "SKYPILOT_NODE_RANK='2' is not 0..1",
    "env-dstack-count": "DSTACK_NODES_NUM='3', but DSTACK_NODES_IPS names 2 hosts",
    "env-pai-dlc-rank": "RANK='5' is not 0..1",
}


@pytest.mark.parametrize("case", list(SAYS))
def test_the_refusal_names_the_problem(case: str, tmp_path: Path) -> None:
    argv, env, files = CASES[case]
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    proc = subprocess.run([wizard_exe(), *argv], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=20, cwd=str(tmp_path),
                          env=dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp_path / "state"),
                                   LANG="C.UTF-8", LC_ALL="", LC_MESSAGES="",
                                   **{k: v.replace("{tmp}", str(tmp_path))
                                      for k, v in env.items()}))
    assert proc.returncode == 2 and SAYS[case] in proc.stderr, proc.stderr


# --- recipes with errors: the shipped recipes, edited (in-process: the catalog is swapped) ---

BROKEN_RECIPES = {
    "not-toml": "id = \"ssh\"\ntitle = [oops\n",
    "unknown-placeholder": """id = "x"
title = "X"
why = "x"
frameworks = ["mpi"]
networks = ["tcp"]
[[steps]]
id = "s"
title = "S"
as = "root"
check = "true"
run = "echo {{no_such_value}}"
undo = "true"
""",
    "unknown-kind": """id = "x"
title = "X"
why = "x"
frameworks = ["mpi"]
networks = ["tcp"]
[[steps]]
id = "s"
title = "S"
as = "root"
kind = "symlink"
check = "true"
run = "true"
undo = "true"
""",
    "no-undo-no-note": """id = "x"
title = "X"
why = "x"
frameworks = ["mpi"]
networks = ["tcp"]
[[steps]]
id = "s"
title = "S"
as = "root"
check = "true"
run = "true"
""",
}


@pytest.mark.parametrize("case", list(BROKEN_RECIPES))
def test_recipe_errors_are_one_line(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    from hpcwizard import catalog, cli

    (tmp_path / "broken.toml").write_text(BROKEN_RECIPES[case])
    real = catalog._recipe_files
    monkeypatch.setattr(catalog, "_recipe_files",
                        lambda directory: [*real(directory), tmp_path / "broken.toml"])
    monkeypatch.setenv("HPCWIZARD_STATE_DIR", str(tmp_path / "state"))
    before = snapshot(*ROOTS)
    code = cli.main(["plan", *MPI_TCP])
    out, err = capsys.readouterr()
    assert code == 2, f"exit {code}\n{out}\n{err}"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpcwizard: ") and "broken" in lines[0], err
    assert snapshot(*ROOTS) == before
    assert not (tmp_path / "state").exists()


# --- the TUI's fields ---------------------------------------------------------------------

TUI_CASES: Dict[str, Tuple[str, str, str]] = {  # field, typed value, words of the refusal
    "tui-port-0": ("ssh_port", "0", "out of range"),
    "tui-port-70000": ("ssh_port", "70000", "out of range"),
    "tui-port-letters": ("ssh_port", "22x", "not a number"),
    "tui-port-shell": ("ssh_port", "2;id", "not a number"),
    **{f"tui-port-{kind}": ("ssh_port", d, "not a number") for kind, d in NOT_ASCII.items()},
    "tui-user-space": ("user", "Bad User", "is not valid"),
    "tui-user-shell": ("user", "x;touch /tmp/pwned", "is not valid"),
    "tui-user-subst": ("user", "$(touch /tmp/pwned)", "is not valid"),
    "tui-user-missing": ("user", "nosuchuser-hpcw", "does not exist"),
    "tui-peers-comma": ("peers", "job-*,x", "is not valid"),
    "tui-peers-backtick": ("peers", "`touch /tmp/pwned`", "is not valid"),
    "tui-peers-semicolon": ("peers", "job-*;id", "is not valid"),
}


@pytest.mark.parametrize("case", list(TUI_CASES))
def test_tui_field_refuses(case: str, tmp_path: Path) -> None:
    pytest.importorskip("textual")
    from textual.widgets import Input, Static

    from _tui_fixtures import FakeRunner, make_app, text_of, to_choose, until_handled, wait_for

    field, value, words = TUI_CASES[case]
    runner = FakeRunner()
    app = make_app(tmp_path, runner=runner)
    before = snapshot(*ROOTS)

    async def go() -> Tuple[str, str, Optional[object]]:
        async with app.run_test(size=(80, 24)) as pilot:
            await to_choose(pilot)
            widget = app.screen.query_one(f"#{field}", Input)
            widget.focus()
            await pilot.pause()
            await pilot.press("end", *["backspace"] * len(widget.value))
            await pilot.press(*value)
            await wait_for(pilot, lambda: widget.value == value)
            await until_handled(pilot)  # each key's Changed reached the screen
            hint = app.screen.query_one(f"#{field}-hint", Static)
            hint.update("")  # what the field says from here on is what ctrl+n made of it
            await pilot.press("ctrl+n")
            # the state, not a time: refused at the field, or moved on
            await wait_for(pilot, lambda: bool(text_of(hint).strip())
                           or type(app.screen).__name__ != "ChooseScreen"
                           or app.plan is not None, what=f"{case}: an answer to ctrl+n")
            return type(app.screen).__name__, text_of(hint), app.plan

    screen, hint, plan = asyncio.run(go())
    assert screen == "ChooseScreen" and plan is None, f"{case}: the wizard moved on"
    assert words in hint and "\n" not in hint.strip(), f"{case}: the field says {hint!r}"
    assert not runner.calls, f"{case}: something ran or was checked"
    assert snapshot(*ROOTS) == before
    assert not (tmp_path / "state").exists()
    assert not Path("/tmp/pwned").exists()


# --- the Done screen's hosts field (verification) ------------------------------------------

DONE_HOSTS_CASES: Dict[str, Tuple[str, str]] = {  # typed value, words of the refusal
    "done-hosts-semicolon": ("node1;reboot", "hosts: host name 'node1;reboot' is not valid"),
    "done-hosts-subst": ("$(touch /tmp/pwned)", "is not valid"),
    "done-hosts-backtick": ("`touch /tmp/pwned`", "is not valid"),
    "done-hosts-option": ("-oProxyCommand=id", "is not valid"),
    "done-hosts-countdown": ("n{5..1}", "counts down"),
    "done-hosts-bracket": ("node[1-", "unmatched bracket"),
    "done-hosts-huge": ("x{0..4095}{0..4095}", "more than 4096 hosts"),
    "done-hosts-twice": ("node1,node1", "twice"),
    "done-hosts-twice-in-another-case": ("node1,NODE1", "are one host"),
    "done-hosts-brace-list": ("n{1,2}", "brace list {1,2} is not supported"),
    # issue 13: recursion and size bombs, digits that are not ASCII
    "done-hosts-brace-groups": ("a" + "{0..0}" * 40, "more than 16 ranges"),
    "done-hosts-bracket-groups": ("a" + "[0]" * 40, "more than 16 ranges"),
    "done-hosts-bracket-product": ("r[0-4095]-n[0-4095]", "more than 4096 hosts"),
    "done-hosts-huge-number": ("n{0.." + "9" * 40 + "}", "more than 4096 hosts"),
    "done-hosts-arabic-indic": ("n{٠..٣}", "is not valid"),
}


@pytest.mark.parametrize("case", list(DONE_HOSTS_CASES))
def test_done_hosts_field_refuses(case: str, tmp_path: Path) -> None:
    """Typed into Done's hosts field and submitted: refused at the field in one line, no
    verification started (the fake System sees no new command), nothing written."""
    pytest.importorskip("textual")
    from textual.widgets import Input, Static

    from _tui_fixtures import make_app, run_until, text_of, until_handled, wait_for
    from _verify_fixtures import FakeSystem

    value, words = DONE_HOSTS_CASES[case]
    system = FakeSystem({})
    app = make_app(tmp_path, verify_system=system)

    async def go() -> Tuple[int, str, str]:
        async with app.run_test(size=(80, 24)) as pilot:
            await run_until(pilot, "done")
            await pilot.press("n")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "DoneScreen"
                           and app.screen.verify_state == "ended")
            calls = len(system.calls)
            field = app.screen.query_one("#verify-hosts", Input)
            field.focus()
            await pilot.press(*value)
            await wait_for(pilot, lambda: field.value == value)
            await until_handled(pilot)  # each key's Changed reached the screen
            hint = app.screen.query_one("#verify-hint", Static)
            hint.update("")  # what the hint says from here on is what enter made of it
            await pilot.press("enter")
            # the state, not a time: refused, or a verification started
            await wait_for(pilot, lambda: bool(text_of(hint).strip())
                           or app.screen.verify_state == "running"
                           or len(system.calls) > calls, what=f"{case}: an answer to enter")
            content = hint.content
            return (len(system.calls) - calls, text_of(hint),
                    str(getattr(content, "style", "")))

    new_calls, hint, style = asyncio.run(go())
    assert new_calls == 0, f"{case}: a verification ran"
    assert words in hint and "\n" not in hint.strip(), f"{case}: the field says {hint!r}"
    assert style == "bold red"
    assert not Path("/tmp/pwned").exists()


# --- the Done screen with a platform variable set but unreadable ---------------------------

DONE_ENV_CASES: Dict[str, Tuple[Dict[str, str], str]] = {  # environment, words of the refusal
    "done-env-hosts-subst": ({"HOSTS": "$(touch /tmp/pwned)"}, "HOSTS: host name"),
    "done-env-slurm-bracket": ({"SLURM_JOB_NODELIST": "node[1-3"}, "SLURM_JOB_NODELIST"),
    "done-env-world-size": ({"MASTER_ADDR": "job-0", "WORLD_SIZE": "abc"}, "WORLD_SIZE 'abc'"),
    "done-env-hostfile-fifo": ({"HOSTFILE": "{tmp}/hf"}, "HOSTFILE"),
}


@pytest.mark.parametrize("case", list(DONE_ENV_CASES))
def test_done_refuses_an_unreadable_platform_variable(case: str, tmp_path: Path,
                                                      monkeypatch) -> None:
    """Not "this instance only" in silence: the verification Done starts by itself is refused
    at the hosts field, in one red line naming the variable, and so is Verify with the field
    empty; hosts typed into the field are verified."""
    pytest.importorskip("textual")
    from textual.widgets import Input, Static

    from _tui_fixtures import make_app, text_of, to_choose, wait_for
    from _verify_fixtures import FakeSystem

    env, words = DONE_ENV_CASES[case]
    os.mkfifo(tmp_path / "hf")
    for key, value in env.items():
        monkeypatch.setenv(key, value.replace("{tmp}", str(tmp_path)))
    system = FakeSystem({"node1": "ok"})
    app = make_app(tmp_path, verify_system=system)

    async def go() -> Tuple[str, str, int, str, int]:
        async with app.run_test(size=(80, 24)) as pilot:
            await to_choose(pilot)
            # the SSH client settings' hosts come from the same variable: refused at the
            # Instances field first, and named there by the user
            peers = app.screen.query_one("#peers", Input)
            assert peers.value == "" and words in text_of(app.screen.query_one("#peers-hint"))
            peers.value = "node*"
            await pilot.press("ctrl+n")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "RecommendScreen")
            await pilot.press("c")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ReviewScreen")
            await wait_for(pilot, lambda: all(app.screen.checked))
            await pilot.press("r")
            await wait_for(pilot, lambda: app.run_status == "done")
            await pilot.pause()
            await pilot.press("n")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "DoneScreen")
            done = app.screen
            hint = done.query_one("#verify-hint", Static)
            await wait_for(pilot, lambda: bool(text_of(hint).strip()))
            first, style, calls = text_of(hint), str(getattr(hint.content, "style", "")), \
                len(system.calls)
            state = done.verify_state
            field = done.query_one("#verify-hosts", Input)
            assert field.value == ""
            hint.update("")
            field.focus()
            await pilot.press("enter")  # Verify with the field empty: refused again
            await wait_for(pilot, lambda: bool(text_of(hint).strip()))
            again, second = len(system.calls), text_of(hint)
            await pilot.press(*"node1", "enter")  # typed hosts: verified
            await wait_for(pilot, lambda: done.verify_state == "ended")
            return first, style, calls + again, state + " " + second, len(system.calls)

    first, style, calls, state, after = asyncio.run(go())
    assert words in first and "\n" not in first.strip(), f"{case}: the hint says {first!r}"
    assert style == "bold red" and calls == 0, (style, calls)
    assert state.startswith("idle ") and words in state, state
    assert after > 0, "the hosts typed were not verified"
    assert not Path("/tmp/pwned").exists()


# --- a sysroot's files that are not regular: unknown, with a note, at once ------------------

@pytest.mark.parametrize("rel, kind", [("etc/os-release", "fifo"), ("etc/os-release", "zero"),
                                       ("etc/os-release", "dir"), ("proc/cpuinfo", "fifo"),
                                       ("proc/1/environ", "zero")])
def test_sysroot_files_that_are_not_regular_are_unknown_not_a_hang(rel, kind, tmp_path):
    """detect (and plan) read a sysroot's files: a FIFO there hung forever, /dev/zero ran out
    of memory. Now each is unreadable: "unknown" plus a note, exit 0, within seconds."""
    root = tmp_path / "root"
    (root / rel).parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(root / rel)
    elif kind == "zero":
        (root / rel).symlink_to("/dev/zero")  # a device without mknod (needs no root)
    else:
        (root / rel).mkdir()
    before = snapshot(*ROOTS)
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run([wizard_exe(), "detect", "--json", "--sysroot", str(root)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20,
                          env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    import json

    facts = json.loads(proc.stdout)
    if rel == "etc/os-release":
        assert facts["os"]["id"] == "unknown"
        # a note is its code, English text and arguments (hpcwizard.facts.Note.to_dict)
        assert any(n["code"] == "os.refused" and "os-release" in n["text"]
                   and "not a regular file" in n["text"] for n in facts["notes"]), facts["notes"]
    plan = subprocess.run([wizard_exe(), "plan", *MPI_TCP, "--sysroot", str(root)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20,
                          env=env)
    assert plan.returncode == 0 and "Traceback" not in plan.stderr, plan.stderr
    assert snapshot(*ROOTS) == before and not (tmp_path / "state").exists()


def test_a_facts_file_that_is_not_regular_is_refused(tmp_path) -> None:
    """HPCWIZARD_FACTS (the wizard's facts from a file) through the same reader."""
    pytest.importorskip("textual")
    from hpcwizard.screens.app import load_facts_file
    from hpcwizard.validate import BadInput

    os.mkfifo(tmp_path / "facts.json")
    for path in (str(tmp_path / "facts.json"), "/dev/zero"):
        with pytest.raises(BadInput, match="HPCWIZARD_FACTS .* is not a regular file"):
            load_facts_file(path)


def test_export_onto_a_fifo_is_refused(tmp_path) -> None:
    """export -o onto something that is not a regular file (a FIFO here; /dev/zero as root
    would lose the device node) is refused: exit 2, the FIFO still a FIFO."""
    os.mkfifo(tmp_path / "out")
    proc = subprocess.run([wizard_exe(), "export", *MPI_TCP, "--format", "setup", "-o",
                           str(tmp_path / "out")], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=20, cwd=str(tmp_path),
                          env=dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp_path / "state")))
    assert stat.S_ISFIFO(os.lstat(tmp_path / "out").st_mode), "the FIFO was replaced"
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr


# --- an older record still loads (a newer one is refused: tests/test_record.py) -------------

def test_an_older_record_without_the_newer_optional_fields_loads_and_undoes(tmp_path) -> None:
    """Schema 1 with only what every record had: no log path, no step titles or notes, no
    times, no facts or recommendation."""
    from hpcwizard.apply import undo_record
    from hpcwizard.record import Record

    path = tmp_path / "old.toml"
    path.write_text(GOOD_RECORD.replace('log = "{tmp}/r.log"\n', ""))
    record = Record.load(path)
    assert record.log_path == path.with_suffix(".log")

    class Runner:
        ran: List[str] = []

        def check(self, as_: str, text: str) -> bool:
            return False

        def run(self, as_: str, text: str, on_line) -> int:
            self.ran.append(text)
            return 0

    runner = Runner()
    assert undo_record(record, runner, lambda event: None) == "undone"
    assert runner.ran == ["true"]
    assert Record.load(path).steps[0].outcome.status == "undone"


def test_export_to_dash_is_standard_output(tmp_path) -> None:
    """-o - is standard output, as no -o is (a file named '-' is ./-): nothing is written."""
    env = dict(os.environ, HPCWIZARD_STATE_DIR=str(tmp_path / "state"))
    run = [wizard_exe(), "export", *MPI_TCP, "--format", "setup"]
    dash = subprocess.run(run + ["-o", "-"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=20, cwd=str(tmp_path), env=env)
    plain = subprocess.run(run, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=20, cwd=str(tmp_path), env=env)
    assert dash.returncode == 0 and dash.stdout.startswith("#!/usr/bin/env bash"), dash.stderr
    assert dash.stdout == plain.stdout and os.listdir(tmp_path) == []
