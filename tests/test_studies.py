"""Tests of odeinfer.studies.monte_carlo and StudyResult.

The statistical checks use the sample mean of normal data with known sigma, whose
sampling distribution is known exactly: N(mu, sigma^2 / n). Hand-computed values
are worked out in the comments.
"""

import csv
import math
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from odeinfer.errors import OdeinferWarning, StudyError
from odeinfer.studies import StudyResult, monte_carlo

MU, SIGMA, N = 1.5, 2.0, 16
SE = SIGMA / math.sqrt(N)  # 0.5, exact standard error of the sample mean


@dataclass(frozen=True)
class Result:
    params: Any
    bse: Any
    converged: bool


# Module-level functions so that spawned worker processes can import them.
def simulate(rng):
    return rng.normal(MU, SIGMA, size=N), {"mu": MU}


def sample_mean(x):
    return Result({"mu": float(np.mean(x))}, {"mu": SE}, True)


def sample_mean_series(x):
    """pandas Series params, estimated sd, and an extra nuisance parameter."""
    s = float(np.std(x, ddof=1))
    return Result(pd.Series({"mu": float(np.mean(x)), "sigma": s}), pd.Series({"mu": s / math.sqrt(len(x))}), True)


def no_bse(x):
    return Result({"mu": float(np.median(x))}, None, True)


def none_entries(x):
    return Result({"mu": float(np.mean(x)), "sigma": None}, {"mu": None}, False)


def always_fails(x):
    raise ValueError("boom")


def fails_sometimes(x):
    if x[0] > MU:
        raise FloatingPointError("diverged")
    return Result({"mu": float(np.mean(x))}, {"mu": SE}, x[1] > MU - 3 * SIGMA)


def crash(x):
    os._exit(3)  # kills the worker process, as a segfault in compiled code would


def bad_simulate(rng):
    return rng.normal(size=3)  # not a (data, truth) tuple


def test_sample_mean_coverage_bias_and_sd():
    res = monte_carlo(simulate, {"mean": sample_mean}, 400, rng=20240601, progress=False)
    s = res.summary()
    row = s.iloc[0]
    assert (row["estimator"], row["param"], row["n"], row["n_converged"]) == ("mean", "mu", 400, 400)
    binomial_se = math.sqrt(0.95 * 0.05 / 400)  # 0.0109
    assert abs(row["coverage"] - 0.95) <= 3 * binomial_se
    assert abs(row["bias"]) <= 3 * SE / math.sqrt(400)  # exact MC SE of the mean: 0.025
    # sd of the estimates ~ SE; sd of a sample sd is about SE / sqrt(2 (n - 1)) = 0.0177
    assert abs(row["sd"] - SE) <= 3 * SE / math.sqrt(2 * 399)
    assert row["mean_stderr"] == pytest.approx(SE)
    assert row["truth"] == MU


def test_summary_agrees_with_frame_recomputed_by_hand():
    res = monte_carlo(simulate, {"mean": sample_mean}, 60, rng=7, progress=False)
    f = res.frame
    err = f["estimate"].to_numpy() - MU
    z = 1.959963984540054  # 97.5% normal quantile (tables)
    s = res.summary().iloc[0]
    assert s["bias"] == pytest.approx(err.mean())
    assert s["mse"] == pytest.approx(np.mean(err**2))
    assert s["sd"] == pytest.approx(np.sqrt(np.sum((err - err.mean()) ** 2) / 59))
    cov = np.mean(np.abs(err) <= z * SE)
    assert s["coverage"] == pytest.approx(cov)
    assert s["coverage_mcse"] == pytest.approx(math.sqrt(cov * (1 - cov) / 60))


