"""Orthogonal conditions vs scipy NLS on alpha-pinene (n = 400, sigma = 3), in one process.

OC: spline proxy (GCV) + closed-form fit + plug-in covariance at a fixed L (no L search).
Baseline: scipy ``least_squares`` over ``solve_ivp`` (RK45, rtol 1e-6), started at 1.5 x theta*,
known x0, the approach a user would otherwise take.

Run: ``python benchmarks/bench_oc.py [--repeat 5]``
"""

import argparse
import time

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

import odeinfer as oi
from odeinfer.estimators.orthogonal import OrthogonalConditions


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    z = oi.zoo.alpha_pinene()
    t = np.linspace(0, 100, 401)[1:]
    data, _ = oi.simulate(z.model, z.params, z.x0, t, t0=0.0, noise=3.0, rng=2024)
    oc = OrthogonalConditions(test_functions="bspline", L=8, window=(0.0, 20.0))
    oc.fit(z.model, data)  # warm-up (sympy -> numpy functions)
    t0 = time.perf_counter()
    for _ in range(args.repeat):
        est = oc.fit(z.model, data)
    t_oc = (time.perf_counter() - t0) / args.repeat

    f = z.model.compile()
    x0 = z.x0_array()
    Y = np.asarray(data.y)

    def rhs(tt, y, p):
        return f.f(tt, y, p)

    def resid(p):
        sol = solve_ivp(rhs, (0.0, 100.0), x0, t_eval=t, args=(p,), rtol=1e-6, atol=1e-8)
        return (sol.y.T - Y).ravel()

    t0 = time.perf_counter()
    nls = least_squares(resid, 1.5 * z.params_array(), method="trf")
    t_nls = time.perf_counter() - t0
    print(f"OC  (spline GCV + closed form + covariance, L=8): {t_oc * 1e3:8.1f} ms   theta = {np.round(est.values, 4)}")
    print(f"NLS (least_squares over solve_ivp RK45, 5 params): {t_nls * 1e3:8.1f} ms   theta = {np.round(nls.x, 4)}"
          f"  nfev={nls.nfev}")
    print(f"ratio NLS / OC = {t_nls / t_oc:.1f}x")


if __name__ == "__main__":
    main()
