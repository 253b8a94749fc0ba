"""Monte Carlo replication of seed 001 (Brunel, Clairon & d'Alché-Buc), Tables 5.1-5.4.

Reduced checks (default suite, end of this file): the same studies at a few dozen to a few
hundred replications, one or two settings each, with tolerances from the binomial or Monte Carlo
standard error at that replication count (fixed in the test before the run).

Slow tests (``pytest -m slow tests/test_oc_studies.py -s``): every table is recomputed with
:func:`odeinfer.studies.monte_carlo`, printed as Markdown (``-s``) and compared with the
paper's printed values (independent reference: the paper's tables as transcribed in spec
seed-001 §5). The paper used 500 replications; ``ODEINFER_OC_NREP`` (default 100 for
alpha-pinene, 200 for Riccati) sets ours. The recorded run is in ``tests/reference/oc_tables.md``.

``ODEINFER_OC_CACHE=<dir>`` stores/reuses the per-setting study frames (CSV), keyed by
setting, seed, number of replications and the code (odeinfer's version and a hash of its
sources and of this file's simulator/estimator helpers, ``oi.studies.code_key``), so that a
failing assertion can be inspected without recomputing and a result of older code is never
re-asserted. Failed replications are counted (``n_failed`` in every printed line), never
dropped silently.

Settings that the paper does not give are project choices (spec §4): alpha-pinene
``theta* = (5.93, 2.96, 2.05, 27.5, 4.00)e-2`` on ``[0, 100]``, ``n`` equispaced times in
``(0, 100]``; Riccati ``T_r = 5``, ``d = 2``, ``n`` equispaced times in ``(0, 14]``.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.estimators.gradient_matching import GradientMatching
from odeinfer.estimators.orthogonal import OrthogonalConditions
from odeinfer.smooth import SplineSmoother


N_PINENE = int(os.environ.get("ODEINFER_OC_NREP", 100))
N_RICCATI = int(os.environ.get("ODEINFER_OC_NREP_RICCATI", 200))
SETTINGS_PINENE = [(400, 3.0), (400, 8.0), (200, 3.0), (200, 8.0), (50, 3.0), (50, 8.0)]
SETTINGS_RICCATI = [(400, 0.2), (400, 0.4), (200, 0.2), (200, 0.4), (50, 0.2), (50, 0.4)]

# Paper tables (units 1e-2), spec seed-001 §5, copied verbatim.
PAPER_5_1 = {  # (n, sigma): MSE TS, OC, OC0, NLS; TrV OC, OC0, NLS
    (400, 3.0): (0.72, 0.05, 0.04, 0.02, 0.04, 0.04, 0.02), (400, 8.0): (2.28, 0.22, 0.25, 0.10, 0.95, 1.20, 0.12),
    (200, 3.0): (1.19, 0.27, 0.30, 0.03, 0.09, 0.13, 0.03), (200, 8.0): (2.95, 0.44, 0.37, 0.18, 2.66, 2.68, 0.27),
    (50, 3.0): (2.39, 0.27, 0.26, 0.16, 1.37, 1.58, 0.16), (50, 8.0): (4.54, 1.03, 0.93, 0.68, 7.96, 7.27, 1.68)}
PAPER_5_2 = {  # MSE TS, OC, OC1, NLS; TrV OC, OC1, NLS
    (400, 3.0): (0.25, 0.11, 0.11, 0.07, 0.10, 0.10, 0.06), (400, 8.0): (1.07, 0.85, 0.56, 0.50, 1.06, 0.82, 0.61),
    (200, 3.0): (0.6, 0.37, 0.23, 0.14, 0.25, 0.20, 0.14), (200, 8.0): (1.64, 1.42, 0.83, 1.34, 2.36, 1.64, 1.54),
    (50, 3.0): (1.33, 1.31, 0.80, 0.69, 1.63, 1.02, 0.76), (50, 8.0): (3.64, 2.11, 1.79, 1.96, 5.34, 2.20, 4.38)}
PAPER_5_3 = {  # MSE TS, OC, NLS; TrV OC, NLS
    (400, 0.2): (0.18, 0.27, 0.58, 1.76, 0.10), (400, 0.4): (0.78, 1.21, 0.94, 2.56, 0.38),
    (200, 0.2): (0.33, 0.87, 0.57, 2.85, 0.25), (200, 0.4): (1.12, 2.69, 1.12, 5.64, 0.98),
    (50, 0.2): (1.03, 1.30, 1.54, 4.70, 1.00), (50, 0.4): (3.80, 4.43, 3.94, 8.89, 4.08)}
PAPER_5_4 = {  # MSE OC, "Tr(V)" OC (Part B; Part A row (50, 0.4) read as (50, 0.2), spec §5)
    (400, 0.2): (4.01, 3.97), (400, 0.4): (8.11, 8.02), (200, 0.2): (7.47, 7.35),
    (200, 0.4): (19.51, 18.94), (50, 0.2): (26.10, 5.14), (50, 0.4): (37.36, 9.49)}

PINENE = oi.zoo.alpha_pinene()
RICCATI = oi.zoo.riccati()


# -- simulation and estimators (top level: picklable) ------------------------------------------
class Simulate:
    """``simulate_fn(rng) -> (data, truth)``: exact trajectory plus Gaussian noise on every state."""

    def __init__(self, zoo, n, sigma, t_end):
        self.zoo, self.sigma = zoo, float(sigma)
        self.t = np.linspace(0.0, t_end, n + 1)[1:]
        self.y = np.asarray(oi.solve(oi.Problem(zoo.model, self.t, x0=zoo.x0, t0=zoo.t0), zoo.params,
                                     solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y)

    def __call__(self, rng):
        y = self.y + rng.normal(0.0, self.sigma, self.y.shape)
        return oi.Data(self.t, y, self.zoo.model.states, t0=self.zoo.t0), dict(self.zoo.params)


_PROXY = {}


def _proxy(smoother, data, x0):
    """One proxy per (dataset, smoother, constraint), shared by TS and the OC variants (as in the paper)."""
    key = (id(data), smoother, None if x0 is None else tuple(sorted(x0.items())))
    hit = _PROXY.get(key)
    if hit is None or hit[0] is not data:
        if len(_PROXY) > 8:
            _PROXY.clear()
        hit = _PROXY[key] = (data, smoother.fit(data, x0=x0))
    return hit[1]


class Fit:
    """``data -> result`` with params, bse, converged, plus ``_d2`` (Mahalanobis distance^2 of
    the truth under the plug-in covariance; ellipse coverage) and ``_L`` (chosen L)."""

    def __init__(self, est, zoo, *, x0=None, fixed=None, smoother=SplineSmoother()):
        self.est, self.zoo, self.x0, self.fixed, self.smoother = est, zoo, x0, fixed, smoother

    def __call__(self, data):
        pr = _proxy(self.smoother, data, self.x0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e = self.est.fit(self.zoo.model, data, x0=self.x0, fixed=self.fixed, proxy=pr)
        truth = np.array([self.zoo.params[n] for n in e.names])
        r = e.values - truth
        try:
            d2 = float(r @ np.linalg.solve(e.cov, r))
        except (np.linalg.LinAlgError, TypeError):
            d2 = math.nan
        params = dict(zip(e.names, e.values.tolist()))
        params["_d2"] = d2
        params["_L"] = float(e.extras.get("L", math.nan))
        return SimpleNamespace(params=params, bse=dict(zip(e.names, np.sqrt(np.diag(e.cov)).tolist())),
                               converged=e.converged)


def _code():
    """Cache key of the code behind the studies: odeinfer's version and sources, this file's helpers."""
    return oi.studies.code_key(oi, Simulate, Fit, _proxy, _pinene_estimators, _run_riccati)


def _study(key, simulate, estimators, n_rep, seed):
    def compute():
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            return oi.studies.monte_carlo(simulate, estimators, n_rep, rng=seed, progress=False).frame

    return oi.studies.cached_frame(os.environ.get("ODEINFER_OC_CACHE"), f"{key}_seed{seed}_rep{n_rep}", _code(),
                                   compute)


def _metrics(frame, names):
    """Per estimator: MSE, mean Tr(V), per-param bias/sd/mean se/coverage, ellipse coverage, L.

    Statistics are over the successful replications (``n`` of ``n_rep``); ``n_failed`` counts the
    replications that raised or gave a non-finite estimate and is reported with them. Coverage
    (per parameter and ellipse) is a coverage over successes: a failed fit covers nothing, so
    ``coverage_all`` also gives it over every replication (failures counted as misses)."""
    from scipy.stats import chi2

    out = {}
    for est in frame["estimator"].unique():
        r = oi.studies.replicates(frame, est, names)
        err, se = r.estimate - r.truth, r.stderr
        extra = frame[(frame["estimator"] == est) & frame["rep"].isin(r.reps)]
        d2 = extra[extra["param"] == "_d2"].set_index("rep")["estimate"].reindex(r.reps).to_numpy()
        Ls = extra[extra["param"] == "_L"]["estimate"].to_numpy()
        cover = np.abs(err) <= 1.959964 * se
        inside = np.isfinite(d2) & (d2 <= chi2.ppf(0.95, len(names)))
        out[est] = dict(
            n=r.n_ok, n_rep=r.n, n_failed=r.n_failed,
            mse=float(np.mean(np.sum(err**2, 1))), trv=float(np.nanmean(np.sum(se**2, 1))),
            mse_param=np.mean(err**2, 0).tolist(),
            mse_median=float(np.median(np.sum(err**2, 1))), mse_max=float(np.max(np.sum(err**2, 1))),
            bias=np.mean(err, 0).tolist(), bias_mcse=(np.std(err, 0, ddof=1) / np.sqrt(len(err))).tolist(),
            sd=np.std(err, 0, ddof=1).tolist(), mean_se=np.nanmean(se, 0).tolist(),
            coverage=np.mean(cover, 0).tolist(), coverage_all=(np.sum(cover, 0) / r.n).tolist(),
            coverage_centred=np.mean(np.abs(err - np.mean(err, 0)) <= 1.959964 * se, 0).tolist(),
            ellipse=float(np.mean(inside[np.isfinite(d2)])) if np.isfinite(d2).any() else math.nan,
            L=(np.bincount(Ls[np.isfinite(Ls)].astype(int)).tolist() if np.isfinite(Ls).any() else []))
    return out


_RESULTS = {}


def _record(table, setting, metrics):
    _RESULTS.setdefault(table, {})[str(setting)] = metrics
    out = os.environ.get("ODEINFER_OC_JSON")
    if out:
        with open(out, "w") as fh:
            json.dump(_RESULTS, fh, indent=1)


def _fmt(x):
    return f"{100 * x:.3g}"


# -- alpha-pinene -------------------------------------------------------------------------------
def _pinene_estimators(known_x0):
    x0 = dict(PINENE.x0) if known_x0 else None
    paper = dict(test_functions="bspline", window=(0.0, 20.0), L_range=(2, 15))
    ests = {"TS": Fit(GradientMatching(), PINENE, x0=x0),
            "OC": Fit(OrthogonalConditions(**paper), PINENE, x0=x0)}
    if known_x0:
        ests["OC,0"] = Fit(OrthogonalConditions(boundary=("x0",), **paper), PINENE, x0=x0)
    else:
        ests["OC,1"] = Fit(OrthogonalConditions(boundary=("end_slope",), **paper), PINENE, x0=x0)
    ests["OC full"] = Fit(OrthogonalConditions(test_functions="bspline"), PINENE, x0=x0)
    return ests


def _run_pinene(known_x0, i, setting):
    n, sigma = setting
    table = "5.1" if known_x0 else "5.2"
    seed = 2026_0000 + (0 if known_x0 else 100) + i
    frame = _study(f"pinene_{'known' if known_x0 else 'unknown'}_{n}_{sigma:g}", Simulate(PINENE, n, sigma, 100.0),
                   _pinene_estimators(known_x0), N_PINENE, seed)
    m = _metrics(frame, PINENE.model.params)
    _record(table, setting, m)
    names = list(m)
    print(f"\nTable {table} {setting} seed={seed} reps={N_PINENE}: " + "; ".join(
        f"{k}: MSE {_fmt(v['mse'])} (median {_fmt(v['mse_median'])}) TrV {_fmt(v['trv'])} ell.cov {v['ellipse']:.2f}"
        f" n_failed {v['n_failed']}"
        for k, v in m.items()) + f" | paper {PAPER_5_1[setting] if known_x0 else PAPER_5_2[setting]}; {names}")
    return m


def _order_of_magnitude(ours, paper, factor=10.0):
    return paper / factor <= ours <= paper * factor


def check_pinene_table(m, setting, paper_oc, paper_ts, heavy_tail=False):
    full, ts, paper_cfg = m["OC full"], m["TS"], m["OC"]
    # medians: robust to the rare huge replications (see oc_tables.md)
    assert _order_of_magnitude(100 * full["mse_median"], paper_oc), (full["mse_median"], paper_oc)
    assert full["mse_median"] <= ts["mse_median"], (full["mse_median"], ts["mse_median"])
    if not heavy_tail:
        assert _order_of_magnitude(100 * full["mse"], paper_oc), (full["mse"], paper_oc)
        assert full["mse"] <= 1.05 * ts["mse"], (full["mse"], ts["mse"])
    else:  # heavy tail: the mean is driven by one replication out of 100
        assert full["mse_max"] > 0.3 * full["mse"] * full["n"], full
    assert _order_of_magnitude(100 * ts["mse"], paper_ts, 30), (ts["mse"], paper_ts)
    # the paper's window ]0, 20[ is less accurate than the full window in every setting
    assert paper_cfg["mse"] > full["mse"], (paper_cfg["mse"], full["mse"])


@pytest.mark.slow
@pytest.mark.parametrize("i,setting", list(enumerate(SETTINGS_PINENE)))
def test_table_5_1_alpha_pinene_known_x0(i, setting):
    """Table 5.1 (known x0, proxy constrained to x(0) = x0). "OC" / "OC,0": the paper's B-spline
    tests on ]0, 20[, L in 2..15 by trajectory SSE; "OC full": B-spline tests on the full
    window, default L range (5..15).

    Asserted (paper: OC beats TS everywhere, claim 5; OC MSE as printed): OC full's median
    squared error is within a factor 10 of the paper's OC MSE and below TS's median; its mean
    too, except at (50, 8), where one replication of 100 carries most of the mean (the paper
    reports 1.03e-2; we get a heavy tail, asserted as such); the paper's ]0, 20[ configuration
    is worse than the full window in every setting (it blows up at sigma = 8 and n = 50).
    """
    m = _run_pinene(True, i, setting)
    check_pinene_table(m, setting, PAPER_5_1[setting][1], PAPER_5_1[setting][0], heavy_tail=setting == (50, 8.0))


@pytest.mark.slow
@pytest.mark.parametrize("i,setting", list(enumerate(SETTINGS_PINENE)))
def test_table_5_2_alpha_pinene_unknown_x0(i, setting):
    """Table 5.2 (unknown x0: unconstrained proxy; OC,1 adds x'(100) = 0). Same assertions as
    Table 5.1 (see there), against the paper's Table 5.2 values."""
    m = _run_pinene(False, i, setting)
    check_pinene_table(m, setting, PAPER_5_2[setting][1], PAPER_5_2[setting][0])


# -- Riccati ------------------------------------------------------------------------------------
def _run_riccati(known_Tr, i, setting):
    n, sigma = setting
    table = "5.3" if known_Tr else "5.4"
    seed = 2026_1000 + (0 if known_Tr else 100) + i
    if known_Tr:
        sm = SplineSmoother(breakpoints=(5.0,))  # GCV, triple knot at the known T_r
        ests = {"TS": Fit(GradientMatching(smoother=sm), RICCATI, fixed={"T_r": 5.0}, smoother=sm),
                "OC": Fit(OrthogonalConditions(smoother=sm), RICCATI, fixed={"T_r": 5.0}, smoother=sm)}
    else:
        # paper: 15 uniform knots on [0, 14] (8 for n = 50); [choice] read as 15 (8) knots including
        # the ends, i.e. 13 (6) interior knots: 17 (10) cubic B-splines
        sm = SplineSmoother(n_basis=17 if n >= 200 else 10)
        ests = {"OC": Fit(OrthogonalConditions(smoother=sm), RICCATI, smoother=sm)}
    frame = _study(f"riccati_{'known' if known_Tr else 'unknown'}_{n}_{sigma:g}",
                   Simulate(RICCATI, n, sigma, 14.0), ests, N_RICCATI, seed)
    names = ["a", "c", "d"] + ([] if known_Tr else ["T_r"])
    m = _metrics(frame, names)
    _record(table, setting, m)
    print(f"\nTable {table} {setting} seed={seed} reps={N_RICCATI}: " + "; ".join(
        f"{k}: MSE {_fmt(v['mse'])} TrV {_fmt(v['trv'])} cov {np.round(v['coverage'], 3).tolist()} "
        f"ell.cov {v['ellipse']:.3f} n_failed {v['n_failed']} MSE per param {[_fmt(x) for x in v['mse_param']]}"
        for k, v in m.items())
        + f" | paper {PAPER_5_3[setting] if known_Tr else PAPER_5_4[setting]}")
    return m


@pytest.mark.slow
@pytest.mark.parametrize("i,setting", list(enumerate(SETTINGS_RICCATI)))
def test_table_5_3_riccati_known_Tr(i, setting):
    """Table 5.3 (known T_r = 5; sine tests, default L range 4..6; GCV proxy with a triple knot).

    Asserted: OC and TS MSE within a factor 10 of the paper's, and OC's per-parameter Wald
    coverage within 3 binomial standard errors of 0.95. The paper reports TS better than OC
    here (claim 6); in our runs OC is better than TS in every setting (TS's weight and
    derivative-based criterion are biased with GCV proxies), which is asserted instead.
    """
    m = _run_riccati(True, i, setting)
    p = PAPER_5_3[setting]
    assert _order_of_magnitude(100 * m["OC"]["mse"], p[1]), (m["OC"]["mse"], p[1])
    assert _order_of_magnitude(100 * m["TS"]["mse"], p[0]), (m["TS"]["mse"], p[0])
    assert m["OC"]["mse"] < m["TS"]["mse"]
    se = 3 * math.sqrt(0.95 * 0.05 / m["OC"]["n_rep"])  # over every replication: a failed fit is a miss
    assert np.all(np.abs(np.array(m["OC"]["coverage_all"]) - 0.95) <= se), (m["OC"]["coverage_all"], m["OC"]["n_failed"])


@pytest.mark.slow
@pytest.mark.parametrize("i,setting", list(enumerate(SETTINGS_RICCATI)))
def test_table_5_4_riccati_unknown_Tr(i, setting):
    """Table 5.4 (unknown T_r, OC only; 17 (n >= 200) or 10 (n = 50) uniform cubic B-splines).

    Asserted: OC MSE within a factor 10 of the paper's.
    """
    m = _run_riccati(False, i, setting)
    p = PAPER_5_4[setting]
    assert _order_of_magnitude(100 * m["OC"]["mse"], p[0]), (m["OC"]["mse"], p[0])


# -- coverage of OC's Wald intervals, alpha-pinene (n, sigma) = (200, 3) -------------------------
N_COVERAGE = int(os.environ.get("ODEINFER_OC_NREP_COVERAGE", 300))


@pytest.mark.slow
def test_coverage_alpha_pinene_n200_sigma3_bias_explains_the_shortfall():
    """OC (full window, default L scan, known x0) per-parameter 95% Wald coverage, with the GCV
    proxy and with ``undersmooth=3``.

    Independent references: the nominal 0.95 and the Monte Carlo SD. Asserted: (1) the plug-in
    standard error is within 20% of the Monte Carlo SD for every parameter (the variance
    formula is right; it is 5-17% low, the L selection and heavy tails are not in it);
    (2) the coverage of the intervals re-centred on the Monte Carlo bias is within 3 binomial
    s.e. + 0.02 of 0.95 (so the shortfall is mostly bias); (3) the raw coverage with GCV is
    below 0.95 - 3 s.e. for at least two parameters (the shortfall is real); (4) undersmoothing
    raises the mean coverage.
    """
    sim = Simulate(PINENE, 200, 3.0, 100.0)
    x0 = dict(PINENE.x0)
    ests = {"OC": Fit(OrthogonalConditions(test_functions="bspline"), PINENE, x0=x0),
            "OC undersmooth 3": Fit(OrthogonalConditions(test_functions="bspline"), PINENE, x0=x0,
                                    smoother=SplineSmoother(undersmooth=3.0))}
    frame = _study("coverage_pinene_200_3", sim, ests, N_COVERAGE, 2026_2000)
    m = _metrics(frame, PINENE.model.params)
    _record("coverage", (200, 3.0), m)
    for name, o in m.items():
        sd, se, bias, cov, cen = (np.array(o[k]) for k in ("sd", "mean_se", "bias", "coverage", "coverage_centred"))
        print(f"\ncoverage {name} (200, 3) seed=20262000 reps={o['n']}: coverage {np.round(cov, 3).tolist()} "
              f"bias-centred {np.round(cen, 3).tolist()} bias/SD {np.round(bias / sd, 2).tolist()} "
              f"mean se/SD {np.round(se / sd, 3).tolist()} ellipse {o['ellipse']:.3f} (over successes; "
              f"n_failed {o['n_failed']})")
        tol = 3 * np.sqrt(0.95 * 0.05 / o["n"])
        assert np.all(np.abs(se / sd - 1) < 0.2), se / sd
        assert np.all(cen >= 0.95 - tol - 0.02), cen
        if name == "OC":
            assert np.sum(cov < 0.95 - tol) >= 2, cov
    assert np.mean(m["OC undersmooth 3"]["coverage"]) > np.mean(m["OC"]["coverage"])


# -- reduced versions in the default suite -----------------------------------------------------
# Each claim of tests/reference/oc_tables.md that a cheap study can check, at R replications (the
# first R of the slow study's seed). Tolerances are fixed here, before the run: binomial standard
# errors sqrt(0.95 * 0.05 / R) for coverages, the Monte Carlo standard error of a mean
# (sd / sqrt(R), from the replications themselves) for MSEs and paired MSE differences. Measured
# time (warm numba cache, one core) in each docstring.
def _sq_errors(frame, est, names):
    """Per successful replication: summed squared error (pandas Series indexed by rep), n_failed."""
    import pandas as pd

    r = oi.studies.replicates(frame, est, names)
    return pd.Series(np.sum((r.estimate - r.truth) ** 2, axis=1), index=r.reps), r.n_failed


def _mcse(x):
    return float(np.std(x, ddof=1) / math.sqrt(len(x)))


def _binomial_3se(n):
    return 3 * math.sqrt(0.95 * 0.05 / n)


def _better(frame, names, good, bad):
    """Paired: mean over replications of (sq. error of ``bad`` - sq. error of ``good``) and its MC s.e.;
    a replication in which either estimator failed counts against ``good``'s claim (it is dropped
    from the pair, and both failure counts must be zero)."""
    eg, fg = _sq_errors(frame, good, names)
    eb, fb = _sq_errors(frame, bad, names)
    assert fg == 0 and fb == 0, (fg, fb)
    d = (eb - eg).dropna().to_numpy()
    return float(np.mean(d)), _mcse(d)


R_RICCATI_REDUCED = 100


@pytest.mark.parametrize("i", [0, 5], ids=["n400_sigma0.2", "n50_sigma0.4"])
def test_table_5_3_reduced(i):
    """Table 5.3 (Riccati, known T_r), 100 replications of settings (400, 0.2) and (50, 0.4) (about
    1.5 s each, warm). Claims of oc_tables.md checked: (1) OC's per-parameter 95% Wald coverage is
    0.95 within 3 binomial s.e. (0.065 at R = 100; failed fits count as misses); (2) OC beats TS in
    MSE (the paper's claim 6 does not reproduce): the paired mean difference is above 3 of its MC
    s.e.; (3) OC's MSE is within a factor 2 of the paper's, allowing 3 MC s.e. of our mean."""
    setting = SETTINGS_RICCATI[i]
    n, sigma = setting
    sm = SplineSmoother(breakpoints=(5.0,))
    ests = {"TS": Fit(GradientMatching(smoother=sm), RICCATI, fixed={"T_r": 5.0}, smoother=sm),
            "OC": Fit(OrthogonalConditions(smoother=sm), RICCATI, fixed={"T_r": 5.0}, smoother=sm)}
    frame = _study(f"riccati_known_{n}_{sigma:g}", Simulate(RICCATI, n, sigma, 14.0), ests, R_RICCATI_REDUCED,
                   2026_1000 + i)
    m = _metrics(frame, ["a", "c", "d"])["OC"]
    assert np.all(np.abs(np.array(m["coverage_all"]) - 0.95) <= _binomial_3se(m["n_rep"])), m["coverage_all"]
    gain, se = _better(frame, ["a", "c", "d"], "OC", "TS")
    assert gain > 3 * se, (gain, se)
    e2, _ = _sq_errors(frame, "OC", ["a", "c", "d"])
    paper = PAPER_5_3[setting][1] / 100
    assert paper / 2 - 3 * _mcse(e2) <= e2.mean() <= 2 * paper + 3 * _mcse(e2), (e2.mean(), paper)


def test_table_5_4_reduced():
    """Table 5.4 (Riccati, unknown T_r), 20 replications at (400, 0.2) (about 3 s warm). Claims: OC's
    MSE is below the paper's (recorded at 500: 0.53 vs 4.01, units 1e-2) by more than 3 MC s.e.;
    per-parameter coverage 0.95 within 3 binomial s.e. (0.146 at R = 20; failures are misses)."""
    sm = SplineSmoother(n_basis=17)
    frame = _study("riccati_unknown_400_0.2", Simulate(RICCATI, 400, 0.2, 14.0),
                   {"OC": Fit(OrthogonalConditions(smoother=sm), RICCATI, smoother=sm)}, 20, 2026_1100)
    names = ["a", "c", "d", "T_r"]
    m = _metrics(frame, names)["OC"]
    e2, _ = _sq_errors(frame, "OC", names)
    assert e2.mean() + 3 * _mcse(e2) < PAPER_5_4[(400, 0.2)][0] / 100, e2.mean()
    assert np.all(np.abs(np.array(m["coverage_all"]) - 0.95) <= _binomial_3se(m["n_rep"])), m["coverage_all"]


def test_table_5_1_reduced():
    """Table 5.1 (alpha-pinene, known x0), 100 replications at (400, 3) (about 3.5 s warm), TS and
    "OC full" (the default configuration). Claims: OC full beats TS in MSE (paired mean difference
    above 3 MC s.e.); OC full's MSE is within the slow test's factor 10 of the paper's OC MSE
    (0.05e-2), allowing 3 MC s.e. of our mean."""
    x0 = dict(PINENE.x0)
    ests = {"TS": Fit(GradientMatching(), PINENE, x0=x0),
            "OC full": Fit(OrthogonalConditions(test_functions="bspline"), PINENE, x0=x0)}
    frame = _study("pinene_known_reduced_400_3", Simulate(PINENE, 400, 3.0, 100.0), ests, 100, 2026_0000)
    names = PINENE.model.params
    gain, se = _better(frame, names, "OC full", "TS")
    assert gain > 3 * se, (gain, se)
    e2, _ = _sq_errors(frame, "OC full", names)
    paper = PAPER_5_1[(400, 3.0)][1] / 100
    assert paper / 10 - 3 * _mcse(e2) <= e2.mean() <= 10 * paper + 3 * _mcse(e2), (e2.mean(), paper)


def test_coverage_alpha_pinene_reduced():
    """OC's Wald coverage at alpha-pinene (200, 3), 200 replications (about 4.5 s warm), GCV proxy.
    Claims (the slow test's rules at R = 200): the plug-in s.e. is within 20% of the MC SD, widened
    by 3 MC s.e. of an SD (3 / sqrt(2 (R - 1)) = 0.15); intervals re-centred on the MC bias cover
    within 3 binomial s.e. + 0.02 of 0.95; the raw coverage falls short: at least one parameter
    below 0.95 - 3 binomial s.e. (0.904)."""
    x0 = dict(PINENE.x0)
    frame = _study("coverage_pinene_reduced_200_3", Simulate(PINENE, 200, 3.0, 100.0),
                   {"OC": Fit(OrthogonalConditions(test_functions="bspline"), PINENE, x0=x0)}, 200, 2026_2000)
    o = _metrics(frame, PINENE.model.params)["OC"]
    assert o["n_failed"] == 0, o["n_failed"]
    sd, se, cov, cen = (np.array(o[k]) for k in ("sd", "mean_se", "coverage", "coverage_centred"))
    tol = _binomial_3se(o["n_rep"])
    assert np.all(np.abs(se / sd - 1) < 0.2 + 3 / math.sqrt(2 * (o["n_rep"] - 1))), se / sd
    assert np.all(cen >= 0.95 - tol - 0.02), cen
    assert np.min(cov) < 0.95 - tol, cov
