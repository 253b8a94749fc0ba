"""Explorer update time (target < 50 ms per update on zoo models) and export_html time.

Run: python benchmarks/bench_widgets.py [--repeat 30]

For each zoo model it times, after a warm-up:
- ``compute``: re-simulation with the prebuilt numba solver (the callback's arrays);
- ``update``: compute + set_data + blit + PNG encode (what a slider move costs);
- the baseline a user would otherwise write: ``scipy.integrate.solve_ivp`` (RK45, rtol 1e-6)
  plus a full matplotlib redraw of the same figure (``savefig`` to PNG);
and prints the ratios. Then it times ``report.export_html`` on a Lotka-Volterra report
(2 estimates, data, a posterior, automatic plots).
"""

import argparse
import io
import os
import tempfile
import time

import numpy as np
from scipy.integrate import solve_ivp

import odeinfer as oi

MODELS = ["lotka_volterra", "lorenz", "fitzhugh_nagumo", "sir", "alpha_pinene", "activator_inhibitor"]


def _best(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def bench_model(name, repeat):
    z = oi.zoo.get(name)
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=1)
    start = {**z.params, **{f"x0[{s}]": v for s, v in z.x0.items()}}
    ex = oi.widgets.Explorer(z.model, data, start=start, solver=oi.Rodas() if name == "alpha_pinene" else oi.Dopri5())
    p0 = dict(z.params)
    first = z.model.params[0]
    k = [0]

    def update():
        k[0] += 1
        ex.set_values(**{first: p0[first] * (1.0 + 0.01 * (k[0] % 5))})

    t_compute = _best(lambda: ex.compute(), repeat)
    t_update = _best(update, repeat)
    f = z.model.lambdify("f")
    p = np.array(list(z.params.values()))
    x0 = np.array(list(z.x0.values()))
    t = ex.sim.t

    def baseline():
        sol = solve_ivp(lambda tt, y: f(tt, y, p), (ex.sim.solver.t0, t[-1]), x0, t_eval=t, rtol=1e-6, atol=1e-8,
                        method="LSODA" if name == "alpha_pinene" else "RK45")
        for i, s in enumerate(z.model.states):
            ex.lines[s].set_data(sol.t, sol.y[i])
        buf = io.BytesIO()
        ex.fig.savefig(buf, format="png", dpi=ex.dpi)

    t_base = _best(baseline, max(3, repeat // 5))
    return t_compute, t_update, t_base


def bench_report(repeat=3):
    import arviz as az

    z = oi.zoo.get("lotka_volterra")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=1)
    oc = oi.OrthogonalConditions().fit(z.model, data)
    gm = oi.GradientMatching().fit(z.model, data)
    rng = np.random.default_rng(0)
    idata = az.from_dict(posterior={p: rng.normal(v, 0.05 * v, (4, 1000)) for p, v in z.params.items()})
    path = os.path.join(tempfile.mkdtemp(), "bench.html")
    return _best(lambda: oi.report.export_html([oc, gm, data, idata], path), repeat), os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    print(f"{'model':22s} {'compute ms':>11s} {'update ms':>10s} {'scipy+savefig ms':>17s} {'ratio':>7s}  <50ms")
    for name in MODELS:
        c, u, b = bench_model(name, args.repeat)
        print(f"{name:22s} {c:11.3f} {u:10.2f} {b:17.1f} {b / u:6.1f}x  {'yes' if u < 50 else 'NO'}")
    t, size = bench_report()
    print(f"export_html (LV: 2 estimates, data, posterior 4x1000, auto plots): {t / 1e3:.2f} s, {size / 1e3:.0f} kB")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
