"""Maximum a posteriori (MAP) fits: Embedding().fit(problem, priors=...) minimises the negative
log-likelihood plus the priors' negative log densities.

References, independent of odeinfer's code:
* a linear-Gaussian model (y = a + b t, known noise sd, normal priors on a and b): the posterior is
  Gaussian, its mode and covariance in closed form (ridge regression with a prior mean:
  ``(X'X / s^2 + P)^-1 (X'y / s^2 + P m)`` and ``(X'X / s^2 + P)^-1``); the likelihood and prior
  terms from scipy.stats' log densities;
* a nonlinear PEtab problem with objective priors (Perelson, from tests/data/petab, with
  hand-written parameter tables): scipy.optimize.minimize (L-BFGS-B) over the same objective, and
  central finite differences of the objective at the MAP point (stationarity) and of Boehm's
  objective with priors at a point away from the optimum (the exact gradient).
"""

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.petab.priors import Prior

PETAB = Path(__file__).parent / "data" / "petab"


@oi.model(states=["x"], params=["b"])
def ramp(t, y, p):
    return {"x": p.b}


LINE = ramp.observe({"y": "a + x"}, noise=oi.Normal(sigma="sd"), params=["a", "sd"])
T = np.linspace(0.0, 2.0, 9)
SD = 0.4
PRIOR_MEAN, PRIOR_SD = np.array([0.5, 1.0]), np.array([0.3, 0.2])  # a, b: deliberately informative


def line_problem():
    rng = np.random.default_rng(11)
    y = 1.1 + 0.6 * T + SD * rng.standard_normal(T.size)  # the truth is away from the prior means
    params = {"a": oi.Param(0.0, -10.0, 10.0), "b": oi.Param(0.0, -10.0, 10.0), "sd": oi.Param(SD, estimate=False)}
    return oi.FitProblem(LINE, oi.Experiments([oi.Data(T, y, "y", name="e")]), params, x0={"x": 0.0}), y


