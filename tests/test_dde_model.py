"""DDE models: ``@oi.model(..., delays=[...])`` with ``om.lag``, derivatives, kernels, histories.

Reference values: hand-written formulas and complex-step derivatives of them.
"""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import EquationParseError, InputError, ModelDefinitionError
from odeinfer.model import History, Model
from odeinfer.model.lags import lag_symbol


@oi.model(states=["x", "v"], params=["a", "b", "tau1", "tau2"], delays=["tau1", "tau2"])
def osc(t, y, p):
    return {"x": y.v - p.a * om.lag(y.x, "tau1") * om.exp(-p.tau1),
            "v": -p.b * om.sin(y.x) * om.lag(y.v, p.tau2) + t * om.lag(y.x, "tau2") ** 2}


def osc_hand(t, y, ylag, p):
    """The same right-hand side written by hand; ylag[i, k] = y_i(t - tau_k)."""
    a, b, tau1, tau2 = p
    return np.array([y[1] - a * ylag[0, 0] * np.exp(-tau1),
                     -b * np.sin(y[0]) * ylag[1, 1] + t * ylag[0, 1] ** 2])


def _complex_step(fn, x, h=1e-30):
    x = np.asarray(x, dtype=complex)
    cols = []
    for j in range(x.size):
        xx = x.copy()
        xx[j] += 1j * h
        cols.append(np.imag(fn(xx)) / h)
    return np.stack(cols, axis=-1)


def test_model_records_delays_and_lags():
    assert osc.delays == ("tau1", "tau2") and osc.is_dde and osc.n_delays == 2
    assert osc.delay_indices == (2, 3)
    assert osc.lags == (("x", "tau1"), ("x", "tau2"), ("v", "tau2"))
    assert "x(t - tau1)" in repr(osc) and "delays=['tau1', 'tau2']" in repr(osc)
    assert lag_symbol("x", "tau1") in osc.exprs[0].free_symbols


def test_ode_models_are_unchanged():
    @oi.model(states=["x"], params=["k"])
    def decay(t, y, p):
        return {"x": -p.k * y.x}

    assert decay.delays == () and not decay.is_dde
    # the ODE fingerprint does not mention delays (cache keys of ODE models stay as they were)
    import hashlib

    import sympy as sp

    text = repr((decay.states, decay.params, tuple(sp.srepr(e) for e in decay.exprs)))
    assert decay.fingerprint == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert not hasattr(decay.compile().module, "dde_solve")


