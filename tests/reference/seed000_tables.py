"""Regenerate the figures of ``tests/reference/seed000_tables.md`` (seed 000, Tables 1, 4, 8).

Usage: ``python tests/reference/seed000_tables.py`` (about a minute). Data: the zoo's seed-000
settings (``oi.zoo.population / lorenz / activator_inhibitor``), simulated with ``oi.simulate``;
the seeds are given next to each block.
"""

import warnings

import numpy as np

import odeinfer as oi
from odeinfer.estimators.newton import GradientDescent, NewtonRaphson

warnings.simplefilter("ignore")
STARTS = {
    "population": [[0.1, 0.1, 1.2, 1.3, 0.2], [1, -1, 2, 0, 1], [-10, -10, 2, -3, 1], [0, 0, 0, 0, 0],
                   [100, -100, -100, 20, -30]],
    "lorenz": [[15, 1, -10], [0, 10, -10], [30, -10, 10], [-3, 1, 0], [0, 0, 0]],
    "activator_inhibitor": [[1, 2, 1, 2], [10, 0, 3, 0.1], [0, 0, -10, 0], [-1, 1, -10, 9], [-10, 11, 12, 13]],
}


def fmt(v, d=4):
    return "[" + ", ".join(f"{x:.{d}f}" for x in np.asarray(v)) + "]"


def per_start(name, data, gd_max=100000):
    z = oi.zoo.get(name)
    print(f"\n## {name}: per start (NR undamped | NR LM | GD)")
    for a0 in STARTS[name]:
        u = NewtonRaphson(derivative="forward", damping="none", max_iter=60).fit(z.model, data, start=a0)
        lm = NewtonRaphson(derivative="forward").fit(z.model, data, start=a0)
        gd = GradientDescent(derivative="forward", max_iter=gd_max).fit(z.model, data, start=a0)
        print(f"{a0}: undamped {u.status} {u.n_iter} it {fmt(u.values)} | LM {lm.status} {lm.n_iter} it "
              f"{fmt(lm.values)} | GD {gd.status} {gd.n_iter} it {fmt(gd.values)}")
    print("bse (LM, last start):", fmt(lm.bse.to_numpy()))


def main():
    z = oi.zoo.population()
    per_start("population", oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=0).data)
    z = oi.zoo.lorenz()
    per_start("lorenz", oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=0).data)
    for dt in (0.05, 0.1):
        t = np.arange(0, 10 + dt / 2, dt)
        e = NewtonRaphson(derivative="forward").fit(z.model, oi.simulate(z.model, z.params, z.x0, t).data, start=[1, 1, 1])
        print(f"lorenz noise-free dt={dt}: {fmt(e.values, 3)}")
    vals, bse = [], []
    for s in range(20):
        d = oi.simulate(z.model, z.params, z.x0, z.t, noise=np.sqrt(2), rng=1000 + s).data
        e = NewtonRaphson(derivative="forward").fit(z.model, d, start=[1, 1, 1])
        vals.append(e.values)
        bse.append(e.bse.to_numpy())
    vals = np.array(vals)
    print(f"lorenz dt=0.05 T=10 sigma=sqrt2, 20 replicates (seeds 1000-1019): mean {fmt(vals.mean(0), 3)} "
          f"sd {fmt(vals.std(0, ddof=1), 3)} mean sandwich bse {fmt(np.mean(bse, 0), 3)}")
    print("\n## lorenz sigma=sqrt2, T=10, mean of 5 replicates (seeds 0-4): a1 (forward | spline | local_polynomial)")
    for dt in (0.05, 0.02, 0.01, 0.005):
        t = np.arange(0, 10 + dt / 2, dt)
        res = {k: [] for k in ("forward", "spline", "local_polynomial")}
        for s in range(5):
            d = oi.simulate(z.model, z.params, z.x0, t, noise=np.sqrt(2), rng=s).data
            for k in res:
                res[k].append(NewtonRaphson(derivative=k).fit(z.model, d, start=[1, 1, 1]).values)
        print(f"dt={dt}: " + " | ".join(f"{k} {fmt(np.mean(v, 0), 3)}" for k, v in res.items()))
    z = oi.zoo.activator_inhibitor()
    per_start("activator_inhibitor", oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=0).data)
    bad = {1e-3: 0, 1.0: 0}
    for sig in (None, 0.01, 0.02, 0.03):
        for s in range(5 if sig else 1):
            d = oi.simulate(z.model, z.params, z.x0, z.t, noise=sig, rng=s).data
            ref = NewtonRaphson(derivative="forward").fit(z.model, d, start=[2, 3, 0.1, 0.4]).values
            for lam0 in bad:
                for a0 in STARTS["activator_inhibitor"]:
                    e = NewtonRaphson(derivative="forward", lambda0=lam0).fit(z.model, d, start=a0)
                    bad[lam0] += e.status != "converged" or not np.allclose(e.values, ref, rtol=1e-6)
    print(f"activator_inhibitor, 16 data sets x 5 starts: fits missing the global minimum by lambda0: {bad}")


if __name__ == "__main__":
    main()
