"""On-disk cache of Monte Carlo study frames, keyed on the code that produced them.

A cached study is only reused when the odeinfer version and a hash of the source files that
produced it are those of the running code (:func:`code_key`), so a changed estimator never has
its old results re-asserted: :func:`cached_frame`.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import types
from pathlib import Path

from odeinfer._lazy import pandas as pd

from ..errors import StudyError

__all__ = ["code_key", "cached_frame"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _source_files(obj):
    """The ``.py`` files of a module (all of them under a package's directory)."""
    path = getattr(obj, "__file__", None)
    if path is None:
        raise StudyError(f"`sources`: module {obj.__name__!r} has no source file; pass modules loaded from "
                         f".py files, classes or functions.")
    if os.path.basename(path) == "__init__.py":
        return sorted(Path(path).parent.rglob("*.py"))
    return [Path(path)]


def code_key(*sources) -> str:
    """``"<odeinfer version>-<12 hex digits>"``: the version and a SHA-256 of ``sources``.

    Parameters
    ----------
    *sources : module, class or function
        A package stands for every ``.py`` file below its directory, a module for its file,
        a class or function for its source text (``inspect.getsource``).

    Raises
    ------
    StudyError
        No source given, or one that is neither a module, a class nor a function.
    """
    from odeinfer import __version__

    if not sources:
        raise StudyError("`sources`: give at least one module, class or function whose code the cached "
                         "results depend on, e.g. code_key(odeinfer.estimators, MySimulator).")
    h = hashlib.sha256()
    for obj in sources:
        if isinstance(obj, types.ModuleType):
            root = Path(obj.__file__).parent
            for f in _source_files(obj):
                h.update(f"{obj.__name__}:{f.relative_to(root).as_posix()}".encode())  # no machine path
                h.update(f.read_bytes())
        elif inspect.isclass(obj) or inspect.isfunction(obj):
            h.update(f"{obj.__module__}.{obj.__qualname__}".encode())
            h.update(inspect.getsource(obj).encode())
        else:
            raise StudyError(f"`sources`: expected modules, classes or functions; received "
                             f"{type(obj).__name__}. Pass e.g. odeinfer.estimators or the simulator class.")
    return f"{_UNSAFE.sub('_', __version__)}-{h.hexdigest()[:12]}"


def cached_frame(directory, name, code, compute):
    """The study frame ``compute()`` returns, stored as ``<directory>/<name>_<code>.csv``.

    Parameters
    ----------
    directory : str or path-like or None
        Cache directory (created if missing); None runs ``compute()`` without caching.
    name : str
        What the study is (setting, seed, replications): part of the file name.
    code : str
        :func:`code_key` of the code behind the study; a frame written by other code is never read.
    compute : callable
        ``compute() -> pandas.DataFrame``.

    Returns
    -------
    pandas.DataFrame
        Read from the cache when the file for ``(name, code)`` exists, else computed and written
        atomically (a temporary file in ``directory``, fsync, rename).
    """
    if directory is None:
        return compute()
    if not isinstance(name, str) or not name or not isinstance(code, str) or not code:
        raise StudyError(f"`name` and `code` must be non-empty str; received name={name!r}, code={code!r}. "
                         f"Pass code=code_key(...).")
    from odeinfer._io import write_atomic

    folder = Path(os.fspath(directory))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_UNSAFE.sub('_', name)}_{_UNSAFE.sub('_', code)}.csv"
    if path.is_file():
        return pd.read_csv(path, keep_default_na=True)
    frame = compute()
    write_atomic(frame.to_csv(index=False), path, argument="directory")
    return frame
