"""Observables, noise models, conditions, doses, inputs and pre-equilibration: the likelihood
of a FitProblem against independent references.

References: hand-written scipy.stats log densities on models whose solutions the solver
reproduces exactly (x' = k gives x0 + k t, a polynomial that Dormand-Prince integrates without
error); the closed-form (Bateman) solution of a one-compartment model with repeated oral doses;
steady states from scipy.optimize.root; gradients against central finite differences.
"""

import math
import re

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import root

import odeinfer as oi
from likelihood_reference import fd_grad
from odeinfer.errors import DataError, EquationParseError, InputError, ModelDefinitionError


@oi.model(states=["x"], params=["k"])
def ramp(t, y, p):
    return {"x": p.k}


T = np.array([0.5, 1.0, 2.0, 3.0, 5.0])
Y = np.array([1.3, 1.45, 2.2, 2.45, 3.6])


def _nll_ref(dist, scale, h, sigma):
    """PEtab's NLL of Y given predictions h, from scipy.stats (independent of odeinfer)."""
    z = {"lin": lambda v: v, "log": np.log, "log10": np.log10}[scale]
    jac = {"lin": 0.0, "log": np.log(Y), "log10": np.log(Y * np.log(10))}[scale]
    law = stats.norm if dist == "normal" else stats.laplace
    return float(np.sum(-law.logpdf(z(Y), loc=z(h), scale=sigma) + jac))


@pytest.mark.parametrize("dist", ["normal", "laplace"])
@pytest.mark.parametrize("scale", ["lin", "log", "log10"])
def test_nll_matches_scipy_for_every_noise_model(dist, scale):
    noise = (oi.Normal if dist == "normal" else oi.Laplace)(sigma="a + b*sig", scale=scale)
    m = ramp.observe({"sig": "s*x + off"}, noise=noise, params=["s", "off", "a", "b"])
    d = oi.Data(T, Y, "sig")
    vals = {"k": 0.5, "s": 1.2, "off": 0.1, "a": 0.05, "b": 0.02}
    prob = oi.FitProblem(m, d, {n: oi.Param(v) for n, v in vals.items()}, x0={"x": 1.0})
    obj = oi.Objective(prob)
    u = prob.nominal(prob.estimated)
    h = 1.2 * (1.0 + 0.5 * T) + 0.1
    ref = _nll_ref(dist, scale, h, 0.05 + 0.02 * h)
    assert obj(u).nll == pytest.approx(ref, rel=1e-10, abs=1e-10)
    assert obj.value(u).nll == pytest.approx(ref, rel=1e-10, abs=1e-10)  # the states alone: the same ramp


@pytest.mark.parametrize("u, got", [(np.zeros(3), "shape (3,)"), ("abc", "a str that is not numeric"),
                                    ([[1.0, 2.0]], "shape (1, 2)"), (None, "shape ()")])
def test_a_parameter_vector_of_the_wrong_size_or_kind_is_refused(u, got):
    m = ramp.observe({"sig": "s*x"}, noise=oi.Normal(sigma=0.1), params=["s"])
    prob = oi.FitProblem(m, oi.Data(T, Y, "sig"), {"k": oi.Param(0.5), "s": oi.Param(1.2)}, x0={"x": 1.0})
    obj = oi.Objective(prob)
    for call in (obj, obj.value, obj.predictions):
        with pytest.raises(InputError, match=rf"u: expected 2 numbers, the estimated parameters \['k', 's'\].*got "
                                             rf"{re.escape(got)}; pass one value per name"):
            call(u)


@oi.model(states=["a", "b"], params=["k1", "k2", "u"])
def chain(t, y, p):
    return {"a": p.u - p.k1 * y.a, "b": p.k1 * y.a - p.k2 * y.b}


