"""diagnose on a job's log: every excerpt under fixtures/job-logs (lines copied from public
threads, the source of each in SOURCES.md beside them) is answered by its job-failure class
(the file name up to "--") and by no apply-time signature; the line's instance and rank are
read where the log names them; hpcwizard's own apply log is still read as apply's."""
import json
import re
from pathlib import Path

import pytest

from hpcwizard.cli import main
from hpcwizard.diagnose import diagnose, diagnose_log, is_apply_log, signatures
from hpcwizard.log_origin import Origin, describe, origin

JOB_LOGS = Path(__file__).parent / "fixtures" / "job-logs"
EXCERPTS = sorted(JOB_LOGS.glob("*.log"))
APPLY_IDS = {s.id for s in signatures() if s.scope == ""}
JOB_IDS = {s.id for s in signatures() if s.scope == "job"}


def _class(log: Path) -> str:
    return log.name.split("--")[0]


def test_enough_real_excerpts_over_enough_classes():
    classes = {_class(p) for p in EXCERPTS}
    assert len(EXCERPTS) >= 25 and len(classes) >= 12
    assert classes <= JOB_IDS, classes - JOB_IDS


def test_every_excerpt_names_its_source():
    """SOURCES.md gives each excerpt's thread: a row with the file name and a URL."""
    rows = (JOB_LOGS / "SOURCES.md").read_text().splitlines()
    for log in EXCERPTS:
        row = next((r for r in rows if f"`{log.name}`" in r), "")
        assert re.search(r"https://github\.com/\S+/(issues|pull)/\d+", row), log.name


# Where the wording changed between versions, both are here (older first).
FORMAT_VERSIONS = {
    "nccl-watchdog-timeout": ("ofa-271", "basicsr-737"),        # "[E ...] [Rank 1]" / "[rank1]:[E626 ..."
    "c10d-store-timeout": ("pytorch-69197", "vllm-19670"),      # connect() timed out / DistNetworkError
    "nccl-ib-retry-exceeded": ("nccl-902", "nccl-1698"),        # "with error 12," / "status=12"
    "master-port-in-use": ("gr-mg-11", "ms-swift-3988"),        # errno: 98 / code: -98, EADDRINUSE
    "srun-no-pmix": ("geos-chem-822", "executorlib-761"),       # Couldn't find / Couldn't load
    "exe-not-found": ("q-e-32", "gdtk-61"),                     # mpirun (Open MPI 4) / prterun (5)
    "nccl-shm": ("nccl-525", "ci-infra-490"),                   # include/shm.h / shmutils.cc, errno
}


@pytest.mark.parametrize("cls", sorted(FORMAT_VERSIONS))
def test_both_wordings_are_excerpted(cls):
    for tag in FORMAT_VERSIONS[cls]:
        assert (JOB_LOGS / f"{cls}--{tag}.log").exists(), (cls, tag)


@pytest.mark.parametrize("log", EXCERPTS, ids=lambda p: p.stem)
def test_excerpt_is_its_class_and_never_an_apply_answer(log, capsys):
    """Through the command as a user runs it: the class's id is found, no apply-time
    signature is ("run as root" for ptrace, --ssh-port for MASTER_PORT, "disk full" for
    NCCL's /dev/shm), and the class's advice is printed."""
    assert main(["diagnose", "--json", str(log)]) == 0
    ids = [d["id"] for d in json.loads(capsys.readouterr().out)]
    assert _class(log) in ids
    assert not set(ids) & APPLY_IDS, ids


def test_the_apply_signatures_would_have_answered_some_of_them():
    """The scope matters: read with every signature, these job logs get apply's advice."""
    wrong = {log.stem: {d.id for d in diagnose(log.read_text().splitlines())} & APPLY_IDS
             for log in EXCERPTS}
    assert wrong["ompi-cma-ptrace--ucx-3545"] == {"not-root"}
    assert wrong["master-port-in-use--ms-swift-3988"] == {"port-in-use"}
    assert wrong["nccl-shm--nccl-525"] == {"no-space"}


def test_ptrace_fix_names_every_known_remedy():
    fix = next(s.fix for s in signatures() if s.id == "ompi-cma-ptrace")
    for remedy in ("--cap-add SYS_PTRACE", "btl_vader_single_copy_mechanism", "smsc ^cma",
                   "UCX_TLS=^cma"):
        assert remedy in fix, remedy


def test_cma_bad_address_is_not_the_ptrace_class():
    """UCX's EFAULT (errno 14, a bad buffer) and vader's errno 22 are other faults."""
    lines = ["[lrdn2911:1723502:0:1723502]      cma_ep.c:88   process_vm_readv(pid=1723503 "
             "{0x14745e5ac800,61928}-->{0x150dba573e00,61928}) returned -1: Bad address",
             " Read -1, expected 18446744073709547536, errno = 22"]
    assert "ompi-cma-ptrace" not in [d.id for d in diagnose_log(lines)]


def test_socket_abort_on_a_routable_address_is_not_the_link_local_class():
    line = ("ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to "
            "10.0.0.2<45763> failed : Software caused connection abort")
    assert "nccl-socket-link-local" not in [d.id for d in diagnose_log([line])]


# --- which instance and rank --------------------------------------------------------------

