"""Facts as a plain-text summary a person can read in a terminal, in the chosen language
(labels and words, and the probes' notes by their codes; names and versions as detected).

    System
      OS             Debian GNU/Linux 12 (bookworm)  [debian 12, family debian, apt]
      ...
    Warnings
      ! RDMA port mlx5_0:1 is active but ...
    Notes
      - ...
"""
from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

from ..facts import Facts, Rdma
from ..vocab import DEFAULT_SSH_PORT
from ..i18n import _, ljust, width
from ..peer_memory import FILES as PEER_MEMORY_FILES
from .core import NO_COMMANDS_NOTE

LABEL = 14  # label column width


# What Rdma.gpudirect names, as NCCL finds it (hpcwizard.peer_memory).
_GPUDIRECT = {**{f.name: f.shown for f in PEER_MEMORY_FILES}, "dmabuf": "DMA-BUF"}


def gpudirect_text(rd: Rdma) -> str:
    """How the NIC reaches GPU memory here, as NCCL would find it."""
    if rd.gpudirect:
        return _GPUDIRECT.get(rd.gpudirect, rd.gpudirect)
    return _("none (no peer-memory module, no DMA-BUF)")


def _yes_no(value: Optional[bool], yes: str = "", no: str = "", unknown: str = "") -> str:
    if value is None:
        return unknown or _("unknown")
    return (yes or _("yes")) if value else (no or _("no"))


def _or(value: str, fallback: str) -> str:
    return value if value else fallback


def _mem(mib: Optional[int]) -> str:
    if mib is None:
        return _("unknown")
    if mib >= 1024:
        return f"{mib / 1024:.1f} GiB ({mib} MiB)"
    return f"{mib} MiB"


def _section(title: str, rows: Iterable[Tuple[str, str]]) -> List[str]:
    lines = [title]
    for label, value in rows:
        lines.append(f"  {ljust(label, LABEL)} {value}".rstrip())
    return lines


