"""What can be configured? Loads recipes/*.toml and presets.toml and checks them, so that a
mistake in a recipe is a load error naming file and step, not a broken shell at run time.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, List, Mapping, Optional, Tuple

from . import vocab
from .compat import tomllib
from .ops import OPERATIONS

# The frameworks, networks, conditions and placeholders a recipe may name are
# hpcwizard.vocab's, read there at load time.
KINDS = ("shell", "file", "block", "dropin", "op")
PACKAGE_MANAGERS = ("apt", "dnf", "yum")
PACKAGE_NAMES = "package-names.toml"  # a generic package name's real name per release
NOT_RECIPES = ("diagnoses.toml", PACKAGE_NAMES)  # data beside the recipes that is not one
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ID = re.compile(r"^[a-z][a-z0-9-]*$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$")
# Alternatives, Debian's way (a|b|c): any of them installed or provided will do, else the
# first is installed (recipes/ops.sh, hw_packages).
_ALTERNATIVES = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]*(\|[A-Za-z0-9][A-Za-z0-9.+_-]*)*$")
_OS_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_RELEASE = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,9})*$")

if TYPE_CHECKING:
    from .facts import OsInfo


class RecipeError(ValueError):
    """A recipe file is wrong; the message names the file and the step."""


@dataclass(frozen=True)
class StepSpec:
    id: str
    title: str
    as_: str  # root | user
    kind: str = "shell"
    when: Tuple[str, ...] = ()
    check: str = ""
    run: str = ""
    undo: str = ""
    note: str = ""
    validate: str = ""  # run after the change; on failure the change is taken back
    path: str = ""
    fallback: str = ""  # dropin: the file that gets a marked block when there is no Include
    include: str = ""  # dropin: extended regex that finds the Include line in fallback
    content: str = ""
    content_cmd: str = ""
    mode: str = "0644"
    position: str = "end"  # block: where a new block goes, "top" or "end" of the file
    in_effect: str = ""  # file/block/dropin: the command that reports the settings in effect
    on_change: str = ""  # file/block/dropin: what follows a change made or taken back
    call: str = ""  # op: one call of an operation of recipes/ops.sh (hw_sshd --port ...)
    i18n: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # {"zh": {"title": ...}}


@dataclass(frozen=True)
class Recipe:
    id: str
    title: str
    why: str
    frameworks: Tuple[str, ...]
    networks: Tuple[str, ...]
    order: int
    packages: Mapping[str, Tuple[str, ...]]
    steps: Tuple[StepSpec, ...]
    path: str
    i18n: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    when: Tuple[str, ...] = ()  # conditions (as for steps) under which the whole recipe applies

    def applies(self, framework: str, network: str) -> bool:
        return framework in self.frameworks and network in self.networks


@dataclass(frozen=True)
class Preset:
    id: str
    image: str
    title: str
    frameworks: Tuple[str, ...]
    networks: Tuple[str, ...]
    provides: Tuple[str, ...]
    cuda: str = ""
    user: str = "root"
    # The NVIDIA driver its CUDA needs: the oldest that works (through CUDA's minor-version
    # compatibility) and the oldest with full support.
    driver_min: str = ""
    driver_full: str = ""
    i18n: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def release_numbers(version_id: str) -> Optional[Tuple[int, ...]]:
    """'22.04' -> (22, 4): releases compare as numbers. None when VERSION_ID does not start
    with one (empty on Debian testing, 'V10' on Kylin): the release is unknown."""
    # ASCII digits only, a few at a time: VERSION_ID is outside text
    m = re.match(r"\s*([0-9]{1,9}(?:\.[0-9]{1,9})*)", version_id or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


# One entry of recipes/package-names.toml: from the release (as numbers) on, the real name.
NameSteps = Tuple[Tuple[Tuple[int, ...], str], ...]


@dataclass(frozen=True)
class PackageNames:
    """recipes/package-names.toml: the real name of a recipe's generic package name on each
    release. resolve() is the rule the file's header comment states; empty, every name is
    its generic one."""
    releases: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    # package manager -> generic name -> os-release ID -> its entries, oldest release first
    names: Mapping[str, Mapping[str, Mapping[str, NameSteps]]] = field(default_factory=dict)

    def table_id(self, os: "OsInfo") -> str:
        """Rule 1: the target's ID if listed, else its first listed ID_LIKE word, else its
        family's ID; '' when none is listed."""
        for candidate in (os.id, *os.id_like, os.family):
            if candidate.lower() in self.releases:
                return candidate.lower()
        return ""

    def resolve(self, pm: str, name: str, os: "OsInfo") -> str:
        """The real name on os of the generic name a recipe asks pm for ('' when that
        release needs no such package)."""
        oid = self.table_id(os)
        steps = self.names.get(pm, {}).get(name, {}).get(oid, ())
        if not steps:
            return name  # rule 4: the same everywhere
        # rule 3: an ID reached through ID_LIKE or the family, or no number: the newest
        version = release_numbers(os.version_id) if oid == os.id.lower() else None
        if version is None:
            return steps[-1][1]
        real = name  # rule 2: older than every entry, the generic name
        for release, renamed in steps:
            if release <= version:
                real = renamed
        return real


