"""Estimated quantities of a fit problem: :class:`Param` (nominal value, bounds, scale,
estimated or fixed) and the maps between natural values and the estimation scale."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError

__all__ = ["Param", "SCALES", "to_scale", "from_scale", "dnatural_dscaled"]

SCALES = ("lin", "log", "log10")
_LN10 = math.log(10.0)


@dataclass(frozen=True)
class Param:
    """One parameter of a fit problem.

    Parameters
    ----------
    value : float, optional
        Nominal value: the start of a fit (when no other start is given) and the value of a
        fixed parameter. NaN: none.
    lower, upper : float, default -inf, inf
        Bounds in natural units (for ``"log"``/``"log10"`` scales: ``lower >= 0``, ``upper > 0``).
    scale : {"lin", "log", "log10"}, default "lin"
        The scale the optimiser and the samplers work on; ``"log10"`` is PEtab's usual choice
        for rate constants.
    estimate : bool, default True
        False: held at ``value``.
    """

    value: float = math.nan
    lower: float = -math.inf
    upper: float = math.inf
    scale: str = "lin"
    estimate: bool = True

    def __post_init__(self):
        set_ = object.__setattr__
        for arg in ("value", "lower", "upper"):
            v = getattr(self, arg)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise InputError(f"Param.{arg}: expected a number, got {type(v).__name__} {v!r}")
            set_(self, arg, float(v))
        if math.isnan(self.lower) or math.isnan(self.upper):
            raise InputError("Param: bounds must be numbers (use -inf/inf for none), got NaN")
        if not self.lower < self.upper:
            raise InputError(f"Param: lower={self.lower!r} must be below upper={self.upper!r}")
        if self.scale not in SCALES:
            raise InputError(f"Param.scale: expected one of {list(SCALES)}, got {self.scale!r}")
        if not isinstance(self.estimate, (bool, np.bool_)):
            raise InputError(f"Param.estimate: expected True or False, got {self.estimate!r}")
        if self.scale != "lin":
            if self.lower < 0 or self.upper <= 0:
                raise InputError(
                    f"Param: scale={self.scale!r} needs lower >= 0 and upper > 0 (natural units), got "
                    f"[{self.lower!r}, {self.upper!r}]; use positive bounds or scale='lin'")
            if not math.isnan(self.value) and self.value <= 0:
                raise InputError(f"Param: scale={self.scale!r} needs a positive value, got {self.value!r}; give a "
                                 "positive value or scale='lin'")
        if not math.isnan(self.value) and not self.lower <= self.value <= self.upper:
            raise InputError(f"Param: value={self.value!r} lies outside [{self.lower!r}, {self.upper!r}]; move it "
                             "inside the bounds or widen them")
        if not self.estimate and not math.isfinite(self.value):
            raise InputError("Param: a fixed parameter (estimate=False) needs a finite value")


def to_scale(x, scales):
    """Natural values ``x`` (array) on their ``scales`` (array of str)."""
    x = np.asarray(x, float)
    out = x.copy()
    for i, s in enumerate(scales):
        if s == "log":
            out[i] = math.log(x[i]) if x[i] > 0 else -math.inf
        elif s == "log10":
            out[i] = math.log10(x[i]) if x[i] > 0 else -math.inf
    return out


def from_scale(u, scales):
    """Natural values of ``u`` (1-D) given on ``scales``.

    Element by element on Python floats (``math.exp``, ``10.0 ** u``: the scalar functions, whose
    results numpy's vectorised ``exp`` and ``power`` need not match to the last bit); ``10 ** u``
    beyond the float range is ``inf``, as numpy's."""
    out = np.asarray(u, float).tolist()
    for i, s in enumerate(scales):
        if s == "log":
            out[i] = math.exp(out[i])
        elif s == "log10":
            try:
                out[i] = 10.0 ** out[i]
            except OverflowError:
                out[i] = math.inf
    return np.array(out)


def dnatural_dscaled(x, scales):
    """``d x / d u`` (diagonal) at natural values ``x`` (1-D)."""
    x = np.asarray(x, float).tolist()
    return np.array([v if s == "log" else v * _LN10 if s == "log10" else 1.0 for v, s in zip(x, scales)])
