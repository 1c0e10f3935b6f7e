"""How does a step become shell text? One rendering per step, used by review, apply and export
alike, so that what runs is exactly what the user saw.

Kinds (see recipes/*.toml):
- shell:  the recipe's own check / run / undo.
- file:   a file hpcwizard owns whole; written to a temporary file and renamed, a file that was
          there before is kept beside it (PATH.hpcwizard-orig) and put back by undo; one that
          was not is marked (PATH.hpcwizard-new) so that undo removes only what it created.
- block:  a marked block (# BEGIN hpcwizard ... # END hpcwizard) in a file hpcwizard does not
          own; undo deletes exactly those lines, leaving what others wrote.
- dropin: a file in a *.d directory when the main file includes that directory, else a block at
          the top of the main file (sshd uses the first value it reads).
A `validate` command runs after the change; when it fails the previous file is put back.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import List

BEGIN = "# BEGIN hpcwizard"
END = "# END hpcwizard"
_SED_BLOCK = f"/^{BEGIN}$/,/^{END}$/"


@dataclass(frozen=True)
class Rendered:
    check: str
    run: str
    undo: str


def q(text: str) -> str:
    return shlex.quote(text)


def _lines(content: str) -> List[str]:
    return content.strip("\n").splitlines()


def _printf(content: str) -> str:
    """A printf that writes content exactly, one quoted argument per line."""
    return "printf '%s\\n' " + " ".join(q(line) for line in _lines(content))


def _body(content: str, content_cmd: str) -> str:
    return content_cmd.strip() if content_cmd else _printf(content)


def _block_text(content: str, content_cmd: str) -> str:
    return f"{{ echo {q(BEGIN)}; {_body(content, content_cmd)}; echo {q(END)}; }}"


def _ensure_dir(path: str, mode: str) -> str:
    d = q(path.rsplit("/", 1)[0] or "/")
    return f"[ -d {d} ] || install -d -m {mode} {d}"


# --- file -------------------------------------------------------------------------------

def file_check(path: str, content: str, content_cmd: str, mode: str) -> str:
    p = q(path)
    return (f"{_body(content, content_cmd)} | cmp -s - {p} "
            f"&& [ \"$(stat -c %a {p})\" = {q(mode.lstrip('0') or '0')} ]")


def _stale(path: str) -> str:
    """Removes the temporary files a killed run left beside path (mktemp's XXXXXX)."""
    return f"rm -f {q(path + '.hpcwizard.')}??????"


def _markers(path: str) -> "tuple[str, str, str]":
    """The file, its backup (it was there before us), its marker (we created it)."""
    return q(path), q(path + ".hpcwizard-orig"), q(path + ".hpcwizard-new")


def file_run(path: str, content: str, content_cmd: str, mode: str) -> str:
    p, orig, new = _markers(path)
    return "\n".join([
        _ensure_dir(path, "0755"),
        f"if [ ! -e {p} ]; then : > {new}; "
        f"elif [ ! -e {orig} ] && [ ! -e {new} ]; then cp -p {p} {orig}; fi",
        _stale(path),
        f"tmp=$(mktemp {q(path + '.hpcwizard.')}XXXXXX)",
        "trap 'rm -f \"$tmp\"' EXIT",
        f"{_body(content, content_cmd)} > \"$tmp\"",
        f"chmod {mode} \"$tmp\"",
        f"mv -f \"$tmp\" {p}",
    ])


def file_undo(path: str) -> str:
    p, orig, new = _markers(path)
    return (f"if [ -e {orig} ]; then mv -f {orig} {p}; elif [ -e {new} ]; then rm -f {p}; fi\n"
            f"rm -f {new}\n{_stale(path)}")


# --- block ------------------------------------------------------------------------------

def block_check(path: str, content: str, content_cmd: str) -> str:
    p = q(path)
    return (f"[ -e {p} ] && [ \"$(sed -n '{_SED_BLOCK}p' {p})\" = "
            f"\"$({_block_text(content, content_cmd)})\" ]")


def block_run(path: str, content: str, content_cmd: str, mode: str, top: bool) -> str:
    p, _, new = _markers(path)
    block = _block_text(content, content_cmd)
    rest = f"if [ -e {p} ]; then sed '{_SED_BLOCK}d' {p}; fi"
    if top:
        body = [block, rest]
    else:
        # After a last line without a newline the block goes first instead: appending would
        # need a newline that undo could not tell from the user's own.
        body = [f"if [ -s {p} ] && [ -n \"$(tail -c 1 {p})\" ]; then",
                f"  {block}", f"  {rest}", "else", f"  {rest}", f"  {block}", "fi"]
    return "\n".join([
        _ensure_dir(path, "0700"),
        f"[ -e {p} ] || : > {new}",
        _stale(path),
        f"tmp=$(mktemp {q(path + '.hpcwizard.')}XXXXXX)",
        "trap 'rm -f \"$tmp\"' EXIT",
        "{",
        *(f"  {line}" for line in body),
        "} > \"$tmp\"",
        f"if [ -s {p} ]; then chmod --reference={p} \"$tmp\"; else chmod {mode} \"$tmp\"; fi",
        f"mv -f \"$tmp\" {p}",
    ])


def block_undo(path: str) -> str:
    p, _, new = _markers(path)
    return "\n".join([
        f"if [ -e {p} ] && grep -qx {q(BEGIN)} {p}; then",
        f"  tmp=$(mktemp {q(path + '.hpcwizard.')}XXXXXX)",
        "  trap 'rm -f \"$tmp\"' EXIT",
        f"  sed '{_SED_BLOCK}d' {p} > \"$tmp\"",
        f"  if [ ! -s \"$tmp\" ] && [ -e {new} ]; then rm -f {p}; "
        f"else chmod --reference={p} \"$tmp\"; mv -f \"$tmp\" {p}; fi",
        "fi",
        f"rm -f {new}",
        _stale(path),
    ])


# --- validation around a change ---------------------------------------------------------

def _guarded(paths: List[str], change: str, validate: str) -> str:
    """Run change, then validate; on failure put every touched file back as it was,
    including hpcwizard's own backup and marker files."""
    if not validate.strip():
        return change
    save, restore = [], []
    for i, path in enumerate(paths):
        p, orig, new = _markers(path)
        save.append(f"prev{i}=$(mktemp); had{i}=0; "
                    f"if [ -e {p} ]; then cp -p {p} \"$prev{i}\"; had{i}=1; fi; "
                    f"hado{i}=0; if [ -e {orig} ]; then hado{i}=1; fi")
        restore.append(f"  if [ \"$had{i}\" = 1 ]; then cp -p \"$prev{i}\" {p}; "
                       f"else rm -f {p} {new}; fi")
        restore.append(f"  if [ \"$hado{i}\" = 0 ]; then rm -f {orig}; fi")
    prevs = " ".join(f"\"$prev{i}\"" for i in range(len(paths)))
    return "\n".join([
        *save,
        f"trap 'rm -f {prevs}' EXIT",
        "(",
        *(f"  {line}" for line in change.splitlines()),
        ")",
        f"if ! ( {validate.strip()} ); then",
        *restore,
        "  echo 'hpcwizard: the new configuration failed its test; the previous one was put back' >&2",
        "  exit 1",
        "fi",
    ])


# --- entry point ------------------------------------------------------------------------

def render(kind: str, *, path: str = "", fallback: str = "", include: str = "",
           content: str = "", content_cmd: str = "", mode: str = "0644",
           position: str = "end", validate: str = "",
           check: str = "", run: str = "", undo: str = "") -> Rendered:
    if kind == "shell":
        return Rendered(check.strip(), run.strip(), undo.strip())
    if kind == "file":
        return Rendered(
            file_check(path, content, content_cmd, mode),
            _guarded([path], file_run(path, content, content_cmd, mode), validate),
            file_undo(path),
        )
    if kind == "block":
        return Rendered(
            block_check(path, content, content_cmd),
            _guarded([path], block_run(path, content, content_cmd, mode, position == "top"), validate),
            block_undo(path),
        )
    if kind == "dropin":
        has_include = f"grep -qsE {q(include)} {q(fallback)}"
        change = "\n".join([
            f"if {has_include}; then",
            *(f"  {line}" for line in file_run(path, content, content_cmd, mode).splitlines()),
            "else",
            *(f"  {line}" for line in block_run(fallback, content, content_cmd, mode, True).splitlines()),
            "fi",
        ])
        return Rendered(
            f"if {has_include}; then {file_check(path, content, content_cmd, mode)}; "
            f"else {block_check(fallback, content, content_cmd)}; fi",
            _guarded([path, fallback], change, validate),
            file_undo(path) + "\n" + block_undo(fallback),
        )
    raise ValueError(f"unknown step kind {kind!r}")
