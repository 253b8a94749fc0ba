"""Independent reference for the DDE tests: hand-written right-hand sides and
histories of the DDE zoo models, and a method-of-steps solver built on scipy's
DOP853 at rtol 1e-12 (simple and obviously correct: integrate segment by
segment, each no longer than the smallest delay and ending on every breakpoint
t0 + sum_k n_k tau_k, reading lagged values from the dense output of earlier
segments or from the history).
"""

import bisect
import itertools

import numpy as np
from scipy.integrate import solve_ivp

RT = dict(method="DOP853", rtol=1e-12, atol=1e-13)


def method_of_steps(rhs, history, taus, t0, t_end):
    """Return ``x(s)`` for ``s <= t_end``: the solution of ``x' = rhs(t, x, [x(t - tau) for tau in taus])``."""
    taus = [float(v) for v in taus]
    tmin = min(taus)
    bounds = {t0, t_end}
    for ns in itertools.product(range(7), repeat=len(taus)):
        if 0 < sum(ns) <= 6:
            b = t0 + sum(n * v for n, v in zip(ns, taus))
            if b < t_end:
                bounds.add(b)
    k = 1
    while t0 + k * tmin < t_end:
        bounds.add(t0 + k * tmin)
        k += 1
    bounds = sorted(bounds)
    starts, segs = [], []

    def xval(s):
        if s <= t0:
            return np.asarray(history(s), dtype=float)
        i = max(bisect.bisect_right(starts, s) - 1, 0)
        return segs[i](s)

    x = np.asarray(history(t0), dtype=float)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a < 1e-13:
            continue
        sol = solve_ivp(lambda t, y: rhs(t, y, [xval(t - v) for v in taus]), (a, b), x, dense_output=True, **RT)
        assert sol.success, sol.message
        starts.append(a)
        segs.append(sol.sol)
        x = sol.y[:, -1]

    def evaluate(ts):
        return np.array([xval(s) for s in np.atleast_1d(ts)])

    return evaluate


# hand-written right-hand sides: rhs(t, x, lags, p) with lags[k] = x(t - tau_k), p a dict

def ded(t, x, lags, p):
    return np.array([p["theta0"] * x[0] + p["theta1"] * lags[0][0]])


def logistic(t, x, lags, p):
    return np.array([p["theta0"] * x[0] * (1.0 - p["theta1"] * lags[0][0])])


def enso(t, x, lags, p):
    return np.array([p["theta0"] * x[0] - p["theta1"] * x[0] ** 3 - p["theta2"] * lags[0][0]])


def cheyne(t, x, lags, p):
    u = lags[0][0] ** 8
    return np.array([p["p"] - p["V0"] * x[0] * u / (p["alpha"] + u)])


def hiv(t, x, lags, p):
    ts, vi, vni = x
    return np.array([p["k"] * p["T0"] * lags[0][1] * np.exp(-p["m"] * p["tau"]) - p["delta"] * ts,
                     (1 - p["n_p"]) * p["N"] * p["delta"] * ts - p["c"] * vi,
                     p["n_p"] * p["N"] * p["delta"] * ts - p["c"] * vni])


def blowflies(t, x, lags, p):
    lag = lags[0][0]
    return np.array([p["P"] * lag * np.exp(-lag / p["N0"]) - p["delta"] * x[0]])


HAND_RHS = {"delay_exponential_decay": ded, "logistic_delay": logistic, "enso": enso,
            "cheyne_stokes": cheyne, "hiv": hiv, "nicholson_blowflies": blowflies}


def hand_history(entry):
    """The entry's history written out by hand (formulas of DDE-Find sec. 6), as ``h(s)``."""
    h, t0, n = entry.history, entry.t0, entry.model.n_states
    v = np.asarray(h.values)
    if h.kind == "affine":
        a, b = v[:n], v[n:]
        return lambda s: a * (s - t0) + b
    if h.kind == "periodic":
        A, w, b = v[:n], v[n:2 * n], v[2 * n:]
        return lambda s: A * np.sin(w * (s - t0)) + b
    if h.kind == "constant":
        return lambda s: v.copy()
    from scipy.interpolate import PPoly

    pp = PPoly(h.coef, h.breaks)
    return lambda s: pp(s).reshape(n)


def reference_solution(entry, t=None):
    """States of a DDE zoo entry at ``t`` (default ``entry.t``) from the scipy method of steps."""
    p = dict(entry.params)
    rhs = HAND_RHS[entry.name]
    t = entry.t if t is None else np.asarray(t)
    taus = [p[d] for d in entry.model.delays]
    ev = method_of_steps(lambda tt, x, lags: rhs(tt, x, lags, p), hand_history(entry), taus, entry.t0, float(t[-1]))
    return ev(t)
