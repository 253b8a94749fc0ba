"""oi.Embedding against the papers' NLS baselines (issue 4, evidence) and on the sharp-step
Riccati model with its change time held fixed.

* Riccati (zoo ``riccati``, sharp step at ``T_r``): fits with ``T_r`` fixed now that the solver
  takes ``oi.Forward(exclude=...)``; reference: scipy ``least_squares`` over a DOP853 solve split at ``T_r``
  (rtol 1e-12), an independent computation.
* Seed 000 (Syafiie et al.): on its three examples a converged Embedding fit has a smaller
  trajectory RMSE than the paper's printed NR estimates, our NR on the same data and the
  paper's printed NLS estimates (default run; table in ``tests/reference/embedding_tables.md``).
* Seed 001 (Brunel, Clairon & d'Alche-Buc), Tables 5.1 / 5.2, NLS columns: alpha-pinene MSE and
  mean Tr(V) over Monte Carlo replicates, to the paper's order of magnitude (slow; recorded in
  ``tests/reference/embedding_tables.md``).
"""

from __future__ import annotations

import math
import os
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError

# -- Riccati with T_r fixed (default run) ---------------------------------------------------------
RICCATI = oi.zoo.riccati()


def _riccati_scipy(a, c, d, T_r, phi0, t):
    """phi(t) by scipy DOP853 (rtol 1e-12) in two pieces split at T_r (no step straddles the jump)."""
    from scipy.integrate import solve_ivp

    def f(step):
        return lambda s, y: [a * y[0] ** 2 + c * np.sqrt(s) - d * step]

    t = np.asarray(t)
    out = np.empty(t.size)
    left = t <= T_r
    s1 = solve_ivp(f(0.0), (0.0, T_r), [phi0], method="DOP853", rtol=1e-12, atol=1e-14, dense_output=True)
    out[left] = s1.sol(t[left])[0]
    s2 = solve_ivp(f(1.0), (T_r, t[-1]), [s1.y[0, -1]], method="DOP853", rtol=1e-12, atol=1e-14,
                   dense_output=True)
    out[~left] = s2.sol(t[~left])[0]
    return out


def test_riccati_sharp_step_with_T_r_fixed_matches_scipy_least_squares():
    """Embedding fits (a, c, d) of the sharp-step Riccati model with T_r = 5 fixed and phi(0) = -1
    known (paper seed 001, section 5.3, n = 200, sigma = 0.2). Reference: scipy least_squares
    over the split DOP853 solve: same optimum to 1e-5 relative, and standard errors equal to
    ``s (J^T J)^{-1/2}`` with J by central differences of that solve (1e-3 relative), which
    checks the sensitivities across the jump. With phi(0) also estimated the fit converges to
    an estimate within 3 standard errors of the truth."""
    from scipy.optimize import least_squares

    data, _ = oi.simulate(RICCATI.model, RICCATI.params, RICCATI.x0, RICCATI.t, t0=0.0, noise=0.2, rng=3)
    y = data.y[:, 0]
    start = {"a": 0.05, "c": 0.05, "d": 1.0}
    est = oi.Embedding().fit(RICCATI.model, data, start=start, fixed={"T_r": 5.0}, x0={"phi": -1.0})
    assert est.converged and est.names == ("a", "c", "d")

    def resid(u):
        return _riccati_scipy(u[0], u[1], u[2], 5.0, -1.0, data.t) - y

    ref = least_squares(resid, list(start.values()), method="lm", xtol=1e-14, ftol=1e-14, gtol=1e-14)
    np.testing.assert_allclose(est.values, ref.x, rtol=1e-5)
    J = np.empty((y.size, 3))
    for j in range(3):
        h = 1e-5 * abs(ref.x[j])
        up, dn = ref.x.copy(), ref.x.copy()
        up[j] += h
        dn[j] -= h
        J[:, j] = (resid(up) - resid(dn)) / (2 * h)
    s2 = np.sum(ref.fun ** 2) / (y.size - 3)
    np.testing.assert_allclose(est.bse.to_numpy(), np.sqrt(np.diag(s2 * np.linalg.inv(J.T @ J))), rtol=1e-3)

    both = oi.Embedding().fit(RICCATI.model, data, start={**start, "x0[phi]": -0.5}, fixed={"T_r": 5.0})
    truth = np.array([0.11, 0.09, 2.0, -1.0])
    assert both.converged
    assert np.all(np.abs(both.values - truth) <= 3 * both.bse.to_numpy()), (both.values, both.bse)


