"""The coverage panel (odeinfer.studies.coverage; issue 16, item 2): its bookkeeping, a reduced run of a
few cells in the default suite, and the agreement of the CoverageWarning figures with the panel's.

The full panel is one command (``python -m odeinfer.studies coverage --write tests/reference/coverage.md``;
see that file for what ran). The reduced cells here use fresh replicates of the panel's own settings;
their tolerances are fixed in advance from the binomial standard error at the replicate count R:
a cell the panel expects to cover must lie within 0.95 +- (0.03 + 3 sqrt(0.95 * 0.05 / R)), the
panel's band widened by three Monte Carlo standard errors.
"""

import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from odeinfer.errors import StudyError
from odeinfer.estimators._coverage import RECORDED
from odeinfer.studies import coverage as cv

REFERENCE = Path(__file__).parent / "reference" / "coverage.md"


def _tol(R):
    return cv.BAND + 3 * math.sqrt(cv.TARGET * (1 - cv.TARGET) / R)


# -- bookkeeping (hand-made frames) --------------------------------------------------------------
def _frame(rows):
    cols = ["rep", "estimator", "param", "truth", "estimate", "stderr", "converged", "error", "time"]
    return pd.DataFrame(rows, columns=cols)


def test_failed_fits_and_missing_intervals_are_misses_and_counted():
    """Four replicates of one parameter (truth 1): rep 0 covered ([0.5, 1.5]), rep 1 missed ([1.2, 2]),
    rep 2 failed (raised), rep 3 converged without an interval (NaN ends). Coverage 1/4, SE
    sqrt(0.25 * 0.75 / 4) = 0.2165; mean width over the two finite intervals (1 + 0.8) / 2 = 0.9;
    joint: rep 0 in, rep 1 out, rep 3 NaN (a converged fit with an undefined region) -> 1/4."""
    rows = []
    for rep, (est, lo, hi, joint, err) in enumerate([(1.0, 0.5, 1.5, 1.0, None), (1.6, 1.2, 2.0, 0.0, None),
                                                     (np.nan, np.nan, np.nan, np.nan, "ValueError: x"),
                                                     (1.1, np.nan, np.nan, np.nan, None)]):
        rows.append((rep, "E", "k", 1.0, est, 0.1, err is None, err, 0.0))
        if err is None:
            rows += [(rep, "E", "k|wald|lo", np.nan, lo, np.nan, True, None, 0.0),
                     (rep, "E", "k|wald|hi", np.nan, hi, np.nan, True, None, 0.0),
                     (rep, "E", "|wald|joint", np.nan, joint, np.nan, True, None, 0.0),
                     (rep, "E", "|wald|avail", np.nan, 1.0, np.nan, True, None, 0.0)]
    s = cv.summarise(_frame(rows), ("wald",))["wald"]
    assert s["R"] == 4 and s["failed"] == 1 and s["no_interval"] == 1
    assert s["params"]["k"]["coverage"] == 0.25
    assert s["params"]["k"]["se"] == pytest.approx(math.sqrt(0.25 * 0.75 / 4), rel=1e-12)
    assert s["params"]["k"]["width"] == pytest.approx(0.9, rel=1e-12)
    assert s["joint"]["coverage"] == 0.25 and s["joint"]["undefined"] == 1


def test_unconverged_fit_is_a_failed_fit():
    rows = [(0, "E", "k", 1.0, 1.0, 0.1, False, None, 0.0),
            (0, "E", "k|wald|lo", np.nan, 0.5, np.nan, False, None, 0.0),
            (0, "E", "k|wald|hi", np.nan, 1.5, np.nan, False, None, 0.0),
            (0, "E", "|wald|avail", np.nan, 1.0, np.nan, False, None, 0.0),
            (0, "E", "|wald|joint", np.nan, 1.0, np.nan, False, None, 0.0)]
    s = cv.summarise(_frame(rows), ("wald",))["wald"]
    assert s["failed"] == 1 and s["params"]["k"]["coverage"] == 0.0


