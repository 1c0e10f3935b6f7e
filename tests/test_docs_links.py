"""The documents hold together: every relative link in the front pages, docs/ and
bench/RESULTS.md reaches a file in the repository (and, with #anchor, a heading of that
file, by GitHub's rule for heading ids); each front page is a front page: at most 300
lines, the install-and-start command in its first 40, the CI's test command in it; and
docs/commands.md names every command, option and choice that --help offers."""
from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Dict, List, Set
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
FRONT_PAGES = [ROOT / "README.md", ROOT / "README.zh.md"]
DOCUMENTS = FRONT_PAGES + sorted((ROOT / "docs").glob("*.md")) + [ROOT / "bench" / "RESULTS.md"]
INSTALL = "python3 -m pip install . && python3 -m hpcwizard"

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text a reader sees as prose: links inside code are examples, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's heading id: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(doc: Path) -> Set[str]:
    seen: Dict[str, int] = {}
    out: Set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(doc: Path, root: Path = ROOT) -> List[str]:
    """Each relative link of doc that does not reach a file under root, or a heading in it."""
    broken = []
    for target in LINK.findall(prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / unquote(path_part)).resolve() if path_part else doc
        if root not in dest.parents and dest != root:
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or unquote(anchor) not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    return broken


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert doc.exists(), f"{doc.relative_to(ROOT)} is missing"
    assert broken_links(doc) == []


def test_the_checker_finds_a_missing_file_a_missing_heading_and_a_way_out(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## Hosts and rank: runtime.sh\n")
    doc = tmp_path / "docs" / "a.md"
    doc.write_text(
        "[ok](b.md#hosts-and-rank-runtimesh) [ok2](b.md#title) [web](https://example.org/x)\n"
        "`[in code](nowhere.md)`\n```\n[in a block](nowhere.md)\n```\n"
        "[gone](c.md) [no heading](b.md#missing) [out](../../etc/passwd)\n")
    assert broken_links(doc, root=tmp_path) == [
        "c.md: no such file",
        "b.md#missing: no heading #missing in b.md",
        "../../etc/passwd: outside the repository",
    ]


@pytest.mark.parametrize("heading, expected", [
    ("What the zipapp writes: its cache", "what-the-zipapp-writes-its-cache"),
    ("A `~/.ssh` the platform provides", "a-ssh-the-platform-provides"),
    ("Every `mpirun`, not only the launch script's", "every-mpirun-not-only-the-launch-scripts"),
    ("Languages / 语言", "languages--语言"),
])
def test_heading_ids_follow_githubs_rule(heading: str, expected: str) -> None:
    assert slug(heading) == expected


@pytest.mark.parametrize("page", FRONT_PAGES, ids=lambda p: p.name)
def test_a_front_page_is_short_and_starts_with_the_install_command(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"{page.name} has {len(lines)} lines"
    assert any(INSTALL in line for line in lines[:40]), f"{page.name}: no '{INSTALL}' in 40 lines"


@pytest.mark.parametrize("page", FRONT_PAGES, ids=lambda p: p.name)
def test_a_front_page_names_the_command_ci_runs(page: Path) -> None:
    """.ci/run is README's test command: the front pages must still say so."""
    assert "bash .ci/run" in page.read_text(encoding="utf-8")
    assert (ROOT / ".ci" / "run").exists()


@pytest.mark.parametrize("page", FRONT_PAGES, ids=lambda p: p.name)
def test_the_front_pages_link_to_each_other(page: Path) -> None:
    other = "README.zh.md" if page.name == "README.md" else "README.md"
    head = "\n".join(page.read_text(encoding="utf-8").splitlines()[:5])
    assert f"]({other})" in head


def _help(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hpcwizard", "--lang", "en", *args, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_commands_reference_names_every_command_option_and_format() -> None:
    """docs/commands.md is the reference: whatever --help offers, it describes."""
    reference = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    top = _help()
    commands = re.search(r"\{(detect,[a-z,]+)\}", top).group(1).split(",")
    missing = []
    for command in [None, *commands]:
        text = top if command is None else _help(command)
        usage = text.split("\n\n")[0]  # the usage lines name every option and choice
        words = set(re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", usage)) - {"-h", "--help"}
        words |= {c for group in re.findall(r"\{([a-z0-9,]+)\}", usage) for c in group.split(",")}
        if command:
            words.add(command)
        missing += [f"{command or 'hpcwizard'}: {w}" for w in sorted(words)
                    if not re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", reference)]
    assert len(commands) >= 8 and missing == []


def test_the_readme_plan_is_what_plan_prints() -> None:
    """README's plan excerpt is real output: each line of it is a line of the plan the golden
    test holds `hpcwizard plan` to for MPI over TCP as root on Debian 12 (how many packages
    are missing depends on the machine it ran on, so the counts are set aside)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^## What a plan looks like$.*?^```\n(.*?)^```$", readme, re.M | re.S)
    assert block, "README.md: no plan excerpt under 'What a plan looks like'"
    shown = [line for line in block.group(1).splitlines()
             if not line.startswith(("$ ", "[…")) and line.strip()]
    golden = ROOT / "tests" / "golden" / "plan-texts" / "debian12-mpi-tcp-root.txt"
    count = re.compile(r"\b\d+ packages\b")
    printed = {count.sub("N packages", line) for line in golden.read_text(encoding="utf-8").splitlines()}
    assert len(shown) >= 10
    assert [line for line in shown if count.sub("N packages", line) not in printed] == []
