"""Newton-Raphson (Gauss-Newton), gradient descent and their stochastic versions for the
equation-error ("gradient matching") formulation of Syafiie, Subiantoro, Andasari & Tadeo,
"Systems of ODEs parameters estimation by using stochastic Newton-Raphson and gradient
descent methods" (arXiv preprint); corrected reading in
``specs/seed-000-stochastic-newton-gradient.md``.

The data are turned into rows ``(t_r, x_r, d_r)`` by a derivative scheme
(:mod:`odeinfer.estimators.finite_difference`); the residual, stacked over rows and states, is

    E(a) = f(t_r, x_r, a) - d_r,     J(a) = df/da (t_r, x_r, a)   (exact, from the model kernels)

and ``0.5 ||E||^2`` (paper eq. 29) is minimised without ever solving the ODE.

* :class:`NewtonRaphson` -- the paper's "NR" (eq. 16 with the missing transpose) is
  Gauss-Newton, ``a <- a - (J^T J)^+ J^T E``; Levenberg-Marquardt damping by default,
  ``damping="none"`` for the paper's undamped iteration.
* :class:`GradientDescent` -- ``a <- a - eta J^T E`` with the exact Cauchy step
  ``eta = ||J^T E||^2 / ||J J^T E||^2`` (eq. 31), plus a backtracking guard for models
  nonlinear in ``a`` (where eq. 32 is not guaranteed).
* :class:`StochasticNewton`, :class:`StochasticGradient` -- eqs. (17), (33): each step uses a
  random subset of ``n_equations`` state equations (the paper) and, optionally, a minibatch
  of ``batch_size`` time rows (the big-data version, not in the paper); pseudo-inverse for
  rank-deficient subsets.

Covariance (all four). Fits with a difference stencil (forward, second order, local polynomial),
in memory or streamed from a re-iterable source: the delta method through the observations
(:mod:`odeinfer.estimators._noise_cov`), ``B^-1 (sum_i G_i diag(sigma^2) G_i^T) B^-1`` with ``G_i``
the derivative of the estimating equation w.r.t. sample ``i``. It accounts for the correlation a
stencil puts between neighbouring rows and, to first order, for the noise in the regressors
``x_r`` (errors-in-variables); the noise variance comes from the data alone (local cubic
pseudo-residuals). It matches central differences of the refitted estimate to 1e-5 and the Monte
Carlo spread to a few per cent on a linear chain; on Lorenz (dt = 0.05, sigma = sqrt 2) it is
1.15x / 1.07x / 1.07x the spread, where the residual sandwich (HC0) was 1.25x / 2.4x / 2.6x
(``tests/reference/seed000_tables.md``). Streamed fits compute it in the final pass at the
estimate, in O(chunk) memory (chunks carry the last ``w - 1`` samples of the stencil), and equal
the in-memory covariance to rounding, for any chunking. Spline derivatives (a global smoother)
use the residual sandwich HC0 (rows treated as independent), as ``extras["cov_type"]`` says; a
one-shot iterator gives no covariance (no pass at the final estimate). Neither covariance accounts for
the bias of the finite differences: with measurement noise ``sigma`` the forward difference is
biased by ``O(sigma^2 / dt)`` (spec §5.3) -- denser sampling makes it *worse*. So the default
``derivative="auto"`` smooths (spline in memory, local polynomial for streams); the paper's first
differences are ``derivative="forward"``, and a fit with a difference scheme warns
(:class:`~odeinfer.errors.BiasWarning`, also in ``Estimate.warnings``) when the data's noise is more
than half the variance of the difference quotients (streams: measured on the first chunk), giving
the measured numbers. In-memory fits also run a trajectory check
(:mod:`odeinfer.estimators._trajectory_check`, ``extras["trajectory_check"]``).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from odeinfer.errors import BiasWarning, DataError, InputError
from odeinfer.estimators import _newton_core as core
from odeinfer.estimators._coverage import CoverageWarning, newton_coverage_note
from odeinfer.estimators.base import (EstimationError, Estimator, IdentifiabilityWarning, Problem, _values_by_name,
                                      make_estimate, prepare)
from odeinfer.estimators._noise_cov import ObservationMeat, quotient_noise
from odeinfer.estimators._state_maps import state_inputs
from odeinfer.estimators._trajectory_check import record_trajectory_check
from odeinfer.estimators.finite_difference import SCHEMES, DerivativeScheme
from odeinfer.estimators.streaming import InMemoryRows, as_row_source, minibatches
from odeinfer.model import Model
from odeinfer.results import Estimate

__all__ = ["NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient"]

_DEFAULT_START = 1.0


# --- validation helpers --------------------------------------------------------------------
def _pos_int(name, v, hint):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise InputError(f"{name}: expected a positive int ({hint}), got {v!r}")


def _tol(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < 1):
        raise InputError(f"{name}: expected a number in [0, 1) (relative tolerance), got {v!r}")


def _common_checks(cfg):
    if cfg.derivative != "auto":
        scheme = _scheme(cfg)
        object.__setattr__(cfg, "evaluate_at", scheme.evaluate_at)
    else:
        _scheme(cfg)  # validates the smoother settings (evaluate_at stays None: both smoothers resolve alike)
    _pos_int("max_iter", cfg.max_iter, "iteration budget")
    _tol("xtol", cfg.xtol)
    _tol("gtol", cfg.gtol)
    if not (isinstance(cfg.rcond, float) and 0 < cfg.rcond < 1):
        raise InputError(f"rcond: expected a float in (0, 1) (relative eigenvalue cut-off for the rank), "
                         f"got {cfg.rcond!r}")


def _stochastic_checks(cfg):
    _common_checks(cfg)
    if cfg.n_equations is not None:
        _pos_int("n_equations", cfg.n_equations, "state equations per step, r in the paper; None for all")
    if cfg.batch_size is not None:
        _pos_int("batch_size", cfg.batch_size, "time rows per minibatch; None for all rows")
    if cfg.max_epochs is not None:
        _pos_int("max_epochs", cfg.max_epochs, "passes over the data; None for the default")
    d = cfg.step_decay
    if not (d in ("auto", "none") or (isinstance(d, (int, float)) and not isinstance(d, bool) and d > 0)):
        raise InputError(f"step_decay: expected 'auto', 'none' or a positive number of steps, got {d!r}")


def _scheme(cfg, stream=False):
    """The derivative scheme of ``cfg``; ``"auto"`` is the smoothing spline in memory and the local
    polynomial for streams (a spline needs the whole series)."""
    name = cfg.derivative
    if name not in SCHEMES + ("auto",):
        raise InputError(f"derivative: expected one of {['auto', *SCHEMES]}, got {name!r}; use 'auto' (the default: "
                         "spline in memory, local polynomial for streams), or 'forward' to reproduce the paper")
    if name == "auto":
        name = "local_polynomial" if stream else "spline"
    return DerivativeScheme(name, cfg.window, cfg.degree, cfg.spline_lam, cfg.evaluate_at)


#: Noise share of the difference quotients above which the first-difference bias is flagged: the
#: quotients' noise sd exceeds 1/sqrt(2) of their spread, i.e. noise is more than half their variance
#: (the derivative's signal-to-noise ratio is below 1). Then the O(sigma^2 / dt) covariance between the
#: response and the regressors evaluated at the same noisy samples (spec §5.3) is of the order of the
#: signal the regression fits.
_NOISE_SHARE = 1.0 / math.sqrt(2.0)


def _difference_bias_warning(series, states, scheme):
    """A :class:`BiasWarning` message when the difference quotients of ``series`` (``(label, t, Y)``
    with ``Y`` in model-state columns) are mostly noise, else None."""
    if scheme.name not in ("forward", "second_order"):
        return None
    worst = None
    for label, t, Y in series:
        sigma, noise, spread = quotient_noise(scheme, t, Y)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = noise / spread
        for j, r in enumerate(ratio):
            if np.isfinite(r) and (worst is None or r > worst[0]):
                worst = (r, label, states[j], sigma[j], noise[j], spread[j])
    if worst is None or worst[0] <= _NOISE_SHARE:
        return None
    r, dname, state, sig, noise, spread = worst
    how = "sqrt(2) sigma / dt" if scheme.name == "forward" else "sigma ||stencil||"
    return (f"derivative={scheme.name!r}: the difference quotients are mostly measurement noise, so the "
            f"estimate is biased by O(sigma^2/dt) (regressors and quotients share the noisy samples): in "
            f"{dname}, state {state!r}, the noise sd estimated from the data is sigma = {sig:.4g}, giving quotient "
            f"noise {how} = {noise:.4g} against a quotient spread (sd) of {spread:.4g}: ratio {r:.3g} > "
            f"{_NOISE_SHARE:.3g} (noise above half their variance). Use derivative='spline' (the default) or "
            "'local_polynomial'")


# --- inputs -> rows ---------------------------------------------------------------------------
def _rows_from_data(problem: Problem, scheme, maps=None):
    """Rows of every experiment; with ``maps`` (nonlinear maps of observables, ``{state: ScalarMap}``) the
    scheme runs on the noise scale ``z = zeta(x)`` and the rows are mapped back by the chain rule,
    ``x = phi(z)``, ``x' = phi'(z) z'``."""
    states = problem.model.states
    blocks = []
    for d in problem.experiments:
        if np.any(np.diff(d.t) <= 0):
            raise DataError(f"data {d.name!r}: derivative schemes need strictly increasing times, got repeated "
                            "times (replicates); average the replicates first")
        if d.n_times < scheme.min_samples():
            raise DataError(f"data {d.name!r}: {d.n_times} times, derivative={scheme.name!r} needs at least "
                            f"{scheme.min_samples()}")
        Y = _series(d, states)
        if not maps:
            blocks.append(scheme.rows(d.t, Y))
            continue
        cols = [(k, maps[s]) for k, s in enumerate(states) if s in maps]
        for k, fn in cols:
            Y[:, k] = fn.z(Y[:, k])
        t, X, D = scheme.rows(d.t, Y)
        for k, fn in cols:
            X[:, k], D[:, k] = fn.x(X[:, k]), fn.dx(X[:, k]) * D[:, k]
        blocks.append((t, X, D))
    return InMemoryRows(blocks)


