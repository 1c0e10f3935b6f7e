"""What will be done here? build_plan(facts, choices, catalog) -> Plan, a pure function: the
recommendation (preset image or configure here, with reasons), then the ordered steps with
their exact shell text. Nothing here touches the system."""
from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import ops, vocab
from .catalog import (Catalog, PackageNames, Preset, Recipe, StepSpec, shipped_package_names,
                      substitute)
from .choices import Choices
from .facts import Facts, OsInfo, Port, SshDir
from .i18n import N_, _, pick, translations
from .inputs import ascii_int
from .job import Job
from .render.mpirun import mpirun_args
from .peer_memory import looks_for, paths, seen_since, sees
from .peers import Peers, resolve_peers
from .step import Step
from .validate import BadInput, package_file_name

_HOME = re.compile(r"^/[A-Za-z0-9._/-]*$")

@dataclass(frozen=True)
class Target:
    """The user the job runs as: whose keys, whose ~/.ssh, whose sshd."""
    user: str
    uid: int
    gid: int
    group: str
    home: str

    @property
    def is_root(self) -> bool:
        return self.uid == 0


@dataclass(frozen=True)
class Recommendation:
    path: str  # "preset" | "configure"
    reasons: Tuple[str, ...]
    preset: Optional[Preset] = None


@dataclass(frozen=True)
class Plan:
    choices: Choices
    target: Target
    recommendation: Recommendation
    steps: Tuple[Step, ...]
    warnings: Tuple[str, ...] = ()
    os_label: str = ""
    # What a job launched on these instances needs, for every renderer and verify: port,
    # user, environment (NCCL_IB_HCA, UCX_NET_DEVICES, ...), MCA settings. Not given: made
    # from the choices and the target, with no environment or settings (__post_init__).
    job: Job = None  # type: ignore[assignment]
    # The distribution planned for (the Dockerfile's FROM) and every package the chosen
    # recipes want, installed here or not (an image built from scratch needs them all).
    os: OsInfo = field(default_factory=OsInfo)
    packages_wanted: Tuple[str, ...] = ()
    # The same packages by the recipes' generic names, per package manager: an image FROM
    # another distribution (the PyTorch image's Ubuntu) resolves them for its own release.
    packages_generic: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if self.job is None:
            object.__setattr__(self, "job", make_job(self.choices, self.target,
                                                     self.recommendation, self.os_label))

    @property
    def needs_root(self) -> bool:
        return needs_root(self.steps)

    @property
    def launch_env(self) -> Tuple[Tuple[str, str], ...]:
        return tuple(self.job.env.items())

    @property
    def mpirun_args(self) -> Tuple[str, ...]:
        """The job's mpirun arguments in Open MPI 4's names, as records keep them."""
        return tuple(mpirun_args(self.job))

    def to_dict(self) -> Dict[str, Any]:
        rec = self.recommendation
        return {
            "choices": self.choices.to_dict(),
            "target": {"user": self.target.user, "uid": self.target.uid, "home": self.target.home},
            "os": self.os_label,
            "recommendation": {"path": rec.path, "reasons": list(rec.reasons),
                               "preset": rec.preset.id if rec.preset else "",
                               "image": rec.preset.image if rec.preset else ""},
            "warnings": list(self.warnings),
            "launch_env": dict(self.launch_env),
            "mpirun_args": list(self.mpirun_args),
            "steps": [s.to_toml() for s in self.steps],
        }


def needs_root(steps: "Tuple[Step, ...]") -> bool:
    return any(s.as_ == "root" and not s.satisfied for s in steps)


def resolve_target(facts: Facts, name: str) -> Target:
    """The target user must exist here; its home must be a plain path (it lands in shell)."""
    if not name or name == facts.user.name:
        u = facts.user
        target = Target(u.name, u.uid, u.gid, _group_name(u.gid), u.home)
    else:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise BadInput(_("user {name!r} does not exist on this machine: create it first "
                             "(useradd -m {name})").format(name=name), "user") from None
        target = Target(pw.pw_name, pw.pw_uid, pw.pw_gid, _group_name(pw.pw_gid), pw.pw_dir)
    if not _HOME.match(target.home):
        raise BadInput(_("home directory {home!r} of {user} has characters hpcwizard will "
                         "not put in a shell command").format(home=target.home, user=target.user),
                       "user")
    return target


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _conditions(facts: Facts, choices: Choices, target: Target) -> Dict[str, bool]:
    """Each condition of hpcwizard.vocab (the names a recipe's `when` may use), decided."""
    situation = vocab.Situation(choices, facts, target.is_root,
                                platform_ssh_dir(facts, target) is not None)
    return {name: c.holds(situation) for name, c in vocab.conditions().items()}


def platform_ssh_dir(facts: Optional[Facts], target: Target) -> Optional[SshDir]:
    """The target's ~/.ssh when the platform provides it (Kubeflow MPIJob's or Volcano's
    Secret, a read-only directory): its keys are used as they are and nothing is written
    there. Only the user running hpcwizard is looked at (detect/ssh_dir.py)."""
    if facts is None or not facts.ssh_dir.provided:
        return None
    return facts.ssh_dir if facts.ssh_dir.path == os.path.join(target.home, ".ssh") else None


