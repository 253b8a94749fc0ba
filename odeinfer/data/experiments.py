"""Several experiments sharing parameters: :class:`Experiments`, :func:`as_experiments`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from odeinfer._lazy import pandas as pd

from ..errors import DataError
from . import _display
from ._validate import close_matches
from .core import Data

__all__ = ["Experiments", "as_experiments", "refuse_steady_state"]


def _with_name(data, name):
    if data.name == name:
        return data
    return Data(data.t, data.y, data.states, t0=data.t0, name=name, replicates=data.replicates,
                steady_state=data.steady_state)


class Experiments(Sequence):
    """An immutable sequence of :class:`Data` that share the model parameters.

    Each experiment has its own times, its own initial state (applying at its
    own ``t0``) and may observe a different subset of the model's states.

    Parameters
    ----------
    datasets : sequence of Data or mapping of str to Data
        The experiments, at least one. A mapping gives ``{name: data}``.
    names : sequence of str, optional
        Experiment names, one per dataset, unique. Default: each Data's ``name``,
        or ``"experiment_<i>"`` when it has none. The stored Data carry these
        names.
    conditions : dict of str to Condition, optional
        ``{experiment name: oi.Condition(...)}``: parameter overrides, initial states, start
        time, inputs, doses and pre-equilibration of each experiment (experiments not named
        get an empty condition). Used by the likelihood estimators (models with observables).

    Raises
    ------
    DataError
        Empty input, an item that is not Data, names of the wrong length, or
        duplicated names.

    Notes
    -----
    ``states`` is the ordered union of the observed states (first appearance).
    Index by position (``exps[0]``), by name (``exps["control"]``) or by slice
    (returns Experiments); ``"control" in exps`` tests for a name.

    Examples
    --------
    >>> a = Data([0.0, 1.0], [1.0, 2.0], "x", name="a")
    >>> b = Data([0.0, 2.0], [3.0, 4.0], "y", name="b")
    >>> exps = Experiments([a, b])
    >>> exps.states, exps.nobs, exps["b"].t.tolist()
    (('x', 'y'), 4, [0.0, 2.0])
    """

    __slots__ = ("_data", "_names", "_states", "_conditions")

    def __init__(self, datasets, names=None, conditions=None):
        if isinstance(datasets, Data):
            raise DataError(
                "`datasets` must be a sequence of Data; received a single Data. "
                "Pass [data], or use as_experiments(data)."
            )
        if isinstance(datasets, Mapping):
            if names is not None:
                raise DataError(
                    "`names` cannot be given when `datasets` is a mapping {name: Data}; "
                    "the keys are the names. Drop `names`."
                )
            names = list(datasets.keys())
            datasets = list(datasets.values())
        try:
            items = list(datasets)
        except TypeError:
            raise DataError(
                f"`datasets` must be a sequence of Data; received {type(datasets).__name__}. "
                f"Pass e.g. Experiments([data_a, data_b])."
            ) from None
        if not items:
            raise DataError(
                "`datasets` is empty; expected at least one Data. Pass e.g. Experiments([data])."
            )
        for i, d in enumerate(items):
            if not isinstance(d, Data):
                raise DataError(
                    f"`datasets[{i}]` must be a Data; received {type(d).__name__}. "
                    f"Build it with Data(t, y, states) or Data.from_frame(...)."
                )
        if names is None:
            names = [d.name if d.name is not None else f"experiment_{i}" for i, d in enumerate(items)]
        else:
            names = list(names) if not isinstance(names, str) else [names]
            if len(names) != len(items):
                raise DataError(
                    f"`names` has {len(names)} entries but there are {len(items)} datasets; "
                    f"expected one name per dataset."
                )
            bad = [n for n in names if not isinstance(n, str) or not n]
            if bad:
                raise DataError(
                    f"`names` must hold non-empty strings; received {bad[0]!r}. Pass e.g. names=['a', 'b']."
                )
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise DataError(
                f"experiment names must be unique; received duplicates {dups} in {names}. "
                f"Pass distinct names with Experiments(datasets, names=[...])."
            )
        data = tuple(_with_name(d, n) for d, n in zip(items, names))
        states = []
        for d in data:
            states.extend(s for s in d.states if s not in states)
        set_ = object.__setattr__
        set_(self, "_data", data)
        set_(self, "_names", tuple(names))
        set_(self, "_states", tuple(states))
        set_(self, "_conditions", _conditions(conditions, names))

    def __setattr__(self, key, value):
        raise AttributeError(f"Experiments is immutable; cannot set {key!r}. Build a new one.")

    def __delattr__(self, key):
        raise AttributeError(f"Experiments is immutable; cannot delete {key!r}.")

    def __reduce__(self):
        return (Experiments, (list(self._data), list(self._names), dict(self._conditions) or None))

    # -- sequence protocol ------------------------------------------------------
    def __len__(self):
        return len(self._data)

    def __iter__(self):
        return iter(self._data)

    def __contains__(self, item):
        """``name in exps`` for an experiment name, or ``data in exps`` for an equal Data."""
        if isinstance(item, str):
            return item in self._names
        return any(item == d for d in self._data)

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self._names:
                raise DataError(
                    f"no experiment named {key!r}; the experiments are {list(self._names)}."
                    f"{close_matches(key, self._names)}"
                )
            return self._data[self._names.index(key)]
        if isinstance(key, slice):
            names = self._names[key]
            conds = {n: c for n, c in self._conditions.items() if n in names}
            return Experiments(self._data[key], names, conds or None)
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            return self._data[key]  # IndexError when out of range, as for any sequence
        raise DataError(
            f"Experiments are indexed by position (int), name (str) or slice; received "
            f"{type(key).__name__}."
        )

    # -- properties -------------------------------------------------------------
    @property
    def names(self):
        """tuple of str: experiment names, in order."""
        return self._names

    @property
    def conditions(self):
        """dict of str to Condition: the experiments' conditions (only those given)."""
        return dict(self._conditions)

    def condition(self, name):
        """The :class:`~odeinfer.data.conditions.Condition` of experiment ``name`` (empty if none given)."""
        from .conditions import Condition

        if name not in self._names:
            self[name]  # raises the usual error
        return self._conditions.get(name) or Condition()

    @property
    def states(self):
        """tuple of str: ordered union of the observed states of all experiments."""
        return self._states

    @property
    def n_experiments(self):
        """int: number of experiments."""
        return len(self._data)

    @property
    def nobs(self):
        """int: total number of observed (non-missing) values."""
        return sum(d.nobs for d in self._data)

    def to_frame(self):
        """Return a tidy DataFrame: columns ``experiment``, ``t``, then ``states``.

        Returns
        -------
        pandas.DataFrame, shape (total n_times, 2 + len(states))
            States an experiment does not observe are NaN in its rows.
        """
        clash = [c for c in ("experiment", "t") if c in self._states]
        if clash:
            raise DataError(
                f"to_frame() uses the columns 'experiment' and 't', but state(s) {clash} have the "
                f"same name. Rename them first, e.g. Experiments([d.rename({{...}}) for d in exps])."
            )
        frames = []
        for name, d in zip(self._names, self._data):
            cols = {"experiment": [name] * d.n_times, "t": np.array(d.t)}
            for s in self._states:
                cols[s] = np.array(d.y[:, d.states.index(s)]) if s in d.states else np.full(d.n_times, np.nan)
            frames.append(pd.DataFrame(cols))
        return pd.concat(frames, ignore_index=True)

    def __eq__(self, other):
        if not isinstance(other, Experiments):
            return NotImplemented
        return self._names == other._names and self._data == other._data and self._conditions == other._conditions

    def __hash__(self):
        return hash((self._names, self._data))

    def __repr__(self):
        return _display.experiments_text(self)

    def _repr_html_(self):
        return _display.experiments_html(self)


