"""AdjointDDE: default mode (LM + delay scan) vs DDE-Find's paper mode (500 Adam epochs).

Targets (issue 5): logistic delay model, 100 points: one residual + Jacobian evaluation
(forward sensitivities) under 1 ms warm, a full default-mode fit under 2 s; paper mode vs
default mode wall time and estimation error on the logistic and ENSO experiments (DDE-Find
sec. 6.2 / 6.3 setups and initial guesses, noise level 0.3, relative to the sd of the clean
trajectory). The baseline of the ratios is paper mode, measured in the same run.

    python benchmarks/bench_adjoint_dde.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import odeinfer as oi
from odeinfer.estimators._dde_setup import build_setup

SETUPS = {
    "logistic_delay": ({"theta0": 1.0, "theta1": 1.0, "tau": 0.5}, oi.History.periodic(-0.25, 6.0, 2.6)),
    "enso": ({"theta0": 1.5, "theta1": 0.8, "theta2": 1.2, "tau": 6.0}, oi.History.periodic(-0.3, 0.8, 1.95)),
}


def _data(e, t, level, seed):
    clean = oi.solve(oi.Problem(e.model, t, history=e.history), e.params,
                     solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-11, atol=1e-13))).y
    rng = np.random.default_rng(seed)
    y = clean + level * np.std(clean, axis=0, ddof=1) * rng.standard_normal(clean.shape)
    return oi.Data(t, y, list(e.model.states))


def _best(f, n=5):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    # --- logistic, 100 points: one evaluation and one full default fit ---------------------------------
    e = oi.zoo.get("logistic_delay")
    start, h0 = SETUPS["logistic_delay"]
    t100 = np.linspace(0.0, 10.0, 100)
    data = _data(e, t100, 0.3, 0)
    est = oi.AdjointDDE()
    S = build_setup(est, e.model, data, h0, dict(start, **{"A[x]": -0.5, "omega[x]": 3.0, "b[x]": 2.0}), None,
                    None)
    u = S.u0.copy()
    S.evaluate(u)
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        S.evaluate(u)
    t_eval = (time.perf_counter() - t0) / n
    est.fit(e.model, data, history=h0, start=start)  # warm (compilation, caches)
    t_fit, fit = _best(lambda: est.fit(e.model, data, history=h0, start=start), 3)
    t_fit_ng, _ = _best(lambda: oi.AdjointDDE(tau_grid=None).fit(e.model, data, history=h0, start=start), 3)
    print("logistic delay, 100 points, noise 0.3")
    print(f"  residual + Jacobian (6 sensitivities), rtol 1e-8: {t_eval * 1e3:.3f} ms   (target < 1 ms)")
    print(f"  full default fit (LM + tau scan):                 {t_fit:.3f} s    (target < 2 s), "
          f"{fit.n_iter} LM iterations, status {fit.status}")
    print(f"  default fit without the tau scan:                 {t_fit_ng:.3f} s")
    # --- paper vs default: time and error --------------------------------------------------------------
    print(f"\npaper mode (500 Adam epochs) vs default mode, noise 0.3, {args.seeds} data sets each, "
          "101 points (DDE-Find protocol)")
    print(f"{'model':16s}{'mode':8s}{'time/fit s':>11s}{'ratio':>7s}  " + "  mean |error| of theta..., tau")
    for name, (start, h0) in SETUPS.items():
        e = oi.zoo.get(name)
        k = e.model.n_params
        truth = e.params_array()
        rows = {}
        for mode in ("paper", "lm"):
            times, errs = [], []
            for seed in range(args.seeds):
                d = _data(e, e.t, 0.3, 100 + seed)
                t0 = time.perf_counter()
                r = oi.AdjointDDE(mode=mode).fit(e.model, d, history=h0, start=start)
                times.append(time.perf_counter() - t0)
                errs.append(np.abs(r.values[:k] - truth))
            rows[mode] = (float(np.mean(times)), np.mean(errs, axis=0))
        base = rows["paper"][0]
        for mode in ("paper", "lm"):
            tm, err = rows[mode]
            errs = " ".join(f"{n}={v:.4f}" for n, v in zip(e.model.params, err))
            print(f"{name:16s}{mode:8s}{tm:11.3f}{base / tm:7.2f}  {errs}")


if __name__ == "__main__":
    main()
