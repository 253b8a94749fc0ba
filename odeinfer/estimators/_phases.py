"""The phases of an :class:`~odeinfer.estimators.embedding.Embedding` fit: the local fit
(single shooting, multiple shooting + polish, or Osborne's boundary embedding), multi-start,
noise-sd estimation, covariance, and the :class:`Estimate` with its profile-likelihood hook."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np

from odeinfer.estimators._lm import levenberg_marquardt
from odeinfer.estimators.base import IdentifiabilityWarning, make_estimate

__all__ = ["core_fit", "run"]

_PHASE_SINGLE, _PHASE_MS, _PHASE_OPT, _PHASE_SIGMA = 0, 1, 2, 3
_MS_STAGES = 4  # continuity weights w, 10 w, 100 w, 1000 w


def _lm(est, evaluate, u0, lo, hi, active=None, record=True, max_iter=None, why=None):
    return levenberg_marquardt(evaluate, u0, lo, hi, active, max_iter=max_iter or est.iterations("lm"), xtol=est.xtol,
                               ftol=est.ftol, gtol=est.gtol, record=record, why=why)


def _join(hists):
    out = {k: [] for k in ("cost", "step", "lam", "grad", "n_fail", "phase")}
    for phase, h in hists:
        n = len(h.get("cost", ()))
        for k in ("cost", "step", "lam", "grad", "n_fail"):
            out[k].extend(np.asarray(h.get(k, np.zeros(n)), float).tolist())
        out["phase"].extend([phase] * n)
    return {k: np.asarray(v, float) for k, v in out.items()}


def _segment_starts(S, u0):
    """Multiple-shooting unknowns: ``u0`` plus the states at the cuts (data where observed at the
    cut, else the trajectory of ``u0``)."""
    sp, ms = S.sp, S.sp_ms
    u = np.zeros(ms.n_unknowns)
    u[:sp.n_public] = u0
    p = sp.p_base.copy()
    p[sp.free_index] = sp.params_natural(u0)
    from odeinfer.solve import Problem, bind

    for e, d in enumerate(S.problem.experiments):
        x0 = sp.x0_base[e].copy()
        est = sp.x0_est[e]
        o = sp.x0_off[e]
        x0[est] = u0[o:o + est.size]
        nodes = ms.nodes[e][1:]
        sim = bind(Problem(sp.model, nodes, t0=ms.nodes[e][0]), solver=sp.solver)
        y, _, st = sim(p, x0)
        traj = np.where(np.isfinite(y), y, 0.0) if st == 0 else np.nan_to_num(np.array(y))
        for j, tau in enumerate(nodes):
            s = traj[j].copy()
            rows = np.flatnonzero(np.isclose(d.t, tau))
            for c, name in enumerate(d.states):
                if name in sp.model.observed and rows.size and d.mask[rows[0], c]:
                    s[sp.model.states.index(name)] = d.y[rows[0], c]
            off = ms.seg_off[e][j]
            u[off:off + sp.n] = s
    return u


def _optimal_B(S, u0):
    """Osborne's (B1, B2) per experiment along the trajectory of the start ``u0``."""
    from odeinfer.estimators._osborne import optimal_boundary
    from odeinfer.solve import Problem, solve

    sp = S.sp
    p = sp.p_base.copy()
    p[sp.free_index] = sp.params_natural(u0)
    cm = S.problem.compiled
    out = []
    for e, d in enumerate(S.problem.experiments):
        o = sp.x0_off[e]
        x0 = u0[o:o + sp.n]
        tt = np.unique(np.concatenate([[d.t0], d.t]))
        k = max(1, int(math.ceil(100 / (tt.size - 1))))
        grid = np.unique(np.concatenate([np.linspace(a, b, k + 1) for a, b in zip(tt[:-1], tt[1:])]))
        sol = solve(Problem(sp.model, grid, x0=x0, t0=d.t0), p, solver=sp.solver, raise_on_failure=False)
        y = np.array(sol.y)
        good = np.all(np.isfinite(y), axis=1)
        if not good.all():
            grid, y = grid[good], y[good]
        A = np.array([cm.jac_y(t, yy, p) for t, yy in zip(grid, y)])
        if grid.size < 2:
            out.append((np.eye(sp.n), np.zeros((sp.n, sp.n))))
        else:
            out.append(optimal_boundary(grid, A))
    return out


