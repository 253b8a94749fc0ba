"""Levenberg-Marquardt with box bounds on a residual vector, for the trajectory estimators.

``evaluate(u) -> (r, J)`` (views of buffers that the next call may overwrite) or ``None``
when the residual cannot be computed at ``u`` (solver failure, log of a non-positive state);
such a trial point is a rejected step: the damping grows and the iteration goes on. An optional
``why()`` says why the last evaluation failed (e.g. the solver's status message); it is quoted in
the result's message when the start fails or the fit fails.

The step solves ``min ||r + J d||^2 + lam ||D d||^2`` through one SVD of the column-scaled
Jacobian per iteration (``D``: MINPACK's running maximum of the column norms), so every
damping value tried within an iteration costs one matrix-vector product; the damping follows
Nielsen's rule (``lam *= max(1/3, 1 - (2 rho - 1)^3)`` on success, doubling factor on
failure). Bounds are handled by projecting the trial point onto the box (a projected LM: the
predicted reduction uses the projected step). Only the columns in ``active`` move (the others
are held, e.g. the profiled parameter of a profile likelihood).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["LMResult", "levenberg_marquardt"]


@dataclass
class LMResult:
    """Outcome of :func:`levenberg_marquardt` (``r``, ``J`` are copies at ``u``)."""

    u: np.ndarray
    r: np.ndarray | None
    J: np.ndarray | None
    cost: float
    status: str  # "converged" | "max_iter" | "failed"
    message: str
    n_iter: int
    n_eval: int
    n_fail: int
    history: dict = field(default_factory=dict)


def levenberg_marquardt(evaluate, u0, lo, hi, active=None, *, max_iter=200, xtol=1e-10, ftol=1e-12,
                        gtol=1e-10, max_inner=40, stall_gtol=1e-5, record=True, why=None) -> LMResult:
    """Minimise ``0.5 ||r(u)||^2`` over ``lo <= u <= hi`` (only ``u[active]`` varies).

    Parameters
    ----------
    evaluate : callable
        ``evaluate(u) -> (r (n_rows,), J (n_rows, n_unknowns))`` or None on failure.
    u0 : ndarray (n_unknowns,)
        Start, inside the box.
    lo, hi : ndarray (n_unknowns,)
        Bounds (``-inf`` / ``inf`` for none).
    active : ndarray of bool (n_unknowns,), optional
        Unknowns that move (default all).
    max_iter : int
        Accepted-or-stalled iterations before status ``"max_iter"``.
    xtol, ftol, gtol : float
        Stop when the scaled step is ``<= xtol (||D u|| + xtol)``, when the actual and predicted
        relative reductions of the cost are both ``<= ftol``, or when the largest gradient
        cosine ``|g_j| / (||J_j|| ||r||)`` is ``<= gtol``.
    max_inner : int
        Damping increases within one iteration before the iteration stops (see ``stall_gtol``).
    stall_gtol : float
        When no step is acceptable, the point counts as converged if its gradient cosine is at
        most this (the cost is then flat to the solver's accuracy), else the status is ``"failed"``
        (best point kept).
    record : bool
        Keep the per-iteration history (cost, step, lam, grad, n_fail).
    why : callable, optional
        ``why() -> str or None``: why the last call of ``evaluate`` returned None (e.g.
        :attr:`ShootingProblem.failure <odeinfer.estimators._shooting.ShootingProblem.failure>`).
    """
    u = np.array(u0, dtype=float)
    act = np.ones(u.size, bool) if active is None else np.asarray(active, bool)
    ia = np.flatnonzero(act)
    hist = {"cost": [], "step": [], "lam": [], "grad": [], "n_fail": []}
    out = evaluate(u)
    n_eval, n_fail = 1, 0
    if out is None:
        reason = why() if why is not None else None
        return LMResult(u, None, None, math.inf, "failed", "the residual could not be computed at the start" +
                        (f": {reason}" if reason else " (solver failure)"), 0, 1, 1, hist)
    r, J = out[0].copy(), out[1].copy()
    cost = 0.5 * float(r @ r)
    if not math.isfinite(cost):
        return LMResult(u, r, J, math.inf, "failed", "the residual is not finite at the start", 0, 1, 1, hist)
    if ia.size == 0:
        return LMResult(u, r, J, cost, "converged", "nothing to optimise", 0, 1, 0, hist)
    d = None
    lam, nu = None, 2.0
    status, message = "max_iter", f"no convergence within max_iter={max_iter} iterations; best point kept"
    it = 0
    while it < max_iter:
        it += 1
        Ja = J[:, ia]
        cn = np.sqrt(np.einsum("ij,ij->j", Ja, Ja))
        d = np.where(cn > 0, cn, 1.0) if d is None else np.maximum(d, cn)
        g = Ja.T @ r
        rn = math.sqrt(2.0 * cost)
        gcos = float(np.max(np.abs(g) / d) / rn) if rn > 0 else 0.0
        if gcos <= gtol:
            status, message = "converged", f"gradient cosine {gcos:.2e} <= gtol"
            _rec(record, hist, cost, 0.0, 0.0 if lam is None else lam, gcos, n_fail)
            break
        U, s, Vt = np.linalg.svd(Ja / d, full_matrices=False)
        Ur = U.T @ r
        if lam is None:
            lam = 1e-3 * float(s[0] ** 2) if s.size and s[0] > 0 else 1e-3
        accepted = False
        stop = False
        for _ in range(max_inner):
            ds = -(Vt.T @ (s / (s * s + lam) * Ur))
            step = np.zeros_like(u)
            step[ia] = ds / d
            ut = np.clip(u + step, lo, hi)
            da = (ut - u)[ia]
            dnorm = float(np.linalg.norm(d * da))
            if dnorm <= xtol * (float(np.linalg.norm(d * u[ia])) + xtol):
                status, message = "converged", "step below xtol"
                stop = True
                break
            lin = r + Ja @ da
            pred = cost - 0.5 * float(lin @ lin)
            out = evaluate(ut)
            n_eval += 1
            if out is None or not np.all(np.isfinite(out[0])):
                n_fail += 1
                lam *= nu
                nu *= 2.0
                continue
            rt = out[0]
            ct = 0.5 * float(rt @ rt)
            rho = (cost - ct) / pred if pred > 0 else -1.0
            if ct < cost and rho > 1e-4:
                small_f = (cost - ct) <= ftol * cost and pred <= ftol * cost
                small_x = dnorm <= xtol * (float(np.linalg.norm(d * ut[ia])) + xtol)
                u = ut
                r, J = rt.copy(), out[1].copy()
                cost = ct
                lam *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                nu = 2.0
                accepted = True
                _rec(record, hist, cost, dnorm, lam, gcos, n_fail)
                if small_f or small_x:
                    status = "converged"
                    message = "relative cost reduction below ftol" if small_f else "step below xtol"
                    stop = True
                break
            lam *= nu
            nu *= 2.0
        if stop:
            break
        if not accepted:
            # near a stationary point the solver's rounding noise stops progress: that is convergence
            status = "converged" if gcos <= stall_gtol else "failed"
            message = (f"no acceptable step after {max_inner} damping increases (lam={lam:.3g}); "
                       f"gradient cosine {gcos:.2e}; best point kept")
            reason = why() if why is not None and n_fail and status == "failed" else None
            if reason:
                message += f"; the last trial point that could not be computed: {reason}"
            break
    return LMResult(u, r, J, cost, status, message, it, n_eval, n_fail,
                    {k: np.asarray(v, float) for k, v in hist.items()})


def _rec(record, hist, cost, step, lam, grad, n_fail):
    if record:
        hist["cost"].append(cost)
        hist["step"].append(step)
        hist["lam"].append(lam)
        hist["grad"].append(grad)
        hist["n_fail"].append(n_fail)
