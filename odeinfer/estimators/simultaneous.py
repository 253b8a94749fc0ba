"""Bock's simultaneous method: states on a grid and parameters estimated together under collocation constraints.

M. R. Osborne (2008), "On estimation algorithms for ordinary differential equations",
ANZIAM J. 50 (CTAC2008), C107-C120, section 2.2 (the method), section 3 (equivalence with
embedding), section 5 (convergence of the Bock iteration); H. G. Bock (1983), "Recent advances
in parameter identification techniques in ODE".

Unknowns: the states ``x_j`` at the grid nodes of every experiment (the initial states are
simply the first nodes) and the free parameters ``theta``. The problem is

    minimise 0.5 ||r(x)||^2   subject to   c(x, theta) = 0,

``r`` the weighted residuals of the observed states at the observation times (which are grid
nodes) and ``c`` the collocation equations of every grid interval (trapezoid, Osborne eq. 5,
or compressed Hermite-Simpson), plus ``x_0 = x0`` for initial states held fixed.

The Bock iteration is Newton's method on the KKT conditions of this problem with the
second derivatives of the constraints dropped (generalised Gauss-Newton, paper section 5):

    [ R^T R   C^T ] [dz    ]     [ R^T r ]
    [ C       0   ] [lambda] = - [ c     ]

``R = dr/dz`` has one entry per row (each residual touches one node value), ``C = dc/dz`` is
block bidiagonal plus the dense parameter columns. Ordered node by node the KKT matrix
without the parameters is a band matrix (half-bandwidth about ``2n``): it is assembled into a
preallocated band array through index maps computed once, factored by a numba band LU with
partial pivoting, and the parameters are eliminated by a ``q x q`` Schur complement
(:mod:`odeinfer.estimators._bock`; SuperLU on the whole arrow-shaped matrix fills in badly
because partial pivoting picks the dense parameter rows). The step is globalised
by a backtracking line search on the l1 merit function ``0.5 ||r||^2 + mu ||c||_1`` with
``mu >= 1.5 ||lambda||_inf`` (plus one second-order correction against the Maratos effect).

Covariance: on the constraint manifold the node values are functions of ``w = (theta, x0)``;
the null-space basis ``Z = dz/dw`` solves ``C Z = 0`` (``C_rest Z_rest = -[C_theta, C_x0]``,
``C_rest`` square block lower bidiagonal), and ``cov(w) = (Z^T R^T R Z)^{-1}`` (the reduced
Gauss-Newton matrix) with residuals weighted by ``1 / sigma_k`` per observed state. It equals
the Gauss-Newton covariance of single shooting on the discretised model (Osborne section 3).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from odeinfer.errors import InputError
from odeinfer.estimators import _bock
from odeinfer.estimators import _simultaneous_setup as setup
from odeinfer.estimators._auto_start import has_param_start, matching_start, start_info
from odeinfer.estimators.base import Estimator, IdentifiabilityWarning, likelihood_problem, make_estimate, prepare
from odeinfer.results import Estimate
from odeinfer.smooth._blas import single_threaded_blas
from odeinfer.smooth.splines import SplineSmoother

__all__ = ["Simultaneous"]

_SCHEMES = {"trapezoid": 0, "hermite-simpson": 1}
_LOOSE_XTOL = 1e-5

# --- configuration checks ------------------------------------------------------------------
def _pos_int(name, v, hint, low=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise InputError(f"{name}: expected an int >= {low} ({hint}), got {v!r}")


def _unit(name, v, hint):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < 1):
        raise InputError(f"{name}: expected a number in (0, 1) ({hint}), got {v!r}")


def _check_sigma(sigma):
    if sigma is None:
        return None
    items = sigma.items() if isinstance(sigma, Mapping) else [("sigma", sigma)]
    for k, v in items:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not (math.isfinite(v) and v > 0):
            raise InputError(f"sigma: expected None (estimate per state), a positive number or a dict "
                             f"{{state: positive number}}; got {k}={v!r}")
    return dict(sigma) if isinstance(sigma, Mapping) else float(sigma)


@dataclass(frozen=True)
class Simultaneous(Estimator):
    """Bock's simultaneous method (Osborne 2008, section 2.2): collocation-constrained least squares.

    Parameters
    ----------
    scheme : {"trapezoid", "hermite-simpson"}, default "trapezoid"
        Collocation rule on each grid interval: the trapezoid (second order, Osborne eq. 5) or
        compressed Hermite-Simpson (fourth order, same block-bidiagonal sparsity).
    n_grid : int or None, default None
        About this many grid nodes per experiment: every observation time and ``t0`` is a
        node and each interval between them is split evenly. Must be at least the number of
        distinct observation times. Default (with ``dt`` and ``grid`` None): at least 201 nodes.
    dt : float or None
        Instead of ``n_grid``: split every interval so no grid step exceeds ``dt``.
    grid : array-like or None
        Instead of ``n_grid``: the grid itself (used for every experiment, restricted to its
        span); it must contain ``t0`` and every observation time.
    estimate_x0 : bool or tuple of str, default True
        Which initial states are estimated (True: all; False: none; or their names). The
        others must be given in ``fit(x0=...)`` and are held fixed.
    sigma : None, float or dict {state: float}
        Noise standard deviation per observed state (log scale when the model's noise is
        ``"log"``). None: estimated per state (start from the spline proxy's residual sd,
        then reweighted with the residual sd of the fit until it changes by < 1%; these
        passes stop at a step tolerance of 1e-5, the last one at ``xtol``).
    max_iter : int, default 100
        Bock iterations (per reweighting pass).
    xtol : float, default 1e-8
        Converged when ``max_i |dz_i| / (|z_i| + s_i) <= xtol`` (``s_i``: the state's largest
        magnitude on the grid for node values, ``1e-6`` for parameters) ...
    ctol : float, default 1e-8
        ... and ``max |c| <= ctol (1 + max |x|)``.
    rcond : float, default 1e-10
        Relative singular-value cut-off of the reduced Jacobian (rank, identifiability).
    smoother : SplineSmoother or None
        Spline proxy for the starting states (default ``SplineSmoother()``, GCV knots).

    Notes
    -----
    Starting values: observed states start at the spline proxy (fitted to ``log y`` for
    log-scale noise); parameters at ``start`` (1.0 where missing). A state never observed
    in an experiment needs a start: either ``x0`` (then the model is simulated from it at
    the start parameters; observed states take their proxy value at ``t0``) or
    ``start_states``. The grid (``extras["grid"]``) and the fitted states
    (``extras["states"]``) are returned per experiment; ``history`` has per iteration the
    ``cost`` (0.5 ||r||^2), ``constraint`` (max |c|), ``merit``, ``mu``, ``step`` (line-search
    step length taken from that iterate; NaN at the last) and ``step_norm`` (scaled max |dz|),
    and ``pass`` (reweighting pass). Near the optimum the Bock iteration converges linearly at
    a rate that shrinks with the noise (paper section 5).

    Examples
    --------
    >>> import odeinfer as oi
    >>> z = oi.zoo.get("lotka_volterra")
    >>> data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=0.5, rng=1)
    >>> est = Simultaneous(n_grid=401).fit(z.model, data, start=[0.5, 0.03, 0.7, 0.02])
    >>> est.status
    'converged'
    """

    scheme: str = "trapezoid"
    n_grid: int | None = None
    dt: float | None = None
    grid: tuple | None = None
    estimate_x0: object = True
    sigma: object = None
    max_iter: int = 100
    xtol: float = 1e-8
    ctol: float = 1e-8
    rcond: float = 1e-10
    smoother: SplineSmoother | None = None

    def __post_init__(self):
        if self.scheme not in _SCHEMES:
            raise InputError(f"scheme: expected one of {list(_SCHEMES)}, got {self.scheme!r}")
        given = [k for k in ("n_grid", "dt", "grid") if getattr(self, k) is not None]
        if len(given) > 1:
            raise InputError(f"{' and '.join(given)}: give at most one of n_grid, dt, grid (got {len(given)})")
        if self.n_grid is not None:
            _pos_int("n_grid", self.n_grid, "grid nodes per experiment", low=2)
        if self.dt is not None and (isinstance(self.dt, bool) or not isinstance(self.dt, (int, float))
                                    or not (math.isfinite(self.dt) and self.dt > 0)):
            raise InputError(f"dt: expected a positive number (largest grid step), got {self.dt!r}")
        if self.grid is not None:
            g = np.asarray(self.grid, dtype=float)
            if g.ndim != 1 or g.size < 2 or not np.all(np.isfinite(g)) or np.any(np.diff(g) <= 0):
                raise InputError(f"grid: expected a strictly increasing 1-D array of at least 2 finite times, "
                                 f"got {self.grid!r}")
            object.__setattr__(self, "grid", tuple(g.tolist()))
        e = self.estimate_x0
        if not isinstance(e, bool):
            if e is None or isinstance(e, str) or not all(isinstance(s, str) for s in e):
                raise InputError(f"estimate_x0: expected True, False or a tuple of state names, got {e!r}")
            object.__setattr__(self, "estimate_x0", tuple(e))
        object.__setattr__(self, "sigma", _check_sigma(self.sigma))
        _pos_int("max_iter", self.max_iter, "Bock iterations")
        _unit("xtol", self.xtol, "relative step tolerance")
        _unit("ctol", self.ctol, "relative constraint tolerance")
        _unit("rcond", self.rcond, "relative singular-value cut-off")
        if self.smoother is not None and not isinstance(self.smoother, SplineSmoother):
            raise InputError(f"smoother: expected an oi.smooth.SplineSmoother or None, got "
                             f"{type(self.smoother).__name__}")

    def _likelihood_problem(self, model, data, fixed, x0):
        """The FitProblem of a likelihood fit, or None for a least-squares fit of observed states."""
        from odeinfer.estimators._simultaneous_likelihood import problem_from_simultaneous

        return likelihood_problem(self, model, data, fixed, x0, defaults=(("estimate_x0", True), ("sigma", None)),
                                  how="with the initial states of its problem (x0 numbers or expressions of "
                                      "parameters)",
                                  build=problem_from_simultaneous)

    def fit(self, model, data=None, *, start=None, fixed=None, x0=None, start_states=None) -> Estimate:
        """Estimate the parameters (and initial states) by the Bock iteration.

        Parameters
        ----------
        model : Model or FitProblem
            Its observation model gives the noise scale (``"additive"`` or ``"log"``);
            which states are observed comes from the data columns. A model with observables
            (:meth:`Model.observe`) or an :class:`~odeinfer.FitProblem` is fitted by maximum
            likelihood under the collocation constraints: the objective is the negative
            log-likelihood of its noise models with all constants (PEtab's, as ``oi.Embedding``
            reports it: ``fit.nll``), on the parameters' scales and within their bounds (a
            FitProblem's :class:`~odeinfer.Param` s; for a model every parameter is estimated on
            the linear scale, unbounded, except ``fixed``), with the conditions of
            ``Experiments(..., conditions=...)`` (overrides, initial-state expressions, doses,
            step and linear inputs, pre-equilibration); ``x0`` is then a dict of numbers or
            expressions, ``start`` is required, the start trajectory is ``start_states`` or else,
            for a state an observable measures directly (``h`` = the state), the spline proxy
            (``smoother``) of its measurements and, for the others, the model simulated at
            ``start``; ``conf_int(method="profile")`` profiles the exact (single-shooting)
            likelihood around the estimate and ``"bootstrap"`` refits by Simultaneous;
            ``estimate_x0`` and ``sigma`` must keep their
            defaults (initial states come from the problem, noise from its noise models). See
            :mod:`odeinfer.estimators._simultaneous_likelihood`.
        data : Data or Experiments
            Several experiments share the parameters; each has its own grid and initial state.
            None for a FitProblem.
        start : dict, array-like (n_free,) or Estimate, optional
            Start values of the free parameters (1.0 where missing). An Estimate also
            supplies ``x0[state]`` starts. Without a start of any parameter, the matching
            estimators give it when they apply (:class:`OrthogonalConditions`, else
            :class:`GradientMatching`; see ``oi.Embedding.fit``), else 1.0;
            ``provenance["start"]`` records the source (``"user"``, the estimator, or
            ``"default"``) and what was tried.
        fixed : dict, optional
            Parameters held fixed, name -> value.
        x0 : dict, array-like (n_states,), or list of those (one per experiment), optional
            Initial states: start values of the estimated ones, values of the fixed ones
            (see ``estimate_x0``).
        start_states : callable, (t, Y) tuple, or list / dict of those per experiment, optional
            Starting trajectory of every state: ``g(t) -> (len(t), n_states)`` or arrays
            ``t`` (k,), ``Y`` (k, n_states) interpolated linearly (they must cover the
            experiment's ``[t0, t_last]``). Overrides the spline proxy.

        Returns
        -------
        Estimate
            ``names``: free parameters, then ``x0[state]`` (``x0[state]@experiment`` with several
            experiments); ``cov`` from the reduced Gauss-Newton matrix; ``residuals`` (rows of all
            experiments stacked, (sum n_times, n_states), NaN where not observed, on the noise
            scale); ``sigma``; ``history``; ``extras`` (grid, states, multipliers, rank).
        """
        with single_threaded_blas():  # small factorisations and a 10-column SVD: threads cost more than they give
            return self._fit(model, data, start, fixed, x0, start_states)

    def _fit(self, model, data, start, fixed, x0, start_states):
        t_start = time.perf_counter()
        problem = self._likelihood_problem(model, data, fixed, x0)
        if problem is not None:
            from odeinfer.estimators._simultaneous_likelihood import fit_simultaneous_likelihood

            return fit_simultaneous_likelihood(self, problem, start, start_states, t_start)
        if isinstance(start, Estimate) and x0 is None:
            x0 = {n[3:-1]: v for n, v in zip(start.names, start.values) if n.startswith("x0[") and n.endswith("]")}
            x0 = x0 or None
        problem = prepare(model, data, start=start, fixed=fixed, estimator="Simultaneous")
        prob = setup.build(self, problem, x0, start_states)
        info = start_info(start, 1)
        if not has_param_start(start):
            found, info = matching_start(model, data, problem, bounds_of=lambda name: (-math.inf, math.inf),
                                         log_mask=np.zeros(len(problem.free), bool), x0=x0)
            if found is None:  # no multistart here: the documented 1.0 default, said so
                info = {"source": "default", "values": {n: 1.0 for n in problem.free}, "tried": info["tried"]}
            else:
                problem = prepare(model, data, start=found, fixed=fixed, estimator="Simultaneous")
                prob = setup.build(self, problem, x0, start_states)
        from odeinfer.solve.shared import TieredKernel

        compiled = model.compile()
        constraints = TieredKernel(compiled, compiled.module.coll_constraints)
        sigma, warns = prob.sigma, list(prob.warnings)
        hist_parts, out, passes = [], None, 0
        z = prob.z0
        final = self.sigma is not None
        for passes in range(1, 7):
            # reweighting passes stop loosely; the last one (sigma settled to 1%) is tight
            prob.set_weights(sigma)
            tol = self.xtol if final else max(self.xtol, _LOOSE_XTOL)
            out = _bock.iterate(prob, constraints, z, _SCHEMES[self.scheme], self.max_iter, tol, self.ctol)
            out.history["pass"] = np.full(len(out.history["cost"]), passes, float)
            hist_parts.append(out.history)
            z = out.z
            if final or out.status != "converged":
                break
            new = prob.residual_sigma(z)
            final = max(abs(new[k] / sigma[k] - 1.0) for k in new) < 0.01 or passes == 5
            sigma = new
        prob.set_weights(sigma)
        history = {k: np.concatenate([h[k] for h in hist_parts]) for k in hist_parts[0]}
        cov, extras_cov = None, {}
        if np.all(np.isfinite(z)):
            cov, extras_cov, bad = _bock.covariance(prob, constraints, z, _SCHEMES[self.scheme], self.rcond)
            if bad:
                msg = (f"the reduced Gauss-Newton matrix is rank deficient: {bad} are not identifiable from "
                       "these data; their standard errors are NaN. Fix them (fixed=... / estimate_x0) or add data")
                warnings.warn(msg, IdentifiabilityWarning, stacklevel=2)
                warns.append(msg)
        if out.status != "converged":
            warns.append(out.message)
        names, values = prob.names_values(z)
        extras = {"scheme": self.scheme, "grid": prob.grids(), "states": prob.states_on_grid(z),
                  "n_nodes": {e.name: int(e.t.size) for e in prob.exps}, "reweighting_passes": passes,
                  "multiplier_max": out.lam_max, "mu": out.mu, **extras_cov}
        fixed_all = dict(problem.fixed)
        fixed_all.update(prob.fixed_x0())
        problem = replace(problem, fixed=fixed_all)
        estimate = make_estimate(self, problem, names, values, cov, out.status, t_start=t_start, message=out.message,
                                 n_iter=int(sum(len(h["cost"]) - 1 for h in hist_parts)), cost=float(out.cost),
                                 nobs=prob.nobs, sigma=prob.sigma_by_name(sigma), residuals=prob.residual_table(z),
                                 history=history, extras=extras, warnings=tuple(warns),
                                 provenance={"method": "Bock iteration (generalised Gauss-Newton on the KKT system), "
                                                       "Osborne (2008) ANZIAM J. 50 C107 section 2.2",
                                             "start": info})
        from odeinfer.data import Data
        from odeinfer.inference.bootstrap import attach_trajectory_bootstrap

        exp_names = [e.name for e in prob.exps] if len(prob.exps) > 1 else ()
        attach_trajectory_bootstrap(self, estimate, model, problem.experiments, isinstance(data, Data),
                                    {"fixed": fixed}, exp_names, x0_from_estimate=True)
        return estimate
