"""A quick trajectory check of a matching estimate (one ODE solve per experiment).

The matching estimators (:class:`~odeinfer.OrthogonalConditions`, :class:`~odeinfer.GradientMatching`,
the Newton family) never integrate the model, so an estimate can fit the derivative conditions and
still be far from the data (issue 16: first-difference Newton-Raphson on noisy alpha-pinene,
36x off, "converged"). :func:`trajectory_check` integrates the model at the estimate and compares
the misfit with the noise level measured from the data alone:

* start: the known initial state ``x0`` at ``t0`` when every state is given, else each state's
  smoothing spline (GCV) at the first observation time (a raw first observation carries its own
  noise along the whole trajectory);
* noise: :func:`~odeinfer.estimators._noise_cov.noise_variance` per state (local cubic
  pseudo-residuals; on the log scale for ``noise="log"``), at least ``REL_FLOOR`` times the state's
  spread;
* statistic: ``rms = sqrt(mean((y - x(t; theta_hat)) / sigma)^2)`` over all observations.

For a correct estimate the standardised residuals have mean square about 1 (noise) plus at most
about 1 more (the start's error carried along a mode that does not decay), so ``rms^2 * N / 2``
is at most about chi-square with ``N`` degrees of freedom. The warning fires above
``max(3, sqrt(2 chi2_{0.999}(N) / N))``: the 0.999 quantile of that bound (1.41 for large ``N``,
2.56 at ``N = 8``), floored at 3 (a systematic misfit of about three noise standard deviations),
so a warning means a misfit no correct estimate plausibly has. Chaotic models (Lorenz over many
Lyapunov times) fail the check at any estimate: the message says so.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from odeinfer.errors import BiasWarning
from odeinfer.estimators._noise_cov import noise_variance

__all__ = ["trajectory_check", "record_trajectory_check", "trajectory_residuals", "fit_check", "runaway_check",
           "unusable_reason",
           "missed", "FLOOR", "RUNAWAY_FACTOR", "RUNAWAY_CHI2"]

#: Smallest warning threshold of the RMS misfit / noise ratio (see the module notes).
FLOOR = 3.0
#: The noise level used is at least this fraction of each state's spread (sd of its observations):
#: on noise-free or nearly noise-free data a misfit below 0.1 % of the spread is immaterial, and the
#: measured noise (then rounding and the signal's own roughness) would flag solver-tolerance differences.
REL_FLOOR = 1e-3
#: A parameter "runs away" when its magnitude grew at least this much from its start ...
RUNAWAY_FACTOR = 1e3
#: ... and doubling it changes the fit's chi-square (linearised, noise measured from the data) by less
#: than the 95% quantile of chi-square(1): the data cannot tell it from twice (or any larger) its value.
RUNAWAY_CHI2 = 3.841458820694124


def trajectory_residuals(model, d, x0, t0, params_full, maps=None):
    """Residuals ``y - x(t)`` on the noise scale (log scale under log noise, ``zeta(y) - zeta(x(t))``
    for the observables' ``maps``, see :func:`~odeinfer.estimators._state_maps.noise_scale`) of one
    experiment ``d`` for the trajectory from ``x0`` at ``t0`` at the full parameter vector; NaN where
    not observed. None if the solver fails."""
    from odeinfer.estimators._state_maps import noise_scale
    from odeinfer.solve import Problem, solve

    try:
        sol = solve(Problem(model, d.t, x0=x0, t0=t0), params_full, raise_on_failure=False)
    except Exception:
        return None
    if not sol.success:
        return None
    fit = np.asarray(sol.y)[:, [model.states.index(s) for s in d.states]]
    fns = noise_scale(model, maps)
    r = np.asarray(d.y, float) - fit
    for j, s in enumerate(d.states):
        if s in fns:
            r[:, j] = fns[s].z(d.y[:, j]) - fns[s].z(fit[:, j])
    return np.where(d.mask, r, np.nan)


@functools.lru_cache(maxsize=32)
def _smoothed_at(t: bytes, y: bytes, at: float) -> float:
    """The GCV smoothing spline of ``y`` over ``t`` (float64 bytes) at ``at``: a function of the data
    alone, so refits, profiles and multistarts on the same data reuse it (the last 32 series are kept:
    16 n bytes each)."""
    from odeinfer.smooth.gcv import smoothed_value

    return smoothed_value(np.frombuffer(t), np.frombuffer(y), at)


def _start(model, d, known, fns):
    """``(x0, t0, how)`` of the check's trajectory, or ``(None, None, why)``."""
    if known is not None and all(s in known for s in model.states):
        return np.array([known[s] for s in model.states], float), d.t0, "the known x0"
    x0 = np.empty(model.n_states)
    for k, s in enumerate(model.states):
        if s not in d.states:
            return None, None, f"state {s!r} is not observed in {d.name!r} and x0 is not given"
        j = d.states.index(s)
        fn = fns.get(s)
        y = d.y[:, j] if fn is None else fn.z(d.y[:, j])
        ok = d.mask[:, j] & np.isfinite(y)
        if np.unique(d.t[ok]).size < 5:
            return None, None, f"state {s!r} is observed at fewer than 5 times in {d.name!r}"
        v = _smoothed_at(np.ascontiguousarray(d.t[ok], float).tobytes(),
                         np.ascontiguousarray(y[ok], float).tobytes(), float(d.t[0]))
        x0[k] = v if fn is None else float(fn.x(v))
    return x0, d.t[0], "the smoothed first observation"


def _noise_var(d, j, fns):
    """The noise variance of column ``j`` of experiment ``d`` on its noise scale, measured from the data
    alone (at least ``REL_FLOOR`` times the spread, squared); and the observed values' mask."""
    s = d.states[j]
    obs = d.mask[:, j]
    yj = d.y[obs, j]
    yj = fns[s].z(yj) if s in fns else yj
    return max(noise_variance(d.t[obs], yj), (REL_FLOOR * float(np.std(yj))) ** 2), obs


def _verdict(by_state):
    """``(extras, worst)`` from ``{state: (sum of squared standardised residuals, count)}``; ``worst`` is
    the worst state when the RMS ratio exceeds the threshold, else None; ``extras`` is None when nothing
    was measurable."""
    from scipy.special import chdtri

    n = sum(m for _, m in by_state.values())
    if n == 0:
        return None, None
    ratio = math.sqrt(sum(v for v, _ in by_state.values()) / n)
    threshold = max(FLOOR, math.sqrt(2.0 * chdtri(n, 1e-3) / n))
    per_state = {s: math.sqrt(v / m) for s, (v, m) in by_state.items()}
    extras = {"checked": True, "rms_ratio": ratio, "threshold": threshold, "rms_ratio_by_state": per_state, "n": n}
    return extras, (None if ratio <= threshold else max(per_state, key=per_state.get))


def _misfit_text(extras, worst):
    return (f"RMS misfit {extras['rms_ratio']:.3g} noise standard deviations (noise measured from the data; "
            f"threshold {extras['threshold']:.3g}; worst state {worst!r} at {extras['rms_ratio_by_state'][worst]:.3g})")


def trajectory_check(problem, params_full, estimator, maps=None):
    """Integrate ``problem.model`` at ``params_full`` and compare the misfit with the data's noise.

    ``maps``: the observables' maps (:func:`~odeinfer.estimators._state_maps.state_view`): the
    misfit and the noise are then measured on the observables' noise scales.

    Returns ``(extras, message)``: ``extras`` for ``Estimate.extras["trajectory_check"]`` (the ratio,
    the threshold, per-state ratios, the start used, or why nothing was checked) and the warning
    text when the ratio exceeds the threshold (else None).
    """
    from odeinfer.estimators._state_maps import noise_scale

    model = problem.model
    if getattr(model, "delays", ()):
        return {"checked": False, "reason": "delay model (the trajectory needs a history)"}, None
    if not np.all(np.isfinite(params_full)):
        return {"checked": False, "reason": "the estimate is not finite"}, None
    fns = noise_scale(model, maps)
    by_state, starts = {}, []
    for d in problem.experiments:
        x0, t0, how = _start(model, d, problem.x0, fns)
        if x0 is None:
            return {"checked": False, "reason": how}, None
        starts.append(how)
        r = trajectory_residuals(model, d, x0, t0, params_full, maps)
        if r is None or not np.all(np.isfinite(r[d.mask])):
            msg = (f"{estimator}: the model could not be integrated at the estimate from {how} of data {d.name!r} "
                   "(solver failure or a non-finite state): the estimate is far from any trajectory; check it "
                   "with a trajectory fit (oi.Embedding) started at this estimate")
            return {"checked": True, "rms_ratio": math.inf, "start": how}, msg
        for j, s in enumerate(d.states):
            sig2, obs = _noise_var(d, j, fns)
            rj = r[obs, j]
            if not (sig2 > 0) or rj.size == 0:
                continue
            prev = by_state.get(s, (0.0, 0))
            by_state[s] = (prev[0] + float(np.sum(rj ** 2) / sig2), prev[1] + rj.size)
    extras, worst = _verdict(by_state)
    if extras is None:
        return {"checked": False, "reason": "no state with a measurable noise level"}, None
    extras["start"] = starts[0] if len(set(starts)) == 1 else starts
    if worst is None:
        return extras, None
    msg = (f"{estimator}: the trajectory integrated at the estimate from {starts[0]} misses the data: "
           f"{_misfit_text(extras, worst)}. The estimate is probably biased (e.g. "
           "derivative='forward' on noisy data) unless the model is chaotic over this time span; check it with a "
           "trajectory fit (oi.Embedding) started at this estimate")
    return extras, msg


def fit_check(model, experiments, raw, row_exp, row_state, estimator):
    """The misfit of a trajectory fit's own residuals against the noise measured from the data (no
    solve: the fit's residuals are at hand).

    Parameters
    ----------
    model : Model
    experiments : Experiments
        The fitted data; ``row_exp`` indexes them.
    raw : ndarray (N,)
        Residuals ``x(t) - y`` of the observation rows on the noise scale (log under log noise).
    row_exp, row_state : ndarray of int (N,)
        Experiment and state (index in ``model.states``) of each row.
    estimator : str

    Returns
    -------
    (dict, str or None, ndarray)
        ``extras["fit_check"]`` (as :func:`trajectory_check`'s), the warning text when the misfit exceeds
        the threshold, and the data's noise sd per row (NaN where not measurable).
    """
    from odeinfer.estimators._state_maps import noise_scale

    fns = noise_scale(model)
    row_sd = np.full(raw.size, math.nan)
    by_state = {}
    for e, d in enumerate(experiments):
        for j, s in enumerate(d.states):
            sel = (row_exp == e) & (row_state == model.states.index(s)) if s in model.states else None
            if sel is None or not sel.any():
                continue
            sig2, _ = _noise_var(d, j, fns)
            if not sig2 > 0:
                continue
            row_sd[sel] = math.sqrt(sig2)
            prev = by_state.get(s, (0.0, 0))
            by_state[s] = (prev[0] + float(np.sum(raw[sel] ** 2) / sig2), prev[1] + int(sel.sum()))
    extras, worst = _verdict(by_state)
    if extras is None:
        return {"checked": False, "reason": "no state with a measurable noise level"}, None, row_sd
    if worst is None:
        return extras, None, row_sd
    msg = (f"{estimator}: the fitted trajectory misses the data: {_misfit_text(extras, worst)}. The fit stopped at a "
           "poor local optimum or on an asymptote of the model (a parameter running away: see the other warnings), "
           "or the model does not describe these data; try another start (start=), several (starts=n with "
           "bounds=), or check the model")
    return extras, msg, row_sd


def runaway_check(names, start, values, rel_jac, row_sd, estimator):
    """Parameters that ran along a flat direction: their magnitude grew at least ``RUNAWAY_FACTOR``
    times from the start, and doubling them changes the fit's chi-square by less than ``RUNAWAY_CHI2``.

    A least-squares fit drawn toward a limit of the model (a carrying capacity K -> infinity turns
    logistic growth into exponential growth, whose fit to data of the early phase can be better than
    any finite K) stops where the gradient vanishes: "converged", with an absurd value and standard
    error. This finds it from quantities the fit has anyway (one pass over its Jacobian).

    Parameters
    ----------
    names : sequence of str
        The free parameters.
    start, values : ndarray
        Their natural start and final values.
    rel_jac : ndarray (N, len(names))
        ``p d x(t_i) / d p`` per observation row (unweighted, on the noise scale).
    row_sd : ndarray (N,)
        The data's noise sd per row (NaN where not measurable: the row is left out).
    estimator : str

    Returns
    -------
    (dict, str or None)
        ``{name: {"start", "value", "growth", "chi2_doubling"}}`` of the runaway parameters and the
        warning text (None when there are none).
    """
    ok = np.isfinite(row_sd) & (row_sd > 0)
    out = {}
    for k, n in enumerate(names):
        v0, v = float(start[k]), float(values[k])
        if not (math.isfinite(v0) and v0 != 0 and math.isfinite(v)) or abs(v) < RUNAWAY_FACTOR * abs(v0):
            continue
        col = rel_jac[ok, k] / row_sd[ok]
        chi2 = float(col @ col)
        if chi2 < RUNAWAY_CHI2:
            out[n] = {"start": v0, "value": v, "growth": abs(v / v0), "chi2_doubling": chi2}
    if not out:
        return out, None
    what = "; ".join(f"{n} from {d['start']:.4g} to {d['value']:.4g} (x{d['growth']:.3g}; doubling it changes the "
                     f"chi-square by {d['chi2_doubling']:.3g})" for n, d in out.items())
    lst = list(out)
    msg = (f"{estimator}: {lst} ran away along a flat direction: {what}, below {RUNAWAY_CHI2:.3g} (chi-square(1), "
           "95%; noise measured from the data), so the data cannot tell these values from any larger ones. The fit "
           "was drawn toward a limit of the model and 'converged' only because the gradient vanishes there; the "
           f"estimate and its standard errors are not usable. Give {lst} a start near the data's scale (start=), "
           "bounds (Embedding(bounds={name: (lower, upper)})) or priors (oi.bayes.sample(priors=...))")
    return out, msg


def missed(est):
    """``(rms_ratio, threshold)`` when the estimate's own check (``extras["fit_check"]`` of a trajectory fit,
    ``extras["trajectory_check"]`` of a matching estimate) found its trajectory far from the data, else None."""
    for key in ("fit_check", "trajectory_check"):
        check = (est.extras or {}).get(key) or {}
        ratio, threshold = check.get("rms_ratio"), check.get("threshold", math.inf)
        if check.get("checked") and ratio is not None and not ratio <= threshold:
            return ratio, threshold
    return None


def unusable_reason(est, covariance=True, trajectory=False):
    """Why the estimate ``est`` must not start a fit or the sampler (None when it may).

    Values that are not finite; with ``covariance``, a covariance with entries that are not finite;
    parameters that ran away along a flat direction (``est.extras["runaway"]``); with ``trajectory``,
    a trajectory that misses the data (the estimator's own check, :func:`missed`: a reason not to start
    a trajectory fit from a matching estimate, but not one to keep NUTS from a trajectory fit's optimum,
    which is the mode of the same likelihood even when the model misses the data). Costs nothing: it
    reads what the estimator recorded.
    """
    vals = np.asarray(est.values, dtype=float)
    bad = [n for n, v in zip(est.names, vals) if not np.isfinite(v)]
    if bad:
        return f"its values of {bad} are not finite"
    runaway = (est.extras or {}).get("runaway")
    if runaway:
        return (f"{sorted(runaway)} ran away along a flat direction (e.g. " + ", ".join(
            f"{n} = {d['value']:.3g} from its start {d['start']:.3g}" for n, d in runaway.items()) + ")")
    miss = missed(est) if trajectory else None
    if miss is not None:
        return (f"its trajectory misses the data (RMS misfit {miss[0]:.3g} noise standard deviations, threshold "
                f"{miss[1]:.3g})")
    if covariance and est.cov is not None and not np.all(np.isfinite(np.asarray(est.cov, dtype=float))):
        cov = np.asarray(est.cov, dtype=float)
        bad = ~np.isfinite(np.diag(cov))
        bad = bad if bad.any() else ~np.all(np.isfinite(cov), axis=1)
        return f"its covariance is not finite for {[n for n, b in zip(est.names, bad) if b]}"
    return None


def record_trajectory_check(problem, params_full, estimator, extras, warns, maps=None):
    """Run :func:`trajectory_check`; store it in ``extras["trajectory_check"]``; on a miss, warn
    (:class:`~odeinfer.errors.BiasWarning`) and append the message to ``warns``."""
    info, msg = trajectory_check(problem, np.asarray(params_full, float), estimator, maps)
    extras["trajectory_check"] = info
    if msg:
        warnings.warn(msg, BiasWarning, stacklevel=4)
        warns.append(msg)
