"""A fake verify.System for the verify tests and the wizard's Done screen: it answers the
checks' probes (hpcwizard.verify.probes) from their fields, never by reading argv back."""
import sys
import threading
import time
import types

from hpcwizard.verify import Ran, System
from hpcwizard.verify import probes as P

try:
    from hpcwizard import runtime  # noqa: F401
except ImportError:  # pragma: no cover - until wizard/runtime.py lands: its contract
    def _hostfile_text(names, slots):
        return "".join(f"{n} slots={slots}\n" for n in names)

    def _rank_of(names, env=None):
        raise AssertionError("the fake System answers which host this is (FakeSystem.rank)")

    _stand_in = types.ModuleType("hpcwizard.runtime")
    _stand_in.hostfile_text = _hostfile_text
    _stand_in.rank_of = _rank_of
    sys.modules["hpcwizard.runtime"] = _stand_in
    import hpcwizard

    hpcwizard.runtime = _stand_in


def logins_by_name(ips):
    """Each address's key login answers its instance's name: node1, node2, ... in order."""
    return {(lambda p, ip=ip: isinstance(p, P.SshCommand) and p.remote == "hostname"
             and p.host == ip): (0, f"node{i}\n") for i, ip in enumerate(ips, 1)}


class FakeSystem(System):
    """Peers: name -> state ('ok', 'down', 'noname', 'nokey', 'wrong'); probes answered from
    those states. `here` is the host this instance is (FakeSystem.rank: which of the job's
    names it is). answers: {probe class or predicate(probe): (rc, out)}, asked first, in
    order. Records every probe, its argv (`calls`) and the highest number in flight."""

    def __init__(self, peers, answers=None, port=2222, here="node1"):
        super().__init__()
        self.peers = peers
        self.port = port  # the port sshd -T and ssh -G report (the plan's)
        self.here = here
        self.answers = answers or {}
        self.probes = []
        self.calls = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()

    def uid(self):
        return 0

    def user(self):
        return "root"

    def rank(self, names, rank_var=""):
        return list(names).index(self.here) if self.here in names else None

    def write_temp(self, name, text, mode=0o600, owner=None):
        return f"/tmp/fake/{name}"

    def ask(self, probe):
        with self.lock:
            self.probes.append(probe)
            self.calls.append(probe.argv())
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            time.sleep(0.01)  # long enough for the checks of several hosts to overlap
            rc, out = self.answer(probe)
            return Ran(probe.argv(), rc, out)
        finally:
            with self.lock:
                self.inflight -= 1

    def asked(self, kind):
        """The probes of that class, in the order they were asked."""
        return [p for p in self.probes if isinstance(p, kind)]

    def answer(self, p):
        for key, ran in self.answers.items():
            if isinstance(p, key) if isinstance(key, type) else key(p):
                return ran
        state = self.peers.get(getattr(p, "host", ""), "ok")
        if isinstance(p, P.Resolve):
            if state == "noname":
                return 2, ""
            return 0, f"10.0.0.{list(self.peers).index(p.host) + 1} {p.host}\n"
        if isinstance(p, P.TcpConnect):
            if state == "down":
                return 1, f"bash: line 1: /dev/tcp/{p.host}/{p.port}: Connection refused"
            return 0, ""
        if isinstance(p, P.SshdInEffect):  # what an sshd of the plan has in effect
            return 0, (f"port {self.port}\npasswordauthentication no\n"
                       "kbdinteractiveauthentication no\npubkeyauthentication yes\n"
                       "permitrootlogin without-password\n")
        if isinstance(p, P.SshInEffect):
            return 0, f"host {p.host}\nport {self.port}\nbatchmode yes\n"
        if isinstance(p, P.ReadIbFacts):  # host "": this instance, read without SSH
            if p.host and state == "nokey":
                return 255, f"root@{p.host}: Permission denied (publickey)."
            return 0, self.ib_facts_out()
        if isinstance(p, (P.TcpBwReceiver, P.IbWriteBwServer)) and state == "nokey":
            return 255, f"root@{p.host}: Permission denied (publickey)."
        if isinstance(p, P.TcpBwReceiver):  # verify --bandwidth over TCP
            return 0, f"HPCWIZARD-TCPBW-LISTEN port=40001 token={self.TOKEN}\n"
        if isinstance(p, P.TcpBwSender):
            return 0, self.tcp_bw_line(9.4)
        if isinstance(p, P.LinkSpeed):
            return 0, "speed=10000 virtual=0 kind=none\n"
        if isinstance(p, P.IbWriteBwServer):
            return 0, ""
        if isinstance(p, P.LaunchHalf) and p.program.endswith("busbw.py"):
            return 0, "" if p.host else self.busbw_line(2.1)
        if isinstance(p, P.LaunchHalf) and state != "nokey":
            return 0, self.launch_half_out(p)
        if isinstance(p, (P.SshCommand, P.CopyTo)) or (isinstance(p, P.LaunchHalf) and p.host):
            if state == "nokey":
                return 255, f"root@{p.host}: Permission denied (publickey)."
            if isinstance(p, P.LaunchHalf):
                return 0, self.allreduce_line(1)
            if state == "wrong":
                return 0, "someone-else\n"
            return 0, f"{p.host}\n" if getattr(p, "remote", "") == "hostname" else ""
        if isinstance(p, P.LaunchHalf):
            return 0, self.allreduce_line(0)
        if isinstance(p, P.Mpirun) and p.program == ("hostname",):
            return 0, "".join(f"{h}\n" for h in self.peers)
        return 127, f"{p.argv()[0]}: command not found"

    @staticmethod
    def allreduce_line(rank, backend="gloo"):
        return (f"HPCWIZARD-ALLREDUCE rank={rank} size=2 backend={backend} sum=3 "
                f"expected=3\n")

    lost_ranks = ()  # ranks whose line the fake's halves leave out (a rank that died)

    def launch_half_out(self, p):
        """A launch half's lines as the all-reduce program prints them: NPROC_PER_NODE ranks
        (1 when the probe sets none), node NODE_RANK's, of a world of two such halves."""
        env = dict(p.extra_env)
        nproc = int(env.get("NPROC_PER_NODE", "1"))
        node = int(env.get("NODE_RANK", "1" if p.host else "0"))
        world = 2 * nproc
        return "".join(
            f"HPCWIZARD-ALLREDUCE rank={r} size={world} backend=gloo sum={world * (world + 1) // 2} "
            f"expected={world * (world + 1) // 2} local={r - node * nproc} node={node}\n"
            for r in range(node * nproc, (node + 1) * nproc) if r not in self.lost_ranks)

    HDR = "200 Gb/sec (4X HDR)"
    TWO_HDR_PORTS = (("mlx5_0", "1", "4: ACTIVE", HDR, "InfiniBand"),
                     ("mlx5_1", "1", "4: ACTIVE", HDR, "InfiniBand"))

    @staticmethod
    def ib_facts_out(ports=TWO_HDR_PORTS, uverbs=("/dev/infiniband/uverbs0",
                                                  "/dev/infiniband/uverbs1"),
                     memlock="unlimited", ucx="1.16.0", nccl="2.20.5",
                     libibverbs="1.14.50.0"):
        """What programs/ib_facts.sh prints (a healthy two-port HDR instance by default,
        the ports of tests/_ib_fixtures.TWO_HDR); "" leaves a library out, as the script does."""
        tag = "HPCWIZARD-IB\t"
        out = [tag + "\t".join(("port",) + tuple(p)) for p in ports]
        out += [f"{tag}uverbs\t{d}" for d in uverbs] + [f"{tag}memlock\t{memlock}"]
        if ucx:
            out += [f"{tag}ucx\t# Library version: {ucx}",
                    f"{tag}ucx\t# API headers version: {ucx}"]
        out.append(f"{tag}nccl\t{nccl}")
        if libibverbs:
            out.append(f"{tag}libibverbs\t{libibverbs}")
        return "\n".join(out + [tag + "end"]) + "\n"

    TOKEN = "0123456789abcdef0123456789abcdef"  # the TCP test's one-time token

    @staticmethod
    def tcp_bw_line(gbps, rtt_us=80.0):
        """What programs/tcp_bw.py's sender prints, for gbps and a round trip of rtt_us."""
        return (f"HPCWIZARD-TCPBW bytes=536870912 seconds=0.5 gbps={gbps:.3f} "
                f"sent=536870912 rtt_us={rtt_us:.1f}\n")

    @staticmethod
    def busbw_line(busbw, backend="gloo", size=2):
        """What programs/busbw.py's rank 0 prints, for busbw GB/s."""
        return (f"HPCWIZARD-BUSBW size={size} backend={backend} bytes=67108864 "
                f"seconds=0.064 algbw={busbw:.3f} busbw={busbw:.3f}\n")
