"""Numerical core of the Newton / gradient-descent equation-error estimators.

Everything works from the normal equations of the residual ``E = f(t_r, x_r, a) - d_r``
accumulated by the numba kernel ``gm_normal_eq`` (``odeinfer/solve/kernels/residuals.py``):
``B = J^T J``, ``g = J^T E``, ``cost = 0.5 ||E||^2`` (paper eq. 29), and for the sandwich
covariance ``M = sum_r e_r^2 j_r j_r^T``. So the in-memory fit, a minibatch and a streamed
pass over chunks all share one code path, in O(rows of one block) memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from odeinfer.solve import abi
from odeinfer.solve.kernels import residuals as kernel_codes

__all__ = []

_RCOND = 1e-10


@dataclass
class Eval:
    """Normal equations at one parameter value (free parameters only)."""

    cost: float
    B: np.ndarray
    g: np.ndarray
    nrows: int
    nbad: int
    M: np.ndarray | None = None
    _cosine: float | None = field(default=None, repr=False, compare=False)

    @property
    def finite(self) -> bool:
        return self.nbad == 0 and math.isfinite(self.cost) and bool(np.isfinite(self.g).all())

    def grad_cosine(self) -> float:
        """``max_j |g_j| / (||J_j|| ||E||)`` (MINPACK's scale-free gradient test), computed once."""
        if self._cosine is None:
            self._cosine = self._grad_cosine()
        return self._cosine

    def _grad_cosine(self) -> float:
        if self.cost <= 0.0:
            return 0.0
        d = np.sqrt(np.diag(self.B))
        ok = d > 0
        if not ok.any():
            return 0.0
        return float((np.abs(self.g[ok]) / d[ok]).max() / math.sqrt(2.0 * self.cost))


class Accumulator:
    """Evaluate the normal equations of row blocks at free parameters ``theta``."""

    def __init__(self, compiled, n_states, n_params, free_index, fixed_full):
        from odeinfer.solve.shared import TieredKernel

        # the model's kernels, or the shared tier's while they compile (odeinfer.solve.shared)
        self.kernel = TieredKernel(compiled, compiled.module.gm_normal_eq)
        self._normal_eq = abi.normal_eq_call(self.kernel)
        self._descent = None  # gm_descent's kernel, made on first use (gradient descent only)
        self.residual_kernel = TieredKernel(compiled, compiled.module.gm_residuals)
        self.n = n_states
        self.m = n_params
        self.free = np.asarray(free_index, dtype=np.int64)
        self.base = np.asarray(fixed_full, dtype=float)
        self._all_free = np.array_equal(self.free, np.arange(n_params))
        self._lower = np.tril_indices(n_params, -1)
        self._ones = np.ones(n_states)

    def full_params(self, theta):
        p = self.base.copy()
        p[self.free] = theta
        return p

    def new(self):
        m = self.m
        return [np.zeros((m, m)), np.zeros(m), np.zeros((m, m)), np.zeros(3)]

    def add(self, state, p, block, w, meat):
        if block[0].shape[0]:
            self._normal_eq(block, p, w, bool(meat), state)

    def _symmetric_free(self, upper):
        """The symmetric matrix of the kernel's ``upper`` triangle, free rows and columns (-0.0 as +0.0)."""
        full = upper.copy()
        full[self._lower] = upper.T[self._lower]
        full += 0.0
        return full if self._all_free else full[np.ix_(self.free, self.free)]

    def finish(self, state, meat):
        jtj, jte, mm, acc = state
        M = self._symmetric_free(mm) if meat else None
        g = jte.copy() if self._all_free else jte[self.free]
        return Eval(0.5 * acc[0], self._symmetric_free(jtj), g, int(acc[1]), int(acc[2]), M)

    def evaluate(self, blocks, theta, w=None, meat=False):
        """Normal equations over an iterable of row blocks."""
        p = self.full_params(theta)
        w = self._ones if w is None else w
        st = self.new()
        for block in blocks:
            self.add(st, p, block, w, meat)
        return self.finish(st, meat)

    def descent(self, rows, theta, hist, info, *, max_iter, xtol, gtol, max_backtrack):
        """Run ``gm_descent`` on the rows ``(t, X, D)`` from the free parameters ``theta`` (overwritten)."""
        if self._descent is None:
            from odeinfer.solve.shared import TieredKernel

            self._descent = TieredKernel(self.kernel.compiled, self.kernel.compiled.module.gm_descent)
        t, X, D = rows
        return int(self._descent(t, X, D, self.base, self.free, self._ones, theta, int(max_iter), float(xtol),
                                 float(gtol), int(max_backtrack), hist, info))

    def residuals(self, block, theta):
        t, X, D = block
        E = np.empty_like(X)
        abi.call(self.residual_kernel, "gm_residuals", t=t, X=X, D=D, p=self.full_params(theta), E=E)
        return E


# --- linear algebra -------------------------------------------------------------------------
def scaled_eigh(B):
    """Eigen-decomposition of the Jacobi-scaled ``S B S`` (``S = diag(B)^-1/2``; zero columns kept)."""
    d = np.sqrt(np.clip(np.diag(B), 0.0, None))
    s = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    lam, V = np.linalg.eigh(B * np.outer(s, s))
    return lam, V, s


def pinv_solve(B, g, rcond=_RCOND):
    """Minimum-norm solution of ``B x = g`` in the scaled metric (pseudo-inverse)."""
    lam, V, s = scaled_eigh(B)
    top = lam.max() if lam.size and lam.max() > 0 else 0.0
    keep = lam > rcond * top if top > 0 else np.zeros_like(lam, bool)
    inv = np.where(keep, 1.0 / np.where(keep, lam, 1.0), 0.0)
    return s * (V @ (inv * (V.T @ (s * g))))


def rank_info(B, rcond=_RCOND):
    """(rank, condition number of the scaled matrix, null-space loadings per parameter)."""
    lam, V, s = scaled_eigh(B)
    top = lam.max() if lam.size and lam.max() > 0 else 0.0
    keep = lam > rcond * top if top > 0 else np.zeros_like(lam, bool)
    rank = int(keep.sum())
    cond = float(top / lam[keep].min()) if rank else float("inf")
    zero_col = s == 0
    load = np.abs(V[:, ~keep]).max(axis=1) if (~keep).any() else np.zeros(len(s))
    return rank, cond, (load > 1e-6) | zero_col


def sandwich(ev: Eval, rcond=_RCOND):
    """``B^-1 M B^-1`` (heteroscedasticity-robust, HC0); NaN rows/cols for unidentifiable parameters."""
    rank, cond, bad = rank_info(ev.B, rcond)
    k = ev.B.shape[0]
    Binv = np.column_stack([pinv_solve(ev.B, e, rcond) for e in np.eye(k)]) if k else np.zeros((0, 0))
    cov = Binv @ ev.M @ Binv
    cov = 0.5 * (cov + cov.T)
    cov[bad, :] = np.nan
    cov[:, bad] = np.nan
    return cov, rank, cond, bad


def rel_step(delta, theta, xtol):
    return float(np.abs(delta).max()) <= xtol * (float(np.abs(theta).max()) + xtol) if delta.size else True


# --- algorithms --------------------------------------------------------------------------------
@dataclass
class Outcome:
    theta: np.ndarray
    ev: Eval
    status: str
    message: str
    n_iter: int
    history: dict


def _hist(ev):
    """Iteration history, starting with the record of the start values."""
    return {"cost": [ev.cost], "step": [0.0], "grad": [ev.grad_cosine()]}


def newton(evaluate, theta, *, damping, max_iter, xtol, gtol, rcond=_RCOND, lam0=1.0):
    """Gauss-Newton (the paper's "NR", eq. 16 with the transpose), optionally Levenberg-Marquardt.

    ``evaluate(theta) -> Eval``. ``damping="none"``: ``a <- a - pinv(J^T J) J^T E`` (the paper);
    ``"lm"``: Marquardt-scaled damping ``(B + lam diag B) delta = -g`` with Nielsen's update of
    lambda, starting at ``lam0``. A cautious ``lam0 = 1`` matters for models nonlinear in ``a``:
    with ``lam0 = 1e-3`` the first step from the activator-inhibitor guess 5 jumps across the
    pole of ``f1`` (``1 + x1^2 + a2 x2 = 0``) into a spurious basin (9 of 80 checked fits).
    """
    ev = evaluate(theta)
    h = _hist(ev)
    if not ev.finite:
        return Outcome(theta, ev, "failed", "residual not finite at the start values", 0, h)
    lam, nu = None, 2.0
    for it in range(1, max_iter + 1):
        if ev.grad_cosine() <= gtol:
            return Outcome(theta, ev, "converged", f"gradient test: cosine <= gtol = {gtol:g}", it - 1, h)
        if damping == "none":
            delta = -pinv_solve(ev.B, ev.g, rcond)
            trial = evaluate(theta + delta)
            if not trial.finite or not np.all(np.isfinite(theta + delta)):
                return Outcome(theta + delta, trial, "failed", f"diverged at iteration {it} "
                               "(non-finite residual); use damping='lm'", it, h)
        else:
            dg = np.diag(ev.B).copy()
            dg[dg <= 0] = max(dg.max(), 1.0) * 1e-12 if dg.size else 1.0
            if lam is None:
                lam = lam0
            while True:
                delta = np.linalg.solve(ev.B + lam * np.diag(dg), -ev.g)
                trial = evaluate(theta + delta)
                pred = -(ev.g @ delta + 0.5 * delta @ ev.B @ delta)
                if trial.finite and trial.cost <= ev.cost:
                    rho = (ev.cost - trial.cost) / pred if pred > 0 else 1.0
                    lam *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
                    nu = 2.0
                    break
                lam *= nu
                nu *= 2.0
                if lam > 1e16:
                    stalled = rel_step(delta, theta, xtol) or abs(ev.cost - trial.cost) <= 1e-14 * ev.cost
                    status = "converged" if stalled else "failed"
                    return Outcome(theta, ev, status, "no decrease of the cost possible (damping at its limit)",
                                   it - 1, h)
        theta = theta + delta
        ev = trial
        h["cost"].append(ev.cost)
        h["step"].append(float(np.abs(delta).max()))
        h["grad"].append(ev.grad_cosine())
        if rel_step(delta, theta, xtol):
            return Outcome(theta, ev, "converged", f"relative step <= xtol = {xtol:g}", it, h)
    if ev.grad_cosine() <= gtol:
        return Outcome(theta, ev, "converged", f"gradient test: cosine <= gtol = {gtol:g}", max_iter, h)
    return Outcome(theta, ev, "max_iter", f"max_iter = {max_iter} reached", max_iter, h)


def cauchy_step(g, B):
    """Paper eq. (31): ``eta = ||v||^2 / ||J v||^2`` with ``v = J^T E``, via ``||J v||^2 = v^T B v``."""
    vbv = float(g @ B @ g)
    return float(g @ g) / vbv if vbv > 0 else 0.0


def gradient_descent(evaluate, theta, *, max_iter, xtol, gtol, max_backtrack=50):
    """Steepest descent with the exact Cauchy step (paper eqs. 30-31) and a backtracking guard."""
    ev = evaluate(theta)
    h = _hist(ev)
    if not ev.finite:
        return Outcome(theta, ev, "failed", "residual not finite at the start values", 0, h)
    for it in range(1, max_iter + 1):
        if ev.grad_cosine() <= gtol:
            return Outcome(theta, ev, "converged", f"gradient test: cosine <= gtol = {gtol:g}", it - 1, h)
        eta = cauchy_step(ev.g, ev.B)
        if eta == 0.0:
            return Outcome(theta, ev, "converged", "zero gradient", it - 1, h)
        for _ in range(max_backtrack):
            delta = -eta * ev.g
            trial = evaluate(theta + delta)
            # slack: near the minimum the decrease of eq. (32) is below the rounding of the cost
            if trial.finite and trial.cost <= ev.cost * (1.0 + 1e-13):
                break
            eta *= 0.5
        else:
            status = "converged" if rel_step(delta, theta, xtol) else "failed"
            return Outcome(theta, ev, status, "no decrease along the gradient (backtracking exhausted)", it - 1, h)
        theta = theta + delta
        ev = trial
        h["cost"].append(ev.cost)
        h["step"].append(float(np.abs(delta).max()))
        h["grad"].append(ev.grad_cosine())
        if rel_step(delta, theta, xtol):
            return Outcome(theta, ev, "converged", f"relative step <= xtol = {xtol:g}", it, h)
    return Outcome(theta, ev, "max_iter", f"max_iter = {max_iter} reached", max_iter, h)


#: gm_descent's return codes (kernel_codes.DESCENT_*) for gradient descent: status, message
_DESCENT_END = {
    kernel_codes.DESCENT_GTOL: ("converged", "gradient test: cosine <= gtol = {gtol:g}"),
    kernel_codes.DESCENT_ZERO: ("converged", "zero gradient"),
    kernel_codes.DESCENT_XTOL: ("converged", "relative step <= xtol = {xtol:g}"),
    kernel_codes.DESCENT_STALLED: ("converged", "no decrease along the gradient (backtracking exhausted)"),
    kernel_codes.DESCENT_NO_DECREASE: ("failed", "no decrease along the gradient (backtracking exhausted)"),
    kernel_codes.DESCENT_MAX_ITER: ("max_iter", "max_iter = {max_iter} reached"),
    kernel_codes.DESCENT_START: ("failed", "residual not finite at the start values"),
}
#: ... and for the stochastic gradient's full-data epochs (max_iter / max_epochs: said by the caller)
_EVERY_END = {kernel_codes.DESCENT_GTOL: ("converged", "full-data gradient cosine <= gtol = {gtol:g} after epoch {n}"),
              kernel_codes.DESCENT_XTOL: ("converged", "relative change over epoch {n} <= xtol = {xtol:g}")}
#: where the Python loop takes a path of its own: it runs instead
_DESCENT_PYTHON = (kernel_codes.DESCENT_START, kernel_codes.DESCENT_DIVERGED, kernel_codes.DESCENT_NOT_FINITE)


def _descent(acc, blocks, theta, max_iter, xtol, gtol, max_backtrack):
    """``gm_descent`` over the concatenated row ``blocks`` (the sums in the blocks' order): (code, theta, history
    (k, 3), info)."""
    rows = tuple(np.ascontiguousarray(np.concatenate([b[i] for b in blocks]), dtype=float) for i in range(3))
    theta = np.array(theta, dtype=float)
    hist = np.empty((max_iter + 1, 3))
    info = np.zeros(3, dtype=np.int64)
    code = acc.descent(rows, theta, hist, info, max_iter=max_iter, xtol=xtol, gtol=gtol, max_backtrack=max_backtrack)
    return code, theta, hist[:int(info[1])], info


def gradient_descent_rows(acc, blocks, theta, *, max_iter, xtol, gtol, max_backtrack=50):
    """:func:`gradient_descent` on in-memory row ``blocks``, its loop in one call of the kernel ``gm_descent``:
    the same steps, tests, statuses and history, with its sums in the kernel's order (equal to rounding)."""
    code, theta, hist, info = _descent(acc, blocks, theta, max_iter, xtol, gtol, max_backtrack)
    status, words = _DESCENT_END[code]
    h = {"cost": hist[:, 0].tolist(), "step": hist[:, 1].tolist(), "grad": hist[:, 2].tolist()}
    return Outcome(theta, acc.evaluate(blocks, theta), status, words.format(gtol=gtol, xtol=xtol, max_iter=max_iter),
                   int(info[0]), h)


def stochastic_gradient_rows(acc, blocks, theta, *, max_iter, max_epochs, xtol, gtol, python):
    """:func:`stochastic` for the stochastic gradient with every equation in every step and all the in-memory
    rows in one batch (one Cauchy step per epoch, no step decay), its loop in ``gm_descent`` (``max_backtrack =
    0``): the same steps, tests, statuses and history. Where the Python loop takes a path of its own (normal
    equations not finite at a point, a step leaving the finite numbers, no usable rows) it runs instead:
    ``python()``."""
    if not sum(b[0].shape[0] for b in blocks):
        return python()
    code, theta, hist, info = _descent(acc, blocks, theta, min(max_iter, max_epochs), xtol, gtol, 0)
    if code in _DESCENT_PYTHON or info[2] == 0:
        return python()
    n = int(info[0])
    if code in _EVERY_END:
        status, words = _EVERY_END[code]
        message = words.format(gtol=gtol, xtol=xtol, n=n)
    else:
        status, message = "max_iter", (f"max_iter = {max_iter} reached" if max_iter <= max_epochs else
                                       f"max_epochs = {max_epochs} reached")
    h = {"cost": hist[1:, 0].tolist(), "step": hist[1:, 1].tolist(), "grad": hist[1:, 2].tolist(),
         "batch_cost": (hist[:-1, 0] / int(info[2])).tolist()}
    return Outcome(theta, acc.evaluate(blocks, theta), status, message, n, h)


def stochastic(acc, batches_per_epoch, full_eval, theta, *, method, n_states, n_equations, max_epochs,
               max_iter, xtol, gtol, decay, rng, rcond=_RCOND, full_batches=False):
    """Stochastic Newton (SNR, eq. 17) / gradient (SGD, eq. 33) over minibatches and equation subsets.

    ``batches_per_epoch()`` yields, per epoch, minibatches (lists of row blocks).
    ``full_eval(theta)`` evaluates all data (or returns None when the source is one-shot).
    Each step draws a uniformly random ``n_equations``-subset of the state equations
    (paper, §2.2) and uses the pseudo-inverse (SNR) or the Cauchy step (SGD) on the selected
    rows, scaled by ``alpha_k = 1 / (1 + k / decay)`` (1 when ``decay`` is None).
    ``full_batches``: every batch is all the data, in ``full_eval``'s blocks; with every equation
    selected, a step from the point ``full_eval`` just evaluated reuses that evaluation (the same sums).
    """
    h = {"cost": [], "step": [], "grad": [], "batch_cost": []}
    k = 0
    n_iter = 0
    status, message = "max_iter", f"max_epochs = {max_epochs} reached"
    ev = None
    rows_seen = 0
    reuse = full_batches and n_equations >= n_states
    for epoch in range(max_epochs):
        start_epoch = theta.copy()
        touched = np.zeros(theta.size, bool)
        for batch in batches_per_epoch():
            w = np.zeros(n_states)
            if n_equations < n_states:
                w[rng.choice(n_states, n_equations, replace=False)] = 1.0
            else:
                w[:] = 1.0
            if reuse and ev is not None and np.array_equal(theta, ev_at):
                bev = ev
            else:
                bev = acc.evaluate(batch, theta, w)
            rows_seen += bev.nrows
            if bev.nrows == 0 or not bev.finite:
                k += 1
                continue
            if method == "newton":
                delta = -pinv_solve(bev.B, bev.g, rcond)
            else:
                delta = -cauchy_step(bev.g, bev.B) * bev.g
            alpha = 1.0 if decay is None else 1.0 / (1.0 + k / decay)
            theta = theta + alpha * delta
            touched |= np.diag(bev.B) > 0
            h["batch_cost"].append(bev.cost / max(bev.nrows, 1))
            k += 1
            n_iter += 1
            if not np.all(np.isfinite(theta)):
                return Outcome(theta, bev, "failed", f"diverged at iteration {n_iter}", n_iter, h)
            if n_iter >= max_iter:
                break
        if rows_seen == 0:
            return Outcome(theta, None, "failed", "no usable rows in the data", n_iter, h)
        ev, ev_at = full_eval(theta), theta.copy()
        if ev is None:
            status, message = "max_iter", "one pass over a one-shot iterator: convergence not checked"
            break
        h["cost"].append(ev.cost)
        h["grad"].append(ev.grad_cosine())
        h["step"].append(float(np.max(np.abs(theta - start_epoch))))
        if not ev.finite:  # its gradient cosine would read 0: "converged" at a point where nothing is computable
            status = "failed"
            message = ("residual not finite at the start values" if n_iter == 0 else
                       f"residual not finite at the point reached after epoch {epoch + 1}")
            break
        if ev.grad_cosine() <= gtol:
            status, message = "converged", f"full-data gradient cosine <= gtol = {gtol:g} after epoch {epoch + 1}"
            break
        if touched.all() and rel_step(theta - start_epoch, theta, xtol):
            status, message = "converged", f"relative change over epoch {epoch + 1} <= xtol = {xtol:g}"
            break
        if n_iter >= max_iter:
            status, message = "max_iter", f"max_iter = {max_iter} reached"
            break
    return Outcome(theta, ev, status, message, n_iter, h)