def test_a_method_the_estimator_does_not_offer_is_not_a_row():
    rows = [(0, "E", "k", 1.0, 1.0, 0.1, True, None, 0.0),
            (0, "E", "|profile|avail", np.nan, 0.0, np.nan, True, None, 0.0)]
    assert cv.summarise(_frame(rows), ("profile",))["profile"] is None


def test_verdict_band_is_widened_by_two_standard_errors():
    """R = 500: tolerance 0.03 + 2 sqrt(0.0475 / 500) = 0.049494; 0.901 is met, 0.900 and 0.9995 not."""
    def row(c):
        return {"R": 500, "params": {"a": {"coverage": c}}, "joint": None}
    assert cv.verdict(row(0.901)) == "met"
    assert cv.verdict(row(0.900)) == "not met"
    assert cv.verdict(row(0.9995)) == "not met"
    assert cv.verdict({"R": 500, "params": {"a": {"coverage": 0.95}}, "joint": {"coverage": 0.85}}) == "not met"


def test_applicability_is_the_estimators_own_refusals():
    s = cv.SETTINGS
    assert cv.applies(s["sir_log"], "NewtonRaphson").startswith("log-normal noise")
    assert cv.applies(s["sir_log"], "OrthogonalConditions") == "needs every state observed"
    assert cv.applies(s["pinene_n200_s3"], "AdjointDDE").startswith("ODE model")
    assert cv.applies(s["ded_n101"], "AdjointDDE") is None
    assert cv.applies(s["pinene_n200_s8"], "NewtonRaphson") is None


def test_bad_cell_is_refused_before_any_work():
    with pytest.raises(StudyError, match=r"setting: 'nope' is not in the panel; choose from \["):
        cv.run_cell("nope", "Embedding", "wald", 25)
    with pytest.raises(StudyError, match=r"group: 'x'; choose from \['bootstrap', 'profile', 'wald'\]"):
        cv.run_cell("lv_n21", "Embedding", "x", 25)


def test_cli_refuses_an_unknown_setting(capsys):
    from odeinfer.studies.__main__ import main

    with pytest.raises(SystemExit):
        main(["coverage", "--settings", "pinene_n200_s3,nope", "--report-only"])
    assert "unknown ['nope']" in capsys.readouterr().err


# -- reduced panel (default suite) ---------------------------------------------------------------
def test_blocks_are_cached_and_the_same_on_an_executor(tmp_path, monkeypatch):
    """One block of the cheapest cell: run on a thread pool, cached; read back without running, equal
    to a local run bit for bit (the replicates are seeded per block, not per worker)."""
    local, _ = cv.run_cell("pinene_n50_s3", "Embedding", "wald", 25, progress=False)
    with ThreadPoolExecutor(2) as pool:
        first, code = cv.run_cell("pinene_n50_s3", "Embedding", "wald", 25, cache_dir=tmp_path, executor=pool,
                                  progress=False)
    assert len(list(tmp_path.glob(f"coverage_pinene_n50_s3_Embedding_wald_blk0_{code}.csv"))) == 1

    def boom(*a, **k):
        raise AssertionError("the cache was not used")

    monkeypatch.setattr("odeinfer.studies.montecarlo.monte_carlo", boom)
    again, _ = cv.run_cell("pinene_n50_s3", "Embedding", "wald", 25, cache_dir=tmp_path, progress=False)
    cols = ["rep", "param", "estimate"]
    pd.testing.assert_frame_equal(again[cols], first[cols], check_dtype=False)
    pd.testing.assert_frame_equal(local[cols].reset_index(drop=True), first[cols].reset_index(drop=True))


R_WALD = 100


