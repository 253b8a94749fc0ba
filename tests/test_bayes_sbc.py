"""Simulation-based calibration (SBC) of the sampling paths (Talts et al. 2018, Algorithm 2; the
cases, the rank statistics and the tests are in tests/sbc_cases.py).

Pre-stated tests (fixed before any run):

* Full studies (``slow``): 200 replicates, 2 chains x 300 draws thinned by 3 to L = 199 draws, ranks
  0..199 on 10 equal bins (expected 20 per bin); each parameter's counts by Pearson's chi-square
  (9 df) at the 1% level. With k parameters, the probability that a calibrated sampler fails the
  study is at most 1 - 0.99^k (about 3-4% for k = 3-4; Bonferroni bound k%). Every study writes its
  figures into tests/reference/bayes_studies.md (between its ``<!-- sbc:... -->`` markers) before
  asserting, so a failure is recorded too. Regenerate all of them with

      python -m pytest tests/test_bayes_sbc.py -p no:xdist -o addopts="" -m slow -q -s

  (one study: add ``-k seeded``, ``-k adjoint``, ``-k dde`` or ``-k logistic``).
* Reduced studies (default suite): 16 (seeded), 12 (adjoint) and 8 (delay model: its solves are the
  costliest) replicates, one chain (tune 100, the delay model 200; 60 draws thinned by 3 to L = 19),
  ranks 0..19 on 4 equal bins; each parameter's counts by the EXACT p-value of Pearson's statistic under the
  equal-probability multinomial (every composition enumerated), at the Bonferroni level 1% / k, so
  the probability that a calibrated sampler fails a reduced test is at most 1% (and at most 3% for
  the three together). Their power is low (they catch gross miscalibration: a wrong likelihood
  scale, a sampler that does not move); the full studies are the calibration evidence.

Exact ranks are uniform only for independent draws; the thinning keeps L below the effective sample
size of the chains (Talts et al. sec. 4.1). All studies are seeded and deterministic.
"""

import os

import numpy as np
import pytest

pytest.importorskip("pymc")
import sbc_cases as sbc  # noqa: E402  (tests/ is on sys.path: conftest.py)

FULL = sbc.Budget(draws=300, tune=300, chains=2, thin=3)  # L = 199
FULL_SEEDED = sbc.Budget(draws=300, tune=None, chains=2, thin=3)  # tune: the seeded default (500)
N_FULL, BINS_FULL = 200, 10
SEEDS = {"logistic": 20261122, "seeded": 20261127, "adjoint": 20261128, "dde": 20261129}
#: worker processes of the full studies (ODEINFER_SBC_JOBS, default 2)
JOBS = int(os.environ.get("ODEINFER_SBC_JOBS", "2"))


def _full_study(key, budget):
    case = sbc.CASES[key]
    prov = sbc.provenance()  # of the code that runs (before anything is committed meanwhile)
    ranks, extra, wall, errors = sbc.run_study(case, N_FULL, budget, rng=SEEDS[key], n_jobs=JOBS, progress=True,
                                              chunk_size=5)
    n_ok = int(np.isfinite(next(iter(ranks.values()))).sum())
    rows, pvals = sbc.table(ranks, budget, BINS_FULL, exact=False)
    div, steps, seeded = extra["divergences"], extra["mean_n_steps"], extra["seeded"]
    tune = "the seeded default 500" if budget.tune is None else budget.tune
    lines = [
        f"### SBC: {case.title} (`-k {key}`)", "", case.description, "",
        f"{N_FULL} replicates (root seed {SEEDS[key]}), {budget.chains} chains x {budget.draws} draws, tune {tune}, "
        f"thinned by {budget.thin} to L = {budget.L}; C backend; {JOBS} worker processes; wall {wall:.0f} s; "
        f"{prov}.", "",
        *([f"**{N_FULL - n_ok} of {N_FULL} replicates raised** (the table counts the other {n_ok}): "
           + "; ".join(e[:300] for e in errors), ""] if errors else []),
        f"| parameter | chi-square ({BINS_FULL - 1} df) | p-value | bin counts (expected {N_FULL // BINS_FULL}) |",
        "|---|---|---|---|", *rows, "",
        f"Divergences: total {int(np.nansum(div))}, replicates with any {int(np.sum(div > 0))}. Mean leapfrog steps "
        f"per draw: median {np.nanmedian(steps):.1f} over replicates (max {np.nanmax(steps):.1f})."
        + (f" Mass matrix seeded from the estimate in {int(np.nansum(seeded))} of {N_FULL} replicates."
           if key == "seeded" else ""),
        "Uniform at the 1% level (each parameter): " + ("met." if all(p > 0.01 for p in pvals.values()) else
                                                          "NOT met: " + ", ".join(f"{n} p = {p:.2g}" for n, p in
                                                                                  pvals.items() if p <= 0.01) + "."),
    ]
    sbc.write_section(key, "\n".join(lines))
    print("\n" + "\n".join(lines))
    return errors, pvals


