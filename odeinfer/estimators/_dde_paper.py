"""Paper mode of :class:`~odeinfer.estimators.adjoint_dde.AdjointDDE`: DDE-Find's integral loss
against a cubic-spline target of the data, minimised by Adam with cosine annealing, gradients
from the continuous adjoint (R. Stephany, DDE-Find, sections 3-4 and 6; spec seed-002 sec. 1.6),
with the corrections of the spec: the delay gradient includes the history term (sec. 1.4), float64,
the loss is the exact integral over ``[t0, T]``, and a delay kept at its lower bound stays
tracked by the optimiser (projection, not the paper code's re-created tensor)."""

from __future__ import annotations

import math

import numpy as np

from odeinfer.errors import DataError, InputError
from odeinfer.model import History
from odeinfer.solve.abi import Info, Status, status_message

__all__ = ["IntegralLoss", "L1IntegralLoss", "cosine_lr", "run_paper"]


def cosine_lr(lr, lr_min, epoch, epochs):
    """PyTorch ``CosineAnnealingLR`` with ``T_max = epochs``: the rate of epoch ``epoch`` (0-based)."""
    return lr_min + 0.5 * (lr - lr_min) * (1.0 + math.cos(math.pi * epoch / epochs))


def _spline_target(S, smoothing):
    """``(t (M,), target History, weights (n_states,))``: the spline of the observations (weight 1 per
    observed state, 0 for unobserved states)."""
    data, model = S.data, S.model
    t = np.asarray(data.t, float)
    if abs(t[0] - S.t0) > 1e-12 * max(1.0, abs(S.t0)):
        raise DataError(f"data: mode='paper' integrates the loss against a spline of the data from t0 = "
                        f"{S.t0:g}, but the first observation is at {t[0]:g}; give data at t0 or use "
                        "mode='lm' (residuals at the observation times)")
    y = np.zeros((t.size, model.n_states))
    w = np.zeros(model.n_states)
    for k, s in enumerate(data.states):
        col = data.y[:, k]
        if not np.all(np.isfinite(col)):
            raise DataError(f"data: mode='paper' splines each observed state through every time, but "
                            f"{s!r} has missing values; drop those times or use mode='lm'")
        j = model.states.index(s)
        y[:, j], w[j] = col, 1.0
    return t, History.from_data(t, y, smoothing=smoothing), w


class IntegralLoss:
    """``L(u) = int_{t0}^{T} sum_i w_i (x_i(t) - target_i(t))^2 dt`` and ``dL/du`` by the adjoint.

    The target is the interpolating (not-a-knot) cubic spline of the observations (DDE-Find's
    target; ``smoothing`` = a smoothing-spline penalty instead); unobserved states get weight 0.
    One forward solve (dense output) and one backward adjoint solve per call, in numba
    (``dde_adjoint_gradient``), buffers reused across calls.
    """

    def __init__(self, S, *, smoothing=None, nsub=32, paper_tau_gradient=False):
        from odeinfer.solve import Problem, abi, bind
        from odeinfer.solve.shared import TieredKernel

        model = S.model
        t, self.target, w = _spline_target(S, smoothing)
        self.weights, self.nsub, self.paper = w, int(nsub), bool(paper_tau_gradient)
        self.S, self.t_end = S, float(t[-1])
        self.solver = bind(Problem(S.compiled, [self.t_end], history=S.history, t0=S.t0), solver=S.solver_value)
        hkind, _, hb, hc = S.history.kernel_arrays(S.t0)
        # the model's kernel, or the shared one while it compiles (odeinfer.solve.shared)
        kernel = TieredKernel(S.compiled, S.compiled.module.dde_adjoint_gradient)
        # the target's breaks and coefficients as writable copies (abi: one kernel signature)
        self._run = abi.dde_adjoint_gradient_call(kernel, S.t0, self.t_end, hkind, hb, hc,
                                                  np.array(self.target.breaks),
                                                  np.array(self.target.coef), self.weights, self.paper)
        self._grad = np.empty(model.n_params + S.history.n_params + 1)
        self._work = np.empty(abi.dde_adjoint_work_size(model, S.history.n_params))
        self._nodes = None

    def full(self, p, phi):
        """``(loss, grad (n_params + n_history_params,))`` at full parameter vectors, or None."""
        S = self.S
        _, _, status = self.solver(p, phi)
        if status != Status.SUCCESS:
            return None
        nbuf = int(self.solver.info[Info.N_STORED])
        tau_min = min(p[j] for j in S.model.delay_indices)
        nnode = int(np.ceil((self.t_end - S.t0) / (tau_min / self.nsub) - 1e-9)) + 1
        if self._nodes is None or self._nodes[0].shape[0] != nnode:
            n = S.model.n_states
            self._nodes = (np.zeros((nnode, n)), np.zeros((nnode, n)))
        status = self._run(p, phi, self.solver.buf, nbuf, self.nsub, self._grad, self._nodes[0], self._nodes[1],
                           self._work)
        if status != Status.SUCCESS:
            return None
        return float(self._grad[-1]), self._grad[:-1].copy()

    def __call__(self, u):
        """``(loss, grad (k,))`` w.r.t. the unknowns of the fit, or None on a solver failure."""
        p, phi = self.S.split(u)
        out = self.full(p, phi)
        if out is None:
            return None
        return out[0], out[1][self.S.cols()]