def _series(d, states):
    """(n_times, n_states) samples of one experiment in model-state order, NaN where missing."""
    y = np.where(d.mask, d.y, np.nan)
    return np.column_stack([y[:, d.states.index(s)] if s in d.states else np.full(d.n_times, np.nan)
                            for s in states])


def _delta_method_pass(scheme, problem, source, acc, theta, in_memory):
    """One pass at ``theta``: the normal equations and the delta-method meat (:mod:`._noise_cov`).

    In memory, each experiment is its own series (own noise variances); a streamed source is one
    series read chunk by chunk. Returns ``(Eval, noise variances (n_series, n_states))``.
    """
    p = acc.full_params(theta)
    ones = np.ones(problem.model.n_states)
    st = acc.new()
    if in_memory:
        series = [[(d.t, _series(d, problem.model.states))] for d in problem.experiments]
    else:
        series = [source.sample_chunks()]
    M, sig2 = 0.0, []
    for chunks in series:
        om = ObservationMeat(problem.model, acc.free, p, scheme)
        for t, y in chunks:
            acc.add(st, p, om.push(t, y), ones, False)
        Ms, s2 = om.finish()
        M = M + Ms
        sig2.append(s2)
    ev = acc.finish(st, False)
    ev.M = M
    return ev, np.array(sig2)


