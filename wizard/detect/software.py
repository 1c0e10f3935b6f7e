"""What is installed: ssh/sshd (and is the SSH port served), MPI, UCX, PyTorch/NCCL, packages.

Several probes live here, one per program family, each a fact of its own (a probe that
fails costs only its own); their programs start ahead of them (commands). torch is never
imported: its version and NCCL's are read from the files on the target python3's path
(target_python), and only where those cannot tell is a separate `python3` asked.
"""
from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Optional, Tuple

from .base import Context, Found
from .commands import (MPIRUN_VERSION, OMPI_INFO, SSH_VERSION, UCX_DEVICES, UCX_VERSION,
                       find_sshd, package_queries, sshd_version)
from .listening import listening_sockets
from .target_python import (TargetPython, dist_version, find_target_python, first_dist_info,
                            listing)

TORCH_SCRIPT = r"""
# Reads what is installed without importing torch: an import costs seconds and gigabytes
# of libraries. verify imports it for real when it matters.
import json, os, re
out = {"torch": "", "cuda": "", "nccl": ""}
try:
    import importlib.util
    spec = importlib.util.find_spec("torch")
except Exception as exc:
    spec = None
if spec is None or not spec.origin:
    out["error"] = "ModuleNotFoundError: No module named 'torch'"
else:
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as fh:
            text = fh.read()
    except OSError as exc:
        text = ""
        out["error"] = "OSError: " + str(exc)
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    out["torch"] = m.group(1) if m else ""
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.M)
    out["cuda"] = m.group(1) if m else ""
    try:
        import importlib.metadata as md
    except ImportError:
        md = None
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        try:
            out["nccl"] = md.version(name) if md else ""
            break
        except Exception:
            pass
print("HPCWIZARD-TORCH " + json.dumps(out))
"""


# --- parsers -----------------------------------------------------------------------------

_OPENSSH = re.compile(r"OpenSSH_[0-9][0-9A-Za-z.]*")


def parse_ssh_version(text: str) -> str:
    """'OpenSSH_9.2p1 Debian-2+deb12u3, OpenSSL 3.0.15 ...' -> 'OpenSSH_9.2p1' ('' if none)."""
    m = _OPENSSH.search(text)
    return m.group(0) if m else ""


# `sshd -V` prints the version (newer OpenSSH), or "unknown option -- V", the version and
# the usage (older ones): the same search finds it in both.
parse_sshd_version = parse_ssh_version


def system_sshd_ports(ctx: Context, inodes: Dict[str, int]) -> Tuple[int, ...]:
    """The ports root's sshd of /etc/ssh/sshd_config listens on: its process found by
    /proc/PID/exe, its listening sockets by the inodes of its descriptors."""
    if not inodes:  # nothing listens: no process to look for
        return ()
    ports = set()
    for pid in ctx.listdir("proc"):
        if not pid.isascii() or not pid.isdigit():
            continue
        if ctx.readlink_name(f"proc/{pid}/exe").split(" ")[0] != "sshd":
            continue
        try:
            if os.stat(ctx.path(f"proc/{pid}")).st_uid != 0:
                continue
        except OSError:
            continue
        argv = (ctx.read(f"proc/{pid}/cmdline") or "").split("\0")
        if "-f" in argv and argv[argv.index("-f") + 1:][:1] != ["/etc/ssh/sshd_config"]:
            continue
        for fd in ctx.listdir(f"proc/{pid}/fd"):
            target = ctx.readlink_name(f"proc/{pid}/fd/{fd}")
            m = re.fullmatch(r"socket:\[([0-9]+)\]", target)
            if m and m.group(1) in inodes:
                ports.add(inodes[m.group(1)])
    return tuple(sorted(ports))


def parse_mpirun_version(text: str) -> Tuple[str, str]:
    """`mpirun --version` -> (flavour, version); ("", "") when not recognised."""
    m = re.search(r"\(Open MPI\)\s+(\S+)", text) or re.search(r"\(OpenRTE\)\s+(\S+)", text)
    if m:
        return "openmpi", m.group(1)
    if "Intel(R) MPI Library" in text:
        m = re.search(r"Version\s+([0-9][\w.]*)", text)
        return "intelmpi", m.group(1) if m else ""
    if "HYDRA build details" in text or "MPICH" in text:
        m = re.search(r"^\s*Version:\s+(\S+)", text, flags=re.MULTILINE)
        return "mpich", m.group(1) if m else ""
    return "", ""


