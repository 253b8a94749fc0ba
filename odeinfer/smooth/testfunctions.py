"""Test functions of the orthogonal conditions (Brunel, Clairon & d'Alché-Buc 2014, §2.2-2.3).

Functions in H^1_0 of a window ``[a, b]``: they vanish at both ends, so that integration by
parts moves the derivative from the proxy to the test function without boundary terms.

* ``"sine"``: ``phi_l(t) = sqrt(2/(b-a)) sin(l pi (t-a)/(b-a))``, orthonormal in L^2[a, b];
* ``"bspline"``: a clamped B-spline basis (degree ``min(3, L)``) with ``L + 2`` functions and
  uniform knots on ``[a, b]``, without its first and last functions; optionally orthonormalised
  (Cholesky of the Gram matrix), as the paper's condition C4 asks (the paper does not do it).

Boundary test functions (``OC,0`` / ``OC,1``, §2.3) use one cubic Bernstein polynomial on
``[a, a + w]`` (``sqrt(7/w) (1 - s)^3``, nonzero at ``a``) or ``[b - w, b]`` (``sqrt(7/w) s^3``,
nonzero at ``b``), normalised in L^2.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError
from odeinfer.smooth.splines import basis_matrix, uniform_knots

__all__ = ["TestFunctions", "boundary_function"]


@dataclass(frozen=True)
class TestFunctions:
    """``L`` test functions on ``[a, b]`` vanishing at both ends.

    Parameters
    ----------
    family : {"sine", "bspline"}
    n : int
        Number of functions ``L >= 1``.
    window : (float, float)
        Support ``[a, b]``, ``a < b``.
    orthonormal : bool, default False
        Orthonormalise B-spline test functions in L^2[a, b] (sine ones already are).
    """

    __test__ = False  # not a pytest class

    family: str
    n: int
    window: tuple
    orthonormal: bool = False

    def __post_init__(self):
        if self.family not in ("sine", "bspline"):
            raise InputError(f"test_functions: expected 'sine' or 'bspline', got {self.family!r}")
        if not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise InputError(f"L: expected an int >= 1, got {self.n!r}")
        a, b = (float(x) for x in self.window)
        if not a < b:
            raise InputError(f"window: expected (a, b) with a < b, got {self.window!r}")
        object.__setattr__(self, "window", (a, b))

    @property
    def degree(self) -> int:
        return min(3, int(self.n))

    @property
    def knots(self) -> np.ndarray:
        return _knots(self).copy()

    @property
    def breakpoints(self) -> np.ndarray:
        """Points where the functions are not smooth (window ends and knots)."""
        return _breakpoints(self).copy()

    def _raw(self, t, nu):
        a, b = self.window
        t = np.atleast_1d(np.asarray(t, float))
        inside = (t >= a) & (t <= b)
        if self.family == "sine":
            h = b - a
            ell = np.arange(1, self.n + 1)
            arg = np.pi * np.outer(t - a, ell) / h
            c = math.sqrt(2.0 / h)
            out = c * np.sin(arg) if nu == 0 else c * (np.pi * ell / h) * np.cos(arg)
        else:
            out = basis_matrix(_knots(self), self.degree, np.clip(t, a, b), nu)[:, 1:-1]
        return np.where(inside[:, None], out, 0.0)

    def _transform(self):
        """R^-1 with Gram = R'R (so Phi R^-1 is orthonormal), or None."""
        if self.family == "sine" or not self.orthonormal:
            return None
        return _transform(self)

    def __call__(self, t, nu=0):
        """Values (``nu`` = 0) or derivatives (``nu`` = 1) at ``t``: shape (len(t), L)."""
        out = self._raw(t, nu)
        T = self._transform()
        return out if T is None else out @ T


@functools.lru_cache(maxsize=64)
def _knots(tf: TestFunctions) -> np.ndarray:
    a, b = tf.window
    k = np.array([a, b]) if tf.family == "sine" else uniform_knots(a, b, tf.n + 2, tf.degree)
    k.flags.writeable = False
    return k


@functools.lru_cache(maxsize=64)
def _breakpoints(tf: TestFunctions) -> np.ndarray:
    br = np.unique(_knots(tf))
    br.flags.writeable = False
    return br


@functools.lru_cache(maxsize=64)
def _transform(tf: TestFunctions) -> np.ndarray:
    """R^-1 with Gram = R'R for the orthonormalised B-spline tests (cached per configuration)."""
    xg, wg = np.polynomial.legendre.leggauss(8)
    br = _breakpoints(tf)
    tq = np.concatenate([(br[i] + br[i + 1]) / 2 + (br[i + 1] - br[i]) / 2 * xg for i in range(br.size - 1)])
    wq = np.concatenate([(br[i + 1] - br[i]) / 2 * wg for i in range(br.size - 1)])
    F = tf._raw(tq, 0)
    gram = F.T @ (F * wq[:, None])
    R = np.linalg.inv(np.linalg.cholesky(gram).T)
    R.flags.writeable = False
    return R


def boundary_function(a, b, side, nu=0, t=None):
    """Normalised cubic boundary test function on ``[a, b]`` (``side`` 'left': nonzero at a).

    Returns the values (``nu`` = 0) or derivatives (``nu`` = 1) at ``t``, shape (len(t),).
    """
    t = np.atleast_1d(np.asarray(t, float))
    w = b - a
    s = np.clip((t - a) / w, 0.0, 1.0)
    c = math.sqrt(7.0 / w)
    if side == "left":
        v = c * (1 - s) ** 3 if nu == 0 else -3 * c * (1 - s) ** 2 / w
    else:
        v = c * s**3 if nu == 0 else 3 * c * s**2 / w
    return np.where((t >= a) & (t <= b), v, 0.0)
