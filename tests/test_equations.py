"""Equation strings: bounded parsing of hostile input, and printing that parses back."""

import math
import textwrap
import time

import numpy as np
import pytest
import sympy as sp

import odeinfer as oi
from odeinfer import math as om
from odeinfer.errors import EquationParseError, ModelDefinitionError
from odeinfer.spec import load_spec


def assert_refused_quickly(text, match, params=("k",)):
    """``text`` as the equation of state x is refused with ``match`` in under a second of this process's CPU
    (CPU, not wall time: on a loaded 2-core machine the wall time of one refusal reached 3.1 s)."""
    t0 = time.process_time()
    with pytest.raises(EquationParseError, match=match):
        oi.Model.from_equations({"x": text}, params=list(params))
    assert time.process_time() - t0 < 1.0


# ------------------------------------------------------------------------- numbers too large


def short_ids(value):
    return value if len(str(value)) <= 30 else f"{str(value)[:25]}...({len(str(value))})"


@pytest.mark.parametrize("text, match", [
    ("-k*x + 10**10**10", r"equations\['x'\]: the power 10\*\*10\*\*10 would give an integer of about "
                          r"10000000001 digits; exact numbers are limited to 18 digits.*float"),
    ("2**2**20", r"the power 2\*\*2\*\*20 would give an integer of about 315653 digits"),
    ("k*x*(2*x)**(2**40)", r"the power \(2\*x\)\*\*\(2\*\*40\) has the exponent 1099511627776; integer "
                           r"exponents are limited to 1000"),
    ("(((((10*x)**999)**999)**999)**999)**999", r"the power \(10\*x\)\*\*999 gives a number of 1000 digits"),
    ("x*" + "9" * 5000, r"the integer literal 99999999999999999999\.\.\. \(5000 digits\) is longer than "
                        r"the limit of 18 digits.*write it as a float"),
    ("k*x + (" + "*".join(["999999999999999999"] * 10) + ")",
     r"the product 999999999999999999\*999999999999999999 would give an integer of 36 digits; exact numbers are "
     r"limited to 18 digits"),
    ("x*" + "*".join(["999999999999999999"] * 20), r"the product x\*(9{18}\*)+9+\.\.\. gives a number of 306 digits"),
    ("x*1e999", r"the number 1e999 is not finite"),
    ("x*10.0**400", r"10\.0\*\*400 overflows"),
    ("1e308*10*x", r"1e308\*10 is not finite"),
], ids=short_ids)
def test_numbers_too_large_are_refused_quickly(text, match):
    assert_refused_quickly(text, match)


@pytest.mark.parametrize("text, match", [
    ("1/0 + x", r"equations\['x'\]: 1/0 divides by zero"),
    ("log(0)*x", r"equations\['x'\]: the call log\(0\) fails on numbers \(math domain error\)"),
    ("x/0", r"state 'x'.*not finite.*divides by zero"),
    ("x/(k - k)", r"state 'x'.*not finite"),
])
def test_division_by_zero_and_domain_errors_are_refused(text, match):
    with pytest.raises(ModelDefinitionError, match=match):
        oi.Model.from_equations({"x": text}, params=["k"])


def test_nan_is_allowed_only_as_the_value_where_no_condition_holds():
    # where(c, a, nan): undefined (NaN) where c fails, as an SBML piecewise without otherwise
    m = oi.Model.from_equations({"x": "where(x > 1, -k*x, where(x < -1, k, nan))"}, params=["k"])
    assert oi.Model.from_equations(m.equations(), m.params).exprs == m.exprs
    f = m.lambdify("f")
    assert f(0.0, [2.0], [0.5])[0] == -1.0 and f(0.0, [-2.0], [0.5])[0] == 0.5 and np.isnan(f(0.0, [0.0], [0.5])[0])
    for text in ("nan*x", "where(x > 1, nan, x)", "k + where(x > 1, x, nan)*nan"):
        with pytest.raises(ModelDefinitionError, match=r"the derivative of state 'x' is not finite"):
            oi.Model.from_equations({"x": text}, params=["k"])
    with pytest.raises(ModelDefinitionError, match=r"observables\['h'\]: the expression is not finite"):
        m.observe({"h": "x + nan"}, oi.Normal(sigma=0.1))
    assert m.observe({"h": "where(x > 0, x, nan)"}, oi.Normal(sigma=0.1)).observables[0].expr.has(sp.nan)


