"""SBML import (odeinfer.petab.sbml.load_sbml).

Small SBML documents are written here (their math as MathML produced by libsbml from a formula)
and their ODEs are derived by hand in each test; the imported right-hand side is compared with
the hand-derived one at random points. The six Benchmark-Models-PEtab problems in
tests/data/petab load with the state counts of their README; Perelson's right-hand side is
compared with the ODE written by hand from its SBML reaction list; Boehm, Crauste, Elowitz and
Fujita are solved (scipy on the imported right-hand side) and compared with the collection's own
simulatedData tables, an independent simulator's output; Zheng starts at its preequilibrium.
"""

import csv
import math
import os
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from odeinfer.errors import InputError, ModelDefinitionError, SBMLError
from odeinfer.petab import sbml as sb
from odeinfer.petab.sbml import load_sbml

PETAB = Path(__file__).parent / "data" / "petab"
PROBLEMS = {"Perelson_Science1996": 4, "Boehm_JProteomeRes2014": 8, "Crauste_CellSystems2017": 5,
            "Elowitz_Nature2000": 8, "Fujita_SciSignal2010": 9, "Zheng_PNAS2012": 15}  # README's table

HEAD = {3: '<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" level="3" version="2">',
        2: '<sbml xmlns="http://www.sbml.org/sbml/level2/version4" level="2" version="4">'}


def mathml(formula):
    """MathML of an SBML L3 formula, written by libsbml (the tests' way of writing MathML)."""
    import libsbml

    ast = libsbml.parseL3Formula(formula)
    assert ast is not None, formula
    return libsbml.writeMathMLToString(ast).split("\n", 1)[1]


def kinetic(formula, local=""):
    params = f"<listOfLocalParameters>{local}</listOfLocalParameters>" if local else ""
    return f"<kineticLaw>{mathml(formula)}{params}</kineticLaw>"


def reaction(rid, law, reactants=(), products=(), local=""):
    def refs(tag, items):
        if not items:
            return ""
        inner = "".join(f'<speciesReference species="{s}" stoichiometry="{n}" constant="true"/>' for s, n in items)
        return f"<{tag}>{inner}</{tag}>"

    return (f'<reaction id="{rid}" reversible="false">{refs("listOfReactants", reactants)}'
            f'{refs("listOfProducts", products)}{kinetic(law, local)}</reaction>')


def species(sid, comp="C", conc=None, amount=None, only_substance=False, boundary=False, constant=False):
    init = (f' initialConcentration="{conc}"' if conc is not None else "") + (
        f' initialAmount="{amount}"' if amount is not None else "")
    return (f'<species id="{sid}" compartment="{comp}"{init} hasOnlySubstanceUnits="{str(only_substance).lower()}"'
            f' boundaryCondition="{str(boundary).lower()}" constant="{str(constant).lower()}"/>')


def param(pid, value=None, constant=True):
    v = f' value="{value}"' if value is not None else ""
    return f'<parameter id="{pid}"{v} constant="{str(constant).lower()}"/>'


def document(*, comps=(), species_=(), params=(), reactions=(), rules=(), initial=(), functions=(), extra="",
             level=3, model_id="m"):
    def block(tag, items):
        return f"<{tag}>{''.join(items)}</{tag}>" if items else ""

    body = (block("listOfFunctionDefinitions", functions) + block("listOfCompartments", comps)
            + block("listOfSpecies", species_) + block("listOfParameters", params)
            + block("listOfInitialAssignments", initial) + block("listOfRules", rules)
            + block("listOfReactions", reactions) + extra)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{HEAD[level]}<model id="{model_id}">{body}</model></sbml>\n'


def comp(cid="C", size=1.0, constant=True):
    s = f' size="{size}"' if size is not None else ""
    return f'<compartment id="{cid}" spatialDimensions="3"{s} constant="{str(constant).lower()}"/>'


def load_text(tmp_path, text, name="model.xml", **kw):
    p = tmp_path / name
    p.write_text(text)
    return load_sbml(p, **kw)


def check_rhs(sbml, formula, rng, n=5, scale=2.0):
    """The imported f(t, y, p) against ``formula(t, y, p)`` (dicts by name) at random points."""
    m = sbml.model
    f = m.lambdify("f")
    for _ in range(n):
        t = rng.uniform(0, 10)
        y = rng.uniform(0.1, scale, m.n_states)
        p = rng.uniform(0.1, scale, m.n_params)
        want = formula(t, dict(zip(m.states, y)), dict(zip(m.params, p)))
        np.testing.assert_allclose(f(t, y, p), [want[s] for s in m.states], rtol=1e-12, atol=1e-14)


def number(e, sbml, values=None):
    subs = {sp.Symbol(k, real=True): v for k, v in (values or sbml.values).items()}
    return float(e.xreplace(subs))


# -- semantics --------------------------------------------------------------------------------------
def test_mass_action_in_a_compartment_divides_by_its_size(tmp_path):
    # A -> 2 B with rate k*A (amount per time); C has size 2.5, A and B are concentrations:
    # dA/dt = -k*A/C, dB/dt = 2*k*A/C
    s = load_text(tmp_path, document(comps=[comp("C", 2.5)], species_=[species("A", conc=3), species("B", conc=0)],
                                     params=[param("k", 0.7)],
                                     reactions=[reaction("r1", "k*A", [("A", 1)], [("B", 2)])]))
    assert s.model.states == ("A", "B") and s.model.params == ("C", "k")
    assert s.values == {"C": 2.5, "k": 0.7}
    assert {k: float(v) for k, v in s.x0.items()} == {"A": 3.0, "B": 0.0}
    check_rhs(s, lambda t, y, p: {"A": -p["k"] * y["A"] / p["C"], "B": 2 * p["k"] * y["A"] / p["C"]},
              np.random.default_rng(0))


def test_only_substance_units_species_are_amounts(tmp_path):
    # S: amount (hasOnlySubstanceUnits), initial concentration 3 in V of size 2 -> amount 6;
    # X: concentration, initial amount 4 in V -> concentration 2.
    # r1: S -> X at rate k*S: dS/dt = -k*S (amount, no division), dX/dt = k*S/V
    s = load_text(tmp_path, document(
        comps=[comp("V", 2.0)], species_=[species("S", "V", conc=3, only_substance=True), species("X", "V", amount=4)],
        params=[param("k", 0.3)], reactions=[reaction("r1", "k*S", [("S", 1)], [("X", 1)])]))
    assert number(s.x0["S"], s) == 6.0 and number(s.x0["X"], s) == 2.0
    check_rhs(s, lambda t, y, p: {"S": -p["k"] * y["S"], "X": p["k"] * y["S"] / p["V"]}, np.random.default_rng(1))


def test_assignment_rules_are_substituted_and_kept(tmp_path):
    # k_eff = k*exp(-d*t); k2 = 2*k_eff (a chain); r1: A -> at rate k2*A in C of size 1
    # dA/dt = -2*k*exp(-d*t)*A
    s = load_text(tmp_path, document(
        comps=[comp("C", 1)], species_=[species("A", conc=1)],
        params=[param("k", 0.5), param("d", 0.1), param("k_eff", constant=False), param("k2", constant=False)],
        rules=[f'<assignmentRule variable="k2">{mathml("2*k_eff")}</assignmentRule>',
               f'<assignmentRule variable="k_eff">{mathml("k*exp(-d*time)")}</assignmentRule>'],
        reactions=[reaction("r1", "k2*A", [("A", 1)])]))
    assert s.model.params == ("C", "k", "d")  # rule targets are no parameters
    assert set(s.expressions) == {"k_eff", "k2"}
    k, d, t = sp.symbols("k d t", real=True)
    assert sp.simplify(s.expressions["k2"] - 2 * k * sp.exp(-d * t)) == 0
    check_rhs(s, lambda t, y, p: {"A": -2 * p["k"] * math.exp(-p["d"] * t) * y["A"] / p["C"]},
              np.random.default_rng(2))


