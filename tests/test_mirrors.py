"""The package-mirror probe: the sources files as shipped (tests/fixtures/mirrors), the hosts
they name, a TCP connection to a local listening socket (reachable) and to a closed port
(not), proxies, the bound on the probe, and what the summary and the recommendation say.
No internet needed: every connection goes to 127.0.0.1."""
from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from hpcwizard.catalog import load_catalog
from hpcwizard.choices import make_choices
from hpcwizard.detect import core, detect, mirrors
from hpcwizard.detect.base import Context, Found
from hpcwizard.detect.summary import format_summary
from hpcwizard.facts import Facts
from hpcwizard.plan import build_plan

from _core_fixtures import ROOT, facts

FIX = Path(__file__).parent / "fixtures" / "mirrors"
CATALOG = load_catalog()


@pytest.fixture
def listening():
    """A port on 127.0.0.1 that accepts connections."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


@pytest.fixture
def closed():
    """A port on 127.0.0.1 that nothing listens on: connections are refused at once."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def root_with(tmp_path: Path, files: dict) -> Context:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return Context(sysroot=str(tmp_path), run_commands=True, env={})


def described(ctx: Context, may_connect: bool = True, timeout: float = 2.0) -> Found:
    found = Found()
    mirrors.describe(ctx, found, may_connect=may_connect, timeout=timeout)
    return found


# --- the formats -------------------------------------------------------------------------------

def test_debian_deb822_sources():
    urls = mirrors.urls_from_deb822((FIX / "debian12-debian.sources").read_text())
    # the comment lines inside the stanzas (snapshot.debian.org) are not sources
    assert urls == ["http://deb.debian.org/debian", "http://deb.debian.org/debian-security"]


def test_deb822_disabled_and_source_only_stanzas_are_left_out():
    text = ("Types: deb-src\nURIs: http://src.example/debian\nSuites: x\n\n"
            "Types: deb\nURIs: http://off.example/debian\nEnabled: no\n\n"
            "types: deb deb-src\nuris: https://a.example/d\n http://b.example:8080/d\n")
    assert mirrors.urls_from_deb822(text) == ["https://a.example/d", "http://b.example:8080/d"]


def test_ubuntu_one_line_sources():
    urls = mirrors.urls_from_list((FIX / "ubuntu2204-sources.list").read_text())
    assert sorted(set(urls)) == ["http://archive.ubuntu.com/ubuntu/",
                                 "http://security.ubuntu.com/ubuntu/"]
    assert len(urls) == 4  # the commented deb-src lines are not counted


def test_one_line_options_and_deb_src():
    text = ("deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] https://repo.example/apt stable main\n"
            "deb [ trusted=yes ] mirror+http://m.example/list.txt jammy main\n"
            "deb-src http://src.example/ jammy main\n"
            "deb file:/srv/local-repo ./\n")
    assert mirrors.urls_from_list(text) == ["https://repo.example/apt", "mirror+http://m.example/list.txt",
                                            "file:/srv/local-repo"]


def test_rocky_repo_mirrorlist_and_disabled_repo():
    repos = mirrors.repos_from_ini((FIX / "rocky9-rocky.repo").read_text())
    assert len(repos) == 1  # baseos-debug is enabled=0; the baseurl is commented out
    (urls, proxy), = repos
    assert proxy is None
    assert [mirrors.endpoint(u) for u in urls] == [("mirrors.rockylinux.org", 443)]


def test_openeuler_repo_baseurl_and_metalink():
    repos = mirrors.repos_from_ini((FIX / "openeuler2203-openEuler.repo").read_text())
    hosts = {mirrors.endpoint(u) for urls, _ in repos for u in urls}
    assert hosts == {("repo.openeuler.org", 80), ("mirrors.openeuler.org", 443)}


def test_repo_with_several_baseurls_and_its_own_proxy():
    text = ("[main]\nproxy=http://ignored.example:1\n\n[a]\nbaseurl=http://one.example/x\n"
            "  https://two.example/y, ftp://three.example/z\nproxy=http://px.example:3128\n\n"
            "[b]\nbaseurl=http://four.example/\nproxy=_none_\n")
    repos = mirrors.repos_from_ini(text)
    assert repos == [(["http://one.example/x", "https://two.example/y", "ftp://three.example/z"],
                      "http://px.example:3128"),
                     (["http://four.example/"], "")]


def test_alpine_repositories():
    urls = mirrors.urls_from_apk((FIX / "alpine320-repositories").read_text()
                                 + "@edge https://dl-cdn.alpinelinux.org/alpine/edge/testing\n"
                                 + "/media/cdrom/apks\n")
    assert {mirrors.endpoint(u) for u in urls if "://" in u} == {("dl-cdn.alpinelinux.org", 443)}
    assert "file:/media/cdrom/apks" in urls


