"""Reading the files of a PEtab problem safely: paths confined to a root folder (symbolic links
resolved) and bounded reads from one open file descriptor (no file is read past its limit).

Shared by :mod:`odeinfer.petab.sbml` and :mod:`odeinfer.petab.tables`; messages name the argument
and the path, never the file's text.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from odeinfer.errors import InputError

__all__ = ["as_path", "read_bounded", "resolve"]


def as_path(argument, value):
    """``value`` as a Path, refused (naming ``argument``) unless it is a str or os.PathLike without NUL."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise InputError(f"{argument}: expected a file path (str or pathlib.Path), got {type(value).__name__}")
    if "\x00" in os.fspath(value):
        raise InputError(f"{argument}: the path {os.fspath(value)!r} holds a NUL character; pass a file path")
    return Path(value)


def resolve(path, root, *, argument="path", what="file", shown=None):
    """The real path of ``path`` (relative to ``root`` when given), refused outside ``root``;
    ``shown`` is the path as messages show it (default ``path``)."""
    p = as_path(argument, path)
    if root is None:
        return p.resolve()
    r = as_path("root", root)
    if not r.is_dir():
        raise InputError(f"root: {str(root)!r} is not an existing folder; pass the folder the {what} lies in")
    r = r.resolve()
    real = (r / p).resolve()  # an absolute p replaces r
    if not real.is_relative_to(r):
        raise InputError(
            f"{argument}: {str(path if shown is None else shown)!r} lies outside root {str(root)!r} (symbolic links resolved); only files "
            "inside root are read. Move the file into root or pass the folder that holds it as root")
    return real


def read_bounded(file, shown, limit, too_large, *, argument="path", what="file"):
    """At most ``limit + 1`` bytes of the regular file ``file``; ``too_large(size)`` raises beyond ``limit``.

    ``shown`` is the path as the user gave it (for messages), ``what`` names the kind of file.
    """
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"{argument}: cannot open {str(shown)!r} ({exc.strerror}); pass an existing {what}") \
            from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{argument}: {str(shown)!r} is not a regular file; pass the path of a {what}")
        if info.st_size > limit:
            too_large(info.st_size)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # the file grew while being read
            too_large(size)
        return b"".join(chunks)
    finally:
        os.close(fd)
