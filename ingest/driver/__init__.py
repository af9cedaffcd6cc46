"""The MPI driver: the only package that talks MPI. `run(comm, config)` for pipelines, and
`publish(comm, dest, regions)` to write the ranks' regions back as one object.

The names below are imported on first use (PEP 562): a rank running `run` loads commands.py and
what it needs, not publish's plan and image writer (astropy) as well.
"""
from __future__ import annotations

import sys
import types

__all__ = ["RankResult", "run", "stage", "publish"]


def __getattr__(name: str):
    """`RankResult`, `run` and `stage` from commands.py, `publish` from publish.py, on first use."""
    if name in ("RankResult", "run", "stage"):
        from ingest.driver import commands as module
    elif name == "publish":
        from importlib import import_module

        import_module("ingest.driver.publish")  # its import sets the package's name: see _Package
        return globals()["publish"]
    else:
        raise AttributeError(f"module 'ingest.driver' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value  # once: later lookups do not come here
    return value


class _Package(types.ModuleType):
    """The package's `publish` is the function, as it always was, whoever imports the module of
    the same name first: importing a submodule sets the package's attribute to the module, and
    this keeps the function there instead."""

    def __setattr__(self, name: str, value) -> None:
        if name == "publish" and isinstance(value, types.ModuleType):
            value = value.publish
        super().__setattr__(name, value)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


sys.modules[__name__].__class__ = _Package
