"""Fits of the Benchmark-Models-PEtab problems from random starts (issue 14's evidence).

The reference objective is the collection's published optimum (AMICI's log-likelihood at the
nominal parameters, see tests/test_petab.py): a fit "reaches" it when its NLL is at most
0.01 above it (the published values have 3-decimal precision in the collection's README).

* default suite: Boehm from the published optimum moved by +0.1 on every estimated parameter's
  log10 scale (a quarter of a decade in all directions at once; clipped to the upper bounds), back to
  the published optimum;
* slow: ``python -m pytest -m slow tests/test_petab_fits.py`` runs 50 starts per problem
  (uniform in the bounds on the parameters' scales, Sobol, seed 0) and rewrites
  ``tests/reference/petab_multistart.md`` with the best NLL, the starts within 0.1 of the
  published optimum, the failed starts and the time per start (all counted, none dropped); it
  asserts that the best NLL reaches the published optimum.
"""

import time
from pathlib import Path

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.estimators._likelihood_fit import _chunk
from odeinfer.inference.multistart import run_starts, sample_starts

PETAB = Path(__file__).parent / "data" / "petab"
REFERENCE = Path(__file__).parent / "reference" / "petab_multistart.md"
PUBLISHED_NLL = {"Boehm_JProteomeRes2014": 138.22199693517703, "Crauste_CellSystems2017": 190.96521897435176,
                 "Elowitz_Nature2000": -63.20279991419332, "Fujita_SciSignal2010": -53.08377736998929}


def fits(name, n, seed=0, jobs=1):
    pp = oi.petab.load(PETAB / name / f"{name}.yaml")
    obj = pp.objective()
    U = sample_starts(obj.lower, obj.upper, n, rng=seed)
    est = oi.Embedding()
    t = time.perf_counter()
    res = run_starts(_chunk, (pp.problem, est.solver, est.iterations("likelihood"), None, None, est.gradient), U,
                     n_jobs=jobs)
    return res, time.perf_counter() - t


def _shifted_boehm():
    """``(problem, start)``: Boehm and its published optimum moved by +0.1 on every log10 scale (clipped)."""
    from odeinfer.likelihood.parameters import from_scale

    pp = oi.petab.load(PETAB / "Boehm_JProteomeRes2014" / "Boehm_JProteomeRes2014.yaml")
    obj = pp.objective()
    return pp.problem, dict(zip(pp.problem.estimated,
                                from_scale(np.minimum(pp.u_nominal + 0.1, obj.upper), obj.scales)))


def test_boehm_returns_to_the_published_optimum_from_a_shifted_start():
    problem, start = _shifted_boehm()
    fit = oi.Embedding().fit(problem, start=start)
    assert fit.status == "converged", fit.message
    assert fit.nll <= PUBLISHED_NLL["Boehm_JProteomeRes2014"] + 0.01


def _fit_from_start(name, index):
    """``(fit, nominal NLL)``: the single-start default Embedding fit of PEtab problem ``name`` from start ``index``
    of the issue's 100 starts (Sobol, seed 0, on the estimation scales), and the NLL at the collection's nominal
    parameters under the same objective."""
    from odeinfer.estimators._likelihood_fit import likelihood_solver, make_objective
    from odeinfer.likelihood.parameters import from_scale

    pp = oi.petab.load(PETAB / name / f"{name}.yaml")
    est = oi.Embedding()
    obj = pp.objective()
    u0 = sample_starts(obj.lower, obj.upper, 100, rng=0)[index]
    fit = est.fit(pp.problem, start=dict(zip(pp.problem.estimated, from_scale(u0, obj.scales))))
    return fit, make_objective(pp.problem, likelihood_solver(est))(pp.u_nominal).nll


def test_a_fit_stopped_early_on_the_change_test_is_continued_to_the_published_optimum(monkeypatch):
    """The continuation of a local fit that stopped on the NLL-change test (``extras["polish"]``). Made deterministic
    by a change test a thousand times too loose (fatol 1 in place of 1e-7): from the shifted Boehm start above, the
    local fit stops about 0.9 above the published optimum, and the continuation (fatol 1e-12) reaches it.

    (Until session 38 this was Crauste start 93 of the issue's 100 starts, whose fit stopped on the change test 9.6e-4
    above the nominal NLL. Its path runs along a curved valley where the Fisher information spans 23 decades, and
    depends on rounding: with numpy 2.4.6 it never stops on that test but ends at the iteration budget 5.4e-3 above
    the nominal NLL, crawling by short accepted steps: benchmarks/RESULTS.md, session 39.)"""
    from odeinfer.estimators import _likelihood_fit

    monkeypatch.setitem(_likelihood_fit.TOLERANCES, "fatol", 1.0)
    problem, start = _shifted_boehm()
    fit = oi.Embedding().fit(problem, start=start)
    polished, published = fit.extras["polish"], PUBLISHED_NLL["Boehm_JProteomeRes2014"]
    assert polished is not None and polished["nll_before"] > published + 0.1, polished
    assert polished["nll_after"] == fit.nll <= published + 0.01, (fit.nll, published)
    assert "continued with fatol 1e-12" in fit.message and fit.status == "converged"


