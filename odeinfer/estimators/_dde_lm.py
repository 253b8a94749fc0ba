"""Default mode of :class:`~odeinfer.estimators.adjoint_dde.AdjointDDE`: Levenberg-Marquardt on the
weighted residuals at the observation times (exact Jacobian from the DDE forward sensitivities),
a profile scan over the delay to avoid local minima, the noise sd, the Gauss-Newton covariance,
the identifiability report and the :class:`Estimate` with its profile-likelihood hook."""

from __future__ import annotations

import math
import warnings

import numpy as np

from odeinfer.errors import InputError
from odeinfer.estimators._coverage import CoverageWarning, adjoint_dde_coverage_note
from odeinfer.estimators._lm import levenberg_marquardt
from odeinfer.estimators._phases import _covariance
from odeinfer.estimators.base import IdentifiabilityWarning, make_estimate

__all__ = ["run_lm", "auto_starts", "identifiability_report", "delay_grid", "bound_check"]

_PHASE_START, _PHASE_REFINE, _PHASE_SIGMA = 0, 1, 2


def delay_grid(est, S):
    """``(column of the scanned delay, grid values)`` or ``(None, None)`` when no scan is made."""
    g = est.tau_grid
    if g is None or (isinstance(g, str) and g == "none"):
        return None, None
    if S.delay_cols.size != 1:
        if isinstance(g, str):  # "auto": only for one free delay
            return None, None
        raise InputError(f"tau_grid: a grid scans one free delay, but this fit has {S.delay_cols.size} "
                         f"({[S.names[i] for i in S.delay_cols]}); fix the others or pass tau_grid=None")
    i = int(S.delay_cols[0])
    lo, hi = S.lo[i], S.hi[i]
    if isinstance(g, str):
        a = max(lo, 0.01 * hi)
        return i, np.geomspace(a, hi, est.n_grid) if a > 0 else np.linspace(lo, hi, est.n_grid + 1)[1:]
    grid = np.asarray(g, float)
    bad = grid[~((grid >= lo) & (grid <= hi))]
    if bad.size:
        raise InputError(f"tau_grid: values {bad.tolist()} are outside the bounds [{lo:g}, {hi:g}] of "
                         f"{S.names[i]!r}; delays must be > 0 (widen bounds= or change the grid)")
    return i, grid


class _Logged:
    """An evaluator that remembers ``||J^T r||`` of every evaluation, keyed by the cost."""

    def __init__(self, S, solver=None):
        self.S, self.solver, self.gnorm = S, solver, {}

    def __call__(self, u):
        out = self.S.evaluate(u, self.solver)
        if out is not None and np.all(np.isfinite(out[0])):
            r, J = out
            self.gnorm[0.5 * float(r @ r)] = float(np.linalg.norm(J.T @ r))
        return out


def _lm(est, f, u0, S, active=None, max_iter=None, record=True):
    live = S.live
    if live is not None:
        active = live if active is None else np.asarray(active, bool) & live
    return levenberg_marquardt(f, u0, S.lo, S.hi, active, max_iter=max_iter or est.max_iter, xtol=est.xtol,
                               ftol=est.ftol, gtol=est.gtol, record=record)


def _dead_columns(S, u):
    """Unknowns the residuals do not depend on (column norm of the Jacobian below 1e-12 of the
    largest scaled one) at ``u`` and at a perturbed point (so that e.g. a frequency is not
    declared dead because its amplitude starts at 0). Held at their start values: a column
    that is zero up to rounding makes the scaled LM step along it arbitrary (it drifted)."""
    dead = np.ones(S.k, bool)
    pert = np.where(np.arange(S.k) % 2 == 0, 0.013, -0.011)
    for v in (u, np.clip(u + pert * np.where(np.abs(u) > 1e-8, np.abs(u), 1.0), S.lo, S.hi)):
        out = S.evaluate(v)
        if out is None or not np.all(np.isfinite(out[1])):
            return np.zeros(S.k, bool)
        cn = np.sqrt(np.einsum("ij,ij->j", out[1], out[1]))
        eff = cn * np.where(np.abs(v) > 1e-8, np.abs(v), 1.0)
        dead &= eff <= 1e-12 * max(float(np.max(eff)), 1e-300)
    return dead


