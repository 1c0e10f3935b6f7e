"""What will be done here? build_plan(facts, choices, catalog) -> Plan, a pure function: the
recommendation (preset image or configure here, with reasons), then the ordered steps with
their exact shell text. Nothing here touches the system."""
from __future__ import annotations

import pwd
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import render
from .catalog import Catalog, Preset, Recipe, StepSpec, substitute
from .choices import Choices
from .facts import Facts
from .validate import BadInput

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
class Step:
    id: str  # recipe/step, unique in a plan
    recipe: str
    title: str
    as_: str  # root | user
    kind: str
    check: str
    run: str
    undo: str
    note: str = ""
    why: str = ""
    packages: Tuple[str, ...] = ()  # the packages step only
    i18n: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"id": self.id, "recipe": self.recipe, "title": self.title, "as": self.as_,
                "kind": self.kind, "check": self.check, "run": self.run, "undo": self.undo,
                "note": self.note, "why": self.why, "packages": list(self.packages)}


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
    # What a job launched on these instances needs, for the launch script and verify:
    # environment (NCCL_IB_HCA, UCX_NET_DEVICES, ...) and extra mpirun arguments.
    launch_env: Tuple[Tuple[str, str], ...] = ()
    mpirun_args: Tuple[str, ...] = ()

    @property
    def needs_root(self) -> bool:
        return any(s.as_ == "root" for s in self.steps)

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
            "steps": [s.to_dict() for s in self.steps],
        }


def resolve_target(facts: Facts, name: str) -> Target:
    """The target user must exist here; its home must be a plain path (it lands in shell)."""
    if not name or name == facts.user.name:
        u = facts.user
        target = Target(u.name, u.uid, u.gid, _group_name(u.gid), u.home)
    else:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise BadInput(f"user {name!r} does not exist on this machine: create it first "
                           f"(useradd -m {name})") from None
        target = Target(pw.pw_name, pw.pw_uid, pw.pw_gid, _group_name(pw.pw_gid), pw.pw_dir)
    if not _HOME.match(target.home):
        raise BadInput(f"home directory {target.home!r} of {target.user} has characters "
                       "hpcwizard will not put in a shell command")
    return target


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _conditions(facts: Facts, choices: Choices, target: Target) -> Dict[str, bool]:
    return {
        "target_root": target.is_root,
        "target_user": not target.is_root,
        "host_keys_pinned": choices.host_keys == "pinned",
        "host_keys_off": choices.host_keys == "off",
        "systemd": facts.runtime.systemd,
        "no_systemd": not facts.runtime.systemd,
        "family_debian": facts.os.family == "debian",
        "family_rhel": facts.os.family == "rhel",
    }


def _values(choices: Choices, target: Target) -> Dict[str, str]:
    host_key = ("/etc/ssh/ssh_host_ed25519_key" if target.is_root
                else f"{target.home}/.ssh/hpcwizard_host_ed25519_key")
    return {"ssh_port": str(choices.ssh_port), "user": target.user, "group": target.group,
            "home": target.home, "peers": choices.peers, "host_key": host_key}


def package_manager(facts: Facts) -> str:
    pm = facts.os.package_manager
    return pm if pm in ("apt", "dnf", "yum") else ""


def packages_step(facts: Facts, recipes: List[Recipe]) -> Optional[Step]:
    """All packages of all chosen recipes in one transaction: one update, one install."""
    pm = package_manager(facts)
    if not pm:
        return None
    wanted: List[str] = []
    for r in recipes:
        for name in r.packages.get(pm, ()):
            if name not in wanted:
                wanted.append(name)
    if not wanted:
        return None
    installed = facts.software.packages
    missing = [p for p in wanted if installed is None or p not in installed]
    if not missing:
        missing = wanted  # the check will find them installed and skip the step
    names = " ".join(missing)
    if pm == "apt":
        check = ("for p in " + names + "; do\n"
                 "  dpkg-query -W -f='${db:Status-Abbrev}' \"$p\" 2>/dev/null | grep -q '^ii' || exit 1\n"
                 "done")
        run = ("export DEBIAN_FRONTEND=noninteractive\n"
               "apt-get -o DPkg::Lock::Timeout=120 update\n"
               "apt-get -o DPkg::Lock::Timeout=120 install -y --no-install-recommends " + names)
        undo = "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 purge -y " + names
    else:
        check = "rpm -q " + names + " >/dev/null"
        run = f"{pm} install -y " + names
        undo = f"{pm} remove -y " + names
    if installed is None:
        note = ("Could not tell which packages were installed before: undo removes none of them.")
        undo = ""
    else:
        note = "Undo removes only these packages, which were not installed before."
    return Step(
        id="packages/install", recipe="packages", title=f"Install {len(missing)} packages with {pm}",
        as_="root", kind="shell", check=check, run=run, undo=undo, note=note,
        why="; ".join(r.title for r in recipes if r.packages.get(pm)), packages=tuple(missing),
        i18n={"zh": {"title": f"使用 {pm} 安装 {len(missing)} 个软件包"}},
    )


