"""Which sockets listen, asked of the kernel through sock_diag netlink (hpcwizard.detect.
listening): real sockets on this machine are found with their inodes and ports, the answer
is the one /proc/net/tcp gives, a refusal falls back to /proc, and a malformed or failed
netlink answer is None rather than a wrong list."""
from __future__ import annotations

import os
import socket
import struct

import pytest

from hpcwizard.detect import listening
from hpcwizard.detect.base import Context


def proc_answer() -> dict:
    found = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(name):
            with open(name) as fh:
                found.update(listening.from_proc_net_tcp(fh.read()))
    return found


@pytest.fixture
def sockets():
    """A listener on IPv4 and one on IPv6 loopback, and a connection (not listening)."""
    four = socket.socket(socket.AF_INET)
    four.bind(("127.0.0.1", 0))
    four.listen()
    opened = [four]
    try:
        six = socket.socket(socket.AF_INET6)
        six.bind(("::1", 0))
        six.listen()
        opened.append(six)
    except OSError:  # no IPv6 here: the IPv4 listener still shows what is asked
        six = None
    client = socket.create_connection(four.getsockname())
    opened.append(client)
    try:
        yield four, six, client
    finally:
        for s in opened:
            s.close()


def inode(sock: socket.socket) -> str:
    return str(os.fstat(sock.fileno()).st_ino)


def test_sock_diag_finds_the_listeners_and_agrees_with_proc(sockets):
    four, six, client = sockets
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, listening.NETLINK_SOCK_DIAG).close()
    except OSError:
        pytest.skip("this kernel or sandbox refuses sock_diag netlink; /proc answers instead")
    found = listening.from_sock_diag()  # netlink opens here: a wrong request is a failure
    assert found is not None
    ours = [s for s in (four, six) if s is not None]
    assert {inode(s): found.get(inode(s)) for s in ours} == \
        {inode(s): s.getsockname()[1] for s in ours}
    assert inode(client) not in found  # ESTABLISHED, not LISTEN
    # the same answer /proc gives, for these sockets (other programs may open and close
    # listeners between the two reads)
    proc = proc_answer()
    assert {inode(s): proc.get(inode(s)) for s in ours} == {inode(s): found[inode(s)] for s in ours}


def test_this_machine_is_asked_of_the_kernel_and_falls_back_to_proc(sockets, monkeypatch):
    four, _six, _client = sockets
    ctx = Context()
    assert listening.listening_sockets(ctx)[inode(four)] == four.getsockname()[1]
    monkeypatch.setattr(listening, "from_sock_diag", lambda: None)  # a sandbox says no
    assert listening.listening_sockets(ctx)[inode(four)] == four.getsockname()[1]


def test_a_sysroot_is_read_from_its_files_never_from_this_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(listening, "from_sock_diag",
                        lambda: pytest.fail("a sysroot's sockets are not this kernel's"))
    assert listening.listening_sockets(Context(sysroot=str(tmp_path))) is None  # no /proc
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n   0: 00000000:08AE 00000000:0000 0A 00000000:00000000 00:00000000 "
        "00000000     0        0 21011 1 0000000000000000 100 0 0 10 0\n")
    assert listening.listening_sockets(Context(sysroot=str(tmp_path))) == {"21011": 2222}


class Answers:
    """A netlink socket that answers with the given datagrams."""

    def __init__(self, *datagrams: bytes) -> None:
        self.datagrams = list(datagrams)

    def recv(self, _size: int) -> bytes:
        return self.datagrams.pop(0) if self.datagrams else b""


def message(kind: int, seq: int, body: bytes = b"") -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body


def diag(state: int, port: int, ino: int) -> bytes:
    body = bytearray(72)
    body[0], body[1] = socket.AF_INET, state
    struct.pack_into("!H", body, 4, port)
    struct.pack_into("=I", body, 68, ino)
    return message(listening.SOCK_DIAG_BY_FAMILY, 1, bytes(body))


def padded(msg: bytes, extra: int) -> bytes:
    """msg with `extra` bytes more in its body, its length no multiple of 4: the next
    message starts at the length rounded up (NLMSG_ALIGN)."""
    body = msg[16:] + bytes(extra)
    kind, flags, seq, pid = struct.unpack_from("=HHII", msg, 4)
    aligned = body + bytes(-len(body) % 4)
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, pid) + aligned


def test_a_dump_is_read_to_its_end_listeners_only():
    out = {}
    other = diag(listening.TCP_LISTEN, 8080, 5)
    other = other[:8] + struct.pack("=I", 9) + other[12:]  # another request's answer (seq)
    sock = Answers(padded(diag(listening.TCP_LISTEN, 22, 7), 3) + diag(1, 2222, 8),
                   other + diag(listening.TCP_LISTEN, 2222, 9)
                   + message(listening.NLMSG_DONE, 1, struct.pack("=i", 0)))
    assert listening._read_dump(sock, 1, out) is True
    assert out == {"7": 22, "9": 2222}


@pytest.mark.parametrize("datagrams", [
    (message(listening.NLMSG_ERROR, 1, struct.pack("=i", -22) + bytes(16)),),  # EINVAL
    (diag(listening.TCP_LISTEN, 22, 7)[:40],),  # cut short
    (struct.pack("=IHHII", 8, listening.SOCK_DIAG_BY_FAMILY, 0, 1, 0),),  # a length too small
    (diag(listening.TCP_LISTEN, 22, 7),),  # the kernel stopped before NLMSG_DONE
    # what a kernel without tcp_diag answers: DONE carrying -ENOENT
    (message(listening.NLMSG_DONE, 1, struct.pack("=i", -2)),),
], ids=["error", "truncated", "bad-length", "no-done", "done-with-errno"])
def test_a_failed_or_malformed_answer_is_no_answer(datagrams):
    assert listening._read_dump(Answers(*datagrams), 1, {}) is False
