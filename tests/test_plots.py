"""odeinfer.plots: behaviour (returned figures, artists, geometry), not pixels.

Ellipse geometry is checked against the analytic 2x2 case: chi2 with 2 degrees of freedom
has quantile -2 ln(1 - level), the eigenvalues of [[a, b], [b, d]] are
(a + d)/2 +- sqrt(((a - d)/2)^2 + b^2), and the semi-axes are sqrt(q * lambda).
The posterior HDR contour of normal draws is compared with the exact normal HDR (the
same ellipse around the mean with the draws' covariance).
"""

import base64
import warnings

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer import plots  # noqa: E402
from odeinfer.errors import InputError, OdeinferWarning  # noqa: E402
from odeinfer.studies import StudyResult  # noqa: E402

LV = oi.zoo.get("lotka_volterra")


@pytest.fixture(scope="module")
def setup():
    data, truth = oi.simulate(LV.model, LV.params, LV.x0, LV.t, noise=LV.sigma, rng=1)
    ests = [oi.OrthogonalConditions().fit(LV.model, data), oi.GradientMatching().fit(LV.model, data)]
    oc = ests[0]
    r = np.random.default_rng(0)
    D = r.multivariate_normal(oc.values, oc.cov, size=(2, 500))
    post = {n: D[..., i] for i, n in enumerate(oc.names)}
    rep = np.asarray(truth.y)[None, None] + r.normal(0, 1.0, size=(2, 200) + truth.y.shape)
    idata = az.from_dict(posterior=post, posterior_predictive={"y": rep}, dims={"y": ["time", "state"]},
                         coords={"time": data.t, "state": list(LV.model.states)})
    return data, ests, idata


def _q(level):
    return -2.0 * np.log(1.0 - level)


def test_ellipse_axes_match_the_analytic_2x2_case():
    a, b, d = 4.0, 1.5, 1.0
    cov = np.array([[a, b], [b, d]])
    lam_hi = (a + d) / 2 + np.sqrt(((a - d) / 2) ** 2 + b * b)
    lam_lo = (a + d) / 2 - np.sqrt(((a - d) / 2) ** 2 + b * b)
    c = np.array([1.0, -2.0])
    xy = plots.ellipse(c, cov, level=0.9, n=2001)
    r = np.linalg.norm(xy - c, axis=1)
    assert r.max() == pytest.approx(np.sqrt(_q(0.9) * lam_hi), rel=1e-6)
    assert r.min() == pytest.approx(np.sqrt(_q(0.9) * lam_lo), rel=1e-6)
    inv = np.array([[d, -b], [-b, a]]) / (a * d - b * b)
    quad = np.einsum("ni,ij,nj->n", xy - c, inv, xy - c)
    np.testing.assert_allclose(quad, _q(0.9), rtol=1e-10)
    with pytest.raises(InputError, match="cov: expected a positive definite"):
        plots.ellipse(c, [[1.0, 2.0], [2.0, 1.0]])


def test_ellipse_agrees_with_confidence_ellipsoid(setup):
    _, (oc, _), _ = setup
    ce = oi.confidence_ellipsoid(oc, alpha=0.05, names=["alpha", "beta"])
    xy = plots.ellipse(ce.center, ce.cov, 0.95)
    np.testing.assert_allclose([ce.distance2(p) for p in xy], ce.radius2, rtol=1e-8)


def test_regions_draws_ellipses_and_posterior_hdr(setup):
    _, ests, idata = setup
    fig = plots.regions(ests, idata, pair=("alpha", "beta"), level=0.95)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    # 2 ellipses + 2 estimate markers + posterior-mean marker
    assert len(ax.lines) == 5
    assert ax.get_xlabel() == "alpha" and ax.get_ylabel() == "beta"
    oc = ests[0]
    i = [0, 1]
    inv = np.linalg.inv(np.asarray(oc.cov)[np.ix_(i, i)])
    xy = ax.lines[1].get_xydata()  # first estimate's ellipse (after the posterior mean marker)
    r = xy - oc.values[i]
    np.testing.assert_allclose(np.einsum("ni,ij,nj->n", r, inv, r), _q(0.95), rtol=1e-8)
    # The KDE HDR of normal draws is close to the exact normal HDR (KDE smoothing widens it a little).
    from matplotlib.contour import ContourSet

    cs = [c for c in ax.collections if isinstance(c, ContourSet)]
    assert len(cs) == 1
    verts = np.vstack([p.vertices for p in cs[0].get_paths()])
    X = oi.diagnostics.draws(idata, "alpha"), oi.diagnostics.draws(idata, "beta")
    X = np.column_stack(X)
    rr = verts - X.mean(axis=0)
    d2 = np.einsum("ni,ij,nj->n", rr, np.linalg.inv(np.cov(X, rowvar=False)), rr)
    assert np.median(d2) == pytest.approx(_q(0.95), rel=0.2)
    assert any("HDR" in t.get_text() for t in ax.get_legend().get_texts())