def platform_ssh_note(d: SshDir, target: Target) -> str:
    where = d.mounted or _("{path} (read-only)").format(path=d.path)
    by = _(" by {platform}").format(platform=d.platform) if d.platform else ""
    found = _("{path} is provided{by}: {where}. Its keys ({files}) are used as they are and "
              "hpcwizard writes nothing there.").format(
        path=d.path, by=by, where=where, files=", ".join(d.files) or _("none yet"))
    if target.is_root:
        return found + " " + _("sshd also serves port {port}, where the platform's ssh "
                               "connects.").format(port=d.client_port or 22)
    return found + " " + _("{user}'s own sshd keeps its host key and pid file in {dir} "
                           "instead.").format(user=target.user,
                                              dir=f"{target.home}/.hpcwizard-sshd")


def _values(choices: Choices, target: Target, facts: Optional[Facts] = None) -> Dict[str, str]:
    """A value for each placeholder of hpcwizard.vocab.PLACEHOLDERS."""
    # a user's own sshd keeps its host key and pid file in ~/.ssh, unless the platform
    # provides that directory (read-only, or not ours to write): then beside it
    user_sshd_dir = (f"{target.home}/.hpcwizard-sshd" if platform_ssh_dir(facts, target)
                     else f"{target.home}/.ssh")
    host_key = ("/etc/ssh/ssh_host_ed25519_key" if target.is_root
                else f"{user_sshd_dir}/hpcwizard_host_ed25519_key")
    ucx_file = package_file_name(choices.ucx_url) if choices.ucx_url else ""
    nccl = nccl_settings(facts, choices.network) if facts is not None else ()
    nccl_conf = "\n".join(f"{k}={v}" for k, v in nccl)
    if facts is not None and choices.network == "ib" and not any(k == "NCCL_IB_HCA" for k, _ in nccl):
        nccl_conf += "\n# No active InfiniBand port was found here: NCCL chooses the HCAs itself."
    # Every value below was validated (choices) or is from facts filtered to safe names.
    return {"ssh_port": str(choices.ssh_port), "user": target.user, "home": target.home,
            "peers": choices.peers, "host_key": host_key,
            "ucx_url": choices.ucx_url, "ucx_file": ucx_file, "ucx_sha256": choices.ucx_sha256,
            "nccl_conf": nccl_conf, "peer_sample": peer_sample(choices.peers),
            "known_hosts_patterns": known_hosts_patterns(choices.peers, choices.ssh_port),
            "user_sshd_dir": user_sshd_dir,
            "sshd_kept_ports": kept_ports(facts, choices, target),
            "apt_lock_timeout": str(apt_lock_timeout())}


def kept_ports(facts: Optional[Facts], choices: Choices, target: Target) -> str:
    """The system sshd's settings keep the ports it serves now (facts.software.sshd_ports),
    beside the job's: a reload would otherwise move an sshd on port 22 to the job's port
    alone. Lines to follow 'Port N' in the settings ('' when there is none to keep)."""
    if facts is None or not target.is_root:
        return ""
    lines = [f"\n# sshd serves port {p} now: it keeps serving it\nPort {p}"
             for p in facts.software.sshd_ports if p != choices.ssh_port]
    provided = platform_ssh_dir(facts, target)
    if provided is not None:
        port = provided.client_port or 22
        if port != choices.ssh_port and port not in facts.software.sshd_ports:
            lines.append(f"\n# the platform's ssh client connects to port {port}\nPort {port}")
    return "".join(lines)


def known_hosts_patterns(peers: str, port: int) -> str:
    """known_hosts' host field for the peers and 127.0.0.1 (this instance itself, where verify
    logs in): '[pattern]:port' for each (how ssh looks a host up on a port other than 22),
    the bare patterns on 22."""
    names = peers.split() + ["127.0.0.1"]
    return ",".join(p if port == 22 else f"[{p}]:{port}" for p in dict.fromkeys(names))


def peer_sample(pattern: str) -> str:
    """A host name the peers pattern list matches ('job-* node1' -> 'job-hpcwizard-peer'):
    the host 'ssh -G' is asked about, to see the client settings in effect for the job's
    peers. A Host line matches when any of its patterns does: the first one is enough."""
    first = pattern.split(" ", 1)[0]
    return first.replace("*", "hpcwizard-peer").replace("?", "x")


def with_peers(facts: Facts, choices: Choices,
               env: Optional[Mapping[str, str]] = None) -> Tuple[Choices, Optional[Peers]]:
    """choices with the peers the plan uses (derived from the job's hosts when none were
    given), and where they come from; None for PyTorch, which gets no SSH settings (and so
    does not fail on a platform variable it never reads)."""
    if choices.framework != "mpi":
        return choices, None
    peers = resolve_peers(choices.peers, os.environ if env is None else env, facts.hostname)
    return replace(choices, peers=peers.pattern), peers


PEERS_NOTE = N_("These hosts come from {source}; --peers names others.")


