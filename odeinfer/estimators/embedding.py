"""Embedding (trajectory-matching) nonlinear least squares: single shooting, multiple shooting
and Osborne's boundary-value embedding, fitted by Levenberg-Marquardt with exact forward
sensitivities.

M. R. Osborne (2008), "On estimation algorithms for ordinary differential equations",
ANZIAM J. 50 (CTAC2008), C107-C120, section 2.1 (embedding, the boundary condition
``B1 x(0) + B2 x(1) = b``), section 4 (consistency: the embedding estimate is the maximum
likelihood estimate under Gaussian noise) and section 5 (Gauss-Newton's convergence rate).
Multiple shooting with continuity conditions follows H. G. Bock (1983), "Recent advances in
parameter identification techniques in ODE" (Osborne's reference [1]).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from odeinfer.errors import InputError
from odeinfer.estimators._embedding_setup import build_setup
from odeinfer.estimators.base import Estimator, likelihood_problem, norm_bounds, norm_sigma
from odeinfer.inference.executor import as_executor
from odeinfer.solve.config import as_solver

__all__ = ["Embedding"]

#: Iteration budgets per local fit when ``max_iter`` is None: Levenberg-Marquardt iterations per
#: phase of a trajectory fit, and trust-region iterations of a likelihood fit (fides' own default;
#: on Fujita_SciSignal2010, 200 left most starts short of their optimum, see
#: tests/reference/petab_benchmarks.md).
MAX_ITER = {"lm": 200, "likelihood": 1000}


@dataclass(frozen=True)
class Embedding(Estimator):
    """Maximum-likelihood fit of the ODE solution to the data (Osborne 2008, section 2.1).

    Minimises ``sum_ik (h(y_ik) - h(x_k(t_i; theta, x0)))^2 / sigma_k^2`` over the free
    parameters and the initial states (``h`` = identity, or ``log`` when the model's noise is
    ``"log"``), by Levenberg-Marquardt on the residuals with the exact Jacobian from the
    forward sensitivity equations of the numba solver (no finite differences).

    Parameters
    ----------
    boundary : {"initial", "optimal"}, default "initial"
        ``"initial"``: the boundary parameter is the initial state (single shooting, or
        multiple shooting with ``segments > 1``). ``"optimal"``: Osborne's embedding
        ``B1 x(t0) + B2 x(T) = b`` (``T``: last observation time) with ``[B2 B1]`` from the
        orthogonal factorisation of the trapezoidal linearisation along the start trajectory
        (see Notes); the unknowns are ``(theta, b)``, every initial state is estimated.
    estimate_x0 : bool, default True
        Estimate the initial states not given in ``fit(x0=...)``. False: every initial state
        must be given.
    segments : int, default 1
        Multiple shooting: each experiment is cut at ``segments - 1`` observation times; the
        states at the cuts are extra unknowns tied by continuity residuals weighted by
        ``continuity_weight / sigma_k``. Must not exceed the number of intervals between the
        distinct observation times. For a likelihood fit (observables) the cuts avoid dose times
        and each gap is a Gaussian pseudo-measurement with sd ``scale_k / continuity_weight``
        (``scale_k``: the noise sd of a directly observed state, else its largest magnitude at
        the start); see :mod:`odeinfer.likelihood.shooting`.
    continuity_weight : float, default 1.0
        Initial weight of the continuity residuals; after convergence it is raised tenfold,
        up to three times, until the largest gap is below ``1e-6 (1 + max |u|)`` (a penalty
        continuation: with too large an initial weight, e.g. 100 on Lorenz with 20 segments,
        the iteration stays near the single-shooting landscape and finds a poor local optimum).
    polish : bool, default True
        After multiple shooting, finish with single shooting from its result, so the estimate
        is the exact (continuous-trajectory) least-squares optimum and the covariance comes
        from the single-shooting Jacobian.
    bounds : dict, optional
        ``{name: (lower, upper)}`` for parameters and ``"x0[state]"`` (all experiments) or
        ``"x0[state]@experiment"``; natural units.
    log_params : bool or sequence of str, default False
        Estimate these (all free ones if True) as ``log p``: positivity, better scaling. The
        covariance is mapped back by the delta method.
    sigma : {"pooled", "per_state"} or dict, default "pooled"
        ``"pooled"``: one noise sd for all observed states (ordinary least squares; Osborne's
        ``N(0, sigma^2 I)``), ``sigma^2 = RSS / (N - k)``. ``"per_state"``: one sd per observed
        state, by iterated reweighting: fit, ``sigma_k^2 = RSS_k N / (N_k (N - k))``, refit with
        weights ``1 / sigma_k``, until the sds change by less than 1e-4 (relative; at most 20
        rounds). A dict ``{state: sd}``: known sds (covariance not rescaled).
    starts : int, default 1
        Multi-start: the user's start (if complete) plus scrambled Sobol (or LHS) points in the
        box of the free parameters (internal coordinates: log-uniform for log parameters);
        unbounded parameters use ``start / 10 .. start * 10`` (log) or ``start +- max(|start|, 1)``.
        All local optima are kept in ``extras["starts"]``; the best is returned.
    sampler : {"sobol", "lhs"}, default "sobol"
    n_jobs : int, default 1
        Processes for the starts (``-1``: all cores).
    executor : concurrent.futures.Executor or Dask Client, optional
        Run the starts on this executor instead (a Dask ``Client`` or ``client.get_executor()``,
        Ray's, ``mpi4py.futures``', a ``ProcessPoolExecutor``); excludes ``n_jobs``. Each start's
        fit depends on its start only, so the estimate and the table of starts are bitwise those
        of a run in this process. See :mod:`odeinfer.inference.executor` (retries, dead workers,
        taking the same code to a cluster).
    progress : bool, default False
        Show a progress bar over the starts (tqdm) when they run in processes or on an executor.
    rng : int or None, default 0
        Seed of the start sampler.
    solver : Dopri5, Rodas or Auto, optional
        The IVP solver (its tolerances also control the sensitivities); default
        ``oi.Auto(rtol=1e-8, atol=1e-10)`` (the ``fit`` role's: Dopri5, and Rodas for an experiment
        whose solve turns out stiff, for the rest of that local fit: every start of a multistart and
        the final fit begin on Dopri5, so a start's result depends on its start only;
        ``provenance["solver"]["methods_used"]`` says which answered in the final fit).
        Problems with observables (a ``FitProblem``, PEtab) are fitted by their likelihood with the
        ``likelihood`` role's ``oi.Auto(rtol=1e-6, atol=1e-8)`` unless a solver is given here (see
        :data:`odeinfer.solve.config.DEFAULT_SOLVERS` for the accuracy it leaves in the objective).
        There, a trial point's solve that takes ten times the steps of any solve the local fit has
        evaluated (at least 2000) is checked by a solve of the states alone, which ends a trajectory
        that blows up early (:func:`~odeinfer.estimators._likelihood_fit.trial_step_limit`).
    gradient : Adjoint, optional
        How a likelihood fit gets its gradient. Default (None, or ``oi.Forward()``): forward
        sensitivities, which also give the Fisher information, the trust region's curvature (with the
        noise sds' observed information in place of the expected one; see ``Evaluation.curvature``).
        ``oi.Adjoint()``: the discrete adjoint of Rodas (:class:`~odeinfer.Objective`'s
        ``gradient``), one backward pass whatever the number of parameters, with the trust region's
        curvature from BFGS updates: for models with many parameters, where forward sensitivities
        cost a column per parameter at every step. The covariance still needs the Fisher information:
        one evaluation with forward sensitivities at the optimum. Single shooting only; trajectory
        least-squares fits (models without observables) use forward sensitivities.
    max_iter : int or None, default None
        Iterations per local fit; when reached the status is ``"max_iter"`` with the best point.
        None: 200 Levenberg-Marquardt iterations per phase of a trajectory fit, 1000 trust-region
        iterations for a likelihood fit (:data:`MAX_ITER`).
    xtol, ftol, gtol : float, default 1e-10, 1e-12, 1e-10
        LM stopping rules (see :func:`odeinfer.estimators._lm.levenberg_marquardt`).
    rcond : float, default 1e-8
        Relative singular value of the column-scaled Jacobian below which a direction is
        declared non-identifiable (:class:`IdentifiabilityWarning`, NaN standard errors for
        the quantities loading on it).

    Notes
    -----
    *Covariance*: ``(J_w^T J_w)^{-1}`` with ``J_w`` the Jacobian of the residuals divided by the
    (estimated or given) ``sigma_k``, i.e. ``sigma^2 (J^T J)^{-1}`` for a pooled sd; log
    parameters by the delta method. *Profile intervals*: ``est.conf_int(method="profile")``
    re-optimises the other unknowns along each quantity (likelihood ratio with the noise sd
    held at its estimate, chi-square(1) threshold; see :mod:`odeinfer.inference.profile`),
    cached per estimate.

    *Optimal boundary, as implemented*: ``B1, B2`` are computed once per fit, from the
    trapezoidal linearisation ``C_ii = -I - h/2 A_i``, ``C_i,i+1 = I - h/2 A_{i+1}``
    (``A = df/dx``) along the trajectory of the start values on the observation grid refined
    to at least 100 intervals, by the block QR sweep and the final LQ factorisation of
    Osborne's eq. (7). The embedded BVP at each trial ``(theta, b)`` is then solved by Newton's
    method on ``x0`` with the accurate IVP solver (not with the trapezoidal rule), so the
    optimum is exactly the single-shooting one (Osborne's section 3 equivalence); what the
    choice of ``b`` changes is the parametrisation the damped Gauss-Newton iteration moves in
    (better scaled for solutions with growing and decaying modes). Osborne solves the BVP with
    a stable BVP discretisation; this simplification keeps the IVP solver.

    Examples
    --------
    >>> import odeinfer as oi
    >>> z = oi.zoo.get("lotka_volterra")
    >>> data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=0.5, rng=1)
    >>> est = Embedding().fit(z.model, data, start={"alpha": 0.5, "beta": 0.03, "gamma": 0.7, "delta": 0.02})
    >>> est.converged
    True
    """

    boundary: str = "initial"
    estimate_x0: bool = True
    segments: int = 1
    continuity_weight: float = 1.0
    polish: bool = True
    bounds: Any = None
    log_params: Any = False
    sigma: Any = "pooled"
    starts: int = 1
    sampler: str = "sobol"
    n_jobs: int = 1
    rng: int | None = 0
    solver: Any = None
    gradient: Any = None
    max_iter: int | None = None
    xtol: float = 1e-10
    ftol: float = 1e-12
    gtol: float = 1e-10
    rcond: float = 1e-8
    executor: Any = field(default=None, compare=False)
    progress: bool = False

    def __post_init__(self):
        set_ = object.__setattr__
        if self.boundary not in ("initial", "optimal"):
            raise InputError(f"boundary: expected 'initial' or 'optimal', got {self.boundary!r}")
        if not isinstance(self.estimate_x0, (bool, np.bool_)):
            raise InputError(f"estimate_x0: expected True or False, got {self.estimate_x0!r}")
        if not isinstance(self.segments, (int, np.integer)) or isinstance(self.segments, bool) or self.segments < 1:
            raise InputError(f"segments: expected an int >= 1 (1 = single shooting), got {self.segments!r}")
        if self.boundary == "optimal" and self.segments > 1:
            raise InputError("segments: boundary='optimal' is a single-shooting embedding; use segments=1")
        if not (float(self.continuity_weight) > 0):
            raise InputError(f"continuity_weight: expected a positive number, got {self.continuity_weight!r}")
        set_(self, "bounds", norm_bounds(self.bounds))
        lp = self.log_params
        if not isinstance(lp, (bool, np.bool_)):
            if isinstance(lp, str):
                lp = (lp,)
            try:
                lp = tuple(str(x) for x in lp)
            except TypeError:
                raise InputError(f"log_params: expected True, False or a list of parameter names, got {lp!r}") from None
        set_(self, "log_params", lp)
        set_(self, "sigma", norm_sigma(self.sigma))
        if not isinstance(self.starts, (int, np.integer)) or isinstance(self.starts, bool) or self.starts < 1:
            raise InputError(f"starts: expected an int >= 1, got {self.starts!r}")
        if self.sampler not in ("sobol", "lhs"):
            raise InputError(f"sampler: expected 'sobol' or 'lhs', got {self.sampler!r}")
        if not isinstance(self.n_jobs, (int, np.integer)) or self.n_jobs == 0 or self.n_jobs < -1:
            raise InputError(f"n_jobs: expected a positive int or -1 (all cores), got {self.n_jobs!r}")
        if not isinstance(self.progress, (bool, np.bool_)):
            raise InputError(f"progress: expected True or False, got {self.progress!r}")
        set_(self, "executor", as_executor(self.executor))
        if self.executor is not None and self.n_jobs != 1:
            raise InputError(f"n_jobs: n_jobs={self.n_jobs!r} and executor= exclude each other (the executor's "
                             "workers run the starts); drop n_jobs")
        set_(self, "solver", as_solver(self.solver, delays=False, role="fit"))
        set_(self, "gradient", _likelihood_gradient(self.gradient, self.segments))
        if self.max_iter is not None and (isinstance(self.max_iter, bool) or not isinstance(
                self.max_iter, (int, np.integer)) or self.max_iter < 1):
            raise InputError(f"max_iter: expected an int >= 1 or None (the defaults of MAX_ITER), got {self.max_iter!r}")
        for name in ("xtol", "ftol", "gtol", "rcond"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0):
                raise InputError(f"{name}: expected a number >= 0, got {v!r}")

    def __getstate__(self):
        # an executor (pools, locks, connections) is not sent along: a pickled copy runs locally
        return {**self.__dict__, "executor": None}

    def config(self) -> dict:
        """The configuration as a dict (the executor itself, not a copy)."""
        return {**asdict(replace(self, executor=None)), "executor": self.executor}

    def iterations(self, kind):
        """The iteration budget of one local fit of ``kind`` (``"lm"`` or ``"likelihood"``):
        ``max_iter``, or its default for that kind (:data:`MAX_ITER`)."""
        return MAX_ITER[kind] if self.max_iter is None else int(self.max_iter)

    def _likelihood_problem(self, model, data, fixed, x0):
        """The FitProblem of a likelihood fit, or None for a trajectory least-squares fit."""
        from odeinfer.estimators._likelihood_fit import problem_from_embedding

        return likelihood_problem(self, model, data, fixed, x0,
                                  defaults=(("boundary", "initial"), ("sigma", "pooled")),
                                  how="by single or multiple shooting (segments=m)",
                                  build=lambda m, d, f, x: problem_from_embedding(self, m, d, None, f, x))

    def bounds_of(self, name):
        """``(lower, upper)`` given for ``name`` (natural units), or ``(-inf, inf)``."""
        for n, a, b in self.bounds or ():
            if n == name or n == name.split("@")[0]:
                return (a, b)
        return (-math.inf, math.inf)

    def fit(self, model, data=None, *, start=None, fixed=None, x0=None, priors=None):
        """Fit ``model`` to ``data`` by trajectory least squares, or by maximum likelihood for a
        model with observables.

        Parameters
        ----------
        model : Model, FitProblem or PetabProblem
            Its observation model gives the observed states and the noise scale. A model with
            observables (:meth:`Model.observe`), an :class:`~odeinfer.FitProblem` or a
            :class:`~odeinfer.petab.PetabProblem` (its FitProblem) is fitted by
            maximum likelihood: the objective is the negative log-likelihood of its noise models
            (with all constants, as PEtab defines it), minimised by a bound-constrained trust
            region (fides' algorithm) on the parameters' scales with the exact gradient and the Fisher
            information; the best start's fit, when it stopped on a small step or NLL change, is
            continued with those tests at the NLL's rounding (``extras["polish"]``: the NLL before
            and after, iterations; None when not continued); conditions (overrides, doses, inputs,
            pre-equilibration) come from ``Experiments(..., conditions=...)``. ``bounds`` and ``log_params`` then set the
            :class:`~odeinfer.Param` s of a model (a FitProblem carries its own), ``x0`` gives the
            initial states (numbers or expressions of parameters; required), ``segments > 1``
            fits each start by multiple shooting (then single shooting with ``polish``), and
            ``boundary``/``sigma`` must keep their defaults.
        data : Data or Experiments
            Several experiments share the parameters and have their own initial states
            (named ``"x0[state]@experiment"``). None for a FitProblem.
        start : dict, array-like or Estimate, optional
            Start of the free parameters and optionally of initial states (``"x0[state]"``,
            ``"x0[state]@exp"``); observed initial states default to their first observation.
            A start given for some parameters must give all of them (or use ``starts > 1`` with
            finite bounds). Without a start of any parameter (and ``starts == 1``), the
            matching estimators give it when they apply: :class:`OrthogonalConditions`, else
            :class:`GradientMatching` (every state observed; a parameter entering nonlinearly
            is seeded at the geometric midpoint of its bounds, or 1.0; when the estimate's
            trajectory misses the data, a second round seeds the unbounded ones at the data's
            largest magnitude and the estimate with the smallest misfit is used), moved inside the
            bounds; when neither applies or their estimate fails or is not finite, a multistart
            of 16 points inside the (then required, finite) bounds. ``provenance["start"]``
            records the source (``"user"``, ``"OrthogonalConditions"``, ``"GradientMatching"``
            or ``"multistart"``), the values, the seeds, and what was tried and why it failed.
            For a FitProblem, a 2-D array (one row per start, natural units,
            ``problem.estimated``'s order) gives several starts; ``starts`` beyond its rows are
            sampled within the bounds.
        priors : True or dict, optional
            Makes a likelihood fit a maximum a posteriori (MAP) fit: it minimises the negative
            log-likelihood plus the priors' negative log densities (the negative log-posterior up
            to a constant). ``True``: the objective priors of a PetabProblem's parameter table
            (``objectivePriorType``; an InputError if it has none); a dict ``{estimated parameter:
            odeinfer.petab.priors.Prior(kind, a, b, scale)}`` for any likelihood fit (``scale``:
            the parameter's estimation scale). Default None: maximum likelihood. The estimate keeps
            the parts apart: ``fit.nll`` is the negative log-likelihood at the MAP point,
            ``extras["prior_nll"]`` the priors' term, ``extras["objective"]`` their sum (the
            value minimised; ``extras["objective_kind"]`` names it) and the table of starts has
            the three columns; the covariance adds the priors' curvature to the Fisher
            information (a Laplace approximation of the posterior).
        fixed : dict, optional
            Parameters held fixed, name -> value.
        x0 : dict, array-like or dict of dicts, optional
            Known initial states (held fixed): ``{state: value}`` for every experiment, or
            ``{experiment: {state: value}}``.

        Returns
        -------
        Estimate
            ``history``: per LM iteration ``cost``, ``step``, ``lam``, ``grad`` (gradient
            cosine), ``n_fail`` (trial points where the solver failed), ``phase`` (0 single
            shooting, 1 multiple shooting, 2 optimal boundary, 3 sigma reweighting).
            ``extras``: ``starts`` (table of all starts as a dict of columns), ``rss`` per
            state, ``condition_number``, ``rank``, ``n_solver_failures``, ``segments`` /
            ``continuity_max``, ``boundary_B1`` / ``boundary_B2``; the fit's own quick checks
            (:mod:`odeinfer.estimators._trajectory_check`, no extra solve): ``fit_check`` (the RMS
            misfit against the noise measured from the data; above its threshold a BiasWarning) and,
            when a parameter ran away along a flat direction toward a limit of the model (magnitude
            grown 1e3-fold from its start, doubling it changes the chi-square by less than 3.84),
            ``runaway`` (per parameter: start, value, growth, chi-square of doubling) with an
            IdentifiabilityWarning naming it and the fix (a start near the data's scale, bounds,
            priors). Such an estimate is "converged" but not usable: ``oi.analyze`` and
            ``oi.bayes.sample`` do not start from it.
        """
        from odeinfer.estimators import _phases

        from odeinfer.smooth._blas import single_threaded_blas

        t_start = time.perf_counter()
        problem = self._likelihood_problem(model, data, fixed, x0)
        if problem is not None:
            from odeinfer.estimators._likelihood_fit import fit_likelihood, resolve_priors

            priors = resolve_priors(model, problem, priors)
            with single_threaded_blas():
                return fit_likelihood(self, problem, start, t_start, priors)
        if self.gradient is not None:
            raise InputError("gradient: oi.Adjoint() serves likelihood fits (a model with observables and noise "
                             "models, a FitProblem or a PetabProblem); this model is fitted by trajectory least "
                             "squares, whose Jacobian comes from forward sensitivities; drop gradient=")
        if priors is not None and priors is not False:
            raise InputError("priors: a MAP fit needs a likelihood (a model with observables and noise models, a "
                             "FitProblem or a PetabProblem); this model is fitted by trajectory least squares; drop "
                             "priors= or add observables (Model.observe)")
        with single_threaded_blas():
            S = build_setup(self, model, data, start, fixed, x0)
            est, start, S, info = self._resolve_start(S, model, data, start, fixed, x0)
            return _phases.run(est, S, model, data, start, fixed, x0, t_start, start_info=info)

    def _resolve_start(self, S, model, data, start, fixed, x0):
        """``(estimator, start, setup, provenance["start"])``: the user's start, else the matching
        estimators' (see :mod:`odeinfer.estimators._auto_start`), else a multistart in the bounds."""
        from odeinfer.estimators import _auto_start as auto
        from odeinfer.estimators._embedding_setup import split_start

        if self.starts > 1 or auto.has_param_start(start):
            return self, start, S, auto.start_info(start, self.starts)
        nf = S.sp.n_free
        free = S.sp.public_names[:nf]
        found, info = auto.matching_start(model, data, S.problem, bounds_of=self.bounds_of, log_mask=S.log_mask,
                                          x0=x0)
        user_x0 = split_start(start, model)[1]
        if found is None:
            info = auto.multistart_fallback(free, S.lo[:nf], S.hi[:nf], info["tried"])
            return replace(self, starts=auto.FALLBACK_STARTS), start, S, info
        info["x0_from_user"] = sorted(user_x0)
        start = {**found, **user_x0}
        return self, start, build_setup(self, model, data, start, fixed, x0), info


def _likelihood_gradient(gradient, segments):
    """``Embedding.gradient`` checked: None (forward sensitivities; ``oi.Forward()`` is the same) or
    ``oi.Adjoint()``."""
    from odeinfer.solve import Adjoint, Forward

    if gradient is None or isinstance(gradient, Forward) and gradient == Forward():
        return None
    if not isinstance(gradient, Adjoint):
        raise InputError(f"gradient: expected None, oi.Forward() or oi.Adjoint(), got {gradient!r}; a likelihood "
                         "fit chooses its own sensitivity directions")
    if segments > 1:
        raise InputError(f"gradient: oi.Adjoint() fits by single shooting, got segments={segments!r}; use "
                         "segments=1 or drop gradient=")
    return gradient
