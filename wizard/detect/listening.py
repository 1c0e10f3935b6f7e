"""Which TCP sockets listen here, and on which port? socket inode -> local port, IPv4 and
IPv6 alike: the inode is what /proc/PID/fd names, so a caller can tell whose socket it is.

On this machine the kernel is asked through sock_diag netlink (what `ss -lt` does): it
walks the listening sockets alone. /proc/net/tcp{,6} walks every bucket of the connection
table whatever is in it, which is milliseconds on any machine and more on a large one (5 ms
for two listening sockets on a 2-core VM, half of what `detect` waited on); it stays for a
sysroot, which has no kernel to ask, and where netlink is refused (some sandboxes).
"""
from __future__ import annotations

import socket
import struct
from typing import Dict, Optional

from .base import TABLE_LIMIT, Context

# <linux/netlink.h>, <linux/sock_diag.h>, <linux/inet_diag.h>, <net/tcp_states.h>
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_LISTEN = 10  # the state number; /proc/net/tcp prints it as 0A

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
# inet_diag_req_v2: family, protocol, ext, pad, states; then inet_diag_sockid (48 bytes)
_REQUEST = struct.Struct("=BBBxI48x")
# inet_diag_msg (72 bytes): family, state at 1; id.sport (network order) at 4; inode at 68
_MSG_SIZE, _STATE, _SPORT, _INODE = 72, 1, 4, 68


def listening_sockets(ctx: Context) -> Optional[Dict[str, int]]:
    """Inode -> port of every TCP socket in LISTEN; None when nothing can say."""
    if ctx.local:
        found = from_sock_diag()
        if found is not None:
            return found
    texts = [t for t in (ctx.read("proc/net/tcp", TABLE_LIMIT),
                         ctx.read("proc/net/tcp6", TABLE_LIMIT)) if t is not None]
    if not texts:
        return None
    found = {}
    for text in texts:
        found.update(from_proc_net_tcp(text))
    return found


def from_proc_net_tcp(text: str) -> Dict[str, int]:
    """/proc/net/tcp{,6} text -> socket inode: local port, for the sockets in LISTEN (0A)."""
    out: Dict[str, int] = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 10 and ":" in parts[1] and parts[3].upper() == "0A":
            try:
                out[parts[9]] = int(parts[1].rsplit(":", 1)[1], 16)
            except ValueError:
                continue
    return out


def from_sock_diag(timeout: float = 1.0) -> Optional[Dict[str, int]]:
    """The kernel's own answer for this network namespace; None when netlink is refused
    or answers with an error (the caller falls back to /proc)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                              NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):
        return None
    out: Dict[str, int] = {}
    try:
        sock.settimeout(timeout)
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
            body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 1 << TCP_LISTEN)
            sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY,
                                     NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body)
            if not _read_dump(sock, seq, out):
                return None
    except OSError:  # a time-out included
        return None
    finally:
        sock.close()
    return out


def _read_dump(sock: "socket.socket", seq: int, out: Dict[str, int]) -> bool:
    """Read one dump's answers into out until NLMSG_DONE; False on an error or nonsense."""
    while True:
        data = sock.recv(1 << 16)
        if not data:
            return False
        offset = 0
        while offset + _NLMSGHDR.size <= len(data):
            length, kind, _flags, got_seq, _pid = _NLMSGHDR.unpack_from(data, offset)
            if length < _NLMSGHDR.size or offset + length > len(data):
                return False
            if got_seq == seq:
                if kind == NLMSG_DONE:
                    # A dump that failed part way (tcp_diag not loadable) ends with DONE
                    # carrying a negative errno: that is no answer, not "nothing listens".
                    return length < _NLMSGHDR.size + 4 or \
                        struct.unpack_from("=i", data, offset + _NLMSGHDR.size)[0] >= 0
                if kind == NLMSG_ERROR:
                    return False
                msg = offset + _NLMSGHDR.size
                if kind == SOCK_DIAG_BY_FAMILY and length - _NLMSGHDR.size >= _MSG_SIZE \
                        and data[msg + _STATE] == TCP_LISTEN:
                    port = struct.unpack_from("!H", data, msg + _SPORT)[0]
                    inode = struct.unpack_from("=I", data, msg + _INODE)[0]
                    out[str(inode)] = port
            offset += (length + 3) & ~3  # NLMSG_ALIGN