def test_regions_on_given_axes_without_posterior_and_without_cov(setup):
    _, (oc, gm), _ = setup
    nocov = oi.Estimate("NoCov", LV.model, oc.names, oc.values, None, "converged")
    fig0 = Figure()
    ax = fig0.add_subplot()
    with pytest.warns(OdeinferWarning, match="NoCov: no confidence ellipse"):
        fig = plots.regions([oc, nocov], pair=("gamma", "delta"), ax=ax)
    assert fig is fig0 and len(ax.lines) == 3 and len(ax.collections) == 0


def test_regions_bad_input(setup):
    _, ests, idata = setup
    with pytest.raises(InputError, match="pair: expected two different names"):
        plots.regions(ests, pair=("alpha", "alpha"))
    with pytest.raises(InputError, match=r"pair: \['tau'\] are not estimated by OrthogonalConditions"):
        plots.regions(ests, pair=("alpha", "tau"))
    with pytest.raises(InputError, match=r"level: expected a probability in \(0, 1\)"):
        plots.regions(ests, level=95)
    with pytest.raises(InputError, match="ax: expected a matplotlib Axes"):
        plots.regions(ests, ax="left")
    with pytest.raises(InputError, match="matches no posterior variable"):
        plots.regions(ests, az.from_dict(posterior={"x": np.zeros((2, 10))}), pair=("alpha", "beta"))


def test_trajectories_panels_lines_and_bands(setup):
    data, ests, idata = setup
    fig = plots.trajectories(data, *ests, idata=idata)
    assert len(fig.axes) == 2
    for ax, s in zip(fig.axes, data.states):
        assert ax.get_ylabel() == s
        # data + 2 estimates + posterior predictive median
        assert len(ax.lines) == 4
        # 2 delta-method bands + posterior predictive band
        assert len(ax.collections) == 3
    # the data line holds the observations; the OC line is est.predict at the grid
    np.testing.assert_array_equal(fig.axes[0].lines[0].get_ydata(), data.y[:, 0])
    grid = fig.axes[0].lines[1].get_xdata()
    assert grid[0] == 0.0 and grid[-1] == data.t[-1] and len(grid) == 200
    # the posterior predictive median is close to the truth the draws were centred on (sd 1)
    med = fig.axes[1].lines[3].get_ydata()
    sim = oi.simulate(LV.model, LV.params, LV.x0, LV.t).truth
    np.testing.assert_allclose(med, np.asarray(sim.y)[:, 1], atol=0.5)


def test_trajectories_single_axes_and_explicit_x0(setup):
    data, ests, _ = setup
    fig0 = Figure()
    ax = fig0.add_subplot()
    fig = plots.trajectories(data, ests[0], ax=ax, t=np.linspace(0, 20, 50), x0=LV.x0)
    assert fig is fig0
    assert len(ax.lines) == 2 + 2  # data per state + estimate per state
    np.testing.assert_allclose(ax.lines[2].get_ydata()[0], LV.x0["prey"])


def test_trajectories_leave_out_an_estimate_that_cannot_be_solved(setup):
    data, (oc, _), _ = setup
    # beta < 0 makes prey' = prey (5 + 0.5 pred) blow up in finite time (t ~ 0.42)
    wild = oi.Estimate("Wild", LV.model, LV.model.params, [5.0, -0.5, 0.8, 0.02], np.eye(4) * 1e-4, "converged")
    with pytest.warns(OdeinferWarning, match="Wild: the trajectory could not be solved"):
        fig = plots.trajectories(data, oc, wild)
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]


