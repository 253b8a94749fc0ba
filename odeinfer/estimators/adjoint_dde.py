"""Fitting delay differential equations: parameters, delays and history parameters.

Two modes:

* ``mode="lm"`` (default): maximum likelihood under Gaussian noise -- Levenberg-Marquardt on the
  residuals at the observation times with the exact Jacobian from the forward sensitivities
  of the DDE solver (w.r.t. parameters, delays and history parameters), a profile scan over
  the delay against local minima, Gauss-Newton covariance and an identifiability report
  (the "careful implementation" of spec seed-002 sec. 5.2, items 3-6).
* ``mode="paper"``: DDE-Find as published -- the integral loss against an interpolating
  cubic spline of the data, Adam with cosine annealing, gradients from the continuous adjoint.

R. Stephany, "DDE-Find: Learning Delay Differential Equations from Noisy, Limited Data"
(Cornell CAM, arXiv 2024), sections 3 (Theorem 1, the adjoint), 4 (algorithm), 6 (experiments)
and 7.4 (identifiability of the history). The paper's delay gradient (eq. 5) misses a history
term; here it is corrected (spec seed-002 sec. 1.4; ``tau_gradient="paper"`` restores it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from odeinfer.errors import InputError, OdeinferWarning
from odeinfer.estimators.base import Estimator, norm_bounds, norm_sigma
from odeinfer.solve.config import as_solver

__all__ = ["AdjointDDE", "DelayBoundWarning"]


class DelayBoundWarning(OdeinferWarning):
    """A fitted delay ended on a bound of its search box (not an interior optimum)."""


def _positive(name, v, strict=True):
    ok = isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or (v <= 0 if strict else v < 0):
        raise InputError(f"{name}: expected a {'positive' if strict else 'non-negative'} number, got {v!r}")


def _count(name, v, minimum=1):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < minimum:
        raise InputError(f"{name}: expected an int >= {minimum}, got {v!r}")


@dataclass(frozen=True)
class AdjointDDE(Estimator):
    """Estimate the parameters, delays and history parameters of a DDE (DDE-Find, corrected).

    Parameters
    ----------
    mode : {"lm", "paper"}, default "lm"
        ``"lm"``: Levenberg-Marquardt on the weighted residuals ``(x(t_i) - y_i) / sigma`` at
        the observation times (the Gaussian maximum-likelihood estimate), exact Jacobian from
        the forward sensitivities, delay scan (``tau_grid``), Gauss-Newton covariance. Its Wald
        intervals under-cover (the likelihood is far from quadratic in the delay and the history):
        the estimate carries a :class:`~odeinfer.CoverageWarning` with the coverage panel's figures;
        ``conf_int(method="profile")`` gives the intervals that covered there, and
        ``conf_int(method="bootstrap")`` refits data simulated at the estimate.
        ``"paper"``: DDE-Find (Stephany 2024, sec. 4 and 6): minimise
        ``int_{t0}^{T} ||x(t) - s(t)||^2 dt`` with ``s`` the interpolating cubic spline of the
        data by Adam (``lr``, ``betas``, ``eps``) with cosine annealing to ``lr * lr_min_ratio``
        over ``epochs`` epochs, stopping early when the loss is below ``loss_tol``; one forward
        and one adjoint solve per epoch. No covariance (the paper reports none).
    tau_grid : "auto", None or array-like, default "auto"
        ``mode="lm"`` only. Profile scan over the (single free) delay: at each grid value the
        other unknowns are fitted with the delay held, and the ``n_refine`` best local minima
        of the profile are refined by a full fit, next to the fit from the user's start; the
        lowest cost wins (table in ``extras["starts"]``, profile in ``extras["tau_profile"]``).
        ``"auto"``: ``n_grid`` values geometric from ``max(lower, upper / 100)`` to the upper
        bound of the delay (skipped when several delays are free). None: no scan.
    n_grid : int, default 12
    n_refine : int, default 2
    grid_iter : int, default 15
        LM iterations per grid point (the profile only ranks the candidates; each refined
        candidate is then fitted to convergence).
    bounds : dict, optional
        ``{name: (lower, upper)}`` for parameters and history parameters (``"A[x]"``). A delay's
        lower bound must be > 0. Default for a delay: ``(1e-3 span, span)`` with
        ``span = T - t0`` (for a data-driven history at most what its window covers).
    sigma : {"pooled", "per_state"} or dict, default "pooled"
        Noise sd: one for all observed states (``RSS / (N - k)``), one per state (iterated
        reweighting) or known ``{state: sd}``.
    solver : MethodOfSteps, optional
        The DDE solver; default ``oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10))`` (the ``fit``
        role's). The grid scan loosens it to ``rtol >= 1e-6``, ``atol >= 1e-8``.
    max_iter : int, default 200
        LM iterations per local fit.
    xtol, ftol, gtol : float, default 1e-10, 1e-12, 1e-10
        LM stopping rules (:func:`odeinfer.estimators._lm.levenberg_marquardt`).
    rcond : float, default 1e-8
        Relative singular value of the column-scaled Jacobian below which a direction counts
        as not identifiable.
    ident_tol : float, default 1e-6
        A quantity whose scaled sensitivity ``||J_j|| |u_j|`` is below ``ident_tol`` times the
        largest is reported as having negligible sensitivity (NaN standard error).
    epochs : int, default 500
    lr : float, default 0.03
    lr_min_ratio : float, default 0.1
        ``eta_min = lr * lr_min_ratio`` of the cosine schedule (the paper: lr / 10).
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    loss_tol : float, default 0.01
        The paper's early stop ``L < L_min``.
    tau_gradient : {"corrected", "paper"}, default "corrected"
        ``"paper"``: the delay gradient of DDE-Find's eq. (5), without the history term (wrong
        for a time-varying history; to reproduce the paper's optimisation path).
    target_smoothing : float or None, default None
        None: interpolating cubic spline target (the paper). A number: smoothing-spline penalty.
    nsub : int, default 32
        Adjoint RK4 steps per smallest delay (``mode="paper"``).
    loss : {"l2", "l1"}, default "l2"
        ``mode="paper"``: the integral of the squared (the paper's stated loss) or absolute
        (its HIV experiment) differences to the spline target. The L1 gradient comes from
        the forward sensitivities on a trapezoid grid (20 sub-intervals per data interval).
        ``tests/reference/dde_find_tables.md``: L1 reproduces more of the paper's tables.

    Notes
    -----
    *Unknowns and names*: the free model parameters (model order, delays included), then the
    free history parameters (``"<group>[<state>]"``, e.g. ``"A[x]"``, ``"omega[x]"``,
    ``"b[x]"``; ``b`` is the state at ``t0``). The history family comes from ``fit(history=)``.

    *Covariance* (``mode="lm"``): ``(J_w^T J_w)^{-1}`` with ``J_w`` the Jacobian of the residuals
    divided by the noise sd, i.e. ``sigma^2 (J^T J)^{-1}`` for a pooled sd.

    *Identifiability*: ``extras["identifiability"]`` gives per quantity the column norm of
    ``J_w``, its relative scaled size and a verdict: ``"zero"`` (the loss gradient is
    identically zero, e.g. the amplitude and frequency of a history component that never
    enters the right-hand side lagged -- DDE-Find sec. 7.4, HIV), ``"negligible"``, ``"rank"``
    (a combination is not identifiable), ``"weak"`` (standard error > |value|) or ``"ok"``.
    The first three get NaN standard errors and an :class:`IdentifiabilityWarning` instead of
    numbers. In ``mode="paper"`` ``extras["zero_gradient"]`` lists the unknowns whose adjoint
    gradient was exactly zero in every epoch (Adam never moved them).

    *Delay at a bound*: status ``"failed"`` with a :class:`DelayBoundWarning` (values kept).

    Examples
    --------
    >>> import numpy as np, odeinfer as oi
    >>> z = oi.zoo.get("logistic_delay")
    >>> sol = oi.solve(oi.Problem(z.model, z.t, history=z.history), z.params)
    >>> rng = np.random.default_rng(0)
    >>> data = oi.Data(z.t, sol.y[:, 0] + 0.05 * rng.standard_normal(z.t.size), "x")
    >>> est = AdjointDDE().fit(z.model, data, history=oi.History.periodic(-0.3, 3.5, 2.0),
    ...                        start={"theta0": 1.5, "theta1": 1.2, "tau": 0.7})
    >>> est.converged, round(float(est.params["tau"]), 2)
    (True, 1.0)
    """

    mode: str = "lm"
    tau_grid: Any = "auto"
    n_grid: int = 12
    n_refine: int = 2
    grid_iter: int = 15
    bounds: Any = None
    sigma: Any = "pooled"
    solver: Any = None
    max_iter: int = 200
    xtol: float = 1e-10
    ftol: float = 1e-12
    gtol: float = 1e-10
    rcond: float = 1e-8
    ident_tol: float = 1e-6
    epochs: int = 500
    lr: float = 0.03
    lr_min_ratio: float = 0.1
    betas: Any = (0.9, 0.999)
    eps: float = 1e-8
    loss_tol: float = 0.01
    tau_gradient: str = "corrected"
    target_smoothing: float | None = None
    nsub: int = 32
    loss: str = "l2"

    def __post_init__(self):
        set_ = object.__setattr__
        if self.mode not in ("lm", "paper"):
            raise InputError(f"mode: expected 'lm' (Levenberg-Marquardt, default) or 'paper' (DDE-Find's Adam on "
                             f"the integral loss), got {self.mode!r}")
        g = self.tau_grid
        if g is None or g is False:
            set_(self, "tau_grid", None)
        elif isinstance(g, str):
            if g != "auto":
                raise InputError(f"tau_grid: expected 'auto', None or a sequence of delay values, got {g!r}")
        else:
            try:
                arr = tuple(float(x) for x in np.asarray(g, float).ravel())
            except (TypeError, ValueError):
                raise InputError(f"tau_grid: expected 'auto', None or a sequence of delay values, got {g!r}") from None
            if not arr or not all(math.isfinite(x) and x > 0 for x in arr):
                raise InputError(f"tau_grid: delay values must be finite and > 0, got {list(arr)}")
            set_(self, "tau_grid", arr)
        set_(self, "solver", as_solver(self.solver, delays=True, role="fit"))
        for name, minimum in (("n_grid", 2), ("n_refine", 1), ("grid_iter", 1), ("max_iter", 1), ("epochs", 1),
                              ("nsub", 4)):
            _count(name, getattr(self, name), minimum)
        set_(self, "bounds", norm_bounds(self.bounds))
        set_(self, "sigma", norm_sigma(self.sigma))
        for name in ("lr", "eps"):
            _positive(name, getattr(self, name))
        for name in ("xtol", "ftol", "gtol", "rcond", "ident_tol", "loss_tol"):
            _positive(name, getattr(self, name), strict=False)
        if not (isinstance(self.lr_min_ratio, (int, float)) and 0 <= self.lr_min_ratio <= 1):
            raise InputError(f"lr_min_ratio: expected a number in [0, 1], got {self.lr_min_ratio!r}")
        try:
            b1, b2 = (float(b) for b in self.betas)
        except (TypeError, ValueError):
            raise InputError(f"betas: expected two numbers in [0, 1), got {self.betas!r}") from None
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise InputError(f"betas: expected two numbers in [0, 1), got {self.betas!r}")
        set_(self, "betas", (b1, b2))
        if self.loss not in ("l2", "l1"):
            raise InputError(f"loss: expected 'l2' or 'l1', got {self.loss!r}")
        if self.loss == "l1" and self.mode != "paper":
            raise InputError("loss: 'l1' is an integral loss of mode='paper'; the default mode fits least "
                             "squares at the observation times (pass mode='paper' or drop loss=)")
        if self.tau_gradient not in ("corrected", "paper"):
            raise InputError(f"tau_gradient: expected 'corrected' or 'paper', got {self.tau_gradient!r}")
        if self.target_smoothing is not None:
            _positive("target_smoothing", self.target_smoothing, strict=False)

    def fit(self, model, data, *, history=None, start=None, fixed=None, t0=None):
        """Fit ``model`` (with delays) to ``data``.

        Parameters
        ----------
        model : Model
            A model declared with ``delays=[...]``; its observation model gives the observed
            states and the noise scale (``"log"`` noise: residuals of logs in ``mode="lm"``). A
            model with observables (:meth:`Model.observe`) is fitted by maximum likelihood of its
            noise models (PEtab's NLL with all constants: ``fit.nll``; ``mode="lm"`` and
            ``sigma="pooled"`` only, ``history=`` required, observable parameters in ``start``,
            ``fixed`` and ``bounds`` by name, the delay scan on the NLL); see
            :mod:`odeinfer.estimators._dde_likelihood`.
        data : Data
            One experiment; observations at times ``>= t0`` (columns: the observables, for a
            model with observables).
        history : History, number(s), mapping or None
            The states on ``[t0 - tau, t0]``. A parametric family (``oi.History.constant``,
            ``.affine``, ``.periodic``): its parameters are estimated (unless fixed), its values
            are their starting values. Numbers / ``{state: value}`` / a data-driven
            ``History.from_data``: known, nothing estimated. None: a constant family started
            at the first observations (every state must be observed at the first time).
        start : dict, Estimate or array-like, optional
            Starting values by name (model parameters and history parameters; the history's
            own values are the default for the latter), or a sequence in the order of the
            unknowns. ``mode="lm"`` with a delay scan may leave the scanned delay out.
            ``mode="lm"`` without a start of any parameter: the matching estimators are tried
            (they apply only when no delay is free), else a multistart of 16 points inside
            ``bounds`` (then required, finite, for every parameter without a start; each start
            runs the delay scan); ``provenance["start"]`` records the source and what was
            tried, ``extras["auto_starts"]`` the cost reached from each start.
        fixed : dict, optional
            Model parameters and history parameters held fixed, name -> value.
        t0 : float, optional
            End of the history window (start of the integration); default ``data.t0``.

        Returns
        -------
        Estimate
            ``names``: free parameters (delays included), then free history parameters.
            ``history``: ``mode="lm"``: per LM iteration ``cost``, ``grad_norm`` (``||J^T r||``),
            ``lam`` (damping), ``step``, ``grad_cos``, ``n_fail``, ``phase`` (0 fit from the
            start, 1 refined grid point, 2 sigma reweighting); ``mode="paper"``: per epoch
            ``cost`` (integral loss), ``grad_norm``, ``lr``. ``extras``: ``identifiability``,
            ``rank``, ``condition_number``, ``rss``, ``at_bound``, ``bounds``,
            ``tau_profile`` / ``starts`` (lm), ``zero_gradient`` / ``integral_loss`` (paper).

        Raises
        ------
        EstimationError
            The model has no delays (use ``oi.Embedding``).
        InputError, DataError
            Bad bounds, a delay start or bound ``<= 0``, history parameters without a history
            family, data before ``t0``, missing starting values.
        """
        from odeinfer.estimators._dde_setup import build_setup
        from odeinfer.smooth._blas import single_threaded_blas

        t_start = time.perf_counter()
        if getattr(model, "observables", ()):
            odd = [f"{k}={getattr(self, k)!r}" for k, v in (("mode", "lm"), ("sigma", "pooled"))
                   if getattr(self, k) != v]
            if odd:
                raise InputError(f"{', '.join(odd)}: a model with observables is fitted by maximum likelihood with its "
                                 "noise models; drop these settings")
            from odeinfer.estimators._dde_likelihood import fit_dde_likelihood

            with single_threaded_blas():
                return fit_dde_likelihood(self, model, data, history, start, fixed, t0, t_start)
        with single_threaded_blas():
            S = build_setup(self, model, data, history, start, fixed, t0)
            if self.mode == "paper":
                from odeinfer.estimators._dde_paper import run_paper

                return run_paper(self, S, t_start, loss=self.loss)
            from odeinfer.estimators._dde_lm import auto_starts, run_lm

            starts, info = auto_starts(self, S, model, data, start)
            estimate = run_lm(self, S, t_start, starts=starts, start_info=info)
        if estimate.cov is not None and estimate.status != "failed":
            from odeinfer.inference.bootstrap import attach_dde_bootstrap

            attach_dde_bootstrap(self, estimate, S, data, {"history": history, "fixed": fixed, "t0": t0})
        return estimate

    def objective(self, model, data, values, *, history=None, fixed=None, t0=None):
        """The objective this estimator minimises and its exact gradient at ``values``.

        ``mode="lm"``: ``0.5 * sum (x(t_i) - y_i)^2`` (unweighted) and ``J^T r`` from the
        forward sensitivities; ``mode="paper"``: the integral loss against the spline target
        and its adjoint gradient (corrected unless ``tau_gradient="paper"``).

        Parameters
        ----------
        model, data, history, fixed, t0
            As in :meth:`fit`.
        values : dict or array-like (k,)
            The unknowns (by name, or in the order of :meth:`fit`'s ``names``).

        Returns
        -------
        (float, ndarray (k,), tuple of str)
            Objective, gradient, names of the unknowns.
        """
        from odeinfer.errors import SolverError
        from odeinfer.estimators._dde_setup import build_setup

        S = build_setup(self, model, data, history, values, fixed, t0)
        u = S.u0
        if not np.all(np.isfinite(u)):
            raise InputError(f"values: need a value for every unknown {list(S.names)}")
        if self.mode == "paper":
            from odeinfer.estimators._dde_paper import IntegralLoss, L1IntegralLoss

            if self.loss == "l1":
                out = L1IntegralLoss(S, smoothing=self.target_smoothing)(u)
            else:
                out = IntegralLoss(S, smoothing=self.target_smoothing, nsub=self.nsub,
                                   paper_tau_gradient=self.tau_gradient == "paper")(u)
            if out is None:
                raise SolverError("objective: the forward or adjoint solve failed")
            return out[0], out[1], S.names
        out = S.raw(u)
        if out is None:
            raise SolverError("objective: the DDE solve failed")
        r, J = out
        return 0.5 * float(r @ r), J.T @ r, S.names
