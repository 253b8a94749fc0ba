"""Input handling of :class:`~odeinfer.estimators.embedding.Embedding`: start values, known
initial states, bounds and log-parametrisation, turned into a :class:`Setup` (internal
coordinates of the unknowns ``(free params, estimated x0 per experiment)``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError
from odeinfer.estimators._shooting import ShootingProblem
from odeinfer.estimators.base import EstimationError, prepare
from odeinfer.results import Estimate

__all__ = ["Setup", "build_setup", "split_start"]


@dataclass
class Setup:
    problem: object
    sp: ShootingProblem          # single shooting
    sp_ms: ShootingProblem | None
    lo: np.ndarray               # internal bounds of the public unknowns
    hi: np.ndarray
    u0: np.ndarray               # internal start (NaN for free params without a start)
    log_mask: np.ndarray
    sigma_known: np.ndarray | None  # (n_states,) or None
    x0_known: list


def split_start(start, model):
    """(param dict, x0 dict) from a dict, an Estimate or an array of free params."""
    if start is None:
        return None, {}
    if isinstance(start, Estimate):
        start = dict(zip(start.names, start.values.tolist()))
    if isinstance(start, Mapping):
        p = {k: v for k, v in start.items() if not str(k).startswith("x0[")}
        x = {str(k): float(v) for k, v in start.items() if str(k).startswith("x0[")}
        return p, x
    return start, {}


def _x0_known(x0, exps, model, estimate_x0):
    names = list(exps.names)
    per = [dict() for _ in names]
    if x0 is not None:
        if isinstance(x0, Mapping) and x0 and all(isinstance(v, Mapping) for v in x0.values()):
            unknown = [k for k in x0 if k not in names]
            if unknown:
                raise InputError(f"x0: {unknown} are not experiment names {names}")
            items = [(names.index(k), v) for k, v in x0.items()]
        elif isinstance(x0, Mapping):
            items = [(e, x0) for e in range(len(names))]
        else:
            arr = np.asarray(x0, float).ravel()
            if arr.size != model.n_states:
                raise InputError(f"x0: expected {model.n_states} values (for {list(model.states)}), got {arr.size}; "
                                 "or pass a dict {state: value}")
            items = [(e, dict(zip(model.states, arr.tolist()))) for e in range(len(names))]
        for e, d in items:
            for s, v in d.items():
                if s not in model.states:
                    raise InputError(f"x0: {s!r} is not a state of the model (states: {list(model.states)})")
                v = float(v)
                if not np.isfinite(v):
                    raise InputError(f"x0[{s!r}]: expected a finite number, got {v!r}")
                per[e][s] = v
    if not estimate_x0:
        for e, d in enumerate(per):
            missing = [s for s in model.states if s not in d]
            if missing:
                raise InputError(
                    f"x0: estimate_x0=False needs every initial state, but {missing} of experiment {names[e]!r} "
                    "are not given; pass x0={state: value} or use estimate_x0=True")
    return per


def _log_mask(log_params, free, start_arr):
    if log_params is True:
        mask = np.ones(len(free), bool)
    elif not log_params:
        mask = np.zeros(len(free), bool)
    else:
        unknown = [n for n in log_params if n not in free]
        if unknown:
            raise InputError(f"log_params: {unknown} are not free parameters {list(free)}")
        mask = np.array([n in log_params for n in free])
    bad = [n for n, m, v in zip(free, mask, start_arr) if m and np.isfinite(v) and v <= 0]
    if bad:
        raise InputError(f"start: log-parametrised parameters {bad} need positive start values; "
                         "give positive starts or drop them from log_params")
    return mask


def build_setup(est, model, data, start, fixed, x0) -> Setup:
    """Validate ``fit`` inputs of the Embedding estimator ``est`` and build the problems."""
    pstart, x0start = split_start(start, model)
    prob = prepare(model, data, start=pstart, fixed=fixed, estimator="Embedding")
    exps = prob.experiments
    free_switch = [q for q in model.switching_params if q in prob.free]
    if free_switch:
        raise InputError(
            f"fixed: {free_switch} move a sharp jump of the right-hand side; Embedding needs exact sensitivities, "
            "which miss the jump term for them. Hold them fixed (fixed={name: value}), or use a smooth step "
            "(om.heaviside(x, width=...), e.g. oi.zoo.riccati(width=...)) to estimate them")
    x0k = _x0_known(x0, exps, model, est.estimate_x0)
    if est.boundary == "optimal" and any(x0k):
        raise InputError("boundary: 'optimal' embeds every initial state in b = B1 x(t0) + B2 x(T); it cannot hold "
                         "some of them fixed: drop x0= or use boundary='initial'")
    log_mask = _log_mask(est.log_params, prob.free, prob.start)
    sp = ShootingProblem(prob, x0k, log_mask, 1, solver=est.solver)
    sp_ms = ShootingProblem(prob, x0k, log_mask, est.segments, solver=est.solver) if est.segments > 1 else None
    if sp.n_obs <= sp.n_public:
        raise EstimationError(f"data: {sp.n_obs} observations cannot determine {sp.n_public} unknowns "
                              f"{list(sp.public_names)}; add data, fix parameters or give x0")
    names = sp.public_names
    nf = sp.n_free
    # --- start -------------------------------------------------------------------------------
    u0 = np.full(sp.n_public, np.nan)
    th = prob.start
    u0[:nf] = np.where(log_mask, np.log(np.where(log_mask & (th > 0), th, 1.0)), th)
    u0[:nf][log_mask & ~np.isfinite(th)] = np.nan
    allowed = set(names) | {f"x0[{s}]" for s in model.states}
    unknown = [k for k in x0start if k not in allowed]
    if unknown:
        raise InputError(f"start: {unknown} are not estimated initial states {[n for n in names[nf:]]}")
    for e, d in enumerate(exps):
        for a, i in enumerate(sp.x0_est[e]):
            s = model.states[i]
            k = nf + sum(x.size for x in sp.x0_est[:e]) + a
            if names[k] in x0start:
                u0[k] = x0start[names[k]]
            elif f"x0[{s}]" in x0start:
                u0[k] = x0start[f"x0[{s}]"]
            elif s in d.states and d.mask[:, d.states.index(s)].any():
                col = d.states.index(s)
                u0[k] = d.y[np.flatnonzero(d.mask[:, col])[0], col]
            else:
                raise InputError(
                    f"start: no starting value for the initial state {s!r} of experiment {exps.names[e]!r}, which is "
                    f"not observed; pass start={{'{names[k]}': value}} or x0={{'{s}': value}}")
    # --- bounds ------------------------------------------------------------------------------
    lo = np.full(sp.n_public, -np.inf)
    hi = np.full(sp.n_public, np.inf)
    for name, a, b in est.bounds or ():
        idx = [k for k, n in enumerate(names) if n == name or n.split("@")[0] == name]
        if not idx:
            if name in prob.fixed:
                continue
            raise InputError(f"bounds: {name!r} is not an estimated quantity {list(names)}")
        for k in idx:
            if k < nf and log_mask[k]:
                if b <= 0:
                    raise InputError(f"bounds[{name!r}]: log-parametrised, so the upper bound must be > 0, got {b}")
                a, b = (np.log(a) if a > 0 else -np.inf), np.log(b)
            lo[k], hi[k] = a, b
    out = [n for k, n in enumerate(names) if np.isfinite(u0[k]) and not lo[k] <= u0[k] <= hi[k]]
    if out:
        raise InputError(f"start: {out} lie outside their bounds {[est.bounds_of(n) for n in out]}; "
                         "move the start inside the bounds or widen them")
    sigma_known = None
    if isinstance(est.sigma, tuple):
        sd = dict(est.sigma)
        obs = sorted({model.states[i] for i in np.unique(sp.row_state)})
        missing = [s for s in obs if s not in sd]
        if missing:
            raise InputError(f"sigma: no value for the observed states {missing}; give one per observed state, "
                             "or use sigma='pooled' / 'per_state' to estimate them")
        sigma_known = np.array([sd.get(s, 1.0) for s in model.states])
    return Setup(prob, sp, sp_ms, lo, hi, u0, log_mask, sigma_known, x0k)
