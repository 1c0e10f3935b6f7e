"""What is this machine? Frozen dataclasses, JSON-serialisable, with no behaviour beyond small
derived properties. Detection fills them (hpcwizard.detect); everything else reads them.

Unknown is always representable: a string field is "" or "unknown", an optional number is
None, and the reason lands in Facts.notes. Nothing here touches the system.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Dict, Optional, Tuple

from .i18n import _
from .notes import Note

# Families decide package names and the package manager's command line.
FAMILIES = ("debian", "rhel", "suse", "alpine", "unknown")
PACKAGE_MANAGERS = ("apt", "dnf", "yum", "zypper", "apk", "")
# denied: sudo is installed but runs nothing as root for this user; none: no sudo program
SUDO_MODES = ("root", "nopasswd", "password", "denied", "none", "unknown")


@dataclass(frozen=True)
class OsInfo:
    """The distribution, from os-release, and the package manager its family uses."""
    id: str = "unknown"
    version_id: str = ""
    pretty_name: str = ""
    id_like: Tuple[str, ...] = ()
    family: str = "unknown"
    package_manager: str = ""  # apt | dnf | yum | zypper | apk | "" (none found)


@dataclass(frozen=True)
class UserInfo:
    """Who runs hpcwizard, and what sudo lets them do."""
    name: str = "unknown"
    uid: int = -1
    gid: int = -1
    home: str = ""
    sudo: str = "unknown"  # root | nopasswd | password | denied | none | unknown
    # False for a uid without a passwd entry (docker run --user 12345): sudo refuses it
    in_passwd: bool = True

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    @property
    def can_change_system(self) -> bool:
        """True when system steps can run without asking anybody for anything."""
        return self.sudo in ("root", "nopasswd")


@dataclass(frozen=True)
class Runtime:
    """The container this runs in, its PID 1, Jupyter, and the size of /dev/shm."""
    container: str = "unknown"  # docker | podman | kubernetes | lxc | containerd | none | unknown
    pid1: str = ""  # the command name of PID 1
    jupyter: bool = False
    # The size of /dev/shm in MiB (None: not measured). NCCL and UCX put their intra-node
    # buffers there; Docker and Kubernetes give a container 64 MB unless told otherwise.
    shm_mib: Optional[int] = None

    @property
    def systemd(self) -> bool:
        return self.pid1 == "systemd"


@dataclass(frozen=True)
class Iface:
    """A network interface and its addresses."""
    name: str
    state: str = "unknown"  # UP | DOWN | UNKNOWN
    mac: str = ""
    addresses: Tuple[str, ...] = ()  # CIDR notation, v4 and v6


@dataclass(frozen=True)
class Port:
    """One port of an RDMA device: its state, rate, link layer and network device."""
    hca: str
    number: int
    state: str = "unknown"  # ACTIVE | DOWN | INIT | ARMED | unknown
    phys_state: str = "unknown"  # LinkUp | Polling | Disabled | ...
    rate_gbps: Optional[float] = None
    link_layer: str = "unknown"  # InfiniBand | Ethernet
    netdev: str = ""
    # RoCE: the lowest GID index whose type is RoCE v2 and whose GID is an IPv4 address
    # (::ffff:a.b.c.d), the one NCCL_IB_GID_INDEX and UCX_IB_GID_INDEX need; None for
    # InfiniBand, or when the port has none (or its GID table was not read)
    roce_v2_ipv4_gid: Optional[int] = None

    @property
    def active(self) -> bool:
        return self.state.upper() == "ACTIVE"

    @property
    def name(self) -> str:
        """The form UCX_NET_DEVICES and NCCL_IB_HCA use: mlx5_0:1."""
        return f"{self.hca}:{self.number}"


@dataclass(frozen=True)
class Hca:
    """An RDMA device (host channel adapter) and its ports."""
    name: str
    driver: str = ""  # mlx5_core, rdma_rxe, siw, ...
    vendor_id: str = ""  # PCI vendor, 0x15b3 for Mellanox/NVIDIA
    fw_version: str = ""
    ports: Tuple[Port, ...] = ()

    @property
    def software(self) -> bool:
        """rxe and siw are RDMA emulated over ordinary Ethernet: no speed-up."""
        return self.driver in ("rdma_rxe", "rxe", "siw") or self.name.startswith(("rxe", "siw"))


@dataclass(frozen=True)
class Gpu:
    """A GPU as nvidia-smi reports it."""
    index: int
    name: str
    memory_mib: Optional[int] = None
    driver: str = ""
    cuda: str = ""  # highest CUDA the driver supports, from nvidia-smi's header


@dataclass(frozen=True)
class Rdma:
    """What RDMA needs beyond the devices: /dev/infiniband, locked memory, GPUDirect."""
    uverbs: Tuple[str, ...] = ()  # /dev/infiniband/uverbs* present in this container
    memlock_kib: Optional[int] = None  # None = unlimited (or unknown: see notes)
    memlock_unlimited: bool = False
    peermem: bool = False  # a peer-memory module for GPUDirect RDMA is loaded (see gpudirect)
    # How NCCL can give the NIC GPU memory (GPUDirect RDMA), as NCCL checks it: the first of
    # peer_memory, else "dmabuf"; "" = none found (or not looked for: older facts)
    gpudirect: str = ""
    # the peer-memory version files present, by name (hpcwizard.peer_memory.FILES): which
    # of them an NCCL finds depends on its version
    peer_memory: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Software:
    """What is installed and running: ssh/sshd, MPI, UCX, PyTorch/NCCL, the packages."""
    ssh_version: str = ""
    sshd_path: str = ""
    sshd_version: str = ""
    ssh_port_listening: Optional[bool] = None
    # the ports the system sshd (root's, /etc/ssh/sshd_config) listens on now, from /proc
    sshd_ports: Tuple[int, ...] = ()
    mpi_flavour: str = ""  # openmpi | mpich | intelmpi | ""
    mpi_version: str = ""
    ompi_pml: Tuple[str, ...] = ()  # MCA pml components ompi_info lists (ucx, ob1, cm...)
    ompi_btl: Tuple[str, ...] = ()
    ucx_version: str = ""
    ucx_transports: Tuple[str, ...] = ()
    torch_version: str = ""
    nccl_version: str = ""
    torch_cuda: str = ""
    # Installed packages by name -> version. None means "could not tell" (no dpkg/rpm, or it
    # failed); an empty dict means the query worked and found nothing.
    packages: Optional[Dict[str, str]] = None

    @property
    def ompi_has_ucx(self) -> bool:
        return "ucx" in self.ompi_pml

    @property
    def ompi_major(self) -> Optional[int]:
        """Open MPI's major version: 4 and older run on ORTE, 5 on PRRTE, which names the
        runtime's settings differently (plm_ssh_args, prte_if_include). None when the MPI is
        not Open MPI or its version is unknown."""
        if self.mpi_flavour != "openmpi":
            return None
        head = self.mpi_version.lstrip("v").split(".", 1)[0]
        return int(head) if head.isascii() and head.isdigit() else None


@dataclass(frozen=True)
class SshDir:
    """This user's ~/.ssh, when the platform provides it (detect/ssh_dir.py)."""
    path: str = ""
    mounted: str = ""  # the mounts at it or on files in it: "/root/.ssh (tmpfs, read-only)"
    read_only: bool = False
    platform: str = ""  # "Kubeflow MPIJob", "Volcano", or "" when none is named
    files: Tuple[str, ...] = ()  # which of id_rsa, id_ed25519, authorized_keys, config are there
    client_port: int = 0  # the first Port its config names (Volcano writes one); 0: none (22)

    @property
    def provided(self) -> bool:
        """The platform's: a mount, or a directory this user cannot write."""
        return bool(self.mounted) or self.read_only