def test_summary_on_hand_made_frame():
    # errors of the 5 usable rows (truth 2): -1, 0, 1, 4, 0; row 6 did not converge
    frame = pd.DataFrame({
        "rep": [0, 1, 2, 3, 4, 5],
        "estimator": ["e"] * 6,
        "param": ["p"] * 6,
        "truth": [2.0] * 6,
        "estimate": [1.0, 2.0, 3.0, 6.0, 2.0, 100.0],
        "stderr": [1.0, 1.0, 1.0, 1.0, np.nan, 1.0],
        "converged": [True, True, True, True, True, False],
        "time": [0.0] * 6,
        "error": [None] * 6,
    })
    s = StudyResult(frame).summary().iloc[0]
    assert (s["n"], s["n_converged"]) == (6, 5)
    assert s["mean"] == pytest.approx(2.8)  # (1 + 2 + 3 + 6 + 2) / 5
    assert s["bias"] == pytest.approx(0.8)  # (-1 + 0 + 1 + 4 + 0) / 5
    assert s["mse"] == pytest.approx(3.6)  # (1 + 0 + 1 + 16 + 0) / 5
    assert s["sd"] == pytest.approx(math.sqrt(3.7))  # squared deviations 3.24+.64+.04+10.24+.64 = 14.8, /4
    assert s["bias_mcse"] == pytest.approx(math.sqrt(3.7) / math.sqrt(5))
    assert s["mean_stderr"] == pytest.approx(1.0)
    assert s["sd_ratio"] == pytest.approx(1 / math.sqrt(3.7))
    # coverage over the 4 rows with a stderr: |err| <= 1.96 for -1, 0, 1; not for 4
    assert s["coverage"] == pytest.approx(0.75)
    assert s["coverage_mcse"] == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    # alpha = 0.5: z = 0.6745, only err = 0 is covered
    assert StudyResult(frame).summary(alpha=0.5).iloc[0]["coverage"] == pytest.approx(0.25)


def test_frame_layout_series_params_and_missing_bse():
    res = monte_carlo(simulate, {"s": sample_mean_series, "median": no_bse}, 5, rng=3, progress=False)
    f = res.frame
    assert list(f.columns) == ["rep", "estimator", "param", "truth", "estimate", "stderr", "converged",
                               "time", "error"]
    # per rep: s/mu, s/sigma (no truth), median/mu
    assert len(f) == 5 * 3
    assert f["param"].tolist()[:3] == ["mu", "sigma", "mu"]
    assert f["rep"].tolist() == sorted(f["rep"].tolist())
    sig = f[f["param"] == "sigma"]
    assert sig["truth"].isna().all() and sig["stderr"].isna().all()
    assert f[f["estimator"] == "median"]["stderr"].isna().all()
    assert f["error"].isna().all() and (f["time"] >= 0).all()
    assert res.estimators == ("s", "median") and res.n_rep == 5


def test_none_entries_count_as_nan():
    f = monte_carlo(simulate, {"n": none_entries}, 2, rng=0, progress=False).frame
    assert f["param"].tolist() == ["mu", "sigma", "mu", "sigma"]
    assert f["estimate"].notna().tolist() == [True, False, True, False]
    assert f["stderr"].isna().all() and not f["converged"].any() and f["error"].isna().all()


def test_reproducible_and_independent_of_n_jobs():
    ests = {"mean": sample_mean, "flaky": fails_sometimes}
    one = monte_carlo(simulate, ests, 24, rng=11, n_jobs=1, progress=False).frame.drop(columns="time")
    two = monte_carlo(simulate, ests, 24, rng=11, n_jobs=2, progress=False).frame.drop(columns="time")
    pd.testing.assert_frame_equal(one, two)
    again = monte_carlo(simulate, ests, 24, rng=np.random.SeedSequence(11), progress=False)
    pd.testing.assert_frame_equal(one, again.frame.drop(columns="time"))
    other = monte_carlo(simulate, ests, 24, rng=12, progress=False).frame
    assert not np.allclose(one["estimate"].to_numpy(), other["estimate"].to_numpy(), equal_nan=True)


def test_generator_rng_is_consumed_and_seed_repeats_the_study():
    gen = np.random.default_rng(5)
    a = monte_carlo(simulate, {"mean": sample_mean}, 10, rng=gen, progress=False)
    b = monte_carlo(simulate, {"mean": sample_mean}, 10, rng=gen, progress=False)
    assert not np.array_equal(a.frame["estimate"], b.frame["estimate"])
    again = monte_carlo(simulate, {"mean": sample_mean}, 10, rng=a.seed, progress=False)
    assert np.array_equal(a.frame["estimate"], again.frame["estimate"])