def _shape_mask(S):
    """Unknowns that shape the history (every history parameter except the offsets ``b``)."""
    mask = np.zeros(S.k, bool)
    for j, n in enumerate(S.names):
        if j >= S.n_free_p and not n.startswith("b["):
            mask[j] = True
    return mask


def _staged(est, f, u0, S):
    """Continuation against the multimodality of the history shape (e.g. the frequency of a
    periodic history): fit with the shape parameters held at their start, then everything."""
    shape = _shape_mask(S)
    if not shape.any():
        return _lm(est, f, u0, S), None
    first = _lm(est, f, u0, S, ~shape)
    if first.r is None:
        return _lm(est, f, u0, S), None
    return _lm(est, f, first.u, S), first


def _scan(est, S, col, grid, u0):
    """Profile of the cost over the delay grid (tau and the history shape held, the model
    parameters and history offsets re-optimised)."""
    act = ~_shape_mask(S)
    act[col] = False
    coarse = S.solver(est.solver.replace(rtol=max(est.solver.rtol, 1e-6), atol=max(est.solver.atol, 1e-8)))
    costs, points = [], []
    for g in grid:
        u = u0.copy()
        u[col] = g
        res = _lm(est, lambda v: S.evaluate(v, coarse), u, S, act, max_iter=est.grid_iter, record=False)
        costs.append(res.cost if res.r is not None else math.inf)
        points.append(res.u.copy())
    return np.asarray(costs), points


def _candidates(costs, n):
    """Indices of the ``n`` lowest local minima of the profile (best first)."""
    c = np.where(np.isfinite(costs), costs, np.inf)
    mins = [i for i in range(c.size) if np.isfinite(c[i]) and (i == 0 or c[i] <= c[i - 1])
            and (i == c.size - 1 or c[i] <= c[i + 1])]
    return sorted(mins, key=lambda i: c[i])[:n]


def _search(est, S):
    """Best local fit over the user's start and the refined grid minima; returns (lm, log, extras)."""
    col, grid = delay_grid(est, S)
    u0 = S.u0.copy()
    missing = [S.names[j] for j in range(S.k) if not math.isfinite(u0[j]) and j != col]
    if missing:
        raise InputError(f"start: no starting value for {missing}; pass start={{name: value}}"
                         + (" (a delay may be left out: the tau grid scan then chooses it)" if col is not None
                            else ""))
    S.set_sigma(np.ones(S.model.n_states))
    runs, extras = [], {}
    probe = u0.copy()
    if col is not None and not math.isfinite(probe[col]):
        probe[col] = grid[0]
    dead = _dead_columns(S, probe)
    if dead.any():
        S.live = ~dead
        extras["held_at_start"] = [S.names[j] for j in np.flatnonzero(dead)]
    if col is None or math.isfinite(u0[col]):
        log = _Logged(S)
        runs.append(("start", _staged(est, log, u0, S)[0], log))
    if col is not None:
        fill = u0.copy()
        if not math.isfinite(fill[col]):
            fill[col] = grid[0]
        costs, points = _scan(est, S, col, grid, fill)
        extras["tau_profile"] = {"name": S.names[col], "tau": grid.tolist(), "cost": costs.tolist()}
        for i in _candidates(costs, est.n_refine):
            log = _Logged(S)
            runs.append((f"grid tau={grid[i]:.6g}", _staged(est, log, points[i], S)[0], log))
    ok = [r for r in runs if r[1].r is not None and math.isfinite(r[1].cost)]
    table = {"origin": [r[0] for r in runs], "cost": [r[1].cost for r in runs],
             "status": [r[1].status for r in runs]}
    for j, n in enumerate(S.names):
        table[n] = [float(r[1].u[j]) for r in runs]
    extras["starts"] = table
    if not ok:
        return runs[0][1], runs[0][2], extras
    best = min(ok, key=lambda r: r[1].cost)
    extras["chosen_start"] = best[0]
    return best[1], best[2], extras


