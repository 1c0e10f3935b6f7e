"""Frozen records that cost nothing to define: what `@dataclass(frozen=True)` gives the facts,
without its price at import.

`detect` builds its answer from two dozen of these, and defining them with dataclasses
compiled six generated methods each, plus importing dataclasses with inspect, ast and dis:
a fifth of the whole command beyond the interpreter. Here the methods are shared functions
that read the class's field list, so defining a class is a dict lookup or two.

They stay dataclasses to everything that asks: `dataclasses.fields`, `replace`, `asdict`
and `is_dataclass` see a `__dataclass_fields__`, made by dataclasses itself (from the same
names, types and defaults) the first time one of them asks, so only code that asks imports
dataclasses. tests/test_frozen.py holds each behaviour to a real dataclass's.

    @frozen
    class Port:
        hca: str
        number: int = 1
        tags: Tuple[str, ...] = ()
        extra: Dict[str, str] = factory(dict)   # a new one for each instance
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple, TypeVar

T = TypeVar("T")
_MISSING = object()


class FrozenInstanceError(AttributeError):
    """A field of a frozen record was assigned or deleted (dataclasses' own error is the
    same kind: an AttributeError)."""


class factory:  # noqa: N801 - reads as a default value: `= factory(dict)`
    """A default made new for each instance (dataclasses' default_factory)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


class _DataclassFields:
    """`__dataclass_fields__` (or `__dataclass_params__`), made by dataclasses from the
    record's own fields the first time something asks (hasattr included), then kept on the
    class. The params too: pprint reads them of whatever is_dataclass calls a dataclass, as
    does @dataclass of a base class."""

    def __init__(self, attribute: str = "__dataclass_fields__") -> None:
        self.attribute = attribute

    def __get__(self, obj: Any, cls: type) -> Any:
        import dataclasses

        spec = []
        for name in cls._fields:
            kept = cls._defaults.get(name, _MISSING)
            if isinstance(kept, factory):
                spec.append((name, cls.__annotations__[name],
                             dataclasses.field(default_factory=kept.make)))
            elif kept is _MISSING:
                spec.append((name, cls.__annotations__[name]))
            else:
                spec.append((name, cls.__annotations__[name], dataclasses.field(default=kept)))
        made = dataclasses.make_dataclass(cls.__name__, spec, frozen=True)
        for attribute in ("__dataclass_fields__", "__dataclass_params__"):
            type.__setattr__(cls, attribute, made.__dict__[attribute])
        return made.__dict__[self.attribute]


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = type(self)
    names = cls._fields
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}() takes {len(names)} arguments, {len(args)} given")
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
        if name not in names:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
        values[name] = value
    if len(values) < len(names):
        for name in names:
            if name not in values:
                kept = cls._defaults.get(name, _MISSING)
                if kept is _MISSING:
                    raise TypeError(f"{cls.__name__}() missing required argument {name!r}")
                values[name] = kept.make() if isinstance(kept, factory) else kept
    # the instance's dict directly: __setattr__ refuses every assignment
    self.__dict__.update(values)
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _values(self: Any) -> Tuple[Any, ...]:
    d = self.__dict__
    return tuple(d[name] for name in type(self)._fields)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _repr(self: Any) -> str:
    d = self.__dict__
    shown = ", ".join(f"{name}={d[name]!r}" for name in type(self)._fields)
    return f"{type(self).__qualname__}({shown})"


def _setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def frozen(cls: type) -> type:
    """cls, its annotated attributes its fields in order, each a default if it has one
    (positional arguments in the same order, as with dataclasses)."""
    names = tuple(cls.__dict__.get("__annotations__", {}))
    defaults: Dict[str, Any] = {}
    seen_default = False
    for name in names:
        if name in cls.__dict__:
            defaults[name] = cls.__dict__[name]
            seen_default = True
            if isinstance(defaults[name], factory):
                delattr(cls, name)  # as dataclasses leaves no class attribute for a factory
        elif seen_default:
            raise TypeError(f"{cls.__name__}: field {name!r} without a default follows "
                            "one with a default")
    cls._fields = names
    cls._defaults = defaults
    cls.__init__ = _init
    cls.__eq__ = _eq
    cls.__hash__ = _hash
    cls.__repr__ = _repr
    cls.__setattr__ = _setattr
    cls.__delattr__ = _delattr
    cls.__match_args__ = names
    cls.__replace__ = replace  # copy.replace (3.13), as dataclasses define it
    cls.__dataclass_fields__ = _DataclassFields()
    cls.__dataclass_params__ = _DataclassFields("__dataclass_params__")
    return cls


def is_record(obj: Any) -> bool:
    """Whether obj is a class made by frozen, or an instance of one."""
    return "_fields" in getattr(obj if isinstance(obj, type) else type(obj), "__dict__", {})


def field_names(cls: type) -> Tuple[str, ...]:
    return cls._fields  # type: ignore[attr-defined, no-any-return]


def as_dict(value: Any) -> Any:
    """dataclasses.asdict's form (records as dicts, tuples kept as tuples, dicts and lists
    rebuilt), for records and what they hold. What else they hold is kept as it is: the
    facts hold strings, numbers and Notes, none of which changes."""
    if is_record(value):
        d = value.__dict__
        return {name: as_dict(d[name]) for name in type(value)._fields}
    if isinstance(value, (tuple, list)):
        return type(value)(as_dict(v) for v in value)
    if isinstance(value, dict):
        return {as_dict(k): as_dict(v) for k, v in value.items()}
    return value


def replace(record: T, **changes: Any) -> T:
    """dataclasses.replace for a record, without importing dataclasses."""
    d = record.__dict__
    values = {name: d[name] for name in type(record)._fields}  # type: ignore[attr-defined]
    values.update(changes)
    return type(record)(**values)
