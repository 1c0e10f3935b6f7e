"""Package names per release (recipes/package-names.toml): the shipped table loads and
resolves every name a recipe asks for on every release it lists, Debian 13 gets the names it
really has, an unknown release falls back as the file's header says, a broken table is a
load error naming the file, and the plan, its record, setup.sh and the Dockerfile's setup
script show the resolved names."""
from __future__ import annotations

import dataclasses
import re
import textwrap

import pytest

from hpcwizard.catalog import PACKAGE_NAMES, PackageNames, RecipeError, load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect.os_release import KNOWN_IDS, package_manager_of
from hpcwizard.image import image_setup_script
from hpcwizard.export import setup_script
from hpcwizard.facts import OsInfo
from hpcwizard.plan import build_plan, wanted_packages
from hpcwizard.recipes import __file__ as _recipes_init

from _ib_fixtures import make_facts

CATALOG = load_catalog()
NAMES = CATALOG.package_names
VALID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$")


def os_info(os_id: str, version: str = "", id_like=(), family: str = "") -> OsInfo:
    family = family or KNOWN_IDS.get(os_id, "unknown")
    return OsInfo(id=os_id, version_id=version, id_like=tuple(id_like), family=family,
                  package_manager=package_manager_of(family, (), os_id, version))


def asked(pm: str) -> list:
    """Every generic name the shipped recipes ask pm for."""
    return sorted({n for r in CATALOG.recipes for n in r.packages.get(pm, ())})


# --- the shipped table ----------------------------------------------------------------------

def test_the_shipped_table_loads_with_the_releases_of_the_issue():
    assert {"11", "12", "13"} <= set(NAMES.releases["debian"])
    assert {"20.04", "22.04", "24.04"} <= set(NAMES.releases["ubuntu"])
    for rpm_id in ("rhel", "centos", "rocky", "almalinux", "fedora", "openeuler"):
        assert NAMES.releases[rpm_id], rpm_id
    assert "dnsutils" in NAMES.names["apt"]


RELEASES = [(i, v) for i, versions in NAMES.releases.items() for v in versions]


@pytest.mark.parametrize("os_id,version", RELEASES, ids=[f"{i}-{v}" for i, v in RELEASES])
def test_every_generic_name_resolves_on_every_listed_release(os_id, version):
    target = os_info(os_id, version)
    pm = target.package_manager
    assert pm in ("apt", "dnf", "yum"), (os_id, version)
    names = asked(pm)
    assert names, f"no recipe asks {pm} for anything"
    for generic in names:
        real = NAMES.resolve(pm, generic, target)
        # "": none needed there; a|b: alternatives, each a valid name
        assert real == "" or all(VALID.match(a) for a in real.split("|")), (generic, real)
        if os_id not in NAMES.names.get(pm, {}).get(generic, {}):
            assert real == generic, f"{generic} has no entry for {os_id} but became {real}"


@pytest.mark.parametrize("os_id,version,dnsutils,rdmacm", [
    ("debian", "10", "dnsutils", "librdmacm1"),  # before the table's entries: generic
    ("debian", "11", "bind9-dnsutils", "librdmacm1"),
    ("debian", "12", "bind9-dnsutils", "librdmacm1"),
    ("debian", "13", "bind9-dnsutils", "librdmacm1t64"),
    ("ubuntu", "18.04", "dnsutils", "librdmacm1"),
    ("ubuntu", "20.04", "bind9-dnsutils", "librdmacm1"),
    ("ubuntu", "22.04", "bind9-dnsutils", "librdmacm1"),
    ("ubuntu", "23.10", "bind9-dnsutils", "librdmacm1"),  # between entries: the older one's
    ("ubuntu", "24.04", "bind9-dnsutils", "librdmacm1t64"),
])
def test_names_on_each_debian_and_ubuntu_release(os_id, version, dnsutils, rdmacm):
    target = os_info(os_id, version, ("debian",) if os_id == "ubuntu" else ())
    assert NAMES.resolve("apt", "dnsutils", target) == dnsutils
    assert NAMES.resolve("apt", "librdmacm1", target) == rdmacm


@pytest.mark.parametrize("os_id", ["rhel", "centos", "rocky", "almalinux", "fedora", "openeuler"])
def test_the_rpm_family_keeps_bind_utils(os_id):
    target = os_info(os_id, NAMES.releases[os_id][-1])
    assert NAMES.resolve(target.package_manager, "bind-utils", target) == "bind-utils"


# --- the fallback, as the header comment states it -------------------------------------------

def header() -> str:
    from pathlib import Path

    text = Path(_recipes_init).with_name(PACKAGE_NAMES).read_text(encoding="utf-8")
    return " ".join(line.lstrip("# ").strip() for line in text.split("\n[", 1)[0].splitlines())


def test_the_header_states_the_fallback_rule():
    text = header()
    assert "An unknown release of a known family has the newest known names" in text
    assert "first of its ID_LIKE words" in text and "family's ID" in text


