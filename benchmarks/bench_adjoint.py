"""Adjoint vs forward sensitivities for the gradient of ``sum_i g_i . x(t_i)``, in one run.

Usage:  python benchmarks/bench_adjoint.py [--quick]

Models: Lotka-Volterra (n = 2 states, m = 4 parameters, 21 times) and a Michaelis-Menten
chain with n = 5, 10, 20 states and m = 2 n parameters (x_0 = 10, the others 0, 41 times on
[0, 20]):

    dx_0/dt = -v_0 x_0 / (K_0 + x_0),
    dx_i/dt = v_{i-1} x_{i-1} / (K_{i-1} + x_{i-1}) - v_i x_i / (K_i + x_i).

* sensitivities: ``oi.bind(problem, gradient=oi.Forward(error_control=False))`` (what the
  Bayesian Op uses by default: the n (1 + m + n) system on the states' steps) plus the
  contraction with g;
* adjoint: ``oi.bind(problem, gradient=oi.Adjoint())`` (states-only forward solve recording its dense output, then the
  backward solve of n + m components on the same steps).

Both at rtol 1e-6, atol 1e-8; warm; best of 5 batches. Also the log density + gradient of a
Gaussian likelihood through the Op in PyTensor's NUMBA mode, both ways.
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_solve import best_of  # run as a script: benchmarks/ is on sys.path


def chain(n):
    import odeinfer as oi

    eqs = {}
    for i in range(n):
        out = f"v{i}*x{i}/(K{i}+x{i})"
        eqs[f"x{i}"] = f"-{out}" if i == 0 else f"v{i - 1}*x{i - 1}/(K{i - 1}+x{i - 1}) - {out}"
    params = [f"v{i}" for i in range(n)] + [f"K{i}" for i in range(n)]
    model = oi.Model.from_equations(eqs, params=params, name=f"mm_chain_{n}")
    p = np.concatenate([np.linspace(1.0, 2.0, n), np.linspace(0.5, 1.5, n)])
    x0 = np.zeros(n)
    x0[0] = 10.0
    return model, p, x0, np.linspace(0.0, 20.0, 41)


def cases(quick):
    import odeinfer as oi

    e = oi.zoo.get("lotka_volterra")
    yield "Lotka-Volterra", e.model, np.array(list(e.params.values())), np.array(list(e.x0.values())), \
        np.asarray(e.t, float)
    for n in (5, 10) if quick else (5, 10, 20):
        yield (f"MM chain n={n}", *chain(n))


def bench_kernels(quick):
    import odeinfer as oi

    number = 50 if quick else 300
    print(f"{'model':18s} {'n':>3s} {'m':>3s}  {'sensitivities':>14s}  {'adjoint':>10s}  {'ratio':>6s}  max rel. diff")
    for name, model, p, x0, t in cases(quick):
        g = np.random.default_rng(0).normal(size=(t.size, model.n_states))
        problem, solver = oi.Problem(model, t), oi.Dopri5(rtol=1e-6, atol=1e-8)
        sens = oi.bind(problem, solver=solver, gradient=oi.Forward(error_control=False))
        vjp = oi.bind(problem, solver=solver, gradient=oi.Adjoint())

        def by_sens():
            _, s, _ = sens(p, x0)
            return np.einsum("ik,ikj->j", g, s)

        def by_adjoint():
            return vjp(p, x0, g)[0]

        a, b = by_sens(), by_adjoint()
        diff = np.abs(a - b).max() / np.abs(a).max()
        ts, ta = best_of(by_sens, 5, number), best_of(by_adjoint, 5, number)
        print(f"{name:18s} {model.n_states:3d} {model.n_params:3d}  {ts * 1e6:11.1f} us  {ta * 1e6:7.1f} us  "
              f"{ts / ta:5.1f}x  {diff:.1e}")


def bench_op(quick):
    import pytensor
    import pytensor.tensor as pt

    import odeinfer as oi
    from odeinfer.bayes import ode_op

    number = 50 if quick else 300
    print("\nlog density + gradient through the Op, PyTensor NUMBA mode")
    for name, model, p, x0, t in cases(quick):
        y_obs = np.random.default_rng(1).normal(size=(t.size, model.n_states))
        times = {}
        for grad, gradient in (("sensitivities", oi.Forward()), ("adjoint", oi.Adjoint())):
            op = ode_op(model, t, gradient=gradient)
            th, xx = pt.dvector("theta"), pt.dvector("x0")
            y, _ = op(th, xx)
            logp = -0.5 * pt.sum((y - y_obs) ** 2)
            f = pytensor.function([th, xx], [logp, *pytensor.grad(logp, [th, xx])], mode="NUMBA")
            f(p, x0)
            times[grad] = best_of(lambda: f(p, x0), 5, number)
        print(f"  {name:18s} sensitivities {times['sensitivities'] * 1e6:8.1f} us   adjoint "
              f"{times['adjoint'] * 1e6:8.1f} us   ratio {times['sensitivities'] / times['adjoint']:5.1f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and models")
    args = parser.parse_args()
    import numba
    import scipy

    print(f"numpy {np.__version__}, scipy {scipy.__version__}, numba {numba.__version__}\n")
    bench_kernels(args.quick)
    bench_op(args.quick)


if __name__ == "__main__":
    main()