@dataclass(frozen=True)
class Catalog:
    recipes: Tuple[Recipe, ...]
    presets: Tuple[Preset, ...]
    package_names: PackageNames = field(default_factory=PackageNames)

    def for_choices(self, framework: str, network: str) -> List[Recipe]:
        return sorted((r for r in self.recipes if r.applies(framework, network)), key=lambda r: r.order)

    def preset_for(self, framework: str, network: str) -> Optional[Preset]:
        return next((p for p in self.presets if framework in p.frameworks and network in p.networks), None)


def _recipe_files(directory: Optional[Path]) -> Iterable:
    """The shipped recipes by default, read through importlib.resources so that they load
    from an installed wheel, an editable checkout and a zipapp alike."""
    if directory is not None:
        files = list(Path(directory).glob("*.toml"))
    else:
        files = [f for f in resources.files("hpcwizard.recipes").iterdir() if f.name.endswith(".toml")]
    return sorted((f for f in files if f.name not in NOT_RECIPES), key=lambda f: f.name)


def load_catalog(directory: Optional[Path] = None) -> Catalog:
    recipes = []
    presets: Tuple[Preset, ...] = ()
    for path in _recipe_files(directory):
        data = _read(path)
        if path.name == "presets.toml":
            presets = _presets(path, data)
        else:
            recipes.append(_recipe(path, data))
    ids = [r.id for r in recipes]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise RecipeError(f"recipes: recipe id {sorted(dup)[0]!r} is used by two files")
    names_file = (Path(directory) / PACKAGE_NAMES if directory is not None
                  else resources.files("hpcwizard.recipes").joinpath(PACKAGE_NAMES))
    # A directory of recipes without the table (a test's) has every name as its recipe says.
    names = (_package_names(names_file, _read(names_file), recipes) if names_file.is_file()
             else PackageNames())
    return Catalog(tuple(recipes), presets, names)


@functools.lru_cache(maxsize=1)
def shipped_package_names() -> PackageNames:
    """The shipped recipes/package-names.toml, checked against the shipped recipes."""
    return load_catalog().package_names


def _read(path) -> dict:
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{path.name}: not valid TOML: {exc}") from None


def _strings(where: str, value: object, allowed: Tuple[str, ...] = ()) -> Tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecipeError(f"{where}: expected a list of strings")
    bad = [v for v in value if allowed and v not in allowed]
    if bad:
        raise RecipeError(f"{where}: {bad[0]!r} is not one of {', '.join(allowed)}")
    return tuple(value)


def _i18n(data: dict) -> Dict[str, Dict[str, str]]:
    """Translations sit beside the text they translate: title_zh = '...'."""
    out: Dict[str, Dict[str, str]] = {}
    for key, value in data.items():
        if isinstance(value, str) and re.match(r"^[a-z]+_(zh|en)$", key):
            base, lang = key.rsplit("_", 1)
            out.setdefault(lang, {})[base] = value
        elif (isinstance(value, list) and all(isinstance(v, str) for v in value)
              and re.match(r"^[a-z]+_(zh|en)$", key)):  # provides_zh = [...]: one text
            base, lang = key.rsplit("_", 1)
            out.setdefault(lang, {})[base] = ("、" if lang == "zh" else ", ").join(value)
    return out