def parse_ompi_info(text: str) -> Dict[str, object]:
    """ompi_info -> {"version": "4.1.4", "pml": (...), "btl": (...)} (components in order)."""
    version = ""
    m = re.search(r"^\s*Open MPI:\s+(\S+)", text, flags=re.MULTILINE)
    if m:
        version = m.group(1)
    comps: Dict[str, List[str]] = {"pml": [], "btl": []}
    for m in re.finditer(r"^\s*MCA (\w+):\s+([\w-]+)\s+\(", text, flags=re.MULTILINE):
        kind, name = m.group(1), m.group(2)
        if kind in comps and name not in comps[kind]:
            comps[kind].append(name)
    return {"version": version, "pml": tuple(comps["pml"]), "btl": tuple(comps["btl"])}


def parse_ucx_version(text: str) -> str:
    """`ucx_info -v` -> '1.13.1'. Handles '# Library version: X', '# UCT version=X', '# Version X'."""
    for pat in (
        r"Library version:\s*([0-9][\w.]*)",
        r"UCT version=([0-9][\w.]*)",
        r"^#\s*Version\s+([0-9][\w.]*)",
    ):
        m = re.search(pat, text, flags=re.MULTILINE)
        if m:
            return m.group(1)
    return ""


def parse_ucx_transports(text: str) -> Tuple[str, ...]:
    """`ucx_info -d` -> transport names, first-seen order, no repeats."""
    seen: List[str] = []
    for m in re.finditer(r"^#\s*Transport:\s*(\S+)", text, flags=re.MULTILINE):
        if m.group(1) not in seen:
            seen.append(m.group(1))
    return tuple(seen)


NCCL_DISTS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
_TORCH_VERSION = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)", re.M)
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", re.M)


def torch_from_files(target: Optional[TargetPython]) -> Optional[Dict[str, str]]:
    """What TORCH_SCRIPT would print, read from the target interpreter's path without
    starting it; None when only the interpreter can tell (no target, or torch found as a
    module file rather than the package pip installs). NCCL is the nvidia-nccl wheel torch
    loads: a CUDA wheel bundles none, and a statically linked one is a string inside
    libtorch_cuda.so, hundreds of megabytes not worth reading here."""
    if target is None:
        return None
    out = {"torch": "", "cuda": "", "nccl": ""}
    package = ""
    names: Dict[str, List[str]] = {}  # each directory listed once
    for d in target.site_path:
        if any(os.path.isfile(os.path.join(d, "torch", f"__init__{s}")) for s in (".py", ".pyc")):
            package = os.path.join(d, "torch")
            break
        if any(n.startswith("torch.") and n.endswith((".py", ".pyc", ".so"))
               for n in listing(d, names)):
            return None
    if not package:
        out["error"] = "ModuleNotFoundError: No module named 'torch'"
    else:
        text = ""
        try:
            with open(os.path.join(package, "version.py"), encoding="utf-8", errors="replace") as fh:
                text = fh.read(256 * 1024)
        except OSError as exc:
            out["error"] = "OSError: " + str(exc)
        m = _TORCH_VERSION.search(text)
        out["torch"] = m.group(1) if m else ""
        m = _TORCH_CUDA.search(text)
        out["cuda"] = m.group(1) if m else ""
    for name in NCCL_DISTS:
        info = first_dist_info(name, target.site_path, names)
        if info is not None:
            out["nccl"] = dist_version(info)
            break
    return out


def parse_torch_probe(text: str) -> Dict[str, str]:
    """The line our TORCH_SCRIPT prints -> {"torch", "cuda", "nccl"[, "error"]}."""
    for line in text.splitlines():
        if line.startswith("HPCWIZARD-TORCH "):
            data = json.loads(line[len("HPCWIZARD-TORCH "):])
            return {k: str(v) for k, v in data.items() if v is not None}
    raise ValueError("no result line from the torch probe")


def parse_dpkg_query(text: str) -> Dict[str, str]:
    """Package<TAB>status-abbrev<TAB>version lines -> {name: version} for installed ('ii')."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[1].startswith("ii"):
            out[parts[0]] = parts[2].strip()
    return out


def parse_rpm_qa(text: str) -> Dict[str, str]:
    """NAME<TAB>VERSION-RELEASE lines -> {name: version-release}."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0]:
            out[parts[0]] = parts[1].strip()
    return out


# --- probes ------------------------------------------------------------------------------

