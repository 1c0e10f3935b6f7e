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

    def rank(self, names):
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