def _table(rows: List[List[str]]) -> List[str]:
    """Left-aligned columns, two spaces apart, indented like section rows."""
    if not rows:
        return []
    widths = [max(width(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[0] = max(widths[0], LABEL - 1)  # second column lines up with section values
    return [
        ("  " + "  ".join(ljust(c, w) for c, w in zip(r, widths))).rstrip() for r in rows
    ]


def _mirrors(facts: Facts) -> str:
    """The package mirrors and whether one answered: 'deb.debian.org:80 (reachable)'."""
    if not facts.mirrors:
        return _("none configured")
    shown = facts.mirrors_tried()
    state = _yes_no(facts.mirrors_reachable, _("reachable"), _("none reachable"),
                    _("not checked"))
    return f"{shown} ({state})"


def format_summary(facts: Facts, ssh_port: int = DEFAULT_SSH_PORT) -> str:
    """The whole of Facts, aligned, in plain text (no colour, no markup)."""
    o, u, r, s, rd = facts.os, facts.user, facts.runtime, facts.software, facts.rdma
    out: List[str] = []
    # Without commands, an empty version means "not checked", not "not installed".
    checked = not any(n.startswith(NO_COMMANDS_NOTE) for n in facts.notes)
    missing = _("not found") if checked else _("not checked (commands were not run)")

    os_detail = ", ".join(
        x for x in (
            f"{o.id} {o.version_id}".strip(),
            _("family {family}").format(family=o.family),
            o.package_manager or _("no package manager found"),
        ) if x
    )
    sudo_text = {
        "root": _("root (can change the system)"),
        "nopasswd": _("sudo without password"),
        "password": _("sudo with password"),
        "denied": _("sudo is here but runs nothing as root for you: cannot change the system"),
        "none": _("no sudo: cannot change the system"),
        "unknown": _("sudo unknown"),
    }.get(u.sudo, u.sudo)
    if not u.in_passwd:  # sudo, ssh-keygen and sshd refuse such a user: say why
        sudo_text += "; " + _("uid {uid} has no passwd entry").format(uid=u.uid)
    unknown = _("unknown")
    out += _section(_("System"), [
        (_("OS"), f"{_or(o.pretty_name, o.id)}  [{os_detail}]"),
        (_("Host name"), _or(facts.hostname, unknown)),
        (_("User"), _("{name} (uid {uid}, gid {gid}, home {home})").format(
            name=u.name, uid=u.uid, gid=u.gid, home=_or(u.home, unknown))),
        (_("Privileges"), sudo_text),
        (_("Container"), r.container),
        ("PID 1", _or(r.pid1, unknown) + (" (systemd)" if r.systemd else "")),
        ("/dev/shm", unknown if r.shm_mib is None else f"{r.shm_mib} MiB"),
        ("Jupyter", _yes_no(r.jupyter)),
        (_("CPUs"), unknown if facts.cpus is None else str(facts.cpus)),
        (_("Memory"), _mem(facts.memory_mib)),
    ])

    out.append("")
    out.append(_("Network"))
    if facts.ifaces:
        out += _table([
            [i.name, i.state, ", ".join(i.addresses) or _("(no address)")] for i in facts.ifaces
        ])
    else:
        out.append("  " + _("(no interfaces found)"))
    out += _section("", [(_("Mirrors"), _mirrors(facts))])[1:]

    out.append("")
    out.append("GPUs")
    if facts.gpus:
        rows = []
        for g in facts.gpus:
            mem = _("memory unknown") if g.memory_mib is None else f"{g.memory_mib} MiB"
            extra = ", ".join(x for x in (
                _("driver {version}").format(version=g.driver) if g.driver else "",
                f"CUDA {g.cuda}" if g.cuda else ""
            ) if x)
            rows.append([f"GPU {g.index}", g.name, mem, extra])
        out += _table(rows)
    else:
        out.append("  " + _("(none)"))

    out.append("")
    out.append("RDMA")
    if facts.hcas:
        rows = []
        for h in facts.hcas:
            kind = _("software") if h.software else _("hardware")
            detail = ", ".join(x for x in (
                h.driver, f"fw {h.fw_version}" if h.fw_version else "", kind) if x)
            if not h.ports:
                rows.append([h.name, _("(no ports)"), "", "", "", "", detail])
            for p in h.ports:
                rate = _("rate unknown") if p.rate_gbps is None else f"{p.rate_gbps:g} Gb/s"
                rows.append([p.name, p.state, p.phys_state, rate, p.link_layer,
                             p.netdev or "-", detail])
        out += _table(rows)
    else:
        out.append("  " + _("(no RDMA devices)"))
    if rd.memlock_unlimited:
        memlock = _("unlimited")
    elif rd.memlock_kib is not None:
        memlock = f"{rd.memlock_kib} KiB"
    else:
        memlock = unknown
    out += _section("", [
        ("uverbs", ", ".join(rd.uverbs) or _("none in /dev/infiniband")),
        ("memlock", memlock),
        ("GPUDirect", gpudirect_text(rd)),
    ])[1:]

    mpi = missing
    if s.mpi_flavour:
        name = {"openmpi": "Open MPI", "mpich": "MPICH", "intelmpi": "Intel MPI"}.get(
            s.mpi_flavour, s.mpi_flavour)
        mpi = f"{name} {s.mpi_version}".strip()
        if s.ompi_pml or s.ompi_btl:
            mpi += f" (pml: {', '.join(s.ompi_pml) or '-'}; btl: {', '.join(s.ompi_btl) or '-'})"
    ucx = missing
    if s.ucx_version:
        ucx = s.ucx_version
        if s.ucx_transports:
            ucx += f" (transports: {', '.join(s.ucx_transports)})"
    torch = missing
    if s.torch_version:
        bits = [f"CUDA {s.torch_cuda}" if s.torch_cuda else _("CPU only"),
                f"NCCL {s.nccl_version}" if s.nccl_version else _("no NCCL")]
        torch = f"{s.torch_version} ({', '.join(bits)})"
    sshd = _("not installed")
    if s.sshd_path:
        sshd = s.sshd_path + (f" ({s.sshd_version})" if s.sshd_version else "")
    packages = unknown if s.packages is None else _("{n} installed").format(n=len(s.packages))
    out.append("")
    out += _section(_("Software"), [
        ("ssh", _or(s.ssh_version, missing)),
        ("sshd", sshd),
        (_("port {port}").format(port=ssh_port),
         _yes_no(s.ssh_port_listening, _("something is listening"), _("nothing is listening"))),
        ("MPI", mpi),
        ("UCX", ucx),
        ("PyTorch", torch),
        (_("Packages"), packages),
    ])

    if facts.warnings:
        out.append("")
        out.append(_("Warnings"))
        out += [f"  ! {w.shown()}" for w in facts.warnings]
    if facts.notes:
        out.append("")
        out.append(_("Notes"))
        out += [f"  - {n.shown()}" for n in facts.notes]
    return "\n".join(out) + "\n"
