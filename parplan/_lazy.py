"""Package attributes imported on first use (PEP 562).

A package's `__init__` re-exports its public names for `from parplan import plan`; importing them eagerly
would load the whole cost model (and everything it imports) whenever any one submodule is imported, e.g. by
`parplan --help`. `lazy_exports` gives the package a module `__getattr__` that imports a name's module only
when the name is first read, and caches it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, modules: dict[str, tuple[str, ...]]
                 ) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """(`__all__`, `__getattr__`, `__dir__`) for `package`, which re-exports the names listed per module."""
    exports = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | exports.keys())

    return sorted(exports), __getattr__, __dir__