def auto_starts(est, S, model, data, start):
    """Starts of a fit called without a start of any parameter: ``(list of u0 or None, provenance["start"])``.

    The matching estimators first (see :mod:`odeinfer.estimators._auto_start`; for a delay model they
    need a start or a window for a free delay, so usually they do not apply), else a multistart over
    the parameters without a start inside their bounds (a free delay left to the delay grid).
    None: the user's start (or nothing is missing), run as before.
    """
    from odeinfer.estimators import _auto_start as auto
    from odeinfer.inference.multistart import sample_starts

    if auto.has_param_start(start):
        return None, auto.start_info(start, 1)
    col, _ = delay_grid(est, S)
    missing = [j for j in range(S.k) if not math.isfinite(S.u0[j]) and j != col]
    if not missing:
        return None, {"source": "history values and the delay grid"}

    def bounds_of(name):
        return (S.lo[S.names.index(name)], S.hi[S.names.index(name)]) if name in S.names else (-math.inf, math.inf)

    found, info = auto.matching_start(model, data, S.problem, bounds_of=bounds_of,
                                      log_mask=np.zeros(len(S.problem.free), bool))
    if found is not None:
        u0 = S.u0.copy()
        for n, v in found.items():
            u0[S.names.index(n)] = v
        return [u0], info
    names = [S.names[j] for j in missing]
    info = auto.multistart_fallback(names, S.lo[missing], S.hi[missing], info["tried"])
    pts = sample_starts(S.lo[missing], S.hi[missing], auto.FALLBACK_STARTS, sampler="sobol", rng=0)
    U = np.tile(S.u0, (pts.shape[0], 1))
    U[:, missing] = pts
    return list(U), info


def _best_of(est, S, starts):
    """:func:`_search` from each start; the lowest cost wins (costs in ``extras["auto_starts"]``)."""
    best, costs = None, []
    for u0 in starts:
        S.u0, S.live = np.asarray(u0, float), None
        res = _search(est, S)
        ok = res[0].r is not None and math.isfinite(res[0].cost)
        costs.append(float(res[0].cost) if ok else math.nan)
        if ok and (best is None or res[0].cost < best[0].cost):
            best = res
    best = best if best is not None else res
    best[2]["auto_starts"] = {"cost": costs, "chosen": int(np.nanargmin(costs)) if np.isfinite(costs).any() else -1}
    S.u0, S.live = np.asarray(starts[best[2]["auto_starts"]["chosen"]], float), None
    return best


def identifiability_report(names, values, J, cov_bad, rel_se, tol):
    """Per quantity: column norm of the weighted Jacobian, its relative size, and a verdict.

    ``zero``: the residuals do not depend on it at all (its gradient is identically zero);
    ``negligible``: its scaled sensitivity is below ``tol`` times the largest;
    ``rank``: it loads on a null direction of the Jacobian (a combination is not identifiable);
    ``weak``: identifiable but its standard error exceeds its magnitude; ``ok`` otherwise.
    """
    cn = np.sqrt(np.einsum("ij,ij->j", J, J))
    scale = np.where(np.abs(values) > 1e-8, np.abs(values), 1.0)
    eff = cn * scale
    top = float(np.max(eff)) if eff.size else 0.0
    rel = eff / top if top > 0 else np.zeros_like(eff)
    out = {}
    for j, n in enumerate(names):
        if cn[j] <= 1e-14 * max(top, 1e-300) or cn[j] == 0.0:
            v = "zero"
        elif rel[j] < tol:
            v = "negligible"
        elif cov_bad[j]:
            v = "rank"
        elif math.isfinite(rel_se[j]) and rel_se[j] > 1.0:
            v = "weak"
        else:
            v = "ok"
        out[n] = {"sensitivity": float(cn[j]), "relative_sensitivity": float(rel[j]), "verdict": v}
    return out


_VERDICT_TEXT = {"zero": "zero sensitivity (the loss gradient is identically zero: the data carry no "
                         "information about it)",
                 "negligible": "negligible sensitivity",
                 "rank": "not separately identifiable (rank-deficient Jacobian)"}


def identifiability_message(report):
    groups = {}
    for n, r in report.items():
        if r["verdict"] in _VERDICT_TEXT:
            groups.setdefault(r["verdict"], []).append(n)
    if not groups:
        return None
    parts = [f"{names}: {_VERDICT_TEXT[v]}" for v, names in groups.items()]
    return ("not identifiable from these data -- " + "; ".join(parts) + ". Their standard errors are NaN "
            "(no number is reported); fix them (fixed=...) or add data that depend on them")