def _problem_stream(est, model, start, fixed):
    if not isinstance(model, Model):
        raise TypeError(f"model: expected an odeinfer Model (from @oi.model), got {type(model).__name__}")
    fixed_d = _values_by_name("fixed", fixed, model.params, model.params)
    free = tuple(n for n in model.params if n not in fixed_d)
    if not free:
        raise InputError("fixed: every parameter is fixed; leave at least one free")
    start_d = _values_by_name("start", start, free, model.params)
    start_arr = np.array([start_d.get(n, np.nan) for n in free])
    return Problem(model, model.compile(), (), free, fixed_d, start_arr, None)


def _accumulator(problem):
    full = problem.full_params(np.zeros(len(problem.free)))
    return core.Accumulator(problem.compiled, problem.model.n_states, problem.model.n_params,
                            problem.free_index, np.nan_to_num(full))


def _start(problem):
    s = problem.start.copy()
    s[np.isnan(s)] = _DEFAULT_START
    return s


# --- the shared fit ---------------------------------------------------------------------------
def _run(est, problem, source, scheme, algorithm, *, rng=None, in_memory=True, t_start, warns=(), view=None):
    acc = _accumulator(problem)
    theta0 = _start(problem)
    n = problem.model.n_states

    def full(theta, meat=False):
        return acc.evaluate(source.blocks(), theta, meat=meat)

    if algorithm in ("newton", "gradient"):
        if algorithm == "newton":
            out = core.newton(full, theta0, damping=est.damping, max_iter=est.max_iter, xtol=est.xtol,
                              gtol=est.gtol, rcond=est.rcond, lam0=est.lambda0)
        elif in_memory:
            out = core.gradient_descent_rows(acc, list(source.blocks()), theta0, max_iter=est.max_iter, xtol=est.xtol,
                                             gtol=est.gtol)
        else:
            out = core.gradient_descent(full, theta0, max_iter=est.max_iter, xtol=est.xtol, gtol=est.gtol)
        extras = {}
    else:
        r = n if est.n_equations is None else est.n_equations
        if r > n:
            raise InputError(f"n_equations: {r} exceeds the model's {n} state equations; use at most {n}")
        b = est.batch_size
        if b is not None and source.total_rows is not None and b > source.total_rows:
            raise InputError(f"batch_size: {b} is larger than the data ({source.total_rows} rows after the "
                             f"{scheme.name!r} derivatives); use batch_size <= {source.total_rows} or None")
        gen = np.random.default_rng(rng)
        if b is None:
            per_epoch = math.ceil(n / r)

            def batches():
                for _ in range(per_epoch):
                    yield list(source.blocks())
        else:
            per_epoch = None if source.total_rows is None else max(1, source.total_rows // b)

            def batches():
                count = 0
                for batch in minibatches(source, b, gen):
                    count += 1
                    yield batch
                if count == 0:
                    raise InputError(f"batch_size: {b} is larger than the streamed data (fewer than {b // 2 + 1} "
                                     "rows in a pass); use a smaller batch_size")
        decay = est.step_decay
        if decay == "auto":
            # SNR steps are (nearly) exact on a minibatch: decay over one epoch; Cauchy steps
            # zig-zag, so SGD keeps near-full steps for about ten epochs
            factor = 1.0 if algorithm == "snr" else 10.0
            decay = None if b is None else factor * float(per_epoch or 100)
        elif decay == "none":
            decay = None
        one_shot = not source.reiterable
        epochs = est.max_epochs
        if epochs is None:
            steps_per_epoch = per_epoch if b is None and algorithm == "sgd" else None
            epochs = 1 if one_shot else (100 if steps_per_epoch is None else
                                         math.ceil(GradientDescent.max_iter / steps_per_epoch))
        if one_shot and epochs > 1:
            raise InputError(f"max_epochs: a one-shot iterator allows one pass, got max_epochs={epochs}; "
                             "use max_epochs=1 (or None) or pass a callable that returns a new iterator per pass")
        def python():
            return core.stochastic(acc, batches, (lambda th: None) if one_shot else full, theta0,
                                   method="newton" if algorithm == "snr" else "gradient", n_states=n, n_equations=r,
                                   max_epochs=epochs, max_iter=est.max_iter, xtol=est.xtol, gtol=est.gtol, decay=decay,
                                   rng=gen, rcond=est.rcond, full_batches=b is None)

        if algorithm == "sgd" and in_memory and b is None and r >= n and decay is None:
            out = core.stochastic_gradient_rows(acc, list(source.blocks()), theta0, max_iter=est.max_iter,
                                                max_epochs=epochs, xtol=est.xtol, gtol=est.gtol, python=python)
        else:
            out = python()
        extras = {"n_equations": r, "batch_size": b, "step_decay": decay,
                  "epochs": len(out.history["cost"]) or 1}
    return _finish(est, problem, source, scheme, acc, out, extras, in_memory=in_memory, t_start=t_start,
                   warns=list(warns), view=view)


def _finish(est, problem, source, scheme, acc, out, extras, *, in_memory, t_start, warns, view=None):
    theta = out.theta
    cov = None
    cov_type = "sandwich HC0 (ignores errors-in-variables and stencil correlation)"
    ok = np.all(np.isfinite(theta))
    if ok and scheme.name != "spline" and source.reiterable:
        ev, sig2 = _delta_method_pass(scheme, problem, source, acc, theta, in_memory)
        extras["noise_variance"] = sig2
        if ev.finite:
            cov_type = ("delta method through the observations (stencil correlation and first-order "
                        "errors-in-variables; noise variance from local cubic pseudo-residuals; ignores the difference bias)")
        else:
            ev.M = None
    elif ok and source.reiterable:
        ev = acc.evaluate(source.blocks(), theta, meat=True)
    else:
        ev = out.ev
        if not source.reiterable:
            warns.append("no covariance: a one-shot iterator gives no pass at the final estimate")
    if ev is not None and ev.M is not None and ev.finite and ev.nrows > 0:
        cov, rank, cond, bad = core.sandwich(ev, est.rcond)
        extras.update(rank=rank, condition_number=cond, gradient_cosine=ev.grad_cosine())
        if bad.any():
            names = [n for n, b in zip(problem.free, bad) if b]
            msg = (f"J^T J is rank deficient (rank {rank} of {len(problem.free)}): {names} are not identifiable "
                   "from these equations; their standard errors are NaN. Fix them (fixed=...) or add data")
            warnings.warn(msg, IdentifiabilityWarning, stacklevel=4)
            warns.append(msg)
        note = newton_coverage_note(type(est).__name__, scheme.name)
        warnings.warn(note, CoverageWarning, stacklevel=4)
        warns.append(note)
    status = out.status
    if not np.all(np.isfinite(theta)):
        status = "failed"
    residuals, t_rows = None, None
    if in_memory and np.all(np.isfinite(theta)):
        parts = [(b[0], acc.residuals(b, theta)) for b in source.blocks()]
        t_rows = np.concatenate([p[0] for p in parts])
        residuals = np.concatenate([p[1] for p in parts])
    if ev is not None and ev.nbad:
        warns.append(f"{ev.nbad} residuals are not finite at the estimate")
    if in_memory and np.all(np.isfinite(theta)):
        record_trajectory_check(problem, acc.full_params(theta), type(est).__name__, extras, warns,
                                None if view is None else view.mapped)
    extras.update(derivative=scheme.name, evaluate_at=scheme.evaluate_at, source=source.describe(),
                  cov_type=cov_type)
    if t_rows is not None:
        extras["t_rows"] = t_rows
    hist = {k: np.asarray(v, float) for k, v in out.history.items()}
    return make_estimate(est, problem if view is None else view.report(problem), problem.free, theta, cov, status,
                         t_start=t_start, message=out.message,
                         n_iter=out.n_iter, cost=float(ev.cost) if ev is not None else float("nan"),
                         nobs=int(ev.nrows) if ev is not None else 0, residuals=residuals, history=hist,
                         extras=extras, warnings=tuple(warns),
                         **({} if in_memory else {"provenance": {"data": [source.describe()]}}))


def _reject_delays(est, model):
    if getattr(model, "delays", ()):
        raise EstimationError(
            f"model: {getattr(model, 'name', 'model')!r} has delays {list(model.delays)}; {type(est).__name__} fits "
            "the equation error at the observation times and does not handle lagged states x(t - tau). Use "
            "oi.OrthogonalConditions (lagged states from the same spline proxy) or oi.AdjointDDE (trajectory fit)")


def _reject_log_noise(est, model):
    if model.observation.noise == "log":
        raise EstimationError(
            f"model: {model.name!r} declares noise='log', but {type(est).__name__} differences the raw observations "
            "(additive errors) and does not honour log-normal noise. Use oi.OrthogonalConditions or "
            "oi.GradientMatching (spline proxy on the log scale), oi.Embedding or oi.Simultaneous (log-scale "
            "residuals), or fit model.with_observation(noise='additive') to match on the raw scale")


def _fit(est, algorithm, model, data, start, fixed, rng=None):
    _reject_delays(est, model)
    t0 = time.perf_counter()
    view, model, data, fixed, start = state_inputs(model, data, fixed, start, type(est).__name__)
    scheme = _scheme(est)
    maps = None
    if view is not None and view.nonlinear:
        if scheme.name != "spline":
            bad = [f"{m.observable!r} = {m.text} ({m.scale} noise)" for m in view.nonlinear]
            raise EstimationError(
                f"derivative: {scheme.name!r} differences the samples, but the observables {bad} map their noise scale "
                f"to the states nonlinearly, so the differences of the recovered states are biased and the "
                f"delta-method covariance does not apply; use derivative='spline' (or 'auto'), which smooths on the "
                f"noise scale, or oi.OrthogonalConditions / oi.GradientMatching")
        maps = {m.state: m.fn for m in view.nonlinear}
    problem = prepare(model, data, start=start, fixed=fixed, require_all_observed=True,
                      estimator=type(est).__name__)
    _reject_log_noise(est, model)
    source = _rows_from_data(problem, scheme, maps)
    states = problem.model.states
    warns = _warn_bias([(f"data {d.name!r}", d.t, _series(d, states)) for d in problem.experiments], states, scheme)
    out = _run(est, problem, source, scheme, algorithm, rng=rng, in_memory=True, t_start=t0, warns=warns,
               view=view)
    if view is None and out.converged:
        from odeinfer.data import Data
        from odeinfer.inference.bootstrap import attach_newton_bootstrap

        seeded = {"rng": int(rng)} if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) else {}
        attach_newton_bootstrap(est, out, problem, isinstance(data, Data), {"fixed": fixed, **seeded})
    return out