def test_gradient_with_observables_noise_params_log10_scales_doses_and_step_and_linear_inputs():
    m = chain.observe({"tot": "s*(a + b)", "frac": "b/(a + b)"},
                      noise={"tot": oi.Normal(sigma="sd", scale="log10"), "frac": oi.Laplace(sigma=0.05)},
                      params=["s", "sd"])
    t = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 6.0])
    y = np.c_[[1.1, 1.4, 1.6, 1.8, 1.7, 1.5], [0.2, 0.35, 0.5, 0.55, 0.62, 0.7]]
    e1 = oi.Data(t, y, ["tot", "frac"], name="e1")
    e2 = oi.Data(t, y * [1.3, 1.0], ["tot", "frac"], name="e2")
    conds = {
        "e1": oi.Condition(doses=[oi.Dose(2.5, "a", "dose")]),
        "e2": oi.Condition(params={"k1": "k1 * fold", "u": oi.Input([0.0, 1.5, 3.5], [0.2, 0.6, 0.1])},
                           x0={"a": "a0", "b": 0.1}),
    }
    e3 = oi.Data(t, y * [0.9, 1.0], ["tot", "frac"], name="e3")
    conds["e3"] = oi.Condition(params={"u": oi.Input([0.0, 2.0, 5.0], [0.1, 0.8, 0.3], kind="linear")})
    exps = oi.Experiments([e1, e2, e3], conditions=conds)
    params = {"k1": oi.Param(0.7, 1e-3, 1e3, "log10"), "k2": oi.Param(0.3, 1e-3, 1e3, "log"),
              "u": oi.Param(0.4, 0, 10), "s": oi.Param(1.5, 1e-2, 1e2, "log10"), "sd": oi.Param(0.1, 1e-3, 1, "log10"),
              "dose": oi.Param(0.8, 0, 5), "fold": oi.Param(1.4, 0.1, 10, "log"), "a0": oi.Param(0.5, 0, 5)}
    prob = oi.FitProblem(m, exps, params, x0={"a": 0.3, "b": 0.0})
    assert set(prob.estimated) == set(params)
    obj = oi.Objective(prob, solver=oi.Dopri5(rtol=1e-11, atol=1e-13))
    u = np.array([math.log10(0.7), math.log(0.3), 0.4, math.log10(1.5), math.log10(0.1), 0.8, math.log(1.4), 0.5])
    ev = obj(u)
    assert ev.ok
    fd = fd_grad(obj, u)
    np.testing.assert_allclose(ev.grad, fd, rtol=2e-6, atol=2e-6)
    # the adjoint back through the doses, inputs, conditions and observables: Dormand-Prince's continuous adjoint
    # and the discrete adjoint of Rodas
    for solver in (oi.Dopri5(rtol=1e-11, atol=1e-13), oi.Rodas(rtol=1e-11, atol=1e-13)):
        adj = oi.Objective(prob, solver=solver, gradient=oi.Adjoint())(u)
        assert adj.ok and adj.fim is None and adj.nll == pytest.approx(ev.nll, rel=1e-9)
        np.testing.assert_allclose(adj.grad, fd, rtol=2e-6, atol=2e-6)
    # the Fisher information is symmetric positive semi-definite
    np.testing.assert_allclose(ev.fim, ev.fim.T, atol=1e-12)
    assert np.linalg.eigvalsh(ev.fim).min() > -1e-9


