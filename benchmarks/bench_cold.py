"""Cold start of a NEW model, whole process: python start, import odeinfer, model definition,
simulated data, then the first solve (Dopri5, Rodas, the delay solver, with sensitivities) or
the first fit of each estimator. The shared kernels (compiled once per machine) are warmed
first with a throwaway model; every timed process then uses a model no cache has seen, so it
measures what a user waits for after editing a model.

    python benchmarks/bench_cold.py            # 3 runs per case, prints min / median / max
    python benchmarks/bench_cold.py --runs 1

Each process's own background compile of its model's kernels (tiered compilation) starts while it runs, as for
a user; the ones it leaves behind are stopped before the next process (see ``stop_background_compiles``).

The first row is the floor every such process pays before odeinfer's own work: python start, importing
numpy, sympy, scipy.linalg and numba, one call of a small ``@njit(cache=True)`` function loaded from numba's
disk cache (numba's start-up: its target context imports scipy.linalg for BLAS), and the interpreter's exit.

Targets (issue "one solver core", item 4): first solve <= 1.5 s, first fit <= 3 s. When diffrax is
installed (``pip install diffrax``), the same new model's first ``jax.jit(jax.jacfwd(solve))`` call
(Dopri5, float64, the same 41 output times and tolerances as the odeinfer row, sensitivities to the 4
parameters and the 2 initial states) runs as one more row, a whole process too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "solve dopri5 + sens": ("ode", "oi.solve(oi.Problem(m, t, x0=[34.0, 5.9]), P, gradient=oi.Forward())"),
    "solve rodas + sens": ("ode", "oi.solve(oi.Problem(m, t, x0=[34.0, 5.9]), P, solver=oi.Rodas(), "
                                  "gradient=oi.Forward())"),
    "solve DDE + sens": ("dde", "oi.solve(oi.Problem(m, t, history=[0.5]), P, gradient=oi.Forward())"),
    "fit OrthogonalConditions": ("ode", "oi.OrthogonalConditions().fit(m, data)"),
    "fit GradientMatching": ("ode", "oi.GradientMatching().fit(m, data)"),
    "fit NewtonRaphson": ("ode", "oi.NewtonRaphson().fit(m, data)"),
    "fit Embedding": ("ode", "oi.Embedding().fit(m, data, start=P)"),
    "fit Simultaneous": ("ode", "oi.Simultaneous().fit(m, data, start=P)"),
    "fit AdjointDDE": ("dde", "oi.AdjointDDE().fit(m, data, history=[0.5], start=P)"),
}

PRELUDE = {
    "ode": """
m = oi.Model.from_equations({{"x": "a*x - b*x*y + {c!r}", "y": "d*x*y - g*y"}}, params=["a", "b", "g", "d"])
P = [0.55, 0.028, 0.8, 0.024]
t = np.linspace(0.0, 20.0, 41)
data = oi.simulate(m, P, [34.0, 5.9], t, noise=0.5, rng=1).data
""",
    "dde": """
from odeinfer import math as om
m = oi.Model.from_equations({{"x": "r*x*(1 - lag(x, tau)) + {c!r}"}}, params=["r", "tau"], delays=["tau"])
P = [1.2, 1.0]
t = np.linspace(0.0, 15.0, 61)
sol = oi.solve(oi.Problem(m, t, history=[0.5]), P)
data = oi.Data(t, sol.y + 0.01 * np.random.default_rng(1).standard_normal(sol.y.shape), ["x"])
""",
}


#: the first row's problem in diffrax (the default solve: Dopri5, rtol 1e-6, atol 1e-8 as ``oi.solve``'s
#: ``solve`` role; jacfwd through the adaptive solve, the same derivatives as odeinfer's sensitivities)
DIFFRAX = """
import time
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import diffrax

c = {c!r}
def f(t, y, p):
    return jnp.stack([p[0] * y[0] - p[1] * y[0] * y[1] + c, p[3] * y[0] * y[1] - p[2] * y[1]])

ts = jnp.linspace(0.0, 20.0, 41)
def solve(px):
    sol = diffrax.diffeqsolve(diffrax.ODETerm(f), diffrax.Dopri5(), 0.0, 20.0, None, px[4:], args=px[:4],
                              saveat=diffrax.SaveAt(ts=ts), max_steps=100000, adjoint=diffrax.ForwardMode(),
                              stepsize_controller=diffrax.PIDController(rtol={rtol!r}, atol={atol!r}))
    return sol.ys