def _recipe(path, data: dict) -> Recipe:
    name = path.name
    for key in ("id", "title", "why"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise RecipeError(f"{name}: missing '{key}'")
    if not _ID.match(data["id"]):
        raise RecipeError(f"{name}: id {data['id']!r} must be lower-case letters, digits and '-'")
    packages = data.get("packages", {})
    if not isinstance(packages, dict):
        raise RecipeError(f"{name}: [packages] must be a table")
    pk = {}
    for manager, names in packages.items():
        if manager not in PACKAGE_MANAGERS:
            raise RecipeError(f"{name}: [packages] {manager!r} is not one of {', '.join(PACKAGE_MANAGERS)}")
        pk[manager] = _strings(f"{name}: packages.{manager}", names)
        for pkg in pk[manager]:
            if not _ALTERNATIVES.match(pkg):
                raise RecipeError(f"{name}: package name {pkg!r} is not valid")
    steps = tuple(_step(name, i, s) for i, s in enumerate(data.get("steps", [])))
    step_ids = [s.id for s in steps]
    for sid in step_ids:
        if step_ids.count(sid) > 1 and not _exclusive(steps, sid):
            raise RecipeError(f"{name}: step id {sid!r} is used twice with overlapping 'when'")
    return Recipe(
        id=data["id"], title=data["title"], why=data["why"],
        frameworks=_strings(f"{name}: frameworks", data.get("frameworks", []),
                            vocab.FRAMEWORK.ids),
        networks=_strings(f"{name}: networks", data.get("networks", list(vocab.NETWORK.ids)),
                          vocab.NETWORK.ids),
        order=int(data.get("order", 50)), packages=pk, steps=steps, path=str(path),
        i18n=_i18n(data),
        when=_when(name, data.get("when", [])),
    )


def _when(where: str, value: object) -> Tuple[str, ...]:
    """A `when` list: each name one of hpcwizard.vocab's conditions."""
    names = _strings(f"{where}: when", value)
    known = vocab.conditions()
    unknown = [c for c in names if c not in known]
    if unknown:
        raise RecipeError(f"{where}: unknown condition {unknown[0]!r} in 'when'; the "
                          f"conditions are {', '.join(sorted(known))} (wizard/vocab.py)")
    return names


def _exclusive(steps: Tuple[StepSpec, ...], sid: str) -> bool:
    """Two steps may share an id when their conditions can never both hold (root/user)."""
    same = [s for s in steps if s.id == sid]
    return all(any(vocab.exclusive(c, d) for c in a.when for d in b.when)
               for i, a in enumerate(same) for b in same[i + 1:])


def _step(name: str, index: int, data: dict) -> StepSpec:
    sid = data.get("id")
    where = f"{name}: step {sid or index + 1}"
    if not isinstance(sid, str) or not _ID.match(sid):
        raise RecipeError(f"{where}: missing or invalid 'id'")
    known = {f for f in StepSpec.__dataclass_fields__ if f not in ("as_", "i18n")} | {"as"}
    unknown = [k for k in data if k not in known and not re.match(r"^[a-z]+_(zh|en)$", k)]
    if unknown:
        raise RecipeError(f"{where}: unknown key {unknown[0]!r}")
    kind = data.get("kind", "shell")
    if kind not in KINDS:
        raise RecipeError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    as_ = data.get("as", "root")
    if as_ not in ("root", "user"):
        raise RecipeError(f"{where}: 'as' must be 'root' or 'user'")
    when = _when(where, data.get("when", []))
    spec = StepSpec(
        id=sid, title=str(data.get("title", "")), as_=as_, kind=kind, when=when,
        **{k: str(data[k]) for k in ("check", "run", "undo", "note", "validate", "path",
                                     "fallback", "include", "content", "content_cmd", "mode",
                                     "position", "in_effect", "on_change", "call")
           if k in data},
        i18n=_i18n(data),
    )
    if not spec.title:
        raise RecipeError(f"{where}: missing 'title'")
    if kind == "shell":
        if not spec.check.strip():
            raise RecipeError(f"{where}: missing 'check' (how to tell the step is already done)")
        if not spec.run.strip():
            raise RecipeError(f"{where}: missing 'run'")
        if not spec.undo.strip() and not spec.note.strip():
            raise RecipeError(f"{where}: changes the system but has neither 'undo' nor 'note'")
        if spec.validate or spec.call:
            raise RecipeError(f"{where}: 'validate' and 'call' belong to file, block, dropin and op steps")
    elif kind == "op":
        # one call of the library: its check, undo and diff are the same call in those modes
        if spec.check or spec.run or spec.undo or spec.path:
            raise RecipeError(f"{where}: kind 'op' is one 'call'; its check, run and undo come from it")
        if "\n" in spec.call.strip() or spec.call.split(" ", 1)[0] not in OPERATIONS:
            raise RecipeError(f"{where}: 'call' must be one line calling one of {', '.join(OPERATIONS)}")
    else:
        if not spec.path:
            raise RecipeError(f"{where}: kind {kind!r} needs 'path'")
        if not spec.content and not spec.content_cmd:
            raise RecipeError(f"{where}: kind {kind!r} needs 'content' or 'content_cmd'")
        if spec.check or spec.run or spec.undo or spec.call:
            raise RecipeError(f"{where}: kind {kind!r} renders its own check, run and undo")
        if spec.position not in ("top", "end"):
            raise RecipeError(f"{where}: position must be 'top' or 'end'")
        if kind == "dropin" and not spec.fallback:
            raise RecipeError(f"{where}: kind 'dropin' needs 'fallback'")
        if not re.match(r"^0[0-7]{3}$", spec.mode):
            raise RecipeError(f"{where}: mode {spec.mode!r} must be octal like 0644")
    for key in ("check", "run", "undo", "validate", "path", "fallback", "content", "content_cmd",
                "title", "note", "in_effect", "on_change", "call"):
        for ph in _PLACEHOLDER.findall(getattr(spec, key)):
            if ph not in vocab.PLACEHOLDERS:
                raise RecipeError(f"{where}: unknown placeholder {{{{{ph}}}}} in '{key}'; "
                                  f"the placeholders are {', '.join(sorted(vocab.PLACEHOLDERS))} "
                                  "(wizard/vocab.py)")
    return spec


def _package_names(path, data: dict, recipes: List[Recipe]) -> PackageNames:
    """recipes/package-names.toml, checked: every ID and release of an entry is listed in
    [releases], every name valid, and every generic name one a recipe asks its manager for
    (an entry nothing asks for is a typo or a stale leftover)."""
    name = path.name
    unknown = [k for k in data if k != "releases" and k not in PACKAGE_MANAGERS]
    if unknown:
        raise RecipeError(f"{name}: {unknown[0]!r} is not [releases] or one of "
                          f"{', '.join(PACKAGE_MANAGERS)}")
    if not isinstance(data.get("releases", {}), dict):
        raise RecipeError(f"{name}: [releases] must be a table")
    releases: Dict[str, Tuple[str, ...]] = {}
    for oid, versions in data.get("releases", {}).items():
        where = f"{name}: releases.{oid}"
        if not _OS_ID.match(oid):
            raise RecipeError(f"{where}: an os-release ID is lower-case letters, digits, "
                              "'.', '_' and '-'")
        listed = _strings(where, versions)
        bad = [v for v in listed if not _RELEASE.match(v)]
        if bad:
            raise RecipeError(f"{where}: {bad[0]!r} is not a release number like 12 or 22.04")
        numbers = [release_numbers(v) for v in listed]
        if not listed or numbers != sorted(set(numbers)):
            raise RecipeError(f"{where}: list the releases oldest first, each once")
        releases[oid] = listed
    names: Dict[str, Dict[str, Dict[str, NameSteps]]] = {}
    for pm in PACKAGE_MANAGERS:
        table = data.get(pm, {})
        if not isinstance(table, dict):
            raise RecipeError(f"{name}: [{pm}] must hold [{pm}.NAME] tables")
        asked = {p for r in recipes for p in r.packages.get(pm, ())}
        for generic, per_id in table.items():
            where = f"{name}: [{pm}.{generic}]"
            if generic not in asked:
                raise RecipeError(f"{where}: no recipe asks {pm} for {generic!r}")
            if not isinstance(per_id, dict) or not per_id:
                raise RecipeError(f"{where}: expected ID = {{ RELEASE = NAME }} lines")
            for oid, entries in per_id.items():
                if oid not in releases:
                    raise RecipeError(f"{where}: {oid!r} is not in [releases]")
                if not isinstance(entries, dict) or not entries:
                    raise RecipeError(f"{where}: {oid} must be {{ RELEASE = NAME }}")
                steps = []
                for release, real in entries.items():
                    if release not in releases[oid]:
                        raise RecipeError(f"{where}: {oid} {release!r} is not one of its "
                                          f"[releases]: {', '.join(releases[oid])}")
                    if not isinstance(real, str) or not (real == "" or _ALTERNATIVES.match(real)):
                        raise RecipeError(f"{where}: {oid} {release}: package name {real!r} "
                                          "is not valid")
                    steps.append((release_numbers(release), real))
                names.setdefault(pm, {}).setdefault(generic, {})[oid] = tuple(sorted(steps))
    return PackageNames(releases, names)


def _presets(path, data: dict) -> Tuple[Preset, ...]:
    out = []
    for i, p in enumerate(data.get("presets", [])):
        where = f"{path.name}: preset {p.get('id', i + 1)}"
        for key in ("id", "image", "title"):
            if not isinstance(p.get(key), str) or not p[key]:
                raise RecipeError(f"{where}: missing '{key}'")
        out.append(Preset(
            id=p["id"], image=p["image"], title=p["title"],
            frameworks=_strings(f"{where}: frameworks", p.get("frameworks", []),
                                vocab.FRAMEWORK.ids),
            networks=_strings(f"{where}: networks", p.get("networks", []), vocab.NETWORK.ids),
            provides=_strings(f"{where}: provides", p.get("provides", [])),
            cuda=str(p.get("cuda", "")), user=str(p.get("user", "root")), i18n=_i18n(p),
            driver_min=str(p.get("driver_min", "")), driver_full=str(p.get("driver_full", "")),
        ))
    return tuple(out)


def substitute(text: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
