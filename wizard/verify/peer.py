"""Checks on each peer, one chain per host: the name resolves (getent hosts: /etc/hosts and
DNS, as the job sees them), the SSH port answers, `ssh HOST hostname` in BatchMode returns
that host's name. A later check is skipped when an earlier one did not pass. For PyTorch
only verify's own test needs SSH: an SSH failure there is a skip that says so."""
from __future__ import annotations

import time

from ..i18n import _
from . import fleet
from . import needs as N
from .context import Ctx, _check
from .parse import HostMatcher, address_of, first_line
from .probes import CONNECT_TIMEOUT, Resolve, SshCommand, TcpConnect
from .results import FAIL, SKIP, Check
from .spec import Spec


def _soft(seen: str, host: str) -> str:
    """A PyTorch plan's SSH check that did not pass: what was seen, and why it is a skip."""
    return _("{seen}; {reason}: verify uses SSH only to start its own test on {host}").format(
        seen=seen, reason=N.no_ssh_reason(), host=host)


def resolve_title(ctx: Ctx, host: str) -> str:
    return _("{host}: name resolves").format(host=host)


def check_resolve(ctx: Ctx, host: str) -> Check:
    t0 = time.monotonic()
    r = ctx.ask(Resolve(host))
    addr = address_of(r.out) if r.ok else ""
    if addr:
        ctx.addresses[host] = addr
    return _check(f"peer/{host}/resolve", resolve_title(ctx, host), r,
                  bool(addr), detail=addr or _("no address"), host=host,
                  fallback="name-unresolved",
                  plain=_("{host} has no address here (not in DNS, not in /etc/hosts): the "
                          "instance does not exist, is not up yet, or the name is "
                          "wrong.").format(host=host),
                  t0=t0)


def port_title(ctx: Ctx, host: str) -> str:
    return _("{host}: SSH port {port} answers").format(host=host, port=ctx.port)


def check_port(ctx: Ctx, host: str) -> Check:
    soft = ctx.framework == "pytorch"
    addr = ctx.addresses.get(host, "")
    t0 = time.monotonic()
    r = ctx.ask(TcpConnect(host, ctx.port))
    timed_out = r.rc == 124
    seen = (_("{address} answers").format(address=f"{addr}:{ctx.port}") if r.ok else
            (_("no answer within {seconds}s").format(seconds=CONNECT_TIMEOUT) if timed_out
             else r.last_line()))
    return _check(f"peer/{host}/port", port_title(ctx, host), r, r.ok,
                  detail=_soft(seen, host) if soft and not r.ok else seen, host=host,
                  fallback="ssh-timeout" if timed_out else "ssh-refused",
                  plain=(_("{host} ({address}) does not answer on port {port}: sshd is not "
                           "running there, or a firewall drops the traffic.") if timed_out else
                         _("{host} ({address}) does not answer on port {port}: sshd is not "
                           "running there.")).format(host=host, address=addr, port=ctx.port),
                  t0=t0, status=(SKIP if soft and not r.ok else None))


def login_title(ctx: Ctx, host: str) -> str:
    return _("{host}: key login returns its name").format(host=host)


def check_login(ctx: Ctx, host: str) -> Check:
    soft = ctx.framework == "pytorch"
    title = login_title(ctx, host)
    t0 = time.monotonic()
    r = ctx.ask(SshCommand(host, ctx.port, "hostname", user=ctx.user))
    got = first_line(r.out) if r.ok else ""
    # asked alone: this login is what teaches the matcher an address's name
    same = bool(got) and HostMatcher((host,)).match([got]).ok
    if same:
        ctx.said[host] = got
    if r.ok and not same:
        return Check(f"peer/{host}/login", title, FAIL, r.command,
                     _("reached {name!r}").format(name=got),
                     _("ssh {host} reached a host that calls itself {name!r}: the name "
                       "{host} points at another instance (stale DNS or /etc/hosts "
                       "entry).").format(host=host, name=got),
                     host, seconds=time.monotonic() - t0)
    seen = got or r.last_line()
    return _check(f"peer/{host}/login", title, r, r.ok,
                  detail=_soft(seen, host) if soft and not r.ok else seen,
                  host=host, t0=t0, status=(SKIP if soft and not r.ok else None),
                  plain=_("{user} cannot log in to {host} with its key without a "
                          "prompt, so mpirun cannot start ranks there.").format(
                      user=ctx.target, host=host))


CHECKS = (
    Spec("peer/{host}/resolve", resolve_title, check_resolve),
    Spec("peer/{host}/port", port_title, check_port, needs=(N.RESOLVES,)),
    Spec("peer/{host}/login", login_title, check_login,
         needs=(N.RESOLVES, N.PORT_ANSWERS, N.ACT_AS)),
    Spec("peer/{host}/ib", fleet.host_title, fleet.check_host, networks=("ib",),
         needs=(N.ACT_AS, N.IB_FACTS_READABLE)),
)