@pytest.mark.parametrize("url, ep", [
    ("http://deb.debian.org/debian", ("deb.debian.org", 80)),
    ("https://Mirror.Example.COM/x", ("mirror.example.com", 443)),
    ("http://127.0.0.1:8080/d", ("127.0.0.1", 8080)),
    ("http://[::1]:3142/d", ("::1", 3142)),
    ("mirror+https://m.example/list", ("m.example", 443)),
    ("tor+http://onion.example/", ("onion.example", 80)),
    ("proxy.example:3128", ("proxy.example", 3128)),  # a proxy variable without a scheme
    ("http://$mirror/x", None),  # a variable nothing here expands
    ("http://a.example:99999/x", None),  # not a port
    ("http://bad\x1b[31mhost/x", None),  # nothing that is not a host name gets printed
    ("s3://bucket/x", None),
    ("file:/srv/repo", None),
])
def test_endpoint(url, ep):
    assert mirrors.endpoint(url) == ep


# --- reachability --------------------------------------------------------------------------------

def test_a_listening_port_is_reachable(listening):
    assert mirrors.reachable([("127.0.0.1", listening)], timeout=2.0) is True


def test_a_host_name_is_reachable(listening):
    assert mirrors.reachable([("localhost", listening)], timeout=5.0) is True


def test_a_closed_port_is_not_and_the_answer_does_not_wait(closed):
    start = time.monotonic()
    assert mirrors.reachable([("127.0.0.1", closed)], timeout=2.0) is False
    assert time.monotonic() - start < 1.5  # refused at once: no waiting for the timeout


def test_one_reachable_among_many_is_enough(listening, closed):
    assert mirrors.reachable([("127.0.0.1", closed), ("127.0.0.1", listening)], timeout=2.0)


def test_the_probe_is_bounded_when_connections_hang():
    """A mirror that never answers (a firewall dropping SYNs, a resolver that hangs) costs the
    timeout and a little slack, not more."""
    release = threading.Event()
    started = []

    def hanging(ep, timeout):
        started.append(ep)
        release.wait(30)
        raise OSError("gave up")

    t0 = time.monotonic()
    try:
        ok = mirrors.reachable([("a.example", 80), ("b.example", 443)], timeout=0.3,
                               connect=hanging)
        took = time.monotonic() - t0
    finally:
        release.set()
    assert ok is False
    assert len(started) == 2  # both tried at once, not one after the other
    assert took < 0.3 + mirrors.SLACK + 0.5


def test_no_endpoints_is_not_reachable():
    assert mirrors.reachable([]) is False


# --- the probe -------------------------------------------------------------------------------------

def test_reachable_mirror_from_a_sources_file(tmp_path, listening):
    ctx = root_with(tmp_path, {"etc/apt/sources.list": f"deb http://127.0.0.1:{listening}/debian bookworm main\n"})
    found = described(ctx)
    assert found.values["mirrors"] == (f"127.0.0.1:{listening}",)
    assert found.values["mirrors_reachable"] is True
    assert found.values["mirrors_proxy"] == ""


def test_unreachable_mirrors_are_false_with_a_note(tmp_path, closed):
    ctx = root_with(tmp_path, {
        "etc/apt/sources.list.d/a.sources": f"Types: deb\nURIs: http://127.0.0.1:{closed}/d\n",
        "etc/yum.repos.d/b.repo": f"[b]\nbaseurl=https://127.0.0.1:{closed}/x\n",
    })
    found = described(ctx)
    assert found.values["mirrors_reachable"] is False
    assert found.values["mirrors"] == (f"127.0.0.1:{closed}",)  # one host:port, named once
    assert any(f"127.0.0.1:{closed}" in n and "No package mirror answered" in n
               for n in found.notes)


def test_the_proxy_is_what_is_probed(tmp_path, listening, closed):
    """Behind a proxy the mirror itself may be unreachable from here, and that is fine."""
    ctx = root_with(tmp_path, {"etc/apt/sources.list": f"deb http://127.0.0.1:{closed}/d x main\n"})
    ctx.env = {"http_proxy": f"http://user:secret@127.0.0.1:{listening}/"}
    found = described(ctx)
    assert found.values["mirrors_reachable"] is True
    assert found.values["mirrors_proxy"] == f"127.0.0.1:{listening}"  # never the credentials
    assert "secret" not in repr(found.values)


