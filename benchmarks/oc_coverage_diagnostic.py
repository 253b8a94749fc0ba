"""Monte Carlo diagnosis of the matching estimators' Wald intervals on alpha-pinene (issue 16).

For each configuration: per-parameter bias / Monte Carlo SD, mean reported s.e. / MC SD, 95% Wald
coverage (failed fits count as misses) and the coverage of the intervals re-centred on the MC bias.

Run: ``python benchmarks/oc_coverage_diagnostic.py [--reps 200] [--n 200] [--sigma 3] [--seed 16]``
"""

import argparse
import warnings

import numpy as np

import odeinfer as oi
from odeinfer.estimators.gradient_matching import GradientMatching
from odeinfer.estimators.orthogonal import OrthogonalConditions
from odeinfer.smooth import SplineSmoother


def configs():
    return {
        "OC default (bspline, L scan, GCV)": (OrthogonalConditions(test_functions="bspline"), SplineSmoother()),
        "OC bspline L=8, GCV": (OrthogonalConditions(test_functions="bspline", L=8), SplineSmoother()),
        "OC sine (L scan), GCV": (OrthogonalConditions(), SplineSmoother()),
        "OC bspline, undersmooth 3": (OrthogonalConditions(test_functions="bspline"), SplineSmoother(undersmooth=3.0)),
        "TS (GradientMatching), GCV": (GradientMatching(), SplineSmoother()),
    }


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
    x0 = dict(z.x0)
    rng = np.random.default_rng(a.seed)
    datasets = [oi.Data(t, y + rng.normal(0, a.sigma, y.shape), z.model.states, t0=0.0) for _ in range(a.reps)]
    print(f"alpha-pinene n={a.n} sigma={a.sigma} reps={a.reps} seed={a.seed}")
    for name, (est, sm) in configs().items():
        err = np.full((a.reps, th.size), np.nan)
        se = np.full((a.reps, th.size), np.nan)
        for r, d in enumerate(datasets):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    e = est.fit(z.model, d, x0=x0, proxy=sm.fit(d, x0=x0))
                err[r] = e.values - th
                se[r] = np.sqrt(np.diag(e.cov))
            except Exception:  # a failed fit stays NaN and counts as a miss
                pass
        ok = np.all(np.isfinite(err) & np.isfinite(se), axis=1)
        sd = np.std(err[ok], 0, ddof=1)
        bias = np.mean(err[ok], 0)
        cover = np.where(ok[:, None], np.abs(err) <= 1.959964 * se, False).mean(0)
        cen = np.where(ok[:, None], np.abs(err - bias) <= 1.959964 * se, False).mean(0)
        f = lambda v: " ".join(f"{x:6.3f}" for x in v)  # noqa: E731
        print(f"\n{name}: failed {np.sum(~ok)}\n  bias/SD     {f(bias / sd)}\n  mean se/SD  {f(np.mean(se[ok], 0) / sd)}"
              f"\n  coverage    {f(cover)}\n  re-centred  {f(cen)}")


if __name__ == "__main__":
    main()
