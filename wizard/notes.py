"""The notes and warnings detection gives, by code: one English template each (the msgid),
filled in by the probe with what it saw. Facts keep the English text and the code
(Note, below); what a person reads is shown() in the chosen language, so that
`detect --json`, logs and records stay English and the screens do not.

    found.note("gpu.none")                                # a probe, through base.Found
    found.note("net.ip-failed", output=res.first_line())
    note.shown()                                          # "nvidia-smi 未安装……" in zh

An argument named in TRANSLATED_ARGS is itself a message (a probe's label): translated too.
Everything else (command output, paths, names) is shown as the probe saw it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from .i18n import N_, _


class Note(str):
    """A note or warning of detection, as a message. The str is its English text (what logs,
    `in` checks and older readers of the facts see); code names the message and args fill
    it in, so that shown() gives it in the chosen language (the texts: NOTES,
    below). code "": a text from elsewhere (an older facts file), shown as it is.
    A str rather than a dataclass so that every reader of Facts.notes keeps working."""

    code: str
    args: Dict[str, Any]

    def __new__(cls, text: str, code: str = "", args: Optional[Dict[str, Any]] = None) -> "Note":
        self = super().__new__(cls, text)
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "args", dict(args or {}))
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Note does not change")

    def __reduce__(self) -> Any:  # copy, deepcopy (dataclasses.asdict) and pickle
        return (Note, (str(self), self.code, dict(self.args)))

    def shown(self) -> str:
        """The message in the chosen language."""
        return shown(self)

    def to_dict(self) -> Dict[str, Any]:
        return {"code": self.code, "text": str(self), "args": dict(self.args)}

    @classmethod
    def from_value(cls, value: Any) -> "Note":
        """From to_dict()'s form, a plain text (older facts), or a Note."""
        if isinstance(value, Note):
            return value
        if isinstance(value, dict):
            return cls(str(value.get("text", "")), str(value.get("code", "")),
                       value.get("args") if isinstance(value.get("args"), dict) else None)
        return cls(str(value))