def test_large_numbers_within_the_limits_still_parse():
    m = oi.Model.from_equations({"x": "-k*x + 10**17 + 2**10*x**3 + 1/3"}, params=["k"])
    x, k = sp.symbols("x k", real=True)
    assert m.exprs[0] == -k * x + sp.Integer(10 ** 17) + 1024 * x ** 3 + sp.Rational(1, 3)


def test_huge_power_in_a_spec_file_is_refused_quickly(tmp_path):
    spec = textwrap.dedent("""
        [model]
        params = ["k"]
        [model.equations]
        x = "-k*x + 10**10**10"
        [data]
        csv = "d.csv"
        time = "t"
    """)
    (tmp_path / "d.csv").write_text("t,x\n0,1\n1,0.5\n")
    (tmp_path / "spec.toml").write_text(spec)
    t0 = time.perf_counter()
    with pytest.raises(EquationParseError, match=r"the power 10\*\*10\*\*10"):
        load_spec(tmp_path / "spec.toml")
    assert time.perf_counter() - t0 < 1.0


# ------------------------------------------------------------------------ size and nesting


@pytest.mark.parametrize("text, match", [
    ("-" * 9990 + "x", r"equations\['x'\]: the expression has 9991 tokens.*at most 2000"),
    ("+".join(["x"] * 4000), r"equations\['x'\]: the expression has 7999 tokens.*at most 2000"),
    ("+".join(["x"] * 300), r"equations\['x'\]: the expression nests 299 levels deep.*at most 200.*@oi\.model"),
    ("-" * 1500 + "x", r"nests 1500 levels deep"),
    ("exp(" * 250 + "x" + ")" * 250, r"nests 250 levels deep|too many nested parentheses"),
    ("".join(f"min(k*x**{i}, " for i in range(99)) + "k" + ")" * 99,
     r"equations\['x'\]: min\(k\*x\*\*93, .* takes the min of 7 values \(nested min calls combine\); at "
     r"most 6 are allowed"),
], ids=short_ids)
def test_deep_or_long_expressions_are_refused_quickly(text, match):
    assert len(text) <= 10_000
    assert_refused_quickly(text, match)


def test_long_flat_sums_within_the_limits_parse():
    text = " + ".join(f"{i}*k*x" for i in range(1, 151))
    m = oi.Model.from_equations({"x": text}, params=["k"])
    x, k = sp.symbols("x k", real=True)
    assert sp.expand(m.exprs[0] - 11325 * k * x) == 0  # 1 + ... + 150 = 11325


# -------------------------------------------------------------------- printing round trip


@oi.model(states=["x", "z"], params=["k", "T", "tau"], delays=["tau"])
def uses_every_function(t, y, p):
    """One term per function of odeinfer.math (and each of its constants)."""
    terms = {
        "exp": om.exp(-p.k * y.x), "log": om.log(1 + y.x ** 2), "sqrt": om.sqrt(1 + y.z ** 2),
        "pow": om.pow(y.x ** 2 + 1, 0.5) + om.pow(2.5, y.z) + om.pow(y.z, 3),
        "sin": om.sin(t), "cos": om.cos(p.k * y.z), "tan": om.tan(0.1 * y.x), "tanh": om.tanh(y.z),
        "abs": om.abs(y.x - y.z), "min": om.min(y.x, om.min(y.z, p.k)), "max": om.max(y.x, 1.5),
        "where": om.where(t > p.T, y.x, om.where(y.z <= 0.2, 2 * y.z, -1.0)),
        "heaviside": om.heaviside(y.x - p.T) + om.heaviside(y.z, width=0.3),
        "lag": om.lag(y.x, "tau") * om.lag(y.z, p.tau),
        "pi": om.pi * y.x, "e": om.e * y.z,
    }
    assert set(terms) == set(om.__all__)  # a new function of odeinfer.math must be added here
    return {"x": sum(terms.values()), "z": -y.z / 7 + (y.z + 1) / 3 + 2}