@pytest.mark.parametrize("setting", ["pinene_n200_s3", "sir_log"])
def test_reduced_panel_embedding_wald_covers(setting):
    """alpha-pinene (n = 200, sigma = 3) and SIR (log noise), Embedding, Wald, R = 100 replicates (blocks
    0-3 of the panel's seed, recomputed): every per-parameter and the joint coverage within
    0.95 +- (0.03 + 3 sqrt(0.0475 / 100)) = +-0.095 (the panel, at R = 500, has both cells met).
    About 3 s and 1 s warm on an idle core."""
    frame, _ = cv.run_cell(setting, "Embedding", "wald", R_WALD, progress=False)
    s = cv.summarise(frame, ("wald",))["wald"]
    figs = [v["coverage"] for v in s["params"].values()] + [s["joint"]["coverage"]]
    assert s["R"] == R_WALD
    assert all(abs(c - 0.95) <= _tol(R_WALD) for c in figs), s


R_BOOT, B_BOOT = 25, 40


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="measured: the bootstrap intervals under-cover at n = 50 (see docstring)")
def test_reduced_panel_embedding_bootstrap_covers():
    """alpha-pinene (n = 50, sigma = 3: the cheapest fits), Embedding, parametric bootstrap (percentile
    and studentized, B = 40 refits), R = 25: each per-parameter and joint coverage within
    0.95 +- (0.03 + 3 sqrt(0.0475 / 25)) = +-0.161 (at B = 40 the 2.5% quantile is itself noisy; the
    tolerance only bounds the replicate count's error).

    FAILED when first run (so it is a strict xfail: it fails the suite the day it passes): percentile
    0.92 0.88 0.88 0.80 0.80 (theta1..theta5), joint 0.88; studentized 0.88 0.84 0.80 0.72 0.60, joint
    0.92 (theta5 below 0.789). The estimates of theta4, theta5 are skewed at n = 50 and the intervals
    built around them inherit it. About 70 s on a loaded machine: ``slow``."""
    frame, _ = cv.run_cell("pinene_n50_s3", "Embedding", "bootstrap", R_BOOT, n_boot=B_BOOT, progress=False)
    out = cv.summarise(frame, cv.GROUPS["bootstrap"])
    for m, s in out.items():
        figs = [v["coverage"] for v in s["params"].values()] + [s["joint"]["coverage"]]
        assert s["R"] == R_BOOT and s["no_interval"] == 0, (m, s)
        assert all(abs(c - 0.95) <= _tol(R_BOOT) for c in figs), (m, s)


# -- the CoverageWarning's figures against the panel's -------------------------------------------
def _panel_rows():
    rows = {}
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| alpha-pinene n = (\d+), sigma = ([\d.]+) \| (\w+) \| wald \| (\d+) \| (\d+)[^|]* \| ([^|]+) \|"
                     r" [^|]+ \| ([\d.]+) \(", line)
        if m:
            cov = [float(x) for x in re.findall(r"\w+ ([\d.]+) \(", m.group(6))]
            rows[(m.group(3), (int(m.group(1)), float(m.group(2))))] = (min(cov), max(cov), float(m.group(7)),
                                                                         int(m.group(4)))
    return rows


def test_coverage_warning_figures_agree_with_the_panel():
    """The CoverageWarning quotes tests/reference/matching_coverage.md (500 replicates). Where the panel
    measured the same configuration (the default OrthogonalConditions and GradientMatching, and
    Embedding, at sigma = 3, n = 200 and 400), the lowest and highest per-parameter and the joint
    coverage agree within 3 binomial standard errors of a difference of two coverages,
    3 sqrt(p (1 - p) (1 / R + 1 / 500)) with p the recorded figure (at least 0.05 * 0.95)."""
    rows = _panel_rows()
    checked = 0
    for name in ("OrthogonalConditions", "GradientMatching", "Embedding"):
        for setting, recorded in RECORDED[name].items():
            key = (name, setting)
            assert key in rows, f"the panel has no Wald row for {key}"
            *panel, R = rows[key]
            for a, b in zip(panel, recorded):
                p = max(b * (1 - b), 0.05 * 0.95)
                assert abs(a - b) <= 3 * math.sqrt(p * (1 / R + 1 / 500)), (key, panel, recorded)
            checked += 1
    assert checked == 6
