"""Observed time series of one experiment: :class:`Data`."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from odeinfer._lazy import pandas as pd

from ..errors import DataError
from . import _display
from ._validate import check_states, check_t, check_t0, check_y, close_matches

__all__ = ["Data"]


def _rebuild(t, y, states, t0, name, replicates, steady_state=False):
    return Data(t, y, states, t0=t0, name=name, replicates=replicates, steady_state=steady_state)


class Data:
    """Noisy observations of some states of a model at known times (one experiment).

    Parameters
    ----------
    t : array_like, shape (n_times,)
        Observation times, finite and non-decreasing (strictly increasing unless
        ``replicates=True``); with ``steady_state=True`` the last ones may be ``inf``.
    y : array_like, shape (n_times, n_observed)
        Observations, time first, one column per name in ``states``. NaN marks a
        missing value. A 1-D ``y`` of shape (n_times,) is accepted when exactly one
        state is named and becomes shape (n_times, 1). ``+-inf`` is refused.
    states : sequence of str, length n_observed
        Name of the model state observed in each column of ``y``; a single str
        names one state.
    t0 : float, optional
        Time at which the model's initial state applies; must be ``<= t[0]``.
        Default ``t[0]``.
    name : str, optional
        Label of the experiment (used by :class:`Experiments`). Default None.
    replicates : bool, default False
        Allow repeated times (replicate measurements at the same time).
    steady_state : bool, default False
        Allow ``t = inf``: measurements at the steady state of the experiment's condition
        (PEtab's steady-state measurements). Only the likelihood
        (:class:`~odeinfer.FitProblem`, :class:`~odeinfer.Objective`) evaluates them; the
        other estimators refuse such data. ``t0`` must then be given if every time is ``inf``.

    Raises
    ------
    DataError
        If any argument is invalid; the message says which, what was received
        and how to fix it.

    Notes
    -----
    The object is immutable: ``t``, ``y`` and ``mask`` are float64 / bool read-only
    copies, so the caller's arrays are never modified and later changes to them do
    not affect the Data. Two Data are equal when their times, observations (NaN
    in the same places), state names, ``t0`` and ``name`` are equal.

    Examples
    --------
    >>> import numpy as np
    >>> d = Data([0.0, 1.0, 2.0], [[1.0, 2.0], [np.nan, 3.0], [4.0, 5.0]], ["prey", "pred"])
    >>> d.n_times, d.n_observed, d.nobs
    (3, 2, 5)
    >>> d.mask[1].tolist()
    [False, True]
    """

    __slots__ = ("_t", "_y", "_mask", "_states", "_t0", "_name", "_replicates", "_steady_state")

    def __init__(self, t, y, states, *, t0=None, name=None, replicates=False, steady_state=False):
        if not isinstance(replicates, (bool, np.bool_)):
            raise DataError(
                f"`replicates` must be True or False; received {replicates!r}. "
                f"Pass replicates=True to allow repeated times."
            )
        if not isinstance(steady_state, (bool, np.bool_)):
            raise DataError(
                f"`steady_state` must be True or False; received {steady_state!r}. "
                f"Pass steady_state=True to allow measurements at t = inf (the steady state)."
            )
        if name is not None and not isinstance(name, str):
            raise DataError(
                f"`name` must be a str or None; received {name!r} ({type(name).__name__}). "
                f"Pass e.g. name=str(value)."
            )
        states = check_states(states)
        t_arr = check_t(t, bool(replicates), steady_state=bool(steady_state))
        y_arr = check_y(y, t_arr.size, states)
        mask = ~np.isnan(y_arr)
        mask.flags.writeable = False
        set_ = object.__setattr__
        set_(self, "_t", t_arr)
        set_(self, "_y", y_arr)
        set_(self, "_mask", mask)
        set_(self, "_states", states)
        set_(self, "_t0", check_t0(t0, t_arr))
        set_(self, "_name", name)
        set_(self, "_replicates", bool(replicates))
        set_(self, "_steady_state", bool(steady_state))

    # -- immutability -----------------------------------------------------------
    def __setattr__(self, key, value):
        raise AttributeError(
            f"Data is immutable; cannot set {key!r}. Build a new Data, or use rename()/select()."
        )

    def __delattr__(self, key):
        raise AttributeError(f"Data is immutable; cannot delete {key!r}.")

    def __reduce__(self):
        return (_rebuild, (self._t, self._y, self._states, self._t0, self._name, self._replicates,
                           self._steady_state))

    # -- properties -------------------------------------------------------------
    @property
    def t(self):
        """numpy.ndarray, shape (n_times,): observation times (read-only float64)."""
        return self._t.view()

    @property
    def y(self):
        """numpy.ndarray, shape (n_times, n_observed): observations, NaN = missing (read-only)."""
        return self._y.view()

    @property
    def mask(self):
        """numpy.ndarray of bool, shape (n_times, n_observed): True where observed."""
        return self._mask.view()

    @property
    def states(self):
        """tuple of str, length n_observed: model state observed in each column."""
        return self._states

    @property
    def t0(self):
        """float: time at which the model's initial state applies (``<= t[0]``)."""
        return self._t0

    @property
    def name(self):
        """str or None: label of the experiment."""
        return self._name

    @property
    def replicates(self):
        """bool: whether repeated times were allowed."""
        return self._replicates

    @property
    def steady_state(self):
        """bool: whether ``t`` may hold ``inf`` (measurements at the steady state)."""
        return self._steady_state

    @property
    def n_times(self):
        """int: number of observation times (rows)."""
        return int(self._t.size)

    @property
    def n_observed(self):
        """int: number of observed states (columns)."""
        return len(self._states)

    @property
    def nobs(self):
        """int: number of observed (non-missing) values."""
        return int(self._mask.sum())

    # -- constructors -----------------------------------------------------------
    @classmethod
    def from_frame(cls, df, time, observed, *, experiment=None, t0=None, replicates=False, name=None):
        """Build Data (or Experiments) from a tidy pandas DataFrame.

        Parameters
        ----------
        df : pandas.DataFrame
            One row per observation time (per experiment). Missing values
            (NaN, None, pd.NA, empty CSV fields) are kept as missing.
        time : hashable
            Column holding the times. Numbers are used as they are. A datetime64
            column (time zone aware or not) is converted to **float days since the
            earliest time in the column** (across all experiments, so that they
            share one clock); a timedelta64 column is converted to float days.
            Strings are refused: parse them first with ``pd.to_datetime``.
        observed : mapping or sequence of str or str
            ``{model_state: column}``; a list of names (or one name) means each
            state is observed in the column of the same name.
        experiment : hashable, optional
            Column identifying the experiment of each row. When given, an
            :class:`Experiments` is returned with one Data per distinct value, in
            order of first appearance, each named ``str(value)``. Within an
            experiment, states with no observed value are left out of that Data
            (partial observation); an experiment with no observation at all is an
            error.
        t0 : float or datetime-like or mapping, optional
            Time at which the initial state applies (default: each experiment's
            first time). With a datetime time column, a datetime-like ``t0`` is
            converted with the same origin and a number is read as days. With
            ``experiment``, a mapping ``{experiment value or name: t0}`` sets it
            per experiment.
        replicates : bool, default False
            Allow repeated times (replicate measurements).
        name : str, optional
            Name of the Data; not allowed together with ``experiment``.

        Returns
        -------
        Data or Experiments
            Experiments when ``experiment`` is given, otherwise Data.

        Raises
        ------
        DataError
            Missing columns (the message lists the frame's columns), non-numeric
            cells (the message names column and row), or any invalid value.
        """
        from .frames import data_from_frame

        return data_from_frame(
            df, time, observed, experiment=experiment, t0=t0, replicates=replicates, name=name
        )

    @classmethod
    def from_csv(cls, path, time, observed, *, experiment=None, t0=None, replicates=False,
                 name=None, **read_csv_kwargs):
        """Read a CSV file with :func:`pandas.read_csv` and call :meth:`from_frame`.

        Empty fields are missing values. Extra keyword arguments go to
        ``pandas.read_csv`` (e.g. ``sep=";"``, ``parse_dates=["date"]`` to get a
        datetime time column, which is then converted to days).

        Parameters
        ----------
        path : str or path-like or file-like
            The CSV file.
        time, observed, experiment, t0, replicates, name
            As in :meth:`from_frame`.
        **read_csv_kwargs
            Passed to :func:`pandas.read_csv`.

        Returns
        -------
        Data or Experiments
        """
        df = pd.read_csv(path, **read_csv_kwargs)
        return cls.from_frame(
            df, time, observed, experiment=experiment, t0=t0, replicates=replicates, name=name
        )

    # -- derived objects --------------------------------------------------------
    def to_frame(self):
        """Return a new pandas DataFrame with a ``"t"`` column and one column per state.

        Returns
        -------
        pandas.DataFrame, shape (n_times, 1 + n_observed)
            Missing values are NaN.
        """
        if "t" in self._states:
            raise DataError(
                "to_frame() puts the times in a column named 't', but a state is also named 't'; "
                "received states " + repr(list(self._states)) + ". Rename the state first, "
                "e.g. data.rename({'t': 't_state'})."
            )
        cols = {"t": np.array(self._t)}
        for j, s in enumerate(self._states):
            cols[s] = np.array(self._y[:, j])
        return pd.DataFrame(cols)

    def rename(self, mapping):
        """Return a new Data with state names replaced by ``mapping[old]``.

        Parameters
        ----------
        mapping : mapping of str to str
            Old state name -> new state name; names not in the mapping are kept.
        """
        if not isinstance(mapping, Mapping):
            raise DataError(
                f"`mapping` must be a dict {{old_name: new_name}}; received "
                f"{type(mapping).__name__}. Pass e.g. data.rename({{'hare': 'prey'}})."
            )
        unknown = [k for k in mapping if k not in self._states]
        if unknown:
            raise DataError(
                f"`mapping` renames unknown state(s) {unknown}; this Data observes "
                f"{list(self._states)}.{close_matches(unknown[0], self._states)}"
            )
        states = [mapping.get(s, s) for s in self._states]
        return Data(self._t, self._y, states, t0=self._t0, name=self._name, replicates=self._replicates,
                    steady_state=self._steady_state)

    def select(self, states):
        """Return a new Data with only the given observed states, in the given order.

        Parameters
        ----------
        states : str or sequence of str
            Observed states to keep.
        """
        wanted = check_states(states)
        unknown = [s for s in wanted if s not in self._states]
        if unknown:
            raise DataError(
                f"`states` asks for {unknown}, which this Data does not observe; it observes "
                f"{list(self._states)}.{close_matches(unknown[0], self._states)}"
            )
        cols = [self._states.index(s) for s in wanted]
        return Data(self._t, self._y[:, cols], wanted, t0=self._t0, name=self._name,
                    replicates=self._replicates, steady_state=self._steady_state)

    def check_states(self, model_states):
        """Raise DataError if an observed state is not one of ``model_states``.

        Parameters
        ----------
        model_states : sequence of str
            The model's state names.
        """
        if isinstance(model_states, str):
            model_states = (model_states,)
        try:
            model_states = tuple(model_states)
        except TypeError:
            raise DataError(
                f"`model_states` must be a sequence of the model's state names (str); received "
                f"{type(model_states).__name__}. Pass e.g. data.check_states(['prey', 'pred'])."
            ) from None
        unknown = [s for s in self._states if s not in model_states]
        if unknown:
            free = [m for m in model_states if m not in self._states]
            hints = "".join(close_matches(s, free) for s in unknown)
            raise DataError(
                f"the data observe state(s) {unknown} that the model does not have; the model's "
                f"states are {list(model_states)}.{hints} Rename the data's states with "
                f"data.rename({{...}}) or fix `observed` in Data.from_frame."
            )

    # -- comparison and display ---------------------------------------------------
    def __eq__(self, other):
        if not isinstance(other, Data):
            return NotImplemented
        return (
            self._states == other._states
            and self._name == other._name
            and self._t0 == other._t0
            and np.array_equal(self._t, other._t)
            and np.array_equal(self._y, other._y, equal_nan=True)
        )

    def __hash__(self):
        return hash((self._states, self._name, self._t0, self.n_times))

    def __repr__(self):
        return _display.data_text(self)

    def _repr_html_(self):
        return _display.data_html(self)