def _warn_bias(series, states, scheme):
    msg = _difference_bias_warning(series, states, scheme)
    if not msg:
        return []
    warnings.warn(msg, BiasWarning, stacklevel=4)
    return [msg]


def _fit_stream(est, algorithm, model, source, start, fixed, states, chunk_size, rng=None):
    _reject_delays(est, model)
    if getattr(model, "observables", ()):
        raise EstimationError(
            f"model: {model.name!r} has observables {list(model.observable_names)}, but fit_stream reads state columns; "
            f"convert the stream to the states, or put the data in an oi.Data and use {type(est).__name__}().fit")
    if isinstance(model, Model):
        _reject_log_noise(est, model)
    t0 = time.perf_counter()
    problem = _problem_stream(est, model, start, fixed)
    scheme = _scheme(est, stream=True)
    rows = as_row_source(source, scheme, model.states, states, chunk_size)
    if algorithm in ("newton", "gradient") and not rows.reiterable:
        raise InputError(f"source: {type(est).__name__} needs one pass per iteration, but a one-shot iterator "
                         "can be read once; pass a callable that returns a new iterator, a list of chunks, or "
                         "(t, y) arrays (np.load(..., mmap_mode='r'))")
    warns = []
    if rows.reiterable and scheme.name in ("forward", "second_order"):
        # measured on the first chunk of samples (a pass over the whole stream is not worth a warning)
        first = next(iter(rows.sample_chunks()), None)
        if first is not None:
            warns = _warn_bias([("the stream's first chunk", *first)], model.states, scheme)
    return _run(est, problem, rows, scheme, algorithm, rng=rng, in_memory=False, t_start=t0, warns=warns)


