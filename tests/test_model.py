"""Model tracing, symbolic derivatives, generated kernels and their disk cache."""

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import sympy as sp

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import ModelDefinitionError, TracingError


@oi.model(states=["prey", "pred"], params=["alpha", "beta", "gamma", "delta"])
def lotka_volterra(t, y, p):
    return {"prey": p.alpha * y.prey - p.beta * y.prey * y.pred,
            "pred": p.delta * y.prey * y.pred - p.gamma * y.pred}


@oi.model(states=["u", "v", "w"], params=["a", "b", "c", "k"])
def nonlinear(t, y, p):
    """Uses every smooth function of odeinfer.math, and t (non-autonomous)."""
    return [
        p.a * om.exp(-y.u * y.v) + om.sin(t) * y.w - om.sqrt(1 + y.u ** 2) * p.k,
        om.tanh(p.b * y.v) - om.log(2 + y.w ** 2) * om.cos(p.c * t) + om.pow(y.u, 2) / (1 + p.a ** 2),
        p.c * y.u * y.v / (p.k + y.w ** 2) - t ** 2 * p.b * om.tan(0.1 * y.w),
    ]


def nonlinear_numpy(t, y, p):
    """Hand-written, independent of the tracer (complex-safe)."""
    u, v, w = y
    a, b, c, k = p
    return np.array([
        a * np.exp(-u * v) + np.sin(t) * w - np.sqrt(1 + u ** 2) * k,
        np.tanh(b * v) - np.log(2 + w ** 2) * np.cos(c * t) + u ** 2 / (1 + a ** 2),
        c * u * v / (k + w ** 2) - t ** 2 * b * np.tan(0.1 * w),
    ])


def complex_step(fun, x, h=1e-30):
    """d fun / d x by complex step: exact to rounding, independent of the code under test."""
    x = np.asarray(x, dtype=complex)
    cols = []
    for j in range(x.size):
        xj = x.copy()
        xj[j] += 1j * h
        cols.append(np.imag(fun(xj)) / h)
    return np.stack(cols, axis=-1)


def test_traced_expressions_match_hand_written():
    a, b, g, d, x, z = sp.symbols("alpha beta gamma delta prey pred", real=True)
    assert sp.simplify(lotka_volterra.exprs[0] - (a * x - b * x * z)) == 0
    assert sp.simplify(lotka_volterra.exprs[1] - (d * x * z - g * z)) == 0
    assert lotka_volterra.n_states == 2 and lotka_volterra.n_params == 4
    assert lotka_volterra.name == "lotka_volterra"
    assert lotka_volterra.observed == ("prey", "pred")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_kernels_match_complex_step(seed):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 3)
    y = rng.uniform(0.2, 1.5, 3)
    p = rng.uniform(0.5, 2.0, 4)
    c = nonlinear.compile()
    np.testing.assert_allclose(c.f(t, y, p), nonlinear_numpy(t, y, p), rtol=1e-13)
    np.testing.assert_allclose(c.jac_y(t, y, p), complex_step(lambda yy: nonlinear_numpy(t, yy, p), y), rtol=1e-11)
    np.testing.assert_allclose(c.jac_p(t, y, p), complex_step(lambda pp: nonlinear_numpy(t, y, pp), p), rtol=1e-11)
    ft = np.empty(3)
    c.module.model_f_t(t, y, p, ft)
    np.testing.assert_allclose(ft, complex_step(lambda tt: nonlinear_numpy(tt[0], y, p), [t])[:, 0], rtol=1e-11)