def test_every_function_of_odeinfer_math_round_trips_through_its_equations():
    m = uses_every_function
    eqs = m.equations()
    back = oi.Model.from_equations(eqs, m.params, delays=m.delays)
    assert back.exprs == m.exprs  # the same sympy expressions, not just the same values
    assert back.fingerprint == m.fingerprint
    f, g = m.lambdify("f"), back.lambdify("f")
    rng = np.random.default_rng(17)
    for _ in range(20):
        t, y, ylag = rng.uniform(0, 3), rng.uniform(-2, 2, 2), rng.uniform(-2, 2, (2, 1))
        p = rng.uniform(0.1, 2, 3)
        np.testing.assert_allclose(g(t, y, ylag, p), f(t, y, ylag, p), rtol=1e-14)


def test_floats_that_sympy_computed_beyond_double_precision_round_trip_exactly():
    """pi*x + x/3: sympy adds the coefficients in 60 bits, more than a double holds; the text keeps them."""
    m = oi.model(states=["x"], params=["k"])(lambda t, y, p: [om.pi * y.x + y.x / 3 + 0.1 * p.k + 1 / 3])
    text = m.equations()["x"]
    assert "0.1*k" in text and "0.3333333333333333" in text  # doubles print as Python prints them
    back = oi.Model.from_equations(m.equations(), ["k"])
    assert back.exprs == m.exprs and back.equations()["x"] == text
    assert m.lambdify("f")(0.0, np.array([1.7]), np.array([0.3]))[0] == pytest.approx(
        (math.pi + 1 / 3) * 1.7 + 0.03 + 1 / 3, rel=1e-15)


def test_every_zoo_model_round_trips_through_its_equations():
    from odeinfer import zoo

    entries = [zoo.get(name) for name in zoo.available("all")] + [zoo.riccati(width=0.1)]
    assert any(e.model.delays for e in entries)
    for entry in entries:
        m, name = entry.model, entry.model.name
        back = oi.Model.from_equations(m.equations(), list(m.params), delays=list(m.delays) or None)
        assert back.exprs == m.exprs and back.fingerprint == m.fingerprint, name


def test_printed_equations_use_the_parser_names():
    eqs = uses_every_function.equations()["x"]
    for name in ("abs(", "min(", "max(", "where(", "heaviside(", "lag(x, tau)", "lag(z, tau)"):
        assert name in eqs
    for sympy_name in ("Abs", "Min", "Max", "Piecewise", "Heaviside", "(t - tau)"):
        assert sympy_name not in eqs


def test_where_with_sympy_conditions_prints_as_nested_where():
    x, t = sp.Symbol("x", real=True), sp.Symbol("t", real=True)
    expr = sp.Piecewise((x, sp.And(t > 1, x < 2)), (2 * x, sp.Or(t < 0, sp.Eq(x, 3))), (3 * x, sp.Not(x > 5)),
                        (4.0, True))
    m = oi.Model("m", ("x",), ("k",), (expr,))
    back = oi.Model.from_equations(m.equations(), ["k"])
    f, g = m.lambdify("f"), back.lambdify("f")
    for tv in (-1.0, 0.5, 2.0):
        for xv in (1.0, 3.0, 4.0, 6.0):
            assert g(tv, np.array([xv]), np.array([1.0])) == f(tv, np.array([xv]), np.array([1.0]))