@pytest.mark.parametrize("target", [
    os_info("debian", ""),  # testing and sid have no VERSION_ID
    os_info("debian", "14"),  # newer than the table
    os_info("debian", "trixie/sid"),  # not a number
    os_info("linuxmint", "21.3", ("ubuntu", "debian"), "debian"),  # through ID_LIKE: ubuntu's
    os_info("deepin", "20.9", (), "debian"),  # no listed ID_LIKE: the family's (debian's)
], ids=["no-version", "newer", "not-a-number", "id-like", "family"])
def test_an_unknown_release_of_a_known_family_gets_the_newest_names(target):
    assert NAMES.resolve("apt", "dnsutils", target) == "bind9-dnsutils"
    assert NAMES.resolve("apt", "librdmacm1", target) == "librdmacm1t64"


def test_an_unknown_family_keeps_the_generic_names():
    target = os_info("frobnix", "1.0", (), "unknown")
    assert NAMES.table_id(target) == ""
    assert NAMES.resolve("apt", "dnsutils", target) == "dnsutils"


def test_an_id_like_word_is_read_before_the_family():
    # an Ubuntu derivative reads Ubuntu's entries, not Debian's (whose releases differ)
    assert NAMES.table_id(os_info("pop", "22.04", ("ubuntu", "debian"), "debian")) == "ubuntu"
    assert NAMES.table_id(os_info("kali", "2024.1", ("debian",), "debian")) == "debian"


# --- a broken table is a load error ---------------------------------------------------------

RECIPE = '''
id = "demo"
title = "Demo"
why = "Because tests need one."
frameworks = ["mpi"]

[packages]
apt = ["dnsutils"]

[[steps]]
id = "good"
title = "A good step"
check = "true"
run = "true"
undo = "true"
'''

GOOD_TABLE = '''
[releases]
debian = ["11", "12"]

[apt.dnsutils]
debian = { "11" = "bind9-dnsutils" }
'''


def catalog_with(tmp_path, table: str):
    (tmp_path / "demo.toml").write_text(textwrap.dedent(RECIPE))
    (tmp_path / PACKAGE_NAMES).write_text(textwrap.dedent(table))
    return load_catalog(tmp_path)


def test_a_good_table_in_a_directory_loads_and_is_no_recipe(tmp_path):
    cat = catalog_with(tmp_path, GOOD_TABLE)
    assert [r.id for r in cat.recipes] == ["demo"]
    assert cat.package_names.resolve("apt", "dnsutils", os_info("debian", "12")) == "bind9-dnsutils"


def test_a_directory_without_a_table_keeps_the_generic_names(tmp_path):
    (tmp_path / "demo.toml").write_text(textwrap.dedent(RECIPE))
    cat = load_catalog(tmp_path)
    assert cat.package_names == PackageNames()
    assert cat.package_names.resolve("apt", "dnsutils", os_info("debian", "13")) == "dnsutils"


@pytest.mark.parametrize("table,expected", [
    ('[releases]\ndebian = ["11"\n', "not valid TOML"),
    ('[releases]\ndebian = ["11"]\n[zypper.x]\ndebian = { "11" = "y" }\n', "'zypper'"),
    ('[releases]\nDebian = ["11"]\n', "releases.Debian"),
    ('[releases]\ndebian = ["bookworm"]\n', "'bookworm' is not a release number"),
    ('[releases]\ndebian = ["12", "11"]\n', "oldest first"),
    (GOOD_TABLE.replace("[apt.dnsutils]", "[apt.dnsutil]"), "no recipe asks apt for 'dnsutil'"),
    (GOOD_TABLE.replace('debian = { "11"', 'ubuntu = { "11"'), "'ubuntu' is not in [releases]"),
    (GOOD_TABLE.replace('{ "11" =', '{ "13" ='), "'13' is not one of its [releases]: 11, 12"),
    (GOOD_TABLE.replace('"bind9-dnsutils"', '"bind9 dnsutils"'), "'bind9 dnsutils' is not valid"),
    (GOOD_TABLE.replace('{ "11" = "bind9-dnsutils" }', '"bind9-dnsutils"'), "RELEASE = NAME"),
    (GOOD_TABLE.replace('"bind9-dnsutils"', '"bind9-dnsutils|"'), "'bind9-dnsutils|' is not valid"),
    (GOOD_TABLE.replace('"bind9-dnsutils"', '"a||b"'), "'a||b' is not valid"),
    (GOOD_TABLE.replace('"bind9-dnsutils"', '"a | b"'), "'a | b' is not valid"),
], ids=["toml", "manager", "id", "release", "order", "not-asked", "unlisted-id",
        "unlisted-release", "bad-name", "not-a-table", "alt-trailing", "alt-empty", "alt-spaces"])
def test_a_broken_table_is_a_recipe_error_naming_the_file(tmp_path, table, expected):
    with pytest.raises(RecipeError) as exc:
        catalog_with(tmp_path, table)
    msg = str(exc.value)
    assert msg.startswith(f"{PACKAGE_NAMES}:") and expected in msg, msg