def test_condition_mappings_are_built_once_and_equal_each_experiments_own_expressions():
    """The mapped vectors and Jacobians that ConditionMapping evaluates once for all experiments equal
    each experiment's own expressions evaluated by sympy (``subs``, then ``evalf``; the Jacobian by
    ``diff``); the experiments share their distinct expressions (here an initial-state formula)."""
    import sympy as sp

    from odeinfer.likelihood.mapping import ConditionMapping

    m = chain.observe({"tot": "a + b"}, noise=oi.Normal(sigma=0.1))
    t = np.array([0.5, 1.0, 2.0])
    exps = oi.Experiments([oi.Data(t, np.ones(3), "tot", name=n) for n in ("e1", "e2", "e3")], conditions={
        "e1": oi.Condition(), "e2": oi.Condition(params={"k1": "k1 * fold"}),
        "e3": oi.Condition(params={"u": 0.25}, x0={"b": "sqrt(k2) * a0"})})
    params = {"k1": oi.Param(0.7), "k2": oi.Param(0.3), "u": oi.Param(0.4), "fold": oi.Param(1.4),
              "a0": oi.Param(0.5, estimate=False)}
    prob = oi.FitProblem(m, exps, params, x0={"a": "a0 * exp(-k2)", "b": 0.0})
    mapping = ConditionMapping(prob)
    values = {"k1": 0.71, "k2": 0.33, "u": 0.42, "fold": 1.37, "a0": 0.55}
    theta = np.array([values[n] for n in prob.names])
    at = {prob.symbols[n]: float(theta[i]) for i, n in enumerate(prob.names)}
    est = [prob.symbols[n] for n in prob.estimated]
    distinct = {e for plan in prob.plans for e in plan.exprs}
    assert len(distinct) < sum(len(plan.exprs) for plan in prob.plans)
    for plan in prob.plans:
        v, J = mapping.at(theta, mapping.rows(plan))
        want_v = [float(sp.sympify(e).subs(at).evalf()) for e in plan.exprs]
        want_J = [[float(sp.diff(e, s).subs(at).evalf()) for s in est] for e in plan.exprs]
        np.testing.assert_allclose(v, want_v, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(J, want_J, rtol=1e-14, atol=1e-15)


def test_repeated_oral_doses_match_the_bateman_solution():
    @oi.model(states=["gut", "central"], params=["ka", "ke"])
    def pk(t, y, p):
        return {"gut": -p.ka * y.gut, "central": p.ka * y.gut - p.ke * y.central}

    m = pk.observe({"conc": "central / V"}, noise=oi.Normal(sigma=0.1), params=["V"])
    t = np.array([1.0, 3.0, 6.0, 11.9, 12.0, 13.0, 18.0, 24.0, 30.0, 47.0])
    doses = [oi.Dose(0.0, "gut", "D"), oi.Dose(12.0, "gut", "D"), oi.Dose(24.0, "gut", "D")]
    exps = oi.Experiments([oi.Data(t, np.ones_like(t), "conc", name="pk")],
                          conditions={"pk": oi.Condition(doses=doses)})
    vals = dict(ka=1.1, ke=0.2, V=3.0, D=100.0)
    prob = oi.FitProblem(m, exps, {k: oi.Param(v) for k, v in vals.items()}, x0={"gut": 0.0, "central": 0.0})
    obj = oi.Objective(prob, solver=oi.Dopri5(rtol=1e-11, atol=1e-12))
    _, _, h = obj.predictions(prob.nominal(prob.estimated))["pk"]
    ka, ke, V, D = vals["ka"], vals["ke"], vals["V"], vals["D"]
    # closed form; a sample at a dose time is taken before that dose (t=12: the doses at 0 only)
    ref = sum(np.where(t > td, D * ka / (V * (ka - ke)) * (np.exp(-ke * (t - td)) - np.exp(-ka * (t - td))), 0.0)
              for td in (0.0, 12.0, 24.0))
    np.testing.assert_allclose(h, ref, rtol=1e-8)


@oi.model(states=["x", "y"], params=["a", "b", "c", "d", "e"])
def feedback(t, y, p):
    return {"x": p.a - p.b * y.x - p.c * y.x * y.y, "y": p.d * y.x - p.e * y.y}


def _root_ss(a, b, c, d, e):
    f = lambda z: [a - b * z[0] - c * z[0] * z[1], d * z[0] - e * z[1]]  # noqa: E731
    sol = root(f, [1.0, 1.0], method="hybr", options={"xtol": 1e-15})
    assert np.max(np.abs(f(sol.x))) < 1e-14
    return sol.x


def test_preequilibration_matches_scipy_root_and_its_sensitivities():
    m = feedback.observe({"xo": "x", "yo": "y"}, noise=oi.Normal(sigma=0.1))
    vals = dict(a=2.0, b=0.5, c=0.3, d=0.8, e=0.6)
    # pre-condition: a = 2; main condition: a = 0.5 from the steady state; observed at t0 = 0 too
    t = np.array([0.0, 1.0, 2.0])
    cond = oi.Condition(params={"a": "a_main"}, preequilibrate=oi.Condition())
    exps = oi.Experiments([oi.Data(t, np.ones((3, 2)), ["xo", "yo"], name="e")], conditions={"e": cond})
    params = {**{k: oi.Param(v) for k, v in vals.items()}, "a_main": oi.Param(0.5)}
    prob = oi.FitProblem(m, exps, params, x0={"x": 0.1, "y": 0.1})
    obj = oi.Objective(prob)
    u = prob.nominal(prob.estimated)
    t_rows, which, h = obj.predictions(u)["e"]
    ss = _root_ss(**vals)
    at0 = t_rows == 0.0
    np.testing.assert_allclose(h[at0 & (which == "xo")], ss[0], rtol=1e-7)
    np.testing.assert_allclose(h[at0 & (which == "yo")], ss[1], rtol=1e-7)
    # sensitivities of the steady state: compare d x_ss / d(a, b, c, d, e) with differences of root
    steady = obj.steady
    p = np.array(list(vals.values()))
    res = steady(p, np.array([0.1, 0.1]), np.eye(5), np.zeros((2, 5)))
    xs, dxs = res
    for j in range(5):
        hstep = 1e-6 * p[j]
        up, dn = p.copy(), p.copy()
        up[j] += hstep
        dn[j] -= hstep
        fd = (_root_ss(*up) - _root_ss(*dn)) / (2 * hstep)
        np.testing.assert_allclose(dxs[:, j], fd, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(obj(u).grad, fd_grad(obj, u), rtol=1e-5, atol=1e-6)


def test_experiments_with_one_pre_condition_share_its_steady_state():
    # three experiments pre-equilibrated under the same condition (as PEtab's Brannmark_JBC2010's eight
    # are): one integration per evaluation (of the states alone for predictions, with the sensitivities for the
    # gradient), and the same steady state as scipy's root for each
    m = feedback.observe({"xo": "x"}, noise=oi.Normal(sigma=0.1))
    vals = dict(a=2.0, b=0.5, c=0.3, d=0.8, e=0.6)
    t = np.array([0.0, 1.0])
    names = ["e1", "e2", "e3"]
    conds = {n: oi.Condition(params={"a": f"a_{n}"}, preequilibrate=oi.Condition()) for n in names}
    exps = oi.Experiments([oi.Data(t, np.ones(2), "xo", name=n) for n in names], conditions=conds)
    params = {**{k: oi.Param(v) for k, v in vals.items()}, **{f"a_{n}": oi.Param(0.5 + i) for i, n in enumerate(names)}}
    prob = oi.FitProblem(m, exps, params, x0={"x": 0.1, "y": 0.1})
    obj = oi.Objective(prob)
    calls = []
    for name in ("_integrate", "_run_states"):
        run = getattr(obj.steady, name)
        setattr(obj.steady, name, lambda *args, run=run, name=name, **kw: calls.append(name) or run(*args, **kw))
    u = prob.nominal(prob.estimated)
    preds = obj.predictions(u)
    assert calls == ["_run_states"]
    for n in names:
        t_rows, _, h = preds[n]
        np.testing.assert_allclose(h[t_rows == 0.0], _root_ss(**vals)[0], rtol=1e-7)
    calls.clear()
    grad = obj(u).grad
    assert calls == ["_integrate"]
    np.testing.assert_allclose(grad, fd_grad(obj, u), rtol=1e-5, atol=1e-6)


def test_preequilibration_with_a_conservation_law_keeps_the_total():
    @oi.model(states=["A", "B"], params=["kf", "kb"])
    def iso(t, y, p):
        return {"A": -p.kf * y.A + p.kb * y.B, "B": p.kf * y.A - p.kb * y.B}

    m = iso.observe({"Ao": "A"}, noise=oi.Normal(sigma=0.1))
    cond = oi.Condition(preequilibrate=oi.Condition(x0={"A": "tot", "B": 0.0}))
    exps = oi.Experiments([oi.Data([0.0], [1.0], "Ao", name="e")], conditions={"e": cond})
    prob = oi.FitProblem(m, exps, {"kf": oi.Param(2.0), "kb": oi.Param(1.0), "tot": oi.Param(3.0)},
                         x0={"A": 0.0, "B": 0.0})
    obj = oi.Objective(prob)
    (_, _, h), = obj.predictions(prob.nominal(prob.estimated)).values()
    assert h[0] == pytest.approx(3.0 * 1.0 / 3.0, rel=1e-7)  # A_ss = tot kb / (kf + kb)
    u = prob.nominal(prob.estimated)
    np.testing.assert_allclose(obj(u).grad, fd_grad(obj, u), rtol=1e-5, atol=1e-6)


def test_preequilibration_of_a_model_whose_step_time_the_conditions_fix():
    # x' = a - x + k [t <= t_end]: t_end moves a jump of the right-hand side, but every condition
    # fixes it (as PEtab's Brannmark_JBC2010 fixes its insulin step times), so neither the
    # pre-equilibration nor the main solve needs its sensitivity. Pre-equilibrated with t_end = 0:
    # x_ss = a; then x = a + k (1 - exp(-t)) up to t_end = 1.5, and decays back to a after it.
    @oi.model(states=["x"], params=["a", "k", "t_end"])
    def pulse(t, y, p):
        return {"x": p.a - y.x + oi.math.where(t <= p.t_end, p.k, 0.0)}

    assert pulse.switching_params == ("t_end",)
    m = pulse.observe({"obs": "x"}, noise=oi.Normal(sigma=0.1))
    cond = oi.Condition(params={"t_end": 1.5}, preequilibrate=oi.Condition(params={"t_end": 0.0}))
    exps = oi.Experiments([oi.Data(T, Y, "obs", name="e")], conditions={"e": cond})
    prob = oi.FitProblem(m, exps, {"a": oi.Param(1.2), "k": oi.Param(0.8)}, x0={"x": 0.0})
    obj = oi.Objective(prob, solver=oi.Rodas(rtol=1e-10, atol=1e-12))
    u = np.array([1.2, 0.8])
    ev = obj(u)
    assert ev.ok, ev.failure
    dh_dk = (1.0 - np.exp(-np.minimum(T, 1.5))) * np.where(T <= 1.5, 1.0, np.exp(-(T - 1.5)))
    h = 1.2 + 0.8 * dh_dk  # and dh/da = 1
    assert ev.nll == pytest.approx(-np.sum(stats.norm.logpdf(Y, h, 0.1)), rel=1e-7)
    r = (h - Y) / 0.1**2  # d nll / dh, closed form (central differences are poor across the jump)
    np.testing.assert_allclose(ev.grad, [r.sum(), (r * dh_dk).sum()], rtol=1e-6)


def test_preequilibration_that_does_not_converge_says_how_far_it_got():
    @oi.model(states=["x", "y"], params=["w"])
    def osc(t, y, p):
        return {"x": p.w * y.y, "y": -p.w * y.x}

    m = osc.observe({"xo": "x"}, noise=oi.Normal(sigma=0.1))
    exps = oi.Experiments([oi.Data([1.0], [1.0], "xo", name="e")],
                          conditions={"e": oi.Condition(preequilibrate=oi.Condition())})
    prob = oi.FitProblem(m, exps, {"w": oi.Param(1.0)}, x0={"x": 1.0, "y": 0.0})
    ev = oi.Objective(prob)(np.array([1.0]))
    assert not ev.ok
    assert "did not reach a steady state" in ev.failure and "times the tolerance" in ev.failure, ev.failure


# --- bad input ------------------------------------------------------------------------------
def test_observable_with_an_unknown_name_is_refused():
    with pytest.raises(EquationParseError, match=r"observables\['o'\].*unknown name 'z'"):
        ramp.observe({"o": "z*x"}, noise=oi.Normal(0.1))


def test_noise_sigma_that_is_not_positive_is_refused():
    with pytest.raises(ModelDefinitionError, match="positive finite number"):
        oi.Normal(sigma=-1.0)
    with pytest.raises(ModelDefinitionError, match="not positive"):
        ramp.observe({"o": "x"}, noise=oi.Normal(sigma="1 - 2"))


def test_noise_expression_non_positive_at_the_start_fails_with_its_value():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(sigma="a - 1"), params=["a"])
    prob = oi.FitProblem(m, oi.Data(T, Y, "o"), {"k": oi.Param(0.5), "a": oi.Param(0.5)}, x0={"x": 1.0})
    ev = oi.Objective(prob)(np.array([0.5, 0.5]))
    assert not ev.ok and "noise sd of 'o' is not positive" in ev.failure


def test_condition_overriding_an_unknown_parameter_is_refused():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(0.1))
    exps = oi.Experiments([oi.Data(T, Y, "o", name="e")], conditions={"e": oi.Condition(params={"kk": 1.0})})
    with pytest.raises(InputError, match=r"conditions\['e'\].params: \['kk'\] are not parameters"):
        oi.FitProblem(m, exps, x0={"x": 1.0})