def _peers_noted(step: Step, peers: Optional[Peers]) -> Step:
    """The client settings' step says where its hosts came from, in each language."""
    if peers is None or not step.id.endswith("/client-config"):
        return step

    def note(text: str, lang: str) -> str:
        said = translations(lang).gettext(PEERS_NOTE).format(source=peers.source_in(lang))
        return f"{text} {said}".strip()

    i18n = {lang: dict(texts, note=note(texts.get("note", ""), lang))
            for lang, texts in step.i18n.items()}
    return replace(step, note=note(step.note, "en"), i18n=i18n)


def package_manager(facts: Facts) -> str:
    pm = facts.os.package_manager
    return pm if pm in ("apt", "dnf", "yum") else ""


def wanted_packages(pm: str, recipes: List[Recipe], os_info: Optional[OsInfo] = None,
                    names: Optional[PackageNames] = None) -> Tuple[str, ...]:
    """Every package the recipes want from pm, in recipe order, each once, by its real name
    on os_info: a recipe asks by the generic name, recipes/package-names.toml (names; the
    shipped one by default) gives the name on that release. Without os_info, the generic
    names."""
    table = names if names is not None else shipped_package_names()
    wanted: List[str] = []
    for r in recipes:
        for generic in r.packages.get(pm, ()):
            name = table.resolve(pm, generic, os_info) if os_info is not None else generic
            if name and name not in wanted:  # two generic names may be one package somewhere
                wanted.append(name)
    return tuple(wanted)


def packages_step(facts: Facts, recipes: List[Recipe],
                  names: Optional[PackageNames] = None) -> Optional[Step]:
    """All packages of all chosen recipes in one transaction: one update, one install, by
    their names on this release (wanted_packages)."""
    pm = package_manager(facts)
    if not pm:
        return None
    why = "; ".join(r.title for r in recipes if r.packages.get(pm))
    why_zh = "；".join(pick(r.title, r.i18n, "title", "zh") for r in recipes if r.packages.get(pm))
    return install_step(pm, wanted_packages(pm, recipes, facts.os, names),
                        facts.software.packages, why, why_zh)


def apt_lock_timeout() -> int:
    """Seconds apt waits for the dpkg lock another apt holds: $HPCWIZARD_APT_LOCK_TIMEOUT
    (read when the plan is made and written into its commands), default 120."""
    text = os.environ.get("HPCWIZARD_APT_LOCK_TIMEOUT", "").strip()
    if not text:
        return 120
    seconds = ascii_int(text)  # ASCII digits only: int('٢') is 2
    if seconds is None or not 0 <= seconds <= 86400:
        raise BadInput(_("HPCWIZARD_APT_LOCK_TIMEOUT {value!r} is not a number of seconds "
                         "(0 to 86400)").format(value=text))
    return seconds


def has_package(installed: Mapping[str, str], name: str) -> bool:
    """Is name, or any of its alternatives (a|b|c: recipes/package-names.toml), installed?"""
    return any(alt in installed for alt in name.split("|"))


def install_step(pm: str, wanted: Tuple[str, ...], installed: Optional[Mapping[str, str]],
                 why: str = "", why_zh: str = "") -> Optional[Step]:
    """The packages step for pm: one hw_packages call naming what of wanted is not in
    installed (None: unknown, so all of it). hw_packages writes down what its transaction
    newly installs and its undo takes back only that (recipes/ops.sh)."""
    if not wanted:
        return None
    missing = [p for p in wanted if installed is None or not has_package(installed, p)]
    # With everything installed the step stays, for exports made here to run elsewhere; its
    # check skips it here, and it needs no root here.
    satisfied = not missing
    if satisfied:
        missing = list(wanted)
    call = ops.packages_call(pm, missing, apt_lock_timeout() if pm == "apt" else None)
    if satisfied:
        note = N_("All of them are installed here already: undo removes none of them.")
    else:
        note = N_("Undo removes what this install newly installed, dependencies included, "
                  "and nothing that was there before: a package removed but not purged gets "
                  "its configuration back, and one another package came to need is kept.")
    title = N_("Install {n} packages with {pm}")
    zh = translations("zh")
    # The step's texts stay English (records, exports' commands); each language's beside them.
    i18n = {"zh": {"title": zh.gettext(title).format(n=len(missing), pm=pm),
                   "note": zh.gettext(note), "why": why_zh}}
    return Step(
        id="packages/install", recipe="packages", title=title.format(n=len(missing), pm=pm),
        as_="root", kind="op", check=ops.checked(call), run=call, undo=ops.undo_call(call),
        note=note, why=why, packages=tuple(missing), satisfied=satisfied, i18n=i18n,
    )


