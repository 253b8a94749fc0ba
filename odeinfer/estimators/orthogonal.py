"""Orthogonal-conditions estimator (Brunel, Clairon & d'Alché-Buc 2014).

N. J-B. Brunel, Q. Clairon, F. d'Alché-Buc (2014), "Parametric estimation of ordinary
differential equations with orthogonality conditions", *JASA* 109:173-185; implemented from
the corrected spec ``seed-001`` (§1 estimator, §3 covariance in the stacked D_k form, §3.5
GMM weighting).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from odeinfer.errors import InputError
from odeinfer.estimators._conditions import Conditions, DelayConditions, dde_trajectory_sse, dde_window
from odeinfer.estimators._log_proxy import fit_proxies
from odeinfer.estimators._coverage import CoverageWarning, coverage_note
from odeinfer.estimators._quadrature import node_model, solve_whitened, whitener
from odeinfer.estimators._second_order import second_order
from odeinfer.estimators._state_maps import state_inputs
from odeinfer.estimators._trajectory_check import record_trajectory_check, trajectory_residuals
from odeinfer.estimators.base import (EstimationError, Estimator, IdentifiabilityWarning, make_estimate,
                                      prepare)
from odeinfer.smooth import SplineSmoother, TestFunctions
from odeinfer.smooth._blas import single_threaded_blas

__all__ = ["OrthogonalConditions", "ConfidenceEllipsoid", "confidence_ellipsoid", "default_L_range"]


@dataclass(frozen=True)
class OrthogonalConditions(Estimator):
    """Orthogonal-conditions (OC) estimator of ODE parameters.

    The weak form of the ODE, ``<f(., x, theta), phi_l> + <x, phi_l'> = 0`` for test functions
    ``phi_l`` vanishing at the ends, is imposed on a regression-spline proxy ``x_hat`` of every
    state, stacked over equations (``d * L`` conditions), and solved for ``theta`` by least
    squares: closed form when ``f`` is affine in the free parameters, variable projection when
    only some are (e.g. ``(a, c, d)`` given ``T_r``), trust-region least squares otherwise, always
    with the exact Jacobian (including the jump term of sharp steps ``heaviside(t - T_r)``).
    The proxy's derivative is never used.

    Parameters
    ----------
    test_functions : {"sine", "bspline"}, default "sine"
        See :class:`odeinfer.smooth.TestFunctions`.
    L : int or None, default None
        Number of test functions; None: scan ``L_range`` and keep the ``L`` whose integrated
        trajectory (from the proxy's value at ``t0``) has the smallest SSE (paper §5.1).
    L_range : (int, int) or None
        Scan range; default :func:`default_L_range`: from ``L_min = 1 + max_i p_i`` (``p_i``:
        free parameters entering equation ``i``, so that every equation's block of conditions
        is over-determined) to ``max(L_min, min(2 d p, 15))`` (paper §5.1). On alpha-pinene
        (``L_min = 5``) the paper's lower end ``L = 2`` gives two coarse test functions whose
        Jacobian is near-singular (condition number up to ~600, against 12-50 at larger L); the
        trajectory-SSE scan, dominated by the large states, picked it in 4 of 40 replications
        at ``(n, sigma) = (200, 8)`` with a full window, with ``|theta_hat - theta*|^2`` up to
        7.2, where every ``L >= 5`` stayed below 0.11. See ``tests/reference/oc_tables.md``.
    window : (float, float) or None
        Support of the test functions (default: the proxy domain, data span from ``t0``).
        A narrow window discards the information outside it: the paper's ``]0, 20[`` on
        alpha-pinene leaves the weakly observed states (alloocimene, peak 6.2 against noise
        sd 8) to 20% of the data, and the closed-form solution, a ratio of noisy integrals,
        is then heavy-tailed (at ``(n, sigma) = (200, 8)``, MSE 1.96 against 0.015 for the
        full window at ``L = 8``, and a blow-up at every ``L`` and knot count tried). Prefer
        the full span unless the model says otherwise. Models with delays: default
        ``(t0 + max(tau), T1)`` with the fixed delays (the lagged proxy must exist on the whole
        window); required when a delay is estimated (it is then bounded to ``(0, a - t0]``).
    boundary : tuple of {"x0", "end_slope"}, default ()
        ``"x0"``: the known initial state gives the condition "OC,0" (a boundary test
        function nonzero at ``t0``; needs ``x0=`` in ``fit``). ``"end_slope"``: a known
        derivative at the last time gives "OC,1" (quadratic in theta for linear models).
    end_slope : float or tuple of float, default 0.0
        The known ``x'(T1)`` for ``"end_slope"`` (one value or one per state).
    boundary_width : float, default 0.2
        Support of the boundary test functions, as a fraction of the data span.
    weighting : {"identity", "optimal"}, default "identity"
        ``"optimal"``: two-step GMM with ``W = V_e^+`` at the first-step estimate (eigenvalues
        below ``rcond`` times the largest are dropped).
    rcond : float, default 1e-10
    ridge : float, default 0.0
        The optimal weight is ``(V_e + ridge * mean(diag V_e) I)^+``: ``V_e`` has rank at most
        the number of spline coefficients and its small eigenvalues would give huge weight to
        conditions whose proxy *bias* (not in ``V_e``) then dominates; 0 gives the plain
        pseudo-inverse (biased on the alpha-pinene example, see tests).
    orthonormal : bool, default False
        Orthonormalise B-spline test functions (paper condition C4).
    smoother : SplineSmoother, default SplineSmoother()
        The proxy (cubic B-splines, GCV); pass ``breakpoints=(T_r,)`` for a known change point.
    constrain_x0 : bool, default True
        With ``x0`` given, constrain the proxy to ``x(t0) = x0`` (paper §5.2.1).
    n_gauss : int, default 8
        Gauss-Legendre nodes per quadrature piece.
    max_nfev : int, default 200
    correction : {"none", "second_order"}, default "none"
        ``"second_order"``: remove the errors-in-variables bias of the closed form and add the
        second-order variance to ``V`` (:mod:`odeinfer.estimators._second_order`; exact
        derivatives). Needs a vector field affine in the states and in every free parameter,
        identity weighting, no ``"end_slope"`` condition, no delays and Gaussian noise. When the
        second-order variance exceeds the first-order one for some parameter (the expansion is
        then unreliable), the estimate stays uncorrected, its ``V`` includes the second-order
        term and it carries a :class:`~odeinfer.CoverageWarning`. ``extras["second_order"]``:
        ``bias``, ``ratio`` (largest second- over first-order variance) and ``applied``.
        It removes the errors-in-variables bias, not the proxy's approximation bias: combine it
        with an undersmoothed proxy. On alpha-pinene (sigma = 3, 500 replicates) with
        ``test_functions="bspline"`` and ``smoother=SplineSmoother(undersmooth=3)`` the Wald
        intervals cover 0.90-0.96 per parameter at n = 200 and 0.92-0.97 at n = 400 (theta4,
        theta5 short of 0.95 +- 0.03; uncorrected bspline/GCV: 0.79-0.91, 0.86-0.92), so these
        estimates still carry the warning (``tests/reference/matching_coverage.md``).

    Notes
    -----
    Covariance (spec §3.4): ``V = M V_e M'``, ``M = (J'WJ)^-1 J'W``, ``V_e = sum_k D_k V(c_k)
    D_k'`` with ``D_k = de/dc_k``; it approximates ``Var(theta_hat)`` directly (no extra
    ``1/n``). It ignores the choice of ``L`` and every bias: the proxy's approximation bias
    (GCV does not undersmooth: see :mod:`odeinfer.smooth.splines`) and, larger on
    alpha-pinene, the errors-in-variables bias of the closed form (the noisy proxy enters
    the regressors ``<x_hat, phi_l>``; it grows as ``sigma^2`` at fixed ``n`` and knots and
    makes the Wald intervals undercover at high noise: ``tests/reference/oc_tables.md``).
    ``correction="second_order"`` removes the latter where the conditions are bilinear; every
    estimate carries a :class:`~odeinfer.CoverageWarning` with the measured coverage of its
    configuration (``tests/reference/matching_coverage.md``).
    Only fully observed systems are supported: every state observed directly, or through an
    observable that is an invertible function of it (``model.observe``; see
    :mod:`odeinfer.estimators._state_maps`): the proxy is then smoothed on the observable's noise
    scale and mapped back to the state exactly, the ``L`` scan and the trajectory check compare on
    that scale, ``sigma`` is reported per observable, and the estimate carries the user's model
    (with the fixed observable parameters in ``fixed``). Other observables are refused, naming them.

    Noise model: with ``noise="log"`` (``model.with_observation(noise="log")``) every state's proxy is
    ``exp`` of the regression spline of ``log y`` (positive; GCV, coefficient covariance and the
    reported ``sigma`` on the log scale, see :mod:`odeinfer.estimators._log_proxy`), and the
    ``L`` scan compares trajectories on the log scale. Observations ``<= 0`` are then refused.

    Models with delays (``@oi.model(..., delays=["tau"])``, paper §6.2, spec §1.8): the lagged
    states ``x(t - tau)`` come from the same proxy, so no history function is needed; the
    conditions are integrated over the window ``[a, b]`` (``a >= t0 + tau``). A free delay is
    estimated through the proxy's derivative at ``t - tau`` (started on a grid over its bounds
    if no start is given); ``V_e`` includes the lagged proxy's contribution. ``L`` is chosen by
    the SSE of the delay solve (``odeinfer.solve``) started at ``a`` with the proxy as initial function.
    Boundary conditions and sharp steps are not supported with delays. On the real blowfly
    series the paper's Table 6.2 does not reproduce (the answer depends on the proxy, which the
    paper under-specifies): ``tests/reference/oc_tables.md``.

    Defaults and why: ``test_functions="sine"`` with the window = the whole data span
    (orthonormal, condition C4); ``L`` scanned over :func:`default_L_range` by trajectory SSE
    (the paper's rule); the proxy is the paper's GCV cubic regression spline.

    Examples
    --------
    >>> import numpy as np, odeinfer as oi
    >>> z = oi.zoo.alpha_pinene()
    >>> data, _ = oi.simulate(z.model, z.params, z.x0, np.linspace(0, 100, 201)[1:], t0=0.0,
    ...                       noise=3.0, rng=1)
    >>> est = OrthogonalConditions(test_functions="bspline", L=8, window=(0, 20)).fit(z.model, data)
    >>> est.converged
    True
    """

    test_functions: str = "sine"
    L: int | None = None
    L_range: tuple | None = None
    window: tuple | None = None
    boundary: tuple = ()
    end_slope: float | tuple = 0.0
    boundary_width: float = 0.2
    weighting: str = "identity"
    rcond: float = 1e-10
    ridge: float = 0.0
    orthonormal: bool = False
    smoother: SplineSmoother = field(default_factory=SplineSmoother)
    constrain_x0: bool = True
    n_gauss: int = 8
    max_nfev: int = 200
    correction: str = "none"

    def __post_init__(self):
        if self.test_functions not in ("sine", "bspline"):
            raise InputError(f"test_functions: expected 'sine' or 'bspline', got {self.test_functions!r}")
        if self.L is not None and (not isinstance(self.L, (int, np.integer)) or self.L < 1):
            raise InputError(f"L: expected None (scan L_range) or an int >= 1, got {self.L!r}")
        if self.L_range is not None:
            lo, hi = self.L_range
            if not (isinstance(lo, (int, np.integer)) and isinstance(hi, (int, np.integer)) and 1 <= lo <= hi):
                raise InputError(f"L_range: expected (L_min, L_max) ints with 1 <= L_min <= L_max, got {self.L_range!r}")
        if self.window is not None and not (len(self.window) == 2 and float(self.window[0]) < float(self.window[1])):
            raise InputError(f"window: expected (a, b) with a < b, got {self.window!r}")
        b = (self.boundary,) if isinstance(self.boundary, str) else tuple(self.boundary)
        bad = [x for x in b if x not in ("x0", "end_slope")]
        if bad:
            raise InputError(f"boundary: {bad} unknown; expected a tuple of 'x0' (OC,0) and/or 'end_slope' (OC,1)")
        object.__setattr__(self, "boundary", b)
        if self.weighting not in ("identity", "optimal"):
            raise InputError(f"weighting: expected 'identity' or 'optimal', got {self.weighting!r}")
        if not (0 < float(self.boundary_width) <= 1):
            raise InputError(f"boundary_width: expected a fraction of the data span in (0, 1], got {self.boundary_width!r}")
        if not isinstance(self.smoother, SplineSmoother):
            raise InputError(f"smoother: expected an odeinfer.smooth.SplineSmoother, got {type(self.smoother).__name__}")
        if self.correction not in ("none", "second_order"):
            raise InputError(f"correction: expected 'none' or 'second_order', got {self.correction!r}")
        if self.correction == "second_order" and (self.weighting != "identity" or "end_slope" in self.boundary):
            raise InputError(f"correction: 'second_order' needs weighting='identity' and no 'end_slope' boundary "
                             f"condition, got weighting={self.weighting!r}, boundary={self.boundary!r}; use "
                             "correction='none' with these options")

    # ------------------------------------------------------------------------------------
    def _setup(self, model, data, start, fixed, x0, proxies):
        t_start = time.perf_counter()
        view, model, data, fixed, start = state_inputs(model, data, fixed, start, "OrthogonalConditions")
        prob = prepare(model, data, start=start, fixed=fixed, x0=x0, require_all_observed=True,
                       estimator="OrthogonalConditions")
        nm = node_model(model)
        if model.delays and self.boundary:
            raise EstimationError(f"boundary: {list(self.boundary)} is not supported for models with delays "
                                  "(the DDE conditions use only test functions vanishing at both window ends); "
                                  "use boundary=()")
        pw = nm.piecewise_params() & set(prob.free)
        if pw:
            raise EstimationError(f"fixed: {sorted(pw)} switch a where()/Piecewise branch and are free; matching "
                                  "estimators support free switching points only as heaviside(t - p). Fix them "
                                  "(fixed=...) or rewrite the step with om.heaviside")
        for s in nm.steps:
            nonfixed = [q for q in s.params if q not in prob.fixed]
            if nonfixed and "end_slope" in self.boundary:
                raise EstimationError("boundary: 'end_slope' (OC,1) needs a vector field without free sharp steps")
        if "x0" in self.boundary and prob.x0 is None:
            raise EstimationError("boundary: 'x0' (OC,0) needs the known initial state; pass fit(..., x0={state: value})")
        x0_arr = None if prob.x0 is None else np.array([prob.x0.get(s, np.nan) for s in model.states])
        if "x0" in self.boundary and np.isnan(x0_arr).any():
            raise EstimationError(f"x0: OC,0 needs every initial state; missing "
                                  f"{[s for s, v in zip(model.states, x0_arr) if np.isnan(v)]}")
        maps = None if view is None else view.mapped
        if self.correction == "second_order":
            _check_second_order(model, nm, prob, maps)
        if proxies is None:
            cons = prob.x0 if (prob.x0 is not None and self.constrain_x0) else None
            proxies = fit_proxies(self.smoother, model, prob.experiments, cons, maps)
        return t_start, prob, nm, x0_arr, proxies, view

    def _conditions(self, nm, prob, proxies, L, x0_arr, slope=True):
        if prob.model.delays:
            start_full = prob.full_params(prob.start)
            taus = start_full[list(nm.delay_index)]
            return [DelayConditions(nm, pr, TestFunctions(self.test_functions, int(L),
                                                          dde_window(self.window, prob, pr), self.orthonormal),
                                    grid_delays=taus[np.isfinite(taus)], n_gauss=self.n_gauss) for pr in proxies]
        out = []
        for pr in proxies:
            T0, T1 = pr.domain
            a, b = (T0, T1) if self.window is None else (float(self.window[0]), float(self.window[1]))
            if a < T0 - 1e-12 * (T1 - T0) or b > T1 + 1e-12 * (T1 - T0):
                raise EstimationError(
                    f"window: the test functions' support [{a:g}, {b:g}] leaves the data range [{T0:g}, {T1:g}] "
                    "where the proxy is defined; choose a window inside it")
            end = None
            if "end_slope" in self.boundary and slope:
                end = np.broadcast_to(np.asarray(self.end_slope, float), (nm.n,)).copy()
            out.append(Conditions(nm, pr, TestFunctions(self.test_functions, int(L), (a, b), self.orthonormal),
                                  x0=x0_arr if "x0" in self.boundary else None, end_slope=end,
                                  boundary_width=self.boundary_width * (T1 - T0), n_gauss=self.n_gauss))
        return out

    def _solve_L(self, nm, prob, conds, lin, nonlin, start_full, weighting=None, bounds=None):
        fi = prob.free_index

        def full(th):
            p = start_full.copy()
            p[fi] = th
            return p

        def resid(th):
            p = full(th)
            return conds[0].residual(p) if len(conds) == 1 else np.concatenate([c.residual(p) for c in conds])

        def jac(th):
            p = full(th)
            J = conds[0].jacobian(p) if len(conds) == 1 else np.vstack([c.jacobian(p) for c in conds])
            return J[:, fi]

        if not nonlin:
            # every free parameter enters affinely: e(th) = e(0) + J th with a constant J
            th0 = np.zeros(len(fi))
            e0, J0 = resid(th0), jac(th0)

            def resid(th):  # noqa: F811
                return e0 + J0 @ th

            def jac(th):  # noqa: F811
                return J0

        def ve(th):
            p = full(th)
            blocks = [c.Ve(p) for c in conds]
            if len(blocks) == 1:
                return blocks[0]
            from scipy.linalg import block_diag

            return block_diag(*blocks)

        N = sum(c.n_rows for c in conds)
        S = np.eye(N)
        x_start = start_full[fi].copy()
        nonlin_missing = [prob.free[j] for j in nonlin if not np.isfinite(x_start[j])]
        if nonlin_missing:
            x_start = self._grid_start(nm, prob, resid, jac, lin, nonlin, x_start, nonlin_missing, conds, bounds)
        x_start = np.where(np.isfinite(x_start), x_start, 0.0)
        if bounds is not None:
            x_start = np.clip(x_start, *bounds)
        sol = solve_whitened(resid, jac, x_start, lin, nonlin, S, max_nfev=self.max_nfev, bounds=bounds)
        n_iter = sol.n_iter
        history = list(sol.history)
        dropped = 0
        if (weighting or self.weighting) == "optimal":
            S, dropped = whitener(ve(sol.theta), self.rcond, self.ridge)
            sol2 = solve_whitened(resid, jac, sol.theta, lin, nonlin, S, max_nfev=self.max_nfev, bounds=bounds)
            n_iter += sol2.n_iter
            history += sol2.history
            sol = sol2
        th = sol.theta
        J = jac(th)
        SJ = S @ J
        # closed form: J is constant and lstsq already has the singular values of S J
        sv = sol.sv if (sol.sv is not None and not nonlin) else np.linalg.svd(SJ, compute_uv=False)
        cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
        rank = int((sv > sv[0] * max(SJ.shape) * np.finfo(float).eps * 1e3).sum()) if sv[0] > 0 else 0
        Ve = ve(th)
        JtW = SJ.T @ S  # J'W with W = S'S
        if rank < th.size:
            cov = np.full((th.size, th.size), np.nan)
        else:
            M = np.linalg.solve(JtW @ J, JtW)
            cov = M @ Ve @ M.T
            cov = (cov + cov.T) / 2
        e = resid(th)
        Se = S @ e
        return dict(theta=th, cov=cov, cost=float(Se @ Se), e=e, status=sol.status, message=sol.message,
                    n_iter=n_iter, history=history, cond=cond, rank=rank, dropped=dropped, full=full(th))

    def _grid_start(self, nm, prob, resid, jac, lin, nonlin, x_start, missing, conds, bounds=None):
        """Start for one free switching parameter (grid inside the window) or one free delay (grid
        over its bounds ``(0, a - t0]``): best cost with the linear parameters profiled."""
        names = [prob.free[j] for j in nonlin]
        switching = set(prob.model.switching_params)
        delays = set(prob.model.delays)
        if len(nonlin) == 1 and names[0] in switching:
            j = nonlin[0]
            a, b = conds[0].tests.window
            grid = np.linspace(a, b, 42)[1:-1]
        elif len(missing) == 1 and missing[0] in delays and bounds is not None:
            j = prob.free.index(missing[0])
            grid = np.linspace(bounds[0][j], bounds[1][j], 41)[1:]
        else:
            raise EstimationError(
                f"start: no starting value for {missing}, which enter the model nonlinearly; pass "
                "start={name: value} (only a single switching parameter or a single delay is searched on a grid)")
        best = (np.inf, None)
        for v in grid:
            th = np.where(np.isfinite(x_start), x_start, 0.0)
            th[j] = v
            e0 = resid(np.where(np.isin(np.arange(th.size), lin), 0.0, th))
            G = jac(th)[:, lin]
            coef, *_ = np.linalg.lstsq(G, -e0, rcond=None)
            r = e0 + G @ coef
            c = float(r @ r)
            if c < best[0]:
                best = (c, v)
        x_start = x_start.copy()
        x_start[j] = best[1]
        return x_start

    def _delay_bounds(self, prob, proxies):
        """Bounds of the free parameters: a free delay stays in ``(0, a - T0]`` (the lagged proxy
        must exist on the whole window); other parameters are unbounded."""
        lo = np.full(len(prob.free), -np.inf)
        hi = np.full(len(prob.free), np.inf)
        for name in prob.model.delays:
            if name in prob.free:
                j = prob.free.index(name)
                room = min(dde_window(self.window, prob, pr)[0] - pr.domain[0] for pr in proxies)
                lo[j], hi[j] = 1e-6 * room, room
        return lo, hi

    def _ode_sse(self, model, prob, proxies, params_full, maps=None):
        """Integrated-trajectory SSE of one candidate (the L selection rule), on the noise scale.

        The trajectory starts from the known ``x0`` where given, else from the proxy at ``t0``;
        when the data are observed at ``t0`` the observed values are tried too, and the better
        start counts (a proxy can overshoot at the ends, e.g. below zero for a positive state).
        """
        sse = 0.0
        for d, pr in zip(prob.experiments, proxies):
            best = math.inf
            for x0 in self._sse_starts(model, prob, d, pr):
                r = trajectory_residuals(model, d, x0, d.t0, params_full, maps)
                if r is None:
                    continue
                r = np.where(d.mask, r, 0.0)
                best = min(best, float(np.sum(r**2)) if np.all(np.isfinite(r)) else math.inf)
            sse += best
        return sse

    @staticmethod
    def _sse_starts(model, prob, d, pr):
        x0 = np.asarray(pr([d.t0])[0], float).copy()
        if prob.x0 is not None:
            for k, s in enumerate(model.states):
                if s in prob.x0:
                    x0[k] = prob.x0[s]
            return [x0]
        starts = [x0]
        if d.t[0] == d.t0 and d.mask[0].any():
            obs = x0.copy()
            for j, s in enumerate(d.states):
                if d.mask[0, j]:
                    obs[model.states.index(s)] = d.y[0, j]
            starts.append(obs)
        return starts

    def fit(self, model, data, *, start=None, fixed=None, x0=None, proxy=None):
        """Estimate the free parameters of ``model`` from fully observed ``data``.

        Parameters
        ----------
        model : Model
        data : Data or Experiments
            Every state must be observed (missing values are allowed).
        start : dict, array-like or Estimate, optional
            Needed only for parameters that enter nonlinearly (except a single switching
            parameter, searched on a grid).
        fixed : dict, optional
            Parameters held fixed.
        x0 : dict, optional
            Known initial state at ``data.t0`` (constrains the proxy; enables ``"x0"``).
        proxy : SplineProxy or list of SplineProxy, optional
            A proxy already fitted (one per experiment), e.g. shared with another estimator.

        Returns
        -------
        Estimate
            ``extras``: ``L`` (chosen), ``L_scan`` (per L: params, sse, cost, trace_cov, status),
            ``n_basis`` and ``gcv`` per state, ``condition_number``, ``rank``, ``linear_params``,
            ``weighting``, ``trajectory_check`` (one solve at the estimate: RMS misfit / noise measured from the data; a :class:`~odeinfer.errors.BiasWarning` and a ``warnings`` entry when far, see :mod:`odeinfer.estimators._trajectory_check`).
        """
        with single_threaded_blas():
            return self._fit(model, data, start=start, fixed=fixed, x0=x0, proxy=proxy)

    def _fit(self, model, data, *, start, fixed, x0, proxy):
        proxies = None if proxy is None else (list(proxy) if isinstance(proxy, (list, tuple)) else [proxy])
        t_start, prob, nm, x0_arr, proxies, view = self._setup(model, data, start, fixed, x0, proxies)
        model = prob.model
        maps = None if view is None else view.mapped
        p_free = len(prob.free)
        d = model.n_states
        n_extra = ("x0" in self.boundary) + ("end_slope" in self.boundary)
        if self.L is not None:
            Ls = [int(self.L)]
        else:
            lo, hi = self.L_range or default_L_range(model, prob.free, prob.fixed)
            Ls = list(range(lo, hi + 1))
        if d * (Ls[0] + n_extra) < p_free:
            raise EstimationError(
                f"L: {Ls[0]} test functions give {d * (Ls[0] + n_extra)} conditions for {p_free} free parameters "
                f"({d} equation(s)); need L >= {math.ceil(p_free / d) - n_extra}. Raise L (or L_range)")
        lin = list(nm.linear_params(prob.free, prob.fixed))
        lin_idx = [prob.free.index(n) for n in lin]
        nonlin_idx = [j for j in range(p_free) if j not in lin_idx]
        start_full = prob.full_params(prob.start)
        bounds = self._delay_bounds(prob, proxies) if model.delays else None
        scan, results = {}, {}
        for L in Ls:
            conds = self._conditions(nm, prob, proxies, L, x0_arr)
            if "end_slope" in self.boundary:
                # OC,1 is quadratic in theta: start from the fit without it, then solve jointly
                st = start_full.copy()
                if not np.all(np.isfinite(st[prob.free_index])):
                    pre = self._conditions(nm, prob, proxies, L, x0_arr, slope=False)
                    st = self._solve_L(nm, prob, pre, lin_idx, nonlin_idx, st, weighting="identity")["full"]
                r = self._solve_L(nm, prob, conds, [], list(range(p_free)), st)
            else:
                r = self._solve_L(nm, prob, conds, lin_idx, nonlin_idx, start_full, bounds=bounds)
            if len(Ls) == 1:
                sse = float("nan")
            elif model.delays:
                sse = dde_trajectory_sse(model, prob, proxies, r["full"], [c.tests.window for c in conds])
            else:
                sse = self._ode_sse(model, prob, proxies, r["full"], maps)
            results[L] = r
            scan[L] = {"params": dict(zip(prob.free, r["theta"].tolist())), "sse": sse, "cost": r["cost"],
                       "trace_cov": float(np.trace(r["cov"])), "status": r["status"],
                       "condition_number": r["cond"]}
        L_best = Ls[0] if len(Ls) == 1 else min(Ls, key=lambda L: (scan[L]["sse"], L))
        r = results[L_best]
        warn = []
        theta, cov = r["theta"], r["cov"]
        so = None
        if self.correction == "second_order" and np.all(np.isfinite(cov)):
            conds = self._conditions(nm, prob, proxies, L_best, x0_arr)
            bias, V2 = second_order(conds, r["full"], prob.free_index)
            ratio = float(np.max(np.diag(V2) / np.diag(cov)))
            so = {"bias": dict(zip(prob.free, bias.tolist())), "ratio": ratio, "applied": ratio <= 1.0}
            if so["applied"]:
                theta = theta - bias
            cov = cov + V2
        note = coverage_note("OrthogonalConditions", self.test_functions, self.correction,
                             None if so is None else so["ratio"], self.smoother.undersmooth)
        if note and np.all(np.isfinite(cov)):
            warnings.warn(note, CoverageWarning, stacklevel=3)
            warn.append(note)
        if r["rank"] < p_free or r["cond"] > 1e10:
            msg = (f"the Jacobian of the conditions (L={L_best}) has rank {r['rank']} of {p_free}, condition number "
                   f"{r['cond']:.3g}: some of {list(prob.free)} are not identifiable from these data; "
                   + ("standard errors are NaN" if r["rank"] < p_free else "standard errors are unreliable"))
            warnings.warn(msg, IdentifiabilityWarning, stacklevel=3)
            warn.append(msg)
        nobs = sum(dd.nobs for dd in prob.experiments)
        fits = {s: [pr[s] for pr in proxies] for s in model.states}
        sig = {s: math.sqrt(sum(f.sigma ** 2 for f in fs) / len(fs)) for s, fs in fits.items()}
        extras = {"L": L_best, "L_scan": scan, "condition_number": r["cond"], "rank": r["rank"],
                  "linear_params": tuple(lin), "weighting": self.weighting, "weights_dropped": r["dropped"],
                  "n_basis": {s: [f.n_basis for f in fs] for s, fs in fits.items()},
                  "n_basis_gcv": {s: [f.n_basis_gcv for f in fs] for s, fs in fits.items()},
                  "gcv": {s: [dict(f.gcv) for f in fs] for s, fs in fits.items()},
                  "boundary": self.boundary, "test_functions": self.test_functions, "proxy": proxies}
        if model.delays:
            extras["window"] = [dde_window(self.window, prob, pr) for pr in proxies]
        if so is not None:
            extras["second_order"] = so
        record_trajectory_check(prob, r["full"], "OrthogonalConditions", extras, warn, maps)
        names = prob.free
        if view is not None:
            sig = view.sigma(sig)
            names, theta, cov = view.extend(names, theta, cov, proxies)
        estimate = make_estimate(self, prob if view is None else view.report(prob), names, theta, cov,
                                 r["status"], t_start=t_start,
                                 message=r["message"], n_iter=r["n_iter"], cost=r["cost"], nobs=nobs, sigma=sig,
                                 residuals=r["e"], history={"cost": np.asarray(r["history"], float)}, extras=extras,
                                 warnings=tuple(warn))
        from odeinfer.data import Data
        from odeinfer.inference.bootstrap import attach_matching_bootstrap

        if view is None:  # the bootstrap simulates states; observables are not simulated here
            attach_matching_bootstrap(self, estimate, model, prob.experiments, isinstance(data, Data),
                                      {"fixed": fixed, "x0": x0}, prob.x0)
        return estimate


def _check_second_order(model, nm, prob, maps=None):
    """``correction="second_order"`` needs conditions bilinear in (proxy coefficients, free parameters)."""
    why = []
    if model.delays:
        why.append("the model has delays")
    if model.observation.noise == "log":
        why.append("the proxy is exp(spline) (noise='log'), not linear in its coefficients")
    if maps:
        why.append(f"the proxies of {sorted(maps)} are mapped from their observables' noise scale")
    nonlin = sorted(set(prob.free) - set(nm.linear_params(prob.free, prob.fixed)))
    if nonlin:
        why.append(f"{nonlin} enter f nonlinearly")
    ps = dict(zip(model.params, model.param_symbols))
    subs = {ps[k]: v for k, v in prob.fixed.items()}
    xs = model.state_symbols
    if any(sp.diff(sp.sympify(e).xreplace(subs), a, b) != 0 for e in model.exprs for a in xs for b in xs):
        why.append("f is not affine in the states")
    if why:
        raise EstimationError(f"correction: 'second_order' needs conditions bilinear in the proxy's coefficients "
                              f"and the free parameters, but {'; '.join(why)}. Use correction='none' (and read "
                              "the CoverageWarning) or oi.Embedding for calibrated intervals")


def default_L_range(model, free, fixed=None):
    """Default scan range ``(L_min, L_max)`` of the number of test functions.

    ``L_min = 1 + max_i p_i`` with ``p_i`` the number of free parameters on which ``f_i``
    depends (its free symbols, given ``fixed``; a switching time ``T_r`` counts): each equation contributes ``L`` conditions and
    the parameters entering it are then over-determined by its own block, whatever the
    other equations carry. ``L_max = max(L_min, min(2 d p, 15))`` (paper §5.1: the scan goes
    up to ``2 d p``; the paper's examples stop at 15).

    Parameters
    ----------
    model : Model
    free : sequence of str
        Free parameters.
    fixed : dict, optional
        Fixed parameter values (a parameter whose only occurrence is multiplied by a fixed
        zero does not count).

    Returns
    -------
    (int, int)

    Examples
    --------
    >>> import odeinfer as oi
    >>> z = oi.zoo.alpha_pinene()
    >>> default_L_range(z.model, z.model.params)
    (5, 15)
    """
    ps = dict(zip(model.params, model.param_symbols))
    subs = {ps[k]: v for k, v in dict(fixed or {}).items()}
    free_syms = {ps[name] for name in free}
    counts = [len(sp.sympify(e).xreplace(subs).free_symbols & free_syms) for e in model.exprs]
    lo = max(2, 1 + max(counts))
    return lo, max(lo, min(2 * model.n_states * len(free), 15))


@dataclass(frozen=True)
class ConfidenceEllipsoid:
    """Wald confidence ellipsoid ``{theta : (theta - center)' cov^-1 (theta - center) <= radius2}``.

    Attributes
    ----------
    names : tuple of str
    center : ndarray (k,)
    cov : ndarray (k, k)
    radius2 : float
        ``chi2_{k, 1 - alpha}`` quantile.
    """

    names: tuple
    center: np.ndarray
    cov: np.ndarray
    radius2: float

    def distance2(self, theta) -> float:
        """Squared Mahalanobis distance of ``theta`` from the center."""
        r = np.asarray(theta, float) - self.center
        return float(r @ np.linalg.solve(self.cov, r))

    def contains(self, theta) -> bool:
        return self.distance2(theta) <= self.radius2

    def boundary(self, n=100):
        """Points on the boundary of a 2-D ellipse (k == 2): shape (n, 2)."""
        if self.center.size != 2:
            raise InputError(f"boundary: needs a 2-D ellipsoid (pass names= two parameters), got {self.center.size}")
        a = np.linspace(0, 2 * np.pi, n)
        C = np.linalg.cholesky(self.cov)
        return self.center + math.sqrt(self.radius2) * (np.column_stack([np.cos(a), np.sin(a)]) @ C.T)


def confidence_ellipsoid(estimate, alpha=0.05, names=None) -> ConfidenceEllipsoid:
    """The ``1 - alpha`` Wald confidence ellipsoid of ``estimate`` (spec §3.4).

    Parameters
    ----------
    estimate : Estimate
    alpha : float, default 0.05
    names : sequence of str, optional
        Subset of ``estimate.names`` (default all).
    """
    from scipy.stats import chi2

    names = tuple(estimate.names if names is None else names)
    unknown = [n for n in names if n not in estimate.names]
    if unknown:
        raise InputError(f"names: {unknown} are not estimated quantities {list(estimate.names)}")
    idx = [estimate.names.index(n) for n in names]
    cov = None if estimate.cov is None else np.array(estimate.cov)[np.ix_(idx, idx)]
    if cov is None or not np.all(np.isfinite(cov)):
        raise InputError("estimate: no finite covariance (see estimate.warnings); no ellipsoid can be formed")
    return ConfidenceEllipsoid(names, np.array(estimate.values)[idx], cov, float(chi2.ppf(1 - alpha, len(idx))))
