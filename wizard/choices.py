"""What did the user ask for? Choices are validated as they are made, so that a plan is only
ever built from values that are safe to put in shell text."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Mapping

from . import validate, vocab
from .i18n import _
from .peers import pattern_list

# What only a framework that starts over SSH uses (mpirun; vocab.uses_ssh): torchrun needs no
# SSH server or client settings. A PyTorch choice carries their defaults, whatever a front
# end or a record gave.
SSH_ONLY = ("ssh_port", "host_keys", "peers")


@dataclass(frozen=True)
class Choices:
    """The allowed values and the defaults are hpcwizard.vocab's."""
    framework: str = vocab.FRAMEWORK.default
    network: str = vocab.NETWORK.default
    mode: str = vocab.MODE.default
    user: str = vocab.DEFAULT_USER
    ssh_port: int = vocab.DEFAULT_SSH_PORT
    host_keys: str = vocab.HOST_KEYS.default
    # ssh_config Host patterns (space separated) the client settings apply to
    peers: str = vocab.DEFAULT_PEERS
    ucx_source: str = vocab.UCX_SOURCE.default
    ucx_url: str = ""  # http(s) address of a UCX .deb/.rpm (ucx_source "url")
    ucx_sha256: str = ""  # its expected sha256, checked when given

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def make_choices(**raw: Any) -> Choices:
    """Build Choices from user input (CLI, TUI, a record), raising BadInput on the first bad
    value. Unknown keys are ignored so that a newer record's choices still load."""
    fields = {f.name for f in dataclasses.fields(Choices)}
    values = {k: v for k, v in raw.items() if k in fields and v is not None}
    for key, value in values.items():  # a record is a file anyone can edit: types first
        allowed = (int, str) if key == "ssh_port" else (str,)
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise validate.BadInput(_("choice {key} = {value!r} is not a text value").format(
                key=key, value=value), key)
    c = Choices(**values)
    for choice in (vocab.FRAMEWORK, vocab.NETWORK, vocab.MODE, vocab.HOST_KEYS):
        validate.choice(choice.what, getattr(c, choice.name), choice.ids)
    port = validate.port(c.ssh_port)
    if c.user:
        validate.user_name(c.user)
    peers = pattern_list(c.peers)
    validate.choice(vocab.UCX_SOURCE.what, c.ucx_source, vocab.UCX_SOURCE.ids)
    ucx_url, ucx_sha = c.ucx_url, c.ucx_sha256
    if (c.ucx_source == "url" or ucx_url or ucx_sha) and (c.framework, c.network) != ("mpi", "ib"):
        # UCX is MPI's InfiniBand transport: with anything else the package would be
        # fetched for nothing, or (as before) silently not at all
        raise validate.BadInput(_("a UCX package (--ucx-url, --ucx-sha256) is only for MPI "
                                  "over InfiniBand (--framework mpi --network ib), not "
                                  "{framework} over {network}").format(
            framework=c.framework, network=c.network), "url")
    if c.ucx_source == "url":
        if not ucx_url:
            raise validate.BadInput(_("UCX source 'url' needs the package's address (--ucx-url)"))
        ucx_url = validate.url(ucx_url)
        validate.package_file_name(ucx_url)
    elif ucx_url:
        raise validate.BadInput(_("a UCX URL is given but the UCX source is 'distro': "
                                  "choose 'url'"))
    if ucx_sha:
        if not ucx_url:
            raise validate.BadInput(_("a UCX sha256 is given without a UCX URL (--ucx-url)"))
        ucx_sha = validate.sha256(ucx_sha)
    c = dataclasses.replace(c, ssh_port=port, peers=peers, ucx_url=ucx_url,
                            ucx_sha256=ucx_sha)
    if not vocab.uses_ssh(c.framework):
        # no "host keys are not checked" warning, nor a port or peers in a file's header,
        # from a setting nothing of the plan uses (the command line refuses them outright)
        c = dataclasses.replace(c, **{k: getattr(Choices, k) for k in SSH_ONLY})
    return c


def choices_from_mapping(data: Mapping[str, Any]) -> Choices:
    return make_choices(**dict(data))