def _step(recipe: Recipe, spec: StepSpec, values: Mapping[str, str]) -> Step:
    sub = {k: substitute(getattr(spec, k), values) for k in (
        "title", "check", "run", "undo", "note", "validate", "path", "fallback",
        "content", "content_cmd", "in_effect", "on_change", "call")}
    if spec.kind == "shell":
        check, run, undo = sub["check"].strip(), sub["run"].strip(), sub["undo"].strip()
    else:
        run = _call(spec, sub)
        check, undo = ops.checked(run), ops.undo_call(run)
    i18n = {lang: {k: substitute(v, values) for k, v in texts.items()}
            for lang, texts in spec.i18n.items()}
    for lang, texts in recipe.i18n.items():  # the recipe's why, in each language
        if texts.get("why"):
            i18n.setdefault(lang, {}).setdefault("why", texts["why"])
    return Step(id=f"{recipe.id}/{spec.id}", recipe=recipe.id, title=sub["title"], as_=spec.as_,
                kind=spec.kind, check=check, run=run, undo=undo, note=sub["note"],
                why=recipe.why, i18n=i18n)


def _call(spec: StepSpec, sub: Mapping[str, str]) -> str:
    """A step of kind file, block, dropin or op as one call of the operations library."""
    common = dict(content_cmd=sub["content_cmd"], validate=sub["validate"].strip(),
                  in_effect=sub["in_effect"].strip(), on_change=sub["on_change"].strip())
    if spec.kind == "file":
        return ops.file_call(sub["path"], sub["content"], spec.mode, **common)
    if spec.kind == "block":
        return ops.block_call(sub["path"], sub["content"], spec.mode,
                              top=spec.position == "top", **common)
    if spec.kind == "dropin":
        return ops.dropin_call(sub["path"], sub["fallback"], spec.include, sub["content"],
                               spec.mode, **common)
    call = sub["call"].strip()
    if sub["content"].strip() or sub["content_cmd"].strip():
        return ops.with_contents(call, sub["content"], sub["content_cmd"])
    return call


