"""A bound-constrained trust-region minimiser for smooth objectives (negative log-likelihoods): the
interior trust-region reflective method of Coleman and Li (1994/1996) as fides implements it, with its
steps compiled (:mod:`odeinfer.estimators._trust_step`).

The caller supplies the curvature: ``fun(x) -> (f, g, H)`` with ``H`` a Gauss-Newton / Fisher
information matrix or the exact Hessian. Or, with ``curvature="bfgs"``, ``fun(x) -> (f, g)`` and the
curvature is a BFGS approximation (fides' update), updated from the accepted steps' gradient changes (for
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
import math
from dataclasses import dataclass, field

import numpy as np

from odeinfer.errors import InputError

__all__ = ["TrustResult", "trust_region"]


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
    """``fun`` for the iteration: a failure becomes ``(inf, NaN gradient, NaN H)``, which is a rejected
    step (radius shrinks) and cannot fire the gradient test. With BFGS curvature (``with_h=False``) the
    returned ``H`` is ``None``."""

    def __init__(self, fun, n, with_h=True):
        self.fun, self.n, self.with_h = fun, n, with_h
        self.bfgs = not with_h
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
            out = (float(out[0]), np.asarray(out[1], dtype=float),
                   np.asarray(out[2], dtype=float) if self.with_h else None)
            if not self.with_h:
                self.last_usable = (np.array(x, dtype=float), out)
            return out
        self.n_fail += 1
        self.last_failure = reason
        if self.n_eval == 1:
            raise _StartFailed(reason)
        nan = math.nan
        return math.inf, np.full(self.n, nan), (np.full((self.n, self.n), nan) if self.with_h else None)


class _Run:
    """One run of fides' ``Optimizer.minimize`` (fides 0.8, default options: 2-D subspace, reflections,
    ``mu = 0.25``, ``eta = 0.75``, ``gamma1 = 1/4``, ``gamma2 = 2``, ``theta_max = 0.95``), with its steps
    from :func:`odeinfer.estimators._trust_step.propose_step`: the same radius updates, acceptance and
    stopping tests, in the same order. ``f_trace`` is ``f`` at the start and after each iteration."""

    def __init__(self, obj, x0, lo, hi, opts, f_trace):
        self.obj, self.lo, self.hi, self.opts = obj, lo, hi, opts
        self.x = np.array(x0, dtype=float)
        self._non_degenerate()
        self.f, self.g, H = obj(self.x)
        # fides' HybridFixed (pyPESTO's default with a Fisher information): a BFGS matrix from the identity, updated
        # on every accepted step, replaces the given curvature for good once ``opts["switch"]`` iterations in a row
        # have left the radius unchanged. As in fides, its first step uses that identity.
        self.B = np.eye(self.x.size) if opts["switch"] else None
        self.switched, self.since_radius_change = False, 0
        self.H = np.eye(self.x.size) if obj.bfgs or self.B is not None else H.copy()
        self.f_trace = list(f_trace)
        self.iteration = 0
        self.delta = opts["delta_init"]
        self.tr_ratio = 0.0
        self.accepted = True  # whether the last trial point was accepted

    def _non_degenerate(self, eps=1e2 * np.spacing(1)):
        x, lo, hi = self.x, self.lo, self.hi
        if np.min(np.abs(hi - x)) < eps or np.min(np.abs(x - lo)) < eps:
            up, low = (hi - x) < eps, (x - lo) < eps
            x[up] = x[up] - eps
            x[low] = x[low] + eps

    def minimise(self):
        """Iterate until a test fires; returns fides' exit flag name."""
        propose_step = _step_kernel()
        n, opts, converged = self.x.size, self.opts, False
        s, s0, ss, dv = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
        while True:
            self.f_trace.append(float(self.f))
            if converged:
                return converged
            if self.iteration >= opts["max_iter"]:
                return "MAXITER"
            if self.delta < np.spacing(1):
                return "DELTA_TOO_SMALL"
            self.iteration += 1
            delta_iter = self.delta
            qpval = propose_step(self.x, self.g, self.H, self.lo, self.hi, delta_iter, _THETA_MAX, s, s0, ss, dv)
            x_new = self.x + s + s0
            f_new, g_new, H_new = self.obj(x_new)
            accepted = self.accepted = self._update_radius(f_new, g_new, ss, qpval, dv, delta_iter)
            converged = self._converged(f_new, g_new, ss)
            if accepted:
                if self.obj.bfgs:
                    _bfgs_update(self.H, s + s0, g_new - self.g)
                elif self.B is not None:
                    _bfgs_update(self.B, s + s0, g_new - self.g)
                    self.H = (self.B if self.switched else H_new).copy()
                    self.switched = self.switched or self.since_radius_change >= opts["switch"]
                else:
                    self.H = H_new.copy()
                if np.any(x_new < self.lo) or np.any(x_new > self.hi):
                    return "EXCEEDED_BOUNDARY"
                self.f, self.x, self.g = f_new, x_new, g_new
                self._non_degenerate()

    def _update_radius(self, f_new, g_new, ss, qpval, dv, delta_iter):
        """fides' ``update_tr_radius``: whether the step is accepted."""
        nsx = float(np.linalg.norm(ss))
        self.since_radius_change += 1
        if not math.isfinite(f_new):
            self.tr_ratio = 0.0
            self.delta = float(np.nanmin([self.delta * _GAMMA1, nsx / 4]))
            self.since_radius_change = 0
            return False
        aug = 0.5 * ss.dot(dv * np.abs(g_new) * ss)
        actual = self.f - f_new - aug
        predicted = -qpval
        self.tr_ratio = 0.0 if predicted <= 0.0 else actual / predicted
        interior = nsx < delta_iter * 0.9
        if self.tr_ratio >= _ETA and not interior:
            self.delta = _GAMMA2 * self.delta
            self.since_radius_change = 0
        elif self.tr_ratio <= _MU:
            self.delta = float(np.nanmin([self.delta * _GAMMA1, nsx / 4]))
            self.since_radius_change = 0
        return self.tr_ratio > 0.0

    def _converged(self, f_new, g_new, ss):
        """fides' ``check_convergence``: the name of the test that fired, or False."""
        o = self.opts
        gnorm = np.linalg.norm(g_new)
        if self.tr_ratio > _MU and abs(f_new - self.f) < o["fatol"] + o["frtol"] * abs(self.f):
            return "FTOL"
        if self.iteration > 1 and np.linalg.norm(ss) < o["xtol"]:
            return "XTOL"
        if gnorm <= o["gatol"] or gnorm <= o["grtol"] * abs(self.f):
            return "GTOL"
        return False