def test_second_derivative_kernels_match_complex_step_of_jacobians():
    rng = np.random.default_rng(7)
    t, y, p, v = 0.7, rng.uniform(0.2, 1.5, 3), rng.uniform(0.5, 2.0, 4), rng.normal(size=3)
    c = nonlinear.compile()
    m = c.module
    jy = lambda tt, yy, pp: complex_step(lambda y2: nonlinear_numpy(tt, y2, pp), yy, h=1e-8)  # noqa: E731
    # reference: directional derivative of the Jacobians by central differences (h chosen for 1e-7)
    h = 1e-5
    ref_jy_dir = (c.jac_y(t, y + h * v, p) - c.jac_y(t, y - h * v, p)) / (2 * h)
    ref_jp_dir = (c.jac_p(t, y + h * v, p) - c.jac_p(t, y - h * v, p)) / (2 * h)
    out_y, out_p = np.empty((3, 3)), np.empty((3, 4))
    m.model_jac_y_dir(t, y, p, v, out_y)
    m.model_jac_p_dir(t, y, p, v, out_p)
    np.testing.assert_allclose(out_y, ref_jy_dir, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(out_p, ref_jp_dir, rtol=1e-7, atol=1e-9)
    ref_jy_t = (jy(t + h, y, p) - jy(t - h, y, p)) / (2 * h)
    out = np.empty((3, 3))
    m.model_jac_y_t(t, y, p, out)
    np.testing.assert_allclose(out, ref_jy_t, rtol=1e-6, atol=1e-8)
    ref_jp_t = (c.jac_p(t + h, y, p) - c.jac_p(t - h, y, p)) / (2 * h)
    out = np.empty((3, 4))
    m.model_jac_p_t(t, y, p, out)
    np.testing.assert_allclose(out, ref_jp_t, rtol=1e-7, atol=1e-9)


def test_bare_state_or_constant_as_derivative():
    @oi.model(states=["x", "v"], params=["k"])
    def oscillator(t, y, p):
        return {"x": y.v, "v": -p.k * y.x}

    c = oscillator.compile()
    np.testing.assert_allclose(c.f(0.0, [2.0, 3.0], [5.0]), [3.0, -10.0])
    const = oi.model(states=["x"], params=["k"])(lambda t, y, p: [1])
    assert const.compile().f(0.0, [0.0], [1.0])[0] == 1.0


def test_piecewise_and_steps_compile_and_evaluate():
    @oi.model(states=["x"], params=["a", "T"])
    def switch(t, y, p):
        return [om.where(t > p.T, -p.a * y.x, p.a) + om.heaviside(y.x - 1.0) + om.max(y.x, 0.5) - om.min(y.x, 2.0)
                + om.abs(y.x - 3.0)]

    c = switch.compile()
    for t, x in [(0.5, 0.2), (2.0, 1.5), (2.0, 4.0)]:
        a, T = 1.3, 1.0
        expect = (-a * x if t > T else a) + (1.0 if x > 1 else 0.0) + max(x, 0.5) - min(x, 2.0) + abs(x - 3.0)
        assert c.f(t, [x], [a, T])[0] == pytest.approx(expect, rel=1e-14)
    assert switch.switching_params == ("T",)


def test_smooth_heaviside_is_differentiable_in_its_switch_point():
    @oi.model(states=["x"], params=["d", "T"])
    def smooth(t, y, p):
        return [-p.d * om.heaviside(t - p.T, width=0.1)]

    c = smooth.compile()
    t, d, T = 1.05, 2.0, 1.0
    # d/dT of -d * 0.5 * (1 + tanh((t - T)/w)) = d * 0.5 * (1 - tanh^2)/w
    expect = d * 0.5 * (1 - math.tanh((t - T) / 0.1) ** 2) / 0.1
    assert c.jac_p(t, [0.0], [d, T])[0, 1] == pytest.approx(expect, rel=1e-12)
    assert smooth.switching_params == ()


def test_math_functions_on_numbers():
    assert om.exp(1.0) == pytest.approx(math.e)
    assert om.where(True, 1, 2) == 1.0 and om.where(False, 1, 2) == 2.0
    assert om.heaviside(-1.0) == 0.0 and om.heaviside(2.0) == 1.0 and om.heaviside(0.0) == 0.5
    assert om.heaviside(0.0, width=1.0) == pytest.approx(0.5)
    assert om.min(1, 2) == 1.0 and om.max(1, 2) == 2.0 and om.pow(2, 3) == 8.0
    with pytest.raises(ValueError, match="width must be > 0"):
        om.heaviside(1.0, width=0.0)


# ---------------------------------------------------------------------------------- bad models


def test_numpy_function_on_traced_value_names_line_and_fix():
    with pytest.raises(TracingError, match=r"line \d+.*np\.exp.*odeinfer\.math\.exp"):
        @oi.model(states=["x"], params=["k"])
        def bad(t, y, p):
            return [np.exp(-p.k * y.x)]


def test_math_module_function_on_traced_value():
    with pytest.raises(TracingError, match=r"math\.exp.*odeinfer\.math\.exp"):
        @oi.model(states=["x"], params=["k"])
        def bad(t, y, p):
            return [math.exp(-p.k * y.x)]


def test_if_on_traced_value():
    with pytest.raises(TracingError, match=r"truth value.*where"):
        @oi.model(states=["x"], params=["k"])
        def bad(t, y, p):
            if y.x > 0:
                return [-p.k * y.x]
            return [0.0]


def test_unknown_attribute_suggests_close_name():
    with pytest.raises(ModelDefinitionError, match=r"p\.alph.*Did you mean 'alpha'"):
        @oi.model(states=["x"], params=["alpha"])
        def bad(t, y, p):
            return [-p.alph * y.x]


@pytest.mark.parametrize("ret, match", [
    (lambda y, p: {"x": -p.k * y.x}, r"missing: \['z'\]"),
    (lambda y, p: {"x": 1.0, "z": 1.0, "w": 2.0}, r"unknown: \['w'\]"),
    (lambda y, p: [1.0], r"returned 1 derivatives.*2 states"),
    (lambda y, p: 3.0, r"returned float; expected a dict"),
    (lambda y, p: [y.x > 1.0, 1.0], r"is a comparison"),
    (lambda y, p: ["a", 1.0], r"type str"),
])
def test_wrong_return_values(ret, match):
    with pytest.raises(ModelDefinitionError, match=match):
        oi.model(states=["x", "z"], params=["k"])(lambda t, y, p: ret(y, p))


@pytest.mark.parametrize("states, params, match", [
    (["x", "x"], ["k"], r"states: duplicated names \['x'\]"),
    (["x"], ["k", "k"], r"params: duplicated names \['k'\]"),
    (["x"], ["x"], r"both as states and as params"),
    (["t"], ["k"], r"reserved for time"),
    (["x-1"], ["k"], r"not a valid name"),
    (["_x"], ["k"], r"not a valid name"),
    ("x", ["k"], r"single string 'x'"),
    ([], ["k"], r"at least one state"),
    (["x"], ["lambda"], r"not a valid name"),
])
def test_bad_names(states, params, match):
    with pytest.raises(ModelDefinitionError, match=match):
        oi.model(states=states, params=params)(lambda t, y, p: [0.0])


def test_bad_observation_model():
    with pytest.raises(ModelDefinitionError, match=r"observed: \['q'\] are not states"):
        lotka_volterra.with_observation(observed=["q"])
    with pytest.raises(ModelDefinitionError, match=r"noise: expected one of \['additive', 'log'\]"):
        lotka_volterra.with_observation(noise="poisson")
    partial = lotka_volterra.with_observation(observed=["pred"], noise="log")
    assert partial.observed == ("pred",) and partial.observation.noise == "log"
    assert lotka_volterra.observed == ("prey", "pred")  # the original is unchanged


# --------------------------------------------------------------------------- equation strings


def test_from_equations_equals_decorated_model():
    m = oi.Model.from_equations(
        {"prey": "alpha*prey - beta*prey*pred", "pred": "delta*prey*pred - gamma*pred"},
        params=["alpha", "beta", "gamma", "delta"], name="lv")
    for e1, e2 in zip(m.exprs, lotka_volterra.exprs):
        assert sp.simplify(e1 - e2) == 0
    m2 = oi.Model.from_equations({"x": "-k*x + where(t > T, 1, 0) + exp(-t)*sqrt(abs(x)) + pi",
                                  "z": "heaviside(x - 1, width=0.5) - max(x, z)**2"}, params=["k", "T"])
    c = m2.compile()
    x, z, k, T, t = 0.4, 0.3, 2.0, 1.0, 2.5
    expect_x = -k * x + 1.0 + math.exp(-t) * math.sqrt(abs(x)) + math.pi
    expect_z = 0.5 * (1 + math.tanh((x - 1) / 0.5)) - max(x, z) ** 2
    np.testing.assert_allclose(c.f(t, [x, z], [k, T]), [expect_x, expect_z], rtol=1e-14)


@pytest.mark.parametrize("text, match", [
    ("__import__('os')", r"the call of '__import__'"),
    ("__import__('os').system('echo hi')", r"attribute access \.system"),
    ("x.__class__", r"syntax Attribute"),
    ("os.system('ls')", r"attribute access \.system"),
    ("(lambda: 1)()", r"call of a computed function"),
    ("lambda: 1", r"syntax Lambda"),
    ("open('f')", r"the call of 'open'"),
    ("kk*x", r"unknown name 'kk' \(did you mean 'k'\?\)"),
    ("x[0]", r"syntax Subscript"),
    ("'abc'", r"the literal 'abc'"),
    ("x if x else 1", r"syntax IfExp"),
    ("__builtins__", r"the name '__builtins__'"),
    ("x +", r"not a valid expression"),
    ("1 < x < 2", r"chained"),
])
def test_equation_strings_are_parsed_safely(text, match):
    with pytest.raises(oi.errors.EquationParseError, match=match):
        oi.Model.from_equations({"x": text}, params=["k"])


def test_equation_bad_containers():
    with pytest.raises(ModelDefinitionError, match="non-empty dict"):
        oi.Model.from_equations([("x", "-k*x")], params=["k"])
    with pytest.raises(oi.errors.EquationParseError, match=r"expected a string"):
        oi.Model.from_equations({"x": 3}, params=["k"])


# ---------------------------------------------------------------------------------- display


def test_repr_and_latex():
    text = repr(lotka_volterra)
    assert "states=['prey', 'pred']" in text and "dprey/dt = alpha*prey - beta*pred*prey" in text
    latex = lotka_volterra.equations_latex()
    assert latex[0].startswith(r"\frac{d prey}{dt} = \alpha prey")
    assert lotka_volterra._repr_latex_().startswith(r"$\begin{aligned}")
    assert lotka_volterra.equations()["pred"] == "delta*pred*prey - gamma*pred"


def test_lambdify_supports_complex_numbers():
    f = nonlinear.lambdify("f")
    y = np.array([0.3 + 1e-20j, 0.5, 0.7])
    p = np.array([1.0, 1.1, 1.2, 1.3])
    np.testing.assert_allclose(f(0.4, y, p), nonlinear_numpy(0.4, y, p), rtol=1e-14)


# ---------------------------------------------------------------------------------- disk cache


def test_second_process_reuses_disk_cache(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, odeinfer as oi
        m = oi.Model.from_equations({"x": "-k*x*y", "y": "k*x - y"}, params=["k"])
        c = m.compile()
        out = np.empty(2)
        c.module.model_f(0.0, np.array([1.0, 2.0]), np.array([3.0]), out)
        st = c.module.model_f.stats
        print(sum(st.cache_hits.values()), sum(st.cache_misses.values()), out[0], out[1])
    """)
    env = dict(os.environ, ODEINFER_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    first, second = (r.stdout.split() for r in runs)
    assert first[:2] == ["0", "1"]  # compiled in the first process
    assert second[:2] == ["1", "0"]  # loaded from disk in the second
    assert float(second[2]) == -6.0 and float(second[3]) == 1.0
    assert len(list(tmp_path.glob("m_*.py"))) == 1


def test_models_with_the_same_equations_and_other_names_keep_their_own_cached_files(tmp_path):
    """Loading one must not rewrite the other's file (that made numba's cached machine code for it
    stale, so the two recompiled in turn)."""
    script = textwrap.dedent("""
        import sys, numpy as np, odeinfer as oi
        m = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name=sys.argv[1])
        c = m.compile()
        out = np.empty(1)
        c.module.model_f(0.0, np.array([2.0]), np.array([3.0]), out)
        print(sum(c.module.model_f.stats.cache_hits.values()), out[0])
    """)
    env = dict(os.environ, ODEINFER_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script, name], env=env, capture_output=True, text=True,
                           check=True).stdout.split() for name in ("first", "second", "first")]
    assert len(list(tmp_path.glob("m_*.py"))) == 2
    assert runs[2] == ["1", "-6.0"]  # the first model's machine code is still valid


# ------------------------------------------------------------------- hostile names and values


@pytest.mark.parametrize("title", ["bad\\N", "nul\x00byte", 'quote"""\\', "line\nbreak \u00e9 \ud800"])
def test_generated_module_header_encodes_any_title(title):
    from odeinfer.model.cache import module_header

    text = module_header(title)
    compile(text, "<header>", "exec")  # no SyntaxError, whatever the title
    assert "Do not edit" in text