# --- the recommendation ---------------------------------------------------------------------

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")
_VIRTUAL = ("lo", "docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "tun", "tap", "kube")


def version_tuple(text: str) -> Tuple[int, ...]:
    """'525.60.13' -> (525, 60, 13): versions compare as numbers, not as text."""
    # ASCII digits, at most 18 at a time: a detected version is outside text (\d takes
    # other scripts' digits, and int() refuses a number of more than 4300 digits)
    return tuple(int(x) for x in re.findall(r"[0-9]{1,18}", text or ""))


def _driver(facts: Facts) -> str:
    return next((g.driver for g in facts.gpus if g.driver), "")


def driver_reasons(facts: Facts, preset: Optional[Preset]) -> "tuple[List[str], bool]":
    """What the GPU driver means for the preset's CUDA and for the PyTorch here.
    Returns (reasons, the preset cannot run on this driver)."""
    out: List[str] = []
    driver = _driver(facts)
    too_old = False
    if preset is not None and preset.cuda and preset.driver_min and driver:
        have, need, full = (version_tuple(driver), version_tuple(preset.driver_min),
                            version_tuple(preset.driver_full or preset.driver_min))
        if have < need:
            too_old = True
            supports = next((g.cuda for g in facts.gpus if g.cuda), "")
            older = (_(" (this driver supports CUDA {cuda} at most)").format(cuda=supports)
                     if supports else "")
            out.append(_(
                "The GPU driver here is {driver}, too old for the preset image's CUDA {cuda}, "
                "which needs {min} or newer with CUDA minor-version compatibility ({full} "
                "without), so the preset will not run on these GPUs either: ask the platform "
                "for instances with a newer driver, or use a PyTorch build for an older "
                "CUDA{older}.").format(driver=driver, cuda=preset.cuda, min=preset.driver_min,
                                       full=preset.driver_full or preset.driver_min,
                                       older=older))
        elif have < full:
            out.append(_(
                "The GPU driver here is {driver}: it runs the preset image's CUDA {cuda} only "
                "through CUDA minor-version compatibility (full support from {full}), which "
                "most jobs accept but PTX JIT compilation does not.").format(
                    driver=driver, cuda=preset.cuda, full=preset.driver_full))
    s = facts.software
    supports = next((g.cuda for g in facts.gpus if g.cuda), "")
    if s.torch_cuda and supports and version_tuple(s.torch_cuda)[:1] > version_tuple(supports)[:1]:
        the_driver = (_("the GPU driver {driver}").format(driver=driver) if driver
                      else _("the GPU driver"))
        out.append(_(
            "PyTorch here is built for CUDA {torch_cuda}, but {the_driver} supports CUDA "
            "{cuda} at most: install a PyTorch build for CUDA {cuda}, or ask for instances "
            "with a newer driver.").format(torch_cuda=s.torch_cuda, the_driver=the_driver,
                                           cuda=supports))
    return out, too_old


def ib_problem(facts: Facts) -> str:
    """Why InfiniBand cannot be shown to work from this container ('' when it can)."""
    hardware = [h for h in facts.hcas if not h.software]
    software = [h.name for h in facts.hcas if h.software]
    if not hardware:
        if software:
            return _("Only a software RDMA device ({devices}) is here, not InfiniBand "
                     "hardware, so InfiniBand cannot be used from this container.").format(
                devices=", ".join(software))
        return _("No InfiniBand device is visible in this container (/sys/class/infiniband is "
                 "empty or missing), so InfiniBand cannot be verified or used from here.")
    ports = [p for h in hardware for p in h.ports]
    active = [p for p in ports if p.active]
    if not active:
        states = ", ".join(_("{port} is {state}").format(port=p.name, state=p.state)
                           for p in ports) or _("no ports listed")
        return _("No InfiniBand port is active here ({states}), so InfiniBand cannot be used "
                 "from this container.").format(states=states)
    if not facts.rdma.uverbs:
        return _("RDMA port {ports} is active but /dev/infiniband/uverbs* is missing: this "
                 "container was started without the InfiniBand devices, so it cannot use "
                 "them.").format(ports=", ".join(p.name for p in active))
    return ""


def already_here(facts: Facts, choices: Choices, wanted: Tuple[str, ...]) -> str:
    """A description of what this machine already has when it matches the job ('' if not)."""
    s = facts.software
    installed = s.packages
    if wanted and (installed is None or any(not has_package(installed, p) for p in wanted)):
        return ""
    have = [_("all {n} packages installed").format(n=len(wanted))] if wanted else []
    if choices.framework == "mpi" and choices.network == "ib":
        if not s.ompi_has_ucx:
            return ""
        have.append(_("Open MPI {version} with UCX").format(version=s.mpi_version)
                    .replace("  ", " "))
    if choices.framework == "pytorch":
        if not s.torch_version:
            return ""
        have.append(_("PyTorch {version}").format(version=s.torch_version))
    return ", ".join(have)


def _provides(preset: Preset) -> str:
    return pick(", ".join(preset.provides), preset.i18n, "provides")


def recommend(facts: Facts, choices: Choices, preset: Optional[Preset],
              steps: Tuple[Step, ...], wants_packages: bool,
              wanted: Tuple[str, ...] = ()) -> Recommendation:
    """Preset image or configure here, with reasons a user can check: one sentence each,
    naming facts the user can look at (hpcwizard detect shows them all)."""
    reasons: List[str] = []
    blockers: List[str] = []
    u = facts.user
    root = needs_root(steps)
    ssh = any(s.id.startswith("ssh/") and not s.satisfied for s in steps)
    if (root or ssh) and not u.is_root and not u.in_passwd:
        # sudo, ssh-keygen and sshd refuse a uid they cannot name ("you do not exist in the
        # passwd database", "No user exists for uid 12345")
        blockers.append(_("User id {uid} has no entry in /etc/passwd, and sudo, ssh-keygen "
                          "and sshd refuse such a user: the steps this job needs cannot run "
                          "here. Start the container as root or as a named user (or add a "
                          "passwd entry for uid {uid}), or use a preset image.").format(
            uid=u.uid))
    elif root and u.sudo in ("none",):
        blockers.append(_("You are {user}, not root, and cannot use sudo: the system packages "
                          "and settings this job needs cannot be installed here, so a preset "
                          "image is the only way.").format(user=u.name))
    elif root and u.sudo == "denied":
        # sudo is installed, but no password would help: the same way out as without sudo
        blockers.append(_("You are {user}, not root, and sudo here runs nothing as root for "
                          "you (not in the sudoers file, rules for other commands only, or "
                          "sudo unusable here: hpcwizard detect says which): "
                          "the system packages and settings this job needs cannot be installed "
                          "here, so a preset image is the only way, unless an administrator "
                          "gives you sudo.").format(user=u.name))
    if wants_packages and not package_manager(facts):
        blockers.append(_("No supported package manager (apt, dnf, yum) on {os}.").format(
            os=facts.os.pretty_name or facts.os.id))
    if facts.mirrors_reachable is False and any(s.id == "packages/install" and not s.satisfied
                                                for s in steps):
        if facts.mirrors:  # name what was tried, so that the user can check it
            hosts = facts.mirrors_tried()
            blockers.append((_("The package mirrors cannot be reached from this machine "
                               "({hosts}), so nothing can be installed here: use the preset "
                               "image.") if preset is not None else
                             _("The package mirrors cannot be reached from this machine "
                               "({hosts}), so nothing can be installed here.")).format(
                hosts=hosts))
        else:
            blockers.append(_("The package mirrors cannot be reached from this machine, so "
                              "nothing can be installed here."))
    ib = ib_problem(facts) if choices.network == "ib" else ""
    gpu_reasons, preset_too_old = driver_reasons(facts, preset)
    if blockers and preset is not None:
        return Recommendation("preset", tuple(blockers + ([ib] if ib else []) + [
            _("The preset image {image} already provides: {provides}.").format(
                image=preset.image, provides=_provides(preset))]
            + gpu_reasons), preset)
    if blockers:
        return Recommendation("configure", tuple(blockers + [
            _("No preset image matches these choices; the steps below will likely fail.")]),
            None)
    if ib and preset is not None and not preset_too_old:
        return Recommendation("preset", (ib, _(
            "Start the job from the preset image {image} on instances that have InfiniBand; "
            "it provides: {provides}.").format(image=preset.image, provides=_provides(preset)),
            *gpu_reasons), preset)
    if u.is_root:
        reasons.append(_("You are root: every step can run here."))
    elif u.sudo == "nopasswd":
        reasons.append(_("You have sudo without a password: system steps run through "
                         "'sudo -n'."))
    elif u.sudo == "password":
        reasons.append(_("You have sudo: hpcwizard asks for your password once, before the "
                         "run."))
    elif not root:
        reasons.append(_("Everything this job needs from the system is installed; the rest "
                         "is your own files, which need no root."))
    if ib:
        reasons.append(ib)
    have = already_here(facts, choices, wanted)
    if have:
        reasons.append(_("This machine already matches the job ({have}): little or nothing "
                         "is left to do here.").format(have=have))
    pk = next((s for s in steps if s.id == "packages/install"), None)
    if choices.framework == "pytorch" and choices.network == "tcp":
        reasons.append(_("Nothing needs installing for PyTorch over TCP: torchrun is started "
                         "on every instance and its c10d rendezvous and NCCL use plain TCP, so "
                         "no SSH server is needed."))
    elif pk and not have:
        reasons.append(_("{n} packages to install with {pm}.").format(
            n=len(pk.packages), pm=package_manager(facts)))
    elif not pk:
        reasons.append(_("No packages to install."))
    if choices.framework == "pytorch" and not facts.software.torch_version:
        reasons.append(_("python3 cannot import torch here (or it was not checked): install "
                         "PyTorch for your CUDA, or start from the preset image."))
    reasons.extend(gpu_reasons)
    if preset is not None and not preset_too_old and not have:
        reasons.append(_("Alternatively, start from the preset image {image}.").format(
            image=preset.image))
    return Recommendation("configure", tuple(reasons), preset)


# --- the plan -------------------------------------------------------------------------------

def chosen_recipes(facts: Facts, choices: Choices, catalog: Catalog,
                   target: Optional[Target] = None) -> List[Recipe]:
    """The recipes for the framework and network whose own conditions hold (UCX source)."""
    target = target or resolve_target(facts, choices.user)
    cond = _conditions(facts, choices, target)
    return [r for r in catalog.for_choices(choices.framework, choices.network)
            if all(cond[c] for c in r.when)]


# Detection's warnings that matter to some jobs only (by code; every other one is for all):
# the locked-memory limit only to RDMA, GPUDirect RDMA only to NCCL over it. /dev/shm
# (runtime.shm-small) is for all: NCCL's, UCX's and Open MPI's intra-node transports use it.
_WARNING_FOR = {
    "rdma.memlock-low": lambda c: c.network == "ib",
    "rdma.no-gpudirect": lambda c: c.framework == "pytorch" and c.network == "ib",
}


def detected_warning_applies(warning: str, choices: Choices) -> bool:
    applies = _WARNING_FOR.get(getattr(warning, "code", ""))
    return applies is None or applies(choices)


def build_plan(facts: Facts, choices: Choices, catalog: Catalog,
               env: Optional[Mapping[str, str]] = None) -> Plan:
    """env: where the job's host names are read when no peers are given (os.environ)."""
    choices, peers = with_peers(facts, choices, env)
    target = resolve_target(facts, choices.user)
    cond = _conditions(facts, choices, target)
    values = _values(choices, target, facts)
    recipes = chosen_recipes(facts, choices, catalog, target)
    if (choices.ucx_source == "url" and choices.framework == "mpi" and choices.network == "ib"):
        kind = values["ucx_file"].rsplit(".", 1)[-1]
        pm = package_manager(facts)
        if pm and kind != {"apt": "deb", "dnf": "rpm", "yum": "rpm"}[pm]:
            raise BadInput(_("the UCX package {file} is a .{kind}, but {os} installs packages "
                             "with {pm}").format(file=values["ucx_file"], kind=kind,
                                                 os=facts.os.pretty_name or facts.os.id, pm=pm))
    steps: List[Step] = []
    pk = packages_step(facts, recipes, catalog.package_names)
    if pk:
        steps.append(pk)
    for recipe in recipes:
        for spec in recipe.steps:
            if all(cond[c] for c in spec.when):
                steps.append(_peers_noted(_step(recipe, spec, values), peers))
    steps_t = tuple(steps)
    warnings: List[str] = [w for w in facts.warnings if detected_warning_applies(w, choices)]
    provided = platform_ssh_dir(facts, target) if peers is not None else None
    if provided is not None:
        warnings.append(platform_ssh_note(provided, target))
    elif peers is not None and peers.warning:  # (no client settings are written then)
        warnings.append(peers.warning)
    mixed = job_ports(facts)[1] if choices.network == "ib" else ""
    if mixed:
        warnings.append(mixed)
    roce = roce_gid_index(facts)[1] if choices.network == "ib" else ""
    if roce:
        warnings.append(roce)
    unseen = unseen_peer_memory(facts) if (choices.framework, choices.network) == (
        "pytorch", "ib") else ""
    if unseen:
        warnings.append(unseen)
    if choices.host_keys == "off" and peers is not None:  # (PyTorch gets no SSH settings)
        warnings.append(_("Host keys are not checked (--host-keys off): any machine answering "
                          "to '{peers}' on port {port} is trusted.").format(
            peers=choices.peers, port=choices.ssh_port))
    pm = package_manager(facts)
    wanted = wanted_packages(pm, recipes, facts.os, catalog.package_names) if pm else ()
    preset = catalog.preset_for(choices.framework, choices.network)
    rec = recommend(facts, choices, preset, steps_t, any(r.packages for r in recipes), wanted)
    label = facts.os.pretty_name or f"{facts.os.id} {facts.os.version_id}".strip()
    env, mca, passed = launch_settings(facts, choices)
    job = make_job(choices, target, rec, label, env=env, mca=mca, passed=passed)
    generic = tuple((m, wanted_packages(m, recipes)) for m in ("apt", "dnf", "yum"))
    return Plan(choices, target, rec, steps_t, tuple(warnings), label, job,
                os=facts.os, packages_wanted=wanted,
                packages_generic=tuple((m, g) for m, g in generic if g))


# --- what a job launched here needs ---------------------------------------------------------

def socket_iface(facts: Facts) -> str:
    """The interface NCCL's bootstrap (and TCP traffic) should use: the default route's, else
    the first interface that is up, has an IPv4 address and is not loopback or virtual."""
    if facts.default_iface and _SAFE_NAME.match(facts.default_iface):
        return facts.default_iface
    for want_up in (True, False):
        for i in facts.ifaces:
            if i.name.startswith(_VIRTUAL) or not _SAFE_NAME.match(i.name):
                continue
            if want_up and (i.state not in ("UP", "UNKNOWN")
                            or not any("." in a for a in i.addresses)):
                continue
            return i.name
    return ""


def job_ports(facts: Facts) -> "tuple[Tuple[Port, ...], str]":
    """The active hardware RDMA ports the job uses, all of one link layer, and why others
    were left out ("" when none was). NCCL refuses to mix them ("Try selecting NICs of only
    one link type using NCCL_IB_HCA"), and UCX would stripe over devices whose transports
    differ: InfiniBand when it is active beside RoCE (Ethernet), whose GID and traffic class
    would also need choosing."""
    ports = tuple(p for p in facts.active_ports if _SAFE_NAME.match(p.name))
    layers = {p.link_layer for p in ports}
    if len(layers) < 2:
        return ports, ""
    keep = "InfiniBand" if "InfiniBand" in layers else sorted(layers)[0]
    left = [p.name for p in ports if p.link_layer != keep]
    return (tuple(p for p in ports if p.link_layer == keep),
            _("Active RDMA ports of two link layers: the job uses the {layer} ones ({kept}) and "
              "leaves out {left}, because NCCL refuses to mix link layers and UCX would stripe "
              "over both.").format(layer=keep, kept=", ".join(p.name for p in ports
                                                             if p.link_layer == keep),
                                   left=", ".join(left)))


def rdma_devices(facts: Facts) -> str:
    """The job's RDMA ports (job_ports) as UCX_NET_DEVICES wants them: mlx5_0:1,mlx5_10:1
    (UCX matches device names whole)."""
    return ",".join(p.name for p in job_ports(facts)[0])


def roce_gid_index(facts: Facts) -> "tuple[Optional[int], str]":
    """The GID index for NCCL_IB_GID_INDEX when the job's ports are RoCE, and a plan warning.
    NCCL before 2.21 (the preset PyTorch image has 2.20.5) uses GID 0 unless told, a RoCE v1
    GID that does not cross IP subnets; the RoCE v2 GID with an IPv4 address does. One
    variable names one index for every port: when the ports' indexes differ, it is not set.
    The index is this instance's: the launch script checks it on each instance against that
    instance's table (hw_rt_roce_gid), which differs where the addresses do. UCX gets none:
    its default (UCX_IB_GID_INDEX=auto, uct_ib_device_select_gid) picks the same kind of GID
    on each port of each instance by itself, where one index pushed to every rank with -x
    would be the launching instance's. The traffic class (NCCL_IB_TC) is the platform's:
    which class its switches keep lossless is not visible from here."""
    ports = [p for p in job_ports(facts)[0] if p.link_layer == "Ethernet"]
    if not ports:
        return None, ""
    indexes = {p.roce_v2_ipv4_gid for p in ports}
    names = ", ".join(p.name for p in ports)
    if len(indexes) == 1 and None not in indexes:
        index = indexes.pop()
        return index, _("The job's RDMA ports ({ports}) are RoCE: their RoCE v2 GID with an "
                        "IPv4 address is index {index} here, NCCL_IB_GID_INDEX for NCCL (the "
                        "launch script checks it on each instance against that instance's own "
                        "GID table); UCX picks such a GID on each port by itself "
                        "(UCX_IB_GID_INDEX=auto, its default). The traffic class (NCCL_IB_TC) "
                        "is left to the platform, whose switches decide which class is "
                        "lossless.").format(ports=names, index=index)
    if indexes == {None}:
        return None, _("No RoCE v2 GID with an IPv4 address was found on the RoCE ports "
                       "({ports}): NCCL_IB_GID_INDEX is not set, and NCCL before 2.21 then "
                       "uses GID 0 (RoCE v1), which does not cross IP subnets. Give their "
                       "network interfaces an IPv4 address.").format(
            ports=names)
    each = ", ".join(f"{p.name} {p.roce_v2_ipv4_gid if p.roce_v2_ipv4_gid is not None else '-'}"
                     for p in ports)
    return None, _("The RoCE ports' RoCE v2 GIDs with an IPv4 address have different indexes "
                   "({each}): NCCL_IB_GID_INDEX takes one index for all ports, so it is not "
                   "set. NCCL 2.21 or later picks each port's itself; "
                   "before 2.21 it uses GID 0 (RoCE v1, which does not cross IP subnets): "
                   "use ports whose GID tables agree, or a newer NCCL.").format(each=each)


def unseen_peer_memory(facts: Facts) -> str:
    """A plan warning when the NCCL here looks for none of the peer-memory files present
    (hpcwizard.peer_memory): it then keeps GPUDirect RDMA off although a module is loaded.
    "" when it sees one, none is present, or the NCCL is unknown."""
    rd, nccl = facts.rdma, facts.software.nccl_version
    # facts recorded before peer_memory existed name only the first file found
    present = rd.peer_memory or tuple(n for n in (rd.gpudirect,) if n and n != "dmabuf")
    looked = looks_for(version_tuple(nccl))
    if not present or not looked or sees(version_tuple(nccl), present):
        return ""
    text = _("NCCL {version} looks for the GPUDirect RDMA peer-memory module at {looked}; "
             "the one loaded here is at {found}, which this NCCL does not check: it will keep "
             "GPUDirect RDMA off.").format(version=nccl, looked=paths(looked),
                                           found=paths(present))
    since = seen_since(present)
    if since:
        text += " " + _("Use NCCL {since} or later (a newer PyTorch).").format(since=since)
    return text


def nccl_settings(facts: Facts, network: str) -> Tuple[Tuple[str, str], ...]:
    """NCCL_IB_HCA and NCCL_SOCKET_IFNAME are prefix matches unless they start with '='
    (NCCL's environment docs): 'mlx5_1' would also take mlx5_10..mlx5_19, 'eth0' eth0.100.
    Both are written as exact lists. On RoCE, NCCL_IB_GID_INDEX (roce_gid_index)."""
    env: List[Tuple[str, str]] = []
    if network == "ib":
        env.append(("NCCL_IB_DISABLE", "0"))
        hcas = rdma_devices(facts)
        if hcas:
            env.append(("NCCL_IB_HCA", "=" + hcas))
        gid = roce_gid_index(facts)[0]
        if gid is not None:
            env.append(("NCCL_IB_GID_INDEX", str(gid)))
    else:
        env.append(("NCCL_IB_DISABLE", "1"))
    iface = socket_iface(facts)
    if iface:
        env.append(("NCCL_SOCKET_IFNAME", "=" + iface))
    return tuple(env)


def make_job(choices: Choices, target: Target, rec: Recommendation, os_label: str = "", *,
             env: Optional[Mapping[str, str]] = None, mca: Optional[Mapping[str, str]] = None,
             passed: Tuple[str, ...] = ()) -> Job:
    """The Job the renderers take: the choices, the target and the launch settings."""
    return Job(framework=choices.framework, network=choices.network, user=target.user,
               uid=target.uid, home=target.home, ssh_port=int(choices.ssh_port),
               host_keys=choices.host_keys, hosts=choices.peers, env=dict(env or {}),
               mca=dict(mca or {}), passed=tuple(passed), os_label=os_label,
               mode=choices.mode, recommended=rec.path,
               preset_image=rec.preset.image if rec.preset else "")


def launch_settings(facts: Facts, choices: Choices) -> "tuple[Dict[str, str], Dict[str, str], Tuple[str, ...]]":
    """Environment, Open MPI MCA settings (Open MPI 4 names; ssh's port is the Job's, made
    a setting when rendered) and the names mpirun passes to the ranks (-x) that a job needs
    on these instances.

    MPI: ssh on the chosen port; over InfiniBand '--mca pml ucx' (Debian and Ubuntu disable UCX
    in /etc/openmpi/openmpi-mca-params.conf, and elsewhere it makes a job fail instead of
    falling back to TCP unnoticed) and UCX_NET_DEVICES from the active ports, passed to the
    ranks with -x (no UCX_IB_GID_INDEX on RoCE: roce_gid_index says why). PyTorch: NCCL's
    settings (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE, NCCL_IB_GID_INDEX) and
    GLOO_SOCKET_IFNAME, the same interface as NCCL's, for gloo (CPU tensors, and the gloo
    groups a job makes beside NCCL's): gloo takes a comma list of exact names, no '='.
    """
    env: Dict[str, str] = {}
    mca: Dict[str, str] = {}
    passed: Tuple[str, ...] = ()
    if choices.framework == "mpi":
        if choices.network == "ib":
            mca["pml"] = "ucx"
            devices = rdma_devices(facts)
            if devices:
                env["UCX_NET_DEVICES"] = devices
                passed = ("UCX_NET_DEVICES",)
    else:
        env.update(nccl_settings(facts, choices.network))
        iface = socket_iface(facts)
        if iface:
            env["GLOO_SOCKET_IFNAME"] = iface
    return env, mca, passed
