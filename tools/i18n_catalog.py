"""hpcwizard's message catalogues: extract, merge, compile. Pure Python (the stdlib has no
importable msgfmt), so CI and a fresh clone need nothing else.

    python3 tools/i18n_catalog.py extract   # scan wizard/ and screens/ for _("..."), N_("...");
                                            # update recipes/locale/*/LC_MESSAGES/hpcwizard.po
                                            # (new msgids added, unused ones dropped)
    python3 tools/i18n_catalog.py compile   # .po -> .mo, beside it
    python3 tools/i18n_catalog.py check     # exit 1 when a .po is out of date or a .mo stale

English is the msgid. The en catalogue lists every message with msgstr = msgid, the template
a new language starts from; it is not compiled, since English reads no catalogue (the msgid
is the text shown). zh_CN is translated by hand.
tests/test_i18n.py runs the same functions.
"""
from __future__ import annotations

import ast
import re
import struct
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (ROOT / "wizard", ROOT / "screens")
LOCALE = ROOT / "recipes" / "locale"
DOMAIN = "hpcwizard"
LANGS = {"en": "en", "zh_CN": "zh_CN"}
COMPILED = tuple(lang for lang in LANGS if lang != "en")  # the .mo files shipped
MARKERS = ("_", "N_")
HEADER = {
    "en": ("Project-Id-Version: hpcwizard\nLanguage: en\nMIME-Version: 1.0\n"
           "Content-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n"
           "Plural-Forms: nplurals=2; plural=(n != 1);\n"),
    "zh_CN": ("Project-Id-Version: hpcwizard\nLanguage: zh_CN\nMIME-Version: 1.0\n"
              "Content-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n"
              "Plural-Forms: nplurals=1; plural=0;\n"),
}


# --- extraction -------------------------------------------------------------------------------

def source_files() -> List[Path]:
    return sorted(p for d in SOURCES for p in d.rglob("*.py") if "__pycache__" not in p.parts)


def calls_in(tree: ast.AST) -> Iterable[Tuple[ast.Call, str]]:
    """(call, marker name) for every _(...)/N_(...) call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else ""
            if name in MARKERS:
                yield node, name


def binding_calls(tree: ast.AST) -> Iterable[ast.Call]:
    """Binding(keys, action, "Description", ...) calls with a literal description."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "Binding" and len(node.args) >= 3
                and isinstance(node.args[2], ast.Constant) and isinstance(node.args[2].value, str)
                and node.args[2].value):
            yield node


