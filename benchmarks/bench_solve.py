"""Solver benchmark: odeinfer's numba kernels against scipy's solve_ivp, in one run.

Usage:  python benchmarks/bench_solve.py [--quick]

Prints, for each case, our time, the baseline's time and their ratio; the figures
recorded in benchmarks/RESULTS.md come from this script.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

LV_PARAMS = np.array([0.55, 0.028, 0.80, 0.024])
LV_X0 = np.array([33.96, 5.93])
T21 = np.arange(21.0)

_LV_SOURCE = """
import odeinfer as oi
@oi.model(states=["prey", "pred"], params=["alpha", "beta", "gamma", "delta"])
def lv(t, y, p):
    return {"prey": p.alpha * y.prey - p.beta * y.prey * y.pred,
            "pred": p.delta * y.prey * y.pred - p.gamma * y.pred}
"""


def best_of(fn, repeat, number):
    """Smallest mean time per call over ``repeat`` batches of ``number`` calls (timeit's rule)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def settle(solver, call, number):
    """Call once; if the shared kernel answered (a new model, see odeinfer.solve.shared), time it
    (best of 5 x ``number`` calls) and wait until the model's own kernel has taken over. Returns
    the shared kernel's time or None."""
    call()
    if solver.tier != "shared":
        return None
    shared = best_of(call, 5, number)
    t0 = time.perf_counter()
    while solver.tier != "model":
        if time.perf_counter() - t0 > 600:
            raise RuntimeError("the model kernel did not take over within 600 s")
        time.sleep(0.2)
        call()
    return shared


def lv_rhs(t, y, a, b, g, d):
    return [a * y[0] - b * y[0] * y[1], d * y[0] * y[1] - g * y[1]]


def bench_lotka_volterra(quick):
    import odeinfer as oi

    ns = {}
    exec(compile(_LV_SOURCE, "<lv>", "exec"), ns)  # the same model text as the cold-start runs
    model = ns["lv"]
    solver = oi.bind(oi.Problem(model, T21), solver=oi.Dopri5(rtol=1e-6, atol=1e-8), gradient=oi.Forward())
    shared = settle(solver, lambda: solver(LV_PARAMS, LV_X0), 500 if not quick else 50)
    ours = best_of(lambda: solver(LV_PARAMS, LV_X0), 5, 2000 if not quick else 200)

    def scipy_states():
        solve_ivp(lv_rhs, (0.0, 20.0), LV_X0, t_eval=T21, args=tuple(LV_PARAMS), method="RK45", rtol=1e-6)

    base = best_of(scipy_states, 5, 20 if not quick else 5)
    # accuracy of what we timed: against DOP853 at rtol 1e-12
    ref = solve_ivp(lv_rhs, (0.0, 20.0), LV_X0, t_eval=T21, args=tuple(LV_PARAMS), method="DOP853",
                    rtol=1e-12, atol=1e-12).y.T
    y, _, _ = solver(LV_PARAMS, LV_X0)
    err = np.max(np.abs(y - ref) / np.abs(ref))
    print("Lotka-Volterra, 21 points, rtol 1e-6")
    print(f"  odeinfer dopri5 + sensitivities (4 params + 2 x0): {ours * 1e6:9.1f} us   (max rel. error {err:.1e})")
    print(f"  scipy solve_ivp RK45, states only:                {base * 1e6:9.1f} us")
    print(f"  ratio (scipy / odeinfer): {base / ours:8.0f}x   target >= 80x   [{solver.tier} kernel]")
    if shared is not None:
        print(f"  (first calls, shared kernel while the model's compiled: {shared * 1e6:.1f} us, "
              f"{base / shared:.0f}x)")
    # the one-shot call (validates, copies, builds a Solution) against the prebuilt path above
    problem = oi.Problem(model, T21, x0=LV_X0)
    dopri, forward = oi.Dopri5(rtol=1e-6, atol=1e-8), oi.Forward()
    oi.solve(problem, LV_PARAMS, solver=dopri, gradient=forward)
    one_shot = best_of(lambda: oi.solve(problem, LV_PARAMS, solver=dopri, gradient=forward), 5,
                       2000 if not quick else 200)
    print(f"  one-shot oi.solve(problem, ...): {one_shot * 1e6:9.1f} us   {one_shot / ours:.2f}x the prebuilt "
          "call   target <= 1.5x")
    return base / ours


def robertson_rhs(t, y):
    return [-0.04 * y[0] + 1e4 * y[1] * y[2], 0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2, 3e7 * y[1] ** 2]


def bench_robertson(quick):
    import odeinfer as oi

    rob = oi.Model.from_equations(
        {"y1": "-k1*y1 + k3*y2*y3", "y2": "k1*y1 - k3*y2*y3 - k2*y2**2", "y3": "k2*y2**2"},
        params=["k1", "k2", "k3"], name="robertson")
    p = np.array([0.04, 3e7, 1e4])
    t = np.concatenate([[0.0], np.logspace(-5, 5, 40)])
    # Rodas is tiered too: the shared kernel answers until the model's own has compiled (settle)
    solver = oi.bind(oi.Problem(rob, t), solver=oi.Rodas(rtol=1e-6, atol=1e-10))
    shared = settle(solver, lambda: solver(p, np.array([1.0, 0.0, 0.0])), 5)
    ours = best_of(lambda: solver(p, np.array([1.0, 0.0, 0.0])), 5, 50 if not quick else 5)
    solver_s = oi.bind(oi.Problem(rob, t), solver=oi.Rodas(rtol=1e-6, atol=1e-10), gradient=oi.Forward())
    shared_s = settle(solver_s, lambda: solver_s(p, np.array([1.0, 0.0, 0.0])), 3)
    ours_s = best_of(lambda: solver_s(p, np.array([1.0, 0.0, 0.0])), 5, 20 if not quick else 3)

    def scipy_radau():
        solve_ivp(robertson_rhs, (0.0, 1e5), [1.0, 0.0, 0.0], t_eval=t, method="Radau", rtol=1e-6, atol=1e-10)

    base = best_of(scipy_radau, 3, 2 if not quick else 1)
    ref = solve_ivp(robertson_rhs, (0.0, 1e5), [1.0, 0.0, 0.0], t_eval=t, method="Radau", rtol=1e-11,
                    atol=1e-14).y.T
    y, _, status = solver(p, np.array([1.0, 0.0, 0.0]))
    err = np.max(np.abs(y[:, [0, 2]] - ref[:, [0, 2]]))
    print("Robertson (stiff), 41 points to t = 1e5, rtol 1e-6, atol 1e-10")
    print(f"  odeinfer rodas, states:              {ours * 1e3:9.3f} ms   (status {status}, max abs. error y1,y3 {err:.1e})")
    print(f"  odeinfer rodas, states + sensitivities (3 params + 3 x0): {ours_s * 1e3:9.3f} ms")
    print(f"  scipy solve_ivp Radau, states only:  {base * 1e3:9.3f} ms")
    print(f"  ratio (scipy / odeinfer states): {base / ours:8.0f}x   [model kernel]")
    if shared is not None or shared_s is not None:
        fmt = lambda v: "-" if v is None else f"{v * 1e3:.3f} ms"  # noqa: E731
        print(f"  (first calls, shared kernel while the model's compiled: states {fmt(shared)}, "
              f"with sensitivities {fmt(shared_s)})")


def _first_result(code, env):
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, out.stdout.strip()


def _wait_for_background(cache, n_ready, timeout=600.0):
    """Wait until the cache holds ``n_ready`` markers of finished background compilations."""
    t0 = time.perf_counter()
    while len(list(Path(cache).glob("*.ready"))) < n_ready:
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError("background compilation did not finish")
        time.sleep(0.2)
    return time.perf_counter() - t0


def bench_start_up():
    """Whole processes (python start, import odeinfer, trace, first solve with sensitivities):
    on an empty disk cache, for a new model once the shared kernels are cached, and a second
    process for the same model; the first case also with tiered compilation switched off."""
    def code(extra):  # Lotka-Volterra, with a term that makes it a model no cache has seen
        src = _LV_SOURCE.replace("- p.gamma * y.pred}", f"- p.gamma * y.pred - {extra!r} * y.pred}}")
        return src + textwrap.dedent("""
            import numpy as np
            s = oi.bind(oi.Problem(lv, np.arange(21.0)), gradient=oi.Forward())
            y, sens, status = s(np.array([0.55, 0.028, 0.80, 0.024]), np.array([33.96, 5.93]))
            assert status == 0
            print(s.tier)
        """)

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ODEINFER_CACHE_DIR=cache, ODEINFER_TIERED="0")
        off = _first_result(code(0.0), env)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ODEINFER_CACHE_DIR=cache, ODEINFER_TIERED="1")
        empty = _first_result(code(0.0), env)
        _wait_for_background(cache, 1)
        new = _first_result(code(1e-3), env)
        background = _wait_for_background(cache, 2)
        second = _first_result(code(1e-3), env)
    print("Start-up, whole process (python start, import odeinfer, trace, first solve with sensitivities)")
    print(f"  empty cache, tiered off (compiles the model kernel):  {off[0]:6.2f} s   [{off[1]}]")
    print(f"  empty cache (compiles the shared kernel, once per machine): {empty[0]:6.2f} s   [{empty[1]}]")
    print(f"  new model, shared kernel cached:  {new[0]:6.2f} s   [{new[1]}]   target < 5 s")
    print(f"    (its own kernel was ready in the background {background:.1f} s after that process ended)")
    print(f"  second process, same model:       {second[0]:6.2f} s   [{second[1]}]   target < 1.5 s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    import numba
    import scipy

    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, scipy {scipy.__version__}, "
          f"numba {numba.__version__}, {os.cpu_count()} cpus\n")
    bench_start_up()
    print()
    bench_lotka_volterra(args.quick)
    print()
    bench_robertson(args.quick)


if __name__ == "__main__":
    main()
