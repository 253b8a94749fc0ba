"""Derivative estimates from sampled data for the equation-error estimators.

Syafiie, Subiantoro, Andasari & Tadeo, "Systems of ODEs parameters estimation by using
stochastic Newton-Raphson and gradient descent methods" (arXiv preprint), eqs. (6) and
(12); corrected reading in ``specs/seed-000-stochastic-newton-gradient.md`` §1.2, §5.3.

Every scheme turns samples ``(t_i, y_i)``, ``i = 0..N-1``, into *rows*
``(t_r, x_r, d_r)``: the time and state at which ``f`` is evaluated and the estimate of
``x'(t_r)``.

``"forward"``
    Paper eq. (6): ``d_i = (y_{i+1} - y_i) / (t_{i+1} - t_i)``, ``x_i = y_i``, rows
    ``i = 0..N-2`` (the paper's ``d = 1..N-1``). Biased under noise by
    ``O(sigma^2 / dt)`` (spec §5.3) and by ``O(dt)`` truncation.
``"second_order"``
    Paper eq. (12), the derivative at ``t_i`` of the quadratic through three samples,
    valid on any grid with distinct times (uniform included; spec §1.2):
    ``-(2h1+h2)/(h1(h1+h2)) y_i + (h1+h2)/(h1 h2) y_{i+1} - h1/(h2(h1+h2)) y_{i+2}``.
    Rows ``i = 0..N-3``; the same ``sigma^2/dt`` bias as the forward difference.
``"local_polynomial"``
    Least-squares polynomial of degree ``degree`` through the ``window`` samples centred
    on ``t_i`` (Savitzky-Golay on uniform grids, valid on irregular grids); value and
    slope at ``t_i``. Rows ``i = h..N-1-h``, ``h = window // 2``.
``"spline"``
    Penalised cubic smoothing spline per state (``scipy.interpolate.make_smoothing_spline``,
    smoothing by GCV unless ``spline_lam`` is given; computed by :class:`odeinfer.smooth.gcv.SmoothingSpline`
    in O(n), with a GCV search that does not depend on the time unit); value and derivative at every ``t_i``.
    Needs the whole series (not available for streaming).

For the smoothing schemes the state at which ``f`` is evaluated is the smoothed value
(``evaluate_at="smoothed"``, default) or the measured sample (``"measured"``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from odeinfer.errors import DataError, InputError

__all__ = ["SCHEMES", "DerivativeScheme", "forward_difference", "second_order_difference"]

SCHEMES = ("forward", "second_order", "local_polynomial", "spline")
_EVAL = ("measured", "smoothed")


@dataclass(frozen=True)
class DerivativeScheme:
    """A derivative scheme and its settings (validated at construction).

    Parameters
    ----------
    name : {"forward", "second_order", "local_polynomial", "spline"}, default "forward"
    window : int, default 9
        ``local_polynomial``: odd number of samples in each local fit, ``>= degree + 2``.
    degree : int, default 2
        ``local_polynomial``: polynomial degree, 1..4.
    spline_lam : float or None, default None
        ``spline``: roughness penalty of ``make_smoothing_spline``; None chooses it by GCV.
    evaluate_at : {"measured", "smoothed"} or None, default None
        Where ``f`` and ``df/da`` are evaluated: the measured sample or the smoothed state.
        None: ``"measured"`` for the finite differences (the paper), ``"smoothed"`` for the
        smoothing schemes.
    """

    name: str = "forward"
    window: int = 9
    degree: int = 2
    spline_lam: float | None = None
    evaluate_at: str | None = None

    def __post_init__(self):
        if self.name not in SCHEMES:
            raise InputError(f"derivative: expected one of {list(SCHEMES)}, got {self.name!r}; "
                             "use 'forward' to reproduce the paper, 'spline' or 'local_polynomial' under noise")
        if not isinstance(self.degree, (int, np.integer)) or not 1 <= self.degree <= 4:
            raise InputError(f"degree: expected an int in 1..4 (local polynomial degree), got {self.degree!r}")
        if (not isinstance(self.window, (int, np.integer)) or self.window % 2 == 0
                or self.window < self.degree + 2):
            raise InputError(f"window: expected an odd int >= degree + 2 = {self.degree + 2} (samples per "
                             f"local fit), got {self.window!r}")
        if self.spline_lam is not None and not (np.isfinite(self.spline_lam) and self.spline_lam > 0):
            raise InputError(f"spline_lam: expected None (GCV) or a positive number, got {self.spline_lam!r}")
        ev = self.evaluate_at
        if ev is None:
            ev = "measured" if self.name in ("forward", "second_order") else "smoothed"
        if ev not in _EVAL:
            raise InputError(f"evaluate_at: expected one of {list(_EVAL)} or None, got {self.evaluate_at!r}")
        if ev == "smoothed" and self.name in ("forward", "second_order"):
            raise InputError(f"evaluate_at='smoothed' needs a smoothing derivative, got derivative={self.name!r}; "
                             "use derivative='spline' or 'local_polynomial', or evaluate_at='measured'")
        object.__setattr__(self, "evaluate_at", ev)

    @property
    def halo(self) -> tuple[int, int]:
        """Samples needed before and after a row's time (for chunked streaming)."""
        if self.name == "forward":
            return 0, 1
        if self.name == "second_order":
            return 0, 2
        if self.name == "local_polynomial":
            return self.window // 2, self.window // 2
        return -1, -1  # spline: global

    @property
    def streamable(self) -> bool:
        return self.name != "spline"

    def min_samples(self) -> int:
        """Fewest samples that give at least one row."""
        lo, hi = self.halo
        return {"spline": 5}.get(self.name, lo + hi + 1)

    def rows(self, t, Y):
        """Rows ``(t_r, X_r, D_r)`` of a contiguous series ``t`` (N,), ``Y`` (N, n).

        Returns empty arrays when ``N`` is too small for one row.
        """
        t = np.ascontiguousarray(t, dtype=float)
        Y = np.ascontiguousarray(Y, dtype=float)
        n = Y.shape[1]
        if t.size < self.min_samples():
            return np.empty(0), np.empty((0, n)), np.empty((0, n))
        if self.name == "forward":
            return t[:-1].copy(), Y[:-1].copy(), forward_difference(t, Y)
        if self.name == "second_order":
            return t[:-2].copy(), Y[:-2].copy(), second_order_difference(t, Y)
        if self.name == "local_polynomial":
            h = self.window // 2
            R = t.size - 2 * h
            X = np.empty((R, n))
            D = np.empty((R, n))
            _local_poly(t, Y, h, int(self.degree), X, D)
            if self.evaluate_at == "measured":
                X = Y[h:t.size - h].copy()
            return t[h:t.size - h].copy(), X, D
        return self._spline_rows(t, Y)

    def _spline_rows(self, t, Y):
        from odeinfer.smooth.gcv import SmoothingSpline

        X = np.full_like(Y, np.nan)
        D = np.full_like(Y, np.nan)
        for k in range(Y.shape[1]):
            ok = np.isfinite(Y[:, k])
            if ok.sum() < 5:
                raise DataError(f"data: state column {k} has {int(ok.sum())} observed values; derivative='spline' "
                                "needs at least 5 per state (use derivative='forward' for very short series)")
            spl = SmoothingSpline(t[ok], Y[ok, k], lam=self.spline_lam)
            X[:, k] = spl(t)
            D[:, k] = spl(t, nu=1)
        if self.evaluate_at == "measured":
            X = Y.copy()
        return t.copy(), X, D