def test_dose_outside_the_time_range_or_on_an_unknown_state_is_refused():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(0.1))
    for dose, match in ((oi.Dose(9.0, "x", 1.0), r"dose at t=9.0 lies outside"),
                        (oi.Dose(1.0, "q", 1.0), r"'q' is not a state")):
        exps = oi.Experiments([oi.Data(T, Y, "o", name="e")], conditions={"e": oi.Condition(doses=[dose])})
        with pytest.raises(InputError, match=match):
            oi.FitProblem(m, exps, x0={"x": 1.0})


def test_input_tables_with_unsorted_or_duplicated_times_are_refused():
    with pytest.raises(DataError, match="unsorted at positions 1 and 2"):
        oi.Input([0.0, 2.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(DataError, match="duplicated at positions 0 and 1"):
        oi.Input([0.0, 0.0], [1.0, 2.0])


def test_log_scale_parameters_need_positive_bounds_and_values():
    with pytest.raises(InputError, match="scale='log10' needs lower >= 0 and upper > 0"):
        oi.Param(1.0, -1.0, 10.0, "log10")
    with pytest.raises(InputError, match="scale='log' needs a positive value"):
        oi.Param(0.0, 0.0, 10.0, "log")


def test_log_scale_noise_with_non_positive_data_names_the_rows():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(0.1, scale="log"))
    d = oi.Data(T, np.r_[Y[:2], -1.0, 0.0, Y[4]], "o", name="e")
    prob = oi.FitProblem(m, d, {"k": oi.Param(0.5)}, x0={"x": 1.0})
    with pytest.raises(DataError, match=r"non-positive measurements in experiment 'e' at t=\[2.0, 3.0\]"):
        oi.Objective(prob)


def test_data_before_the_experiment_start_is_refused_not_shifted():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(0.1))
    exps = oi.Experiments([oi.Data(T, Y, "o", name="e")], conditions={"e": oi.Condition(t0=1.0)})
    with pytest.raises(DataError, match=r"measurements at t=0.5, before its start t0=1.0"):
        oi.FitProblem(m, exps, x0={"x": 1.0})