#: fides' default trust-region constants (Nocedal and Wright, 2006)
_MU, _ETA, _GAMMA1, _GAMMA2, _THETA_MAX = 0.25, 0.75, 0.25, 2.0, 0.95


@functools.cache
def _step_kernel():
    """:func:`~odeinfer.estimators._trust_step.propose_step`, once no warm-up process is compiling it (it compiles in
    about 10 s once per installation: ``oi.warmup("trust_step")``, started by ``odeinfer fit``)."""
    from odeinfer.estimators._trust_step import propose_step
    from odeinfer.solve.warmup import await_kernel

    await_kernel("trust_step")
    return propose_step


def _bfgs_update(H, s, y):
    """fides' BFGS update of ``H`` in place, skipped where the curvature condition ``s'y > 0`` fails."""
    u = H.dot(s)
    c, b = u.dot(s), y.dot(s)
    if b <= 0:
        return
    H += (np.outer(y, y) / b - np.outer(u, u) / c)  # fides adds the whole update: the same rounding


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
                 grtol=0.0, delta_init=1.0, stall_decrease=1e-6, curvature="given", switch=20) -> TrustResult:
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
        accuracy, e.g. an ODE solved to rtol 1e-8), or the step falls below ``xtol`` on a rejected
        trial point (one that failed or raised ``f``), the point counts as converged if the
        quadratic model promises at most this decrease of ``f`` (see :func:`predicted_decrease`;
        for a negative log-likelihood, 1e-6 is far below any statistical resolution); else the
        status is ``"failed"``.
    curvature : {"given", "bfgs", "hybrid"}, default "given"
        ``"given"``: ``fun`` returns ``H``. ``"bfgs"``: ``fun`` returns ``(f, g)``; the curvature is
        fides' BFGS update from the identity (updates that break the curvature condition ``s.y > 0``
        are skipped, so the matrix stays positive definite). The result's ``H`` is then that
        approximation, not a Hessian: no covariance should be read from it. ``"hybrid"``: fides'
        ``HybridFixed``, pyPESTO's default with a Fisher information: ``fun`` returns ``H``, used until
        ``switch`` iterations in a row leave the radius unchanged; from then on the BFGS approximation,
        updated from the identity on every accepted step since the start (the first step, as in fides,
        uses the identity). It repairs a Gauss-Newton curvature that is wrong where the residuals are not
        small; the result's ``H`` is then the BFGS approximation.
    switch : int, default 20
        ``"hybrid"`` only: fides' ``switch_iteration``.

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
    if curvature not in ("given", "bfgs", "hybrid"):
        raise InputError(f"curvature: expected 'given' or 'hybrid' (fun returns H) or 'bfgs' (fun returns (f, g)), "
                         f"got {curvature!r}")
    if curvature == "hybrid" and (isinstance(switch, bool) or not isinstance(switch, (int, np.integer)) or switch < 1):
        raise InputError(f"switch: expected a positive integer (iterations without a radius change), got {switch!r}")
    n = x.size
    obj = _Objective(fun, n, with_h=curvature != "bfgs")
    opts = dict(tols, max_iter=int(max_iter), delta_init=float(delta_init),
                switch=int(switch) if curvature == "hybrid" else None)
    x_start = _nudge_inward(x, lo, hi)
    trace, n_iter = [], 0
    while True:
        try:
            run = _Run(obj, x_start, lo, hi, opts, trace[:-1])  # a restart's first value is the last run's end
        except _StartFailed as e:
            return TrustResult(x_start, math.inf, None, None, "failed",
                               f"the objective could not be computed at the start: {e}", 0, obj.n_eval, obj.n_fail,
                               np.empty(0))
        flag = run.minimise()
        n_iter += run.iteration
        if flag == "EXCEEDED_BOUNDARY":
            run.f_trace.append(run.f)
            return _result(run, obj, "failed", _WORDS[flag], n_iter, flag)
        f_run, trace = (trace[-1] if trace else run.f_trace[0]), run.f_trace
        # BFGS: a stop on a small step or change may come from a curvature estimate grown stale (too large along
        # directions where f has since flattened); run again from the identity while that still decreases f
        if not (obj.bfgs and flag in ("FTOL", "XTOL", "DELTA_TOO_SMALL") and n_iter < max_iter
                and f_run - run.f > tols["fatol"] + tols["frtol"] * abs(run.f)):
            break
        x_start = _nudge_inward(run.x, lo, hi)
        opts["max_iter"] = int(max_iter) - n_iter
    status = {"FTOL": "converged", "XTOL": "converged", "GTOL": "converged", "MAXITER": "max_iter"}.get(flag, "failed")
    message = _WORDS.get(flag, f"fides exit flag {flag}").format(max_iter=max_iter)
    if flag == "DELTA_TOO_SMALL" or flag == "XTOL" and not run.accepted:
        # the radius collapsed on rejected (or failed) trial points: a stationary point only if the model says so
        dec = predicted_decrease(run.x, run.g, run.H, lo, hi)
        if dec <= stall_decrease:
            status = "converged"
            message = (f"no step decreases f any more and the model predicts at most {dec:.2g} further decrease "
                       f"(<= stall_decrease={stall_decrease:g}): a stationary point, flat to the objective's accuracy")
        else:
            status = "failed"
            if flag == "XTOL":
                message = "the step fell below xtol after rejected trial points (the objective may fail near x)"
            message += f"; the model still predicts a decrease of {dec:.3g}"
    return _result(run, obj, status, message, n_iter, flag)


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


def _result(run, obj, status, message, n_iter, stop):
    if obj.n_fail:
        message += (f"; the objective could not be computed at {obj.n_fail} of {obj.n_eval} points, "
                    f"the last time: {obj.last_failure}")
    return TrustResult(run.x.copy(), float(run.f), run.g.copy(), run.H.copy(), status, message, int(n_iter), obj.n_eval,
                       obj.n_fail, np.array(run.f_trace, dtype=float), stop)