def test_no_proxy_sends_the_host_direct(tmp_path, listening, closed):
    ctx = root_with(tmp_path, {"etc/apt/sources.list": f"deb http://127.0.0.1:{closed}/d x main\n"})
    ctx.env = {"HTTP_PROXY": f"127.0.0.1:{listening}", "NO_PROXY": "localhost,127.0.0.1"}
    found = described(ctx)
    assert found.values["mirrors_reachable"] is False
    assert found.values["mirrors_proxy"] == ""


def test_apt_conf_proxy_wins_over_the_environment(tmp_path, listening, closed):
    ctx = root_with(tmp_path, {
        "etc/apt/sources.list": f"deb https://127.0.0.1:{closed}/d x main\n",
        # apt's https method takes the http proxy when no https one is set
        "etc/apt/apt.conf.d/01proxy": f'Acquire::http::Proxy "http://127.0.0.1:{listening}";\n',
    })
    ctx.env = {"https_proxy": f"http://127.0.0.1:{closed}"}
    found = described(ctx)
    assert found.values["mirrors_reachable"] is True
    assert found.values["mirrors_proxy"] == f"127.0.0.1:{listening}"


def test_dnf_main_proxy_and_a_repo_that_turns_it_off(tmp_path, listening, closed):
    ctx = root_with(tmp_path, {
        "etc/dnf/dnf.conf": f"[main]\ngpgcheck=1\nproxy=http://127.0.0.1:{listening}\n",
        "etc/yum.repos.d/a.repo": f"[a]\nbaseurl=http://127.0.0.1:{closed}/a\n",
    })
    assert described(ctx).values["mirrors_reachable"] is True
    (tmp_path / "etc/yum.repos.d/a.repo").write_text(
        f"[a]\nbaseurl=http://127.0.0.1:{closed}/a\nproxy=_none_\n")
    assert described(ctx).values["mirrors_reachable"] is False


def test_a_local_repository_needs_no_network(tmp_path, closed):
    (tmp_path / "srv/repo").mkdir(parents=True)
    ctx = root_with(tmp_path, {"etc/apt/sources.list":
                               f"deb file:/srv/repo ./\ndeb http://127.0.0.1:{closed}/d x main\n"})
    found = described(ctx)
    assert found.values["mirrors_reachable"] is True
    assert "file:/srv/repo" in found.values["mirrors"]


def test_without_commands_the_mirrors_are_listed_but_not_probed(tmp_path, listening):
    ctx = root_with(tmp_path, {"etc/apt/sources.list": f"deb http://127.0.0.1:{listening}/d x main\n"})
    found = described(ctx, may_connect=False)
    assert found.values["mirrors"] == (f"127.0.0.1:{listening}",)
    assert "mirrors_reachable" not in found.values  # stays None: not probed


def test_detect_of_a_sysroot_reads_its_mirrors_and_connects_nowhere(tmp_path, monkeypatch):
    shutil.copytree(Path(__file__).parent / "fixtures" / "sysroots" / "rocky9", tmp_path / "r",
                    symlinks=True)
    (tmp_path / "r/etc/yum.repos.d").mkdir(parents=True, exist_ok=True)
    shutil.copy(FIX / "rocky9-rocky.repo", tmp_path / "r/etc/yum.repos.d/rocky.repo")

    def no_connection(*a, **kw):
        raise AssertionError("a foreign sysroot's mirrors must not be probed from here")

    monkeypatch.setattr(socket, "create_connection", no_connection)
    f = detect(str(tmp_path / "r"), run_commands=True)
    assert f.mirrors == ("mirrors.rockylinux.org:443",)
    assert f.mirrors_reachable is None


def test_no_sources_is_unknown_with_a_note(tmp_path):
    found = described(root_with(tmp_path, {}))
    assert found.values["mirrors"] == ()
    assert "mirrors_reachable" not in found.values
    assert any("No package mirror is configured" in n for n in found.notes)


def test_the_probe_is_registered_and_runs_with_the_others():
    assert "mirrors" in [p.name for p in core.PROBES]


# --- what it says ----------------------------------------------------------------------------------

def test_the_summary_row():
    f = Facts(mirrors=("deb.debian.org:80", "security.debian.org:80"), mirrors_reachable=False)
    assert "  Mirrors        deb.debian.org:80, security.debian.org:80 (none reachable)" in \
        format_summary(f)
    f = dataclasses.replace(f, mirrors_reachable=None, mirrors_proxy="px:3128")
    assert "through the proxy px:3128 (not checked)" in format_summary(f)
    assert "Mirrors        none configured" in format_summary(Facts())