class L1IntegralLoss:
    """``L(u) = int_{t0}^{T} sum_i w_i |x_i(t) - target_i(t)| dt`` and its gradient: DDE-Find's
    l1 loss (Stephany 2024, sec. 6.5, the HIV experiment; the paper-era script of the authors'
    code uses it for every experiment, spec seed-002 sec. 1.2).

    Same spline target and weights as :class:`IntegralLoss`. The integral is the composite
    trapezoid rule on ``n_sub`` equal sub-intervals of every interval between observations;
    the gradient ``sum_k c_k sum_i w_i sign(r_i(t_k)) dx_i(t_k)/du`` is exact for that
    quadrature (forward sensitivities of the DDE solver at the nodes; l1 is not differentiable
    where ``r_i = 0``, where the sign's subgradient 0 is used, as ``torch.abs`` does).

    Parameters
    ----------
    S : DDESetup
    smoothing : float or None, default None
        As in :class:`IntegralLoss`.
    n_sub : int, default 20
        Quadrature sub-intervals per observation interval.
    """

    def __init__(self, S, *, smoothing=None, n_sub=20):
        from odeinfer.solve import Forward, Problem, bind

        if not isinstance(n_sub, (int, np.integer)) or isinstance(n_sub, bool) or n_sub < 1:
            raise InputError(f"n_sub: expected an int >= 1 (quadrature sub-intervals per observation interval), "
                             f"got {n_sub!r}")
        t, target, w = _spline_target(S, smoothing)
        frac = np.arange(n_sub) / n_sub
        tq = np.concatenate([(t[:-1, None] + np.diff(t)[:, None] * frac[None, :]).ravel(), t[-1:]])
        c = np.zeros(tq.size)
        hq = np.diff(tq)
        c[:-1] += 0.5 * hq
        c[1:] += 0.5 * hq
        self.S, self.target, self.weights, self.t_nodes, self.c = S, target, w, tq, c
        self._tgt = target(tq)
        self._cols = S.cols()
        self.solver = bind(Problem(S.compiled, tq, history=S.history, t0=S.t0), solver=S.solver_value,
                           gradient=Forward())

    def __call__(self, u):
        """``(loss, grad (k,))`` w.r.t. the unknowns of the fit, or None on a solver failure."""
        p, phi = self.S.split(u)
        y, sens, status = self.solver(p, phi)
        if status != Status.SUCCESS:
            return None
        r = y - self._tgt
        loss = float(self.c @ (np.abs(r) @ self.weights))
        g = np.einsum("k,ki,kij->j", self.c, np.sign(r) * self.weights, sens[:, :, self._cols])
        return loss, g