def test_data_starting_after_t0_starts_the_model_at_t0():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(0.1))
    prob = oi.FitProblem(m, oi.Data(T[2:], Y[2:], "o", name="e"), {"k": oi.Param(0.5)}, x0={"x": 1.0})
    _, _, h = oi.Objective(prob).predictions([0.5])["e"]
    np.testing.assert_allclose(h, 1.0 + 0.5 * T[2:], rtol=1e-12)  # from t0 = 0, not from t = 2


def test_parameters_table_must_match_the_problem():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(0.1))
    d = oi.Data(T, Y, "o")
    with pytest.raises(InputError, match=r"no entry for \['k'\]"):
        oi.FitProblem(m, d, {}, x0={"x": 1.0})
    with pytest.raises(InputError, match=r"\['zz'\] are used neither"):
        oi.FitProblem(m, d, {"k": 1.0, "zz": 2.0}, x0={"x": 1.0})


def test_model_without_observables_is_pointed_to_observe():
    with pytest.raises(InputError, match=r"has no observables; declare what is measured with model.observe"):
        oi.FitProblem(ramp, oi.Data(T, Y, "x"), x0={"x": 1.0})


def test_linear_input_matches_the_integral_of_the_interpolant():
    """x' = u(t) with u linear between knots: x(t) = x0 + integral of u (trapezoids), exact for the solver."""
    @oi.model(states=["x"], params=["u"])
    def integrator(t, y, p):
        return {"x": p.u}

    m = integrator.observe({"xo": "x"}, noise=oi.Normal(0.1))
    inp = oi.Input([1.0, 2.0, 4.0], [0.0, 2.0, -1.0], kind="linear")
    t = np.array([0.5, 1.5, 2.0, 3.0, 4.0, 5.0])
    exps = oi.Experiments([oi.Data(t, np.ones_like(t), "xo", name="e")],
                          conditions={"e": oi.Condition(params={"u": inp})})
    prob = oi.FitProblem(m, exps, {}, x0={"x": 0.5})
    assert prob.solve_model.params == ("u", "u__rate")
    obj = oi.Objective(prob)
    _, _, h = obj.predictions(np.zeros(0))["e"]
    # trapezoids on a grid holding every kink of u: exact for a piecewise linear integrand
    grids = [np.unique(np.r_[0.0, [k for k in inp.t if k < tk], tk]) for tk in t]
    integral = np.array([np.trapezoid(inp(g), g) for g in grids])
    np.testing.assert_allclose(h, 0.5 + integral, atol=1e-9)