_FIT_DOC = """
        Parameters
        ----------
        model : Model
            Every state must be observed (equation-error methods need all of ``x``); additive noise
            (``noise="log"`` is refused with an EstimationError naming the estimators that honour it).
            Observables (``model.observe``) that are invertible functions of one state each are
            recovered on the state scale: an affine map (``"2.5*x + 1"``, linear noise) works with
            every derivative scheme; a nonlinear one (``"log(x)"``, log-scale noise) needs
            ``derivative="spline"`` (smoothing on the noise scale, rows mapped by the chain rule).
            See :mod:`odeinfer.estimators._state_maps`; other observables are refused, naming them.
        data : Data or Experiments
            Strictly increasing times; missing values (NaN) drop the affected rows.
        start : dict, array-like (n_free,) or Estimate, optional
            Start values of the free parameters; missing ones start at 1.0.
        fixed : dict, optional
            Parameters held fixed, name -> value.

        Returns
        -------
        Estimate
            ``values`` (free parameters), ``cov`` (delta method through the observations, or HC0 for
            splines: see the module notes and ``extras["cov_type"]``; the noise variances per
            experiment and state in ``extras["noise_variance"]``; it treats the derivative proxy as exact,
            so every estimate with a covariance carries a :class:`~odeinfer.CoverageWarning` quoting the
            coverage panel's figures, ``tests/reference/coverage.md``, and naming oi.Embedding for
            intervals that cover), ``status``, ``n_iter``, ``cost``
            (``0.5 ||E||^2``), ``nobs`` (equations used), ``residuals`` (rows x states, NaN where
            skipped; their times in ``extras["t_rows"]``), ``history`` (``cost``, ``step``, ``grad``
            per iteration, or per epoch for the stochastic estimators), ``extras`` (with
            ``trajectory_check`` (one solve at the estimate: RMS misfit / noise measured from the data; a :class:`~odeinfer.errors.BiasWarning` and a ``warnings`` entry when far, see :mod:`odeinfer.estimators._trajectory_check`)), ``warnings``.
"""

