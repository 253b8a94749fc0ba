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

__all__ = ["trajectory_check", "record_trajectory_check", "trajectory_residuals", "FLOOR"]

#: Smallest warning threshold of the RMS misfit / noise ratio (see the module notes).
FLOOR = 3.0
#: The noise level used is at least this fraction of each state's spread (sd of its observations):
#: on noise-free or nearly noise-free data a misfit below 0.1 % of the spread is immaterial, and the
#: measured noise (then rounding and the signal's own roughness) would flag solver-tolerance differences.
REL_FLOOR = 1e-3


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
    alone (about 0.3 s at n = 400), so refits, profiles and multistarts on the same data reuse it (the
    last 32 series are kept: 16 n bytes each)."""
    from scipy.interpolate import make_smoothing_spline

    return float(make_smoothing_spline(np.frombuffer(t), np.frombuffer(y))(at))


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
        if ok.sum() < 5:
            return None, None, f"state {s!r} has fewer than 5 observations in {d.name!r}"
        v = _smoothed_at(np.ascontiguousarray(d.t[ok], float).tobytes(),
                         np.ascontiguousarray(y[ok], float).tobytes(), float(d.t[0]))
        x0[k] = v if fn is None else float(fn.x(v))
    return x0, d.t[0], "the smoothed first observation"


def trajectory_check(problem, params_full, estimator, maps=None):
    """Integrate ``problem.model`` at ``params_full`` and compare the misfit with the data's noise.

    ``maps``: the observables' maps (:func:`~odeinfer.estimators._state_maps.state_view`): the
    misfit and the noise are then measured on the observables' noise scales.

    Returns ``(extras, message)``: ``extras`` for ``Estimate.extras["trajectory_check"]`` (the ratio,
    the threshold, per-state ratios, the start used, or why nothing was checked) and the warning
    text when the ratio exceeds the threshold (else None).
    """
    from scipy.special import chdtri

    from odeinfer.estimators._state_maps import noise_scale

    model = problem.model
    if getattr(model, "delays", ()):
        return {"checked": False, "reason": "delay model (the trajectory needs a history)"}, None
    if not np.all(np.isfinite(params_full)):
        return {"checked": False, "reason": "the estimate is not finite"}, None
    fns = noise_scale(model, maps)
    ss, n, by_state, starts = 0.0, 0, {}, []
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
            yj = d.y[d.mask[:, j], j]
            yj = fns[s].z(yj) if s in fns else yj
            sig2 = max(noise_variance(d.t[d.mask[:, j]], yj), (REL_FLOOR * float(np.std(yj))) ** 2)
            rj = r[d.mask[:, j], j]
            if not (sig2 > 0) or rj.size == 0:
                continue
            z2 = float(np.sum(rj ** 2) / sig2)
            ss += z2
            n += rj.size
            prev = by_state.get(s, (0.0, 0))
            by_state[s] = (prev[0] + z2, prev[1] + rj.size)
    if n == 0:
        return {"checked": False, "reason": "no state with a measurable noise level"}, None
    ratio = math.sqrt(ss / n)
    threshold = max(FLOOR, math.sqrt(2.0 * chdtri(n, 1e-3) / n))
    per_state = {s: math.sqrt(v / m) for s, (v, m) in by_state.items()}
    extras = {"checked": True, "rms_ratio": ratio, "threshold": threshold, "rms_ratio_by_state": per_state,
              "n": n, "start": starts[0] if len(set(starts)) == 1 else starts}
    if ratio <= threshold:
        return extras, None
    worst = max(per_state, key=per_state.get)
    msg = (f"{estimator}: the trajectory integrated at the estimate from {starts[0]} misses the data: RMS misfit "
           f"{ratio:.3g} noise standard deviations (noise measured from the data; threshold {threshold:.3g}; worst "
           f"state {worst!r} at {per_state[worst]:.3g}). The estimate is probably biased (e.g. "
           "derivative='forward' on noisy data) unless the model is chaotic over this time span; check it with a "
           "trajectory fit (oi.Embedding) started at this estimate")
    return extras, msg


def record_trajectory_check(problem, params_full, estimator, extras, warns, maps=None):
    """Run :func:`trajectory_check`; store it in ``extras["trajectory_check"]``; on a miss, warn
    (:class:`~odeinfer.errors.BiasWarning`) and append the message to ``warns``."""
    info, msg = trajectory_check(problem, np.asarray(params_full, float), estimator, maps)
    extras["trajectory_check"] = info
    if msg:
        warnings.warn(msg, BiasWarning, stacklevel=4)
        warns.append(msg)