NOTES: Dict[str, str] = {
    # detect() itself
    "detect.no-commands": N_(
        "Commands were not run: sudo rights, ssh/MPI/UCX/PyTorch versions, installed packages "
        "and nvidia-smi details are unknown."),
    "detect.no-commands-sysroot": N_(
        "Commands were not run (the system at {sysroot} is not the one running): sudo rights, "
        "ssh/MPI/UCX/PyTorch versions, installed packages and nvidia-smi details are unknown."),
    "probe.timeout": N_("`{command}` did not finish within {seconds} s: {label} is partly "
                        "unknown."),
    "probe.timeout-plural": N_("`{command}` did not finish within {seconds} s: {label} are "
                               "partly unknown."),
    "probe.crashed": N_("Could not check {label}: {error}"),
    "probe.deadline": N_("Checking {label} did not finish within {seconds} s: it is left "
                         "unknown."),
    "internal.unknown-fact": N_("Internal: a probe reported an unknown fact '{key}'."),
    # the distribution
    "os.refused": N_("{reasons}: the distribution is unknown."),
    "os.missing": N_("No /etc/os-release or /usr/lib/os-release: the distribution is unknown."),
    "os.refused-read-lib": N_("{reason}: read /usr/lib/os-release instead."),
    "os.unknown-family": N_(
        "The distribution '{id}' is not one hpcwizard knows and no apt-get, dnf, yum, zypper "
        "or apk was found: packages cannot be installed automatically."),
    # the user and sudo
    "user.no-passwd": N_(
        "User id {uid} has no entry in /etc/passwd: sudo, ssh-keygen and sshd refuse it "
        "(\"you do not exist in the passwd database\"). Run as root or as a named user, or add "
        "a passwd entry for it."),
    "user.sudo-password": N_("sudo asks for a password: system steps will need it typed in."),
    "user.sudo-denied": N_("sudo is installed but runs nothing as root for {name}: {why}"),
    # the container, PID 1, the host name, CPUs and memory
    "runtime.container-unknown": N_(
        "Could not tell whether this is a container (no /proc/1/cgroup to read)."),
    "runtime.pid1-unknown": N_(
        "Could not read /proc/1/comm: the init process (PID 1) is unknown."),
    "runtime.hostname-unknown": N_("The host name is unknown (no /etc/hostname)."),
    "runtime.shm-small": N_(
        "/dev/shm is {mib} MiB (a container's default is 64 MB): NCCL fails there (a crash in "
        "ncclShmOpen) and so can UCX's and Open MPI's shared memory between the ranks of one "
        "instance; 1 GiB or more is needed. It is the container's to change, when it starts: "
        "docker run --shm-size=16g (or --ipc=host); on Kubernetes, an emptyDir volume with "
        "medium: Memory mounted at /dev/shm."),
    "runtime.shm-unknown": N_("The size of /dev/shm is unknown: {error}."),
    "runtime.ptrace-unknown": N_(
        "Could not read {what}: whether the ranks on one instance may read each other's "
        "memory (Linux CMA) is unknown."),
    "runtime.no-cma": N_(
        "The ranks on one instance may not read each other's memory here: this container has "
        "no CAP_SYS_PTRACE and Yama's ptrace_scope is {scope}. Open MPI's single-copy "
        "transfers (CMA) and UCX's cma transport fail between them (Open MPI 4: 'Read -1, "
        "expected N, errno = 1'). The launch script checks this on every launch and turns "
        "them off (btl_vader_single_copy_mechanism=none, or smsc=^cma for Open MPI 5, and "
        "UCX_TLS=^cma); your own mpirun needs the same, or a container started with "
        "--cap-add SYS_PTRACE (Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])."),
    "runtime.no-cma-scope3": N_(
        "The ranks on one instance may not read each other's memory here: Yama's "
        "ptrace_scope is 3, which no capability lifts (until the host reboots). Open MPI's "
        "single-copy transfers (CMA) and UCX's cma transport fail between them (Open MPI 4: "
        "'Read -1, expected N, errno = 1'). The launch script checks this on every launch and "
        "turns them off (btl_vader_single_copy_mechanism=none, or smsc=^cma for Open MPI 5, "
        "and UCX_TLS=^cma); your own mpirun needs the same."),
    "hardware.cpus-unknown": N_("Could not count the CPUs (no /proc/cpuinfo)."),
    "hardware.memory-unknown": N_(
        "Could not read the memory size (no MemTotal in /proc/meminfo)."),
    # the network
    "net.ip-unexpected": N_(
        "`ip -j addr` printed something unexpected; read /sys/class/net instead."),
    "net.ip-failed": N_("`ip -j addr` failed ({output}); read /sys/class/net instead."),
    "net.none": N_("No network interfaces found (no `ip` command and no /sys/class/net)."),
    "net.no-addresses": N_(
        "IPv4 addresses are unknown: they need the `ip` command on the machine itself."),
    # RDMA
    "rdma.no-verbs-library": N_(
        "The kernel lists {hcas} but ibv_devinfo sees no device: the verbs user-space library "
        "(rdma-core, libmlx5) or /dev/infiniband is missing."),
    "rdma.from-ibv-devinfo": N_(
        "/sys/class/infiniband is missing; RDMA ports read from ibv_devinfo."),
    "rdma.ibv-devinfo-failed": N_("`ibv_devinfo` failed ({output})."),
    "rdma.memlock-unreadable": N_("The locked-memory limit is unknown: {error}."),
    "rdma.memlock-unknown": N_("The locked-memory limit (ulimit -l) is unknown."),
    "rdma.port-down": N_("RDMA port {port} is {state}{phys}: it will not carry traffic."),
    "rdma.no-uverbs": N_(
        "RDMA port {ports} is active but /dev/infiniband/uverbs* is missing: the container was "
        "started without the InfiniBand devices (docker run --device=/dev/infiniband, or the "
        "RDMA device plugin on Kubernetes)."),
    "rdma.memlock-low": N_(
        "The locked-memory limit (ulimit -l) is {kib} KiB, not unlimited: RDMA cannot pin its "
        "buffers. It is the container's to change, when it starts: docker run --ulimit "
        "memlock=-1 --cap-add IPC_LOCK; on Kubernetes, securityContext.capabilities.add: "
        "[\"IPC_LOCK\"] in the container's spec."),
    "rdma.no-gpudirect": N_(
        "GPUs and the active RDMA ports {ports} are here, but no GPUDirect RDMA: no peer-memory "
        "module (nvidia_peermem, nv_peer_mem) is loaded, and DMA-BUF needs Linux 5.12 and the "
        "NVIDIA driver's open kernel module 515 or later (here: Linux {kernel}, driver "
        "{nvidia} {module}). NCCL then copies every message through host memory (its log says "
        "\"GPU Direct RDMA Disabled\"), well below the link's bandwidth. It is the host's to "
        "fix, not the container's: modprobe nvidia-peermem on the host, or the driver's open "
        "kernel module for DMA-BUF."),
    "rdma.software": N_(
        "{hca} is a software RDMA device ({driver}): not hardware: no speed-up over TCP."),
    "rdma.software-over": N_(
        "{hca} is a software RDMA device ({driver} over {netdevs}): not hardware: no speed-up "
        "over TCP."),
    # GPUs
    "gpu.cuda-unknown": N_(
        "The CUDA version the driver supports is unknown (no header from nvidia-smi)."),
    "gpu.smi-failed": N_("nvidia-smi failed: {output}"),
    "gpu.smi-failed-present": N_(
        "nvidia-smi failed: {output} The GPUs are present but cannot be used."),
    "gpu.from-proc": N_(
        "GPUs read from /proc/driver/nvidia (nvidia-smi is not installed): memory and CUDA "
        "version unknown."),
    "gpu.from-proc-no-commands": N_(
        "GPUs read from /proc/driver/nvidia (commands were not run): memory and CUDA version "
        "unknown."),
    "gpu.none": N_("nvidia-smi is not installed and the kernel lists no NVIDIA GPU: no GPUs."),
    # SSH, MPI, UCX, PyTorch, packages
    "ssh.port-unknown": N_(
        "Could not read /proc/net/tcp: whether port {port} is served is unknown."),
    "ssh.version-unknown": N_("`ssh -V` printed no OpenSSH version ({output})."),
    "ssh.sshd-version-unknown": N_("{sshd} is installed but its version could not be read."),
    "mpi.unknown": N_("`mpirun --version` did not name a known MPI ({output})."),
    "mpi.ompi-info-failed": N_(
        "`ompi_info` failed ({output}): Open MPI's transports are unknown."),
    "ucx.version-unknown": N_("`ucx_info -v` printed no version ({output})."),
    "ucx.transports-unknown": N_("`ucx_info -d` failed ({output}): UCX transports are unknown."),
    "torch.no-python": N_("No python3 on PATH: PyTorch is unknown."),
    "torch.probe-failed": N_("python3 could not run the PyTorch check ({output})."),
    "torch.import-failed": N_("python3 cannot import torch: {error}"),
    "packages.no-database": N_(
        "Installed packages are unknown: there is no dpkg or rpm database."),
    "packages.unknown": N_("Installed packages are unknown: {tried}."),
    # the package mirrors
    "mirrors.none-configured": N_(
        "No package mirror is configured (apt sources, yum/dnf/zypper .repo files, apk "
        "repositories): whether packages can be installed is unknown."),
    "mirrors.none-answered": N_(
        "No package mirror answered within {seconds} s (a TCP connection to {tried})."),
}

# arguments that are messages themselves: a probe's label ("the GPUs"), a driver's
# stand-in ("emulated"), the kind of NVIDIA kernel module ("(open kernel module)"), each
# marked with N_() where it is written
TRANSLATED_ARGS = ("label", "driver", "module")


def note(code: str, **args: Any) -> Note:
    """The Note of code, filled in with args. A code not in NOTES is taken as a plain English
    text (a probe not converted yet): shown as it is, in every language."""
    template = NOTES.get(code)
    if template is None:
        return Note(code)
    return Note(template.format(**args), code, args)


def shown(n: Note) -> str:
    """n in the chosen language; its English text when its code is unknown here (facts from
    another version) or the translation does not fit its arguments."""
    template = NOTES.get(n.code)
    if template is None:
        return str(n)
    args = {k: _(v) if k in TRANSLATED_ARGS and isinstance(v, str) else v
            for k, v in n.args.items()}
    try:
        return _(template).format(**args)
    except (KeyError, IndexError, ValueError):
        return str(n)