def run_paper(est, S, t_start, loss="l2", n_sub=20):
    """DDE-Find's Adam loop on the integral loss.

    ``loss="l2"`` (the paper's default): squared 2-norm, adjoint gradient (:class:`IntegralLoss`);
    ``loss="l1"`` (the paper's HIV experiment): :class:`L1IntegralLoss` with ``n_sub``
    quadrature sub-intervals per observation interval.
    """
    from odeinfer.estimators._dde_lm import finish

    missing = [S.names[j] for j in range(S.k) if not math.isfinite(S.u0[j])]
    if missing:
        raise InputError(f"start: mode='paper' starts Adam from given values; no starting value for {missing}")
    if loss == "l1":
        f = L1IntegralLoss(S, smoothing=est.target_smoothing, n_sub=n_sub)
    elif loss == "l2":
        f = IntegralLoss(S, smoothing=est.target_smoothing, nsub=est.nsub,
                         paper_tau_gradient=est.tau_gradient == "paper")
    else:
        raise InputError(f"loss: expected 'l2' (squared 2-norm, the paper's default) or 'l1' (the paper's HIV "
                         f"experiment), got {loss!r}")
    u = S.u0.copy()
    b1, b2 = est.betas
    m, v = np.zeros(S.k), np.zeros(S.k)
    gmax = np.zeros(S.k)
    lr_min = est.lr * est.lr_min_ratio
    hist = {"cost": [], "grad_norm": [], "lr": []}
    status, message = "converged", f"completed the schedule of {est.epochs} Adam epochs (the paper's fixed budget)"
    for e in range(est.epochs):
        out = f(u)
        if out is None or not (math.isfinite(out[0]) and np.all(np.isfinite(out[1]))):
            status = "failed"
            message = (f"the forward or adjoint solve failed at epoch {e} ({status_message(Status.MAX_STEPS)} or a "
                       "non-finite value); the last good point is kept")
            break
        val, g = out
        lr_e = cosine_lr(est.lr, lr_min, e, est.epochs)
        hist["cost"].append(val)
        hist["grad_norm"].append(float(np.linalg.norm(g)))
        hist["lr"].append(lr_e)
        gmax = np.maximum(gmax, np.abs(g))
        if val < est.loss_tol:
            message = f"integral loss {val:.3g} < loss_tol = {est.loss_tol:g} at epoch {e} (the paper's stop rule)"
            break
        m = b1 * m + (1.0 - b1) * g
        v = b2 * v + (1.0 - b2) * g * g
        mh = m / (1.0 - b1 ** (e + 1))
        vh = v / (1.0 - b2 ** (e + 1))
        u = np.clip(u - lr_e * mh / (np.sqrt(vh) + est.eps), S.lo, S.hi)
    out = f(u)
    final_loss = out[0] if out is not None else math.nan
    zero = [n for n, gm in zip(S.names, gmax) if gm == 0.0]
    extras = {"integral_loss": final_loss, "loss": loss, "zero_gradient": zero, "epochs_run": len(hist["cost"]),
              "tau_gradient": est.tau_gradient,
              "covariance": "not computed in mode='paper' (the paper reports none); refit with mode='lm' "
                            "from this estimate for Gauss-Newton standard errors"}
    mode_warn = []
    if zero:
        mode_warn.append(f"{zero}: the adjoint gradient was exactly zero in every epoch, so Adam never moved them "
                         "(DDE-Find sec. 7.4): they are not identifiable from the integral loss and keep their "
                         "starting values")
    history = {k: np.asarray(v_, float) for k, v_ in hist.items()}
    return finish(est, S, u, t_start, status=status, message=message, hists=[], extras=extras,
                  mode_warnings=mode_warn, covariance=False, history=history)
