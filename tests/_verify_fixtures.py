"""A fake verify.System for the verify tests and the wizard's Done screen."""
import threading
import time

from hpcwizard.verify import Ran, System


class FakeSystem(System):
    """Peers: name -> state ('ok', 'down', 'noname', 'nokey', 'wrong'); commands answered
    from those states. Records every argv and the highest number of calls in flight."""

    def __init__(self, peers, answers=None, port=2222):
        super().__init__()
        self.peers = peers
        self.port = port  # the port sshd -T and ssh -G report (the plan's)
        self.answers = answers or {}
        self.calls = []
        self.inflight = 0
        self.max_inflight = 0
        self.lock = threading.Lock()

    def uid(self):
        return 0

    def user(self):
        return "root"

    def write_temp(self, name, text, mode=0o600, owner=None):
        return f"/tmp/fake/{name}"

    def run(self, argv, timeout=10.0, env=None, stdin=None):
        argv = tuple(argv)
        with self.lock:
            self.calls.append(argv)
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            time.sleep(0.01)
            return self._answer(argv)
        finally:
            with self.lock:
                self.inflight -= 1

    def _answer(self, argv):
        for key, ran in self.answers.items():
            if key in " ".join(argv):
                return Ran(argv, *ran)
        if argv[0] == "getent":
            host = argv[2]
            if self.peers.get(host) == "noname":
                return Ran(argv, 2, "")
            return Ran(argv, 0, f"10.0.0.{list(self.peers).index(host) + 1} {host}\n")
        if argv[0] == "timeout":
            target = argv[-1].split("/dev/tcp/")[1].split("/")[0]
            if self.peers.get(target) == "down":
                return Ran(argv, 1, f"bash: line 1: /dev/tcp/{target}/2222: Connection refused")
            return Ran(argv, 0, "")
        if "/usr/sbin/sshd" in argv and "-T" in argv:  # what an sshd of the plan has in effect
            return Ran(argv, 0, f"port {self.port}\npasswordauthentication no\n"
                                "kbdinteractiveauthentication no\npubkeyauthentication yes\n"
                                "permitrootlogin without-password\n")
        if "ssh" in argv and "-G" in argv:
            return Ran(argv, 0, f"host {argv[-1]}\nport {self.port}\nbatchmode yes\n")
        if argv[0] == "ssh":
            host = argv[argv.index("-p") + 2]
            if self.peers.get(host) == "nokey":
                return Ran(argv, 255, f"root@{host}: Permission denied (publickey).")
            if self.peers.get(host) == "wrong":
                return Ran(argv, 0, "someone-else\n")
            return Ran(argv, 0, f"{host}\n" if argv[-1] == "hostname" else "")
        if argv[0] == "mpirun":
            return Ran(argv, 0, "".join(f"{h}\n" for h in self.peers))
        return Ran(argv, 127, f"{argv[0]}: command not found")