def test_trajectories_bad_input(setup):
    data, ests, _ = setup
    with pytest.raises(InputError, match="data: expected an odeinfer Data"):
        plots.trajectories(np.zeros((3, 2)), *ests)
    with pytest.raises(InputError, match="estimates: every item must be an odeinfer Estimate"):
        plots.trajectories(data, ests[0], "GM")
    with pytest.raises(InputError, match="t: expected at least 2 finite, strictly increasing times"):
        plots.trajectories(data, *ests, t=[3.0, 1.0])
    part = data.select(["prey"])
    with pytest.raises(InputError, match="x0: the OrthogonalConditions estimate does not contain the initial state"):
        plots.trajectories(part, ests[0])
    two = oi.Experiments([data, data], names=["a", "b"])
    with pytest.raises(InputError, match="data: plots show one experiment at a time"):
        plots.trajectories(two, *ests)
    renamed = data.rename({"prey": "hare"})
    with pytest.raises(InputError, match=r"data: states \['hare'\] are not states of model"):
        plots.trajectories(renamed, *ests)


def test_residuals(setup):
    data, (oc, _), _ = setup
    fig = plots.residuals(oc, data)
    assert len(fig.axes) == 2
    ax = fig.axes[0]
    pred = oc.predict(data.t, x0={s: data.y[0, i] for i, s in enumerate(data.states)})
    np.testing.assert_allclose(ax.lines[0].get_ydata(), data.y[:, 0] - pred.y[:, 0], rtol=1e-8, atol=1e-8)
    assert len(ax.lines) == 1 + 1 + 2  # residuals, zero line, +-2 sigma
    with pytest.raises(InputError, match="est: expected one Estimate"):
        plots.residuals([oc, oc], data)
    with pytest.raises(InputError, match="est: expected one Estimate, got str"):
        plots.residuals("oc", data)


def test_forest_shows_every_interval(setup):
    _, ests, idata = setup
    fig = plots.forest(ests, idata)
    assert len(fig.axes) == 4
    for ax, p in zip(fig.axes, LV.model.params):
        assert ax.get_title(loc="left") == p
        assert len(ax.lines) == 2 * 4  # (interval + point) x (OC, GM, posterior ET, posterior HDI)
        assert len(ax.get_yticklabels()) == 4
    table = oi.compare_intervals(ests, methods=("wald", "profile"))
    fig = plots.forest(None, table=table, names=["beta"])
    assert len(fig.axes) == 1 and len(fig.axes[0].lines) == 2 * 2  # profiles not available: not drawn
    with pytest.raises(InputError, match=r"names: \['tau'\] are not in the comparison"):
        plots.forest(ests, names=["tau"])
    with pytest.raises(InputError, match="alpha: expected a number"):
        plots.forest(ests, alpha=0)


def _study_frame():
    r = np.random.default_rng(2)
    rows = []
    for rep in range(50):
        for est, bias in (("A", 0.0), ("B", 0.3)):
            for p, truth in (("k", 1.0), ("m", 2.0)):
                rows.append({"rep": rep, "estimator": est, "param": p, "truth": truth,
                             "estimate": truth + bias + r.normal(0, 0.1), "stderr": 0.1, "converged": True,
                             "time": 0.01, "error": None})
    return pd.DataFrame(rows)


def test_study_plots():
    res = StudyResult(_study_frame())
    fig = plots.study(res)
    assert len(fig.axes) == 4
    box_ax, cov_ax = fig.axes[0], fig.axes[1]
    truth_lines = [ln for ln in box_ax.lines if ln.get_label() == "truth"]
    assert len(truth_lines) == 1 and truth_lines[0].get_ydata()[0] == 1.0
    # coverage: estimator A (unbiased) ~ 0.95, B (bias 3 se) ~ 0.15; error bars are containers
    ys = [c.lines[0].get_ydata()[0] for c in cov_ax.containers]
    summ = res.summary().set_index(["estimator", "param"])
    assert ys == pytest.approx([summ.loc[("A", "k"), "coverage"], summ.loc[("B", "k"), "coverage"]])
    assert ys[0] > 0.8 and ys[1] < 0.5
    fig = plots.study(res, truth={"k": 1.3})  # now B is the unbiased one for k
    ys = [c.lines[0].get_ydata()[0] for c in fig.axes[1].containers]
    assert ys[1] > 0.8 and ys[0] < 0.5
    with pytest.raises(InputError, match="result: expected an odeinfer.studies.StudyResult"):
        plots.study(_study_frame())
    with pytest.raises(InputError, match=r"truth: \['z'\] are not parameters of the study"):
        plots.study(res, truth={"z": 1.0})


