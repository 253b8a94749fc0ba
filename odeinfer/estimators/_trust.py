"""A bound-constrained trust-region minimiser for smooth objectives (negative log-likelihoods),
built on ``fides`` (the interior trust-region reflective method of Coleman and Li, 1994/1996).

The caller supplies the curvature: ``fun(x) -> (f, g, H)`` with ``H`` a Gauss-Newton / Fisher
information matrix or the exact Hessian. Or, with ``curvature="bfgs"``, ``fun(x) -> (f, g)`` and the
curvature is fides' BFGS approximation, updated from the accepted steps' gradient changes (for
gradients from an adjoint, which gives no Fisher information).

Failure protocol: where the objective cannot be computed (a solver failure, a non-positive
state under log-scale noise), ``fun`` returns ``None`` or, better, a ``str`` saying why (e.g.
the solver's status message). Such a trial point is a rejected step: the trust region shrinks
and the iteration goes on (``n_fail`` counts them; the last reason is quoted in
:attr:`TrustResult.message`). A finite ``f`` with a non-finite gradient or ``H`` is treated the
same way. Only the start point must be computable.

>>> import numpy as np
>>> def fun(x):  # f = (x0 - 2)^2 + (x1 + 1)^2
...     d = x - np.array([2.0, -1.0])
...     return float(d @ d), 2 * d, 2 * np.eye(2)
>>> res = trust_region(fun, [0.5, 0.5], [0.0, 0.0], [3.0, 3.0])
>>> res.status, np.round(res.x, 6).tolist()
('converged', [2.0, 0.0])

References
----------
Coleman, T. F. and Li, Y. (1996). An interior trust region approach for nonlinear minimization
subject to bounds. SIAM J. Optim. 6(2), 418-445.
Fröhlich, F. and Sorger, P. K. (2022). Fides: reliable trust-region optimization for parameter
estimation of ordinary differential equation models. PLoS Comput. Biol. 18(7), e1010322.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from odeinfer.errors import InputError

__all__ = ["TrustResult", "trust_region"]

#: fides' logger level: above CRITICAL, so it never prints (the exit flag is reported instead)
_SILENT = logging.CRITICAL + 10


@dataclass
class TrustResult:
    """Outcome of :func:`trust_region`.

    Attributes
    ----------
    x : ndarray (n,)
        The last accepted point (the start if no step was accepted).
    f : float
    g : ndarray (n,)
    H : ndarray (n, n)
        Objective, gradient and the caller's curvature matrix at ``x``.
    status : str
        ``"converged"`` (a test on the function change, the step or the gradient fired),
        ``"max_iter"`` or ``"failed"`` (the start could not be evaluated, or the trust region
        shrank to nothing: no step decreases ``f``).
    message : str
        Why it stopped, in words, with the objective's last failure reason if any.
    n_iter, n_eval, n_fail : int
        Iterations (trial steps, accepted or rejected: one call of ``fun`` each), calls of ``fun``
        (``n_iter + 1``, plus one per BFGS restart from a point moved off a bound) and calls that failed.
    history : ndarray (n_iter + 1,)
        ``f`` at the start and after each iteration.
    stop : str
        The test that ended the iteration, as fides names it (``"FTOL"``, ``"XTOL"``, ``"GTOL"``,
        ``"MAXITER"``, ``"DELTA_TOO_SMALL"``, ...); ``""`` when the start could not be evaluated.
    """

    x: np.ndarray
    f: float
    g: np.ndarray | None
    H: np.ndarray | None
    status: str
    message: str
    n_iter: int
    n_eval: int
    n_fail: int
    history: np.ndarray = field(default_factory=lambda: np.empty(0))
    stop: str = ""


class _Objective:
    """``fun`` behind fides' interface: a failure becomes ``(inf, NaN gradient, NaN H)``, which
    fides rejects (radius shrinks) and which cannot fire its gradient test."""

    def __init__(self, fun, n, with_h=True):
        self.fun, self.n, self.with_h = fun, n, with_h
        self.n_eval = self.n_fail = 0
        self.last_failure = None
        self.last_usable = (None, None)  # (x, output): a BFGS restart starts where the last run stopped

    def __call__(self, x):
        if self.last_usable[0] is not None and np.array_equal(self.last_usable[0], x):
            return self.last_usable[1]
        self.n_eval += 1
        out = self.fun(x)
        reason = _failure(out, self.n, self.with_h)
        if reason is None:
            out = (float(out[0]),) + tuple(np.asarray(a, dtype=float) for a in out[1:])
            if not self.with_h:
                self.last_usable = (np.array(x, dtype=float), out)
            return out
        self.n_fail += 1
        self.last_failure = reason
        if self.n_eval == 1:
            raise _StartFailed(reason)
        nan = math.nan
        return (math.inf, np.full(self.n, nan)) + ((np.full((self.n, self.n), nan),) if self.with_h else ())


def _failure(out, n, with_h=True):
    """None if ``out`` is a usable ``(f, g, H)`` (``(f, g)`` without ``with_h``); else the reason (str)."""
    if out is None:
        return "the objective reported a failure"
    if isinstance(out, str):
        return out
    want = "(f, g, H)" if with_h else "(f, g)"
    if not isinstance(out, tuple) or len(out) != 2 + with_h:
        raise InputError(f"fun: expected fun(x) to return {want}, None or a reason (str), got "
                         f"{type(out).__name__}{'' if not isinstance(out, tuple) else f' of length {len(out)}'}")
    f, g = out[0], np.asarray(out[1], dtype=float)
    H = np.asarray(out[2], dtype=float) if with_h else np.zeros((n, n))
    if g.shape != (n,) or H.shape != (n, n):
        raise InputError(f"fun: expected a gradient of shape ({n},) and H of shape ({n}, {n}), got "
                         f"{g.shape} and {H.shape}")
    if not math.isfinite(float(f)):
        return f"the objective is not finite ({float(f)!r})"
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
        return "the gradient or the curvature matrix H is not finite"
    return None


class _StartFailed(Exception):
    pass


class _Diagonal:
    """The diagonal scaling matrices of fides' iterations (``scipy.sparse.csc_matrix(np.diag(v))``),
    with the operations fides applies to them, bit for bit as scipy.sparse computes them and without
    its construction cost (about a third of fides' own time per iteration on a 9-parameter problem):
    ``S.dot(x)`` and ``S * A`` add each product to a zero (``0.0 + d_i x_i``: a negative zero becomes
    a positive one), ``A * S`` likewise, ``A + S`` adds the non-zero diagonal entries to a
    Fortran-ordered copy of ``A`` (the order scipy returns, which the BLAS calls after it see)."""

    __slots__ = ("d",)
    __array_ufunc__ = None  # ndarray * _Diagonal and ndarray + _Diagonal come here, as with scipy.sparse

    def __init__(self, dense):
        self.d = np.diagonal(dense).copy()

    def copy(self):
        return self

    def diagonal(self):
        return self.d.copy()

    def dot(self, x):
        x = np.asarray(x)
        return (self.d * x if x.ndim == 1 else self.d[:, None] * x) + 0.0

    __mul__ = dot

    def __rmul__(self, a):
        return np.asarray(a) * self.d + 0.0

    def __radd__(self, a):
        out = np.array(a, dtype=float, order="F", copy=True)
        i = np.flatnonzero(self.d)
        out[i, i] += self.d[i]
        return out


_PATCH_LOCK = threading.Lock()
_OPEN = {}  # open blocks per patched attribute, (module name, attribute): count


@contextmanager
def _patching(mods, attr, new, original):
    """``mod.<attr> = new`` on each of ``mods`` while any block patching it runs (blocks nest and may run
    in several threads at once); ``original`` back when the last one ends."""
    keys = [(m.__name__, attr) for m in mods]
    with _PATCH_LOCK:
        for m, k in zip(mods, keys):
            _OPEN[k] = _OPEN.get(k, 0) + 1
            setattr(m, attr, new)
    try:
        yield
    finally:
        with _PATCH_LOCK:
            for m, k in zip(mods, keys):
                _OPEN[k] -= 1
                if not _OPEN[k]:
                    setattr(m, attr, original)


@contextmanager
def _diagonal_scaling():
    """fides with :class:`_Diagonal` for its scaling matrices while the block runs (a fides whose
    modules do not build them with ``csc_matrix`` runs unchanged)."""
    import fides.minimize
    import fides.trust_region
    from scipy.sparse import csc_matrix

    mods = [m for m in (fides.minimize, fides.trust_region) if getattr(m, "csc_matrix", None) in (csc_matrix, _Diagonal)]
    with _patching(mods, "csc_matrix", _Diagonal, csc_matrix):
        yield


def _subproblem_2d(b, g, delta, logger=None):
    """fides' ``solve_nd_trust_region_subproblem`` for the two-dimensional subspace of its default step
    (``TRStep2D``), in Python floats: the same method and stopping rules (eigendecomposition; the
    interior Newton step when ``b`` is positive definite and the step fits; else Newton's method on
    the secular equation ``1/||s(lam)|| - 1/delta`` from ``max(0, -lambda_min)`` with scipy's
    ``newton`` test ``|lam_k+1 - lam_k| <= 1e-12``, at most 100 iterations, then fides' Brent fallback;
    then the hard case), without the per-call cost of ``scipy.linalg.eig`` and ``scipy.optimize.newton``
    on a 2 x 2 problem (about 1 ms of fides' 2.3 ms per iteration on a 9-parameter problem). The
    eigenvectors come from a Jacobi rotation of the symmetrised ``b``, so the step agrees with fides'
    to rounding. One deviation: where ``b`` is indefinite, fides' Newton iteration starts on a pole of
    the secular equation, where it evaluates ``s`` with ``w_i`` in place of ``w_i / 0``, and stops there
    at once (with a step that need not solve the subproblem), fails, or takes the hard-case step although
    ``g`` is not orthogonal to the eigenvector; here the secular equation takes its limit ``-1/delta`` at
    the pole and the Brent search that fides falls back to runs directly. Every step solves the
    subproblem (tests/test_trust_scaling.py: the optimality conditions and fides' own steps). Other sizes
    and non-finite input go to fides' own solver."""
    if b.shape != (2, 2) or not (np.all(np.isfinite(b)) and np.all(np.isfinite(g)) and math.isfinite(delta)):
        from fides.subproblem import solve_nd_trust_region_subproblem

        return solve_nd_trust_region_subproblem(b, g, delta, logger)
    if delta == 0:
        return np.zeros(g.shape), "zero"
    a, c, d = float(b[0, 0]), 0.5 * (float(b[0, 1]) + float(b[1, 0])), float(b[1, 1])
    if c == 0.0:
        cs, sn = 1.0, 0.0
    else:
        theta = 0.5 * math.atan2(2.0 * c, a - d)
        cs, sn = math.cos(theta), math.sin(theta)
    e = [a * cs * cs + 2.0 * c * cs * sn + d * sn * sn, a * sn * sn - 2.0 * c * cs * sn + d * cs * cs]
    vec = [(cs, sn), (-sn, cs)]  # orthonormal eigenvectors (columns of V)
    g0, g1 = float(g[0]), float(g[1])
    w = [-(cs * g0 + sn * g1), -(-sn * g0 + cs * g1)]  # -V^T g
    jmin = 0 if e[0] <= e[1] else 1
    mineig = e[jmin]

    def coef(lam, w):  # fides' slam in the eigenbasis: w_i / (e_i + lam), w_i where e_i + lam == 0
        return [wi / (ei + lam) if ei + lam != 0 else wi for wi, ei in zip(w, e)]

    def step(k):
        return np.array([vec[0][0] * k[0] + vec[1][0] * k[1], vec[0][1] * k[0] + vec[1][1] * k[1]])

    def secular(lam):
        if lam < -mineig:
            return math.inf
        if any(ei + lam == 0 and wi != 0 for wi, ei in zip(w, e)):
            return -1.0 / delta  # the limit at a pole (||s|| -> inf); fides evaluates its w_i there instead
        sn_ = math.hypot(*coef(lam, w))
        return 1.0 / sn_ - 1.0 / delta if sn_ > 0 else math.inf

    def dsecular(lam):
        k = coef(lam, w)
        sn_ = math.hypot(*k)
        if sn_ == 0:
            return math.inf
        return sum(ki * ki / (ei + lam) for ki, ei in zip(k, e) if ei + lam != 0) / sn_ ** 3

    if mineig > 0:
        k = coef(0.0, w)
        if math.hypot(*k) <= delta + math.sqrt(np.spacing(1)):
            return step(k), "posdef"
        laminit = 0.0
    else:
        laminit = -mineig
    # fides' Newton iteration from a pole of the secular equation (an indefinite b: e_i + laminit == 0
    # with w_i != 0) stops at once on an infinite or NaN derivative; it is skipped for the Brent search
    pole = any(ei + laminit == 0 and wi != 0 for wi, ei in zip(w, e))
    if secular(laminit) < 0:
        lam = math.nan
        if not pole:
            lam = laminit
            for _ in range(100):  # scipy.optimize.newton(secular, laminit, dsecular, tol=1e-12, maxiter=100)
                f = secular(lam)
                if f == 0:
                    break
                df = dsecular(lam)
                if df == 0 or not math.isfinite(f / df):
                    lam = math.nan
                    break
                nxt = lam - f / df
                if abs(nxt - lam) <= 1e-12:
                    lam = nxt
                    break
                lam = nxt
            else:
                lam = math.nan
        if math.isfinite(lam):
            k = coef(lam, w)
            if math.hypot(*k) <= delta + 1e-12:
                return step(k), "indef"
        lo_, hi_, left = laminit, (laminit + math.sqrt(np.spacing(1))) * 10, 100
        while secular(hi_) < 0 and left > 0:  # fides' fallback: a sign change to the right, then Brent
            lo_, hi_, left = hi_, hi_ * 10, left - 1
        if left > 0:
            from scipy.optimize import brentq

            try:
                lam = brentq(secular, lo_, hi_, xtol=1e-12, maxiter=left)
                k = coef(lam, w)
                if math.hypot(*k) <= delta + math.sqrt(np.spacing(1)):
                    return step(k), "indef"
            except (RuntimeError, ValueError):
                pass
    # the hard case: g orthogonal to the eigenvector of the smallest eigenvalue
    wh = [0.0 if ei - mineig == 0 else wi for wi, ei in zip(w, e)]
    k = coef(-mineig, wh)
    sigma = math.sqrt(max(delta ** 2 - (k[0] ** 2 + k[1] ** 2), 0.0))
    return step(k) + sigma * np.array(vec[jmin]), "hard"


@functools.cache
def _step_2d_class():
    """fides' ``TRStep2D`` with one symmetric eigendecomposition (``numpy.linalg.eigh``) where fides takes a general
    one (``numpy.linalg.eig``) and two least-squares solves (``scipy.linalg.lstsq``) of the scaled Hessian: the same
    subspace (the Newton step, minimum-norm, with singular values below machine epsilon times the largest dropped as
    ``lstsq`` drops them; or the eigenvector of the most negative eigenvalue) to rounding. On 113 parameters
    (Bachmann_MSB2011) fides' three factorisations took 230 ms per iteration, the objective 80 ms; an eigh of that
    size takes 3 ms. Non-finite matrices go to fides' own."""
    import fides.steps
    from fides.steps import Step, TRStep2D, normalize

    class _TRStep2D(TRStep2D):
        def __init__(self, x, sg, hess, scaling, g_dscaling, delta, theta, ub, lb, logger):
            if len(sg) == 1 or not (np.all(np.isfinite(hess)) and np.all(np.isfinite(sg))):
                super().__init__(x, sg, hess, scaling, g_dscaling, delta, theta, ub, lb, logger)
                return
            Step.__init__(self, x, sg, hess, scaling, g_dscaling, delta, theta, ub, lb, logger)
            shess = self.shess
            e, v = np.linalg.eigh(0.5 * (shess + shess.T))
            emax = np.max(np.abs(e))
            self.posdef = e[0] > -np.spacing(1) * emax
            self.newton = False
            if self.posdef:
                keep = np.abs(e) > np.spacing(1) * emax
                s_newt = -(v[:, keep] @ ((v[:, keep].T @ sg) / e[keep]))
                if np.linalg.norm(s_newt) < delta:
                    normalize(s_newt)
                    self.newton = True
                    self.subspace = np.expand_dims(s_newt, 1)
                    return
                s_grad = sg.copy()
            else:
                s_newt = v[:, 0].copy()
                s_grad = scaling.dot(np.sign(sg) + (sg == 0))
            normalize(s_newt)
            s_grad = s_grad - s_newt * s_newt.dot(s_grad)
            if np.linalg.norm(s_grad) > np.spacing(1):
                normalize(s_grad)
                self.subspace = np.vstack([s_newt, s_grad]).T
            else:
                self.subspace = np.expand_dims(s_newt, 1)

    _TRStep2D.__name__ = _TRStep2D.__qualname__ = "TRStep2D"
    _TRStep2D.__module__ = fides.steps.__name__
    return _TRStep2D


@contextmanager
def _fast_subproblem():
    """fides' steps with :func:`_subproblem_2d` for their two-dimensional trust-region subproblems and
    :func:`_step_2d_class`'s subspace while the block runs."""
    import fides.steps
    import fides.trust_region
    from fides.subproblem import solve_nd_trust_region_subproblem

    with _patching([fides.steps], "solve_nd_trust_region_subproblem", _subproblem_2d,
                   solve_nd_trust_region_subproblem), \
            _patching([fides.trust_region], "TRStep2D", _step_2d_class(), fides.steps.TRStep2D):
        yield


def _optimizer_class():
    import fides

    class _Optimizer(fides.Optimizer):
        """fides' optimiser, recording ``f`` after each iteration; its progress table, which it
        formats every iteration whatever the logger's level, is never printed here (see
        ``_SILENT``), so it is not formatted either."""

        def check_continue(self):
            self.f_trace.append(float(self.fval))
            return super().check_continue()

        def log_step(self, accepted, step, funout):
            pass

        def log_step_initial(self):
            pass

        def log_header(self):
            pass

    return _Optimizer


def _as_vector(name, value, n=None):
    try:
        v = np.array(value, dtype=float).reshape(-1) if np.ndim(value) <= 1 else None
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a 1-D array of numbers, got {type(value).__name__}") from None
    if v is None:
        raise InputError(f"{name}: expected a 1-D array of numbers, got an array of shape {np.shape(value)}")
    if n is not None and v.size != n:
        raise InputError(f"{name}: expected {n} values (as many as x0), got {v.size}")
    return v


def _check_inputs(x0, lower, upper):
    x = _as_vector("x0", x0)
    if x.size == 0:
        raise InputError("x0: expected at least one value, got an empty array")
    lo, hi = _as_vector("lower", lower, x.size), _as_vector("upper", upper, x.size)
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise InputError(f"x0: expected finite values, got x0[{bad[0]}] = {float(x[bad[0]])!r}; start from a finite "
                         "point inside the bounds")
    for name, b in (("lower", lo), ("upper", hi)):
        nan = np.flatnonzero(np.isnan(b))
        if nan.size:
            raise InputError(f"{name}: expected numbers (-inf / inf for none), got {name}[{nan[0]}] = nan")
    cross = np.flatnonzero(lo >= hi)
    if cross.size:
        i = cross[0]
        raise InputError(f"lower, upper: expected lower < upper, got lower[{i}] = {float(lo[i])!r} >= "
                         f"upper[{i}] = {float(hi[i])!r}; swap them, or hold that unknown fixed outside the optimiser")
    out = np.flatnonzero((x < lo) | (x > hi))
    if out.size:
        i = out[0]
        raise InputError(f"x0: expected a start inside the bounds, got x0[{i}] = {float(x[i])!r} outside "
                         f"[{float(lo[i])!r}, {float(hi[i])!r}]; clip it, e.g. x0 = np.clip(x0, lower, upper)")
    return x, lo, hi


def _nudge_inward(x, lo, hi):
    """A start on a bound moved inside: fides' affine scaling is degenerate there."""
    x = x.copy()
    width = hi - lo
    for i in range(x.size):
        d = min(1e-8 * max(1.0, abs(x[i])), 0.25 * width[i])
        if x[i] - lo[i] < d:
            x[i] = lo[i] + d
        elif hi[i] - x[i] < d:
            x[i] = hi[i] - d
    return x


_WORDS = {
    "FTOL": "the change of f was below fatol + frtol * |f|",
    "XTOL": "the step was below xtol",
    "GTOL": "the gradient norm was below gatol (or grtol * |f|)",
    "MAXITER": "no convergence within max_iter={max_iter} iterations; the last accepted point is kept",
    "DELTA_TOO_SMALL": ("the trust-region radius fell below machine precision: no step decreases f any more "
                        "(the objective may be noisy, e.g. loose solver tolerances, or fail near x)"),
    "MAXTIME": "the time limit was reached",
    "NOT_FINITE": "fides met a non-finite value",
    "EXCEEDED_BOUNDARY": "fides stepped outside the bounds",
}


def _check_tol(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not v >= 0 \
            or not math.isfinite(v):
        raise InputError(f"{name}: expected a finite number >= 0, got {v!r}")
    return float(v)


def trust_region(fun, x0, lower, upper, *, max_iter=1000, fatol=1e-10, frtol=1e-12, xtol=1e-10, gatol=1e-8,
                 grtol=0.0, delta_init=1.0, stall_decrease=1e-6, curvature="given") -> TrustResult:
    """Minimise ``f(x)`` over ``lower <= x <= upper`` with fides' trust-region reflective method.

    Parameters
    ----------
    fun : callable
        ``fun(x) -> (f, g (n,), H (n, n))`` (``(f, g)`` for ``curvature="bfgs"``); or ``None`` / a
        reason (``str``) when the objective cannot be computed at ``x`` (a rejected step; see the
        module docstring). ``H`` is the caller's curvature (Gauss-Newton / Fisher information or
        exact Hessian).
    x0 : array-like (n,)
        Start, inside the bounds (a start on a bound is moved inward by ~1e-8 relative).
    lower, upper : array-like (n,)
        Bounds, ``lower < upper``; ``-inf`` / ``inf`` for none.
    max_iter : int, default 1000
        Trial steps (accepted or rejected) before status ``"max_iter"``.
    fatol, frtol : float, default 1e-10, 1e-12
        Converged when an accepted step changes ``f`` by less than ``fatol + frtol * |f|``.
    xtol : float, default 1e-10
        Converged when the step (in fides' scaled coordinates) is shorter than ``xtol``.
    gatol, grtol : float, default 1e-8, 0
        Converged when ``||g|| <= gatol`` or ``||g|| <= grtol * |f|``.
    delta_init : float, default 1
        Initial trust-region radius.
    stall_decrease : float, default 1e-6
        When the radius collapses (no step decreases ``f``: the objective is flat to its own
        accuracy, e.g. an ODE solved to rtol 1e-8), the point counts as converged if the
        quadratic model promises at most this decrease of ``f`` (see :func:`predicted_decrease`;
        for a negative log-likelihood, 1e-6 is far below any statistical resolution); else the
        status is ``"failed"``.
    curvature : {"given", "bfgs"}, default "given"
        ``"given"``: ``fun`` returns ``H``. ``"bfgs"``: ``fun`` returns ``(f, g)``; the curvature is
        fides' BFGS update from the identity (updates that break the curvature condition ``s.y > 0``
        are skipped, so the matrix stays positive definite). The result's ``H`` is then that
        approximation, not a Hessian: no covariance should be read from it.

    Returns
    -------
    TrustResult

    Raises
    ------
    InputError
        Bad ``x0`` / bounds / options (before any evaluation), or ``fun`` returning something
        other than ``(f, g, H)``, None or a str.
    """
    if not callable(fun):
        raise InputError(f"fun: expected a callable fun(x) -> (f, g, H), got {type(fun).__name__}")
    x, lo, hi = _check_inputs(x0, lower, upper)
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise InputError(f"max_iter: expected a positive integer, got {max_iter!r}")
    tols = {k: _check_tol(k, v) for k, v in
            (("fatol", fatol), ("frtol", frtol), ("xtol", xtol), ("gatol", gatol), ("grtol", grtol))}
    if not _check_tol("delta_init", delta_init) > 0:
        raise InputError(f"delta_init: expected a positive number, got {delta_init!r}")
    if curvature not in ("given", "bfgs"):
        raise InputError(f"curvature: expected 'given' (fun returns H) or 'bfgs' (fun returns (f, g)), got "
                         f"{curvature!r}")
    import fides

    n = x.size
    bfgs = curvature == "bfgs"
    obj = _Objective(fun, n, with_h=not bfgs)
    options = {fides.Options.MAXITER: int(max_iter), **{fides.Options(k): v for k, v in tols.items()},
               fides.Options.DELTA_INIT: float(delta_init)}
    x_start = _nudge_inward(x, lo, hi)
    trace, n_iter = [], 0
    while True:
        opt = _optimizer_class()(obj, ub=hi, lb=lo, verbose=_SILENT, options=options,
                                 hessian_update=fides.BFGS() if bfgs else None)
        opt.f_trace = trace[:-1]  # a restart's first value is the last run's end
        try:
            with _diagonal_scaling(), _fast_subproblem():
                opt.minimize(x_start)
        except _StartFailed as e:
            return TrustResult(x_start, math.inf, None, None, "failed",
                               f"the objective could not be computed at the start: {e}", 0, obj.n_eval, obj.n_fail,
                               np.empty(0))
        except RuntimeError as e:  # fides' own checks (non-finite values, bounds); anything else is a bug upstream
            if opt.exitflag not in (fides.ExitFlag.NOT_FINITE, fides.ExitFlag.EXCEEDED_BOUNDARY):
                raise
            opt.f_trace.append(float(opt.fval))
            return _result(opt, obj, "failed", f"{_WORDS[opt.exitflag.name]}: {e}", n_iter + opt.iteration,
                           opt.exitflag.name)
        finally:
            if opt.logger is not None:  # fides makes a logger (with a handler) per run: drop the handler
                opt.logger.handlers.clear()
        n_iter += opt.iteration
        flag = opt.exitflag.name
        f_run, trace = (trace[-1] if trace else opt.f_trace[0]), opt.f_trace
        # BFGS: a stop on a small step or change may come from a curvature estimate grown stale (too large along
        # directions where f has since flattened); run again from the identity while that still decreases f
        if not (bfgs and flag in ("FTOL", "XTOL", "DELTA_TOO_SMALL") and n_iter < max_iter
                and f_run - opt.fval > tols["fatol"] + tols["frtol"] * abs(opt.fval)):
            break
        x_start = _nudge_inward(np.asarray(opt.x, float), lo, hi)
        options[fides.Options.MAXITER] = int(max_iter) - n_iter
    status = {"FTOL": "converged", "XTOL": "converged", "GTOL": "converged", "MAXITER": "max_iter"}.get(flag, "failed")
    message = _WORDS.get(flag, f"fides exit flag {flag}").format(max_iter=max_iter)
    if flag == "DELTA_TOO_SMALL":
        dec = predicted_decrease(opt.x, opt.grad, opt.hess, lo, hi)
        if dec <= stall_decrease:
            status = "converged"
            message = (f"no step decreases f any more and the model predicts at most {dec:.2g} further decrease "
                       f"(<= stall_decrease={stall_decrease:g}): a stationary point, flat to the objective's accuracy")
        else:
            message += f"; the model still predicts a decrease of {dec:.3g}"
    return _result(opt, obj, status, message, n_iter, flag)


def predicted_decrease(x, g, H, lo, hi):
    """Half the Newton decrement ``g_F^T H_FF^+ g_F / 2`` over the coordinates not held by an
    active bound (a bound is active when ``x`` is within 1e-8 (relative) of it and the gradient
    pushes outward): the decrease the quadratic model still promises."""
    x, g, H = np.asarray(x, float), np.asarray(g, float), np.asarray(H, float)
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
        return math.inf
    tol = 1e-8 * np.maximum(1.0, np.abs(x))
    held = ((x - lo <= tol) & (g > 0)) | ((hi - x <= tol) & (g < 0))
    free = ~held
    if not free.any():
        return 0.0
    gf = g[free]
    return float(0.5 * gf @ np.linalg.pinv(H[np.ix_(free, free)], rcond=1e-12, hermitian=True) @ gf)


def _result(opt, obj, status, message, n_iter, stop):
    if obj.n_fail:
        message += (f"; the objective could not be computed at {obj.n_fail} of {obj.n_eval} points, "
                    f"the last time: {obj.last_failure}")
    return TrustResult(np.array(opt.x, dtype=float), float(opt.fval), np.array(opt.grad, dtype=float),
                       np.array(opt.hess, dtype=float), status, message, int(n_iter), obj.n_eval, obj.n_fail,
                       np.array(opt.f_trace, dtype=float), stop)
