"""Benchmark: oi.Embedding (LM + exact numba sensitivities) against the hand-written baseline,
scipy.optimize.least_squares (trf, 2-point finite-difference Jacobian) over scipy solve_ivp
(RK45), from the same start, in the same run.

Baseline tolerances: "matched" = RK45 rtol 1e-8, atol 1e-10 (the Embedding's solver
tolerances) and least_squares xtol = ftol = gtol = 1e-10, which is the fair comparison for reaching the same optimum to 1e-6; the RK45
default tolerances (rtol 1e-3, atol 1e-6) are also timed, with the distance of their optimum.
Embedding is timed warm (after compile), median of repeated fits.

Run: python benchmarks/bench_embedding.py [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

import odeinfer as oi


def baseline(model, data, p_start, x0_start, x0_known, rtol, atol, tight):
    """least_squares over solve_ivp; unknowns params (+ x0 unless known)."""
    f = model.lambdify("f")
    t, y, mask = data.t, data.y, data.mask
    cols = [model.states.index(s) for s in data.states]
    n_p = len(p_start)

    def rhs(tt, x, p):
        return f(tt, x, p)

    def resid(u):
        p = u[:n_p]
        x0 = x0_known if x0_known is not None else u[n_p:]
        sol = solve_ivp(rhs, (data.t0, t[-1]), x0, t_eval=t, args=(p,), rtol=rtol, atol=atol)
        if not sol.success or sol.y.shape[1] != t.size:
            return np.full(int(mask.sum()), 1e6)
        return (sol.y.T[:, cols] - y)[mask]

    u0 = np.concatenate([p_start, [] if x0_known is not None else x0_start])
    t0 = time.perf_counter()
    # tight: least_squares stopping tolerances 1e-10 (its defaults, 1e-8, stop short of the optimum
    # by ~1e-5 relative on alpha-pinene)
    tol = dict(xtol=1e-10, ftol=1e-10, gtol=1e-10) if tight else {}
    res = least_squares(resid, u0, **tol)
    return res.x, time.perf_counter() - t0, res.nfev


def bench(name, model, data, start, x0_known, repeats):
    est_cfg = oi.Embedding()
    kw = dict(start=start) if x0_known is None else dict(start=start, x0=dict(zip(model.states, x0_known)))
    est = est_cfg.fit(model, data, **kw)  # compile / warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        est = est_cfg.fit(model, data, **kw)
        times.append(time.perf_counter() - t0)
    t_emb = float(np.median(times))
    p_start = np.array([start[p] for p in model.params])
    x0_start = np.array([start.get(f"x0[{s}]", np.nan) for s in model.states])
    if x0_known is None:
        x0_start = np.array([est_start_x0(data, model, s, start) for s in model.states])
    u_m, t_m, nfev_m = baseline(model, data, p_start, x0_start, x0_known, 1e-8, 1e-10, True)
    u_d, t_d, nfev_d = baseline(model, data, p_start, x0_start, x0_known, 1e-3, 1e-6, False)
    ours = est.values
    rel_m = float(np.max(np.abs(ours - u_m) / np.abs(u_m)))
    rel_d = float(np.max(np.abs(ours - u_d) / np.abs(u_d)))
    print(f"\n== {name}: {data.nobs} observations, {len(ours)} unknowns ==")
    print(f"Embedding (warm, median of {repeats}): {t_emb * 1e3:.2f} ms, status {est.status}, {est.n_iter} iterations")
    print(f"scipy least_squares/solve_ivp RK45 matched tol (1e-8/1e-10, LS tol 1e-10): {t_m:.3f} s ({nfev_m} nfev); "
          f"max rel. diff of optimum {rel_m:.2e}; speed-up {t_m / t_emb:.0f}x")
    print(f"scipy least_squares/solve_ivp RK45 default tol (1e-3/1e-6, LS default tol): {t_d:.3f} s ({nfev_d} nfev); "
          f"max rel. diff of optimum {rel_d:.2e}; speed-up {t_d / t_emb:.0f}x")
    return t_emb, t_m, t_d, rel_m


def est_start_x0(data, model, s, start):
    key = f"x0[{s}]"
    if key in start:
        return start[key]
    c = data.states.index(s)
    return data.y[np.flatnonzero(data.mask[:, c])[0], c]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    args = ap.parse_args()
    reps = 5 if args.quick else 20
    from odeinfer.smooth._blas import single_threaded_blas

    with single_threaded_blas():
        z = oi.zoo.get("lotka_volterra")
        data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=1.0, rng=1)
        start = {"alpha": 0.5, "beta": 0.03, "gamma": 0.7, "delta": 0.02}
        bench("Lotka-Volterra (zoo), 21 times, 4 params + 2 x0", z.model, data, start, None, reps)

        z = oi.zoo.get("alpha_pinene")
        t = np.linspace(0, 100, 401)[1:]
        data, _ = oi.simulate(z.model, z.params, z.x0, t, t0=0.0, noise=3.0, rng=1)
        true = np.array([z.params[p] for p in z.model.params])
        start = dict(zip(z.model.params, true * np.array([1.3, 0.7, 1.3, 0.7, 1.3])))
        bench("alpha-pinene (zoo), n = 400, 5 params, x0 known", z.model, data, start,
              np.array([z.x0[s] for s in z.model.states]), max(3, reps // 4))


if __name__ == "__main__":
    main()