def core_fit(est, S, u0):
    """One local fit from ``u0`` (internal, public unknowns). Returns a dict with ``u``, ``lm``
    (the last LMResult), ``hist`` (list of (phase, history)) and extras."""
    sp = S.sp
    hists, extras = [], {}
    if S.sp_ms is not None:
        ms = S.sp_ms
        lo = np.concatenate([S.lo, np.full(ms.n_unknowns - sp.n_public, -np.inf)])
        hi = np.concatenate([S.hi, np.full(ms.n_unknowns - sp.n_public, np.inf)])
        um = _segment_starts(S, u0)
        # continuation on the continuity weight: the penalised optimum approaches the continuous one
        w = float(est.continuity_weight)
        for stage in range(_MS_STAGES):
            ms.set_sigma(sp.sigma_state, w)
            res = _lm(est, ms.evaluate, um, lo, hi, why=lambda: ms.failure)
            hists.append((_PHASE_MS, res.history))
            if res.r is None:
                break
            um = res.u
            gaps = res.r[ms.n_obs:] / np.tile(ms.wc, (ms.n_rows - ms.n_obs) // ms.n)
            if gaps.size == 0 or np.max(np.abs(gaps)) <= 1e-6 * (1.0 + np.max(np.abs(um))):
                break
            w *= 10.0
        gaps = res.r[ms.n_obs:] / np.tile(ms.wc, (ms.n_rows - ms.n_obs) // ms.n) if res.r is not None \
            else np.zeros(0)
        extras.update(ms_status=res.status, ms_cost=res.cost, continuity_max=float(np.max(np.abs(gaps)))
                      if gaps.size else 0.0, segments=est.segments)
        u = res.u[:sp.n_public].copy()
        if not est.polish or res.status == "failed":
            return dict(u=u, lm=res, hist=hists, extras=extras, ms=True)
    elif est.boundary == "optimal":
        from odeinfer.estimators._osborne import BoundaryEmbedding

        B = _optimal_B(S, u0)
        emb = BoundaryEmbedding(sp, B, [u0[sp.x0_off[e]:sp.x0_off[e] + sp.n] for e in range(len(B))])
        v0 = emb.b_of(u0)
        if v0 is None:
            res = levenberg_marquardt(sp.evaluate, u0, S.lo, S.hi, max_iter=1, why=lambda: sp.failure)
            return dict(u=u0, lm=res, hist=hists, extras=extras)
        big = np.full(emb.n_unknowns - sp.n_free, np.inf)
        res = _lm(est, emb.evaluate, v0, np.concatenate([S.lo[:sp.n_free], -big]),
                  np.concatenate([S.hi[:sp.n_free], big]))
        hists.append((_PHASE_OPT, res.history))
        extras.update(boundary_B1=[b[0].tolist() for b in B], boundary_B2=[b[1].tolist() for b in B],
                      optimal_status=res.status)
        uu = emb.to_u(res.u) if res.status != "failed" else None
        u = u0 if uu is None else np.clip(uu[:sp.n_public], S.lo, S.hi)
    else:
        u = u0
    res = _lm(est, sp.evaluate, u, S.lo, S.hi, why=lambda: sp.failure)
    hists.append((_PHASE_SINGLE, res.history))
    return dict(u=res.u.copy(), lm=res, hist=hists, extras=extras)


# --- multi-start ---------------------------------------------------------------------------
def _start_box(est, S):
    sp = S.sp
    nf = sp.n_free
    lo, hi = S.lo[:nf].copy(), S.hi[:nf].copy()
    st = S.u0[:nf]
    for k in range(nf):
        if math.isfinite(lo[k]) and math.isfinite(hi[k]):
            continue
        if not math.isfinite(st[k]):
            from odeinfer.errors import InputError

            raise InputError(f"bounds: multi-start (starts={est.starts}) needs finite bounds or a start for "
                             f"{sp.public_names[k]!r}; pass bounds={{'{sp.public_names[k]}': (lower, upper)}}")
        w = math.log(10.0) if S.log_mask[k] else max(abs(st[k]), 1.0)
        if not math.isfinite(lo[k]):
            lo[k] = st[k] - w
        if not math.isfinite(hi[k]):
            hi[k] = st[k] + w
    return lo, hi


def _start_chunk(payload, chunk):
    """Worker: local fits from several starts (top level, picklable)."""
    est, model, data, start, fixed, x0, weights = payload
    from odeinfer.estimators._embedding_setup import build_setup

    out = []
    try:
        S = build_setup(est, model, data, start, fixed, x0)
        S.sp.set_sigma(weights)
    except Exception as exc:
        return [{"index": i, "status": "failed", "error": f"{type(exc).__name__}: {exc}"} for i, _ in chunk]
    for i, u0 in chunk:
        out.extend(_start_chunk_local(est, S, i, u0))
    return out


def _multistart(est, S, model, data, start, fixed, x0):
    from odeinfer.inference.multistart import run_starts, sample_starts

    sp = S.sp
    nf = sp.n_free
    lo, hi = _start_box(est, S)
    n_user = 1 if np.all(np.isfinite(S.u0)) else 0
    pts = sample_starts(lo, hi, est.starts - n_user, sampler=est.sampler, rng=est.rng) if est.starts > n_user \
        else np.zeros((0, nf))
    U = np.tile(np.where(np.isfinite(S.u0), S.u0, 0.0), (pts.shape[0] + n_user, 1))
    U[n_user:, :nf] = pts
    payload = (replace(est, executor=None), model, data, start, fixed, x0, sp.sigma_state.copy())
    if est.n_jobs == 1 and est.executor is None:
        res = []
        for i, u0 in enumerate(U):
            res.extend(_start_chunk_local(est, S, i, u0))
    else:
        res = run_starts(_start_chunk, payload, U, n_jobs=est.n_jobs, executor=est.executor,
                         progress=est.progress)
    names = sp.public_names
    table = {"start": [], "status": [], "cost": [], "n_iter": [], "error": [], "optimum": []}
    for n in names:
        table[n] = []
        table[f"start_{n}"] = []
    ok = [r for r in res if r.get("status") != "failed" and math.isfinite(r.get("cost", math.nan))]
    costs = sorted({float(f"{r['cost']:.6g}") for r in ok})
    for r in res:
        i = r["index"]
        table["start"].append(i)
        table["status"].append(r.get("status"))
        table["cost"].append(r.get("cost", math.nan))
        table["n_iter"].append(r.get("n_iter", 0))
        table["error"].append(r.get("error"))
        c = r.get("cost", math.nan)
        table["optimum"].append(costs.index(float(f"{c:.6g}")) if r in ok else -1)
        vals = _natural(S, r["u"]) if "u" in r else np.full(len(names), np.nan)
        v0 = _natural(S, U[i])
        for k, n in enumerate(names):
            table[n].append(float(vals[k]))
            table[f"start_{n}"].append(float(v0[k]))
    n_failed = sum(1 for r in res if r.get("status") == "failed")
    best = min(ok, key=lambda r: r["cost"]) if ok else None
    return (None if best is None else best["u"]), (None if best is None else U[best["index"]]), table, n_failed


def _start_chunk_local(est, S, i, u0):
    """One start of a multistart: its own local fit, so an oi.Auto solver starts it on
    Dormand-Prince whatever the starts before it did (:func:`~odeinfer.solve.api.auto_scope`)."""
    from odeinfer.solve import auto_scope

    try:
        with auto_scope():
            fit = core_fit(est, S, np.asarray(u0, float))
        lm = fit["lm"]
        return [{"index": i, "u": fit["u"], "cost": float(lm.cost), "status": lm.status, "n_iter": int(lm.n_iter),
                 "error": None}]
    except Exception as exc:
        return [{"index": i, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}]


def _natural(S, u):
    v = np.array(u[:S.sp.n_public], float)
    nf = S.sp.n_free
    v[:nf] = S.sp.params_natural(v)
    return v


# --- the whole fit ------------------------------------------------------------------------
def _sigma_per_state(sp, raw, k):
    N = raw.size
    sig = np.ones(sp.n)
    for s in np.unique(sp.row_state):
        sel = sp.row_state == s
        nk = int(sel.sum())
        dof = nk * (N - k) / N
        sig[s] = math.sqrt(float(raw[sel] @ raw[sel]) / dof) if dof > 0 else math.nan
    return sig


def _covariance(J, rcond):
    """``(J^T J)^-1`` through the SVD of the column-scaled ``J``; NaN rows/columns for unknowns that
    load on a (numerically) null direction. Returns (cov, rank, cond, bad mask)."""
    k = J.shape[1]
    cn = np.sqrt(np.einsum("ij,ij->j", J, J))
    zero = cn == 0
    Js = J / np.where(zero, 1.0, cn)
    _, s, Vt = np.linalg.svd(Js, full_matrices=False)
    top = s[0] if s.size and s[0] > 0 else 0.0
    keep = s > rcond * top if top > 0 else np.zeros(s.size, bool)
    rank = int(keep.sum())
    cond = float(top / s[-1]) if s.size and s[-1] > 0 else math.inf
    inv = np.where(keep, 1.0 / np.where(keep, s, 1.0) ** 2, 0.0)
    cov = (Vt.T * inv) @ Vt / np.outer(np.where(zero, 1.0, cn), np.where(zero, 1.0, cn))
    bad = zero.copy()
    if rank < k:
        bad |= np.max(np.abs(Vt[rank:]), axis=0) > 1e-3
    cov[bad, :] = np.nan
    cov[:, bad] = np.nan
    return (cov + cov.T) / 2, rank, cond, bad


def _failed(est, S, t_start, message, extras, hists, start_info):
    sp = S.sp
    return make_estimate(est, replace(S.problem, fixed=_fixed(S)), sp.public_names, np.full(sp.n_public, np.nan),
                         None, "failed", t_start=t_start, message=message, history=_join(hists), extras=extras,
                         warnings=(message,), provenance={"start": start_info})


def _fixed(S):
    sp = S.sp
    out = dict(S.problem.fixed)
    for e, d in enumerate(S.x0_known):
        for s, v in d.items():
            out[f"x0[{s}]" + (f"@{sp.exp_names[e]}" if sp.multi else "")] = v
    return out


def run(est, S, model, data, start, fixed, x0, t_start, start_info=None):
    """The whole fit from the setup ``S``; ``start_info`` becomes ``provenance["start"]``."""
    from odeinfer.errors import InputError

    sp = S.sp
    names, nf = sp.public_names, sp.n_free
    sp.set_sigma(S.sigma_known if S.sigma_known is not None else np.ones(sp.n))
    extras = {"sigma_mode": est.sigma if isinstance(est.sigma, str) else "known", "boundary": est.boundary}
    if est.starts > 1:
        u0, u_start, table, n_failed = _multistart(est, S, model, data, start, fixed, x0)
        extras.update(starts=table, n_failed_starts=n_failed)
        if u0 is None:
            return _failed(est, S, t_start, f"all {est.starts} starts failed", extras, [], start_info)
    else:
        missing = [names[j] for j in range(nf) if not math.isfinite(S.u0[j])]
        if missing:
            raise InputError(f"start: no starting value for {missing}; pass start={{name: value}}, or use starts > 1 "
                             "with finite bounds")
        u0 = u_start = S.u0
    from odeinfer.solve import auto_scope

    with auto_scope():  # the final fit is a local fit of its own: Auto starts it on Dormand-Prince
        return _final(est, S, model, data, start, fixed, x0, t_start, start_info, extras, u0, u_start)


def _final(est, S, model, data, start, fixed, x0, t_start, start_info, extras, u0, u_start):
    """The fit from ``u0`` (the start, or the best end point of the multistart), its noise sds,
    covariance and Estimate."""
    sp = S.sp
    names = sp.public_names
    nf, k, N = sp.n_free, sp.n_public, sp.n_obs
    fit = core_fit(est, S, u0)
    hists, lm, u = fit["hist"], fit["lm"], fit["u"]
    extras.update(fit["extras"])
    if lm.r is None:
        return _failed(est, S, t_start, lm.message, extras, hists, start_info)
    # --- noise sd ------------------------------------------------------------------------
    if est.sigma == "per_state":
        for _ in range(20):
            out = sp.evaluate(u)
            new = _sigma_per_state(sp, sp.raw_residuals(out[0]), k)
            new = np.where(np.isfinite(new) & (new > 0), new, 1.0)
            change = float(np.max(np.abs(new / sp.sigma_state - 1.0)))
            sp.set_sigma(new)
            if change < 1e-4:
                break
            lm = _lm(est, sp.evaluate, u, S.lo, S.hi, why=lambda: sp.failure)
            hists.append((_PHASE_SIGMA, lm.history))
            u = lm.u.copy()
    elif est.sigma == "pooled":
        out = sp.evaluate(u)
        raw = sp.raw_residuals(out[0])
        s = math.sqrt(float(raw @ raw) / (N - k))
        sp.set_sigma(np.full(sp.n, s if s > 0 else 1.0))
    out = sp.evaluate(u)
    if out is None:
        return _failed(est, S, t_start, f"the solver failed at the final point: {sp.failure}", extras, hists,
                       start_info)
    r, J = out[0].copy(), out[1][:, :k].copy()
    raw = sp.raw_residuals(r)
    # --- covariance ------------------------------------------------------------------------
    cov_u, rank, cond, bad = _covariance(J, est.rcond)
    vals = _natural(S, u)
    gm = np.ones(k)
    gm[:nf] = np.where(S.log_mask, vals[:nf], 1.0)
    cov = cov_u * np.outer(gm, gm)
    warn = []
    if rank < k:
        msg = (f"the Jacobian has rank {rank} < {k} (condition number {cond:.3g}): "
               f"{[n for n, b in zip(names, bad) if b]} are not identifiable from these data; their standard "
               "errors are NaN (fix them, add data, or check the profile likelihood)")
        warnings.warn(msg, IdentifiabilityWarning, stacklevel=3)
        warn.append(msg)
    n_fail = int(sum(h["n_fail"][-1] for _, h in hists if len(h.get("n_fail", ()))))
    if n_fail:
        warn.append(f"{n_fail} trial point(s) could not be solved (solver failure or non-positive state under log "
                    "noise); those steps were rejected and the damping increased" +
                    (f"; the last: {sp.failure}" if sp.failure else ""))
    if lm.status == "max_iter":
        warn.append(lm.message)
    _fit_checks(est, S, J, raw, vals, _natural(S, u_start), extras, warn)
    observed_states = [sp.model.states[s] for s in np.unique(sp.row_state)]
    rss = {s: float(np.sum(raw[sp.row_state == sp.model.states.index(s)] ** 2)) for s in observed_states}
    sigma = {s: float(sp.sigma_state[sp.model.states.index(s)]) for s in observed_states}
    cost = 0.5 * float(raw @ raw) if est.sigma == "pooled" else 0.5 * float(r[:N] @ r[:N])
    logs = [n for n, m in zip(names, S.log_mask) if m]
    # the fitting scale, in the key likelihood fits use too: Estimate.conf_int("wald") works there
    extras.update(rss=rss, condition_number=cond, rank=rank, n_solver_failures=n_fail, log_params=logs,
                  scales={n: ("log" if n in logs else "lin") for n in names}, cov_scaled=cov_u)
    if S.sp_ms is not None:
        extras["segment_nodes"] = [nd.tolist() for nd in S.sp_ms.nodes]
    hist = _join(hists)
    estimate = make_estimate(
        est, replace(S.problem, fixed=_fixed(S)), names, vals, cov, lm.status, t_start=t_start, message=lm.message,
        n_iter=int(hist["cost"].size), cost=cost, nobs=N, sigma=sigma, residuals=-raw, history=hist,
        extras=extras, warnings=tuple(warn),
        provenance={"solver": {**est.solver.as_dict(), "methods_used": sorted({g.solver.method for g in sp.segs})},
                    "start": start_info})
    _attach_profiler(est, S, estimate, u, r, cov_u, model, data, start, fixed, x0)
    _attach_bootstrap(est, S, estimate, model, data, fixed, x0)
    return estimate


def _fit_checks(est, S, J, raw, vals, start, extras, warn):
    """The fit's own quick checks (:mod:`odeinfer.estimators._trajectory_check`): the misfit against the
    data's noise (``extras["fit_check"]``, a BiasWarning on a miss) and the parameters that ran away along a
    flat direction (``extras["runaway"]``, an IdentifiabilityWarning)."""
    from odeinfer.errors import BiasWarning
    from odeinfer.estimators._trajectory_check import fit_check, runaway_check

    sp = S.sp
    N, nf, name = sp.n_obs, sp.n_free, type(est).__name__
    info, msg, row_sd = fit_check(sp.model, S.problem.experiments, raw, sp.row_exp[:N], sp.row_state[:N], name)
    extras["fit_check"] = info
    if msg:
        warnings.warn(msg, BiasWarning, stacklevel=4)
        warn.append(msg)
    # p dx/dp per row: unweighted; the columns of log parameters are d/dlog p already
    rel = J[:N, :nf] * sp.sigma_state[sp.row_state[:N]][:, None]
    rel = rel * np.where(S.log_mask, 1.0, vals[:nf])
    runaway, msg = runaway_check(sp.public_names[:nf], start[:nf], vals[:nf], rel, row_sd, name)
    if msg:
        extras["runaway"] = runaway
        warnings.warn(msg, IdentifiabilityWarning, stacklevel=4)
        warn.append(msg)


def _attach_bootstrap(est, S, estimate, model, data, fixed, x0):
    """``estimate.conf_int(method="bootstrap")``: parametric bootstrap refits with this configuration."""
    from odeinfer.data import Data
    from odeinfer.inference.bootstrap import attach_trajectory_bootstrap

    exp_names = S.sp.exp_names if S.sp.multi else ()
    attach_trajectory_bootstrap(est, estimate, model, S.problem.experiments, isinstance(data, Data),
                                {"fixed": fixed, "x0": x0}, exp_names, solver=est.solver)


def _attach_profiler(est, S, estimate, u, r, cov_u, model, data, start, fixed, x0):
    from odeinfer.inference.profile import ProfileLikelihood

    sp = S.sp
    reoptimise, to_natural = _reoptimiser(S)
    se = np.sqrt(np.where(np.diag(cov_u) >= 0, np.diag(cov_u), np.nan))
    remote = (_rebuild_reoptimiser, (replace(est, executor=None), model, data, start, fixed, x0, sp.sigma_state.copy()))
    prof = ProfileLikelihood(sp.public_names, u, 0.5 * float(r @ r), se, S.lo, S.hi, reoptimise, to_natural,
                             remote=remote)
    object.__setattr__(estimate, "_profiler", prof)


def _reoptimiser(S):
    """``(reoptimise, to_natural)`` of the profiles of setup ``S`` (its single-shooting problem)."""
    sp = S.sp
    k = sp.n_public

    def reoptimise(u_start, i):
        act = np.ones(k, bool)
        act[np.atleast_1d(i)] = False
        res = levenberg_marquardt(sp.evaluate, u_start, S.lo, S.hi, act, max_iter=100, xtol=1e-9, ftol=1e-12,
                                  gtol=1e-9, record=False)
        if res.r is None or res.status == "failed" and res.n_iter == 0:
            return None
        return res.cost, res.u

    def to_natural(i, v):
        return float(np.exp(v)) if i < sp.n_free and S.log_mask[i] else float(v)

    return reoptimise, to_natural


def _rebuild_reoptimiser(payload):
    """Worker: the setup of the fit rebuilt from its inputs, its noise sds set as at the optimum."""
    from odeinfer.estimators._embedding_setup import build_setup

    est, model, data, start, fixed, x0, sigma = payload
    S = build_setup(est, model, data, start, fixed, x0)
    S.sp.set_sigma(sigma)
    return _reoptimiser(S)