def forward_difference(t, Y):
    """Paper eq. (6): ``(Y[i+1] - Y[i]) / (t[i+1] - t[i])``, shape (N-1, n)."""
    t = np.asarray(t, float)
    return (Y[1:] - Y[:-1]) / np.diff(t)[:, None]


def second_order_difference(t, Y):
    """Paper eq. (12) (derivative at ``t[i]`` of the 3-point quadratic), shape (N-2, n)."""
    t = np.asarray(t, float)
    h1 = (t[1:-1] - t[:-2])[:, None]
    h2 = (t[2:] - t[1:-1])[:, None]
    c0 = -(2.0 * h1 + h2) / (h1 * (h1 + h2))
    c1 = (h1 + h2) / (h1 * h2)
    c2 = -h1 / (h2 * (h1 + h2))
    return c0 * Y[:-2] + c1 * Y[1:-1] + c2 * Y[2:]


@njit(cache=True, error_model="numpy")
def _local_poly(t, Y, h, q, X, D):
    """Local polynomial fits: X[r] value, D[r] slope at t[r + h] (NaN if a window value is NaN)."""
    n = Y.shape[1]
    p = q + 1
    A = np.empty((p, p))
    B = np.empty((p, n))
    pw = np.empty(2 * p - 1)
    for r in range(X.shape[0]):
        i = r + h
        scale = max(t[i + h] - t[i], t[i] - t[i - h])
        A[:, :] = 0.0
        B[:, :] = 0.0
        for j in range(i - h, i + h + 1):
            s = (t[j] - t[i]) / scale
            pw[0] = 1.0
            for a in range(1, 2 * p - 1):
                pw[a] = pw[a - 1] * s
            for a in range(p):
                for b in range(a, p):
                    A[a, b] += pw[a + b]
                for k in range(n):
                    B[a, k] += pw[a] * Y[j, k]
        for a in range(p):
            for b in range(a):
                A[a, b] = A[b, a]
        # Gaussian elimination with partial pivoting (p <= 5)
        for c in range(p):
            piv = c
            for rr in range(c + 1, p):
                if abs(A[rr, c]) > abs(A[piv, c]):
                    piv = rr
            if piv != c:
                for b in range(p):
                    tmp = A[c, b]
                    A[c, b] = A[piv, b]
                    A[piv, b] = tmp
                for k in range(n):
                    tmp = B[c, k]
                    B[c, k] = B[piv, k]
                    B[piv, k] = tmp
            for rr in range(c + 1, p):
                fac = A[rr, c] / A[c, c]
                for b in range(c, p):
                    A[rr, b] -= fac * A[c, b]
                for k in range(n):
                    B[rr, k] -= fac * B[c, k]
        for c in range(p - 1, -1, -1):
            for k in range(n):
                acc = B[c, k]
                for b in range(c + 1, p):
                    acc -= A[c, b] * B[b, k]
                B[c, k] = acc / A[c, c]
        for k in range(n):
            X[r, k] = B[0, k]
            D[r, k] = B[1, k] / scale