ORIGINS = [
    # NCCL: host:pid:tid [cuda device]
    ("kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion",
     Origin(host="kp-ddp-worker-0", pid=3468, gpu=4)),
    # mpirun --tag-output around NCCL
    ("[1,2]<stdout>:smc-gpu-03:29880:30398 [0] init.cc:497 NCCL WARN Duplicate GPU detected",
     Origin(host="smc-gpu-03", rank=2, pid=29880, gpu=0)),
    # mpirun --tag-output around Open MPI's own [host:pid]
    ("[1,1]<stderr>:[30678029a2d4:12987] Read -1, expected 32416, errno = 1",
     Origin(host="30678029a2d4", rank=1, pid=12987)),
    # a CI's timestamp before Open MPI's [host:pid]
    ("2019-12-01T22:04:48.1127607Z [747732c455c1:07391] Read -1, expected 4067, errno = 1",
     Origin(host="747732c455c1", pid=7391)),
    # PyTorch >= 2.2: [rankN]: before c10d's own line
    ("[rank4]:[E1206 18:44:12.755262105 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught",
     Origin(rank=4)),
    # older PyTorch: only c10d's [Rank N]
    ("[E ProcessGroupNCCL.cpp:737] [Rank 3] Watchdog caught collective operation timeout",
     Origin(rank=3)),
    ("  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception",
     Origin(rank=5)),
    # Open MPI's TCP BTL: [host][[jobid,1],rank]
    ("[pi03][[24145,1],8][btl_tcp_endpoint.c:626:mca_btl_tcp_endpoint_recv_connect_ack] "
     "received unexpected process identifier [[24145,1],10]", Origin(host="pi03", rank=8)),
    # UCX: [host:pid:thread:tid]
    ("[lrdn2912:2435814:0:2435814]      cma_ep.c:88   process_vm_readv(pid=2435813",
     Origin(host="lrdn2912", pid=2435814)),
    # torchrun --tee's prefix [{role}{local_rank}]: around PyTorch's and NCCL's
    ("[default1]:[rank9]:[E626 06:24:44.9 ProcessGroupNCCL.cpp:616] [Rank 9] Watchdog",
     Origin(rank=9, local_rank=1)),
    ("[default0]:node2:1234:5678 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
     Origin(host="node2", local_rank=0, pid=1234, gpu=0)),
    # lines that name no origin: a socket.cpp location is not a host
    ("[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:50002", Origin()),
    ("torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients.",
     Origin()),
]


@pytest.mark.parametrize("line,expected", ORIGINS)
def test_origin_of_a_line(line, expected):
    assert origin(line) == expected


def test_the_command_says_where_the_line_came_from(capsys):
    log = JOB_LOGS / "nccl-duplicate-gpu--horovod-3929.log"
    assert main(["diagnose", str(log)]) == 0
    out = capsys.readouterr().out
    assert "  from:  host smc-gpu-03, rank 2, GPU 0, pid 29880" in out
    assert main(["diagnose", "--json", str(log)]) == 0
    first = json.loads(capsys.readouterr().out)[0]
    assert first["origin"] == {"host": "smc-gpu-03", "rank": 2, "pid": 29880, "gpu": 0}


def test_a_line_without_origin_prints_no_from_line(capsys):
    assert main(["diagnose", str(JOB_LOGS / "c10d-store-timeout--openrlhf-1040.log")]) == 0
    assert "from:" not in capsys.readouterr().out
    assert describe(Origin()) == ""


# --- hpcwizard's own apply log --------------------------------------------------------------

APPLY_BODY = ["", "== [2/9] packages: install OpenSSH", "E: Could not get lock /var/lib/dpkg/lock",
              "-- failed (exit 100, 3.0s)"]
APPLY_LOG = ["== hpcwizard apply 2026-12-03T22:40:00+00:00 (9 steps)"] + APPLY_BODY


def test_an_apply_log_is_read_with_applys_signatures(tmp_path, capsys):
    assert is_apply_log(["", *APPLY_LOG]) and not is_apply_log(APPLY_BODY)
    log = tmp_path / "rec.log"
    log.write_text("\n".join(APPLY_LOG) + "\n")
    assert main(["diagnose", str(log)]) == 0
    assert "[apt-lock]" in capsys.readouterr().out
    # forced to read it as a job's log: apt's lock is not a job failure
    assert main(["diagnose", "--scope", "job", str(log)]) == 1


def test_scope_apply_reads_output_without_the_header(tmp_path, capsys):
    pasted = tmp_path / "pasted.txt"
    pasted.write_text("\n".join(APPLY_BODY) + "\n")
    assert main(["diagnose", str(pasted)]) == 1  # no header: a job's log, nothing known
    capsys.readouterr()
    assert main(["diagnose", "--scope", "apply", str(pasted)]) == 0
    assert "[apt-lock]" in capsys.readouterr().out


def test_a_bad_scope_is_refused(capsys):
    assert main(["diagnose", "--scope", "all", str(EXCERPTS[0])]) == 2
    err = capsys.readouterr().err
    assert "--scope" in err and len(err.strip().splitlines()) == 1


def test_the_from_line_speaks_chinese():
    import subprocess
    import sys

    log = JOB_LOGS / "nccl-duplicate-gpu--horovod-3929.log"
    r = subprocess.run([sys.executable, "-m", "hpcwizard", "--lang", "zh", "diagnose", str(log)],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "  来自：主机 smc-gpu-03，rank 2，GPU 0，pid 29880" in r.stdout
    assert "解决：" in r.stdout and "torch.cuda.set_device" in r.stdout
