"""Two-step gradient matching (Varah 1982; Brunel 2008).

J. M. Varah (1982), "A spline least squares method for numerical parameter estimation in
differential equations", *SIAM J. Sci. Stat. Comput.* 3:28-46; N. J-B. Brunel (2008),
"Parameter estimation of ODE's via nonparametric estimators", *Electron. J. Statist.*
2:1242-1267 (the weight vanishing at both ends gives the sqrt(n) rate). Baseline "TS" of
Brunel, Clairon & d'Alché-Buc (2014), JASA 109:173-185 (spec seed-001 §2.1).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from odeinfer.errors import InputError
from odeinfer.estimators._log_proxy import fit_proxies
from odeinfer.estimators._coverage import CoverageWarning, coverage_note
from odeinfer.estimators._quadrature import gauss_grid, node_model, solve_whitened
from odeinfer.estimators._state_maps import state_inputs
from odeinfer.estimators._trajectory_check import record_trajectory_check
from odeinfer.estimators.base import EstimationError, Estimator, IdentifiabilityWarning, make_estimate, prepare
from odeinfer.smooth import SplineSmoother
from odeinfer.smooth._blas import single_threaded_blas

__all__ = ["GradientMatching"]


@dataclass(frozen=True)
class GradientMatching(Estimator):
    """Two-step gradient matching: ``min_theta int |x_hat'(t) - f(t, x_hat(t), theta)|^2 w(t) dt``.

    ``x_hat`` is the regression-spline proxy of every state (:class:`~odeinfer.smooth.SplineSmoother`,
    GCV); ``w`` is the trapezoid ``min(1, (t - T0)/delta, (T1 - t)/delta)``, zero at both ends.
    Closed form when ``f`` is affine in the free parameters, variable projection when only
    some are, trust-region least squares otherwise, with the exact Jacobian.

    Parameters
    ----------
    weight_width : float, default 0.1
        ``delta`` as a fraction of the data span, in (0, 0.5].
    smoother : SplineSmoother, default SplineSmoother()
    constrain_x0 : bool, default True
        With ``x0`` given, constrain the proxy to ``x(t0) = x0``.
    n_gauss : int, default 8
    max_nfev : int, default 200

    Notes
    -----
    Covariance by the delta method through the spline coefficients: the estimating equation
    ``g(theta, c) = J' r = 0`` gives ``d theta / d c_k = -(J'J)^-1 dg/dc_k`` (implicit function
    theorem; ``J'J`` is the exact Hessian when ``f`` is affine in theta, its Gauss-Newton
    approximation otherwise), and ``V = sum_k (d theta/d c_k) V(c_k) (d theta/d c_k)'`` — the same
    construction as the orthogonal conditions' ``V_e``. Free switching parameters (sharp steps
    with an unknown location) are not supported: the proxy's derivative cannot locate them
    (the paper's TS "fails" there); fix them or use :class:`OrthogonalConditions`.

    Noise model: with ``noise="log"`` the proxy is ``exp`` of the spline of ``log y`` (positive;
    coefficient covariance and the reported ``sigma`` on the log scale, see
    :mod:`odeinfer.estimators._log_proxy`); observations ``<= 0`` are then refused. A model with
    observables that are invertible functions of one state each (``"log(x)"``, ``"2.5*x + 1"``, normal
    noise on the lin/log/log10 scale) is smoothed on each observable's noise scale and mapped back to
    the state (:mod:`odeinfer.estimators._state_maps`); other observables are refused, naming them.

    Examples
    --------
    >>> import numpy as np, odeinfer as oi
    >>> z = oi.zoo.alpha_pinene()
    >>> data, _ = oi.simulate(z.model, z.params, z.x0, np.linspace(0, 100, 201)[1:], t0=0.0,
    ...                       noise=3.0, rng=1)
    >>> GradientMatching().fit(z.model, data).converged
    True
    """

    weight_width: float = 0.1
    smoother: SplineSmoother = field(default_factory=SplineSmoother)
    constrain_x0: bool = True
    n_gauss: int = 8
    max_nfev: int = 200

    def __post_init__(self):
        if not (isinstance(self.weight_width, (int, float)) and 0 < self.weight_width <= 0.5):
            raise InputError(f"weight_width: expected a fraction of the data span in (0, 0.5], got {self.weight_width!r}")
        if not isinstance(self.smoother, SplineSmoother):
            raise InputError(f"smoother: expected an odeinfer.smooth.SplineSmoother, got {type(self.smoother).__name__}")

    def _grid(self, nm, pr, p):
        T0, T1 = pr.domain
        delta = self.weight_width * (T1 - T0)
        br = [pr.knots_all, np.array([T0 + delta, T1 - delta]), np.array([s.location(p) for s in nm.steps])]
        T, w = gauss_grid(np.concatenate(br), T0, T1, (T1 - T0) / 40, self.n_gauss)
        wt = np.minimum(1.0, np.minimum((T - T0) / delta, (T1 - T) / delta))
        keep = wt > 0
        T, w = T[keep], w[keep] * wt[keep]
        return T, np.sqrt(w), pr(T), pr(T, 1), [f.basis(T) for f in pr.fits], [f.basis(T, 1) for f in pr.fits]

    def fit(self, model, data, *, start=None, fixed=None, x0=None, proxy=None):
        """Estimate the free parameters of ``model`` from fully observed ``data``.

        Parameters
        ----------
        model : Model
        data : Data or Experiments
        start : dict, array-like or Estimate, optional
            Needed only for parameters that enter ``f`` nonlinearly.
        fixed : dict, optional
        x0 : dict, optional
            Known initial state (constrains the proxy).
        proxy : SplineProxy or list of SplineProxy, optional

        Returns
        -------
        Estimate
            ``residuals``: the weighted derivative mismatch at the quadrature nodes;
            ``extras``: ``n_basis``, ``gcv``, ``condition_number``, ``rank``, ``linear_params``,
            ``trajectory_check`` (one solve at the estimate: RMS misfit / noise measured from the data; a :class:`~odeinfer.errors.BiasWarning` and a ``warnings`` entry when far, see :mod:`odeinfer.estimators._trajectory_check`).
        """
        with single_threaded_blas():
            return self._fit(model, data, start=start, fixed=fixed, x0=x0, proxy=proxy)

    def _fit(self, model, data, *, start, fixed, x0, proxy):
        t_start = time.perf_counter()
        if getattr(model, "delays", ()):
            raise EstimationError(
                f"model: {getattr(model, 'name', 'model')!r} has delays {list(model.delays)}; gradient matching "
                "does not handle lagged states x(t - tau). Use oi.OrthogonalConditions (lagged states from the same "
                "spline proxy, no history needed) or oi.AdjointDDE (trajectory fit)")
        view, model, data, fixed, start = state_inputs(model, data, fixed, start, "GradientMatching")
        maps = None if view is None else view.mapped
        prob = prepare(model, data, start=start, fixed=fixed, x0=x0, require_all_observed=True,
                       estimator="GradientMatching")
        nm = node_model(model)
        free_switch = [q for q in model.switching_params if q in prob.free] + sorted(nm.piecewise_params() & set(prob.free))
        if free_switch:
            raise EstimationError(
                f"fixed: {free_switch} move a sharp step of the vector field; gradient matching cannot estimate a "
                "switching point (the proxy derivative is badly estimated there). Fix it (fixed=...) or use "
                "oi.OrthogonalConditions")
        if proxy is None:
            cons = prob.x0 if (prob.x0 is not None and self.constrain_x0) else None
            proxies = fit_proxies(self.smoother, model, prob.experiments, cons, maps)
        else:
            proxies = list(proxy) if isinstance(proxy, (list, tuple)) else [proxy]
        start_full = prob.full_params(prob.start)
        fi = prob.free_index
        grids = [self._grid(nm, pr, np.nan_to_num(start_full)) for pr in proxies]

        def full(th):
            p = start_full.copy()
            p[fi] = th
            return p

        def resid(th):
            p = full(th)
            return np.concatenate([(s[:, None] * (dX - nm.f(T, X, p))).ravel() for T, s, X, dX, _, _ in grids])

        def jac(th):
            p = full(th)
            return np.vstack([(-s[:, None, None] * nm.jac_p(T, X, p)).reshape(-1, model.n_params)
                              for T, s, X, dX, _, _ in grids])[:, fi]

        lin = list(nm.linear_params(prob.free, prob.fixed))
        lin_idx = [prob.free.index(n) for n in lin]
        nonlin_idx = [j for j in range(len(fi)) if j not in lin_idx]
        missing = [prob.free[j] for j in nonlin_idx if not np.isfinite(prob.start[j])]
        if missing:
            raise EstimationError(f"start: no starting value for {missing}, which enter the model nonlinearly; "
                                  "pass start={name: value}")
        N = sum(g[0].size for g in grids) * model.n_states
        sol = solve_whitened(resid, jac, np.nan_to_num(prob.start), lin_idx, nonlin_idx, np.eye(N),
                             max_nfev=self.max_nfev)
        th = sol.theta
        J = jac(th)
        sv = np.linalg.svd(J, compute_uv=False)
        cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
        rank = int((sv > sv[0] * max(J.shape) * np.finfo(float).eps * 1e3).sum()) if sv[0] > 0 else 0
        warn = []
        if rank < th.size or cond > 1e10:
            msg = (f"the gradient-matching Jacobian has rank {rank} of {th.size}, condition number {cond:.3g}: some of "
                   f"{list(prob.free)} are not identifiable from these data")
            warnings.warn(msg, IdentifiabilityWarning, stacklevel=3)
            warn.append(msg)
            cov = np.full((th.size, th.size), np.nan)
        else:
            cov = self._delta_cov(nm, grids, proxies, full(th), J, fi)
        nobs = sum(dd.nobs for dd in prob.experiments)
        sig = {s: float(np.sqrt(np.mean([pr.sigma[s] ** 2 for pr in proxies]))) for s in model.states}
        extras = {"condition_number": cond, "rank": rank, "linear_params": tuple(lin),
                  "weight_width": self.weight_width,
                  "n_basis": {s: [pr[s].n_basis for pr in proxies] for s in model.states},
                  "n_basis_gcv": {s: [pr[s].n_basis_gcv for pr in proxies] for s in model.states},
                  "gcv": {s: [dict(pr[s].gcv) for pr in proxies] for s in model.states}, "proxy": proxies}
        r = resid(th)
        note = coverage_note("GradientMatching")
        if note and cov is not None and np.all(np.isfinite(cov)):
            warnings.warn(note, CoverageWarning, stacklevel=3)
            warn = list(warn) + [note]
        record_trajectory_check(prob, full(th), "GradientMatching", extras, warn, maps)
        names = prob.free
        if view is not None:
            sig = view.sigma(sig)
            names, th, cov = view.extend(names, th, cov, proxies)
        estimate = make_estimate(self, prob if view is None else view.report(prob), names, th, cov, sol.status,
                                 t_start=t_start,
                                 message=sol.message, n_iter=sol.n_iter, cost=float(r @ r), nobs=nobs, sigma=sig,
                                 residuals=r, history={"cost": np.asarray(sol.history, float)}, extras=extras,
                                 warnings=tuple(warn))
        from odeinfer.data import Data
        from odeinfer.inference.bootstrap import attach_matching_bootstrap

        if view is None:  # the bootstrap simulates states; observables are not simulated here
            attach_matching_bootstrap(self, estimate, model, prob.experiments, isinstance(data, Data),
                                      {"fixed": fixed, "x0": x0}, prob.x0)
        return estimate

    @staticmethod
    def _delta_cov(nm, grids, proxies, p, J, fi):
        """``sum_k (d theta/d c_k) V(c_k) (d theta/d c_k)'`` (implicit function theorem on ``J'r = 0``)."""
        Hinv = np.linalg.inv(J.T @ J)
        V = np.zeros((fi.size, fi.size))
        row = 0
        for (T, s, X, dX, P, dP), pr in zip(grids, proxies):
            F = nm.f(T, X, p)
            Jy = nm.jac_y(T, X, p)
            Jp = nm.jac_p(T, X, p)[:, :, fi]
            d2 = nm.d2_py(T, X, p)[:, :, fi, :]  # (Q, n, p, n)
            r = s[:, None] * (dX - F)  # (Q, n)
            for k, (Pk, dPk) in enumerate(zip(P, dP)):
                # dr_qi/dc_km = s_q (delta_ik dP_qm - Jy_qik P_qm);  dJ_qij/dc_km = -s_q d2_qijk P_qm
                dr = -s[:, None, None] * Jy[:, :, k, None] * Pk[:, None, :]
                dr[:, k, :] += s[:, None] * dPk
                Jq = -s[:, None, None] * Jp  # (Q, n, p)
                B = np.einsum("qij,qim->jm", Jq, dr) - np.einsum("qi,qij,qm->jm", r * s[:, None], d2[:, :, :, k], Pk)
                G = -Hinv @ B
                V += G @ pr.fits[k].cov @ G.T
            row += T.size
        return (V + V.T) / 2
