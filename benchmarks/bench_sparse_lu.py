"""Large sparse stiff models: odeinfer's Rodas (its planned sparse LU) against scipy's stiff solvers, in one run.

A reaction network of ``--states`` species (default 300): a decay chain whose rates span four decades (stiff),
plus one bimolecular reaction per ten species between random pairs (seeded), from one species at 1. Both tools
solve the states alone to ``t = 10`` at rtol 1e-6 / atol 1e-10 with outputs at 21 times: odeinfer's bound Rodas
(warm; the Jacobian's pattern gives the sparse LU's plan, see ``odeinfer/solve/kernels/linalg.py``) and scipy's
``solve_ivp`` BDF and Radau with the exact Jacobian as a sparse matrix (its sparse LU, SuperLU). Prints each
time, the largest relative difference of the states between the tools, and the ratio to the faster scipy method.

    python benchmarks/bench_sparse_lu.py [--states 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sps
from scipy.integrate import solve_ivp


def network(n, seed=0):
    rng = np.random.default_rng(seed)
    rates = 10.0 ** np.linspace(-1.0, 3.0, n - 1)
    pairs = [tuple(rng.choice(n, 3, replace=False)) for _ in range(n // 10)]  # x_a + x_b -> x_c
    return rates, pairs


def model(n, rates, pairs):
    import odeinfer as oi

    eq = {f"x{i}": "0" for i in range(n)}
    for i, r in enumerate(rates):
        eq[f"x{i}"] += f" - k*{float(r)!r}*x{i}"
        eq[f"x{i + 1}"] += f" + k*{float(r)!r}*x{i}"
    for a, b, c in pairs:
        eq[f"x{a}"] += f" - b*x{a}*x{b}"
        eq[f"x{b}"] += f" - b*x{a}*x{b}"
        eq[f"x{c}"] += f" + b*x{a}*x{b}"
    return oi.Model.from_equations(eq, params=["k", "b"])


def scipy_functions(n, rates, pairs, p):
    k, b = p
    a_idx = np.array([q[0] for q in pairs])
    b_idx = np.array([q[1] for q in pairs])
    c_idx = np.array([q[2] for q in pairs])

    def f(t, x):
        flow = k * rates * x[:-1]
        dx = np.zeros(n)
        dx[:-1] -= flow
        dx[1:] += flow
        r = b * x[a_idx] * x[b_idx]
        np.add.at(dx, a_idx, -r)
        np.add.at(dx, b_idx, -r)
        np.add.at(dx, c_idx, r)
        return dx

    def jac(t, x):
        rows, cols, vals = [np.arange(n - 1), np.arange(1, n)], [np.arange(n - 1), np.arange(n - 1)], \
            [-k * rates, k * rates]
        for s, sign in ((a_idx, -1.0), (b_idx, -1.0), (c_idx, 1.0)):
            rows += [s, s]
            cols += [a_idx, b_idx]
            vals += [sign * b * x[b_idx], sign * b * x[a_idx]]
        return sps.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))

    return f, jac


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--states", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    import odeinfer as oi

    n = args.states
    rates, pairs = network(n)
    p = np.array([0.8, 2.0])
    x0 = np.zeros(n)
    x0[0] = 1.0
    for a, b, _ in pairs[:5]:
        x0[a] = x0[b] = 0.3
    t = np.linspace(0.0, 10.0, 21)
    t_build = time.perf_counter()
    bound = oi.bind(oi.Problem(model(n, rates, pairs), t, t0=0.0), solver=oi.Rodas(rtol=1e-6, atol=1e-10))
    y, _, status = bound(p, x0)  # compiles the model's callbacks (the solver kernels are shared)
    print(f"{n} states, {len(pairs)} bimolecular reactions; model built and first solve in "
          f"{time.perf_counter() - t_build:.1f} s (status {status})")
    f, jac = scipy_functions(n, rates, pairs, p)
    times = {}
    for _ in range(args.repeat):
        c = time.perf_counter()
        y, _, status = bound(p, x0)
        times.setdefault("odeinfer Rodas", []).append(time.perf_counter() - c)
        for method in ("BDF", "Radau"):
            c = time.perf_counter()
            ref = solve_ivp(f, (0.0, 10.0), x0, method=method, t_eval=t, jac=jac, rtol=1e-6, atol=1e-10)
            times.setdefault(f"scipy {method} (sparse Jacobian)", []).append(time.perf_counter() - c)
            diff = np.max(np.abs(y - ref.y.T)) / np.max(np.abs(ref.y))
            print(f"  {method}: largest state difference {diff:.1e} of the largest state")
    best = {k: min(v) for k, v in times.items()}
    for k, v in best.items():
        print(f"{k:38s} {v * 1e3:9.2f} ms (best of {args.repeat})")
    base = min(v for k, v in best.items() if k.startswith("scipy"))
    print(f"ratio: the faster scipy method / odeinfer = {base / best['odeinfer Rodas']:.1f}x")


if __name__ == "__main__":
    main()