def test_a_step_whose_end_each_condition_fixes_has_a_gradient():
    # x' = k until t_end, then 0 (a sharp step: t_end moves a jump of the right-hand side); each
    # experiment fixes t_end, so its sensitivity is not needed: x = x0 + k min(t, t_end)
    @oi.model(states=["x"], params=["k", "t_end"])
    def step(t, y, p):
        return {"x": oi.math.where(t <= p.t_end, p.k, 0.0)}

    m = step
    assert m.switching_params == ("t_end",)
    m = m.observe({"obs": "x"}, noise=oi.Normal(sigma=0.1))
    exps = oi.Experiments([oi.Data(T, Y, "obs", name="a"), oi.Data(T, Y[::-1], "obs", name="b")],
                          conditions={"a": oi.Condition(params={"t_end": 1.5}),
                                      "b": oi.Condition(params={"t_end": 2.5})})
    prob = oi.FitProblem(m, exps, {"k": oi.Param(0.7)}, x0={"x": 1.0})
    obj = oi.Objective(prob, solver=oi.Rodas(rtol=1e-10, atol=1e-12))
    ev = obj(np.array([0.7]))
    assert ev.ok, ev.failure
    ha, hb = 1.0 + 0.7 * np.minimum(T, 1.5), 1.0 + 0.7 * np.minimum(T, 2.5)
    ref = -np.sum(stats.norm.logpdf(Y, ha, 0.1)) - np.sum(stats.norm.logpdf(Y[::-1], hb, 0.1))
    grad = np.sum((ha - Y) * np.minimum(T, 1.5)) / 0.01 + np.sum((hb - Y[::-1]) * np.minimum(T, 2.5)) / 0.01
    assert ev.nll == pytest.approx(ref, rel=1e-7)
    assert ev.grad[0] == pytest.approx(grad, rel=1e-6)
    # estimated, t_end gets the jump term (a time switch): dh/dt_end = k [t > t_end], dh/dk = min(t, t_end)
    prob = oi.FitProblem(m, oi.Data(T, Y, "obs"), {"k": oi.Param(0.7), "t_end": oi.Param(1.5)}, x0={"x": 1.0})
    ev = oi.Objective(prob, solver=oi.Rodas(rtol=1e-10, atol=1e-12))(np.array([0.7, 1.5]))
    r = (ha - Y) / 0.01
    assert ev.nll == pytest.approx(-np.sum(stats.norm.logpdf(Y, ha, 0.1)), rel=1e-7)
    np.testing.assert_allclose(ev.grad, [np.sum(r * np.minimum(T, 1.5)), np.sum(r * 0.7 * (T > 1.5))], rtol=1e-6)


