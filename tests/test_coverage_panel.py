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


# -- the block's writer: merging a block whose cache is gone (fake summaries, no fits) -------------------
def _cell(cov, R=25, n_boot=None):
    return {"R": R, "failed": 0, "no_interval": 0, "n_boot": n_boot,
            "params": {"a": {"coverage": cov, "se": 0.01, "width": 1.0, "median_width": 1.0, "infinite": 0}},
            "joint": {"coverage": cov, "se": 0.01, "undefined": 0}}


def _rows(block):
    return {tuple(line[2:-2].split(" | ")[:3]): line for line in block.splitlines()
            if line.startswith("| ") and not line.startswith("| setting")}


def _not_run(block, est, m):
    line = next((x for x in block.splitlines() if x.startswith(f"* {est}, {m}: ")), "")
    return line


def test_merge_keeps_the_previous_rows_and_names_each_rows_code_version():
    """A single-version block (version vA: two Embedding Wald cells, one met, one not) merged with a cache of
    version vB holding a NewtonRaphson cell and a rerun of one of the old cells: the old row of the cell not
    rerun is kept verbatim (code A), the rerun replaces the old row (code B), the count is over both and
    the cells run leave the "not run" lists."""
    lv, p50, p200 = (cv.SETTINGS[k].label for k in ("lv_n21", "pinene_n50_s3", "pinene_n200_s3"))
    old = cv.render({"pinene_n50_s3|Embedding|wald": _cell(0.95, 500), "lv_n21|Embedding|wald": _cell(0.80, 500)},
                    "vA")
    assert old.startswith("Code version: vA.") and "2 cells run: 1 met, 1 not met." in old
    new = cv.render({"pinene_n50_s3|NewtonRaphson|wald": _cell(0.94), "lv_n21|Embedding|wald": _cell(0.96, 100),
                     "pinene_n50_s3|Embedding|bootstrap-percentile": _cell(0.5, 50, n_boot=100)}, "vB", previous=old)
    before, after = _rows(old), _rows(new)
    assert new.startswith("Code versions (the last column of each row names the one that produced it):\n\n"
                          "* A: vA.\n* B: vB.\n")
    assert after[(p50, "Embedding", "wald")] == before[(p50, "Embedding", "wald")] + " A |"
    assert after[(lv, "Embedding", "wald")].startswith(f"| {lv} | Embedding | wald | 100 | 0 |")
    assert after[(lv, "Embedding", "wald")].endswith("| met | B |")
    assert after[(p50, "NewtonRaphson", "wald")].endswith("| met | B |")
    assert after[(p50, "Embedding", "bootstrap-percentile")].startswith(f"| {p50} | Embedding | bootstrap-percentile"
                                                                         f" | 50, B = 100 |")
    assert after[(p50, "Embedding", "bootstrap-percentile")].endswith("| not met | B |")
    assert "| verdict | code |\n|---|---|---|---|---|---|---|---|---|---|\n" in new
    assert "4 cells run: 3 met, 1 not met." in new
    assert p50 in _not_run(old, "NewtonRaphson", "wald") and p50 not in _not_run(new, "NewtonRaphson", "wald")
    assert p200 in _not_run(new, "NewtonRaphson", "wald")
    assert p50 not in _not_run(new, "Embedding", "bootstrap-percentile")
    assert lv not in _not_run(new, "Embedding", "wald")
    # merging again with nothing new (same version B) changes nothing; a version no row uses is dropped
    assert cv.render({}, "vB", previous=new) == new
    assert cv.render({}, "vC", previous=new) == new
    alone = cv.render({"pinene_n50_s3|Embedding|wald": _cell(0.9), "lv_n21|Embedding|wald": _cell(0.9)}, "vC",
                      previous=old)
    assert "* A: vA." not in alone and "* B: vC." in alone and "2 cells run" in alone


def test_a_new_code_version_never_takes_the_letter_of_a_kept_one():
    """Versions A, B, D in use (C's only row was rerun by D, so C was dropped): the next version is E, and the
    rows of D keep D's text (the letter after the last one in use; taking the count of versions, 3, gave "D"
    and relabelled D's rows with the new version)."""
    lv, p50 = (cv.SETTINGS[k].label for k in ("lv_n21", "pinene_n50_s3"))
    block = cv.render({"lv_n21|Embedding|wald": _cell(0.95)}, "vA")
    block = cv.render({"pinene_n50_s3|Embedding|wald": _cell(0.95)}, "vB", previous=block)
    block = cv.render({"pinene_n50_s3|NewtonRaphson|wald": _cell(0.5)}, "vC", previous=block)
    block = cv.render({"pinene_n50_s3|NewtonRaphson|wald": _cell(0.6)}, "vD", previous=block)
    assert "* C: vC." not in block and "* D: vD." in block
    block = cv.render({"lv_n21|OrthogonalConditions|wald": _cell(0.7)}, "vE", previous=block)
    assert "* A: vA.\n* B: vB.\n* D: vD.\n* E: vE." in block
    rows = _rows(block)
    assert rows[(p50, "NewtonRaphson", "wald")].endswith("| not met | D |")
    assert rows[(lv, "OrthogonalConditions", "wald")].endswith("| not met | E |")


def test_merge_refuses_a_previous_block_it_cannot_read():
    old = cv.render({"lv_n21|Embedding|wald": _cell(0.95)}, "vA", previous="")
    assert old.splitlines()[2] == "* A: vA."
    with pytest.raises(StudyError, match=r"names code version 'Z', which the block's version list \['A'\] lacks"):
        cv.render({}, "vB", previous=old.replace("| met | A |", "| met | Z |"))
    with pytest.raises(StudyError, match=r"are not cells of the grid .* the grid changed since it was written"):
        cv.render({}, "vB", previous=old.replace("| Embedding | wald |", "| Embedding | jackknife |"))
    with pytest.raises(StudyError, match=r"has 8 columns ending in 'met'; expected the 9 columns render\(\) writes"):
        cv.render({}, "vB", previous=old.replace("| met | A |", "| met |").replace("| 0.950 (0.010) | met", "| met"))


def test_cli_merge_needs_a_file_to_write(capsys):
    from odeinfer.studies.__main__ import main

    with pytest.raises(SystemExit):
        main(["coverage", "--report-only", "--merge"])
    assert "--merge needs --write" in capsys.readouterr().err


def test_the_recorded_block_survives_a_merge_unchanged():
    """The block of tests/reference/coverage.md merged with an empty cache: the same rows (each with its
    code version), the same count, the same "not run" lists."""
    old = cv.read_block(REFERENCE)
    again = cv.render({}, "no such version", previous=old)
    assert cv.parse_block(again)[1] == cv.parse_block(old)[1]
    tail = lambda b: b[b.index("cells run:") - 4:]  # noqa: E731
    assert tail(again) == tail(old)


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
