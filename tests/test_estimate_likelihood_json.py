"""JSON round trip of likelihood fits (issue 14, item 7): the observables, noise models and fit problem
(experiments, conditions, parameter table, solver) come back, so ``predict`` and profiles work after
reloading and give what they gave before (the same objective rebuilt from the same numbers: equal to
rounding, rtol 1e-10). Tampered files are refused with a ResultFileError (expressions are parsed by
the equation whitelist, never evaluated)."""

import json

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError, ResultFileError


@oi.model(states=["a", "b"], params=["k1", "k2"])
def chain(t, y, p):
    return {"a": -p.k1 * y.a, "b": p.k1 * y.a - p.k2 * y.b}


OBS = chain.observe({"signal": "s * b", "total": "a + b"},
                    noise={"signal": oi.Normal(sigma="sd"), "total": oi.Normal(sigma=0.05, scale="log")},
                    params=["s", "sd"])
T = np.linspace(0.5, 8.0, 25)


def _closed_b(k1, k2, t):
    return k1 / (k2 - k1) * (np.exp(-k1 * t) - np.exp(-k2 * t))


@pytest.fixture(scope="module")
def fit():
    rng = np.random.default_rng(5)
    data = []
    for name, k2 in (("A", 0.25), ("B", 0.6)):
        b = 3.0 * _closed_b(0.9, k2, T) + 0.08 * rng.standard_normal(T.size)
        a = np.exp(-0.9 * T)
        total = (a + _closed_b(0.9, k2, T)) * np.exp(0.05 * rng.standard_normal(T.size))
        y = np.column_stack([b, total])
        y[3, 1] = np.nan  # a missing value travels as NaN
        data.append(oi.Data(T, y, ["signal", "total"], name=name))
    conds = {"A": oi.Condition(params={"k2": "k2_A"}),
             "B": oi.Condition(params={"k2": "k2_B"}, x0={"a": "a0_B"}, t0=0.0)}
    exps = oi.Experiments(data, conditions=conds)
    params = {"k1": oi.Param(1.0, 1e-3, 1e2, "log10"), "k2_A": oi.Param(0.3, 1e-3, 1e2, "log10"),
              "k2_B": oi.Param(0.5, 1e-3, 1e2, "log"), "s": oi.Param(2.0, 1e-2, 1e2),
              "sd": oi.Param(0.1, 1e-4, 10, "log10"), "a0_B": 1.0}
    problem = oi.FitProblem(OBS, exps, params, x0={"a": 1.0, "b": 0.0})
    est = oi.Embedding(solver=oi.Dopri5(rtol=1e-9, atol=1e-11)).fit(problem)
    assert est.converged, est.message
    return est


def test_predict_after_reload_equals_predict_before(fit, tmp_path):
    path = tmp_path / "fit.json"
    fit.to_json(path)
    for back in (oi.Estimate.from_json(path), oi.Estimate.from_json(fit.to_json(), model=OBS)):
        assert back.model.observable_names == ("signal", "total")
        assert [o.noise.as_dict() for o in back.model.observables] == [o.noise.as_dict() for o in OBS.observables]
        assert back._objective.problem.experiments.conditions["B"].x0 == {"a": "a0_B"}
        assert repr(back._objective.solver) == repr(fit._objective.solver)
        for exp in ("A", "B"):
            t = np.linspace(0.0, 9.0, 37)
            p0, p1 = fit.predict(t, experiment=exp), back.predict(t, experiment=exp)
            assert p1.states == p0.states
            for a, b in ((p0.y, p1.y), (p0.se, p1.se), (p0.lower, p1.lower), (p0.upper, p1.upper)):
                np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-14)
        # the rebuilt objective has the fit's value at the estimate
        assert back._objective(np.asarray(back.extras["u"], float)).nll == pytest.approx(fit.cost, rel=1e-10)


def test_profile_after_reload_equals_profile_before(fit):
    back = oi.Estimate.from_json(fit.to_json())
    ci0 = fit.conf_int(method="profile")
    ci1 = back.conf_int(method="profile")
    np.testing.assert_allclose(ci1.to_numpy(), ci0.to_numpy(), rtol=1e-6)


def test_model_with_other_observables_is_refused(fit):
    other = chain.observe({"signal": "s * b"}, noise=oi.Normal(sigma="sd"), params=["s", "sd"])
    with pytest.raises(InputError, match=r"fitted with the observables \['signal', 'total'\], but the given model "
                                         r"'chain' has \['signal'\]"):
        oi.Estimate.from_json(fit.to_json(), model=other)
    with pytest.raises(InputError, match=r"has \[\] \(or other expressions"):
        oi.Estimate.from_json(fit.to_json(), model=chain)


@pytest.mark.parametrize("tamper, match", [
    (lambda d: d["model"]["observables"]["observables"][0].update(expr="__import__('os').getcwd()"),
     r"its observables cannot be rebuilt \(EquationParseError"),
    (lambda d: d["model"]["observables"]["observables"][0]["noise"].update(distribution="cauchy"),
     r"the noise of observable 'signal' is 'cauchy'"),
    (lambda d: d["problem"]["solver"].update(method="lsoda"), r"unknown solver method 'lsoda'"),
    (lambda d: d["problem"]["solver"].update(rtol="1e-3"), r"solver options \['rtol'\] must be numbers"),
    (lambda d: d["problem"]["experiments"][1]["condition"]["params"].update(k2="os.system('x')"),
     r"fit problem .* cannot be rebuilt"),
    (lambda d: d["problem"]["parameters"]["k1"].__setitem__(4, "yes"), r"'estimate' must be true or false"),
    (lambda d: d["problem"].pop("x0"), r"cannot be rebuilt \(KeyError"),
    (lambda d: d["names"].reverse(), r"the stored problem estimates"),
])
def test_tampered_problem_is_a_result_file_error(fit, tamper, match):
    d = json.loads(fit.to_json())
    tamper(d)
    with pytest.raises(ResultFileError, match=match):
        oi.Estimate.from_json(json.dumps(d))


@pytest.mark.parametrize("name", ["Zheng_PNAS2012", "Fujita_SciSignal2010"])
def test_petab_problem_round_trip(name):
    """PEtab problems with pre-equilibration (Zheng) and condition inputs (Fujita): the estimate at the
    nominal parameters, written and read back, predicts every experiment as before."""
    from pathlib import Path

    pp = oi.petab.load(Path(__file__).parent / "data" / "petab" / name / f"{name}.yaml")
    obj = pp.objective(oi.Rodas(rtol=1e-8, atol=1e-10))
    u = np.asarray(pp.u_nominal, float)
    ev = obj(u, grad=False)
    assert ev.ok, ev.failure
    names = pp.problem.estimated
    est = oi.Estimate("Embedding", pp.problem.model, names, obj.natural(u)[obj.est_index], None, "converged",
                      cost=ev.nll, fixed={n: pp.problem.params[n].value for n in pp.problem.names if n not in names},
                      extras={"u": u, "scales": dict(zip(names, obj.scales))})
    object.__setattr__(est, "_objective", obj)
    back = oi.Estimate.from_json(est.to_json())
    assert back._objective(u, grad=False).nll == pytest.approx(ev.nll, rel=1e-10)
    for plan in pp.problem.plans:
        t = np.linspace(plan.t0, float(plan.t_rows.max()), 9)
        np.testing.assert_allclose(back.predict(t, experiment=plan.name).y, est.predict(t, experiment=plan.name).y,
                                   rtol=1e-10, atol=1e-12)