# --- the plan and what is made from it show the real names -----------------------------------

def debian13_facts(**kw):
    f = make_facts("debian12", **kw)
    return dataclasses.replace(f, os=dataclasses.replace(
        f.os, version_id="13", pretty_name="Debian GNU/Linux 13 (trixie)"))


def packages_of(plan) -> tuple:
    return next(s for s in plan.steps if s.id == "packages/install").packages


def test_the_debian_12_plan_shows_the_resolved_names_everywhere():
    from hpcwizard.report import format_plan

    plan = build_plan(make_facts("debian12"), make_choices(framework="mpi", network="tcp",
                                                           mode="manual"), CATALOG)
    pk = packages_of(plan)
    assert pk == ("openssh-server", "openssh-client", "bind9-dnsutils", "iproute2",
                  "openmpi-bin", "libopenmpi-dev", "gcc", "libc6-dev")
    assert plan.packages_wanted == pk
    line = "hw_packages apt --lock-timeout 120 " + " ".join(pk)
    assert f"      {line}\n" in format_plan(plan)
    assert plan.to_dict()["steps"][0]["packages"] == list(pk)  # what the record keeps
    assert line in setup_script(plan)
    assert line in image_setup_script(plan)  # what the Dockerfile's build runs
    for text in (format_plan(plan), setup_script(plan), image_setup_script(plan)):
        calls = [ln.split() for ln in text.splitlines() if ln.lstrip().startswith("hw_packages ")]
        assert calls and not any("dnsutils" in c for c in calls), calls


def test_the_debian_13_plan_installs_what_debian_13_has():
    plan = build_plan(debian13_facts(), make_choices(framework="mpi", network="ib"), CATALOG)
    pk = packages_of(plan)
    assert {"bind9-dnsutils", "librdmacm1t64", "gcc", "libc6-dev"} <= set(pk)
    assert not {"dnsutils", "librdmacm1"} & set(pk)


def test_an_installed_real_name_is_not_installed_again():
    # detection reports installed packages by their real names: the resolved name matches
    plan = build_plan(make_facts("ubuntu2404", packages={"bind9-dnsutils": "1:9.18",
                                                         "librdmacm1t64": "50.0"}),
                      make_choices(framework="mpi", network="ib"), CATALOG)
    pk = packages_of(plan)
    assert "bind9-dnsutils" not in pk and "librdmacm1t64" not in pk and "librdmacm1" not in pk
    assert "libibverbs1" in pk


def test_the_rpm_plan_keeps_its_names_and_brings_gcc():
    plan = build_plan(make_facts("rocky9"), make_choices(framework="mpi", network="tcp"), CATALOG)
    assert packages_of(plan) == ("openssh-server", "openssh-clients", "bind-utils", "iproute",
                                 "openmpi", "openmpi-devel", "gcc")


def test_without_an_os_the_generic_names_are_kept():
    recipes = [r for r in CATALOG.recipes if r.id == "ssh"]
    assert wanted_packages("apt", recipes) == ("openssh-server", "openssh-client", "dnsutils",
                                               "iproute2", "systemd-standalone-sysusers")
    assert wanted_packages("apt", recipes, os_info("debian", "13"), NAMES)[2] == "bind9-dnsutils"


def test_an_empty_entry_leaves_the_package_out_on_that_release():
    """Debian 13's openssh-server would pull in systemd for its sysusers; the standalone
    one is asked for there, and on 11/12 (which need neither) nothing is."""
    recipes = [r for r in CATALOG.recipes if r.id == "ssh"]
    on = {v: wanted_packages("apt", recipes, os_info("debian", v), NAMES) for v in ("11", "12", "13")}
    assert "systemd-standalone-sysusers|systemd|systemd-sysusers" in on["13"]
    assert not any("sysusers" in p for p in on["11"] + on["12"])
    assert "" not in on["11"] and "" not in on["12"]


def test_alternatives_load_and_resolve_as_written(tmp_path):
    cat = catalog_with(tmp_path, GOOD_TABLE.replace('"bind9-dnsutils"', '"bind9-dnsutils|dnsutils"'))
    assert cat.package_names.resolve("apt", "dnsutils", os_info("debian", "12")) == "bind9-dnsutils|dnsutils"


def test_debian_13_with_systemd_installed_asks_for_no_sysusers():
    """The user's systemd satisfies openssh-server's sysusers: asking for the standalone one
    made apt remove systemd. Any alternative installed leaves the group out; none installed,
    the group is asked for, and hw_packages installs its first."""
    with_systemd = build_plan(debian13_facts(packages={"systemd": "257"}),
                              make_choices(framework="mpi", network="tcp"), CATALOG)
    assert not any("sysusers" in p for p in packages_of(with_systemd))
    without = build_plan(debian13_facts(packages={}), make_choices(framework="mpi", network="tcp"),
                         CATALOG)
    assert "systemd-standalone-sysusers|systemd|systemd-sysusers" in packages_of(without)