def test_model_named_with_backslash_and_nul_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("ODEINFER_CACHE_DIR", str(tmp_path))
    m = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="bad\\N\x00")
    assert m.compile().f(0.0, [2.0], [3.0])[0] == -6.0


def test_model_name_must_be_text():
    with pytest.raises(ModelDefinitionError, match=r"name: expected a string \(the model's title\), got int"):
        oi.Model.from_equations({"x": "-k*x"}, params=["k"], name=5)


def test_symbols_that_are_not_the_models_never_reach_generated_code():
    from odeinfer.model.codegen import model_source

    x, k = sp.symbols("x k", real=True)
    evil = sp.Symbol("__import__('os').system('echo pwned')", real=True)
    m = oi.Model("m", ("x",), ("k",), (-k * x + evil,))
    with pytest.raises(ModelDefinitionError, match=r"model_f: the model's expressions use the symbols "
                                                   r"\[\"__import__\('os'\)\.system\('echo pwned'\)\"\], which are "
                                                   r"not its states, parameters or t"):
        model_source(m.derivatives)


def test_numpy_scalars_combine_with_traced_values():
    @oi.model(states=["x"], params=["k"])
    def m(t, y, p):
        return {"x": np.float64(2.0) * y.x - p.k * np.float64(0.5) + np.int64(3) ** y.x + np.power(y.x, 2)}

    x, k = sp.symbols("x k", real=True)
    assert sp.simplify(m.exprs[0] - (2.0 * x - 0.5 * k + 3 ** x + x ** 2)) == 0


