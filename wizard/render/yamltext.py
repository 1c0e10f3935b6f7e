"""YAML written as text from plain data (dicts, lists, str, int, bool), with comments: the
Kubernetes manifests need no YAML library at run time (PyYAML is no dependency of hpcwizard).

    dump({"kind": "MPIJob", "spec": {"slotsPerWorker": Note(1, "ranks per worker")}})

Strings are double-quoted JSON (a subset of YAML's double-quoted style) unless they are plain
words that no YAML 1.1 reader takes for a bool, a number or null; a multi-line string (a
script) is a literal block. The same data gives the same text, byte for byte.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, List

_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")
# words a YAML 1.1 reader (PyYAML, older kubectl) would not read as the string itself
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


@dataclass(frozen=True)
class Note:
    """A value with comment lines written above its key (or above its list item)."""
    value: Any
    text: str


def scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in _RESERVED:
            return value
        return json.dumps(value)
    raise TypeError(f"no YAML scalar for {type(value).__name__}")


def _block(value: Any) -> bool:
    """A string to write as a literal block: a script, one that reads back exactly."""
    if not isinstance(value, str) or "\n" not in value.rstrip("\n"):
        return False
    body = value[:-1] if value.endswith("\n") else value
    return (not body.startswith((" ", "\t")) and not body.endswith("\n") and "\r" not in body
            and all(line == line.rstrip() for line in body.split("\n"))
            and all(ch == "\t" or ch == "\n" or ord(ch) >= 0x20 for ch in body))


def _comments(text: str, indent: int) -> List[str]:
    pad = " " * indent
    return [(pad + "# " + line).rstrip() for line in text.split("\n")]


def _unwrap(value: Any) -> "tuple[Any, str]":
    return (value.value, value.text) if isinstance(value, Note) else (value, "")


def _value_lines(head: str, value: Any, indent: int) -> List[str]:
    """head is 'key:' or '- ' already indented; value follows on its line or below."""
    if isinstance(value, dict) and value:
        return [head] + _mapping(value, indent + 2)
    if isinstance(value, list) and value:
        return [head] + _sequence(value, indent + 2)
    if isinstance(value, dict):
        return [head + " {}"]
    if isinstance(value, list):
        return [head + " []"]
    if _block(value):
        mark = "|" if value.endswith("\n") else "|-"
        pad = " " * (indent + 2)
        body = value[:-1] if value.endswith("\n") else value
        return [f"{head} {mark}"] + [(pad + line) if line else "" for line in body.split("\n")]
    return [f"{head} {scalar(value)}"]


def _mapping(data: dict, indent: int) -> List[str]:
    out: List[str] = []
    pad = " " * indent
    for key, raw in data.items():
        value, note = _unwrap(raw)
        if note:
            out += _comments(note, indent)
        out += _value_lines(f"{pad}{scalar(str(key))}:", value, indent)
    return out


def _sequence(items: list, indent: int) -> List[str]:
    out: List[str] = []
    pad = " " * indent
    for raw in items:
        item, note = _unwrap(raw)
        if note:
            out += _comments(note, indent)
        if isinstance(item, dict) and item:
            lines = _mapping(item, indent + 2)
            # the item's first key goes on the dash's line, the comments of that key above it
            first = next(i for i, line in enumerate(lines) if not line.lstrip().startswith("#"))
            out += [line[2:] if line.startswith(pad + "  #") else line for line in lines[:first]]
            out.append(pad + "- " + lines[first][indent + 2:])
            out += lines[first + 1:]
        else:
            head = _value_lines(pad + "-", item, indent)
            out += head
    return out


def dump(data: dict, header: str = "") -> str:
    """The document: header as comment lines, then data."""
    lines = _comments(header, 0) if header else []
    return "\n".join(lines + _mapping(data, 0)) + "\n"