def test_compiled_kernels_match_hand_written_formulas_and_complex_step():
    cm = osc.compile()
    rng = np.random.default_rng(1)
    for _ in range(3):
        t = rng.uniform(0, 2)
        y, ylag, p = rng.normal(size=2), rng.normal(size=(2, 2)), rng.uniform(0.5, 2, size=4)
        np.testing.assert_allclose(cm.f(t, y, p, ylag), osc_hand(t, y, ylag, p), rtol=1e-13)
        np.testing.assert_allclose(cm.jac_y(t, y, p, ylag), _complex_step(lambda v: osc_hand(t, v, ylag, p), y),
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(cm.jac_p(t, y, p, ylag), _complex_step(lambda v: osc_hand(t, y, ylag, v), p),
                                   rtol=1e-12, atol=1e-14)
        jl = cm.jac_ylag(t, y, p, ylag)
        for k in range(2):
            def fk(col, k=k):
                yl = ylag.astype(complex).copy()
                yl[:, k] = col
                return osc_hand(t, y, yl, p)

            np.testing.assert_allclose(jl[k], _complex_step(fk, ylag[:, k]), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(osc.lambdify("f")(t, y, ylag, p), osc_hand(t, y, ylag, p), rtol=1e-13)


def test_from_equations_accepts_lag():
    m = Model.from_equations({"x": "r*x*(1 - lag(x, tau)/K)"}, params=["r", "K", "tau"], delays=["tau"])
    assert m.lags == (("x", "tau"),)
    np.testing.assert_allclose(m.compile().f(0.0, [2.0], [1.0, 4.0, 1.0], [[3.0]]), [2.0 * 0.25])


# bad input ------------------------------------------------------------------------------------


def test_delay_must_be_a_declared_parameter():
    with pytest.raises(ModelDefinitionError, match="delays: \\['tau'\\] is not a declared parameter"):
        oi.model(states=["x"], params=["r"], delays=["tau"])


def test_lag_with_an_unknown_delay_name():
    with pytest.raises(ModelDefinitionError, match="lag: the delay 'tua' is not a declared parameter"):
        @oi.model(states=["x"], params=["r", "tau"], delays=["tau"])
        def bad(t, y, p):
            return {"x": -p.r * om.lag(y.x, "tua")}


def test_parameter_used_as_delay_must_be_listed_in_delays():
    with pytest.raises(ModelDefinitionError, match="'s' is used as a delay but is not listed in delays"):
        @oi.model(states=["x"], params=["r", "s", "tau"], delays=["tau"])
        def bad(t, y, p):
            return {"x": -p.r * om.lag(y.x, "s") + om.lag(y.x, "tau")}


@pytest.mark.parametrize("delay", ["expr", "time"])
def test_non_constant_delay_is_not_supported_yet(delay):
    with pytest.raises(ModelDefinitionError, match="time-varying or state-dependent delays are not supported yet"):
        @oi.model(states=["x"], params=["r", "tau"], delays=["tau"])
        def bad(t, y, p):
            d = 2 * p.tau if delay == "expr" else p.tau + y.x
            return {"x": -p.r * om.lag(y.x, d)}


def test_numeric_delay_is_refused_with_advice():
    with pytest.raises(ModelDefinitionError, match="declare it as a parameter in params=\\[...\\] and delays"):
        @oi.model(states=["x"], params=["r", "tau"], delays=["tau"])
        def bad(t, y, p):
            return {"x": -p.r * om.lag(y.x, 1.0) + om.lag(y.x, "tau")}


def test_lag_of_an_expression_is_refused():
    with pytest.raises(ModelDefinitionError, match="the first argument must be a state y.<name>"):
        @oi.model(states=["x", "v"], params=["tau"], delays=["tau"])
        def bad(t, y, p):
            return {"x": om.lag(y.x * y.v, "tau"), "v": 0.0}


def test_lag_in_a_model_without_delays():
    with pytest.raises(ModelDefinitionError, match="the model declares no delays"):
        @oi.model(states=["x"], params=["tau"])
        def bad(t, y, p):
            return {"x": -om.lag(y.x, "tau")}


def test_unused_delay_is_refused():
    with pytest.raises(ModelDefinitionError, match="declared in model 'bad' but never used"):
        @oi.model(states=["x"], params=["r", "tau"], delays=["tau"])
        def bad(t, y, p):
            return {"x": -p.r * y.x}


def test_lag_outside_a_model():
    with pytest.raises(ModelDefinitionError, match="can only be used inside the right-hand side"):
        om.lag(1.0, "tau")


def test_from_equations_lag_errors():
    with pytest.raises(EquationParseError, match="the model declares no delays"):
        Model.from_equations({"x": "-lag(x, tau)"}, params=["tau"])
    with pytest.raises(ModelDefinitionError, match="delays: \\['d'\\] is not a declared parameter"):
        Model.from_equations({"x": "-lag(x, tau)"}, params=["tau"], delays=["d"])


def test_compiled_dde_kernels_need_the_lags():
    with pytest.raises(ModelDefinitionError, match="has delays: pass ylag, shape \\(n_states, n_delays\\)"):
        osc.compile().f(0.0, [1.0, 1.0], [1.0, 1.0, 1.0, 1.0])


# histories -------------------------------------------------------------------------------------


def test_history_families_values_derivatives_and_names():
    s = np.array([-1.0, -0.3, 0.0])
    h = History.periodic([0.5, -1.0], [2.0, 3.0], [1.0, 4.0])
    want = np.stack([0.5 * np.sin(2 * s) + 1.0, -np.sin(3 * s) + 4.0], axis=1)
    np.testing.assert_allclose(h(s), want)
    np.testing.assert_allclose(h(s, nu=1), np.stack([np.cos(2 * s), -3 * np.cos(3 * s)], axis=1))
    assert h.param_names(["x", "v"]) == ("A[x]", "A[v]", "omega[x]", "omega[v]", "b[x]", "b[v]")
    a = History.affine(1.5, 4.0)
    np.testing.assert_allclose(a(s + 2.0, t0=2.0)[:, 0], 1.5 * s + 4.0)
    assert History.constant([1.0, 2.0]).param_names(["x", "v"]) == ("b[x]", "b[v]")


def test_history_from_data_interpolates_and_smooths():
    s = np.linspace(0.0, 2.0, 21)
    y = np.sin(s)
    h = History.from_data(s, y)
    np.testing.assert_allclose(h(s)[:, 0], y, atol=1e-14)
    np.testing.assert_allclose(h([0.55])[0, 0], np.sin(0.55), atol=1e-5)
    sm = History.from_data(s, y + 0.01 * np.cos(40 * s), smoothing=1e-3)
    assert np.max(np.abs(sm(s)[:, 0] - y)) < 0.01 and sm.window() == (0.0, 2.0)


@pytest.mark.parametrize("call, match", [
    (lambda: History.affine([1.0, 2.0], [1.0]), "one value per state; got sizes"),
    (lambda: History.periodic(1.0, np.nan, 1.0), "omega: values must be finite"),
    (lambda: History.from_data([0, 1, 2], [1, 2, 3]), "expected t \\(n_times >= 4,\\)"),
    (lambda: History.from_data([0, 2, 1, 3], [1, 2, 3, 4]), "t must be strictly increasing"),
    (lambda: History.constant(1.0).with_values([1.0, 2.0]), "history_params: expected 1 values"),
])
def test_history_bad_input(call, match):
    with pytest.raises(InputError, match=match):
        call()