def extract() -> Dict[str, List[str]]:
    """msgid -> its places ('wizard/plan.py:123'), for every literal _()/N_() argument.
    N_() needs one string literal. _() takes one string literal, or a name, subscript or
    call that yields an N_()-marked constant (_(STATUS[s])); an f-string or a "+" inside
    _() is an error: the catalogue only knows whole, literal sentences."""
    found: Dict[str, List[str]] = {}
    errors: List[str] = []
    for path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "wizard/i18n.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for call, name in calls_in(tree):
            args = call.args
            literal = len(args) == 1 and isinstance(args[0], ast.Constant) \
                and isinstance(args[0].value, str)
            if not literal:
                dynamic = len(args) == 1 and isinstance(
                    args[0], (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
                if name == "_" and dynamic:
                    continue
                errors.append(f"{rel}:{call.lineno}: {name}() needs one string literal")
                continue
            found.setdefault(args[0].value, []).append(f"{rel}:{call.lineno}")
        for call in binding_calls(tree):  # key descriptions: translated where shown
            found.setdefault(call.args[2].value, []).append(f"{rel}:{call.lineno}")
    if errors:
        raise SystemExit("\n".join(errors))
    return found


# --- .po files ----------------------------------------------------------------------------------

def _unquote(s: str) -> str:
    s = s.strip()
    assert s.startswith('"') and s.endswith('"'), s
    return (s[1:-1].replace('\\\\', '\0').replace('\\n', '\n').replace('\\t', '\t')
            .replace('\\"', '"').replace('\0', '\\'))


def _quote(s: str) -> str:
    return '"' + s.replace('\\', '\\\\').replace('"', '\\"').replace('\t', '\\t') \
        .replace('\n', '\\n') + '"'


def read_po(path: Path) -> Dict[str, str]:
    """msgid -> msgstr, the header ("") included. Comments and fuzzy flags are ignored."""
    entries: Dict[str, str] = {}
    msgid: Optional[str] = None
    msgstr: Optional[str] = None
    current = ""

    def flush() -> None:
        if msgid is not None and msgstr is not None:
            entries[msgid] = msgstr

    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("msgid "):
            flush()
            msgid, msgstr, current = _unquote(line[6:]), None, "id"
        elif line.startswith("msgstr "):
            msgstr, current = _unquote(line[7:]), "str"
        elif line.startswith('"'):
            if current == "id":
                msgid = (msgid or "") + _unquote(line)
            else:
                msgstr = (msgstr or "") + _unquote(line)
        else:
            raise ValueError(f"{path}: cannot read: {raw}")
    flush()
    return entries


def _po_lines(key: str, text: str) -> List[str]:
    if "\n" not in text.rstrip("\n") and len(text) < 70:
        return [f"{key} {_quote(text)}"]
    parts = re.findall(r"[^\n]*\n|[^\n]+$", text)
    return [f'{key} ""'] + [_quote(p) for p in parts]


def write_po(path: Path, lang: str, messages: Dict[str, List[str]],
             translations: Dict[str, str]) -> str:
    out = [f"# hpcwizard messages ({lang}). English is the msgid. Made by",
           "# tools/i18n_catalog.py extract; translate msgstr, then run compile.", ""]
    out += _po_lines("msgid", "") + _po_lines("msgstr", HEADER[lang]) + [""]
    for msgid in sorted(messages, key=lambda m: (messages[m][0].rsplit(":", 1)[0], m)):
        # file names only (msgfmt's --add-location=file): moving code does not touch the .po
        files = sorted({place.rsplit(":", 1)[0] for place in messages[msgid]})
        out.append("#: " + " ".join(files))
        if "{" in msgid:
            out.append("#, python-brace-format")
        out += _po_lines("msgid", msgid)
        out += _po_lines("msgstr", msgid if lang == "en" else translations.get(msgid, ""))
        out.append("")
    text = "\n".join(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    return text


def po_path(lang: str) -> Path:
    return LOCALE / LANGS[lang] / "LC_MESSAGES" / f"{DOMAIN}.po"


def mo_path(lang: str) -> Path:
    return po_path(lang).with_suffix(".mo")


# --- .mo files (what msgfmt does) --------------------------------------------------------------

def compile_mo(entries: Dict[str, str]) -> bytes:
    """GNU .mo bytes of msgid -> msgstr; untranslated entries are left out, as msgfmt does,
    and so are entries that say what their msgid says ("SSH"): gettext answers the msgid
    for those anyway.
    Deterministic: the same .po always gives the same bytes."""
    pairs = sorted((k.encode("utf-8"), v.encode("utf-8")) for k, v in entries.items()
                   if v and v != k)
    n = len(pairs)
    header_size = 7 * 4
    ids_off = header_size
    strs_off = ids_off + n * 8
    data_off = strs_off + n * 8
    ids_table, strs_table, blob = [], [], b""
    for k, _v in pairs:
        ids_table.append((len(k), data_off + len(blob)))
        blob += k + b"\0"
    for _k, v in pairs:
        strs_table.append((len(v), data_off + len(blob)))
        blob += v + b"\0"
    out = struct.pack("<7I", 0x950412DE, 0, n, ids_off, strs_off, 0, data_off)
    out += b"".join(struct.pack("<2I", *t) for t in ids_table)
    out += b"".join(struct.pack("<2I", *t) for t in strs_table)
    return out + blob


# --- commands -------------------------------------------------------------------------------------

def expected_po(lang: str, messages: Optional[Dict[str, List[str]]] = None) -> str:
    messages = extract() if messages is None else messages
    path = po_path(lang)
    old = read_po(path) if path.exists() else {}
    return write_po(path, lang, messages, old)


def cmd_extract() -> int:
    messages = extract()
    for lang in LANGS:
        text = expected_po(lang, messages)
        po_path(lang).write_text(text, encoding="utf-8")
        untranslated = [m for m, v in read_po(po_path(lang)).items() if m and not v]
        print(f"{po_path(lang).relative_to(ROOT)}: {len(messages)} messages, "
              f"{len(untranslated)} untranslated")
    return 0


def cmd_compile() -> int:
    for lang in COMPILED:
        mo_path(lang).write_bytes(compile_mo(read_po(po_path(lang))))
        print(f"wrote {mo_path(lang).relative_to(ROOT)}")
    return 0


def cmd_check() -> int:
    bad = []
    messages = extract()
    for lang in LANGS:
        if po_path(lang).read_text(encoding="utf-8") != expected_po(lang, messages):
            bad.append(f"{po_path(lang)} is out of date: run tools/i18n_catalog.py extract")
        if lang not in COMPILED:
            continue
        if not mo_path(lang).exists() or \
                mo_path(lang).read_bytes() != compile_mo(read_po(po_path(lang))):
            bad.append(f"{mo_path(lang)} is stale: run tools/i18n_catalog.py compile")
    print("\n".join(bad) or "catalogues up to date")
    return 1 if bad else 0


if __name__ == "__main__":
    cmds = {"extract": cmd_extract, "compile": cmd_compile, "check": cmd_check}
    if len(sys.argv) != 2 or sys.argv[1] not in cmds:
        raise SystemExit(f"usage: {sys.argv[0]} {{{','.join(cmds)}}}")
    raise SystemExit(cmds[sys.argv[1]]())
