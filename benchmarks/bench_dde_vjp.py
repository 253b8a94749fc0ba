"""DDE vector-Jacobian product: continuous adjoint vs forward sensitivities + contraction.

For the Bayes Op's gradient (issue 6): ``v = sum_r g_r^T dx(t_r)/d(theta, phi)`` from
``DDEProblem.python_vjp`` / ``numba_vjp`` (one states-only solve + one backward RK4 sweep,
``dde_adjoint_vjp``) against the baseline ``python_solve(sens=True)`` / ``numba_solve(True)``
followed by ``einsum`` with ``g`` (forward sensitivities, ``n (1 + m + q)`` components).
Cases: the logistic delay model with 100 output times (3 params + 3 history params) and the
HIV model (8 params + 9 history params, 3 states, 101 times). Solver options are the Op's
defaults (rtol 1e-6, atol 1e-8, no error control on the sensitivities) and rtol 1e-10;
"err" is the max deviation from the rtol-1e-12 sensitivity VJP relative to its max entry.

    python benchmarks/bench_dde_vjp.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import odeinfer as oi
from odeinfer.bayes.dde_problem import DDEProblem


def _per_call(f, repeat):
    f()
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(repeat):
            f()
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best


def _case(name, t, repeat):
    e = oi.zoo.get(name)
    theta, phi = e.params_array(), e.history_params_array()
    g = np.random.default_rng(0).normal(size=(t.size, e.model.n_states))
    ref = np.einsum("ti,tij->j", g, oi.solve(oi.Problem(e.model, t, history=e.history, t0=e.t0), theta,
                                             solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-12, atol=1e-14)),
                                             gradient=oi.Forward()).sens)
    scale = np.max(np.abs(ref))
    for rtol, atol in ((1e-6, 1e-8), (1e-10, 1e-12)):
        pr = DDEProblem(e.model, t, e.history, e.t0,
                        solver=oi.MethodOfSteps(oi.Dopri5(rtol=rtol, atol=atol, max_steps=20_000)))

        def fwd_py(pr=pr):
            _, s, _ = pr.python_solve(theta, phi, sens=True)
            return np.einsum("ti,tij->j", g, s)

        def adj_py(pr=pr):
            a, b, _ = pr.python_vjp(theta, phi, g)
            return np.concatenate([a, b])

        solve, vjp = pr.numba_solve(True), pr.numba_vjp()

        def fwd_nb(solve=solve):
            _, s = solve(theta, phi)
            return np.einsum("ti,tij->j", g, s)

        def adj_nb(vjp=vjp):
            a, b = vjp(theta, phi, g)
            return np.concatenate([a, b])

        err_f = np.max(np.abs(fwd_py() - ref)) / scale
        err_a = np.max(np.abs(adj_py() - ref)) / scale
        tf, ta = _per_call(fwd_py, repeat), _per_call(adj_py, repeat)
        tfn, tan = _per_call(fwd_nb, repeat), _per_call(adj_nb, repeat)
        k = e.model.n_params + len(phi)
        print(f"{name:15s} n={e.model.n_states} params={k:2d} times={t.size:3d} rtol={rtol:.0e} | "
              f"python: sens {tf * 1e3:7.3f} ms, adjoint {ta * 1e3:7.3f} ms, ratio adj/sens {ta / tf:5.2f} | "
              f"numba: sens {tfn * 1e3:7.3f} ms, adjoint {tan * 1e3:7.3f} ms, ratio {tan / tfn:5.2f} | "
              f"err sens {err_f:.1e}, adjoint {err_a:.1e}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    _case("logistic_delay", np.linspace(0.0, 10.0, 100), args.repeat)
    _case("hiv", oi.zoo.get("hiv").t, args.repeat)


if __name__ == "__main__":
    main()