def test_map_of_a_linear_gaussian_model_is_the_closed_form_posterior_mode():
    problem, y = line_problem()
    priors = {"a": Prior("normal", PRIOR_MEAN[0], PRIOR_SD[0]), "b": Prior("normal", PRIOR_MEAN[1], PRIOR_SD[1])}
    fit = oi.Embedding().fit(problem, start={"a": 0.0, "b": 0.0}, priors=priors)
    assert fit.converged, fit.message
    X = np.column_stack([np.ones_like(T), T])
    P = np.diag(1 / PRIOR_SD**2)
    A = X.T @ X / SD**2 + P
    mode = np.linalg.solve(A, X.T @ y / SD**2 + P @ PRIOR_MEAN)
    np.testing.assert_allclose(fit.params[["a", "b"]].to_numpy(), mode, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(fit.cov_params().loc[["a", "b"], ["a", "b"]].to_numpy(), np.linalg.inv(A), rtol=1e-5)
    theta = fit.params[["a", "b"]].to_numpy()  # the reported terms are scipy's log densities at the estimate
    nll = -stats.norm(X @ theta, SD).logpdf(y).sum()
    prior_nll = -stats.norm(PRIOR_MEAN, PRIOR_SD).logpdf(theta).sum()
    assert fit.nll == pytest.approx(nll, rel=1e-8)
    assert fit.extras["prior_nll"] == pytest.approx(prior_nll, rel=1e-8)
    assert fit.extras["objective"] == pytest.approx(nll + prior_nll, rel=1e-8)
    assert fit.cost == fit.extras["objective"]
    assert fit.extras["objective_kind"].startswith("negative log-posterior")
    assert "negative log-posterior" in fit.summary()
    back = oi.Estimate.from_json(fit.to_json(), model=LINE)  # the parts survive a round trip
    assert back.extras["prior_nll"] == fit.extras["prior_nll"] and back.extras["objective"] == fit.cost
    # the negative log-posterior is exactly quadratic here: its profile interval is mode +- z sqrt(A^-1_ii)
    half = stats.norm.ppf(0.975) * np.sqrt(np.diag(np.linalg.inv(A)))
    prof = fit.conf_int(method="profile").loc[["a", "b"]]
    np.testing.assert_allclose(prof["lower"].to_numpy(), mode - half, atol=1e-4)
    np.testing.assert_allclose(prof["upper"].to_numpy(), mode + half, atol=1e-4)
    starts = fit.extras["starts"]
    assert starts["objective"][0] == pytest.approx(starts["nll"][0] + starts["prior_nll"][0], rel=1e-12)
    # the maximum-likelihood fit is ordinary least squares, away from the MAP (the priors pull)
    ml = oi.Embedding().fit(problem, start={"a": 0.0, "b": 0.0})
    np.testing.assert_allclose(ml.params[["a", "b"]].to_numpy(), np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-6)
    assert "prior_nll" not in ml.extras and ml.extras["objective"] == ml.nll
    assert ml.extras["objective_kind"] == "negative log-likelihood"
    assert np.max(np.abs(ml.params[["a", "b"]].to_numpy() - mode)) > 0.1


HEADER = ("parameterId\tparameterName\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\t"
          "objectivePriorType\tobjectivePriorParameters")


def with_priors(tmp_path, name, priors):
    """A copy of problem ``name`` whose parameter table gets objective priors ``{id: (type, "a;b")}``."""
    folder = tmp_path / name
    shutil.copytree(PETAB / name, folder)
    table = folder / f"parameters_{name}.tsv"
    rows = [line.split("\t") for line in table.read_text().splitlines()]
    head = rows[0]
    lines = [HEADER]
    for r in rows[1:]:
        d = dict(zip(head, r))
        kind, text = priors.get(d["parameterId"], ("", ""))
        lines.append("\t".join([d[k] for k in HEADER.split("\t")[:7]] + [kind, text]))
    table.write_text("\n".join(lines) + "\n")
    return oi.petab.load(folder / f"{name}.yaml")


PERELSON = {"c": ("parameterScaleNormal", "0.5;0.2"), "delta": ("logNormal", "-0.5;0.3"),
            "sd_task0_model0_perelson1_V": ("normal", "1e5;2e4")}


def test_map_of_a_petab_problem_matches_scipy_minimize_on_the_same_objective(tmp_path):
    pp = with_priors(tmp_path, "Perelson_Science1996", PERELSON)
    est = list(pp.problem.estimated)
    assert set(PERELSON) == set(est) == set(pp.objective_priors)
    fit = oi.Embedding().fit(pp, start=pp.nominal, priors=True)
    assert fit.converged, fit.message
    obj = pp.objective(priors=True)

    def fun(u):
        ev = obj(u)
        return (ev.nll, ev.grad) if ev.ok else (1e10, np.zeros(u.size))

    ref = optimize.minimize(fun, pp.u_nominal, jac=True, method="L-BFGS-B", bounds=list(zip(obj.lower, obj.upper)),
                            options={"ftol": 1e-15, "gtol": 1e-9, "maxiter": 5000})
    assert fit.extras["objective"] <= ref.fun + 1e-6
    np.testing.assert_allclose(fit.extras["u"], ref.x, atol=2e-3)
    u = fit.extras["u"]
    for k in range(u.size):  # stationarity by central differences of the objective (no bound is active)
        e = np.zeros(u.size)
        e[k] = 1e-5
        fd = (obj(u + e, grad=False).nll - obj(u - e, grad=False).nll) / 2e-5
        assert abs(fd) < 1e-3, (est[k], fd)
    assert fit.extras["prior_nll"] == pytest.approx(obj.prior_nll(u), rel=1e-12)
    assert fit.nll == pytest.approx(pp.objective()(u, grad=False).nll, rel=1e-10)
    assert fit.extras["prior_nll"] > 0 and fit.nll < pp.nll_nominal()


def test_the_gradient_of_boehm_with_objective_priors_matches_central_differences(tmp_path):
    priors = {"Epo_degradation_BaF3": ("parameterScaleNormal", "-1.5;0.5"), "k_exp_hetero": ("logNormal", "-11;2"),
              "k_phos": ("laplace", "15000;5000"), "sd_pSTAT5A_rel": ("logLaplace", "1;1")}
    pp = with_priors(tmp_path, "Boehm_JProteomeRes2014", priors)
    assert set(pp.objective_priors) == set(priors)
    obj = pp.objective(priors=True)
    u = np.clip(pp.u_nominal + np.linspace(-0.05, 0.05, pp.u_nominal.size), obj.lower + 0.01, obj.upper - 0.01)
    ev = obj(u)
    for k in range(u.size):
        h = 1e-5
        e = np.zeros(u.size)
        e[k] = h
        fd = (obj(u + e, grad=False).nll - obj(u - e, grad=False).nll) / (2 * h)
        assert ev.grad[k] == pytest.approx(fd, rel=1e-4, abs=1e-4), pp.problem.estimated[k]


def test_bad_priors_are_refused_before_any_work(tmp_path):
    problem, _ = line_problem()
    est = oi.Embedding()
    with pytest.raises(InputError, match=r"priors: priors=True takes the objective priors of a PEtab problem's "
                                         r"parameter table, but the model is a FitProblem"):
        est.fit(problem, priors=True)
    with pytest.raises(InputError, match=r"priors\['a'\]: expected an odeinfer.petab.priors.Prior, got tuple"):
        est.fit(problem, priors={"a": ("normal", 0.0, 1.0)})
    with pytest.raises(InputError, match=r"priors: 'sd' is not an estimated parameter of the problem \['b', 'a'\]"):
        est.fit(problem, priors={"sd": Prior("normal", 0.0, 1.0)})
    with pytest.raises(InputError, match=r"priors\['b'\]: the prior is for a parameter on the 'log10' scale, but b "
                                         r"is estimated on the 'lin' scale; build it with Prior\(..., scale='lin'\)"):
        est.fit(problem, priors={"b": Prior("normal", 0.0, 1.0, "log10")})
    with pytest.raises(InputError, match=r"priors: expected None, True or a dict"):
        est.fit(problem, priors="normal")
    pp = oi.petab.load(PETAB / "Boehm_JProteomeRes2014" / "Boehm_JProteomeRes2014.yaml")
    with pytest.raises(InputError, match=r"priors: priors=True, but the parameter table of PEtab problem "
                                         r"'Boehm_JProteomeRes2014' gives no objective priors"):
        est.fit(pp, priors=True)
    z = oi.zoo.get("lotka_volterra")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=0.5, rng=1)
    with pytest.raises(InputError, match=r"priors: a MAP fit needs a likelihood"):
        est.fit(z.model, data, start=z.params, priors={"alpha": Prior("normal", 0.5, 0.1)})


def test_fit_command_with_priors_reports_both_parts(tmp_path, capsys):
    from odeinfer.cli import main

    pp = with_priors(tmp_path, "Perelson_Science1996", PERELSON)
    yaml = tmp_path / "Perelson_Science1996" / "Perelson_Science1996.yaml"
    out = tmp_path / "r.html"
    assert main(["fit", str(yaml), "-o", str(out), "--starts", "1", "--priors"]) == 0
    said = capsys.readouterr().out
    assert "negative log-posterior" in said and "(NLL + the priors'" in said
    assert "Maximum a posteriori fit" in out.read_text()
    plain = oi.petab.load(PETAB / "Boehm_JProteomeRes2014" / "Boehm_JProteomeRes2014.yaml")
    assert not plain.objective_priors and pp.objective_priors
    boehm = PETAB / "Boehm_JProteomeRes2014" / "Boehm_JProteomeRes2014.yaml"
    assert main(["fit", str(boehm), "-o", str(out), "--starts", "1", "--priors"]) == 1
    assert "gives no objective priors" in capsys.readouterr().err