def test_riccati_free_switching_time_is_refused_with_the_fix():
    data, _ = oi.simulate(RICCATI.model, RICCATI.params, RICCATI.x0, RICCATI.t, t0=0.0, noise=0.2, rng=3)
    with pytest.raises(InputError, match=r"fixed: \['T_r'\] move a sharp jump.*Hold them fixed"):
        oi.Embedding().fit(RICCATI.model, data, start={"a": 0.1, "c": 0.1, "d": 1.0, "T_r": 4.0}, x0={"phi": -1.0})


# -- Seed 000: trajectory RMSE against the paper's NR / GD and NLS estimates (default run) ---------
# Paper values (spec seed-000 §3.1-3.3, eqs. (50), (53), (58), (63) and Table 4).
SEED000 = {
    "population": dict(paper_nr=[10.0646, 5.0314, 3.1650, 1.0222, 3.1166],
                       paper_nls=[8.0394, 3.9912, 2.4729, 1.1738, 2.9589],
                       start=[0.1, 0.1, 1.2, 1.3, 0.2], segments=5),
    "lorenz": dict(paper_nr=[9.47459164, 28.03494241, 2.86747935], paper_nls=[8.2146, 29.8385, 2.0],
                   start=[15.0, 2.0, 2.0], segments=20),
    "activator_inhibitor": dict(paper_nr=[2.0117, 3.02825, 0.0948, 0.3737],
                                paper_nls=[1.8599, 2.5681, 0.0521, 0.2358],
                                start=[1.0, 2.0, 1.0, 2.0], segments=1),
}


def _trajectory_rmse(z, t, a, ref):
    """Per-state RMSE of x(t; a) solved from the known x0 (rtol 1e-10) against ``ref``."""
    sol = oi.solve(oi.Problem(z.model, t, x0=z.x0, t0=z.t0), np.asarray(a, float),
                   solver=oi.Dopri5(rtol=1e-10, atol=1e-12), raise_on_failure=False)
    return np.sqrt(np.mean((np.asarray(sol.y) - ref) ** 2, axis=0))


