"""Simulation-based calibration of the Bayesian stage (Talts, Betancourt, Simpson, Vehtari &
Gelman 2018, "Validating Bayesian inference algorithms with simulation-based calibration",
arXiv:1804.06788, Algorithm 2): draw parameters from the prior, data from the likelihood, sample
the posterior with odeinfer.bayes.sample (NUTS through the numba Op), and rank the prior draw
among L thinned posterior draws. If the whole pipeline (Op, gradient, model builder, sampler) is
right, each parameter's rank is uniform on {0, ..., L}: tested by a chi-square test on 10 equal
bins at the 1% level. Results recorded in tests/reference/bayes_studies.md.

Model: logistic growth x' = r x (1 - x / K), x(0) = 1 known, 16 observations on (0, 12] with
normal noise of unknown sd sigma; priors r ~ LogNormal(log 0.8, 0.25), K ~ LogNormal(log 10, 0.2),
sigma ~ LogNormal(log 0.5, 0.3). 200 replicates; per replicate 2 chains x 300 draws (tune 300,
PyMC default adaptation), thinned by 3 to L = 199 draws (Talts et al. sec. 4.1: thinning reduces the
autocorrelation that would otherwise make the rank histogram look non-uniform).

Run:  python -m pytest tests/test_bayes_sbc.py -p no:xdist -o addopts="" -m slow -q -s
"""

import time
from types import SimpleNamespace

import numpy as np
import pytest

pm = pytest.importorskip("pymc")
from scipy import stats  # noqa: E402

import odeinfer as oi  # noqa: E402

pytestmark = pytest.mark.slow

N_REP = 200
DRAWS, TUNE, CHAINS, THIN = 300, 300, 2, 3
L = CHAINS * DRAWS // THIN - 1  # 199 posterior draws per rank -> ranks 0..199 (200 values)
N_BINS = 10
T = np.linspace(0.75, 12.0, 16)
X0 = 1.0
PRIOR = {"r": (np.log(0.8), 0.25), "K": (np.log(10.0), 0.2), "sigma": (np.log(0.5), 0.3)}
NAMES = ("r", "K", "sigma[x]")
MODE = "FAST_RUN"  # the C backend: its compiled pieces are cached on disk, so replicates do not recompile


@oi.model(states=["x"], params=["r", "K"], name="sbc_logistic")
def logistic(t, y, p):
    return {"x": p.r * y.x * (1 - y.x / p.K)}


def _priors():
    return {"r": pm.LogNormal.dist(*PRIOR["r"]), "K": pm.LogNormal.dist(*PRIOR["K"]),
            "sigma": pm.LogNormal.dist(*PRIOR["sigma"])}


def simulate(rng):
    """One SBC replicate: parameters from the prior, data from the likelihood, and a sampler seed.

    Returns ``((data, seed, truth), truth)``: the estimator gets the truth to rank it."""
    r, K, sigma = (float(np.exp(rng.normal(mu, s))) for mu, s in PRIOR.values())
    # the exact logistic solution (independent of the solver under test)
    x = K / (1.0 + (K / X0 - 1.0) * np.exp(-r * T))
    y = x + sigma * rng.standard_normal(T.size)
    data = oi.Data(T, y[:, None], ["x"], t0=0.0)
    truth = {"r": r, "K": K, "sigma[x]": sigma}
    return (data, int(rng.integers(2**31 - 1)), truth), truth


def sbc_ranks(packed):
    """Ranks of the true values among the L thinned posterior draws (the 'estimates' of the study),
    and the number of divergences."""
    data, seed, truth = packed
    idata = oi.bayes.sample(logistic, data, priors=_priors(), x0=[X0], draws=DRAWS, tune=TUNE, chains=CHAINS,
                            cores=1, rng=seed, posterior_predictive=False, mode=MODE)
    post = idata.posterior
    params = {n: float(np.sum(post[n].values[:, ::THIN].ravel()[:L] < truth[n])) for n in NAMES}
    params["divergences"] = float(idata.sample_stats["diverging"].sum())
    return SimpleNamespace(params=params, bse=None, converged=True)


def chi_square_uniform(ranks, n_values=L + 1, n_bins=N_BINS):
    """Chi-square statistic and p-value of the ranks' histogram on ``n_bins`` equal bins."""
    counts = np.bincount(np.asarray(ranks, dtype=int) * n_bins // n_values, minlength=n_bins)
    res = stats.chisquare(counts)
    return float(res.statistic), float(res.pvalue), counts


def test_sbc_logistic_growth_ranks_uniform():
    from odeinfer.studies import monte_carlo

    assert (L + 1) % N_BINS == 0
    start = time.perf_counter()
    res = monte_carlo(simulate, {"sbc": sbc_ranks}, N_REP, rng=20261122, n_jobs=2, progress=False)
    wall = time.perf_counter() - start
    frame = res.frame
    print(f"\nSBC: {N_REP} replicates, wall {wall:.0f} s")
    errors = frame.loc[frame["error"].notna(), "error"].unique()
    assert frame["converged"].all(), errors
    col = "estimate"
    div = frame[frame["param"] == "divergences"][col].to_numpy()
    print(f"divergences: total {np.nansum(div):.0f}, replicates with any {int(np.sum(div > 0))}")
    pvals = {}
    for n in NAMES:
        ranks = frame[frame["param"] == n][col].to_numpy()
        assert ranks.size == N_REP and np.all(np.isfinite(ranks))
        chi2, p, counts = chi_square_uniform(ranks)
        pvals[n] = p
        print(f"| {n} | {chi2:.2f} | {p:.3f} | {' '.join(str(c) for c in counts)} |")
    assert all(p > 0.01 for p in pvals.values()), pvals