def test_function_definitions_are_inlined(tmp_path):
    # f(x, y) = x*y/(1 + x); r1: A -> B at rate f(A, k)*C; C has size 3
    # dA/dt = -A*k/(1 + A), dB/dt = A*k/(1 + A)
    fd = f'<functionDefinition id="f">{mathml("lambda(x, y, x*y/(1 + x))")}</functionDefinition>'
    s = load_text(tmp_path, document(
        functions=[fd], comps=[comp("C", 3)], species_=[species("A", conc=1), species("B", conc=0)],
        params=[param("k", 0.5)], reactions=[reaction("r1", "f(A, k)*C", [("A", 1)], [("B", 1)])]))
    check_rhs(s, lambda t, y, p: {"A": -y["A"] * p["k"] / (1 + y["A"]), "B": y["A"] * p["k"] / (1 + y["A"])},
              np.random.default_rng(3))


def test_rate_rule_on_a_parameter_makes_it_a_state(tmp_path):
    # dp/dt = -a*p + b (rate rule), p(0) = 4 (its value); r1: -> A at rate p, C of size 2: dA/dt = p/C
    s = load_text(tmp_path, document(
        comps=[comp("C", 2)], species_=[species("A", conc=0)],
        params=[param("a", 0.2), param("b", 1.5), param("p", 4, constant=False)],
        rules=[f'<rateRule variable="p">{mathml("-a*p + b")}</rateRule>'],
        reactions=[reaction("r1", "p", products=[("A", 1)])]))
    assert s.model.states == ("A", "p") and "p" not in s.model.params
    assert number(s.x0["p"], s) == 4.0
    check_rhs(s, lambda t, y, p: {"A": y["p"] / p["C"], "p": -p["a"] * y["p"] + p["b"]}, np.random.default_rng(4))


def test_initial_assignments_are_expressions_of_the_parameters(tmp_path):
    # A(0) = 2*k + B(0) with B(0) = 3 (initialConcentration); c2 = 2*k (a constant parameter with an
    # initial assignment: substituted); r1: A -> at rate c2*A in C: dA/dt = -2*k*A/C
    s = load_text(tmp_path, document(
        comps=[comp("C", 1)], species_=[species("A"), species("B", conc=3)],
        params=[param("k", 0.25), param("c2")],
        initial=[f'<initialAssignment symbol="A">{mathml("2*k + B")}</initialAssignment>',
                 f'<initialAssignment symbol="c2">{mathml("2*k")}</initialAssignment>'],
        reactions=[reaction("r1", "c2*A", [("A", 1)])]))
    k = sp.Symbol("k", real=True)
    assert sp.simplify(s.x0["A"] - (2 * k + 3)) == 0
    assert number(s.x0["A"], s) == pytest.approx(3.5)
    assert number(s.x0["A"], s, {"k": 1.0, "C": 1.0}) == pytest.approx(5.0)
    assert s.model.params == ("C", "k") and sp.simplify(s.expressions["c2"] - 2 * k) == 0
    assert s.initial_state({"k": 1.0}) == pytest.approx({"A": 5.0, "B": 3.0})
    with pytest.raises(InputError, match=r"values: \['kk'\] are not parameters of model 'm'"):
        s.initial_state({"kk": 1.0})
    check_rhs(s, lambda t, y, p: {"A": -2 * p["k"] * y["A"] / p["C"], "B": 0.0}, np.random.default_rng(5))


def test_piecewise_in_time(tmp_path):
    # input u = piecewise(k, t < T, 0) (assignment rule); r1: -> A at rate u; C of size 1:
    # dA/dt = k/C for t < T, else 0
    s = load_text(tmp_path, document(
        comps=[comp("C", 1)], species_=[species("A", conc=0)],
        params=[param("k", 2), param("T", 5), param("u", constant=False)],
        rules=[f'<assignmentRule variable="u">{mathml("piecewise(k, time < T, 0)")}</assignmentRule>'],
        reactions=[reaction("r1", "u", products=[("A", 1)])]))
    assert s.model.exprs[0].has(sp.Piecewise)
    check_rhs(s, lambda t, y, p: {"A": (p["k"] if t < p["T"] else 0.0) / p["C"]}, np.random.default_rng(6),
              n=20, scale=10.0)
    assert s.model.switching_params == ("T",)


def test_piecewise_without_otherwise_is_nan_where_no_piece_holds(tmp_path):
    # SBML: a piecewise without otherwise is undefined where no condition holds; odeinfer makes it NaN
    # there. r1: A -> at rate piecewise(k*A, time < 2), C of size 1: dA/dt = -k*A for t < 2, NaN after,
    # so A = exp(-k*t) and dA/dk = -t*exp(-k*t) before t = 2 and a solve past t = 2 fails
    import odeinfer as oi
    from odeinfer.solve.problem import Problem, solve

    s = load_text(tmp_path, document(
        comps=[comp("C", 1)], species_=[species("A", conc=1)], params=[param("k", 0.8)],
        reactions=[reaction("r1", "piecewise(k*A, time < 2)", [("A", 1)])]))
    m = s.model
    assert m.equations() == {"A": "-where(t < 2, A*k, nan)/C"}
    assert oi.Model.from_equations(m.equations(), m.params).exprs == m.exprs  # prints and parses back
    compiled = m.compile()
    assert compiled.f(1.0, [0.5], [1.0, 0.8])[0] == pytest.approx(-0.4, rel=1e-15)
    assert np.isnan(compiled.f(3.0, [0.5], [1.0, 0.8])[0])
    t = np.array([0.5, 1.0, 1.5])
    for solver in (oi.Rodas(rtol=1e-10, atol=1e-12), oi.Dopri5(rtol=1e-10, atol=1e-12)):
        sol = solve(Problem(m, t, x0=[1.0], t0=0.0), [1.0, 0.8], solver=solver, gradient=oi.Forward())
        np.testing.assert_allclose(sol.y[:, 0], np.exp(-0.8 * t), rtol=1e-8)
        np.testing.assert_allclose(sol.sens[:, 0, 1], -t * np.exp(-0.8 * t), rtol=1e-6)
        past = solve(Problem(m, np.array([1.0, 3.0]), x0=[1.0], t0=0.0), [1.0, 0.8], solver=solver,
                     raise_on_failure=False)
        assert past.status != 0 and past.t_reached <= 2.0 + 1e-9 and np.isnan(past.y[1, 0])
        assert past.y[0, 0] == pytest.approx(math.exp(-0.8), rel=1e-8)
    # pieces that cover every case (Alkan_SciSignal2018's piecewise(1, S > 0, 0, S <= 0)) leave no NaN
    s = load_text(tmp_path, document(
        comps=[comp("C", 1)], species_=[species("A", conc=1)], params=[param("k", 0.8)],
        reactions=[reaction("r1", "piecewise(k*A, A > 0.5, 0, A <= 0.5)", [("A", 1)])]))
    assert not s.model.exprs[0].has(sp.nan)
    check_rhs(s, lambda t, y, p: {"A": -(p["k"] * y["A"] if y["A"] > 0.5 else 0.0) / p["C"]},
              np.random.default_rng(21), n=20, scale=1.0)


def test_local_parameters_are_numbers_that_shadow_globals(tmp_path):
    # the global k = 5 is shadowed by r1's local k = 0.5: dA/dt = -0.5*A/C; r2 uses the global
    # k: dB/dt = -k*B/C
    s = load_text(tmp_path, document(
        comps=[comp("C", 1)], species_=[species("A", conc=1), species("B", conc=1)], params=[param("k", 5)],
        reactions=[reaction("r1", "k*A", [("A", 1)], local='<localParameter id="k" value="0.5"/>'),
                   reaction("r2", "k*B", [("B", 1)])]))
    assert s.model.params == ("C", "k")
    check_rhs(s, lambda t, y, p: {"A": -0.5 * y["A"] / p["C"], "B": -p["k"] * y["B"] / p["C"]},
              np.random.default_rng(7))


