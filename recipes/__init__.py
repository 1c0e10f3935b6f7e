"""Recipes: data only. Each *.toml is one capability; presets.toml lists preset images.

`read_text("ops.sh")` reads one shipped file, from a checkout, a wheel or the zipapp alike,
through this package's own loader (as pkgutil.get_data does). importlib.resources does the
same, and importing it costs 10 to 30 ms on a clean interpreter: more than `detect` spends
on its probes. Listing the files (the catalog) still goes through importlib.resources.
"""
import os


def read_bytes(name: str) -> bytes:
    """The bytes of a shipped file ("locale/zh_CN/LC_MESSAGES/hpcwizard.mo"); OSError when
    it is not there."""
    return __loader__.get_data(os.path.join(os.path.dirname(__file__), *name.split("/")))


def read_text(name: str) -> str:
    return read_bytes(name).decode("utf-8")