def test_no_reachable_mirror_recommends_the_preset_and_names_the_hosts():
    f = dataclasses.replace(facts("debian12", ROOT), mirrors=("deb.debian.org:80",),
                            mirrors_reachable=False)
    rec = build_plan(f, make_choices(), CATALOG).recommendation
    assert rec.path == "preset"
    assert rec.reasons[0] == ("The package mirrors cannot be reached from this machine "
                              "(deb.debian.org:80), so nothing can be installed here: use the "
                              "preset image.")


def test_unreachable_mirrors_do_not_matter_when_nothing_is_to_install():
    from _core_fixtures import DEBIAN_PACKAGES

    installed = {p: "1" for p in DEBIAN_PACKAGES + ("bind9-dnsutils", "gcc", "libc6-dev")}
    f = dataclasses.replace(facts("debian12", ROOT, packages=installed),
                            mirrors=("deb.debian.org:80",), mirrors_reachable=False)
    plan = build_plan(f, make_choices(), CATALOG)
    pk = [s for s in plan.steps if s.id == "packages/install"]
    assert pk and all(s.satisfied for s in pk), [s.packages for s in pk]
    assert not any("mirrors cannot be reached" in r for r in plan.recommendation.reasons)


def test_the_connections_begin_with_the_programs_and_the_probe_takes_them(monkeypatch, listening):
    """detect.commands.start begins the mirrors' connections on this machine (name resolution
    and the handshake go on while the other probes read); the probe, in its turn, takes that
    answer instead of connecting again."""
    from hpcwizard.detect import commands

    monkeypatch.setattr(mirrors, "sources", lambda ctx: [(f"http://127.0.0.1:{listening}/debian", None)])
    asked, release = threading.Event(), threading.Event()
    calls = []
    real_connect = socket.create_connection

    def connect(ep, timeout):
        calls.append(ep)
        asked.set()
        assert release.wait(30)
        return real_connect(ep, timeout=timeout)

    monkeypatch.setattr(socket, "create_connection", connect)
    ctx = Context(sysroot="/", run_commands=True, env={})
    monkeypatch.setattr(ctx, "start", lambda argv, timeout=None: None)  # no programs
    commands.start(ctx)
    assert asked.wait(30), "start() did not begin the connection"
    assert isinstance(ctx.begun.get("mirrors", (None, None))[1], mirrors.Reaching)
    release.set()
    found = Found()
    mirrors.probe(ctx, found)
    assert found.values["mirrors_reachable"] is True
    assert calls == [("127.0.0.1", listening)]  # one connection: the probe took the early one
    assert "mirrors" not in ctx.begun


def test_nothing_begins_for_another_tree(tmp_path):
    from hpcwizard.detect import commands

    ctx = root_with(tmp_path, {"etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main\n"})
    commands.start(ctx)
    assert ctx.begun == {}


def test_an_address_family_the_kernel_refuses_moves_on_to_the_next_address(monkeypatch, listening):
    """A name with an IPv6 address first, on a kernel without IPv6 (socket() itself fails,
    EAFNOSUPPORT), is still reached over IPv4."""
    import errno

    real_socket = socket.socket
    tried = []

    def getaddrinfo(host, port, family=0, kind=0, proto=0, flags=0):
        return [(socket.AF_INET6, kind, 6, "", ("::1", port, 0, 0)),
                (socket.AF_INET, kind, 6, "", ("127.0.0.1", port))]

    def make_socket(family=-1, kind=-1, proto=-1, fileno=None):
        tried.append(family)
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real_socket(family, kind, proto)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "socket", make_socket)
    assert mirrors.reachable([("localhost", listening)], timeout=5.0) is True
    assert tried == [socket.AF_INET6, socket.AF_INET]


def test_the_wait_a_note_gives_is_the_connections_not_the_other_probes(monkeypatch):
    """Begun with the programs, refused at once, taken by the probe a while later: the note
    says how long the connections took (as when the probe connected in its turn), not how
    long the probes before it read."""
    def refused(ep, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(mirrors, "sources", lambda ctx: [("http://mirror.example:80/debian", None)])
    monkeypatch.setattr(socket, "create_connection", refused)
    clock = [1000.0]  # the probe's clock, moved by hand: no test waits for a fixed time
    monkeypatch.setattr(mirrors, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    ctx = Context(sysroot="/", run_commands=True, env={})
    mirrors.start(ctx)
    assert ctx.begun["mirrors"][1]._done.wait(30)  # refused, at once
    clock[0] += 0.3  # the other probes read
    found = Found()
    mirrors.probe(ctx, found)
    assert found.values["mirrors_reachable"] is False
    [n] = [n for n in found.notes if n.code == "mirrors.none-answered"]
    assert n.to_dict()["args"]["seconds"] == "0.0", n