def test_level2_local_parameters_and_boundary_species(tmp_path):
    # SBML L2: B is a boundary species (a parameter, default 2), r1: B -> A at rate kf*B with a
    # local kf = 3 (L2's <listOfParameters> in the kinetic law); dA/dt = 3*B/C, C of size 4
    law = (f'<kineticLaw>{mathml("kf*B")}<listOfParameters><parameter id="kf" value="3"/></listOfParameters>'
           "</kineticLaw>")
    rx = (f'<reaction id="r1" reversible="false"><listOfReactants><speciesReference species="B"/></listOfReactants>'
          f'<listOfProducts><speciesReference species="A"/></listOfProducts>{law}</reaction>')
    s = load_text(tmp_path, document(level=2, comps=['<compartment id="C" size="4"/>'],
                                     species_=[species("A", conc=0), species("B", conc=2, boundary=True)],
                                     reactions=[rx]))
    assert s.model.states == ("A",) and s.model.params == ("C", "B") and s.values == {"C": 4.0, "B": 2.0}
    check_rhs(s, lambda t, y, p: {"A": 3 * p["B"] / p["C"]}, np.random.default_rng(8))


def test_math_elements(tmp_path):
    """dA/dt (a rate rule on a species, C of size 1) uses every supported kind of math once; the
    generated kernels print all of it (compiled f = hand formula, also where A == k)."""
    formula = ("log(2, A) + log(A) + ln(A) + root(3, A) + sqrt(A) + abs(-A) + exp(1) + pi + 3/4 + 1e-3 + A^2 "
               "+ max(A, k) + min(A, k) + sin(A) + cos(A) + tan(A) + tanh(A) + sinh(A) + cosh(A) + atan(A) "
               "+ asin(A/10) + acos(A/10) + asinh(A) + acosh(A + 1) + atanh(A/10) "
               "+ piecewise(1, (A > k && A >= 0) || !(A < 0), 2) + piecewise(1, A == k, 0) + piecewise(1, A != k, 0)"
               " + piecewise(1, xor(A > k, A <= k), 0) - (-k) + piecewise(1, 0 < A < k, 0) + piecewise(2, false, 0)"
               " + piecewise(3, true, 0) + avogadro*1e-23")
    s = load_text(tmp_path, document(comps=[comp("C", 1)], species_=[species("A", conc=1)], params=[param("k", 1)],
                                     rules=[f'<rateRule variable="A">{mathml(formula)}</rateRule>']))

    def want(t, y, p):
        a, k = y["A"], p["k"]
        return {"A": math.log2(a) + math.log10(a) + math.log(a) + a ** (1 / 3) + math.sqrt(a) + abs(a) + math.e
                + math.pi + 0.75 + 1e-3 + a ** 2 + max(a, k) + min(a, k) + math.sin(a) + math.cos(a) + math.tan(a)
                + math.tanh(a) + math.sinh(a) + math.cosh(a) + math.atan(a) + math.asin(a / 10) + math.acos(a / 10)
                + math.asinh(a) + math.acosh(a + 1) + math.atanh(a / 10)
                + 1.0 + (a == k) + (a != k) + 1.0 + k + (0 < a < k) + 0.0 + 3.0 + 6.02214179}

    check_rhs(s, want, np.random.default_rng(9), n=10, scale=1.5)
    compiled = s.model.compile()
    for a, k in [(0.5, 0.7), (1.0, 1.0), (1.5, 1.2), (0.7, 0.5)]:
        want_a = want(0.0, {"A": a}, {"k": k})["A"]
        assert compiled.f(0.0, [a], [1.0, k])[0] == pytest.approx(want_a, rel=1e-13)


def test_log_and_root_without_base_or_degree(tmp_path):
    # MathML <log/> without <logbase> is log10, <root/> without <degree> is the square root:
    # dA/dt = log10(A) + sqrt(A) - k*A (C of size 1)
    law = "<apply><plus/><apply><log/><ci>A</ci></apply><apply><root/><ci>A</ci></apply></apply>"
    rx = raw_law("r1", f"<apply><minus/><apply><times/><ci>k</ci><ci>A</ci></apply>{law}</apply>")
    s = load_text(tmp_path, document(**SIMPLE, reactions=[rx]))
    check_rhs(s, lambda t, y, p: {"A": -(p["k"] * y["A"] - math.log10(y["A"]) - math.sqrt(y["A"])) / p["C"]},
              np.random.default_rng(11))


def test_the_time_of_the_real_models_stays_t_and_names_are_ids():
    s = load_sbml(PETAB / "Fujita_SciSignal2010" / "model_Fujita_SciSignal2010.xml")
    assert "EGF" in s.expressions and "EGF" not in s.model.params
    assert {x.name for x in s.expressions["EGF"].free_symbols} == {"EGF_0", "EGF_rate", "EGF_end", "t"}


# -- the reference problems ----------------------------------------------------------------------------
@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_reference_problems_load(problem):
    s = load_sbml(f"{problem}/model_{problem}.xml", root=PETAB)
    m = s.model
    assert m.n_states == PROBLEMS[problem]
    assert m.name == problem
    assert set(s.x0) == set(m.states) and set(s.values) == set(m.params)
    free = {sp.Symbol(p, real=True) for p in m.params}
    assert all(e.free_symbols <= free for e in s.x0.values())
    x0 = s.initial_state()
    f = m.lambdify("f")(0.0, np.array([x0[x] for x in m.states]), np.array([s.values[p] for p in m.params]))
    assert np.all(np.isfinite(f))
    # the equations print in odeinfer's equation language and read back as the same model
    import odeinfer as oi

    again = oi.Model.from_equations(m.equations(), m.params)
    rng = np.random.default_rng(12)
    y, p = rng.uniform(0.1, 2.0, m.n_states), rng.uniform(0.1, 2.0, m.n_params)
    np.testing.assert_allclose(again.lambdify("f")(3.0, y, p), m.lambdify("f")(3.0, y, p), rtol=1e-14)


def test_perelson_matches_its_reactions():
    s = load_sbml(PETAB / "Perelson_Science1996" / "model_Perelson_Science1996.xml")
    assert s.model.states == ("Tstar", "V", "Vin", "Vni")
    assert s.values == {"default": 1.0, "NN": 480.0, "T0": 11000.0, "c": 2.06, "delta": 0.53, "K0": 3.9e-07}
    assert s.initial_state() == {"Tstar": 15061.32075, "V": 1860000.0, "Vin": 1860000.0, "Vni": 0.0}

    # written by hand from the SBML reaction list (compartment `default`, concentrations):
    # v1: -> Tstar at K0*T0*Vin; v2: Tstar -> at delta*Tstar; v3: V + Vin -> at c*Vin;
    # v4: V + Vni -> at c*Vni; v5: -> V + Vni at delta*NN*Tstar
    def rhs(t, y, p):
        v1 = p["K0"] * p["T0"] * y["Vin"]
        v2 = p["delta"] * y["Tstar"]
        v3 = p["c"] * y["Vin"]
        v4 = p["c"] * y["Vni"]
        v5 = p["delta"] * p["NN"] * y["Tstar"]
        size = p["default"]
        return {"Tstar": (v1 - v2) / size, "V": (-v3 - v4 + v5) / size, "Vin": -v3 / size, "Vni": (-v4 + v5) / size}

    check_rhs(s, rhs, np.random.default_rng(10))