@pytest.mark.parametrize("rhs, match", [
    (lambda t, y, p: np.array([2.0]) * y.x, r"numpy\.multiply was applied to a traced value and a numpy array"),
    (lambda t, y, p: np.exp(y.x), r"numpy\.exp.*Use odeinfer\.math\.exp instead.*om\.exp\(\.\.\.\)"),
    (lambda t, y, p: np.fmax(y.x, 1.0), r"numpy\.fmax.*odeinfer\.math\.max instead"),
    (lambda t, y, p: np.absolute(y.x), r"numpy\.absolute.*odeinfer\.math\.abs instead"),
    (lambda t, y, p: np.minimum(y.x, 1.0), r"numpy\.minimum.*odeinfer\.math\.min instead"),
    (lambda t, y, p: np.arctan(y.x), r"numpy\.arctan.*odeinfer\.math has no such function; it offers "
                                     r"\['exp', 'log'"),
])
def test_numpy_on_traced_values_names_the_matching_function(rhs, match):
    with pytest.raises(TracingError, match=match) as info:
        oi.model(states=["x"], params=["k"])(lambda t, y, p: [rhs(t, y, p)])
    assert "the matching function" not in str(info.value)


def test_state_named_like_a_function_can_be_lambdified():
    @oi.model(states=["exp", "x"], params=["sqrt"])
    def shadows(t, y, p):
        return {"exp": -p.sqrt * y.exp + om.exp(y.x), "x": om.sqrt(y.x)}

    f = shadows.lambdify("f")
    np.testing.assert_allclose(f(0.0, np.array([1.0, 4.0]), np.array([3.0])), [-3.0 + math.exp(4.0), 2.0],
                               rtol=1e-15)
    jac = shadows.lambdify("jac_y")(0.0, np.array([1.0, 4.0]), np.array([3.0]))
    np.testing.assert_allclose(jac, [[-3.0, math.exp(4.0)], [0.0, 0.25]], rtol=1e-15)


