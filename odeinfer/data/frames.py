"""Building :class:`Data` / :class:`Experiments` from pandas DataFrames."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping

import numpy as np
from odeinfer._lazy import pandas as pd

from ..errors import DataError
from ._validate import close_matches
from .core import Data
from .experiments import Experiments

__all__ = ["data_from_frame"]



def _py(value):
    """Python scalar for messages (np.int64(3) -> 3)."""
    return value.item() if isinstance(value, np.generic) else value


def _normalize_observed(observed):
    if isinstance(observed, str):
        return {observed: observed}
    if isinstance(observed, Mapping):
        mapping = dict(observed)
    elif isinstance(observed, (list, tuple)):
        mapping = {}
        for s in observed:
            if s in mapping:
                raise DataError(
                    f"`observed` names state {s!r} twice; received {list(observed)}. "
                    f"List each observed state once."
                )
            mapping[s] = s
    else:
        raise DataError(
            f"`observed` must be a dict {{model_state: column}} or a list of column names; "
            f"received {type(observed).__name__}. Pass e.g. observed={{'prey': 'hare'}}."
        )
    if not mapping:
        raise DataError(
            "`observed` is empty; expected at least one {model_state: column} pair. "
            "Pass e.g. observed={'prey': 'hare', 'pred': 'lynx'}."
        )
    for state in mapping:
        if not isinstance(state, str) or not state:
            raise DataError(
                f"`observed` keys must be model state names (non-empty str); received {state!r}. "
                f"Pass e.g. observed={{'prey': 'hare'}}."
            )
    return mapping


def _check_columns(df, wanted):
    columns = list(df.columns)
    missing = []
    for arg, col in wanted:
        try:
            present = col in df.columns
        except TypeError:
            present = False
        if not present:
            missing.append((arg, col))
    if missing:
        parts = [f"{arg}={col!r}{close_matches(col, columns)}" for arg, col in missing]
        raise DataError(
            f"column(s) not found in the data frame: {'; '.join(parts)}. "
            f"The frame's columns are {columns}. Pass existing column names."
        )


def _numeric(series, column, role):
    """Float64 values of a numeric column; a DataError names the first bad cell."""
    if pd.api.types.is_bool_dtype(series):
        raise DataError(
            f"column {column!r} ({role}) holds booleans; expected numbers. "
            f"Convert it, e.g. df[{column!r}].astype(float), if that is intended."
        )
    coerced = pd.to_numeric(series, errors="coerce")
    bad = coerced.isna().to_numpy() & ~series.isna().to_numpy()
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        hint = ""
        if role == "time":
            hint = (" If the column holds dates, parse them first with pd.to_datetime "
                    "(or read_csv(..., parse_dates=[...])).")
        raise DataError(
            f"column {column!r} ({role}) has a non-numeric value {_py(series.iloc[pos])!r} at row "
            f"{_py(series.index[pos])!r} ({int(bad.sum())} such cell(s)); expected numbers or empty "
            f"cells.{hint} Fix or remove those cells (pd.to_numeric(..., errors='coerce') turns "
            f"them into missing values)."
        )
    return coerced.to_numpy(dtype=np.float64, na_value=np.nan)


def _is_datetime_like(value):
    return isinstance(value, (_dt.date, np.datetime64, pd.Timestamp))


def _time_values(df, time):
    """Times as float64 and the datetime origin (or None for numeric times)."""
    col = df[time]
    if pd.api.types.is_datetime64_any_dtype(col):
        origin = col.min()
        return ((col - origin) / pd.Timedelta(days=1)).to_numpy(dtype=np.float64, na_value=np.nan), origin
    if pd.api.types.is_timedelta64_dtype(col):
        return (col / pd.Timedelta(days=1)).to_numpy(dtype=np.float64, na_value=np.nan), None
    return _numeric(col, time, "time"), None


def _convert_t0(t0, origin, label):
    if t0 is None or not _is_datetime_like(t0):
        return t0
    if origin is None:
        raise DataError(
            f"`t0`{label} is a date ({t0!r}) but the time column is numeric; expected a number "
            f"in the time column's units. Pass a number, or a datetime64 time column."
        )
    try:
        return float((pd.Timestamp(t0) - origin) / pd.Timedelta(days=1))
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"`t0`{label} = {t0!r} cannot be compared with the time column ({exc}). "
            f"Pass a date with the same time zone as the column."
        ) from None


def _missing_times(t, index, time):
    bad = np.flatnonzero(np.isnan(t))
    if bad.size:
        rows = [_py(index[i]) for i in bad[:5]]
        raise DataError(
            f"time column {time!r} has {bad.size} missing value(s), at row(s) {rows}; every row "
            f"needs a time. Drop those rows, e.g. df.dropna(subset=[{time!r}])."
        )


def data_from_frame(df, time, observed, *, experiment=None, t0=None, replicates=False, name=None):
    """Implementation of :meth:`Data.from_frame` (see there)."""
    if not isinstance(df, pd.DataFrame):
        raise DataError(
            f"`df` must be a pandas DataFrame; received {type(df).__name__}. "
            f"Wrap arrays with pd.DataFrame(...) or build Data(t, y, states) directly."
        )
    mapping = _normalize_observed(observed)
    wanted = [("time", time)] + [(f"observed[{s!r}]", c) for s, c in mapping.items()]
    if experiment is not None:
        wanted.append(("experiment", experiment))
    _check_columns(df, wanted)
    states = list(mapping)
    t_all, origin = _time_values(df, time)
    _missing_times(t_all, df.index, time)
    y_all = np.column_stack([_numeric(df[c], c, f"observed state {s!r}") for s, c in mapping.items()])

    if experiment is None:
        if isinstance(t0, Mapping):
            raise DataError(
                "`t0` is a mapping, which is only meaningful with `experiment`; received "
                f"{t0!r}. Pass one number, or name the experiment column."
            )
        return Data(t_all, y_all, states, t0=_convert_t0(t0, origin, ""), name=name,
                    replicates=replicates)

    if name is not None:
        raise DataError(
            f"`name` = {name!r} cannot be used with `experiment`: each experiment is named after "
            f"its value in column {experiment!r}. Drop `name`, or rename experiments with "
            f"Experiments(list(exps), names=[...])."
        )
    labels = df[experiment]
    if labels.isna().any():
        rows = [_py(r) for r in df.index[labels.isna().to_numpy()][:5]]
        raise DataError(
            f"experiment column {experiment!r} has missing values at row(s) {rows}; every row "
            f"needs an experiment. Fill or drop those rows."
        )
    values = list(pd.unique(labels))
    t0_of = _t0_per_experiment(t0, values)
    datasets = []
    for value in values:
        label = str(value)
        sel = (labels == value).to_numpy()
        y = y_all[sel]
        keep = [j for j in range(len(states)) if not np.isnan(y[:, j]).all()]
        if not keep:
            raise DataError(
                f"experiment {label!r} has no observed value in any of the columns "
                f"{list(mapping.values())}; every experiment needs at least one observation. "
                f"Drop its rows or check the column names."
            )
        try:
            d = Data(t_all[sel], y[:, keep], [states[j] for j in keep],
                     t0=_convert_t0(t0_of(value), origin, f" of experiment {label!r}"),
                     name=label, replicates=replicates)
        except DataError as exc:
            raise DataError(f"experiment {label!r}: {exc}") from None
        datasets.append(d)
    return Experiments(datasets)


def _t0_per_experiment(t0, values):
    if not isinstance(t0, Mapping):
        return lambda value: t0
    known = {str(v): v for v in values}
    unknown = [k for k in t0 if k not in values and str(k) not in known]
    if unknown:
        raise DataError(
            f"`t0` gives initial times for unknown experiment(s) {unknown}; the experiments are "
            f"{[str(v) for v in values]}. Use the experiment values as keys."
        )
    by_name = {str(k): v for k, v in t0.items()}
    return lambda value: t0[value] if value in t0 else by_name.get(str(value))