def _step(recipe: Recipe, spec: StepSpec, values: Mapping[str, str]) -> Step:
    sub = {k: substitute(getattr(spec, k), values) for k in (
        "title", "check", "run", "undo", "note", "validate", "path", "fallback",
        "content", "content_cmd")}
    r = render.render(spec.kind, path=sub["path"], fallback=sub["fallback"], include=spec.include,
                      content=sub["content"], content_cmd=sub["content_cmd"], mode=spec.mode,
                      position=spec.position, validate=sub["validate"], check=sub["check"],
                      run=sub["run"], undo=sub["undo"])
    i18n = {lang: {k: substitute(v, values) for k, v in texts.items()}
            for lang, texts in spec.i18n.items()}
    return Step(id=f"{recipe.id}/{spec.id}", recipe=recipe.id, title=sub["title"], as_=spec.as_,
                kind=spec.kind, check=r.check, run=r.run, undo=r.undo, note=sub["note"],
                why=recipe.why, i18n=i18n)


def recommend(facts: Facts, choices: Choices, preset: Optional[Preset],
              steps: Tuple[Step, ...], wants_packages: bool) -> Recommendation:
    """Preset image or configure here, with reasons a user can check."""
    reasons: List[str] = []
    blockers: List[str] = []
    u = facts.user
    needs_root = any(s.as_ == "root" for s in steps)
    if needs_root and u.sudo in ("none",):
        blockers.append(f"You are {u.name}, not root, and cannot use sudo: the system packages "
                        "and settings this job needs cannot be installed here.")
    if wants_packages and not package_manager(facts):
        blockers.append(f"No supported package manager (apt, dnf, yum) on {facts.os.pretty_name or facts.os.id}.")
    if facts.mirrors_reachable is False and any(s.id == "packages/install" for s in steps):
        blockers.append("The package mirrors cannot be reached from this machine.")
    if blockers and preset is not None:
        return Recommendation("preset", tuple(blockers + [
            f"The preset image {preset.image} already provides: {', '.join(preset.provides)}."]), preset)
    if blockers:
        return Recommendation("configure", tuple(blockers + [
            "No preset image matches these choices; the steps below will likely fail."]), None)
    if u.is_root:
        reasons.append("You are root: every step can run here.")
    elif u.sudo == "nopasswd":
        reasons.append("You have sudo without a password: system steps run through 'sudo -n'.")
    elif u.sudo == "password":
        reasons.append("You have sudo: hpcwizard asks for your password once, before the run.")
    elif not needs_root:
        reasons.append("Everything this job needs from the system is installed; the rest is "
                       "your own files, which need no root.")
    pk = next((s for s in steps if s.id == "packages/install"), None)
    if pk:
        reasons.append(f"{len(pk.packages)} packages to install with {package_manager(facts)}.")
    else:
        reasons.append("No packages to install.")
    if preset is not None:
        reasons.append(f"Alternatively, start from the preset image {preset.image}.")
    return Recommendation("configure", tuple(reasons), preset)


def build_plan(facts: Facts, choices: Choices, catalog: Catalog) -> Plan:
    target = resolve_target(facts, choices.user)
    cond = _conditions(facts, choices, target)
    values = _values(choices, target)
    recipes = catalog.for_choices(choices.framework, choices.network)
    steps: List[Step] = []
    pk = packages_step(facts, recipes)
    if pk:
        steps.append(pk)
    for recipe in recipes:
        for spec in recipe.steps:
            if all(cond[c] for c in spec.when):
                steps.append(_step(recipe, spec, values))
    steps_t = tuple(steps)
    warnings: List[str] = list(facts.warnings)
    if choices.host_keys == "off":
        warnings.append("Host keys are not checked (--host-keys off): any machine answering to "
                        f"'{choices.peers}' on port {choices.ssh_port} is trusted.")
    preset = catalog.preset_for(choices.framework, choices.network)
    rec = recommend(facts, choices, preset, steps_t, any(r.packages for r in recipes))
    label = facts.os.pretty_name or f"{facts.os.id} {facts.os.version_id}".strip()
    env, mpi_args = launch_settings(facts, choices)
    return Plan(choices, target, rec, steps_t, tuple(warnings), label, env, mpi_args)


def launch_settings(facts: Facts, choices: Choices) -> "tuple[Tuple[Tuple[str, str], ...], Tuple[str, ...]]":
    """Environment and mpirun arguments a job needs on these instances."""
    env = []
    args = ["--mca", "plm_rsh_args", f"-p {choices.ssh_port}"]
    return tuple(env), tuple(args)
