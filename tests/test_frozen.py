"""hpcwizard.frozen's records behave as the dataclasses they replace: each record class of the
facts, the vocabulary and the runners is held to a real dataclass made by dataclasses from
the same fields and defaults (fields, defaults, repr, equality, hashing, frozenness,
replace, asdict, pickling, argument errors). And detect's import path loads no dataclasses."""
from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from hpcwizard import facts, frozen, proc, vocab
from hpcwizard.detect import core, rdma, run, target_python

RECORDS = [facts.OsInfo, facts.UserInfo, facts.Runtime, facts.Iface, facts.Port, facts.Hca,
           facts.Gpu, facts.Rdma, facts.Software, facts.SshDir, facts.Facts, vocab.Value,
           vocab.Choice, vocab.Situation, vocab.Condition, proc.Finished, run.Result,
           core.Probe, rdma.DmaBuf, target_python.TargetPython]


def real_dataclass(cls: type) -> type:
    """What @dataclass(frozen=True) makes of cls's fields and defaults."""
    spec = []
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            spec.append((f.name, f.type, dataclasses.field(default_factory=f.default_factory)))
        elif f.default is not dataclasses.MISSING:
            spec.append((f.name, f.type, dataclasses.field(default=f.default)))
        else:
            spec.append((f.name, f.type))
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=True)


def sample(cls: type) -> Dict[str, Any]:
    """Values for every field without a default (the rest keep theirs)."""
    values = {"str": "x", "int": 3, "Tuple[Value, ...]": (vocab.Value("a"),), "float": 1.5,
              "Callable[[Context, Found], None]": print, "Tuple[str, ...]": ("a", "b"),
              "Callable[[Situation], bool]": bool, "'Choices'": "choices", "'Facts'": "facts",
              "bool": True}
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            out[f.name] = values[f.type]
    if cls is vocab.Choice:
        out["default"] = "a"
    return out


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_a_record_is_the_dataclass_it_replaces(cls):
    real = real_dataclass(cls)
    kwargs = sample(cls)
    ours, theirs = cls(**kwargs), real(**kwargs)
    assert dataclasses.is_dataclass(cls) and dataclasses.is_dataclass(ours)
    assert [f.name for f in dataclasses.fields(ours)] == list(cls.__annotations__)
    assert repr(ours) == repr(theirs)
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs) == frozen.as_dict(ours)
    assert ours == cls(**kwargs) and ours != theirs  # another class is never equal
    # a field no __post_init__ looks at (Facts makes Notes of its notes; Value checks its id)
    first = [f.name for f in dataclasses.fields(cls) if f.name not in ("notes", "warnings")][-1]
    marker = ("another value",)
    changed = dataclasses.replace(ours, **{first: marker})
    assert changed != ours and getattr(changed, first) is marker
    assert frozen.replace(ours, **{first: marker}) == changed
    assert dataclasses.replace(theirs, **{first: marker}) == real(**{**kwargs, first: marker})
    with pytest.raises(AttributeError):
        setattr(ours, first, None)
    with pytest.raises(AttributeError):
        delattr(ours, first)
    assert getattr(ours, first) == kwargs.get(first, getattr(theirs, first))
    try:
        expected = hash(theirs)
    except TypeError:  # a field holds a dict or a list: unhashable for both
        with pytest.raises(TypeError):
            hash(ours)
    else:
        assert hash(ours) == expected
    # pattern matching (3.10 on): dataclasses give the fields' names in order
    assert cls.__match_args__ == getattr(real, "__match_args__", tuple(cls.__annotations__))


def test_positional_arguments_and_their_errors_are_a_dataclass_s():
    real = real_dataclass(facts.Port)
    assert facts.Port("mlx5_0", 1, "ACTIVE").state == real("mlx5_0", 1, "ACTIVE").state
    for bad in [lambda c: c(), lambda c: c("a", 1, hca="b"), lambda c: c("a", 1, colour=2),
                lambda c: c(*range(20))]:
        with pytest.raises(TypeError):
            bad(real)
        with pytest.raises(TypeError):
            bad(facts.Port)


def test_a_factory_default_is_new_for_each_instance_and_post_init_runs():
    @frozen.frozen
    class Bag:
        name: str
        items: Dict[str, int] = frozen.factory(dict)
        tags: Tuple[str, ...] = ()

        def __post_init__(self) -> None:
            self.items.setdefault("made", 1)

    a, b = Bag("a"), Bag("b")
    assert a.items == {"made": 1} and a.items is not b.items
    assert "items" not in Bag.__dict__  # as dataclasses leaves no class attribute for it
    assert dataclasses.fields(Bag)[1].default_factory is dict
    # Facts' own __post_init__ turns plain texts into Notes
    assert isinstance(facts.Facts(notes=("plain",)).notes[0], facts.Note)


def test_a_field_without_a_default_after_one_with_a_default_is_refused():
    with pytest.raises(TypeError, match="without a default"):
        @frozen.frozen
        class Wrong:
            a: int = 1
            b: int


@pytest.mark.parametrize("which", ["this machine", "InfiniBand"])
def test_facts_survive_json_pickle_and_deepcopy_as_they_were(which):
    from _ib_fixtures import make_facts

    from hpcwizard.detect import detect

    f = detect() if which == "this machine" else make_facts(ib=True)
    assert f.ifaces or f.hcas  # something nested to carry
    assert facts.Facts.from_dict(json.loads(json.dumps(f.to_dict()))) == f
    assert pickle.loads(pickle.dumps(f)) == f and copy.deepcopy(f) == f
    real = dataclasses.asdict(f)
    assert {k: v for k, v in f.to_dict().items() if k not in ("notes", "warnings")} == \
        {k: v for k, v in real.items() if k not in ("notes", "warnings")}


def test_detect_loads_no_dataclasses():
    """What the records are for: detect's import path without dataclasses (and inspect, ast,
    dis with it). This check can fail: the planner does load it."""
    code = ("import io, json, sys\nfrom hpcwizard import cli\n"
            "out, sys.stdout = sys.stdout, io.StringIO()\nstatus = cli.main(['detect', '--json'])\n"
            "sys.stdout = out\nafter_detect = 'dataclasses' in sys.modules\n"
            "import hpcwizard.plan\n"
            "print(json.dumps([status, after_detect, 'dataclasses' in sys.modules]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [0, False, True]


def test_pprint_and_pytest_s_pprint_show_a_record():
    """pprint (3.10 on) reads __dataclass_params__ of whatever is_dataclass calls one."""
    import pprint

    port = facts.Port("mlx5_0", 1)
    assert pprint.pformat(port, width=200) == repr(port)
    assert facts.Port.__dataclass_params__.frozen and facts.Port.__dataclass_params__.eq


@pytest.mark.skipif(sys.version_info < (3, 13), reason="copy.replace is 3.13's")
def test_copy_replace_changes_a_record_as_it_does_a_dataclass():
    port = facts.Port("mlx5_0", 1)
    assert copy.replace(port, number=2) == dataclasses.replace(port, number=2)