def probe_ssh(ctx: Context, found: Found) -> None:
    """The ssh client's version."""
    if not ctx.run_commands:
        return
    res = ctx.run(SSH_VERSION)
    if res is not None:
        version = parse_ssh_version(res.output)
        found.set("software.ssh_version", version)
        if not version:
            found.note("ssh.version-unknown", output=res.first_line())


def probe_sshd(ctx: Context, found: Found) -> None:
    """sshd's path and version, whether anything listens on ctx.ssh_port, and the ports
    root's sshd serves now. A probe apart from the client's, so that `ssh -V` and
    `sshd -V` run side by side."""
    sockets = listening_sockets(ctx)
    if sockets is None:
        found.note("ssh.port-unknown", port=ctx.ssh_port)
    else:
        found.set("software.ssh_port_listening", ctx.ssh_port in sockets.values())
        if ctx.local:
            found.set("software.sshd_ports", system_sshd_ports(ctx, sockets))

    sshd = find_sshd(ctx)
    found.set("software.sshd_path", sshd)
    if not (ctx.run_commands and sshd):
        return
    version_argv = sshd_version(ctx, sshd)
    res = ctx.run(version_argv)
    version = parse_sshd_version(res.output) if res is not None else ""
    if res is not None and not version:
        res = ctx.run([version_argv[0], "-h"])
        version = parse_sshd_version(res.output) if res is not None else ""
    if not version:
        found.note("ssh.sshd-version-unknown", sshd=sshd)
    found.set("software.sshd_version", version)


def probe_mpi(ctx: Context, found: Found) -> None:
    if not ctx.run_commands:
        return
    res = ctx.run(MPIRUN_VERSION)
    flavour = version = ""
    if res is not None:
        flavour, version = parse_mpirun_version(res.output)
        if not flavour:
            found.note("mpi.unknown", output=res.first_line())
    if flavour in ("openmpi", "") and (ctx.mpi_components or not flavour):
        info = ctx.run(OMPI_INFO)
        if info is not None and info.ok:
            parsed = parse_ompi_info(info.stdout)
            found.set("software.ompi_pml", parsed["pml"])
            found.set("software.ompi_btl", parsed["btl"])
            if not flavour and parsed["version"]:
                flavour, version = "openmpi", str(parsed["version"])
        elif info is not None:
            found.note("mpi.ompi-info-failed", output=info.first_line())
    found.set("software.mpi_flavour", flavour)
    found.set("software.mpi_version", version)


def probe_ucx(ctx: Context, found: Found) -> None:
    if not ctx.run_commands:
        return
    res = ctx.run(UCX_VERSION)
    if res is None:
        return
    version = parse_ucx_version(res.output)
    if not version:
        found.note("ucx.version-unknown", output=res.first_line())
    found.set("software.ucx_version", version)
    dev = ctx.run(UCX_DEVICES)
    if dev is not None and dev.ok:
        found.set("software.ucx_transports", parse_ucx_transports(dev.stdout))
    elif dev is not None:
        found.note("ucx.transports-unknown", output=dev.first_line())


def probe_torch(ctx: Context, found: Found) -> None:
    if not ctx.run_commands:
        return
    # The files answer in a millisecond what starting python3 answers in a tenth of a
    # second or more; it is started only where they cannot.
    data = torch_from_files(find_target_python("python3"))
    if data is None:
        res = ctx.run(["python3", "-c", TORCH_SCRIPT], timeout=ctx.timeout)
        if res is None:
            found.note("torch.no-python")
            return
        try:
            data = parse_torch_probe(res.stdout)
        except ValueError:
            found.note("torch.probe-failed", output=res.first_line())
            return
    if data.get("error") and "No module named" not in data["error"]:
        found.note("torch.import-failed", error=data["error"])
    found.set("software.torch_version", data.get("torch", ""))
    found.set("software.torch_cuda", data.get("cuda", ""))
    found.set("software.nccl_version", data.get("nccl", ""))


def probe_packages(ctx: Context, found: Found) -> None:
    if not ctx.run_commands:
        return
    tried = []
    for tool, argv in package_queries(ctx):
        parse = parse_dpkg_query if tool == "dpkg" else parse_rpm_qa
        res = ctx.run(argv)
        if res is None:
            tried.append(f"{tool}'s database is here but `{argv[0]}` is not")
            continue
        if res.ok:
            found.set("software.packages", parse(res.stdout))
            return
        tried.append(f"`{argv[0]}` failed ({res.first_line()})")
    if tried:
        found.note("packages.unknown", tried="; ".join(tried))
    else:
        found.note("packages.no-database")
