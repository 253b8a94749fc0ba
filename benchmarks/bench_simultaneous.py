"""Bock's simultaneous method on Lorenz with 2000 grid nodes vs scipy NLS on the same data, in one process.

Data: zoo ``lorenz`` (seed 000 section 3.2), t = 0, 0.05, ..., 10 (201 times), every state
observed, noise sd sqrt(2), seed 2024. Start: parameters (12, 25, 3) (true 10, 28, 8/3).

Simultaneous: ``Simultaneous(n_grid=2000)`` (trapezoid, 2000 nodes, 6000 state unknowns + 3
parameters), starting states from the spline proxy; timed warm (after one call that loads the
numba cache), both with per-state sigma estimated (default: reweighting passes) and with sigma
given (one pass). Median of ``--repeat`` runs.

Baseline (for context: what a user would otherwise write): scipy ``least_squares`` (trf,
2-point finite-difference Jacobian) over ``solve_ivp`` (RK45, rtol 1e-6, atol 1e-8), single
shooting over 3 parameters + 3 initial states, started at the same parameters and the first
observation as x0. On 10 time units of chaotic Lorenz single shooting usually stops in a poor
local minimum: its cost is printed next to the simultaneous one.

Run: ``python benchmarks/bench_simultaneous.py [--repeat 5]``
"""

import argparse
import statistics
import time

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

import odeinfer as oi
from odeinfer.estimators.simultaneous import Simultaneous


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n-grid", type=int, default=2000)
    args = ap.parse_args()
    z = oi.zoo.get("lorenz")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=2024)
    start = np.array([12.0, 25.0, 3.0])
    sim = Simultaneous(n_grid=args.n_grid)
    sim_known = Simultaneous(n_grid=args.n_grid, sigma=float(z.sigma))
    sim.fit(z.model, data, start=start)  # warm-up: numba cache load / compile
    sim_known.fit(z.model, data, start=start)

    t_sim, t_known = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        est = sim.fit(z.model, data, start=start)
        t_sim.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        est_k = sim_known.fit(z.model, data, start=start)
        t_known.append(time.perf_counter() - t0)

    Y = np.asarray(data.y)
    t = np.asarray(data.t)

    def rhs(tt, y, p):  # what a user writes
        return [p[0] * (y[1] - y[0]), y[0] * (p[1] - y[2]) - y[1], y[0] * y[1] - p[2] * y[2]]

    def resid(w):
        sol = solve_ivp(rhs, (t[0], t[-1]), w[3:], t_eval=t, args=(w[:3],), method="RK45", rtol=1e-6, atol=1e-8)
        if not sol.success or sol.y.shape[1] != t.size:
            return np.full(Y.size, 1e3)
        return (sol.y.T - Y).ravel()

    t0 = time.perf_counter()
    nls = least_squares(resid, np.r_[start, Y[0]], method="trf")
    t_nls = time.perf_counter() - t0

    ms, mk = statistics.median(t_sim), statistics.median(t_known)
    nodes = est.extras["n_nodes"][data.name]
    print(f"Lorenz, {t.size} observations x 3 states, Simultaneous grid {nodes} nodes "
          f"({3 * nodes + 3} unknowns), median of {args.repeat} warm runs")
    print(f"  Simultaneous (sigma estimated) : {ms * 1e3:8.1f} ms  status {est.status}, {est.n_iter} iterations, "
          f"{int(est.extras['reweighting_passes'])} passes, params {np.round(est.values[:3], 4).tolist()}")
    print(f"  Simultaneous (sigma given)     : {mk * 1e3:8.1f} ms  status {est_k.status}, {est_k.n_iter} iterations, "
          f"SSR {2 * est_k.cost * z.sigma ** 2:.1f}")
    print(f"  scipy least_squares/solve_ivp  : {t_nls * 1e3:8.1f} ms  ({nls.nfev} evaluations) params "
          f"{np.round(nls.x[:3], 4).tolist()}, SSR {2 * nls.cost:.1f}")
    print(f"  ratio scipy / Simultaneous     : {t_nls / ms:8.1f}x (sigma estimated), {t_nls / mk:.1f}x (sigma given)")
    print(f"  target: Simultaneous < 500 ms warm -> {'PASS' if ms < 0.5 else 'FAIL'}")


if __name__ == "__main__":
    main()