_STREAM_DOC = """
        Parameters
        ----------
        model : Model
        source : (t, y) arrays / memory maps, (N, 1 + n) array or .npy path, callable returning an
            iterator of ``(t_chunk, y_chunk)``, re-iterable of chunks, or a one-shot iterator
            (see :mod:`odeinfer.estimators.streaming`). Memory use is O(chunk).
        start, fixed : as in :meth:`fit`
        states : sequence of str, optional
            Names of the columns of ``y`` (default: the model's states in order).
        chunk_size : int, default 100000
            Samples per chunk read from array sources.

        Returns
        -------
        Estimate
            As :meth:`fit`, without ``residuals``.
"""


def _cite_class(cls):
    cls.__doc__ = cls.__doc__.rstrip() + ("\n\n    References\n    ----------\n    S. Syafiie, A. Subiantoro, V. Andasari, F. Tadeo, \"Systems of "
                    "ODEs parameters estimation by using\n    stochastic Newton-Raphson and gradient descent methods\", "
                    "arXiv preprint.\n")
    return cls


def _cite(cls):
    _cite_class(cls)
    cls.fit.__doc__ = cls.fit.__doc__.rstrip() + "\n" + _FIT_DOC
    cls.fit_stream.__doc__ = cls.fit_stream.__doc__.rstrip() + "\n" + _STREAM_DOC
    return cls


