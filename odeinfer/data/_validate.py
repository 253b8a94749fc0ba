"""Conversion and validation helpers shared by :class:`~odeinfer.data.Data`.

Every function raises :class:`~odeinfer.errors.DataError` with a message that
names the argument, what was received, what was expected and how to fix it.
"""

from __future__ import annotations

import difflib
import numbers

import numpy as np
from odeinfer._lazy import pandas as pd

from ..errors import DataError

__all__ = [
    "close_matches",
    "readonly",
    "to_float64",
    "check_states",
    "check_t",
    "check_y",
    "check_t0",
]

_MAX_LISTED = 5


def close_matches(word, candidates):
    """Return a " Did you mean ...?" hint, or "" when nothing is close."""
    hits = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=3, cutoff=0.6)
    if not hits:
        return ""
    return " Did you mean " + " or ".join(repr(h) for h in hits) + "?"


def readonly(arr):
    """Return a float64 read-only copy of ``arr``."""
    out = np.array(arr, dtype=np.float64, copy=True)
    out.flags.writeable = False
    return out


def _listed(items):
    items = list(items)
    text = ", ".join(str(i) for i in items[:_MAX_LISTED])
    if len(items) > _MAX_LISTED:
        text += f", ... ({len(items)} in total)"
    return text


def to_float64(value, argument):
    """Convert ``value`` to a new float64 array; missing entries (None, pd.NA) become NaN.

    Parameters
    ----------
    value : array_like
        Numbers. Strings, booleans, complex numbers and dates are refused.
    argument : str
        Name of the argument, used in error messages.

    Returns
    -------
    numpy.ndarray
        A float64 copy with the shape of ``value``.
    """
    if isinstance(value, (str, bytes)):
        raise DataError(
            f"`{argument}` must be an array of numbers; received the string {value!r}. "
            f"Pass a list or array of numbers."
        )
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"`{argument}` could not be read as an array of numbers ({exc}); received "
            f"{type(value).__name__}. Pass a rectangular list or array of numbers."
        ) from None
    kind = arr.dtype.kind
    if kind in "iuf":
        return np.array(arr, dtype=np.float64, copy=True)
    if kind in "Mm":
        raise DataError(
            f"`{argument}` holds dates or durations (dtype {arr.dtype}); expected plain numbers. "
            f"Convert them, e.g. (dates - dates[0]) / np.timedelta64(1, 'D') for days, or use "
            f"Data.from_frame, which converts a datetime64 time column to days."
        )
    if kind in "bcUSV":
        what = {"b": "booleans", "c": "complex numbers", "U": "strings", "S": "bytes", "V": "records"}
        flat = arr.reshape(-1)
        example = f" such as {flat[0]!r}" if flat.size else ""
        raise DataError(
            f"`{argument}` must hold real numbers; received {what[kind]} (dtype {arr.dtype}){example}. "
            f"Convert the values to numbers first, e.g. with pd.to_numeric."
        )
    # object arrays: every element must be a real number or a missing value
    out = np.empty(arr.shape, dtype=np.float64)
    for index in np.ndindex(arr.shape):
        item = arr[index]
        if isinstance(item, numbers.Real) and not isinstance(item, (bool, np.bool_)):
            out[index] = float(item)
        elif item is None or (np.ndim(item) == 0 and not isinstance(item, (str, bytes)) and _is_na(item)):
            out[index] = np.nan
        else:
            where = ", ".join(str(i) for i in index)
            raise DataError(
                f"`{argument}` must hold real numbers; received {item!r} "
                f"({type(item).__name__}) at {argument}[{where}]. "
                f"Convert the values to numbers first (missing values may be NaN or None)."
            )
    return out


def _is_na(item):
    try:
        return bool(pd.isna(item))
    except (TypeError, ValueError):
        return False


def check_states(states):
    """Validate the observed state names; return them as a tuple of str."""
    if isinstance(states, str):
        states = (states,)
    try:
        names = tuple(states)
    except TypeError:
        raise DataError(
            f"`states` must be a sequence of state names (str); received "
            f"{type(states).__name__}. Pass e.g. states=['prey', 'pred']."
        ) from None
    if not names:
        raise DataError(
            "`states` is empty; expected one name per column of `y`. "
            "Pass the model state observed in each column, e.g. states=['prey', 'pred']."
        )
    bad = [s for s in names if not isinstance(s, str) or not s]
    if bad:
        raise DataError(
            f"`states` must hold non-empty strings; received {bad[0]!r} "
            f"({type(bad[0]).__name__}). Name each observed model state with a str."
        )
    seen, dups = set(), []
    for s in names:
        if s in seen and s not in dups:
            dups.append(s)
        seen.add(s)
    if dups:
        raise DataError(
            f"`states` has duplicated names {dups}; each column of `y` must observe a "
            f"different state. Received states={list(names)}. Rename or drop the repeated columns."
        )
    return names