def table(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def simulate_nominal(problem):
    """The problem's states at the times of its simulatedData table, solved by scipy on the imported
    right-hand side at the nominal values of its parameter table."""
    from scipy.integrate import solve_ivp

    s = load_sbml(PETAB / problem / f"model_{problem}.xml")
    m = s.model
    values = dict(s.values)
    values.update({r["parameterId"]: float(r["nominalValue"])
                   for r in table(PETAB / problem / f"parameters_{problem}.tsv") if r["parameterId"] in values})
    x0 = s.initial_state(values)
    p = np.array([values[q] for q in m.params])
    sim = table(PETAB / problem / f"simulatedData_{problem}.tsv")
    times = sorted({float(r["time"]) for r in sim})
    f = m.lambdify("f")
    sol = solve_ivp(lambda t, y: f(t, y, p), (0, times[-1]), [x0[x] for x in m.states], t_eval=times,
                    method="LSODA", rtol=1e-10, atol=1e-10)
    assert sol.success
    return sim, values, {t: dict(zip(m.states, y)) for t, y in zip(times, sol.y.T)}


def test_boehm_matches_the_collections_simulation():
    """Two compartments (cyt 1.4, nuc 0.45): the observables, written by hand from the observable
    table, agree with the collection's simulatedData at the nominal parameters."""
    sim, values, y = simulate_nominal("Boehm_JProteomeRes2014")
    sc = values["specC17"]

    def observable(name, d):
        a, b, ab, aa, bb = d["STAT5A"], d["STAT5B"], d["pApB"], d["pApA"], d["pBpB"]
        if name == "pSTAT5A_rel":
            return (100 * ab + 200 * aa * sc) / (ab + a * sc + 2 * aa * sc)
        if name == "pSTAT5B_rel":
            return -(100 * ab - 200 * bb * (sc - 1)) / ((b * (sc - 1) - ab) + 2 * bb * (sc - 1))
        return ((100 * ab + 100 * a * sc + 200 * aa * sc)
                / (2 * ab + a * sc + 2 * aa * sc - b * (sc - 1) - 2 * bb * (sc - 1)))

    assert len(sim) == 48
    for r in sim:
        assert observable(r["observableId"], y[float(r["time"])]) == pytest.approx(float(r["simulation"]), rel=1e-6)


def test_crauste_matches_the_collections_simulation():
    sim, _, y = simulate_nominal("Crauste_CellSystems2017")
    for r in sim:  # each observable is one state: observable_<state>
        state = r["observableId"].removeprefix("observable_")
        assert y[float(r["time"])][state] == pytest.approx(float(r["simulation"]), rel=1e-5)


def test_elowitz_matches_the_collections_simulation():
    """fluorescence = background + GFP * scale; the simulation's rows give the two parameters on the
    log10 scale of the parameter table."""
    sim, _, y = simulate_nominal("Elowitz_Nature2000")
    assert len(sim) == 58
    for r in sim:
        log_background, log_scale = (float(v) for v in r["observableParameters"].split(";"))
        fluorescence = 10**log_background + y[float(r["time"])]["GFP"] * 10**log_scale
        assert fluorescence == pytest.approx(float(r["simulation"]), rel=1e-5)


def test_fujita_matches_the_collections_simulation_up_to_its_scalings():
    """Fujita's simulatedData names its six conditions model1_data1..6 (the six step inputs of the
    condition table, in order) and was made with the SBML's own values and scalings that the
    parameter table no longer holds: each observable is one constant times the states' sum, over all
    times and conditions."""
    from scipy.integrate import solve_ivp

    problem = "Fujita_SciSignal2010"
    s = load_sbml(PETAB / problem / f"model_{problem}.xml")
    m = s.model
    f = m.lambdify("f")
    sim = table(PETAB / problem / f"simulatedData_{problem}.tsv")
    conditions = table(PETAB / problem / f"experimentalCondition_{problem}.tsv")[:6]
    assert [c["conditionId"] for c in conditions] == [f"condition_step_{c}" for c in
                                                      ("00_1", "00_3", "01_0", "03_0", "10_0", "30_0")]
    sums = {"pEGFR_tot": ("pEGFR", "pEGFR_Akt"), "pAkt_tot": ("pAkt", "pAkt_S6"), "pS6_tot": ("pS6",)}
    ratios = {k: [] for k in sums}
    for k, c in enumerate(conditions):
        values = dict(s.values, **{q: float(c[q]) for q in ("EGF_0", "EGF_rate", "EGF_end")})
        x0 = s.initial_state(values)
        p = np.array([values[q] for q in m.params])
        rows = [r for r in sim if r["simulationConditionId"] == f"model1_data{k + 1}" and float(r["simulation"]) > 0]
        times = sorted({float(r["time"]) for r in rows})
        sol = solve_ivp(lambda t, y, p=p: f(t, y, p), (0, times[-1]), [x0[x] for x in m.states], t_eval=times,
                        method="LSODA", rtol=1e-10, atol=1e-12)
        states = {t: dict(zip(m.states, y)) for t, y in zip(times, sol.y.T)}
        for r in rows:
            total = sum(states[float(r["time"])][x] for x in sums[r["observableId"]])
            ratios[r["observableId"]].append(float(r["simulation"]) / total)
    for name, r in ratios.items():
        assert len(r) >= 30, name
        assert np.max(r) / np.min(r) - 1 < 1e-4, name


def test_zheng_starts_at_its_preequilibrium():
    """Zheng's initial concentrations are the steady state of its preequilibration condition
    (dilution = 1): the 59 reactions, each through its function definition, cancel there."""
    s = load_sbml(PETAB / "Zheng_PNAS2012" / "model_Zheng_PNAS2012.xml")
    m = s.model
    values = dict(s.values, dilution=1.0)
    x0 = s.initial_state(values)
    y0 = np.array([x0[x] for x in m.states])
    f = m.lambdify("f")(0.0, y0, np.array([values[p] for p in m.params]))
    assert np.max(np.abs(f)) < 1e-10
    f0 = m.lambdify("f")(0.0, y0, np.array([dict(values, dilution=0.0)[p] for p in m.params]))
    assert np.max(np.abs(f0)) > 1e-4  # without dilution it is no steady state: the check can fail


@pytest.mark.slow  # tests/test_petab.py's NLL checks solve both models in the default suite
@pytest.mark.parametrize("problem, overrides, t_end", [
    # Fujita's input is a piecewise of time: a ramp switched off at t = 10
    ("Fujita_SciSignal2010", {"EGF_0": 1.0, "EGF_rate": 0.2, "EGF_end": 10.0}, 20.0),
    # Zheng's 59 reactions go through function definitions; dilution 0 leaves its steady state
    ("Zheng_PNAS2012", {"dilution": 0.0}, 5.0),
])
def test_an_imported_model_compiles_and_solves(problem, overrides, t_end):
    """The generated kernels take the imported expressions: the compiled f equals the sympy one on
    both sides of Fujita's switch, and the solution agrees with scipy's on the sympy right-hand side."""
    from scipy.integrate import solve_ivp

    import odeinfer as oi

    s = load_sbml(PETAB / problem / f"model_{problem}.xml")
    m = s.model
    values = dict(s.values, **overrides)
    p = np.array([values[q] for q in m.params])
    x0 = s.initial_state(values)
    y0 = np.array([x0[x] for x in m.states])
    f = m.lambdify("f")
    compiled = m.compile()
    for tt in (0.3 * t_end, 0.7 * t_end):
        np.testing.assert_allclose(compiled.f(tt, y0, p), f(tt, y0, p), rtol=1e-12, atol=1e-300)
    t = np.linspace(0.0, t_end, 11)
    sol = oi.solve(oi.Problem(m, t, x0=y0), p, solver=oi.Rodas(rtol=1e-10, atol=1e-12))
    ref = solve_ivp(lambda tt, y: f(tt, y, p), (0, t_end), y0, t_eval=t, method="LSODA", rtol=1e-10, atol=1e-12)
    assert np.max(np.abs(sol.y[-1] - y0)) > 1e-3 * np.max(np.abs(y0))  # the states move
    np.testing.assert_allclose(sol.y, ref.y.T, rtol=1e-5, atol=1e-8)


# -- bad input -------------------------------------------------------------------------------------------
SIMPLE = {"comps": [comp("C", 1)], "species_": [species("A", conc=1)], "params": [param("k", 1)]}


def assert_refused(tmp_path, match, **kw):
    parts = dict(SIMPLE, **kw)
    with pytest.raises(SBMLError, match=match):
        load_text(tmp_path, document(**parts))


def test_unsupported_elements_are_refused_by_id(tmp_path):
    ev = ('<listOfEvents><event id="dose" useValuesFromTriggerTime="true"><trigger initialValue="true" '
          f'persistent="true">{mathml("time > 1 || A > 2")}</trigger><listOfEventAssignments><eventAssignment '
          f'variable="A">{mathml("2 * A")}</eventAssignment></listOfEventAssignments></event></listOfEvents>')
    assert_refused(tmp_path, r"'model.xml': SBML model 'm': event 'dose' has a trigger that is not one comparison",
                   extra=ev)
    assert_refused(tmp_path, r"algebraic rule \('alg'\).*not supported",
            rules=[f'<algebraicRule id="alg">{mathml("A - k")}</algebraicRule>'])
    assert_refused(tmp_path, r"the kinetic law of reaction 'r1': the delay csymbol .* is not supported",
            reactions=[reaction("r1", "delay(A, 1)", [("A", 1)])])
    assert_refused(tmp_path, r"reaction 'r1': floor .* is not supported", reactions=[reaction("r1", "floor(A)", [("A", 1)])])
    assert_refused(tmp_path, r"'factorial' is not supported", reactions=[reaction("r1", "factorial(A)", [("A", 1)])])
    assert_refused(tmp_path, r"the kinetic law of reaction 'r1': the math evaluates to a number that is not finite "
                             r"\(.*a piecewise without otherwise none of whose conditions can hold\)",
            reactions=[reaction("r1", "piecewise(k, false)", [("A", 1)])])
    assert_refused(tmp_path, r"'model.xml': SBML model 'm': the initial value of 'A' is undefined at t = 0: a "
                             r"piecewise without otherwise none of whose conditions can hold",
            initial=[f'<initialAssignment symbol="A">{mathml("piecewise(1, time > 0)")}</initialAssignment>'])
    assert_refused(tmp_path, r"the math uses the id 'q', which is no compartment, species, parameter or reaction",
            reactions=[reaction("r1", "q*A", [("A", 1)])])
    for law in ("k*A/(1 - 1)", "2^(10^12)*A", "ln(0)*A", "root(1/1000000, 10)*A"):
        assert_refused(tmp_path, r"the math evaluates to a number that is not finite",
                reactions=[reaction("r1", law, [("A", 1)])])
    assert_refused(tmp_path, r"an argument of 'plus' is a condition",
            reactions=[reaction("r1", "(A > 1) + 1", [("A", 1)])])
    noncst = (f'<reaction id="r1" reversible="false"><listOfReactants><speciesReference species="A" '
              f'stoichiometry="1" constant="false"/></listOfReactants>{kinetic("k*A")}</reaction>')
    assert_refused(tmp_path, r"species 'A' in reaction 'r1' has a non-constant stoichiometry", reactions=[noncst])
    assert_refused(tmp_path, r"'A' has no initial value", species_=[species("A")])
    assert_refused(tmp_path, r"it has no state", species_=[species("A", conc=1, constant=True)])
    assert_refused(tmp_path, r"reaction 'r1' refers to the species 'Q', which the model does not define",
            reactions=[reaction("r1", "k", [("Q", 1)])])
    assert_refused(tmp_path, r"\['k'\] have no value", params=[param("k")], reactions=[reaction("r1", "k*A", [("A", 1)])])
    assert_refused(tmp_path, r"SBML model 'm': the assignment rules are circular \(a -> b -> a\)",
            params=[param("k", 1), param("a", constant=False), param("b", constant=False)],
            rules=[f'<assignmentRule variable="a">{mathml("b + 1")}</assignmentRule>',
                   f'<assignmentRule variable="b">{mathml("a*2")}</assignmentRule>'],
            reactions=[reaction("r1", "a*A", [("A", 1)])])
    assert_refused(tmp_path, r"species 'A' is a concentration in compartment 'C', whose size changes",
            comps=[comp("C", 1, constant=False)], params=[param("k", 1)],
            rules=[f'<rateRule variable="C">{mathml("k")}</rateRule>'])


def raw_law(rid, math_xml, species_id="A"):
    """A reaction whose kinetic law is literal MathML (for trees libsbml's formula parser does not write)."""
    return (f'<reaction id="{rid}" reversible="false"><listOfReactants><speciesReference species="{species_id}" '
            f'stoichiometry="1" constant="true"/></listOfReactants><kineticLaw>'
            f'<math xmlns="http://www.w3.org/1998/Math/MathML">{math_xml}</math></kineticLaw></reaction>')


def test_malformed_math_is_refused_by_element(tmp_path):
    assert_refused(tmp_path, r"the kinetic law of reaction 'r1': 'minus' has 3 argument\(s\), expected 1 to 2; fix the math",
            reactions=[raw_law("r1", "<apply><minus/><ci>A</ci><ci>k</ci><ci>k</ci></apply>")])
    assert_refused(tmp_path, r"'divide' has 1 argument\(s\), expected 2",
            reactions=[raw_law("r1", "<apply><divide/><ci>A</ci></apply>")])
    assert_refused(tmp_path, r"the number inf is not finite",
            reactions=[raw_law("r1", "<apply><times/><ci>A</ci><infinity/></apply>")])
    assert_refused(tmp_path, r"a rational number has the denominator 0",
            reactions=[raw_law("r1", '<apply><times/><ci>A</ci><cn type="rational">1<sep/>0</cn></apply>')])
    assert_refused(tmp_path, r"a condition of a piecewise is a number, not a condition",
            reactions=[reaction("r1", "piecewise(A, k, 0)", [("A", 1)])])
    assert_refused(tmp_path, r"a value of a piecewise is a condition",
            reactions=[reaction("r1", "piecewise(A > k, A > 1, 0)", [("A", 1)])])
    assert_refused(tmp_path, r"an argument of 'and' is a number, not a condition",
            reactions=[reaction("r1", "piecewise(1, A && k, 0)", [("A", 1)])])


def test_function_definition_misuse_is_refused(tmp_path):
    fd = f'<functionDefinition id="f">{mathml("lambda(x, x*k)")}</functionDefinition>'
    assert_refused(tmp_path, r"a function definition uses 'k', which is not one of its arguments", functions=[fd],
            reactions=[reaction("r1", "f(A)", [("A", 1)])])
    fd = f'<functionDefinition id="f">{mathml("lambda(x, y, x*y)")}</functionDefinition>'
    assert_refused(tmp_path, r"the function 'f' takes 2 argument\(s\), the math passes 1", functions=[fd],
            reactions=[reaction("r1", "f(A)", [("A", 1)])])
    assert_refused(tmp_path, r"the math calls 'g', which is no function definition of the model",
            reactions=[reaction("r1", "g(A)", [("A", 1)])])


def test_other_refusals(tmp_path):
    assert_refused(tmp_path, r"the local parameter 'q' of reaction 'r1' is inf; give a finite number",
            reactions=[reaction("r1", "q*A", [("A", 1)], local='<localParameter id="q" value="INF"/>')])
    assert_refused(tmp_path, r"the stoichiometry of species 'A' in reaction 'r1' is nan",
            reactions=[reaction("r1", "k*A", [("A", "NaN")])])
    assert_refused(tmp_path, r"the local parameter 'q' of reaction 'r1' has no value",
            reactions=[reaction("r1", "q*A", [("A", 1)], local='<localParameter id="q"/>')])
    assert_refused(tmp_path, r"SBML model 'm': it sets the conversion factor 'k'; conversion factors are not supported",
            model_id='m" conversionFactor="k')
    assert_refused(tmp_path, r"species 'B' has the conversion factor 'k'",
            species_=[species("A", conc=1), species("B", conc=1).replace("/>", ' conversionFactor="k"/>')])
    ref = (f'<reaction id="r1" reversible="false"><listOfReactants><speciesReference id="sr" species="A" '
           f'stoichiometry="1" constant="true"/></listOfReactants>{kinetic("k*A")}</reaction>')
    assert_refused(tmp_path, r"rules or initial assignments set \['sr'\], which are no compartment, species or parameter",
            reactions=[ref], initial=[f'<initialAssignment symbol="sr">{mathml("2")}</initialAssignment>'])
    p = tmp_path / "empty.xml"
    p.write_text('<?xml version="1.0" encoding="UTF-8"?>\n' + HEAD[3] + "</sbml>\n")
    with pytest.raises(SBMLError, match=r"is not a valid SBML document: it holds no <model>"):
        load_sbml(p)


def test_level2_fast_reactions_and_stoichiometry_math_are_refused(tmp_path):
    fast = (f'<reaction id="r1" reversible="false" fast="true"><listOfReactants><speciesReference species="A"/>'
            f'</listOfReactants>{kinetic("k*A")}</reaction>')
    assert_refused(tmp_path, r"reaction 'r1' is fast .*fast reactions are not supported", level=2, reactions=[fast],
            comps=['<compartment id="C" size="1"/>'])
    smath = (f'<reaction id="r1" reversible="false"><listOfReactants><speciesReference species="A">'
             f'<stoichiometryMath>{mathml("k")}</stoichiometryMath></speciesReference></listOfReactants>'
             f'{kinetic("k*A")}</reaction>')
    assert_refused(tmp_path, r"species 'A' in reaction 'r1' has a stoichiometryMath", level=2, reactions=[smath],
            comps=['<compartment id="C" size="1"/>'])


def test_reserved_and_keyword_ids_are_refused(tmp_path):
    assert_refused(tmp_path, r"the parameter id 't' cannot be an odeinfer name: it is reserved for time; rename the id in "
                      r"the SBML file", params=[param("t", 1)])
    assert_refused(tmp_path, r"the species id 'lambda' cannot be an odeinfer name: it is a Python keyword",
            species_=[species("lambda", conc=1)])
    assert_refused(tmp_path, r"'model.xml': SBML model 'm': the id '_k' is no odeinfer name \(it starts with '_'\) and "
                             r"its odeinfer name 'sbml_k' is already an id of the model; rename '_k' or 'sbml_k'",
            params=[param("_k", 1), param("sbml_k", 2)])


def test_ids_with_a_leading_underscore_get_the_prefix_sbml_everywhere(tmp_path):
    # SBML allows ids such as '_k' (SalazarCavazos_MBoC2020's '_rateLaw1'); they become 'sbml_k' in the
    # math, rules, initial assignments, species references, compartments and function calls; a local
    # '_k' of r2 still shadows the global one. _u = _f(_k) = 2*_k; _r1: _A -> B at _u*_A; r2: B -> at
    # 0.25*B (local _k); r3: -> B at the rate of _r1; C of size 2:
    # d_A/dt = -2*k*A/C, dB/dt = (4*k*A - 0.25*B)/C, B(0) = k + 1
    s = load_text(tmp_path, document(
        functions=[f'<functionDefinition id="_f">{mathml("lambda(x, 2*x)")}</functionDefinition>'],
        comps=[comp("_C", 2)], species_=[species("_A", "_C", conc=3), species("B", "_C", conc=0)],
        params=[param("_k", 0.5), param("_u", constant=False), param("k", 7)],
        rules=[f'<assignmentRule variable="_u">{mathml("_f(_k)")}</assignmentRule>'],
        initial=[f'<initialAssignment symbol="B">{mathml("_k + 1")}</initialAssignment>'],
        reactions=[reaction("_r1", "_u*_A", [("_A", 1)], [("B", 1)]),
                   reaction("r2", "_k*B", [("B", 1)], local='<localParameter id="_k" value="0.25"/>'),
                   reaction("r3", "_r1", products=[("B", 1)])]))
    assert s.model.states == ("sbml_A", "B") and s.model.params == ("sbml_C", "sbml_k", "k")
    assert s.values == {"sbml_C": 2.0, "sbml_k": 0.5, "k": 7.0} and set(s.expressions) == {"sbml_u"}
    assert s.initial_state() == {"sbml_A": 3.0, "B": 1.5}
    assert s.renamed == {"_A": "sbml_A", "_C": "sbml_C", "_f": "sbml_f", "_k": "sbml_k", "_r1": "sbml_r1",
                         "_u": "sbml_u"}
    assert sb.odeinfer_name("_rateLaw1") == "sbml_rateLaw1" and sb.odeinfer_name("k_1") == "k_1"
    check_rhs(s, lambda t, y, p: {"sbml_A": -2 * p["sbml_k"] * y["sbml_A"] / p["sbml_C"],
                                  "B": (4 * p["sbml_k"] * y["sbml_A"] - 0.25 * y["B"]) / p["sbml_C"]},
              np.random.default_rng(23))


def test_math_depth_and_size_are_bounded(tmp_path):
    deep = "+".join(["A"] * (sb.MAX_MATH_DEPTH + 5))  # parsed as a left-nested chain of binary sums
    assert_refused(tmp_path, rf"the math nests more than {sb.MAX_MATH_DEPTH} levels deep",
            reactions=[reaction("r1", deep, [("A", 1)])])
    # f0(x) = x + x, f_i(x) = f_{i-1}(x) + f_{i-1}(x): inlining f_20 would visit about 2**21 nodes
    fds = [f'<functionDefinition id="f0">{mathml("lambda(x, x + x)")}</functionDefinition>'] + [
        f'<functionDefinition id="f{i}">{mathml(f"lambda(x, f{i - 1}(x) + f{i - 1}(x))")}</functionDefinition>'
        for i in range(1, 21)]
    assert_refused(tmp_path, rf"more than {sb.MAX_MATH_NODES} nodes", functions=fds,
            reactions=[reaction("r1", "f20(A)", [("A", 1)])])
    loop = [f'<functionDefinition id="g">{mathml("lambda(x, g(x))")}</functionDefinition>']
    assert_refused(tmp_path, r"the function definition 'g' calls itself", functions=loop,
            reactions=[reaction("r1", "g(A)", [("A", 1)])])


def test_substituted_expressions_are_bounded(tmp_path, monkeypatch):
    # r_i = exp(r_{i-1}) + r_{i-1}: 60 rules whose substituted tree doubles at each step (2**60 nodes)
    rules = [f'<assignmentRule variable="r0">{mathml("k")}</assignmentRule>'] + [
        f'<assignmentRule variable="r{i}">{mathml(f"exp(r{i - 1}) + r{i - 1}")}</assignmentRule>' for i in range(1, 61)]
    assert_refused(tmp_path, rf"the value of 'r\d+' has \d+ nodes nested \d+ levels deep .*at most {sb.MAX_EXPR_NODES} nodes",
            params=[param("k", 1)] + [param(f"r{i}", constant=False) for i in range(61)], rules=rules,
            reactions=[reaction("v", "r60*A", [("A", 1)])])
    # a chain longer than MAX_CHAIN
    n = sb.MAX_CHAIN + 2
    rules = [f'<assignmentRule variable="r0">{mathml("k")}</assignmentRule>'] + [
        f'<assignmentRule variable="r{i}">{mathml(f"r{i - 1} + 1")}</assignmentRule>' for i in range(1, n)]
    assert_refused(tmp_path, rf"the assignment rules nest more than {sb.MAX_CHAIN} levels deep",
            params=[param("k", 1)] + [param(f"r{i}", constant=False) for i in range(n)], rules=rules,
            reactions=[reaction("v", f"r{n - 1}*A", [("A", 1)])])
    # the whole document's math
    monkeypatch.setattr(sb, "MAX_DOCUMENT_NODES", 12)
    assert_refused(tmp_path, r"the model's math has more than 12 nodes in all",
            reactions=[reaction("v1", "k*A*A", [("A", 1)]), reaction("v2", "k*A*A", [("A", 1)]),
                       reaction("v3", "k*A*A", [("A", 1)])])


def test_path_must_lie_inside_root(tmp_path):
    inside, outside = tmp_path / "root", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    (outside / "m.xml").write_text(document(**SIMPLE))
    with pytest.raises(InputError, match=r"path: '\.\./elsewhere/m\.xml' lies outside root"):
        load_sbml("../elsewhere/m.xml", root=inside)
    with pytest.raises(InputError, match=r"lies outside root"):
        load_sbml(outside / "m.xml", root=inside)
    (inside / "link.xml").symlink_to(outside / "m.xml")
    with pytest.raises(InputError, match=r"path: 'link\.xml' lies outside root .*symbolic links resolved"):
        load_sbml("link.xml", root=inside)
    (inside / "m.xml").write_text(document(**SIMPLE))
    assert load_sbml("m.xml", root=inside).model.states == ("A",)
    with pytest.raises(InputError, match=r"root: .* is not an existing folder"):
        load_sbml("m.xml", root=inside / "m.xml")
    with pytest.raises(InputError, match=r"path: cannot open 'missing\.xml'"):
        load_sbml("missing.xml", root=inside)
    with pytest.raises(InputError, match=r"path: .* is not a regular file"):
        load_sbml(inside)
    with pytest.raises(InputError, match=r"path: expected a file path \(str or pathlib.Path\), got int"):
        load_sbml(3)
    with pytest.raises(InputError, match=r"path: the path 'a\\x00b' holds a NUL character"):
        load_sbml("a\x00b")
    with pytest.raises(InputError, match=r"name: expected a string"):
        load_sbml(inside / "m.xml", name=3)


def test_too_large_files_are_refused_before_reading(tmp_path):
    big = tmp_path / "big.xml"
    with open(big, "wb") as fh:
        fh.truncate(sb.MAX_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(SBMLError, match=rf"has {sb.MAX_BYTES + 1} bytes; SBML files of at most {sb.MAX_BYTES} bytes"):
        load_sbml(big)


SECRET = "SECRET-PAYLOAD-42"


@pytest.mark.parametrize("content, match", [
    (f"not xml at all {SECRET}", r"is not well-formed XML \(line 1: syntax error\)"),
    (f"<html><body>{SECRET}</body></html>", r"is not a valid SBML document: libsbml reported \d+ error"),
    (('<?xml version="1.0"?><sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" level="3" version="2">'
      f'<model id="m"><listOfParameters><parameter id="{SECRET}" value="x{SECRET}"/></listOfParameters></model>'
      "</sbml>"),
     r"libsbml reported \d+ error\(s\) \(\d+ fatal; libsbml error ids \[.*\]\) on line\(s\) \[1\]"),
    (f'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "{SECRET}">]><sbml>&a;</sbml>', r"document type declaration"),
    ("<a>" * (sb.MAX_XML_DEPTH + 1) + SECRET + "</a>" * (sb.MAX_XML_DEPTH + 1), r"nest more than 1000 levels"),
    (SECRET.encode() + b"\xff\xfe", r"is not UTF-8 text \(invalid byte at offset 17\)"),
])
def test_non_sbml_files_are_refused_without_echoing_them(tmp_path, content, match):
    p = tmp_path / "bad.xml"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SBMLError, match=match) as info:
        load_sbml(p)
    assert SECRET not in str(info.value)


def test_required_packages_are_refused(tmp_path):
    text = document(**SIMPLE).replace(
        HEAD[3], HEAD[3].replace(' level="3"', ' xmlns:qual="http://www.sbml.org/sbml/level3/version1/qual/version1"'
                                               ' qual:required="true" level="3"'))
    with pytest.raises(SBMLError, match=r"model.xml' requires the SBML package 'qual'; SBML core and hierarchical "
                                        r"models \(package comp, flattened\) are supported"):
        load_text(tmp_path, text)


COMP = 'xmlns:comp="http://www.sbml.org/sbml/level3/version1/comp/version1" comp:required="true"'


def comp_document(main, definitions="", external=""):
    """A hierarchical (comp) SBML document: model 'main' with ``main`` as its body."""
    head = HEAD[3].replace(' level="3"', f' {COMP} level="3"')
    ext = f"<comp:listOfExternalModelDefinitions>{external}</comp:listOfExternalModelDefinitions>" if external else ""
    defs = f"<comp:listOfModelDefinitions>{definitions}</comp:listOfModelDefinitions>" if definitions else ""
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{head}<model id="main">{main}</model>{ext}{defs}</sbml>\n'


INNER = {"comps": [comp("C", 2)], "species_": [species("A", conc=3)], "params": [param("k", 0.5)],
         "reactions": [reaction("r1", "k*A", [("A", 1)])]}


def submodel(ref):
    return (f"<listOfParameters>{param('q', 1)}</listOfParameters><comp:listOfSubmodels>"
            f'<comp:submodel comp:id="sub" comp:modelRef="{ref}"/></comp:listOfSubmodels>')


def external(source):
    return f'<comp:externalModelDefinition comp:id="ext" comp:source="{source}" comp:modelRef="inner"/>'


def test_hierarchical_models_are_flattened(tmp_path):
    # main holds the submodel 'sub' of model 'inner' (A -> at rate k*A in C of size 2) and a parameter q;
    # libsbml's flattening prefixes the submodel's ids with 'sub__': d sub__A/dt = -sub__k*sub__A/sub__C
    inner_body = document(**INNER).split('<model id="m">')[1].split("</model>")[0]
    defined = comp_document(submodel("inner"), definitions=f'<comp:modelDefinition id="inner">{inner_body}'
                                                          "</comp:modelDefinition>")
    (tmp_path / "inner.xml").write_text(document(**INNER, model_id="inner"))
    for text in (defined, comp_document(submodel("ext"), external=external("inner.xml"))):
        s = load_text(tmp_path, text, name="main.xml", root=tmp_path)
        assert s.model.states == ("sub__A",) and s.model.params == ("sub__C", "q", "sub__k")
        assert s.values == {"sub__C": 2.0, "q": 1.0, "sub__k": 0.5} and float(s.x0["sub__A"]) == 3.0
        check_rhs(s, lambda t, y, p: {"sub__A": -p["sub__k"] * y["sub__A"] / p["sub__C"]},
                  np.random.default_rng(22))


def test_external_models_outside_the_folder_are_refused(tmp_path):
    folder, other = tmp_path / "problem", tmp_path / "other"
    folder.mkdir(), other.mkdir()
    (other / "inner.xml").write_text(document(**INNER, model_id="inner"))
    (folder / "link.xml").symlink_to(other / "inner.xml")
    for source in ("../other/inner.xml", "link.xml"):
        with pytest.raises(SBMLError, match=r"main.xml': the external model definition 'ext' names a file outside "
                                            r"the SBML file's folder"):
            load_text(folder, comp_document(submodel("ext"), external=external(source)), name="main.xml")
    for source in ("https://example.org/inner.xml", "file:inner.xml", "inner%2Exml", str(other / "inner.xml")):
        with pytest.raises(SBMLError, match=r"the external model definition 'ext' has a source that is no relative "
                                            r"file name"):
            load_text(folder, comp_document(submodel("ext"), external=external(source)), name="main.xml")
    # the external file passes the checks of the file itself
    (folder / "inner.xml").write_text('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><sbml/>')
    with pytest.raises(SBMLError, match=r"path: 'inner.xml' is refused: it holds a document type declaration"):
        load_text(folder, comp_document(submodel("ext"), external=external("inner.xml")), name="main.xml")
    with pytest.raises(SBMLError, match=r"main.xml' is a hierarchical model \(package comp\) that libsbml "
                                        r"could not flatten|is not a valid SBML document"):
        load_text(folder, comp_document(submodel("nowhere")), name="main.xml")


def test_level1_and_errors_are_typed(tmp_path):
    l1 = ('<?xml version="1.0" encoding="UTF-8"?><sbml xmlns="http://www.sbml.org/sbml/level1" level="1" version="2">'
          '<model name="m"><listOfCompartments><compartment name="C"/></listOfCompartments>'
          '<listOfSpecies><species name="A" compartment="C" initialAmount="1"/></listOfSpecies></model></sbml>')
    with pytest.raises(SBMLError, match=r"is SBML Level 1; Levels 2 and 3 are supported"):
        load_text(tmp_path, l1)
    assert issubclass(SBMLError, ModelDefinitionError)
    assert "SBMLError" in __import__("odeinfer.errors").errors.__all__
    assert os.fspath(PETAB)  # the data folder ships with the tests


# -- events as doses ---------------------------------------------------------------------------------
def event(eid, trigger, assignments, extra_attrs="", inner=""):
    """An SBML L3 event: ``assignments`` is [(variable, formula)]."""
    ea = "".join(f'<eventAssignment variable="{v}">{mathml(f)}</eventAssignment>' for v, f in assignments)
    return (f'<event id="{eid}" useValuesFromTriggerTime="true"{extra_attrs}><trigger initialValue="false" '
            f'persistent="true">{mathml(trigger)}</trigger>{inner}<listOfEventAssignments>{ea}'
            '</listOfEventAssignments></event>')


DOSED = {"comps": [comp("C", 2.0)], "species_": [species("A", conc=1.0), species("B", amount=0.5, only_substance=True)],
         "params": [param("k", 0.3), param("amt", 4.0)],
         "reactions": [reaction("r1", "k * A * C", [("A", 1)], [("B", 1)])]}


def test_time_triggered_additions_are_doses(tmp_path):
    from odeinfer.data import Dose

    events = [event("first", "time >= 2", [("A", "A + amt / C")]),
              event("second", "5 < time", [("A", "2.5 + A"), ("B", "B + amt * k")])]
    sbml = load_text(tmp_path, document(**DOSED, extra=f"<listOfEvents>{''.join(events)}</listOfEvents>"))
    doses = sbml.doses
    assert [(d.time, d.state) for d in doses] == [(2.0, "A"), (5.0, "A"), (5.0, "B")]
    assert all(isinstance(d, Dose) for d in doses)
    assert doses[1].amount == 2.5
    # amounts as expressions of the parameters: amt / C = 2 and amt * k = 1.2 at the SBML values
    from odeinfer.model.equations import parse_expression

    names = {n: sp.Symbol(n, real=True) for n in sbml.values}
    for d, want in ((doses[0], 2.0), (doses[2], 1.2)):
        assert number(parse_expression(d.amount, names, "amount"), sbml) == pytest.approx(want, rel=1e-15)


def test_resets_and_parameter_trigger_times(tmp_path):
    """``A = value`` (free of A) is a reset (mode "set"); a trigger time of parameters keeps its text in
    ``dose_times`` and its value at the SBML values (k = 0.3: 10 k = 3) as the Dose's time."""
    events = [event("wash", "time >= 10 * k", [("A", "0"), ("B", "amt / 2")]),
              event("refill", "time > 7", [("A", "A + 1"), ("B", "k")])]
    sbml = load_text(tmp_path, document(**DOSED, extra=f"<listOfEvents>{''.join(events)}</listOfEvents>"))
    got = [(d.time, d.state, d.amount, d.mode) for d in sbml.doses]
    assert got[0] == (pytest.approx(3.0, rel=1e-15), "A", 0.0, "set")
    assert got[1][1:] == ("B", "amt/2", "set") and got[1][0] == got[0][0]
    assert got[2:] == [(7.0, "A", 1.0, "add"), (7.0, "B", "k", "set")]
    assert sbml.dose_times == ("10*k", "10*k", None, None)
    assert sbml.dose_events == ("wash", "wash", "refill", "refill")


def test_boundary_species_and_parameters_that_events_assign_are_states(tmp_path):
    """A boundary species (Smith_BMCSystBiol2013's insulin) and a non-constant parameter, changed only by events:
    states of derivative 0 (the boundary species' reactions do not change it), with their initial values."""
    doc = document(comps=[comp("C", 2.0)],
                   species_=[species("A", conc=1.0), species("S", amount=3.0, only_substance=True, boundary=True)],
                   params=[param("k", 0.3), param("u", 0.5, constant=False)],
                   reactions=[reaction("r1", "k * S * u * C", [("S", 1)], [("A", 1)])],
                   extra=f"<listOfEvents>{event('off', 'time >= 4', [('S', '0'), ('u', 'u + k')])}</listOfEvents>")
    sbml = load_text(tmp_path, doc)
    assert sbml.model.states == ("A", "S", "u") and sbml.model.params == ("C", "k")
    assert [float(sbml.x0[s]) for s in sbml.model.states] == [1.0, 3.0, 0.5]
    assert [(d.time, d.state, d.amount, d.mode) for d in sbml.doses] == [(4.0, "S", 0.0, "set"), (4.0, "u", "k", "add")]
    check_rhs(sbml, lambda t, y, p: {"A": p["k"] * y["S"] * y["u"] * p["C"] / p["C"], "S": 0.0, "u": 0.0},
              np.random.default_rng(3))
    # a constant species stays a parameter, and an event may not assign it
    doc = document(comps=[comp("C", 2.0)], species_=[species("A", conc=1.0), species("S", amount=3.0, constant=True)],
                   extra=f"<listOfEvents>{event('off', 'time >= 4', [('S', '0')])}</listOfEvents>")
    with pytest.raises(SBMLError, match=r"event 'off' assigns 'S', which is no state"):
        load_text(tmp_path, doc)


@pytest.mark.parametrize("ev, match", [
    (event("late", "time >= 2", [("A", "A + 1")], inner=f"<delay>{mathml('1')}</delay>"),
     r"'model.xml': SBML model 'm': event 'late' has a delay; delayed events are not supported"),
    (event("prio", "time >= 2", [("A", "A + 1")], inner=f"<priority>{mathml('1')}</priority>"),
     r"event 'prio' has a priority; event priorities are not supported"),
    (event("both", "A > 0.5 && time > 1", [("A", "A + 1")]),
     r"event 'both' has a trigger that is not one comparison \(a < b, a <= b, a > b or a >= b\)"),
    (event("zero", "time >= 0", [("A", "A + 1")]), r"the trigger time of event 'zero' is not a positive number"),
    (event("par", "time >= k - 1", [("A", "A + 1")]),
     r"the trigger time of event 'par' is not a positive number at the SBML values of its parameters"),
    (event("knob", "time >= 2", [("k", "k + 1")]), r"event 'knob' assigns 'k', which is no state"),
])
def test_other_events_are_refused_naming_the_event_and_the_file(tmp_path, ev, match):
    with pytest.raises(SBMLError, match=match):
        load_text(tmp_path, document(**DOSED, extra=f"<listOfEvents>{ev}</listOfEvents>"))


def test_events_with_state_triggers_or_state_dependent_assignments_are_state_events(tmp_path):
    """A trigger on the states, a trigger time that is a state, and assignments that depend on the states (at a fixed
    time too): oi.Event s with the trigger and the assignments as text; the dose-form event stays a dose."""
    evs = [event("thr", "A > 0.5", [("A", "A + 1")]), event("state", "time >= B", [("A", "A + 1")]),
           event("scale", "time >= 2", [("A", "2 * A")]), event("copy", "time >= 2", [("A", "B"), ("B", "0")]),
           event("dose", "time >= 3", [("A", "A + 1")])]
    sbml = load_text(tmp_path, document(**DOSED, extra=f"<listOfEvents>{''.join(evs)}</listOfEvents>"))
    got = [(e.name, e.trigger, e.assign, e.initial_value) for e in sbml.state_events]
    assert [g[0] for g in got] == ["thr", "state", "scale", "copy"]
    assert got[0][2] == {"A": "A + 1"} and got[2][2] == {"A": "2*A"} and got[3][2] == {"A": "B", "B": 0.0}
    assert [(d.time, d.state, d.amount) for d in sbml.doses] == [(3.0, "A", 1.0)]