def test_names_are_normalised_nfkc():
    @oi.model(states=["\ufb01sh"], params=["k"])
    def lig(t, y, p):
        return {"fish": -p.k * y.ﬁsh}  # Python itself reads y.ﬁsh as y.fish

    assert lig.states == ("fish",)
    m = oi.Model.from_equations({"\ufb01sh": "-k*\ufb01sh"}, params=["k"], observed=["\ufb01sh"])
    assert m.states == ("fish",) and m.observed == ("fish",)
    assert sp.srepr(m.exprs[0]) == sp.srepr(lig.exprs[0])
    with pytest.raises(ModelDefinitionError, match=r"states: duplicated names \['fish'\] \(after Unicode "
                                                   r"NFKC normalisation"):
        oi.model(states=["\ufb01sh", "fish"], params=["k"])(lambda t, y, p: [0.0, 0.0])


@pytest.mark.parametrize("rhs", [lambda t, y, p: [y.x / 0], lambda t, y, p: [p.k * 0.0 / 0.0 + y.x],
                                 lambda t, y, p: [y.x / (p.k - p.k)]])
def test_division_by_a_literal_zero_is_refused_at_definition(rhs):
    with pytest.raises(ModelDefinitionError, match=r"the derivative of state 'x' is not finite \(.*\): it divides "
                                                   r"by zero or a number overflows"):
        oi.model(states=["x"], params=["k"])(rhs)