def _conditions(conditions, names):
    from .conditions import Condition

    if conditions is None:
        return {}
    if not isinstance(conditions, Mapping):
        raise DataError(f"`conditions` must be a dict {{experiment name: oi.Condition(...)}}; received "
                        f"{type(conditions).__name__}.")
    unknown = [k for k in conditions if k not in names]
    if unknown:
        raise DataError(f"`conditions` names experiments {unknown} that do not exist; the experiments are "
                        f"{list(names)}.{close_matches(str(unknown[0]), names)}")
    for k, c in conditions.items():
        if not isinstance(c, Condition):
            raise DataError(f"`conditions[{k!r}]` must be an oi.Condition; received {type(c).__name__}.")
    return {n: conditions[n] for n in names if n in conditions}


def as_experiments(data):
    """Return ``data`` as :class:`Experiments`.

    Parameters
    ----------
    data : Data or Experiments or sequence of Data
        A single Data becomes a one-experiment Experiments (named after
        ``data.name``, or ``"experiment_0"``); Experiments are returned unchanged.

    Returns
    -------
    Experiments

    Raises
    ------
    DataError
        If ``data`` is none of these.
    """
    if isinstance(data, Experiments):
        return data
    if isinstance(data, Data):
        return Experiments([data])
    if isinstance(data, (list, tuple)) and data and all(isinstance(d, Data) for d in data):
        return Experiments(data)
    raise DataError(
        f"`data` must be a Data, an Experiments or a list of Data; received "
        f"{type(data).__name__}. Build it with Data(t, y, states) or Data.from_frame(df, ...)."
    )


def refuse_steady_state(data, who):
    """Raise :class:`DataError` when ``data`` (Data or Experiments) holds measurements at the steady
    state (``t = inf``, :class:`Data` ``steady_state=True``), which only the likelihood evaluates;
    ``who`` names the estimator in the message."""
    exps = data if isinstance(data, Experiments) else as_experiments(data)
    for name, d in zip(exps.names, exps):
        if d.steady_state and np.isinf(d.t).any():
            raise DataError(
                f"data: experiment {name!r} has measurements at the steady state (t = inf), which {who} cannot "
                "use (it fits trajectories at finite times); fit them with the likelihood (oi.FitProblem and "
                "oi.Objective, or oi.petab.load) or drop those rows")