@dataclass(frozen=True)
class Facts:
    """Everything detect() learned about one machine, and why anything is unknown (notes)."""
    os: OsInfo = field(default_factory=OsInfo)
    user: UserInfo = field(default_factory=UserInfo)
    runtime: Runtime = field(default_factory=Runtime)
    hostname: str = ""
    cpus: Optional[int] = None
    memory_mib: Optional[int] = None
    ifaces: Tuple[Iface, ...] = ()
    default_iface: str = ""  # the interface of the IPv4 default route ("" = none or unknown)
    hcas: Tuple[Hca, ...] = ()
    gpus: Tuple[Gpu, ...] = ()
    rdma: Rdma = field(default_factory=Rdma)
    software: Software = field(default_factory=Software)
    ssh_dir: SshDir = field(default_factory=SshDir)
    # The package sources' hosts as host:port (apt, dnf/yum, zypper, apk), and whether a TCP
    # connection to any of them (or to the proxy that reaches them) opened; None = not probed.
    mirrors: Tuple[str, ...] = ()
    mirrors_proxy: str = ""  # host:port of the http(s) proxy probed instead, "" for none
    mirrors_reachable: Optional[bool] = None
    notes: Tuple[Note, ...] = ()  # why something is unknown, in plain words
    warnings: Tuple[Note, ...] = ()  # what will break a job

    def __post_init__(self) -> None:
        # plain texts (fixtures, older facts files) become Notes: every reader can shown()
        for name in ("notes", "warnings"):
            object.__setattr__(self, name, tuple(Note.from_value(v) for v in getattr(self, name)))

    def mirrors_tried(self) -> str:
        """The mirrors the probe tried, as a person reads them: the first four, and the
        proxy it went through ('' when none is configured)."""
        shown = ", ".join(self.mirrors[:4]) + (", …" if len(self.mirrors) > 4 else "")
        if shown and self.mirrors_proxy:
            shown += "; " + _("through the proxy {proxy}").format(proxy=self.mirrors_proxy)
        return shown

    @property
    def active_ports(self) -> Tuple[Port, ...]:
        return tuple(p for h in self.hcas if not h.software for p in h.ports if p.active)

    def to_dict(self) -> Dict[str, Any]:
        """JSON's form: a note or warning as its code, English text and arguments."""
        data = asdict(self)
        data["notes"] = [n.to_dict() for n in self.notes]
        data["warnings"] = [w.to_dict() for w in self.warnings]
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Facts":
        return _build(cls, data)


def _build(cls: Any, data: Any) -> Any:
    """Rebuild nested dataclasses from to_dict()'s output (records, JSON, fixtures).

    Unknown keys are ignored so that an older hpcwizard can read a newer record's facts.
    """
    import typing

    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in fields(cls):
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name])
    return cls(**kwargs)


def _coerce(tp: Any, value: Any) -> Any:
    import typing

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if isinstance(tp, type) and is_dataclass(tp):
        return _build(tp, value)
    if tp is Note:
        return Note.from_value(value)
    if origin is tuple:
        inner = args[0]
        return tuple(_coerce(inner, v) for v in value)
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        inner = next(a for a in args if a is not type(None))
        return _coerce(inner, value)
    if origin is dict:
        return dict(value)
    return value
