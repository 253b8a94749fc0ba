"""Writing output files safely: :func:`check_target` (is the output path usable?) and
:func:`write_atomic` (the whole file or nothing, keeping an existing file's permissions).

Used by every writer of odeinfer (HTML reports, ``Estimate.to_json``) and by the command
line, which checks its output path before running any analysis.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from odeinfer.errors import InputError

__all__ = ["check_target", "write_atomic"]

#: Mode of a new file when the process umask cannot be read (what ``open(path, "w")`` gives
#: under the usual umask 022).
_FALLBACK_MODE = 0o644


def check_target(path, *, overwrite: bool = True, argument: str = "path") -> Path:
    """The output file ``path`` as a Path, after checking that it can be written.

    Raises
    ------
    InputError
        ``path`` is not a path; its directory does not exist or is not writable; it is a
        directory; it exists and ``overwrite`` is False.
    """
    try:
        target = Path(os.fspath(path)).expanduser()
    except TypeError:
        raise InputError(f"{argument}: expected a file path (str or os.PathLike), "
                         f"got {type(path).__name__}") from None
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{argument}: the directory {str(parent)!r} of {str(target)!r} does not exist; "
                         "create it first or choose another output path")
    if target.is_dir():
        raise InputError(f"{argument}: {str(target)!r} is a directory; give a file name such as 'report.html'")
    if target.exists() and not overwrite:
        raise InputError(f"{argument}: {str(target)!r} already exists; pass overwrite=True to replace it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{argument}: no permission to write in the directory {str(parent)!r}; "
                         "choose a writable location")
    return target


def _new_file_mode() -> int:
    """``0o666`` less the process umask (read from /proc, which does not change it), as ``open`` gives."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _FALLBACK_MODE


def write_atomic(text: str, path, *, overwrite: bool = True, argument: str = "path") -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same directory.

    The data are flushed to disk (fsync) and the temporary file is renamed over the target
    (``os.replace``), so the target holds either its old content or the whole new text, never a
    part. An existing target keeps its permission bits (a 0600 file stays 0600); a new file gets
    the mode ``open(path, "w")`` would give. On any failure the temporary file is removed and
    the error propagates (permission problems as :class:`InputError`).

    Raises
    ------
    InputError
        As :func:`check_target`, or no permission to create or replace the file.
    OSError
        The write itself failed (disk full, file-size limit); the old file is untouched.
    """
    target = check_target(path, overwrite=overwrite, argument=argument)
    parent = target.parent if str(target.parent) else Path(".")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = _new_file_mode()
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp")
    except PermissionError as err:
        raise InputError(f"{argument}: no permission to write in the directory {str(parent)!r} ({err.strerror}); "
                         "choose a writable location") from err
    except OSError as err:
        raise InputError(f"{argument}: cannot create a file in {str(parent)!r} ({err.strerror or err})") from err
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, PermissionError):
            raise InputError(f"{argument}: no permission to write {str(target)!r} ({err.strerror}); "
                             "choose a writable location") from err
        raise
    _fsync_dir(parent)
    return target


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