def test_seed_sequence_is_not_modified():
    ss = np.random.SeedSequence(99)
    monte_carlo(simulate, {"mean": sample_mean}, 3, rng=ss, progress=False)
    assert ss.n_children_spawned == 0


def test_failing_estimator_is_recorded_not_raised():
    with pytest.warns(OdeinferWarning, match=r"estimator 'bad' raised in every replication, e.g. ValueError: boom"):
        res = monte_carlo(simulate, {"mean": sample_mean, "bad": always_fails, "flaky": fails_sometimes},
                          30, rng=1, progress=False)
    f = res.frame
    bad = f[f["estimator"] == "bad"]
    assert len(bad) == 30
    assert bad["estimate"].isna().all() and (~bad["converged"]).all()
    assert (bad["error"] == "ValueError: boom").all()
    flaky = f[f["estimator"] == "flaky"]
    failed = flaky["error"].notna()
    assert 0 < failed.sum() < 30
    assert (flaky.loc[failed, "error"] == "FloatingPointError: diverged").all()
    assert flaky.loc[failed, "estimate"].isna().all()
    s = res.summary().set_index("estimator")
    assert s.loc["bad", "n_converged"] == 0 and np.isnan(s.loc["bad", "bias"])
    assert s.loc["flaky", "n_converged"] == int((flaky["converged"]).sum()) < 30
    assert s.loc["mean", "n_converged"] == 30


@pytest.mark.parametrize(
    "args, kw, match",
    [
        ((simulate, {"mean": sample_mean}, 0), {}, r"`n_rep` must be an int >= 1; received 0"),
        ((simulate, {"mean": sample_mean}, 2.5), {}, r"`n_rep` must be an int >= 1; received 2.5"),
        ((simulate, {"mean": sample_mean}, True), {}, r"`n_rep` must be an int >= 1; received True"),
        ((simulate, [sample_mean], 3), {}, r"`estimators` must be a non-empty dict .* received list"),
        ((simulate, {}, 3), {}, r"`estimators` must be a non-empty dict .* received an empty dict"),
        ((simulate, {"mean": 3}, 3), {}, r"`estimators\['mean'\]` must be callable\(data\)"),
        ((simulate, {1: sample_mean}, 3), {}, r"`estimators` keys must be non-empty str names; received 1"),
        (("simulate", {"mean": sample_mean}, 3), {}, r"`simulate_fn` must be callable"),
        ((simulate, {"mean": sample_mean}, 3), {"n_jobs": 0}, r"`n_jobs` must be an int >= 1, or -1"),
        ((simulate, {"mean": sample_mean}, 3), {"rng": None}, r"`rng` must be a non-negative int seed"),
        ((simulate, {"mean": sample_mean}, 3), {"rng": -4}, r"`rng` must be .* received -4"),
        ((simulate, {"mean": lambda x: x}, 3), {"n_jobs": 2},
         r"`estimators\['mean'\]` cannot be sent to worker processes with n_jobs > 1: it cannot be pickled"),
        ((bad_simulate, {"mean": sample_mean}, 3), {},
         r"simulate_fn failed in replication 0: TypeError: simulate_fn\(rng\) must return a tuple"),
        ((simulate, {"mean": sample_mean}, 3), {"chunk_size": 0},
         r"`chunk_size` must be None or an int >= 1 \(replications per task\); received 0"),
        ((simulate, {"mean": sample_mean}, 3), {"chunk_size": 2.0},
         r"`chunk_size` must be None or an int >= 1 .* received 2.0"),
    ],
)
def test_bad_inputs(args, kw, match):
    kw = {"rng": 0, "progress": False, **kw}
    with pytest.raises(StudyError, match=match):
        monte_carlo(*args, **kw)


def test_study_error_is_a_value_error():
    with pytest.raises(ValueError, match="n_rep"):
        monte_carlo(simulate, {"mean": sample_mean}, -1, rng=0, progress=False)


