"""Orthogonal conditions vs scipy NLS on alpha-pinene (n = 400, sigma = 3), in one process.

OC: spline proxy (GCV over every knot count, per state, constrained to the known x0) +
closed-form fit + plug-in covariance ``M V_e M'``, at a fixed L (no L search), B-spline tests
on the full window. Its BLAS is limited to one thread inside ``fit`` (threadpoolctl).

Baseline (what a user would otherwise write): scipy ``least_squares(method="lm")`` over
``solve_ivp`` (RK45, rtol 1e-6, atol 1e-8), finite-difference Jacobian, known x0, started at
1.5 x theta* (OC needs no start). Both are timed alternately in the same process; medians.

Run: ``python benchmarks/bench_oc.py [--repeat 7]``
"""

import argparse
import statistics
import time

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

import odeinfer as oi
from odeinfer.estimators.orthogonal import OrthogonalConditions


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--method", default="RK45")
    args = ap.parse_args()
    z = oi.zoo.alpha_pinene()
    t = np.linspace(0, 100, 401)[1:]
    data, _ = oi.simulate(z.model, z.params, z.x0, t, t0=0.0, noise=3.0, rng=2024)
    oc = OrthogonalConditions(test_functions="bspline", L=8)
    oc_scan = OrthogonalConditions(test_functions="bspline")
    est = oc.fit(z.model, data, x0=z.x0)  # warm-up (sympy -> numpy functions, numba cache load)
    oc_scan.fit(z.model, data, x0=z.x0)

    x0 = z.x0_array()
    Y = np.asarray(data.y)
    th = z.params_array()

    def rhs(tt, y, p):  # what a user writes
        return [-(p[0] + p[1]) * y[0], p[0] * y[0], p[1] * y[0] - (p[2] + p[3]) * y[2] + p[4] * y[4],
                p[2] * y[2], p[3] * y[2] - p[4] * y[4]]

    def resid(p):
        sol = solve_ivp(rhs, (0.0, 100.0), x0, t_eval=t, args=(p,), method=args.method, rtol=1e-6, atol=1e-8)
        return (sol.y.T - Y).ravel()

    t_oc, t_scan, t_nls = [], [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        est = oc.fit(z.model, data, x0=z.x0)
        t_oc.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        est_scan = oc_scan.fit(z.model, data, x0=z.x0)
        t_scan.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        nls = least_squares(resid, 1.5 * th, method="lm")
        t_nls.append(time.perf_counter() - t0)
    m_oc, m_scan, m_nls = (statistics.median(v) for v in (t_oc, t_scan, t_nls))
    print(f"OC  (GCV spline + closed form + covariance, L=8):   {m_oc * 1e3:8.1f} ms  theta = {np.round(est.values, 4)}")
    print(f"OC  with the L scan 5..15 (11 fits + 11 ODE solves): {m_scan * 1e3:8.1f} ms  "
          f"theta = {np.round(est_scan.values, 4)} (L={est_scan.extras['L']})")
    print(f"NLS (least_squares lm over solve_ivp {args.method}):       {m_nls * 1e3:8.1f} ms  "
          f"theta = {np.round(nls.x, 4)}  nfev={nls.nfev}")
    print(f"theta*                                               {np.round(th, 4)}")
    print(f"ratio NLS / OC (L=8) = {m_nls / m_oc:.1f}x;  NLS / OC (L scan) = {m_nls / m_scan:.1f}x "
          f"(medians of {args.repeat}, alternated)")


if __name__ == "__main__":
    main()
