"""benchmarks/bench_pypesto.py times odeinfer's side by the local fits ``oi.Embedding``'s multistart runs.
Its runner once fell out of step with the estimator (an iteration budget of None, refused by every start)
and the comparison recorded odeinfer as failing every start in 0.0 s. Here the runner's results from 4
Perelson starts (cheap) must be the estimator's own, start by start: the same status and final NLL, and the
best start as the multistart reports it (continued by its polish). Needs neither pyPESTO nor AMICI."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import odeinfer as oi

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_pypesto.py"


def test_runner_fits_what_the_estimator_fits():
    spec = importlib.util.spec_from_file_location("bench_pypesto", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    pp = oi.petab.load(bench.yaml_of("Perelson_Science1996"))
    U, _ = bench.draw_starts(pp, 4, 0)
    one, finish, _ = bench.odeinfer_runner(pp)
    ours = [one(u) for u in U]
    obj = pp.objective()
    natural = np.array([obj.natural(u)[obj.est_index] for u in U])
    fit = oi.Embedding(starts=len(U)).fit(pp, start=natural)
    starts = fit.extras["starts"]
    assert [s.split(":")[0] for _, _, s in ours] == starts["status"]
    assert sum(np.isfinite(f) for f, _, _ in ours) >= 2  # the runner fits, it does not refuse every start
    for (f, _, _), nll in zip(ours, starts["nll"]):
        assert (np.isnan(f) and not np.isfinite(nll)) or abs(f - nll) <= 1e-8 * abs(nll), (f, nll)
    _, f_best, u_best, _, _, polished = finish()
    assert abs(f_best - fit.nll) <= 1e-8 * abs(fit.nll) and polished == fit.extras["polish"]
    np.testing.assert_allclose(u_best, fit.extras["u"], rtol=1e-12)


def test_speed_up_interval_over_the_starts():
    """The bootstrap interval of the speed-up per converged start, on cases whose every resample has one answer:
    pyPESTO 5x slower on each start with both converging everywhere (5x exactly); odeinfer never converging (0);
    pyPESTO never converging (unbounded). And a mixed case whose interval holds the one-run ratio."""
    spec = importlib.util.spec_from_file_location("bench_pypesto", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(1)
    t = rng.uniform(0.1, 2.0, 40)
    best, good, bad = 1.0, np.full(40, 1.0), np.full(40, 50.0)
    assert bench.speed_up_interval(good, t, good, 5 * t, best) == pytest.approx((5.0, 5.0), rel=1e-12)
    assert bench.speed_up_interval(bad, t, good, t, best) == (0.0, 0.0)
    assert bench.speed_up_interval(good, t, bad, t, best) == (np.inf, np.inf)
    f_o = np.where(np.arange(40) % 4 == 0, 1.0, 50.0)  # 10 of 40 converge for odeinfer, 5 of 40 for pyPESTO
    f_p = np.where(np.arange(40) % 8 == 0, 1.0, 50.0)
    lo, hi = bench.speed_up_interval(f_o, t, f_p, 3 * t, best)
    one_run = (3 * t.sum() / 5) / (t.sum() / 10)  # 6x
    assert lo < one_run < hi and one_run == pytest.approx(6.0)