_COMMON = """
    derivative : {"auto", "spline", "local_polynomial", "forward", "second_order"}, default "auto"
        Derivative scheme (see :mod:`odeinfer.estimators.finite_difference`). "auto": the smoothing
        spline (GCV) for ``fit`` and the local polynomial for ``fit_stream`` (a spline needs the whole
        series). The spline is the default because its smoothing adapts to the noise: on simulated
        alpha-pinene (n = 400 on (0, 100], sigma = 3) it puts theta3, theta4 within 10% of the truth,
        where the fixed 9-sample local polynomial is 2.5x low on theta4 and the paper's first
        differences are 36x / 5x high (``tests/test_newton_family.py``). Its covariance is the residual
        sandwich (HC0; the delta-method covariance validated against the Monte Carlo spread exists for
        the stencils only, see ``extras["cov_type"]``). "forward" is the paper's first difference and
        "second_order" its eq. (12): both are biased by ``O(sigma^2 / dt)`` under noise (spec §5.3), and
        a :class:`~odeinfer.errors.BiasWarning` with the measured noise share says when the data make
        that bias large.
    window, degree : int, default 9, 2
        Local polynomial settings.
    spline_lam : float or None, default None
        Smoothing-spline penalty (None: GCV).
    evaluate_at : {"measured", "smoothed"} or None
        Where ``f`` is evaluated (None: measured for differences, smoothed for smoothers).
    rcond : float, default 1e-10
        Relative eigenvalue cut-off of the Jacobi-scaled ``J^T J`` (rank, pseudo-inverse)."""


@_cite
@dataclass(frozen=True)
class NewtonRaphson(Estimator):
    __doc__ = ("""The paper's "NR" (Algorithm 1): Gauss-Newton on the equation error, with optional damping.

    Parameters
    ----------""" + _COMMON + """
    damping : {"lm", "none"}, default "lm"
        Levenberg-Marquardt (robust from far starts) or the paper's undamped step.
    lambda0 : float, default 1.0
        Initial damping, relative to ``diag(J^T J)``. The cautious default keeps the first
        steps short: with 1e-3 the activator-inhibitor guess 5 jumps across the pole of
        ``f1`` into a spurious minimum (see ``tests/reference/seed000_tables.md``).
    max_iter : int, default 100
    xtol : float, default 1e-10
        Stop when ``max|step| <= xtol (max|a| + xtol)``.
    gtol : float, default 1e-10
        Stop when ``max_j |J_j^T E| / (||J_j|| ||E||) <= gtol``.

    Examples
    --------
    >>> import odeinfer as oi
    >>> z = oi.zoo.lorenz()
    >>> data, _ = oi.simulate(z.model, z.params, z.x0, z.t)      # noise free, dt = 0.05
    >>> est = NewtonRaphson(derivative="forward").fit(z.model, data, start=[15.0, 1.0, -10.0])
    >>> est.status, est.values.round(3).tolist()   # forward-difference truncation bias (spec §5.3)
    ('converged', [9.456, 27.604, 2.834])
    """)

    derivative: str = "auto"
    window: int = 9
    degree: int = 2
    spline_lam: float | None = None
    evaluate_at: str | None = None
    damping: str = "lm"
    lambda0: float = 1.0
    max_iter: int = 100
    xtol: float = 1e-10
    gtol: float = 1e-10
    rcond: float = 1e-10

    def __post_init__(self):
        _common_checks(self)
        if self.damping not in ("lm", "none"):
            raise InputError(f"damping: expected 'lm' (Levenberg-Marquardt) or 'none' (the paper), got {self.damping!r}")
        if isinstance(self.lambda0, bool) or not isinstance(self.lambda0, (int, float)) or not self.lambda0 > 0:
            raise InputError(f"lambda0: expected a positive number (initial Levenberg-Marquardt damping relative "
                             f"to diag(J^T J)), got {self.lambda0!r}")

    def fit(self, model, data, *, start=None, fixed=None) -> Estimate:
        """Estimate the parameters from in-memory data."""
        return _fit(self, "newton", model, data, start, fixed)

    def fit_stream(self, model, source, *, start=None, fixed=None, states=None, chunk_size=100_000) -> Estimate:
        """Exact Gauss-Newton over a stream: one pass per iteration accumulates ``J^T J`` and ``J^T E``."""
        return _fit_stream(self, "newton", model, source, start, fixed, states, chunk_size)