s = time.perf_counter()
J = jax.jit(jax.jacfwd(solve))(jnp.array([0.55, 0.028, 0.8, 0.024, 34.0, 5.9]))
J.block_until_ready()
print(time.perf_counter() - s)
"""


#: the floor row: what any process that builds a model with sympy and runs numba-cached code pays
FLOOR = """
import numpy, sympy, scipy.linalg, numba
@numba.njit(cache=True)
def f(x):
    return x + 1.0
f(1.0)
"""


def diffrax_script(c):
    from odeinfer.solve.config import DEFAULT_SOLVERS

    solver = DEFAULT_SOLVERS["solve"]
    return DIFFRAX.format(c=c, rtol=solver.rtol, atol=solver.atol)


def script(kind, call, c, fit_only):
    body = PRELUDE[kind].format(c=c)
    if fit_only:
        return ("import time\nimport numpy as np, odeinfer as oi\n" + body
                + f"s = time.perf_counter()\n{call}\nprint(time.perf_counter() - s)\n")
    return "import numpy as np, odeinfer as oi\n" + body + call + "\n"


def run(code):
    """``run_python("-c", code)``, then the background compiles it left behind stopped."""
    result = run_python("-c", code)
    stop_background_compiles()
    return result


def stop_background_compiles():
    """End the background compiles (odeinfer's tiered kernels, niced) that the last process left for its
    model: every timed process uses a new model, so no later process needs them, and a queue of them would
    compete with the next timed process for the 2 cores (what a user who solves one new model does not
    meet). Linux ``pkill``; a no-op where it is missing."""
    try:
        subprocess.run(["pkill", "-f", "ODEINFER_COMPILE_SLOT"], capture_output=True, check=False)
    except OSError:
        pass
    time.sleep(0.5)


def run_python(*argv):
    """Whole-process wall time and stdout of ``python *argv`` (a new process)."""
    env = dict(os.environ)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return wall, out.stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, ODEINFER_TIERED="
          f"{os.environ.get('ODEINFER_TIERED', '1')}, load average {os.getloadavg()[0]:.1f}")
    for name, (kind, call) in CASES.items():  # warm the shared kernels with throwaway models
        run(script(kind, call, 0.5 + time.time_ns() % 10**6 * 1e-13, False))
    print(f"{'case':28s} {'whole process (s)':>24s} {'the call itself (s)':>24s}")
    with tempfile.TemporaryDirectory() as tmp:
        floor = os.path.join(tmp, "floor.py")  # a file: numba caches only functions defined in one
        with open(floor, "w", encoding="utf-8") as fh:
            fh.write(FLOOR)
        run_python(floor)  # fills numba's cache of the floor's function
        walls = [run_python(floor)[0] for _ in range(args.runs)]
    print(f"{'floor (imports, numba)':28s} {_fmt(walls):>24s}", flush=True)
    for name, (kind, call) in CASES.items():
        walls, inner = [], []
        for _ in range(args.runs):
            c = 1.0 + time.time_ns() % 10**9 * 1e-15  # a model no cache has seen
            w, _ = run(script(kind, call, c, False))
            walls.append(w)
            _, out = run(script(kind, call, c + 1e-16 * (1 + len(walls)), True))
            inner.append(float(out.splitlines()[-1]))
        print(f"{name:28s} {_fmt(walls):>24s} {_fmt(inner):>24s}", flush=True)
    try:
        import diffrax  # noqa: F401
    except ImportError:
        print("diffrax is not installed: no diffrax row (pip install diffrax)")
        return
    walls, inner = [], []
    for _ in range(args.runs):
        w, out = run(diffrax_script(1.0 + time.time_ns() % 10**9 * 1e-15))
        walls.append(w)
        inner.append(float(out.splitlines()[-1]))
    print(f"{'diffrax jit(jacfwd) dopri5':28s} {_fmt(walls):>24s} {_fmt(inner):>24s}", flush=True)


def _fmt(v):
    return f"{min(v):6.2f} {statistics.median(v):6.2f} {max(v):6.2f}"


if __name__ == "__main__":
    main()
