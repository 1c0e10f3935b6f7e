"""One place for what differs between Python 3.9 and 3.13."""
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10 in CI
    import tomli as tomllib

__all__ = ["tomllib"]
