"""Slow studies of oi.Embedding (results recorded in tests/reference/embedding_studies.md).

Run: python -m pytest tests/test_embedding_studies.py -m slow -n 0 -s
(``EMBEDDING_STUDY_REPS`` sets the number of replicates, default 200.)
"""

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest

import odeinfer as oi

pytestmark = pytest.mark.slow

LV = oi.zoo.get("lotka_volterra")
LV_START = {"alpha": 0.5, "beta": 0.03, "gamma": 0.7, "delta": 0.02}
LV_NOISE = 1.0  # additive, thousands of animals


def simulate_lv(rng):
    data, _ = oi.simulate(LV.model, LV.params, LV.x0, LV.t, noise=LV_NOISE, rng=rng)
    truth = {**LV.params, "x0[prey]": LV.x0["prey"], "x0[predator]": LV.x0["predator"]}
    return data, truth


def fit_lv_wald_and_profile(data):
    """Embedding fit; profile bounds are returned as extra pseudo-parameters ``lo:<name>``/``hi:<name>``."""
    import warnings

    est = oi.Embedding().fit(LV.model, data, start=LV_START)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = est.conf_int(method="profile")
    params = dict(est.params)
    for n in est.names:
        params[f"lo:{n}"] = ci.loc[n, "lower"]
        params[f"hi:{n}"] = ci.loc[n, "upper"]
    return SimpleNamespace(params=params, bse=dict(est.bse), converged=est.converged)


def test_lv_replicate_study_bias_se_coverage():
    """200 replicates: bias within 3 MC standard errors, asymptotic SE within 15% of the MC SD,
    95% Wald and profile coverage within 0.95 +- 0.03 (about 2 binomial SEs at n = 200)."""
    n_rep = int(os.environ.get("EMBEDDING_STUDY_REPS", "200"))
    res = oi.studies.monte_carlo(simulate_lv, {"embedding": fit_lv_wald_and_profile}, n_rep, rng=2024,
                                 n_jobs=2, progress=False)
    f = res.frame
    names = list(LV.params) + ["x0[prey]", "x0[predator]"]
    lines = []
    for n in names:
        g = f[f.param == n]
        est, se, truth = g.estimate.to_numpy(), g.stderr.to_numpy(), g.truth.iloc[0]
        lo = f[f.param == f"lo:{n}"].estimate.to_numpy()
        hi = f[f.param == f"hi:{n}"].estimate.to_numpy()
        bias = est.mean() - truth
        mc_sd = est.std(ddof=1)
        wald = np.mean(np.abs(est - truth) <= 1.959964 * se)
        prof = np.mean((lo <= truth) & (truth <= hi))
        lines.append(f"| {n} | {truth:.4g} | {bias:+.3g} | {mc_sd / math.sqrt(n_rep):.2g} | {mc_sd:.4g} | "
                     f"{np.median(se):.4g} | {wald:.3f} | {prof:.3f} |")
        assert abs(bias) < 3 * mc_sd / math.sqrt(n_rep) + 1e-12
        assert abs(np.median(se) / mc_sd - 1) < 0.15
        assert abs(wald - 0.95) <= 0.03 and abs(prof - 0.95) <= 0.03
    print("\n| param | truth | bias | MC se of bias | MC sd | median asympt. se | Wald 95% | profile 95% |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print("converged:", f.groupby("rep").converged.all().mean())


def test_real_data_fits():
    """Lynx-hare (log noise, x0 estimated), alpha-pinene (Box et al. 1973 as reference),
    influenza boarding school (SIR, I = in_bed, log scale). Prints estimates and intervals."""
    import warnings

    warnings.simplefilter("ignore")
    out = {}
    # lynx-hare: Carpenter's Stan case study setting (log-normal noise, x0 estimated)
    d = oi.datasets.lynx_hare().rename({"hare": "prey", "lynx": "predator"})
    m = LV.model.with_observation(noise="log")
    est = oi.Embedding(log_params=True, sigma="per_state").fit(m, d, start=LV_START)
    out["lynx_hare"] = est
    assert est.converged
    # Carpenter (2018) posterior means: alpha 0.55, beta 0.028, gamma 0.80, delta 0.024
    np.testing.assert_allclose(est.values[:4], [0.55, 0.028, 0.80, 0.024], rtol=0.15)
    # alpha-pinene, 189.5 C, minutes; x0 = (100, 0, 0, 0, 0) known
    z = oi.zoo.get("alpha_pinene")
    d = oi.datasets.alpha_pinene()
    box = np.array([5.93, 2.96, 2.05, 27.5, 4.00]) * 1e-5
    est = oi.Embedding(estimate_x0=False, log_params=True).fit(z.model, d, start=dict(zip(z.model.params, box * 1.5)),
                                                               x0=dict(zip(z.model.states, [100, 0, 0, 0, 0])))
    out["alpha_pinene"] = est
    assert est.converged
    # influenza: SIR, in_bed as I, log scale, S0 = 762, I0 = 1, R0 = 0 known
    zs = oi.zoo.get("sir")
    d = oi.datasets.influenza_boarding_school().select(["in_bed"]).rename({"in_bed": "I"})
    m = zs.model.with_observation(observed=["I"], noise="log")
    est = oi.Embedding(estimate_x0=False, log_params=True).fit(m, d, start={"beta": 1.5, "gamma": 0.4}, x0=zs.x0)
    out["influenza_sir_log"] = est
    m2 = zs.model.with_observation(observed=["I"])
    out["influenza_sir_additive"] = oi.Embedding(estimate_x0=False).fit(m2, d, start={"beta": 1.5, "gamma": 0.4},
                                                                         x0=zs.x0)
    for k, e in out.items():
        print(f"\n### {k}\n")
        w, p = e.conf_int(), e.conf_int(method="profile")
        print("| name | estimate | se | Wald 95% | profile 95% |\n|---|---|---|---|---|")
        for n in e.names:
            print(f"| {n} | {e.params[n]:.5g} | {e.bse[n]:.3g} | [{w.loc[n, 'lower']:.4g}, {w.loc[n, 'upper']:.4g}] "
                  f"| [{p.loc[n, 'lower']:.4g}, {p.loc[n, 'upper']:.4g}] |")
        print(f"status {e.status}, cost {e.cost:.5g}, sigma {dict(e.sigma)}")
    # Box et al. (1973) (5.93, 2.96, 2.05, 27.5, 4.00) x 1e-5 /min; ordinary least squares on all five
    # responses gives 5.926, 2.963, 2.047, 27.45, 3.998 (x 1e-5): agreement to the published 3 digits
    np.testing.assert_allclose(out["alpha_pinene"].values, box, rtol=0.01)
