"""Wald coverage of the matching estimators (OrthogonalConditions, GradientMatching) on alpha-pinene,
and the CoverageWarning their estimates carry (issue 16, item 1).

Diagnosis (recorded in tests/reference/matching_coverage.md): the plug-in covariance
``V = M V_e M'`` already contains the proxy's own error (``V_e = sum_k D_k V(c_k) D_k'``, the
smoother's coefficient covariance propagated through the estimating equations), yet the 95% Wald
intervals under-cover at n = 200 and 400, sigma = 3: the estimates carry an errors-in-variables and
smoothing bias of 0.3-1 Monte Carlo SD that no first-order covariance sees, and the standard errors
are up to 20% short. Undersmoothing at the theory's rate is not available at these n (the window
``n^(1/6) << K << n^(1/4)`` of spec §3.4 is (2.4, 3.8) basis functions at n = 200), and the
undersmoothing that is (``undersmooth=3``) raises the errors-in-variables bias of theta2. So the
estimates carry a :class:`odeinfer.CoverageWarning` quoting the recorded coverage and naming
``oi.Embedding``, whose Wald intervals cover on the same data.

Full study (slow, regenerates the reference file, about 10 minutes on one core)::

    python -m pytest tests/test_matching_coverage.py -m slow -n 0 -s

``ODEINFER_COV_NREP`` sets the replicate count (default 500). Failed fits count as misses.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.estimators._coverage import (
    RECORDED,
    coverage_label,
    coverage_message,
    coverage_note,
)
from odeinfer.estimators.gradient_matching import GradientMatching
from odeinfer.estimators.orthogonal import OrthogonalConditions
from odeinfer.smooth import SplineSmoother

PINENE = oi.zoo.alpha_pinene()
REFERENCE = Path(__file__).parent / "reference" / "matching_coverage.md"
Z95 = 1.959963984540054


def _oc(**kw):
    return lambda d: OrthogonalConditions(**kw).fit(PINENE.model, d, x0=dict(PINENE.x0))


def _configs():
    return {
        "OrthogonalConditions": _oc(),
        "OrthogonalConditions bspline": _oc(test_functions="bspline"),
        "OrthogonalConditions second_order": _oc(correction="second_order"),
        "OrthogonalConditions bspline second_order": _oc(test_functions="bspline", correction="second_order"),
        "OrthogonalConditions bspline undersmooth 3 second_order": _oc(
            test_functions="bspline", correction="second_order", smoother=SplineSmoother(undersmooth=3.0)),
        "GradientMatching": lambda d: GradientMatching().fit(PINENE.model, d, x0=dict(PINENE.x0)),
        "Embedding": lambda d: oi.Embedding().fit(PINENE.model, d, x0=dict(PINENE.x0), start=dict(PINENE.params)),
    }


def _datasets(n, sigma, reps, seed):
    t = np.linspace(0.0, 100.0, n + 1)[1:]
    y = np.asarray(oi.solve(oi.Problem(PINENE.model, t, x0=PINENE.x0, t0=0.0), PINENE.params,
                            solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y)
    rng = np.random.default_rng(seed)
    return [oi.Data(t, y + rng.normal(0.0, sigma, y.shape), PINENE.model.states, t0=0.0) for _ in range(reps)]


def _coverage(fit, datasets):
    """Per parameter: coverage (failed fits are misses), bias / SD, mean s.e. / SD, bias-re-centred
    coverage; joint chi2_5 ellipse coverage; number of failed fits."""
    from scipy.stats import chi2

    truth = PINENE.params_array()
    R, p = len(datasets), truth.size
    err, se, d2 = np.full((R, p), np.nan), np.full((R, p), np.nan), np.full(R, np.nan)
    for r, d in enumerate(datasets):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                e = fit(d)
            if e.converged:
                err[r] = np.asarray(e.values, float) - truth
                se[r] = np.sqrt(np.diag(e.cov))
                d2[r] = err[r] @ np.linalg.solve(e.cov, err[r])
        except Exception:
            pass
    ok = np.all(np.isfinite(err) & np.isfinite(se), axis=1) & np.isfinite(d2)
    sd, bias = np.std(err[ok], 0, ddof=1), np.mean(err[ok], 0)
    inside = np.zeros((R, p), bool)
    inside[ok] = np.abs(err[ok]) <= Z95 * se[ok]
    centred = np.zeros((R, p), bool)
    centred[ok] = np.abs(err[ok] - bias) <= Z95 * se[ok]
    return dict(coverage=inside.mean(0), centred=centred.mean(0), bias_sd=bias / sd,
                se_sd=np.mean(se[ok], 0) / sd, ellipse=float(np.mean(ok & (d2 <= chi2.ppf(0.95, p)))),
                failed=int(np.sum(~ok)), reps=R)


# -- the warning -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pinene_data():
    return _datasets(200, 3.0, 1, 7)[0]


@pytest.mark.parametrize("est", [OrthogonalConditions(), GradientMatching()], ids=["OC", "GM"])
def test_matching_estimate_carries_coverage_warning(est, pinene_data):
    name = type(est).__name__
    lo, hi, _ = RECORDED[coverage_label(name)][(200, 3.0)]
    with pytest.warns(oi.CoverageWarning, match=rf"{name}: the 95% Wald.*covered n = 200: {lo:.2f}-{hi:.2f}.*oi\.Embedding"):
        e = est.fit(PINENE.model, pinene_data, x0=dict(PINENE.x0))
    assert any("oi.Embedding" in w and "under-cover" in w for w in e.warnings), e.warnings
    assert issubclass(oi.CoverageWarning, oi.errors.OdeinferWarning)


def test_coverage_message_names_recorded_study():
    msg = coverage_message(coverage_label("OrthogonalConditions"))
    assert "tests/reference/matching_coverage.md" in msg and "alpha-pinene" in msg
    assert "correction='second_order'" in msg
    with pytest.raises(KeyError):
        coverage_message("Embedding")


def test_second_order_correction_applied_and_still_warned(pinene_data):
    """bspline tests + undersmooth 3 + second-order correction: the correction is applied (extras) and
    moves the estimate by the reported bias, the covariance grows by a PSD term, and the estimate still
    carries the warning with its own recorded figures (0.898-0.962 at n = 200: not within 0.95 +- 0.03)."""
    sm = SplineSmoother(undersmooth=3.0)
    plain = OrthogonalConditions(test_functions="bspline", L=8, smoother=sm)
    corr = OrthogonalConditions(test_functions="bspline", L=8, correction="second_order", smoother=sm)
    label = coverage_label("OrthogonalConditions", "bspline", "second_order", 3.0)
    lo, hi, _ = RECORDED[label][(200, 3.0)]
    with pytest.warns(oi.CoverageWarning, match=rf"{label}: the 95% Wald.*covered n = 200: {lo:.2f}-{hi:.2f}"):
        e = corr.fit(PINENE.model, pinene_data, x0=dict(PINENE.x0))
    with pytest.warns(oi.CoverageWarning):
        e0 = plain.fit(PINENE.model, pinene_data, x0=dict(PINENE.x0))
    so = e.extras["second_order"]
    assert so["applied"] and 0 < so["ratio"] <= 1
    bias = np.array([so["bias"][k] for k in e.names])
    np.testing.assert_allclose(e.values, e0.values - bias, rtol=1e-12, atol=1e-15)
    V2 = np.asarray(e.cov) - np.asarray(e0.cov)
    assert np.all(np.linalg.eigvalsh(V2) >= -1e-12 * np.abs(V2).max())  # a variance: PSD


def test_second_order_fallback_when_expansion_unreliable():
    """A high-noise dataset (n = 100, sigma = 8, seed 1) whose second-order variance exceeds the
    first-order one: the estimate is the uncorrected one, its covariance includes the second-order
    term, and the warning says the correction was not applied, with the ratio."""
    d = _datasets(100, 8.0, 1, 1)[0]
    kw = dict(test_functions="bspline", L=8)
    with pytest.warns(oi.CoverageWarning, match=r"correction='second_order' was not applied: the second-order "
                                                r"variance is [\d.]+ times the first-order one"):
        e = OrthogonalConditions(correction="second_order", **kw).fit(PINENE.model, d, x0=dict(PINENE.x0))
    with pytest.warns(oi.CoverageWarning):
        e0 = OrthogonalConditions(**kw).fit(PINENE.model, d, x0=dict(PINENE.x0))
    so = e.extras["second_order"]
    assert so["ratio"] > 1 and not so["applied"]
    np.testing.assert_array_equal(e.values, e0.values)
    assert np.max(np.diag(np.asarray(e.cov)) / np.diag(np.asarray(e0.cov))) == pytest.approx(1 + so["ratio"])


def test_second_order_bias_vanishes_without_noise():
    """Independent reference: with noise sd 1e-4 the errors-in-variables bias (O(sigma^2)) is negligible
    against the first-order s.e. (O(sigma))."""
    d = _datasets(200, 1e-4, 1, 3)[0]
    e = OrthogonalConditions(test_functions="bspline", L=8, correction="second_order").fit(
        PINENE.model, d, x0=dict(PINENE.x0))
    b = np.array([e.extras["second_order"]["bias"][k] for k in e.names])
    assert np.all(np.abs(b) < 1e-2 * e.bse.to_numpy()), (b, e.bse)


def test_second_order_refuses_models_it_does_not_cover():
    lv = oi.zoo.lotka_volterra()
    d, _ = oi.simulate(lv.model, lv.params, lv.x0, np.linspace(0, 10, 41)[1:], t0=0.0, noise=0.1, rng=1)
    with pytest.raises(oi.errors.ModelDefinitionError, match=r"correction: 'second_order'.*not affine in the states"):
        OrthogonalConditions(correction="second_order").fit(lv.model, d, start=dict(lv.params))
    with pytest.raises(oi.errors.InputError, match=r"correction: expected 'none' or 'second_order', got 'x'"):
        OrthogonalConditions(correction="x")
    with pytest.raises(oi.errors.InputError, match=r"correction: 'second_order' needs weighting='identity'"):
        OrthogonalConditions(correction="second_order", weighting="optimal")


def test_recorded_figures_match_reference_file():
    """The figures the warning quotes are the ones in tests/reference/matching_coverage.md (the rows
    ``| estimator | (n, sigma) | coverage ... | ellipse |`` written by the slow study)."""
    rows = {}
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| (\w[\w ]*?) \| \((\d+), ([\d.]+)\) \| ([\d. ]+) \| ([\d.]+) \|", line)
        if m:
            cov = [float(x) for x in m.group(4).split()]
            rows[(m.group(1), (int(m.group(2)), float(m.group(3))))] = (min(cov), max(cov), float(m.group(5)))
    for name, by_setting in RECORDED.items():
        for setting, figures in by_setting.items():
            assert rows[(name, setting)] == pytest.approx(figures, abs=5e-4), (name, setting)


# -- reduced coverage check (default suite) ------------------------------------------------------
R_REDUCED = {"OrthogonalConditions": 200, "GradientMatching": 100}
R_CORRECTED = 200


def test_reduced_coverage_second_order_improves_but_falls_short():
    """bspline tests + undersmooth 3 + correction='second_order' at (200, 3), 200 fresh replicates (seed
    1617); failed fits are misses. About 10 s warm.

    Written first as "every parameter within 0.95 +- 3 binomial s.e. (0.046)": that FAILED on this
    seed (0.945 0.965 0.975 0.900 0.910; theta4 below 0.904), and the recorded 500-replicate study
    agrees (theta4, theta5 0.904, 0.898). What is asserted now is what the warning says, with the
    rule of ``test_reduced_coverage_confirms_the_warning`` (fixed before this configuration's run):
    each coverage within the recorded range widened by 3 binomial s.e. of a difference of coverages;
    and that the correction does better than the uncorrected GCV/bspline configuration's recorded
    worst parameter (0.794)."""
    label = "OrthogonalConditions bspline undersmooth 3 second_order"
    o = _coverage(_configs()[label], _datasets(200, 3.0, R_CORRECTED, 1617))
    _within_recorded(o["coverage"], label, R_CORRECTED)
    assert np.min(o["coverage"]) > RECORDED["OrthogonalConditions bspline"][(200, 3.0)][0], o


def _within_recorded(cov, label, R):
    lo, hi, _ = RECORDED[label][(200, 3.0)]
    for c in cov:
        p = min(max(c, lo), hi)
        tol = 3 * math.sqrt(max(p * (1 - p), 0.05 * 0.95) * (1 / R + 1 / 500))
        assert lo - tol <= c <= hi + tol, (cov, lo, hi, tol)


@pytest.mark.parametrize("name", list(R_REDUCED))
def test_reduced_coverage_confirms_the_warning(name):
    """Fresh replicates at (200, 3) (seed 1616, not the recorded study's): (1) the coverage falls
    short, i.e. some parameter is below 0.95 - 3 binomial s.e. at R (0.904 at R = 200, 0.885 at
    R = 100), so the warning is warranted; (2) each parameter's coverage lies within the recorded
    range widened by 3 binomial s.e. of the difference of two coverages (R and 500 replicates).
    Failed fits are misses. About 8 s (OC, 200) and 3 s (GM, 100) warm."""
    R = R_REDUCED[name]
    o = _coverage(_configs()[name], _datasets(200, 3.0, R, 1616))
    cov = o["coverage"]
    assert np.min(cov) < 0.95 - 3 * math.sqrt(0.95 * 0.05 / R), cov
    _within_recorded(cov, name, R)


# -- full study (slow): regenerates tests/reference/matching_coverage.md -------------------------
SETTINGS = [(200, 3.0), (400, 3.0)]


@pytest.mark.slow
def test_full_coverage_study_writes_reference():
    """500 replicates per setting (``ODEINFER_COV_NREP``), seeds 160200 + n. Asserted, with 3 binomial
    s.e. at R: Embedding covers 0.95 per parameter (the method the warning recommends); the matching
    estimators fall short for some parameter (the warning is warranted). The table is written whatever
    the outcome is, before the assertions. (It also asserted first that bspline + undersmooth 3 +
    second-order correction covers 0.95 within 3 binomial s.e.; that failed at 500 replicates: theta4,
    theta5 0.904, 0.898 at n = 200, 0.922, 0.918 at n = 400. Asserted instead: a configuration is
    warned about (``coverage_note`` not None) exactly when some parameter is outside 0.95 +- 3 s.e.)"""
    import os

    from odeinfer._io import write_atomic

    R = int(os.environ.get("ODEINFER_COV_NREP", 500))
    tol = 3 * math.sqrt(0.95 * 0.05 / R)
    rows, results = [], {}
    for n, sigma in SETTINGS:
        data = _datasets(n, sigma, R, 160200 + n)
        for name, fit in _configs().items():
            o = results[(name, n)] = _coverage(fit, data)
            f = lambda v: " ".join(f"{x:.3f}" for x in v)
            rows.append(f"| {name} | ({n}, {sigma:g}) | {f(o['coverage'])} | {o['ellipse']:.3f} | {f(o['centred'])} "
                        f"| {f(o['bias_sd'])} | {f(o['se_sd'])} | {o['failed']} |")
            print(rows[-1])
    head = ("| estimator | (n, sigma) | 95% Wald coverage theta1..theta5 | ellipse (chi2_5) | bias-re-centred "
            "coverage | bias / MC SD | mean s.e. / MC SD | failed |\n|---|---|---|---|---|---|---|---|")
    text = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    begin, end = "<!-- study:begin -->", "<!-- study:end -->"
    block = f"{begin}\n{R} replicates per setting, odeinfer {oi.__version__}.\n\n{head}\n" + "\n".join(rows) + f"\n{end}"
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.DOTALL) if begin in text \
        else text + "\n" + block + "\n"
    write_atomic(text, REFERENCE)
    for n, _ in SETTINGS:
        assert np.all(np.abs(results[("Embedding", n)]["coverage"] - 0.95) <= tol), results[("Embedding", n)]
        for name in _configs():
            if name == "Embedding":
                continue
            off = bool(np.any(np.abs(results[(name, n)]["coverage"] - 0.95) > tol))
            est, *rest = name.split()
            us = 3.0 if "undersmooth" in rest else 1.0
            note = coverage_note(est, "bspline" if "bspline" in rest else "sine",
                                 "second_order" if "second_order" in rest else "none", undersmooth=us)
            assert (note is not None) or not off, (name, n, results[(name, n)])