def bound_check(S, u, rtol=1e-6):
    """Names of the delays within ``rtol`` (relative to the box width) of a bound."""
    out = []
    for i in S.delay_cols:
        w = S.hi[i] - S.lo[i]
        if u[i] <= S.lo[i] + rtol * w or u[i] >= S.hi[i] - rtol * w:
            out.append((S.names[i], float(u[i]), float(S.lo[i]), float(S.hi[i])))
    return out


def _sigma(est, S, u, raw_r):
    k, N = S.k, S.n_obs
    if isinstance(est.sigma, tuple):
        d = dict(est.sigma)
        sig = np.ones(S.model.n_states)
        for s in S.observed_states:
            if s not in d:
                raise InputError(f"sigma: no noise sd given for the observed state {s!r}")
            sig[S.model.states.index(s)] = d[s]
        return sig
    if est.sigma == "pooled":
        s = math.sqrt(float(raw_r @ raw_r) / (N - k))
        return np.full(S.model.n_states, s if s > 0 else 1.0)
    sig = np.ones(S.model.n_states)
    for s in np.unique(S.row_state):
        sel = S.row_state == s
        dof = sel.sum() * (N - k) / N
        v = math.sqrt(float(raw_r[sel] @ raw_r[sel]) / dof) if dof > 0 else 1.0
        sig[s] = v if v > 0 else 1.0
    return sig


def _join(hists):
    out = {k: [] for k in ("cost", "grad_norm", "lam", "step", "grad_cos", "n_fail", "phase")}
    for phase, h, log in hists:
        cost = np.asarray(h.get("cost", ()), float)
        out["cost"].extend(cost.tolist())
        out["grad_norm"].extend([log.gnorm.get(float(c), math.nan) for c in cost])
        out["lam"].extend(np.asarray(h.get("lam", ()), float).tolist())
        out["step"].extend(np.asarray(h.get("step", ()), float).tolist())
        out["grad_cos"].extend(np.asarray(h.get("grad", ()), float).tolist())
        out["n_fail"].extend(np.asarray(h.get("n_fail", ()), float).tolist())
        out["phase"].extend([phase] * cost.size)
    return {k: np.asarray(v, float) for k, v in out.items()}