def check_t(t, replicates, *, steady_state=False):
    """Validate observation times; return a float64 read-only copy of shape (n_times,)
    (``steady_state``: ``+inf`` allowed, a measurement at the steady state)."""
    arr = to_float64(t, "t")
    if arr.ndim != 1:
        raise DataError(
            f"`t` must be 1-D with shape (n_times,); received an array of shape {arr.shape}. "
            f"Pass one time per row of `y`, e.g. t=np.ravel(t) if it is a column."
        )
    if arr.size == 0:
        raise DataError(
            "`t` is empty; expected at least one observation time. "
            "Check that the data frame or arrays are not empty."
        )
    bad = np.flatnonzero(~(np.isfinite(arr) | (steady_state & (arr == np.inf))))
    if bad.size:
        hint = ("" if steady_state or not np.all(arr[bad] == np.inf) else
                " Measurements at the steady state (t = inf) need Data(..., steady_state=True).")
        raise DataError(
            f"`t` must be finite{' or inf' if steady_state else ''}; received {arr[bad[0]]} at index "
            f"{_listed(bad)}. Drop rows with a missing time (e.g. df.dropna(subset=[time]))." + hint
        )
    with np.errstate(invalid="ignore"):  # inf - inf between steady-state rows
        step = np.diff(arr)
    dec = np.flatnonzero(step < 0)
    if dec.size:
        i = int(dec[0]) + 1
        raise DataError(
            f"`t` must be sorted in increasing order; it decreases first at index {i} "
            f"(t[{i - 1}] = {arr[i - 1]:g}, t[{i}] = {arr[i]:g}). "
            f"Sort the frame by time first, e.g. df.sort_values(time)."
        )
    dup = np.flatnonzero((step == 0) | (np.isinf(arr[1:]) & np.isinf(arr[:-1])))
    if dup.size and not replicates:
        times = np.unique(arr[dup])
        raise DataError(
            f"`t` has duplicated times {_listed(f'{v:g}' for v in times)}; expected strictly "
            f"increasing times. If these are replicate measurements, pass replicates=True; "
            f"otherwise remove the repeated rows."
        )
    arr.flags.writeable = False
    return arr


def check_y(y, n_times, states):
    """Validate observations; return a float64 read-only copy of shape (n_times, n_observed)."""
    arr = to_float64(y, "y")
    n_obs = len(states)
    if arr.ndim == 1:
        if n_obs != 1:
            raise DataError(
                f"`y` is 1-D with shape {arr.shape} but {n_obs} states were named {list(states)}; "
                f"expected shape (n_times, n_observed) = ({n_times}, {n_obs}). "
                f"Pass a 2-D array with one column per state."
            )
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise DataError(
            f"`y` has shape {arr.shape}; expected (n_times, n_observed) = ({n_times}, {n_obs}). "
            f"Pass a 2-D array, time first, one column per observed state."
        )
    if arr.shape[0] == n_times and arr.shape[1] != n_obs:
        raise DataError(
            f"`states` has {n_obs} names {list(states)} but `y` has {arr.shape[1]} columns "
            f"(shape {arr.shape}); expected one name per column. Name every column of `y`."
        )
    if arr.shape != (n_times, n_obs):
        hint = (
            " It looks state-first: pass y.T."
            if arr.shape == (n_obs, n_times)
            else " Pass one row per time in `t`."
        )
        raise DataError(
            f"`y` has shape {arr.shape}; expected (n_times, n_observed) = ({n_times}, {n_obs}) "
            f"for {n_times} times and states {list(states)}.{hint}"
        )
    rows, cols = np.nonzero(np.isinf(arr))
    if rows.size:
        where = _listed(f"(t index {r}, state {states[c]!r})" for r, c in zip(rows, cols))
        raise DataError(
            f"`y` must not contain infinite values; received +-inf at {where}. "
            f"Use NaN for missing values, or fix the overflowing entries."
        )
    empty = [s for j, s in enumerate(states) if np.isnan(arr[:, j]).all()]
    if empty:
        raise DataError(
            f"`y` has no observed (non-NaN) value for state(s) {empty}; every column must "
            f"hold at least one observation. Drop the column (Data.select or leave it out of "
            f"`observed`)."
        )
    arr.flags.writeable = False
    return arr


def check_t0(t0, t):
    """Validate the initial time ``t0``; default ``t[0]``."""
    if t0 is None:
        if not np.isfinite(t[0]):
            raise DataError(
                "`t0` is needed: every time in `t` is inf (the steady state), so the start cannot "
                "be taken from t[0]. Pass t0=..., the time at which the initial state applies."
            )
        return float(t[0])
    if isinstance(t0, (bool, np.bool_)) or not isinstance(t0, numbers.Real):
        raise DataError(
            f"`t0` must be a real number (the time at which the initial state applies); "
            f"received {t0!r} ({type(t0).__name__}). Pass e.g. t0=0.0, or leave it out to use t[0]."
        )
    value = float(t0)
    if not np.isfinite(value):
        raise DataError(f"`t0` must be finite; received {value}. Pass a finite time <= t[0].")
    if value > t[0]:
        raise DataError(
            f"`t0` = {value:g} is after the first observation time t[0] = {t[0]:g}; expected "
            f"t0 <= t[0], because the model starts at t0 and is integrated forward. Pass a "
            f"smaller t0, or drop the observations before t0."
        )
    return value
