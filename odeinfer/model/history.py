"""Histories of delay differential equations: the states on ``[t0 - tau_max, t0]``.

A DDE ``y'(t) = f(t, y(t), y(t - tau_1), ..., p)`` needs ``y`` on the window
``[t0 - max(tau), t0]`` before its first output. :class:`History` describes it:

* parametric families with estimable parameters, in the relative time
  ``u = s - t0 <= 0`` (so the offset ``b`` is always ``y(t0)``), one value per
  state (DDE-Find, Stephany 2024, sec. 6):

  - ``History.constant(b)``:            ``X0(u) = b``
  - ``History.affine(a, b)``:           ``X0(u) = a u + b``
  - ``History.periodic(A, omega, b)``:  ``X0(u) = A sin(omega u) + b``

* data-driven, without parameters: ``History.from_data(t, y)`` (a cubic spline,
  interpolating or smoothing, over an initial window of the data, as the
  orthogonal-conditions paper does for the blowfly DDE) and
  ``History.from_function(fn, start, end)`` (a user function sampled and
  splined); both in absolute time.

The solver evaluates histories in numba (``dde_history`` in
``odeinfer/solve/kernels/dde.py``) with exact derivatives in ``u`` and in the
parameters, which the forward sensitivities w.r.t. delays and history
parameters need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError

__all__ = ["History", "HISTORY_KINDS"]

#: kind name -> (kernel code, parameter groups in storage order)
HISTORY_KINDS = {
    "constant": (0, ("b",)),
    "affine": (1, ("a", "b")),
    "periodic": (2, ("A", "omega", "b")),
    "piecewise": (3, ()),
}


def _per_state(argument, value):
    try:
        arr = np.atleast_1d(np.array(value, dtype=np.float64))
    except (TypeError, ValueError):
        raise InputError(f"{argument}: expected a number or one number per state, got {value!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{argument}: expected a number or a 1-D sequence (one per state), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{argument}: values must be finite, got {arr.tolist()}")
    return arr


@dataclass(frozen=True, eq=False)
class History:
    """The states before ``t0``: a parametric family or a data-driven spline.

    Build it with the class methods (:meth:`constant`, :meth:`affine`,
    :meth:`periodic`, :meth:`from_data`, :meth:`from_function`). Immutable.

    Attributes
    ----------
    kind : {"constant", "affine", "periodic", "piecewise"}
    values : ndarray, shape (n_groups * n_states,)
        The parameters ``phi``, grouped: for ``"periodic"`` all ``A``, then all
        ``omega``, then all ``b`` (names from :meth:`param_names`). Empty for
        ``"piecewise"``.
    breaks : ndarray, shape (n_pieces + 1,)
        ``"piecewise"`` only: absolute times of the spline's breakpoints.
    coef : ndarray, shape (4, n_pieces, n_states)
        ``"piecewise"`` only: cubic coefficients in scipy's ``PPoly`` layout
        (highest power first, local variable ``s - breaks[i]``).
    """

    kind: str
    values: np.ndarray
    breaks: np.ndarray | None = None
    coef: np.ndarray | None = None

    def __post_init__(self):
        if self.kind not in HISTORY_KINDS:
            raise InputError(f"History kind: expected one of {list(HISTORY_KINDS)}, got {self.kind!r}")
        values = np.array(self.values, dtype=np.float64).reshape(-1)
        values.flags.writeable = False
        object.__setattr__(self, "values", values)
        groups = HISTORY_KINDS[self.kind][1]
        if groups and (values.size == 0 or values.size % len(groups)):
            raise InputError(f"History({self.kind!r}): expected {len(groups)} groups {list(groups)} of one value "
                             f"per state, got {values.size} values")
        if self.kind == "piecewise":
            for arr in (self.breaks, self.coef):
                if arr is not None:
                    arr.flags.writeable = False

    # construction ---------------------------------------------------------------
    @classmethod
    def constant(cls, b) -> "History":
        """``X0(u) = b`` (one value per state); parameters ``b[state]``."""
        return cls("constant", _per_state("b", b))

    @classmethod
    def affine(cls, a, b) -> "History":
        """``X0(u) = a u + b`` with ``u = s - t0``; parameters ``a[state]``, ``b[state]``."""
        a, b = _per_state("a", a), _per_state("b", b)
        _same_length(a=a, b=b)
        return cls("affine", np.concatenate([a, b]))

    @classmethod
    def periodic(cls, A, omega, b) -> "History":
        """``X0(u) = A sin(omega u) + b`` with ``u = s - t0`` (DDE-Find eq. 10).

        Parameters ``A[state]``, ``omega[state]``, ``b[state]``.
        """
        A, omega, b = _per_state("A", A), _per_state("omega", omega), _per_state("b", b)
        _same_length(A=A, omega=omega, b=b)
        return cls("periodic", np.concatenate([A, omega, b]))

    @classmethod
    def from_data(cls, t, y, *, smoothing=None) -> "History":
        """A cubic spline through (or smoothing) samples of the states before ``t0``.

        Parameters
        ----------
        t : array-like, shape (n_times,)
            Absolute times, strictly increasing, at least 4; they must cover
            ``[t0 - max(tau), t0]`` of the solve.
        y : array-like, shape (n_times,) or (n_times, n_states)
        smoothing : float, optional
            None (default): interpolating cubic spline (not-a-knot). A number
            ``lam >= 0``: ``scipy.interpolate.make_smoothing_spline`` with that
            penalty, per state.
        """
        from scipy.interpolate import CubicSpline, PPoly, make_smoothing_spline

        t = np.asarray(t, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 1:
            y = y[:, None]
        if t.ndim != 1 or t.size < 4 or y.ndim != 2 or y.shape[0] != t.size:
            raise InputError(f"History.from_data: expected t (n_times >= 4,) and y (n_times[, n_states]), "
                             f"got shapes {t.shape} and {y.shape}")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
            raise InputError("History.from_data: t and y must be finite (drop missing values first)")
        if np.any(np.diff(t) <= 0):
            raise InputError("History.from_data: t must be strictly increasing")
        if smoothing is None:
            pp = CubicSpline(t, y)
            return cls("piecewise", (), np.array(pp.x), np.array(pp.c))
        lam = float(smoothing)
        if not (lam >= 0 and math.isfinite(lam)):
            raise InputError(f"History.from_data: smoothing must be None or a number >= 0, got {smoothing!r}")
        pieces = [PPoly.from_spline(make_smoothing_spline(t, y[:, i], lam=lam)) for i in range(y.shape[1])]
        x = pieces[0].x
        keep = slice(3, x.size - 4)  # drop the zero-length pieces at the repeated end knots
        coef = np.stack([pp.c[:, keep] for pp in pieces], axis=2)
        return cls("piecewise", (), np.array(x[3:x.size - 3]), np.ascontiguousarray(coef))

    @classmethod
    def from_function(cls, fn, start, end, *, n_points=401) -> "History":
        """A user function ``fn(s) -> (n_states,)`` of absolute time, sampled on
        ``[start, end]`` (``n_points`` equispaced) and splined (error about
        ``1e-10`` relative for smooth ``fn`` at the default)."""
        start, end = float(start), float(end)
        if not (end > start):
            raise InputError(f"History.from_function: need start < end, got {start!r}, {end!r}")
        s = np.linspace(start, end, int(n_points))
        try:
            y = np.array([np.atleast_1d(np.asarray(fn(v), dtype=np.float64)) for v in s])
        except Exception as exc:  # the user's function failed
            raise InputError(f"History.from_function: fn(s) failed at a sample time: {exc}") from exc
        return cls.from_data(s, y)

    # queries ------------------------------------------------------------------------
    @property
    def code(self) -> int:
        return HISTORY_KINDS[self.kind][0]

    @property
    def groups(self) -> tuple[str, ...]:
        return HISTORY_KINDS[self.kind][1]

    @property
    def n_params(self) -> int:
        return self.values.size

    @property
    def n_states(self) -> int:
        if self.kind == "piecewise":
            return self.coef.shape[2]
        return self.values.size // len(self.groups)

    def param_names(self, states) -> tuple[str, ...]:
        """Names ``"<group>[<state>]"`` of the parameters, in storage order."""
        return tuple(f"{g}[{s}]" for g in self.groups for s in states)

    def with_values(self, values) -> "History":
        """The same family with other parameter values (shape (n_params,))."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.size != self.values.size:
            raise InputError(f"history_params: expected {self.values.size} values ({self.kind} history), "
                             f"got {values.size}")
        return History(self.kind, values, self.breaks, self.coef)

    def window(self):
        """``(start, end)`` absolute times covered by a data-driven history; None for families."""
        if self.kind != "piecewise":
            return None
        return float(self.breaks[0]), float(self.breaks[-1])

    def kernel_arrays(self, t0: float):
        """``(code, phi, breaks relative to t0, coef)`` as the kernel takes them."""
        n = self.n_states
        if self.kind == "piecewise":
            return self.code, np.zeros(0), np.ascontiguousarray(self.breaks - t0), np.array(self.coef, order="C")  # writable copy: numba types read-only arrays differently
        return self.code, np.array(self.values), np.zeros(2), np.zeros((4, 1, n))

    def __call__(self, s, t0=0.0, nu=0):
        """Values (``nu=0``) or time derivatives (``nu=1``) at absolute times ``s``: shape (len(s), n_states)."""
        s = np.atleast_1d(np.asarray(s, dtype=np.float64))
        n = self.n_states
        if self.kind == "piecewise":
            from scipy.interpolate import PPoly

            pp = PPoly(self.coef, self.breaks)
            return (pp(s) if nu == 0 else pp.derivative()(s)).reshape(s.size, n)
        u = (s - t0)[:, None]
        v = self.values.reshape(len(self.groups), n)
        if self.kind == "constant":
            return np.broadcast_to(v[0], (s.size, n)).copy() if nu == 0 else np.zeros((s.size, n))
        if self.kind == "affine":
            return v[0] * u + v[1] if nu == 0 else np.broadcast_to(v[0], (s.size, n)).copy()
        A, w, b = v
        return A * np.sin(w * u) + b if nu == 0 else A * w * np.cos(w * u)

    def __repr__(self):
        if self.kind == "piecewise":
            return f"History('piecewise', window=[{self.breaks[0]:g}, {self.breaks[-1]:g}], n_states={self.n_states})"
        v = self.values.reshape(len(self.groups), -1)
        parts = ", ".join(f"{g}={v[i].tolist()}" for i, g in enumerate(self.groups))
        return f"History({self.kind!r}, {parts})"


def _same_length(**arrays):
    sizes = {k: v.size for k, v in arrays.items()}
    if len(set(sizes.values())) != 1:
        raise InputError(f"History: every argument needs one value per state; got sizes {sizes}")