def test_simulation_failure_in_worker_process():
    with pytest.raises(StudyError, match=r"simulate_fn failed in replication \d+"):
        monte_carlo(bad_simulate, {"mean": sample_mean}, 4, rng=0, n_jobs=2, progress=False)


def test_broken_worker_process_is_a_study_error():
    with pytest.raises(StudyError, match=r"a worker process failed \(BrokenProcessPool.*importable \.py module"):
        monte_carlo(simulate, {"crash": crash}, 4, rng=0, n_jobs=2, progress=False)


def test_notebook_functions_rejected_for_workers(monkeypatch):
    def in_notebook(x):
        return sample_mean(x)

    in_notebook.__module__ = "__main__"
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # no __file__, as in Jupyter
    with pytest.raises(StudyError, match=r"`estimators\['nb'\]` cannot be sent .* interactive session or notebook"):
        monte_carlo(simulate, {"nb": in_notebook}, 2, rng=0, n_jobs=2, progress=False)
    res = monte_carlo(simulate, {"nb": in_notebook}, 2, rng=0, n_jobs=1, progress=False)
    assert res.frame["converged"].all()


def test_summary_rejects_bad_alpha():
    res = monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, progress=False)
    with pytest.raises(StudyError, match=r"`alpha` must be a number in \(0, 1\); received 1.5"):
        res.summary(alpha=1.5)


def test_result_is_immutable_and_frame_is_a_copy():
    res = monte_carlo(simulate, {"mean": sample_mean}, 4, rng=0, progress=False)
    f = res.frame
    f.loc[0, "estimate"] = 1e9
    assert res.frame.loc[0, "estimate"] != 1e9
    with pytest.raises(AttributeError, match="immutable"):
        res.seed = None
    with pytest.raises(StudyError, match=r"`frame` lacks column\(s\) \['error'\]"):
        StudyResult(f.drop(columns="error"))
    with pytest.raises(StudyError, match=r"`frame` must be a pandas DataFrame"):
        StudyResult({"rep": [0]})


def test_to_csv_round_trip(tmp_path):
    with pytest.warns(OdeinferWarning, match="'bad' raised in every replication"):
        res = monte_carlo(simulate, {"mean": sample_mean, "bad": always_fails}, 4, rng=0, progress=False)
    path = tmp_path / "study.csv"
    res.to_csv(path)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 8 and list(rows[0]) == list(res.frame.columns)
    assert float(rows[0]["estimate"]) == pytest.approx(res.frame["estimate"].iloc[0])
    assert rows[1]["error"] == "ValueError: boom" and rows[0]["error"] == ""
    back = StudyResult(pd.read_csv(path))
    pd.testing.assert_frame_equal(back.summary(), res.summary())


def test_progress_bar_runs(capsys):
    res = monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, progress=True)
    assert len(res.frame) == 3
    assert "monte_carlo" in capsys.readouterr().err


def test_chunk_size_does_not_change_results():
    ests = {"mean": sample_mean, "flaky": fails_sometimes}
    one = monte_carlo(simulate, ests, 10, rng=4, progress=False).frame.drop(columns="time")
    chunked = monte_carlo(simulate, ests, 10, rng=4, n_jobs=2, chunk_size=3, progress=False)
    pd.testing.assert_frame_equal(one, chunked.frame.drop(columns="time"), check_exact=True)


def test_client_without_dask_installed_is_a_study_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # makes `import distributed` fail
    with pytest.raises(StudyError, match=r"`client` needs dask.distributed, which is not installed \(received "
                                         r"str\)\. Install it with pip install 'odeinfer\[dask\]'"):
        monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, client="tcp://scheduler:8786", progress=False)


def test_dask_is_not_imported_without_a_client():
    import subprocess

    code = (
        "import sys, numpy as np\n"
        "from types import SimpleNamespace\n"
        "from odeinfer.studies import monte_carlo\n"
        "def sim(rng): return rng.normal(size=4), {'mu': 0.0}\n"
        "def est(x): return SimpleNamespace(params={'mu': x.mean()}, bse=None, converged=True)\n"
        "monte_carlo(sim, {'m': est}, 3, rng=0, progress=False)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