def finish(est, S, u, t_start, *, status, message, hists, extras, mode_warnings=(), covariance=True,
           bound_fail=True, history=None, start_info=None):
    """Noise sd, covariance, identifiability, bound check and the Estimate at ``u``."""
    from odeinfer.estimators._dde_setup import fixed_for_estimate
    from odeinfer.estimators.adjoint_dde import DelayBoundWarning

    names, k = S.names, S.k
    raw = S.raw(u)
    if raw is None:
        return make_estimate(est, fixed_for_estimate(S), names, u, None, "failed", t_start=t_start,
                             message="the solver failed at the final point",
                             history=history if history is not None else _join(hists), extras=extras,
                             warnings=("the solver failed at the final point",))
    sig = _sigma(est, S, u, raw[0])
    S.set_sigma(sig)
    if est.sigma == "per_state" and covariance:
        for _ in range(20):
            old = S.sigma_state.copy()
            log = _Logged(S)
            lm = _lm(est, log, u, S)
            hists.append((_PHASE_SIGMA, lm.history, log))
            u = lm.u.copy()
            raw = S.raw(u)
            S.set_sigma(_sigma(est, S, u, raw[0]))
            if float(np.max(np.abs(S.sigma_state / old - 1.0))) < 1e-4:
                break
    r, J = S.evaluate(u)
    r, J = r.copy(), J.copy()
    warn = list(mode_warnings)
    cov_u, rank, cond, bad = _covariance(J, est.rcond)
    se = np.sqrt(np.where(np.diag(cov_u) >= 0, np.diag(cov_u), np.nan))
    rel_se = se / np.where(np.abs(u) > 0, np.abs(u), np.nan)
    report = identifiability_report(names, u, J, bad, rel_se, est.ident_tol)
    flagged = np.array([report[n]["verdict"] in _VERDICT_TEXT for n in names])
    cov_u[flagged, :] = np.nan
    cov_u[:, flagged] = np.nan
    msg = identifiability_message(report)
    if msg:
        warnings.warn(msg, IdentifiabilityWarning, stacklevel=4)
        warn.append(msg)
    at_bound = bound_check(S, u)
    if at_bound:
        text = "; ".join(f"{n} = {v:g} at its bound [{a:g}, {b:g}]" for n, v, a, b in at_bound)
        bmsg = (f"the delay ran to a bound ({text}): the estimate is on the edge of the search box, not an "
                "interior optimum; widen bounds=, scan tau_grid=, or check whether the data determine the delay")
        warnings.warn(bmsg, DelayBoundWarning, stacklevel=4)
        warn.append(bmsg)
        if bound_fail:
            status, message = "failed", bmsg
    if covariance and status != "failed" and not flagged.all():  # the Wald intervals of a usable estimate
        note = adjoint_dde_coverage_note()
        warnings.warn(note, CoverageWarning, stacklevel=4)
        warn.append(note)
    if status == "max_iter":
        warn.append(message)
    raw_r = r * S.sigma_state[S.row_state]
    rss = {s: float(np.sum(raw_r[S.row_state == S.model.states.index(s)] ** 2)) for s in S.observed_states}
    sigma = {s: float(S.sigma_state[S.model.states.index(s)]) for s in S.observed_states}
    extras.update(identifiability=report, rank=rank, condition_number=cond, rss=rss,
                  at_bound=[b[0] for b in at_bound], t0=S.t0, history_kind=S.history.kind,
                  history_names=list(S.history_names),
                  bounds={n: (float(a), float(b)) for n, a, b in zip(names, S.lo, S.hi)})
    hist = history if history is not None else _join(hists)
    estimate = make_estimate(
        est, fixed_for_estimate(S), names, u, cov_u if covariance else None, status, t_start=t_start,
        message=message, n_iter=int(hist["cost"].size),
        cost=0.5 * float(raw_r @ raw_r), nobs=S.n_obs, sigma=sigma, residuals=-raw_r, history=hist,
        extras=extras, warnings=tuple(warn),
        provenance={"solver": est.solver.as_dict(), "mode": est.mode, "start": start_info})
    if covariance:
        _attach_profiler(est, S, estimate, u, r, cov_u)
    return estimate


def run_lm(est, S, t_start, starts=None, start_info=None):
    """The default mode's fit: :func:`_search` from the setup's start, or the best over ``starts``
    (from :func:`auto_starts`); ``start_info`` becomes ``provenance["start"]``."""
    lm, log, extras = _search(est, S) if starts is None else _best_of(est, S, starts)
    hists = [(_PHASE_START if extras.get("chosen_start", "start") == "start" else _PHASE_REFINE, lm.history, log)]
    if lm.r is None:
        from odeinfer.estimators._dde_setup import fixed_for_estimate

        return make_estimate(est, fixed_for_estimate(S), S.names, np.full(S.k, np.nan), None, "failed",
                             t_start=t_start, message=lm.message, history=_join(hists), extras=extras,
                             warnings=(lm.message,), provenance={"start": start_info})
    return finish(est, S, lm.u.copy(), t_start, status=lm.status, message=lm.message, hists=hists, extras=extras,
                  start_info=start_info)


def _attach_profiler(est, S, estimate, u, r, cov_u):
    from odeinfer.inference.profile import ProfileLikelihood

    k = S.k

    def reoptimise(u_start, i):
        act = np.ones(k, bool) if S.live is None else S.live.copy()
        act[np.atleast_1d(i)] = False
        res = levenberg_marquardt(S.evaluate, u_start, S.lo, S.hi, act, max_iter=100, xtol=1e-9, ftol=1e-12,
                                  gtol=1e-9, record=False)
        if res.r is None or res.status == "failed" and res.n_iter == 0:
            return None
        return res.cost, res.u

    se = np.sqrt(np.where(np.diag(cov_u) >= 0, np.diag(cov_u), np.nan))
    prof = ProfileLikelihood(S.names, u, 0.5 * float(r @ r), se, S.lo, S.hi, reoptimise, lambda i, v: float(v))
    object.__setattr__(estimate, "_profiler", prof)
