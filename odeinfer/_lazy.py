"""Lazy imports of heavy optional-at-import-time modules (pandas), for a fast ``import odeinfer``."""

from __future__ import annotations

import importlib

__all__ = ["pandas"]


class _LazyModule:
    """Imports the module on first attribute access, then behaves like it."""

    def __init__(self, name):
        self.__dict__["_name"] = name

    def __getattr__(self, attr):
        module = importlib.import_module(self.__dict__["_name"])
        return getattr(module, attr)


pandas = _LazyModule("pandas")