def test_derivatives_skip_absent_symbols_and_source_is_generated_once(monkeypatch):
    from odeinfer.model import codegen
    from odeinfer.model.codegen import model_source
    from odeinfer.model.derivatives import differentiate

    m = oi.Model.from_equations({"x": "-k*x + y", "y": "k*x - c*y*t", "z": "c"}, params=["k", "c"])
    d = m.derivatives
    ys, ps = d.state_symbols, d.param_symbols
    for i, e in enumerate(m.exprs):
        assert [d.jac_y[i, k] for k in range(3)] == [sp.diff(e, y) for y in ys]
        assert [d.jac_p[i, j] for j in range(2)] == [sp.diff(e, p) for p in ps]
        assert d.f_t[i] == sp.diff(e, m.t_symbol)
        assert [d.jac_p_t[i, j] for j in range(2)] == [sp.diff(e, p, m.t_symbol) for p in ps]
        assert d.d2_yy[i] == [[sp.diff(e, y, v) for v in ys] for y in ys]
        assert d.d2_py[i] == [[sp.diff(e, p, v) for v in ys] for p in ps]
    assert differentiate(ys[0] * ps[0], ys[1], free={ys[0], ps[0]}) == 0
    generated = []
    generate = codegen._model_source
    monkeypatch.setattr(codegen, "_model_source", lambda deriv: generated.append(deriv) or generate(deriv))
    cached = d in codegen._SOURCES  # another test in this process may have generated it already
    first = model_source(d)
    assert model_source(d) is first  # the kernels and both callback sets share one text
    assert generated == ([] if cached else [d])


@oi.model(states=["s", "e", "c"], params=["v", "km", "n", "T"])
def saturating(t, y, p):
    """Hill terms, powers of sums, a switch in t and one in a state: the kinds a kinetic (SBML) model has."""
    hill = p.v * y.s ** p.n / (p.km ** p.n + y.s ** p.n)
    return [-hill * y.e + om.where(t > p.T, p.km * y.c, 0.0),
            hill * om.exp(-y.c / p.km) - om.sqrt(1 + (y.e * y.c) ** 2) + om.max(y.s, 0.5 * y.c),
            om.log(1 + y.s * y.e) / (p.km + y.c) ** 1.5 - om.abs(y.c - p.T) * y.s]


@pytest.mark.parametrize("model", [nonlinear, saturating], ids=lambda m: m.name)
def test_directional_kernels_are_the_second_derivatives_along_v(model):
    """model_jac_y_dir / model_jac_p_dir (forward-mode through the Jacobian kernels' programs) against the
    symbolic second derivatives d2_yy . v and d2_py . v, evaluated by sympy's lambdify; generated without
    computing those second derivatives."""
    from odeinfer.model.codegen import model_source
    from odeinfer.model.derivatives import Derivatives

    d = Derivatives(model.t_symbol, model.state_symbols, model.param_symbols, model.exprs)
    namespace = {"math": math, "np": np, "njit": lambda **options: (lambda fn: fn)}  # plain Python, no numba
    exec(model_source(d), namespace)
    assert "d2_yy" not in d.__dict__ and "d2_py" not in d.__dict__
    n, m = model.n_states, model.n_params
    ys, ps, t = model.state_symbols, model.param_symbols, model.t_symbol
    vs = sp.symbols(f"w0:{n}", real=True)
    jy_dir = sp.Matrix(n, n, lambda i, k: sum(d.d2_yy[i][k][l] * vs[l] for l in range(n)))
    jp_dir = sp.Matrix(n, m, lambda i, j: sum(d.d2_py[i][j][l] * vs[l] for l in range(n)))
    expect = sp.lambdify((t, ys, ps, vs), [jy_dir, jp_dir], modules="numpy")
    rng = np.random.default_rng(3)
    for _ in range(20):
        ty, y, p, v = rng.uniform(0, 2), rng.uniform(0.2, 2.0, n), rng.uniform(0.5, 2.0, m), rng.normal(size=n)
        want_y, want_p = (np.array(a, dtype=float) for a in expect(ty, y, p, v))
        got_y, got_p = np.full((n, n), np.nan), np.full((n, m), np.nan)
        namespace["model_jac_y_dir"](ty, y, p, v, got_y)
        namespace["model_jac_p_dir"](ty, y, p, v, got_p)
        np.testing.assert_allclose(got_y, want_y, rtol=1e-12, atol=1e-13 * np.abs(want_y).max())
        np.testing.assert_allclose(got_p, want_p, rtol=1e-12, atol=1e-13 * np.abs(want_p).max())
