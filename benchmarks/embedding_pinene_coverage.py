"""Wald coverage of oi.Embedding (trajectory least squares) on alpha-pinene, same data as
benchmarks/oc_coverage_diagnostic.py (the alternative the matching estimators' CoverageWarning names).

Run: ``python benchmarks/embedding_pinene_coverage.py [--reps 200] [--n 200] [--sigma 3] [--seed 16]``
"""

import argparse
import warnings

import numpy as np

import odeinfer as oi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--sigma", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=16)
    a = ap.parse_args()
    z = oi.zoo.alpha_pinene()
    th = z.params_array()
    t = np.linspace(0, 100, a.n + 1)[1:]
    y = np.asarray(oi.solve(oi.Problem(z.model, t, x0=z.x0, t0=0.0), z.params,
                            solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y)
    rng = np.random.default_rng(a.seed)
    datasets = [oi.Data(t, y + rng.normal(0, a.sigma, y.shape), z.model.states, t0=0.0) for _ in range(a.reps)]
    err = np.full((a.reps, th.size), np.nan)
    se = np.full((a.reps, th.size), np.nan)
    for r, d in enumerate(datasets):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                e = oi.Embedding().fit(z.model, d, x0=dict(z.x0), start=dict(z.params))
            if e.converged:
                err[r] = np.array([e.params[k] for k in z.model.params]) - th
                se[r] = np.array([e.bse[k] for k in z.model.params])
        except Exception:  # a failed fit stays NaN and counts as a miss
            pass
    ok = np.all(np.isfinite(err) & np.isfinite(se), axis=1)
    sd = np.std(err[ok], 0, ddof=1)
    cover = np.where(ok[:, None], np.abs(err) <= 1.959964 * se, False).mean(0)
    print(f"Embedding alpha-pinene n={a.n} sigma={a.sigma} reps={a.reps} seed={a.seed}: failed {np.sum(~ok)}")
    print("  bias/SD    ", np.round(np.mean(err[ok], 0) / sd, 3).tolist())
    print("  mean se/SD ", np.round(np.mean(se[ok], 0) / sd, 3).tolist())
    print("  coverage   ", np.round(cover, 3).tolist())


if __name__ == "__main__":
    main()