def test_to_png_base64_round_trip():
    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1], [0, 1])
    text = plots.to_png_base64(fig, dpi=50)
    raw = base64.b64decode(text)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(raw[16:20], "big") == 100  # width 2 in * 50 dpi
    with pytest.raises(InputError, match="fig: expected a matplotlib Figure"):
        plots.to_png_base64("fig")
    with pytest.raises(InputError, match="dpi: expected a number between 10 and 1200"):
        plots.to_png_base64(fig, dpi=0)


def test_every_plot_renders_to_png(setup):
    data, ests, idata = setup
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fig in (plots.trajectories(data, *ests, idata=idata), plots.regions(ests, idata),
                    plots.forest(ests, idata), plots.residuals(ests[0], data),
                    plots.study(StudyResult(_study_frame()))):
            assert len(plots.to_png_base64(fig, dpi=40)) > 1000


# --- log-normal noise: guides and bands on the noise model's scale ---------------------------------
LOG_LV = LV.model.with_observation(noise="log")


@pytest.fixture(scope="module")
def log_setup():
    t = np.linspace(0, 20, 201)
    data, _ = oi.simulate(LOG_LV, LV.params, LV.x0, t, noise={"prey": 0.1, "predator": 0.1}, rng=3)
    return data, oi.OrthogonalConditions().fit(LOG_LV, data)


def test_residual_guides_on_the_log_scale_for_a_log_noise_model(log_setup):
    """Multiplicative noise of sd 0.1: the log residuals spread about 0 +- 0.1 and the +-2 sigma
    guides sit near +-0.2 (not at +-2 sd of the counts), holding about 95% of the residuals."""
    data, oc = log_setup
    lines = plots.residual_lines(oc, data, x0=LV.x0)  # the true x0: OC does not estimate it
    fig = plots.residuals(oc, data, x0=LV.x0)
    pred = oc.predict(data.t, x0=LV.x0)
    for k, s in enumerate(data.states):
        r, guide = lines[s]
        np.testing.assert_allclose(r, np.log(data.y[:, k]) - np.log(pred.y[:, k]), rtol=1e-8, atol=1e-10)
        assert 0.14 < guide < 0.28
        assert guide == pytest.approx(2 * oc.sigma[s])
        assert np.mean(np.abs(r) <= guide) > 0.85
        ax = fig.axes[k]
        assert ax.get_ylabel() == f"log residual {s}"
        np.testing.assert_allclose(ax.lines[0].get_ydata(), r)
        assert [ln.get_ydata()[0] for ln in ax.lines[2:]] == pytest.approx([-guide, guide])


def test_prediction_bands_of_a_log_noise_model_are_log_normal(log_setup):
    """The band of log y mapped back: y exp(-+ z se / y), positive and symmetric on the log scale;
    with the same covariance, the additive model's band goes below zero."""
    from statistics import NormalDist

    data, oc = log_setup
    t = np.linspace(0, 20, 101)
    x0 = {s: data.y[0, i] for i, s in enumerate(data.states)}
    pred = oc.predict(t, x0=x0)
    z = NormalDist().inv_cdf(0.975)
    assert np.all(pred.lower > 0)
    np.testing.assert_allclose(np.log(pred.upper / pred.y), z * pred.se / pred.y, rtol=1e-12)
    np.testing.assert_allclose(np.log(pred.y / pred.lower), z * pred.se / pred.y, rtol=1e-12)
    # a wide covariance: the additive band crosses zero, the log-normal one cannot
    names = list(LV.model.params) + ["x0[prey]", "x0[predator]"]
    vals = list(LV.params_array()) + [LV.x0["prey"], LV.x0["predator"]]
    cov = np.diag([0.01, 1e-5, 0.01, 1e-5, 25.0, 4.0])
    wide = oi.Estimate("Hand", LOG_LV, names, vals, cov, "converged").predict(t)
    add = oi.Estimate("Hand", LV.model, names, vals, cov, "converged").predict(t)
    np.testing.assert_allclose(wide.se, add.se)
    np.testing.assert_allclose(add.lower, add.y - z * add.se)
    assert add.lower.min() < 0 < wide.lower.min()
    np.testing.assert_allclose(wide.lower * wide.upper, wide.y ** 2, rtol=1e-12)