@_cite
@dataclass(frozen=True)
class GradientDescent(Estimator):
    __doc__ = ("""The paper's "GD" (Algorithm 3): steepest descent with the exact Cauchy step (eq. 31).

    Parameters
    ----------""" + _COMMON + """
    max_iter : int, default 20000
    xtol : float, default 1e-12
    gtol : float, default 1e-9
        As for :class:`NewtonRaphson`. The paper's loose, unreported step tolerance explains its
        start-dependent Lorenz results (spec §5.2 item 6); tight tolerances reach the NR solution.
    """)

    derivative: str = "auto"
    window: int = 9
    degree: int = 2
    spline_lam: float | None = None
    evaluate_at: str | None = None
    max_iter: int = 20000
    xtol: float = 1e-12
    gtol: float = 1e-9
    rcond: float = 1e-10

    def __post_init__(self):
        _common_checks(self)

    def fit(self, model, data, *, start=None, fixed=None) -> Estimate:
        """Estimate the parameters from in-memory data."""
        return _fit(self, "gradient", model, data, start, fixed)

    def fit_stream(self, model, source, *, start=None, fixed=None, states=None, chunk_size=100_000) -> Estimate:
        """Gradient descent over a stream: one pass per iteration (``||J v||^2 = v^T J^T J v``)."""
        return _fit_stream(self, "gradient", model, source, start, fixed, states, chunk_size)


_STOCH = """
    n_equations : int or None, default None
        ``r``: state equations drawn (uniformly, without replacement) per step; None: all.
    batch_size : int or None, default None
        Time rows per minibatch; None: all rows every step (the paper's scheme).
    max_epochs : int or None, default None
        Passes over the data; convergence is checked after each on the full data. None: 100, except
        1 for a one-shot iterator, and for :class:`StochasticGradient` without minibatches (one
        Cauchy step per equation subset per epoch) as many epochs as :class:`GradientDescent`'s
        20,000 steps: 100 such steps left every alpha-pinene replicate of the coverage panel
        unconverged (about 2,400 were needed).
    max_iter : int, default 100000
        Total steps.
    step_decay : "auto", "none" or float, default "auto"
        Steps are scaled by ``1 / (1 + k / step_decay)``; "auto": no decay without minibatches
        (the paper); with minibatches, the number of steps in one epoch (SNR) or ten epochs
        (SGD, whose Cauchy steps zig-zag); "none": no decay.
    xtol : float, default 1e-8
        Stop when the change over an epoch (that updated every parameter) is ``<= xtol (max|a| + xtol)``.
    gtol : float, default 1e-10
        Stop when the full-data gradient cosine is ``<= gtol``."""


@dataclass(frozen=True)
class _Stochastic(Estimator):
    """Settings and entry points shared by :class:`StochasticNewton` and :class:`StochasticGradient`."""

    _KIND: ClassVar[str] = ""

    derivative: str = "auto"
    window: int = 9
    degree: int = 2
    spline_lam: float | None = None
    evaluate_at: str | None = None
    n_equations: int | None = None
    batch_size: int | None = None
    max_epochs: int | None = None
    max_iter: int = 100_000
    step_decay: object = "auto"
    xtol: float = 1e-8
    gtol: float = 1e-10
    rcond: float = 1e-10

    def __post_init__(self):
        _stochastic_checks(self)

    def fit(self, model, data, *, start=None, fixed=None, rng=None) -> Estimate:
        """Estimate the parameters from in-memory data; ``rng``: seed or numpy Generator."""
        return _fit(self, self._KIND, model, data, start, fixed, rng)

    def fit_stream(self, model, source, *, start=None, fixed=None, states=None, chunk_size=100_000,
                   rng=None) -> Estimate:
        """Minibatch steps over a stream (O(chunk + batch) memory); ``rng``: seed or Generator."""
        return _fit_stream(self, self._KIND, model, source, start, fixed, states, chunk_size, rng)


_Stochastic.fit.__doc__ += "\n" + _FIT_DOC
_Stochastic.fit_stream.__doc__ += "\n" + _STREAM_DOC


@_cite_class
@dataclass(frozen=True)
class StochasticNewton(_Stochastic):
    __doc__ = ("""The paper's "SNR" (Algorithm 2): Gauss-Newton steps on random equation subsets and minibatches.

    The pseudo-inverse makes subsets that miss some parameters work (zero step for them).

    Parameters
    ----------""" + _COMMON + _STOCH)

    _KIND: ClassVar[str] = "snr"


@_cite_class
@dataclass(frozen=True)
class StochasticGradient(_Stochastic):
    __doc__ = ("""The paper's "SGD" (Algorithm 4): Cauchy-step gradient descent on random equation subsets
    and minibatches.

    Parameters
    ----------""" + _COMMON + _STOCH)

    _KIND: ClassVar[str] = "sgd"