def seed000_rows(name):
    """Rows (label, estimate, RMSE vs data, RMSE vs noise-free trajectory) on the zoo data, seed 0."""
    from odeinfer.estimators.newton import NewtonRaphson

    z = oi.zoo.get(name)
    cfg = SEED000[name]
    sim = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=0)
    d, truth = sim.data, np.asarray(sim.truth.y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nr = NewtonRaphson(derivative="forward").fit(z.model, d, start=cfg["start"])  # the paper's
        emb = oi.Embedding(segments=cfg["segments"]).fit(z.model, d, start=cfg["start"], x0=z.x0)
    rows = {}
    for label, a in (("truth", z.params_array()), ("paper NR = GD", cfg["paper_nr"]), ("our NR (same data)", nr.values),
                     ("paper NLS", cfg["paper_nls"]), ("Embedding", emb.values)):
        rows[label] = (np.asarray(a, float), _trajectory_rmse(z, d.t, a, d.y), _trajectory_rmse(z, d.t, a, truth))
    return rows, emb


@pytest.mark.parametrize("name", list(SEED000))
def test_seed000_embedding_beats_nr_gd_and_nls_in_trajectory_rmse(name):
    """Seed 000's NLS stopped short (spec §2.8: its estimates sit far from the truth, e.g. Lorenz
    a3 at its bound). A converged Embedding fit (zoo data, seed 0, x0 known as in the paper's
    metrics; start: the paper's first guess clipped into its NLS bounds; multiple shooting for
    population (5 segments: single shooting needs ~1000 LM iterations from this start) and
    Lorenz (20 segments: single shooting stops in a poor local optimum)) has, for every state,
    a trajectory RMSE no larger than that of the paper's printed NR/GD estimate, our NR on the
    same data and the paper's printed NLS estimate, both against the noisy data (the paper's
    metric, spec §2.9; at most 1% above) and against the noise-free trajectory (strictly
    smaller); its RMSE against the data is the noise level (independent reference: the zoo's
    sigma, within 15%)."""
    rows, emb = seed000_rows(name)
    assert emb.converged
    z = oi.zoo.get(name)
    _, e_data, e_truth = rows["Embedding"]
    for label in ("paper NR = GD", "our NR (same data)", "paper NLS"):
        _, r_data, r_truth = rows[label]
        assert np.all(e_data <= 1.01 * r_data), (label, e_data, r_data)
        assert np.all(e_truth < r_truth), (label, e_truth, r_truth)
    np.testing.assert_allclose(e_data, z.sigma, rtol=0.15)


# -- Seed 001 Tables 5.1 / 5.2, NLS columns (slow) ------------------------------------------------
N_REP = int(os.environ.get("ODEINFER_EMB_NREP", 500))
SETTINGS = [(400, 3.0), (400, 8.0), (200, 3.0), (200, 8.0), (50, 3.0), (50, 8.0)]
# Paper NLS columns (units 1e-2), spec seed-001 §5, copied verbatim: (MSE NLS, Tr(V) NLS)
PAPER_NLS_5_1 = {(400, 3.0): (0.02, 0.02), (400, 8.0): (0.10, 0.12), (200, 3.0): (0.03, 0.03),
                 (200, 8.0): (0.18, 0.27), (50, 3.0): (0.16, 0.16), (50, 8.0): (0.68, 1.68)}
PAPER_NLS_5_2 = {(400, 3.0): (0.07, 0.06), (400, 8.0): (0.50, 0.61), (200, 3.0): (0.14, 0.14),
                 (200, 8.0): (1.34, 1.54), (50, 3.0): (0.69, 0.76), (50, 8.0): (1.96, 4.38)}
PINENE = oi.zoo.alpha_pinene()


class SimulatePinene:
    """``simulate_fn(rng) -> (data, truth)``: exact trajectory (rtol 1e-11) on ``n`` equispaced
    times in (0, 100] plus N(0, sigma^2) noise on all five states (as tests/test_oc_studies.py)."""

    def __init__(self, n, sigma):
        self.sigma = float(sigma)
        self.t = np.linspace(0.0, 100.0, n + 1)[1:]
        self.y = np.asarray(oi.solve(oi.Problem(PINENE.model, self.t, x0=PINENE.x0, t0=0.0), PINENE.params,
                                     solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y)

    def __call__(self, rng):
        y = self.y + rng.normal(0.0, self.sigma, self.y.shape)
        return oi.Data(self.t, y, PINENE.model.states, t0=0.0), dict(PINENE.params)


class FitPinene:
    """Embedding from theta* (the paper's NLS is oracle-started: 20 starts around theta*); x0
    known (Table 5.1) or estimated from the first observations (Table 5.2). Reports theta only."""

    def __init__(self, known_x0):
        self.known_x0 = known_x0

    def __call__(self, data):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e = oi.Embedding().fit(PINENE.model, data, start=PINENE.params,
                                   x0=dict(PINENE.x0) if self.known_x0 else None)
        names = PINENE.model.params
        idx = [e.names.index(n) for n in names]
        return SimpleNamespace(params=dict(zip(names, e.values[idx].tolist())),
                               bse=dict(zip(names, np.sqrt(np.diag(e.cov)[idx]).tolist())),
                               converged=e.converged)


def pinene_metrics(known_x0, i, setting, n_rep=N_REP):
    """Metrics of one setting (units: natural; the tables print 100 x): ``mse`` (mean over
    replicates of |theta_hat - theta*|^2), ``mse_median``, ``trv`` (mean plug-in trace of
    Var(theta_hat)), ``converged`` (share of fits with status "converged"), and the same MSE and
    Tr(V) over the ``determined`` fits only: those whose own standard errors say every theta_j is
    determined, ``bse_j < |theta_hat_j|`` (a rule on the fit's output, not on the truth; the
    others are fits whose least-squares optimum ran off along the theta4 / theta5 ridge of the
    fast alloocimene <-> dimer exchange). ``ODEINFER_EMB_CACHE=<dir>`` stores/reuses the frame."""
    n, sigma = setting
    seed = 2026_0000 + (0 if known_x0 else 100) + i  # the seeds of tests/test_oc_studies.py

    def compute():
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            return oi.studies.monte_carlo(SimulatePinene(n, sigma), {"NLS": FitPinene(known_x0)}, n_rep, rng=seed,
                                          progress=False).frame

    f = oi.studies.cached_frame(os.environ.get("ODEINFER_EMB_CACHE"),
                                f"emb_pinene_{'known' if known_x0 else 'unknown'}_{n}_{sigma:g}_seed{seed}_rep{n_rep}",
                                oi.studies.code_key(oi, SimulatePinene, FitPinene), compute)
    names = list(PINENE.model.params)
    r = oi.studies.replicates(f, "NLS", names)  # failed fits (raised / non-finite) counted in n_failed
    est, se, conv = r.estimate, r.stderr, r.converged
    err2 = np.sum((est - PINENE.params_array()) ** 2, axis=1)
    trv = np.sum(se ** 2, axis=1)
    ok = np.isfinite(err2)
    det = ok & np.isfinite(trv) & np.all(se < np.abs(est), axis=1)
    return dict(seed=seed, n=int(ok.sum()), n_failed=r.n_failed, converged=float(np.sum(conv) / r.n),
                mse=float(np.mean(err2[ok])),
                mse_median=float(np.median(err2[ok])), mse_sd=float(np.std(err2[ok], ddof=1)),
                trv=float(np.nanmean(trv[ok])),
                determined=float(det.sum() / r.n), mse_det=float(np.mean(err2[det])), trv_det=float(np.mean(trv[det])),
                top5_share=float(np.sort(err2[ok])[-5:].sum() / err2[ok].sum()))


HEAVY = {(True, (50, 8.0)), (False, (200, 8.0)), (False, (50, 8.0))}


def _within(x, ref, factor=10.0):
    return ref / factor <= x <= ref * factor


@pytest.mark.slow
@pytest.mark.parametrize("known_x0", [True, False], ids=["table5.1_known_x0", "table5.2_unknown_x0"])
def test_seed001_alpha_pinene_nls_columns_order_of_magnitude(known_x0):
    """Tables 5.1 / 5.2, NLS columns (units 1e-2, theta only; paper: spec seed-001 §5).

    theta* = (5.93, 2.96, 2.05, 27.5, 4.00) x 1e-2 on [0, 100] is a project choice (spec §4.1;
    the paper does not give it); with it the Fisher-information trace is about twice the
    paper's NLS Tr(V) (spec §4.1), so factors of about 2 above the paper are expected.

    Asserted in every setting: the median squared error within a factor 10 of the paper's NLS
    MSE and at least 95% of the fits converged. In the settings without runaway fits (all but
    ``HEAVY``): the mean MSE and mean Tr(V) within a factor 10 of the paper's and MSE / Tr(V) in
    [0.5, 2] (the plug-in variance matches the spread). Does NOT reproduce, in ``HEAVY`` (sigma = 8
    with n = 50, both tables, and n = 200 with unknown x0): a few replicates' least-squares
    optimum runs off along the theta4 / theta5 ridge of the fast alloocimene <-> dimer exchange
    (e.g. theta4 = 176, theta5 = 20 with status "converged"; not checked whether a better optimum
    lies near theta*), so the mean MSE
    is 1e2-1e5 times the paper's; asserted as such (the 5 largest squared errors carry over half
    of the sum). The paper's NLS (Matlab nlinfit, 20 starts around theta*) presumably stopped
    short of those optima. Printed with ``-s``; recorded in tests/reference/embedding_tables.md.
    """
    paper = PAPER_NLS_5_1 if known_x0 else PAPER_NLS_5_2
    print(f"\nTable {'5.1 (known x0)' if known_x0 else '5.2 (unknown x0)'}, {N_REP} replicates")
    print("| (n, σ) | seed | converged | n_failed | determined | MSE NLS (ours) | median sq. err. | Tr(V) NLS (ours) "
          "| MSE / Tr(V), determined fits | paper MSE / Tr(V) NLS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    failures = []
    for i, setting in enumerate(SETTINGS):
        m = pinene_metrics(known_x0, i, setting)
        p = paper[setting]
        print(f"| {setting} | {m['seed']} | {m['converged']:.3f} | {m['n_failed']} | {m['determined']:.3f} | {100 * m['mse']:.3g} "
              f"| {100 * m['mse_median']:.3g} | {100 * m['trv']:.3g} | {100 * m['mse_det']:.3g} / "
              f"{100 * m['trv_det']:.3g} | {p[0]} / {p[1]} |", flush=True)
        ok = m["converged"] >= 0.95 and _within(100 * m["mse_median"], p[0])
        if (known_x0, setting) in HEAVY:
            ok = ok and m["top5_share"] > 0.5
        else:
            ok = ok and _within(100 * m["mse"], p[0]) and _within(100 * m["trv"], p[1]) \
                and 0.5 <= m["mse"] / m["trv"] <= 2.0
        if not ok:
            failures.append((setting, m, p))
    assert not failures, failures


def test_seed001_alpha_pinene_nls_reduced():
    """Table 5.1 NLS column at (400, 3), known x0, reduced to 100 replicates (the first 100 of the slow
    study's seed; about 3 s warm). Claims of embedding_tables.md, rules fixed here before the run
    (MC s.e. of the mean squared error from the replicates, binomial s.e. of a share): at least
    95% of the fits converge, within 3 binomial s.e. (0.065); no fit fails; MSE / Tr(V) in [0.5, 2]
    and the MSE within the slow test's factor 10 of the paper's (0.02e-2), each allowing 3 MC s.e."""
    m = pinene_metrics(True, 0, (400, 3.0), n_rep=100)
    assert m["n_failed"] == 0
    assert m["converged"] >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 100), m["converged"]
    mcse = m["mse_sd"] / math.sqrt(m["n"])
    assert 0.5 * m["trv"] - 3 * mcse <= m["mse"] <= 2.0 * m["trv"] + 3 * mcse, m
    paper = PAPER_NLS_5_1[(400, 3.0)][0] / 100
    assert paper / 10 - 3 * mcse <= m["mse"] <= 10 * paper + 3 * mcse, m