def test_perelson_start_whose_virus_load_decays_below_the_solver_resolution_ends_quickly():
    """Start 80 of the issue's 100 starts (c = 10^2.55, delta = 10^4.77): the virus load (observed on the log10
    scale) decays below the solver's atol 1e-8 after t = 0.1, where its computed value is solver noise of either sign.
    Until session 33 a third of the trial points failed on a one-ulp change of c and the fit ran its 1000 iterations
    (0.9 s, half of Perelson's multistart). Held at the resolution, no trial point fails and the fit stops within
    100 iterations; its end, where the data are not resolved, warns."""
    from odeinfer.errors import ResolutionWarning

    obj = oi.petab.load(PETAB / "Perelson_Science1996" / "Perelson_Science1996.yaml").objective()
    assert sample_starts(obj.lower, obj.upper, 100, rng=0)[80][0] == pytest.approx(2.5526, abs=1e-4)  # log10 c
    with pytest.warns(ResolutionWarning, match="does not resolve"):
        fit, _ = _fit_from_start("Perelson_Science1996", 80)
    assert fit.status == "converged" and fit.n_iter < 100, (fit.message, fit.n_iter)
    assert "could not be computed" not in fit.message


def test_zheng_start_reaches_the_nominal_nll_with_its_pre_equilibration_by_newtons_method():
    """Start 1 of the issue's 100 starts on Zheng_PNAS2012 (pre-equilibration; 15 states, 46 estimated parameters):
    until session 35 its fit took 75 s, 73 of them in the steady state's sensitivity solves (0.18 s per evaluation).
    The steady state now comes from Newton's method and the implicit function theorem (J_x is not singular), and the
    fit reaches the NLL at the collection's nominal parameters or better (-278.33; the 100-start run's best:
    tests/reference/petab_benchmarks.md)."""
    from odeinfer.estimators._likelihood_fit import likelihood_solver, make_objective

    fit, nominal = _fit_from_start("Zheng_PNAS2012", 1)
    assert fit.status == "converged" and fit.nll <= nominal, (fit.status, fit.nll, nominal)
    pp = oi.petab.load(PETAB / "Zheng_PNAS2012" / "Zheng_PNAS2012.yaml")
    obj = make_objective(pp.problem, likelihood_solver(oi.Embedding()))
    assert obj(pp.u_nominal).ok and obj.steady.route == "newton"


@pytest.mark.slow
def test_fifty_starts_reach_the_published_optima_and_rewrite_the_reference():
    lines = ["# Benchmark-Models-PEtab: 50-start Embedding fits", "",
             "Regenerated by `python -m pytest -m slow tests/test_petab_fits.py` (starts: Sobol, seed 0, uniform in",
             "the bounds on the parameters' scales; default Embedding: oi.Auto(rtol=1e-8, atol=1e-10), trust region as",
             "fides). Published optimum: AMICI's NLL at the collection's nominal parameters. All starts counted.", "",
             "| problem | published NLL | best NLL | best - published | starts within 0.1 | converged | failed | "
             "median s/start | total s |", "|---|---|---|---|---|---|---|---|---|"]
    worst = []
    for name, ref in PUBLISHED_NLL.items():
        res, wall = fits(name, 50, jobs=2)
        nll = np.array([r.get("nll", np.nan) if r.get("status") != "failed" else np.nan for r in res])
        t = np.array([r.get("time", np.nan) for r in res])
        best = np.nanmin(nll)
        lines.append(f"| {name} | {ref:.4f} | {best:.4f} | {best - ref:+.4f} | {int(np.sum(nll <= ref + 0.1))}/50 | "
                     f"{sum(r.get('status') == 'converged' for r in res)} | {sum(r.get('status') == 'failed' for r in res)} | "
                     f"{np.nanmedian(t):.2f} | {wall:.0f} |")
        worst.append((name, best - ref))
    REFERENCE.write_text("\n".join(lines) + "\n")
    for name, gap in worst:
        assert gap <= 0.01, (name, gap)