@pytest.mark.slow
def test_sbc_logistic_default_adaptation():
    errors, pvals = _full_study("logistic", FULL)
    assert not errors, errors
    assert all(p > 0.01 for p in pvals.values()), pvals  # uniform ranks at the 1% level


@pytest.mark.slow
def test_sbc_seeded_headline_path():
    errors, pvals = _full_study("seeded", FULL_SEEDED)
    assert not errors, errors
    assert all(p > 0.01 for p in pvals.values()), pvals  # uniform ranks at the 1% level


@pytest.mark.slow
def test_sbc_adjoint_gradient():
    errors, pvals = _full_study("adjoint", FULL)
    assert not errors, errors
    assert all(p > 0.01 for p in pvals.values()), pvals  # uniform ranks at the 1% level


@pytest.mark.slow
def test_sbc_dde_delay_model():
    errors, pvals = _full_study("dde", FULL)
    assert not errors, errors
    assert all(p > 0.01 for p in pvals.values()), pvals  # uniform ranks at the 1% level


# ---- reduced studies (default suite) -----------------------------------------------------------------

REDUCED = sbc.Budget(draws=60, tune=100, chains=1, thin=3)  # L = 19: ranks 0..19, 5 values per bin
#: the delay model: 100 tuning steps leave PyMC's diagonal mass matrix unadapted (45-70 leapfrog steps per
#: draw); 200 cost less in all (15-19 steps per draw)
REDUCED_BUDGET = {"seeded": REDUCED, "adjoint": REDUCED, "dde": sbc.Budget(draws=60, tune=200, chains=1, thin=3)}
BINS_REDUCED = 4
N_REDUCED = {"seeded": 16, "adjoint": 12, "dde": 8}


@pytest.mark.parametrize("key", ["seeded", "adjoint", "dde"])
def test_sbc_reduced(key):
    """A few replicates of each path (N_REDUCED): every parameter's 4-bin rank counts pass the exact
    multinomial test at 1% / k (false-failure probability of this test at most 1% for a calibrated
    sampler). Catches gross miscalibration only."""
    import time

    case = sbc.CASES[key]
    cpu = time.process_time()
    budget = REDUCED_BUDGET[key]
    ranks, extra, wall, errors = sbc.run_study(case, N_REDUCED[key], budget, rng=SEEDS[key] + 1)
    assert not errors, errors
    rows, pvals = sbc.table(ranks, budget, BINS_REDUCED, exact=True)
    print(f"\n{key}: {N_REDUCED[key]} replicates, wall {wall:.1f} s, cpu {time.process_time() - cpu:.1f} s, "
          f"divergences {int(extra['divergences'].sum())}\n" + "\n".join(rows))
    if key == "seeded":
        assert extra["seeded"].all()  # every replicate took the seeded dense-mass-matrix path
    level = 0.01 / len(case.names)
    assert all(p > level for p in pvals.values()), pvals


@pytest.mark.parametrize("counts", [[9, 5, 4, 2], [3, 3, 3, 3, 3], [7, 1, 0, 2]])
def test_exact_multinomial_p_value_matches_simulation(counts):
    """The reduced studies' exact p-value vs 200 000 multinomial draws under uniformity (the oracle):
    within 4 Monte Carlo standard errors."""
    stat, p = sbc.chi_square_exact(counts)
    n, k = sum(counts), len(counts)
    sims = np.random.default_rng(5).multinomial(n, [1 / k] * k, size=200_000)
    e = n / k
    p_mc = np.mean(((sims - e) ** 2).sum(axis=1) / e >= stat - 1e-9)
    assert abs(p - p_mc) <= 4 * np.sqrt(p * (1 - p) / sims.shape[0]) + 1e-12
    assert stat == pytest.approx(((np.asarray(counts) - e) ** 2).sum() / e)


def test_bin_counts_need_equal_bins():
    with pytest.raises(ValueError, match="do not split into 4 equal bins"):
        sbc.bin_counts([0, 1], 10, 4)


def test_adjoint_study_differentiates_by_the_adjoint():
    """The adjoint study's compiled gradient runs VJPOp (the adjoint) and no sensitivity solve, so the
    study calibrates that path."""
    import odeinfer as oi
    from odeinfer.bayes.op import ODEOp, VJPOp

    (data, _, _), _ = sbc.simulate_adjoint(np.random.default_rng(0))
    m = oi.bayes.build_model(sbc.logistic, data, priors=sbc._dists(sbc.PRIOR_ADJOINT), gradient=oi.Adjoint())
    nodes = m.compile_dlogp(mode=sbc.MODE).f.maker.fgraph.apply_nodes
    assert any(isinstance(n.op, VJPOp) for n in nodes)
    assert not any(isinstance(n.op, ODEOp) and n.op.sensitivities for n in nodes)
