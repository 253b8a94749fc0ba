"""Relative bias and RMSE of ``oi.NewtonRaphson()`` (its defaults: ``derivative="spline"``, the GCV smoothing
spline) on alpha-pinene, 100 replicates per setting (t on (0, 100], normal noise, seed 1619, started at the truth;
failed fits counted). Compare two versions of the code by running it with each one's package on ``PYTHONPATH``:

    git archive <commit> odeinfer | tar -x -C /tmp/old && (cd /tmp && PYTHONPATH=/tmp/old python <this file>)
    python benchmarks/bench_newton_accuracy.py
"""

import warnings

import numpy as np

import odeinfer as oi


def main(settings=((50, 3.0), (200, 3.0), (400, 3.0), (200, 8.0)), reps=100):
    z = oi.zoo.alpha_pinene()
    truth = z.params_array()
    for n, sd in settings:
        t = np.linspace(0.0, 100.0, n + 1)[1:]
        y = np.asarray(oi.solve(oi.Problem(z.model, t, x0=z.x0, t0=0.0), z.params,
                                solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y)
        rng = np.random.default_rng(1619)
        est = np.full((reps, truth.size), np.nan)
        for r in range(reps):
            data = oi.Data(t, y + rng.normal(0.0, sd, y.shape), z.model.states, t0=0.0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    est[r] = oi.NewtonRaphson().fit(z.model, data, start=dict(z.params)).values
                except oi.errors.OdeinferError:
                    pass
        rel = (est - truth) / truth
        print(f"n={n} sd={sd}: failed {int(np.isnan(est[:, 0]).sum())}; relative bias "
              f"{np.round(np.nanmean(rel, 0), 3)}, relative RMSE {np.round(np.sqrt(np.nanmean(rel ** 2, 0)), 3)}",
              flush=True)


if __name__ == "__main__":
    main()
