"""Facts for the InfiniBand / PyTorch plan tests (test_ib_plans, test_plans_golden,
test_dockerfile): the OS part read by detect() from the os-release fixture trees, the rest
built here. Not a test module."""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Dict, Optional, Tuple

from hpcwizard.detect import detect
from hpcwizard.facts import Facts, Gpu, Hca, Iface, OsInfo, Port, Rdma, Runtime, Software, UserInfo

SYSROOTS = Path(__file__).parent / "fixtures" / "sysroots"

# The seven images of the issue: fixture tree -> short name used in golden file names.
OS_TREES: Dict[str, str] = {
    "debian12": "debian12", "ubuntu2004": "ubuntu2004", "ubuntu2204": "ubuntu2204",
    "ubuntu2404": "ubuntu2404", "rocky9": "rocky9", "centos7": "centos7",
    "openeuler2203": "openeuler2203",
}

ROOT = UserInfo(name="root", uid=0, gid=0, home="/root", sudo="root")
PRIVILEGES: Dict[str, UserInfo] = {
    "root": ROOT,
    "sudo": UserInfo(name="alice", uid=1000, gid=1000, home="/home/alice", sudo="nopasswd"),
    "none": UserInfo(name="alice", uid=1000, gid=1000, home="/home/alice", sudo="none"),
}

IFACES = (
    Iface("lo", "UNKNOWN", addresses=("127.0.0.1/8",)),
    Iface("docker0", "DOWN", addresses=("172.17.0.1/16",)),
    Iface("eth0", "UP", mac="52:54:00:12:34:56", addresses=("10.0.0.5/24",)),
    Iface("ib0", "UP", addresses=("192.168.100.5/24",)),
)

H100 = (Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "535.104.05", "12.2"),
        Gpu(1, "NVIDIA H100 80GB HBM3", 81559, "535.104.05", "12.2"))


def port(hca: str, n: int = 1, state: str = "ACTIVE", layer: str = "InfiniBand",
         netdev: str = "") -> Port:
    return Port(hca=hca, number=n, state=state, phys_state="LinkUp" if state == "ACTIVE" else "Polling",
                rate_gbps=200.0, link_layer=layer, netdev=netdev)


TWO_HDR = (Hca("mlx5_0", "mlx5_core", "0x15b3", ports=(port("mlx5_0", netdev="ib0"),)),
           Hca("mlx5_1", "mlx5_core", "0x15b3", ports=(port("mlx5_1", netdev="ib1"),)))
UVERBS = Rdma(uverbs=("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"),
              memlock_unlimited=True)


@lru_cache(maxsize=None)
def os_of(tree: str) -> OsInfo:
    """The OsInfo detection reads from the fixture tree (files only, no commands)."""
    return detect(str(SYSROOTS / tree), run_commands=False).os


def make_facts(tree: str = "debian12", user: UserInfo = ROOT, *, ib: bool = True,
               gpus: Tuple[Gpu, ...] = (), packages: Optional[Dict[str, str]] = None,
               **software) -> Facts:
    return Facts(
        os=os_of(tree), user=user, runtime=Runtime(container="docker", pid1="bash"),
        hostname="node1", cpus=32, ifaces=IFACES, default_iface="eth0",
        hcas=TWO_HDR if ib else (), rdma=UVERBS if ib else Rdma(), gpus=gpus,
        software=Software(packages={} if packages is None else packages, **software),
    )


def with_(facts: Facts, **changes) -> Facts:
    return dataclasses.replace(facts, **changes)


# --- sysfs trees of RDMA ports (issue 17) -------------------------------------------------------

EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def gid_of(address: str) -> str:
    """An address as the kernel prints a GID: 10.0.0.5 -> 0000:...:ffff:0a00:0005 (IPv4-mapped),
    fe80::5054:ff:fe12:3456 -> fe80:0000:0000:0000:5054:00ff:fe12:3456."""
    import ipaddress

    ip = ipaddress.ip_address(address)
    if ip.version == 4:
        ip = ipaddress.IPv6Address("::ffff:" + address)
    return ":".join(ip.exploded.split(":"))


def roce_gid_table(*addresses: str, empty: int = 2) -> Tuple[Tuple[str, str], ...]:
    """A RoCE port's GID table as mlx5 fills it: each address twice, 'IB/RoCE v1' then
    'RoCE v2', in the order the addresses came (the link-local one first), then empty slots
    (type ''), whose type the kernel refuses to read."""
    table = [(kind, gid_of(a)) for a in addresses for kind in ("IB/RoCE v1", "RoCE v2")]
    return tuple(table) + (("", EMPTY_GID),) * empty


def sysfs_port(root: Path, hca: str, n: int = 1, *, layer: str = "InfiniBand",
               state: str = "4: ACTIVE", rate: str = "200 Gb/sec (4X HDR)", netdev: str = "",
               gids: Tuple[Tuple[str, str], ...] = ()) -> Path:
    """Write port n of hca under root/sys/class/infiniband as the kernel shows it: state,
    rate, link layer and, when given, the GID table (ports/N/gids/I, gid_attrs/types/I,
    gid_attrs/ndevs/I). An empty slot's type file is written empty: see test_detect_rdma_gid's
    einval for what a real kernel does."""
    port_dir = root / "sys/class/infiniband" / hca / "ports" / str(n)
    port_dir.mkdir(parents=True, exist_ok=True)
    phys = "5: LinkUp" if "ACTIVE" in state else "2: Polling"
    for k, v in {"state": state, "phys_state": phys, "rate": rate, "link_layer": layer}.items():
        (port_dir / k).write_text(v + "\n")
    if gids:
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (port_dir / sub).mkdir(parents=True, exist_ok=True)
        for i, (kind, gid) in enumerate(gids):
            (port_dir / "gids" / str(i)).write_text(gid + "\n")
            (port_dir / "gid_attrs/types" / str(i)).write_text(kind + "\n" if kind else "")
            if kind and netdev:
                (port_dir / "gid_attrs/ndevs" / str(i)).write_text(netdev + "\n")
    return port_dir


def rdma_machine(root: Path) -> Path:
    """A Debian 12 tree with /dev/infiniband/uverbs0, to add sysfs_port()s to."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian 12"\n')
    (root / "dev/infiniband").mkdir(parents=True, exist_ok=True)
    (root / "dev/infiniband/uverbs0").write_text("")
    return root