def test_predictions_of_experiments_that_share_a_trajectory():
    """Two experiments under the same condition (as a PEtab condition split by per-measurement noise
    parameters, SalazarCavazos_MBoC2020's) share one solve; their predictions and noise models are each
    their own rows of it. Reference: x' = k from x0 = 1 is x = 1 + k t, which the solver reproduces
    exactly (tolerance 1e-10 relative, fixed beforehand)."""
    m = ramp.observe({"o": "x"}, noise=oi.Normal(sigma="sd"), params=["sd"])
    t1, t2 = np.array([0.5, 2.0]), np.array([1.0, 2.0, 4.0])
    exps = oi.Experiments([oi.Data(t1, np.ones(2), "o", name="a"), oi.Data(t2, np.ones(3), "o", name="b")],
                          conditions={"a": oi.Condition(params={"sd": "sd_a"}),
                                      "b": oi.Condition(params={"sd": "sd_b"})})
    prob = oi.FitProblem(m, exps, {"k": oi.Param(0.5), "sd_a": oi.Param(0.1),
                                   "sd_b": oi.Param(0.3)}, x0={"x": 1.0})
    obj = oi.Objective(prob)
    assert obj.runs[1].share is obj.runs[0]  # the case under test: b follows a's solve
    u = prob.nominal(prob.estimated)
    preds = obj.predictions(u)
    for name, t in (("a", t1), ("b", t2)):
        t_rows, which, h = preds[name]
        np.testing.assert_array_equal(t_rows, t)
        assert list(which) == ["o"] * t.size
        np.testing.assert_allclose(h, 1.0 + 0.5 * t, rtol=1e-10)
    (ha, sda, *_), (hb, sdb, *_) = obj.noise_model_at(u)
    np.testing.assert_allclose(hb, 1.0 + 0.5 * t2, rtol=1e-10)
    np.testing.assert_allclose(sda, 0.1, rtol=1e-12)
    np.testing.assert_allclose(sdb, 0.3, rtol=1e-12)
