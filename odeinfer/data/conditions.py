"""What differs between experiments: :class:`Condition` (parameter overrides, initial states,
start time, known inputs, doses, pre-equilibration), :class:`Dose` and :class:`Input`.

These are plain validated values; names are checked against a model when a
:class:`~odeinfer.likelihood.FitProblem` is built from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from odeinfer.errors import DataError

__all__ = ["Condition", "Dose", "Input"]

_KINDS = ("step", "linear")


def _number_or_text(arg, v):
    if isinstance(v, str):
        if not v.strip():
            raise DataError(f"{arg}: got an empty string; give a number, a parameter name or an expression")
        return v.strip()
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise DataError(f"{arg}: expected a number, a parameter name or an expression string, got "
                        f"{type(v).__name__}")
    v = float(v)
    if not math.isfinite(v):
        raise DataError(f"{arg}: expected a finite number, got {v!r}")
    return v


@dataclass(frozen=True)
class Input:
    """A known input ``u(t)`` given as a table, used as the value of a model parameter.

    Parameters
    ----------
    t : sequence of float
        Strictly increasing times.
    values : sequence of float
        ``u`` at those times.
    kind : {"step", "linear"}, default "step"
        ``"step"``: ``u(t) = values[i]`` for ``t[i] <= t < t[i+1]`` (``values[0]`` before
        ``t[0]``); ``"linear"``: linear interpolation. Both hold the last value after ``t[-1]``.
    """

    t: tuple
    values: tuple
    kind: str = "step"

    def __post_init__(self):
        try:
            t = np.asarray(self.t, dtype=float).ravel()
            v = np.asarray(self.values, dtype=float).ravel()
        except (TypeError, ValueError):
            raise DataError("Input: t and values must be sequences of numbers; e.g. oi.Input([0, 10], [1.0, 0.0])") \
                from None
        if t.size == 0 or t.size != v.size:
            raise DataError(f"Input: t has {t.size} times and values {v.size} values; give one value per time "
                            "(at least one)")
        if not (np.isfinite(t).all() and np.isfinite(v).all()):
            raise DataError("Input: t and values must be finite numbers (no NaN or inf)")
        bad = np.flatnonzero(np.diff(t) <= 0)
        if bad.size:
            i = int(bad[0])
            what = "duplicated" if t[i + 1] == t[i] else "unsorted"
            raise DataError(f"Input: the times are {what} at positions {i} and {i + 1} ({t[i]!r}, {t[i + 1]!r}); "
                            "give strictly increasing times (sort the table and drop repeated rows)")
        if self.kind not in _KINDS:
            raise DataError(f"Input: kind must be one of {list(_KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "t", tuple(t.tolist()))
        object.__setattr__(self, "values", tuple(v.tolist()))

    def __call__(self, t):
        t = np.asarray(t, float)
        if self.kind == "linear":
            return np.interp(t, self.t, self.values)
        idx = np.searchsorted(np.asarray(self.t), t, side="right") - 1
        return np.asarray(self.values)[np.clip(idx, 0, len(self.values) - 1)]


_DOSE_MODES = ("add", "set")


@dataclass(frozen=True)
class Dose:
    """A change of a state at a fixed time: at ``time`` the state ``state`` jumps by ``amount`` (a
    number or an expression of parameters, e.g. ``"dose_mg / V"``), a bolus; with ``mode="set"`` it
    is set to ``amount`` instead (a reset, e.g. a stimulus washed out: ``Dose(240, "Ins", 0.0,
    mode="set")``). A measurement at exactly ``time`` sees the state before the dose. Doses at the
    same time apply in the order given."""

    time: float
    state: str
    amount: float | str
    mode: str = "add"

    def __post_init__(self):
        t = _number_or_text("Dose.time", self.time)
        if isinstance(t, str):
            raise DataError(f"Dose.time: expected a number, got {self.time!r}")
        object.__setattr__(self, "time", t)
        if not isinstance(self.state, str) or not self.state:
            raise DataError(f"Dose.state: expected a state name, got {self.state!r}")
        object.__setattr__(self, "amount", _number_or_text("Dose.amount", self.amount))
        if not isinstance(self.mode, str) or self.mode not in _DOSE_MODES:
            raise DataError(f"Dose.mode: expected one of {list(_DOSE_MODES)}, got {self.mode!r}; \"add\" adds the "
                            "amount to the state (a bolus), \"set\" sets the state to it (a reset)")

    @property
    def resets(self) -> bool:
        """Whether the dose sets the state (``mode="set"``) rather than adding to it."""
        return self.mode == "set"


@dataclass(frozen=True)
class Condition:
    """The settings of one experiment.

    Parameters
    ----------
    params : dict, optional
        Overrides of model or observable parameters: ``{name: number | "expression" | Input}``;
        an expression may name other (estimated) parameters, e.g. ``{"k_on": "k_on_wt * 2"}``
        or ``{"offset": "offset_batch2"}``. Names not overridden are the problem's parameters
        of the same name.
    x0 : dict, optional
        Initial states ``{state: number | "expression"}`` (override the problem's defaults).
    t0 : float, optional
        Start time of the experiment (default 0).
    doses : sequence of Dose, optional
    preequilibrate : Condition, optional
        Before ``t0`` the model is run to steady state under this condition (its ``params`` and
        ``x0``); the steady state is the initial state, except for the states given in ``x0``.
    """

    params: Mapping = field(default_factory=dict)
    x0: Mapping = field(default_factory=dict)
    t0: float | None = None
    doses: tuple = ()
    preequilibrate: "Condition | None" = None

    def __post_init__(self):
        set_ = object.__setattr__
        for arg in ("params", "x0"):
            v = getattr(self, arg)
            if not isinstance(v, Mapping):
                raise DataError(f"Condition.{arg}: expected a dict {{name: value}}, got {type(v).__name__}")
            out = {}
            for k, val in v.items():
                if not isinstance(k, str):
                    raise DataError(f"Condition.{arg}: keys must be names (str), got {k!r}")
                out[k] = val if (arg == "params" and isinstance(val, Input)) else \
                    _number_or_text(f"Condition.{arg}[{k!r}]", val)
            set_(self, arg, out)
        if self.t0 is not None:
            t0 = _number_or_text("Condition.t0", self.t0)
            if isinstance(t0, str):
                raise DataError(f"Condition.t0: expected a number, got {self.t0!r}")
            set_(self, "t0", t0)
        doses = (self.doses,) if isinstance(self.doses, Dose) else tuple(self.doses)
        for i, d in enumerate(doses):
            if not isinstance(d, Dose):
                raise DataError(f"Condition.doses[{i}]: expected oi.Dose(time, state, amount), got {type(d).__name__}")
        set_(self, "doses", tuple(sorted(doses, key=lambda d: d.time)))
        pre = self.preequilibrate
        if pre is not None:
            if not isinstance(pre, Condition):
                raise DataError(f"Condition.preequilibrate: expected an oi.Condition, got {type(pre).__name__}")
            if pre.preequilibrate is not None or pre.doses or any(isinstance(v, Input) for v in pre.params.values()):
                raise DataError("Condition.preequilibrate: the pre-equilibration condition must be constant: no "
                                "doses, inputs or nested pre-equilibration")

    @property
    def inputs(self) -> dict:
        """The parameters driven by a known input, ``{name: Input}``."""
        return {k: v for k, v in self.params.items() if isinstance(v, Input)}
