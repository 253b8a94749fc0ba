"""DDE solver benchmark: odeinfer's numba method of steps against a scipy method of steps, in one run.

Usage:  python benchmarks/bench_dde.py [--quick]

Also measures the start-up of a new delay model (tiered first solves, odeinfer.solve.shared).

Case: the logistic delay model of the zoo (DDE-Find sec. 6.2: theta = (2, 1.5), tau = 1,
periodic history), 100 output times on (0, 10]; rtol 1e-6, atol 1e-8.

* ours, solve + sensitivities: one call of ``oi.bind(problem, gradient=oi.Forward())``
  (states and d y / d (theta0, theta1, tau, A, omega, b)).
* ours, loss + gradient: that call plus the least-squares loss sum (y - data)^2 and
  its exact gradient 2 sum r S (what an LM / gradient fit evaluates per iteration).
  Issue #5 target: < 1 ms warm.
* baseline: scipy ``solve_ivp`` (RK45, same tolerances) over segments of length tau
  with dense-output lookups of the lagged state (states only), and the loss + gradient
  by central differences with it (2 * 6 + 1 solves), as a user without sensitivities would.
"""

from __future__ import annotations

import argparse
import bisect
import time

import numpy as np
from bench_solve import (  # benchmarks/ on sys.path
    _first_result,
    _wait_for_background,
    best_of,
    settle,
)
from scipy.integrate import solve_ivp

T_OUT = np.linspace(0.1, 10.0, 100)
THETA = np.array([2.0, 1.5, 1.0])
PHI = np.array([-0.5, 3.0, 2.0])


def scipy_mos(theta, phi, t_out, rtol=1e-6, atol=1e-8):
    """Method of steps with solve_ivp (RK45): segments [k tau, (k+1) tau], lagged values from dense output."""
    th0, th1, tau = theta
    A, w, b = phi
    hist = lambda s: A * np.sin(w * s) + b  # noqa: E731
    starts, sols = [], []

    def xval(s):
        if s <= 0.0:
            return hist(s)
        i = max(bisect.bisect_right(starts, s) - 1, 0)
        return sols[i](s)[0]

    x0, a = np.array([hist(0.0)]), 0.0
    t_end = t_out[-1]
    while a < t_end - 1e-12:
        bnd = min(a + tau, t_end)
        sol = solve_ivp(lambda t, x: [th0 * x[0] * (1.0 - th1 * xval(t - tau))], (a, bnd), x0,
                        rtol=rtol, atol=atol, dense_output=True)
        starts.append(a)
        sols.append(sol.sol)
        x0, a = sol.y[:, -1], bnd
    return np.array([xval(s) for s in t_out])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    import odeinfer as oi
    from odeinfer import zoo

    entry = zoo.get("logistic_delay")
    t0c = time.perf_counter()
    solver = oi.bind(oi.Problem(entry.model, T_OUT, history=entry.history, t0=0.0),
                     solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-6, atol=1e-8)), gradient=oi.Forward())
    solver(THETA, PHI)
    cold = time.perf_counter() - t0c
    shared = settle(solver, lambda: solver(THETA, PHI), 100 if args.quick else 500)
    data = scipy_mos(THETA, PHI, T_OUT, rtol=1e-10, atol=1e-12) + 0.05 * np.random.default_rng(0).standard_normal(100)

    def ours_solve():
        return solver(THETA, PHI)

    def ours_loss_grad():
        y, sens, status = solver(THETA, PHI)
        r = y[:, 0] - data
        return r @ r, 2.0 * (r @ sens[:, 0, :]), status

    def scipy_loss_grad():
        x = np.concatenate([THETA, PHI])
        r = scipy_mos(THETA, PHI, T_OUT) - data
        g = np.empty(6)
        for j in range(6):
            h = 1e-6 * max(1.0, abs(x[j]))
            xp, xm = x.copy(), x.copy()
            xp[j] += h
            xm[j] -= h
            rp = scipy_mos(xp[:3], xp[3:], T_OUT) - data
            rm = scipy_mos(xm[:3], xm[3:], T_OUT) - data
            g[j] = (rp @ rp - rm @ rm) / (2 * h)
        return r @ r, g

    n = 200 if args.quick else 2000
    t_solve = best_of(ours_solve, 5, n)
    t_lg = best_of(ours_loss_grad, 5, n)
    t_scipy = best_of(lambda: scipy_mos(THETA, PHI, T_OUT), 3, 3 if args.quick else 10)
    t_scipy_lg = best_of(scipy_loss_grad, 1 if args.quick else 3, 1)
    lo, go, _ = ours_loss_grad()
    ls, gs = scipy_loss_grad()
    print(f"logistic delay, 100 outputs, rtol 1e-6 (first call incl. compile/cache load: {cold:.2f} s)")
    print(f"  ours  solve + 6 sensitivities : {t_solve * 1e6:9.1f} us  (steps: {int(solver.info[1])}; "
          f"{solver.tier} kernel)")
    if shared is not None:
        print(f"  (first calls, shared kernel while the model's compiled: {shared * 1e6:.1f} us)")
    print(f"  ours  loss + exact gradient   : {t_lg * 1e6:9.1f} us  (target < 1000 us)")
    print(f"  scipy method of steps, states : {t_scipy * 1e6:9.1f} us  -> ratio {t_scipy / t_solve:7.1f}x "
          f"(scipy states only vs ours with sensitivities)")
    print(f"  scipy loss + FD gradient      : {t_scipy_lg * 1e6:9.1f} us  -> ratio {t_scipy_lg / t_lg:7.1f}x")
    print(f"  loss ours/scipy {lo:.6f} / {ls:.6f}; max |grad diff| / |grad| = "
          f"{np.max(np.abs(go - gs)) / np.max(np.abs(gs)):.1e}")


def bench_start_up():
    """Whole processes solving a new delay model (python start, import, first solve with
    sensitivities): tiered off on an empty cache, then tiered with the shared kernel cached."""
    import os
    import tempfile
    import textwrap

    def code(c):  # a delay model no cache has seen: x' = -a x(t - tau) + c
        return textwrap.dedent(f"""
            import numpy as np, odeinfer as oi
            from odeinfer import math as om
            @oi.model(states=["x"], params=["a", "tau"], delays=["tau"])
            def m(t, y, p):
                return {{"x": -p.a * om.lag(y.x, "tau") * (1.0 - y.x) + {c!r}}}
            s = oi.bind(oi.Problem(m, np.linspace(0.0, 10.0, 50), history=0.5), gradient=oi.Forward())
            y, sens, status = s(np.array([1.4, 1.0]), np.array([0.5]))
            assert status == 0
            print(s.tier)
        """)

    with tempfile.TemporaryDirectory() as cache:
        off = _first_result(code(0.0), dict(os.environ, ODEINFER_CACHE_DIR=cache, ODEINFER_TIERED="0"))
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ODEINFER_CACHE_DIR=cache, ODEINFER_TIERED="1")
        empty = _first_result(code(0.0), env)
        _wait_for_background(cache, 1)
        new = _first_result(code(0.001), env)
        _wait_for_background(cache, 2)  # before the folder goes
    print("Start-up, new delay model, whole process (first solve with sensitivities)")
    print(f"  empty cache, tiered off (compiles dde_solve for the model): {off[0]:6.2f} s   [{off[1]}]")
    print(f"  empty cache (compiles the shared kernels, once per machine): {empty[0]:6.2f} s   [{empty[1]}]")
    print(f"  new model, shared kernel cached:                             {new[0]:6.2f} s   [{new[1]}]")


if __name__ == "__main__":
    main()
    print()
    bench_start_up()
