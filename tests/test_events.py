"""Events whose trigger depends on the states (oi.Event; odeinfer/likelihood/events.py).

References: the closed form of a sawtooth (x' = -k x, reset to a when x falls below c) and central
differences of its NLL; the collection's own simulations for Liu_IFACPapersOnLine2025 (an SBML event
with a state trigger, and a constant defined by an initial assignment that the condition table sets).
Tolerances were fixed before the runs: NLL rel 1e-8 and gradient rel 1e-6 with a tight solver (rtol
1e-12), observables rel 1e-5 against the collection's simulations (AMICI's tolerances).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError

PETAB = Path(__file__).parent / "data" / "petab"
K, C, A, X0 = 0.7, 1.0, 3.0, 5.0
T = np.linspace(0.5, 10.0, 40)


def sawtooth(t, k, c, a, x0):
    """x' = -k x from x0; whenever x falls below c it is set to a (a > c)."""
    t = np.asarray(t, float)
    if x0 < c:  # already below at the start: a reset at t = 0 (initial_value=False)
        return sawtooth(t, k, c, a, a)
    t1, period = math.log(x0 / c) / k, math.log(a / c) / k
    s = t - t1
    return np.where(t < t1, x0 * np.exp(-k * t), a * np.exp(-k * (s - np.floor(s / period) * period)))


def _data(x0=X0, seed=3):
    rng = np.random.default_rng(seed)
    return sawtooth(T, K, C, A, x0) + 0.1 * rng.standard_normal(T.size)


def _problem(y, x0=X0, initial_value=True, c=None, **events):
    m = oi.Model.from_equations({"x": "-k*x"}, params=["k", "c", "a"]).observe({"xo": "x"}, noise=oi.Normal(sigma=0.1))
    data = oi.Data(T, y[:, None], ["xo"], t0=0.0)
    ev = events.get("events", [oi.Event("x < c", {"x": "a"}, initial_value=initial_value)])
    params = {"k": oi.Param(), "c": oi.Param() if c is None else c, "a": oi.Param()}
    return oi.FitProblem(m, data, params, x0={"x": x0}, events=ev)


def _nll(y, u, x0=X0):
    r = y - sawtooth(T, *u, x0)
    return float(np.sum(0.5 * np.log(2 * np.pi * 0.01) + r ** 2 / 0.02))


def _fd(y, u, x0=X0, h=1e-6):
    return np.array([(_nll(y, u + h * e, x0) - _nll(y, u - h * e, x0)) / (2 * h) for e in np.eye(len(u))])


def tight():
    return oi.Dopri5(rtol=1e-12, atol=1e-12)


def test_sawtooth_nll_and_gradient_match_the_closed_form():
    y = _data()
    obj = oi.Objective(_problem(y), solver=tight())
    for u in (np.array([K, C, A]), np.array([0.9, 1.3, 2.5])):  # 6 and 9 resets in (0, 10]
        ev = obj(u)
        assert ev.failure is None
        assert ev.nll == pytest.approx(_nll(y, u), rel=1e-8)
        np.testing.assert_allclose(ev.grad, _fd(y, u), rtol=1e-6)


def test_the_default_solver_is_as_accurate_as_without_events():
    """With the likelihood's default solver (rtol 1e-6) the NLL and gradient keep that solver's accuracy."""
    y = _data()
    u = np.array([K, C, A])
    ev = oi.Objective(_problem(y))(u)
    assert abs(ev.nll - _nll(y, u)) < 1e-3
    np.testing.assert_allclose(ev.grad, _fd(y, u), rtol=1e-3)


def test_solves_of_the_states_alone_start_stiff_where_the_segment_went_stiff():
    """The sawtooth with a stiff follower z' = -L (z - x), L = 1e4: oi.Auto switches the segment to Rodas; the event
    search's probes and the value alone inherit that switch (the segment's reason) instead of each starting on
    Dormand-Prince again; the NLL keeps the default solver's accuracy against the closed form."""
    m = oi.Model.from_equations({"x": "-k*x", "z": "-L*(z - x)"}, params=["k", "c", "a", "L"]).observe(
        {"xo": "x"}, noise=oi.Normal(sigma=0.1))
    y = _data()
    problem = oi.FitProblem(m, oi.Data(T, y[:, None], ["xo"], t0=0.0),
                            {"k": oi.Param(), "c": oi.Param(), "a": oi.Param(), "L": 1e4}, x0={"x": X0, "z": X0},
                            events=[oi.Event("x < c", {"x": "a"})])
    obj = oi.Objective(problem)
    u = np.array([K, C, A])
    ev = obj(u)
    assert ev.failure is None and abs(ev.nll - _nll(y, u)) < 1e-3
    seg = obj.runs[0].segments[0]
    fine, probes = seg.fine[2], seg.fine[3].base
    assert fine.stiff_in_scope and fine.switch_reason.startswith("dopri5")
    assert probes.stiff_in_scope and probes.switch_reason == fine.switch_reason
    alone = obj.value(u)
    assert abs(alone.nll - _nll(y, u)) < 1e-3
    twin = seg.alone(fine=True).solver
    assert twin.stiff_in_scope and twin.switch_reason == fine.switch_reason


@pytest.mark.parametrize("initial_value", [True, False])
def test_a_trigger_true_at_the_start_fires_only_if_its_initial_value_is_false(initial_value):
    y = _data()
    u = np.array([K, C, A])
    ev = oi.Objective(_problem(y, x0=0.5, initial_value=initial_value), solver=tight())(u)
    if initial_value:  # true before the start too: no event, x decays from 0.5 (the trigger never turns true again)
        r = y - 0.5 * np.exp(-K * T)
        expected = float(np.sum(0.5 * np.log(2 * np.pi * 0.01) + r ** 2 / 0.02))
    else:  # false before the start: it fires at t = 0 and the sawtooth starts from a
        expected = _nll(y, u, x0=0.5)
    assert ev.nll == pytest.approx(expected, rel=1e-8)


def _switch_problem(y, params):
    """x' = -k x + u, u' = 0 with u = 0 at the start; once x falls below c, an infusion starts: u = r. x is continuous
    (its derivative jumps), so the NLL is smooth in (k, c, r)."""
    m = oi.Model.from_equations({"x": "-k*x + u", "u": "0"}, params=["k", "c", "r"]).observe(
        {"xo": "x"}, noise=oi.Normal(sigma=0.1))
    data = oi.Data(T, y[:, None], ["xo"], t0=0.0)
    return oi.FitProblem(m, data, params, x0={"x": X0, "u": 0.0}, events=[oi.Event("x < c", {"u": "r"})])


def switched(t, k, c, r):
    t1 = math.log(X0 / c) / k
    return np.where(t < t1, X0 * np.exp(-k * t), r / k + (c - r / k) * np.exp(-k * (t - t1)))


def test_embedding_fits_a_problem_with_events():
    """The switch: its NLL and gradient against the closed form, and a fit from a start 20-30% off that recovers the
    truth within 3 standard errors."""
    truth = np.array([0.7, 1.5, 2.0])
    rng = np.random.default_rng(6)
    y = switched(T, *truth) + 0.1 * rng.standard_normal(T.size)

    def nll(u):
        return float(np.sum(0.5 * np.log(2 * np.pi * 0.01) + (y - switched(T, *u)) ** 2 / 0.02))

    problem = _switch_problem(y, {"k": oi.Param(), "c": oi.Param(), "r": oi.Param()})
    ev = oi.Objective(problem, solver=tight())(truth)
    assert ev.nll == pytest.approx(nll(truth), rel=1e-8)
    fd = np.array([(nll(truth + 1e-6 * e) - nll(truth - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)
    fit = oi.Embedding().fit(problem, start=[0.9, 1.2, 2.5])
    assert fit.status == "converged"
    assert np.all(np.abs(fit.values - truth) < 3 * fit.bse.to_numpy())


def test_events_survive_the_json_round_trip():
    from odeinfer.results._problem_json import objective_from_dict, problem_to_dict

    y = _data()
    obj = oi.Objective(_problem(y), solver=tight())
    stored = json.loads(json.dumps(problem_to_dict(obj)))
    again = objective_from_dict(obj.problem.model, stored, "test")
    assert again.problem.events == obj.problem.events
    u = np.array([K, C, A])
    assert again(u).nll == pytest.approx(obj(u).nll, rel=1e-12)


# --- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("events, match", [
    ([oi.Event("x + c", {"x": "a"})], r"events\[0\]\.trigger: expected one comparison"),
    ([oi.Event(3, {"x": "a"})], r"events\[0\]\.trigger: expected a string"),
    ([oi.Event("x < c", {"z": "a"})], r"events\[0\]\.assign: 'z' is not a state"),
    ([oi.Event("x < c", {})], r"events\[0\]\.assign: expected a non-empty dict"),
    ([oi.Event("x < c", {"x": float("nan")})], r"events\[0\]\.assign\['x'\]: expected a finite value"),
    ([oi.Event("x < c", {"x": "a"}, initial_value="yes")], r"events\[0\]\.initial_value: expected True or False"),
    (["x < c"], r"events\[0\]: expected an oi.Event, got str"),
    (7, r"events: expected a list of oi.Event, got int"),
])
def test_bad_events_are_refused_with_a_typed_error(events, match):
    with pytest.raises(InputError, match=match):
        _problem(_data(), events=events)


def test_methods_that_do_not_run_events_refuse_them():
    from odeinfer.likelihood.shooting import MultipleShooting

    problem = _problem(_data())
    with pytest.raises(InputError, match="event.*multiple shooting does not run"):
        MultipleShooting(problem, segments=2)
    with pytest.raises(InputError, match="event.*simultaneous"):
        oi.Simultaneous().fit(problem, start=[K, C, A])


def test_events_with_pre_equilibration_are_refused():
    m = oi.Model.from_equations({"x": "k0 - k*x"}, params=["k0", "k"]).observe({"xo": "x"}, noise=oi.Normal(sigma=0.1))
    cond = oi.Condition(params={"k0": 2.0}, preequilibrate=oi.Condition(params={"k0": 1.0}))
    data = oi.Experiments([oi.Data(T, np.ones((T.size, 1)), ["xo"], t0=0.0)], names=["e"], conditions={"e": cond})
    with pytest.raises(InputError, match="experiment 'e' has pre-equilibration, which does not run events"):
        oi.FitProblem(m, data, x0={"x": 1.0}, events=[oi.Event("x > 1.5", {"x": 0})])


# --- SBML and PEtab ---------------------------------------------------------------------------
def _mathml(formula):
    import libsbml

    return libsbml.writeMathMLToString(libsbml.parseL3Formula(formula)).split("\n", 1)[1]


def _sawtooth_petab(tmp_path, rng_seed=4):
    """The sawtooth as SBML (a reaction x -> with rate k x, an event 'x < c' setting x = a) whose initial value is a
    constant defined by an initial assignment (x_init = 5) that the condition table sets per condition."""
    sbml = ('<?xml version="1.0" encoding="UTF-8"?>\n<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" '
            'level="3" version="2"><model id="saw"><listOfCompartments><compartment id="C1" spatialDimensions="3" '
            'size="1" constant="true"/></listOfCompartments><listOfSpecies><species id="x" compartment="C1" '
            'hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/></listOfSpecies>'
            '<listOfParameters><parameter id="k" value="0.7" constant="true"/><parameter id="c" value="1" '
            'constant="true"/><parameter id="a" value="3" constant="true"/><parameter id="x_init" constant="true"/>'
            '</listOfParameters><listOfInitialAssignments>'
            f'<initialAssignment symbol="x_init">{_mathml("2 * 2.5")}</initialAssignment>'
            f'<initialAssignment symbol="x">{_mathml("x_init")}</initialAssignment></listOfInitialAssignments>'
            '<listOfReactions><reaction id="deg" reversible="false"><listOfReactants><speciesReference species="x" '
            f'stoichiometry="1" constant="true"/></listOfReactants><kineticLaw>{_mathml("k * x * C1")}</kineticLaw>'
            '</reaction></listOfReactions><listOfEvents><event id="reset" useValuesFromTriggerTime="true">'
            f'<trigger initialValue="true" persistent="true">{_mathml("x < c")}</trigger><listOfEventAssignments>'
            f'<eventAssignment variable="x">{_mathml("a")}</eventAssignment></listOfEventAssignments></event>'
            '</listOfEvents></model></sbml>\n')
    folder = tmp_path / "saw"
    folder.mkdir()
    (folder / "model.xml").write_text(sbml)
    (folder / "conditions.tsv").write_text("conditionId\tx_init\nc1\t5\nc2\t4\n")
    (folder / "observables.tsv").write_text("observableId\tobservableFormula\tnoiseFormula\nobs_x\tx\t0.1\n")
    rng = np.random.default_rng(rng_seed)
    data = [(cid, float(t), float(sawtooth(t, K, C, A, x0) + 0.1 * rng.standard_normal()))
            for cid, x0 in (("c1", 5.0), ("c2", 4.0)) for t in T]
    (folder / "measurements.tsv").write_text("observableId\tsimulationConditionId\tmeasurement\ttime\n" + "".join(
        f"obs_x\t{c}\t{y!r}\t{t!r}\n" for c, t, y in data))
    (folder / "parameters.tsv").write_text(
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "k\tlog10\t0.01\t10\t0.7\t1\nc\tlin\t0.1\t2\t1\t1\na\tlin\t2\t10\t3\t1\n")
    (folder / "saw.yaml").write_text(
        "format_version: 1\nparameter_file: parameters.tsv\nproblems:\n- condition_files: [conditions.tsv]\n"
        "  measurement_files: [measurements.tsv]\n  observable_files: [observables.tsv]\n  sbml_files: [model.xml]\n")
    return folder / "saw.yaml", data


def test_an_sbml_event_with_a_state_trigger_runs_in_the_petab_likelihood(tmp_path):
    yaml, data = _sawtooth_petab(tmp_path)
    pp = oi.petab.load(yaml)
    assert pp.problem.events == (oi.Event("x < c", {"x": "a"}, True, "reset"),)

    def nll(k, c, a):
        return sum(0.5 * math.log(2 * math.pi * 0.01) + 0.5 * ((y - sawtooth(t, k, c, a, 5.0 if cid == "c1" else 4.0))
                                                              / 0.1) ** 2 for cid, t, y in data)

    obj = pp.objective(tight())
    u = np.array([math.log10(K), C, A])
    ev = obj(u)
    assert ev.nll == pytest.approx(nll(K, C, A), rel=1e-8)
    h = 1e-6
    fd = [(nll(10 ** (u[0] + h), C, A) - nll(10 ** (u[0] - h), C, A)) / (2 * h),
          (nll(K, C + h, A) - nll(K, C - h, A)) / (2 * h), (nll(K, C, A + h) - nll(K, C, A - h)) / (2 * h)]
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)


def test_liu_matches_the_collections_simulation():
    """Liu_IFACPapersOnLine2025: V(0) = u_2, a constant defined by an initial assignment (1e9) that the condition
    table sets per condition (1e9 with the virus, 0 in the control); the tumour's extinction is an SBML event
    (U = 0 once U < 1e-8). The observable at the nominal parameters against the collection's simulatedData."""
    name = "Liu_IFACPapersOnLine2025"
    pp = oi.petab.load(PETAB / name / f"{name}.yaml")
    assert [e.trigger for e in pp.problem.events] == ["U < 1e-08"]
    obj = pp.objective(tight())
    with open(PETAB / name / f"simulatedData_{name}.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert {r["simulationConditionId"] for r in rows} == {"vvDD", "ctrl"}
    for cond in ("vvDD", "ctrl"):
        mine = [r for r in rows if r["simulationConditionId"] == cond]
        t = np.array(sorted({float(r["time"]) for r in mine}))
        h, _ = obj.observe_at(pp.u_nominal, cond, t)
        for r in mine:
            got = h[np.searchsorted(t, float(r["time"])), 0]
            assert got == pytest.approx(float(r["simulation"]), rel=1e-5)


def test_a_trigger_true_only_between_two_grid_points_is_found():
    """x'' = -x from x(0) = 1: x exceeds 0.999 for 0.089 time units around each peak t = 2 pi m, between grid points
    0.25 apart (200 per segment on [0, 50]); each excursion fires n = n + 1 once: n(t) counts the peaks before t."""
    m = oi.Model.from_equations({"x": "v", "v": "-w**2*x", "n": "0"}, params=["w"]).observe(
        {"count": "n"}, noise=oi.Normal(sigma=0.1))
    t = np.array([5.0, 10.0, 20.0, 30.0, 40.0, 50.0])
    data = oi.Data(t, np.zeros((t.size, 1)), ["count"], t0=0.0)
    problem = oi.FitProblem(m, data, {"w": oi.Param()}, x0={"x": 1.0, "v": 0.0, "n": 0.0},
                            events=[oi.Event("x > 0.999", {"n": "n + 1"})])
    obj = oi.Objective(problem, solver=tight())
    h, dh = obj.observe_at(np.array([1.0]), problem.experiments.names[0], t)
    peaks = np.floor((t + math.acos(0.999)) / (2 * math.pi))  # the crossings at 2 pi m - acos(0.999), m >= 1
    np.testing.assert_array_equal(h[:, 0], peaks)
    assert np.all(dh == 0)  # a count does not move with w


def test_a_dip_and_return_soon_after_the_start_is_found():
    """x = 1 - A t exp(-b t) (x'' + 2 b x' + b^2 (x - 1) = 0, x(0) = 1, x'(0) = -A), A = 20, b = 10: x falls
    below 0.5 at t1 = 0.030 and comes back above it at t2 = 0.303, both before the first of the equally spaced
    grid points (0.5 apart on [0, 100]) where x > 0.5 too. The event on x > 0.5 fires once, at t2: n = 1 after
    it, and c' = n gives c = t - t2. Reference: t2 by scipy's brentq on the closed form."""
    from scipy.optimize import brentq
    A, b = 20.0, 10.0
    t2 = brentq(lambda t: 0.5 - A * t * math.exp(-b * t), 0.1, 1.0)
    m = oi.Model.from_equations({"x": "v", "v": "-2*b*v - b**2*(x - 1)", "n": "0", "c": "n"},
                                params=["b"]).observe({"count": "n", "clock": "c"}, noise=oi.Normal(sigma=0.1))
    t = np.array([10.0, 50.0, 100.0])
    data = oi.Data(t, np.zeros((t.size, 2)), ["count", "clock"], t0=0.0)
    problem = oi.FitProblem(m, data, {"b": oi.Param()}, x0={"x": 1.0, "v": -A, "n": 0.0, "c": 0.0},
                            events=[oi.Event("x > 0.5", {"n": "n + 1"})])
    obj = oi.Objective(problem, solver=tight())
    h, _ = obj.observe_at(np.array([b]), problem.experiments.names[0], t)
    np.testing.assert_array_equal(h[:, 0], 1.0)
    np.testing.assert_allclose(h[:, 1], t - t2, rtol=0, atol=1e-8)


def _switched_after_dose(t, k, c, r, dose, t_dose):
    """The switch of :func:`_switch_problem` with a bolus ``dose`` on x at ``t_dose`` (before x reaches c)."""
    x1 = X0 * math.exp(-k * t_dose) + dose
    t1 = t_dose + math.log(x1 / c) / k
    return np.where(t < t_dose, X0 * np.exp(-k * t), np.where(t < t1, x1 * np.exp(-k * (t - t_dose)),
                                                                  r / k + (c - r / k) * np.exp(-k * (t - t1))))


@pytest.mark.parametrize("solver", [oi.Dopri5(rtol=1e-12, atol=1e-12), oi.Rodas(rtol=1e-11, atol=1e-12)])
def test_events_across_experiments_doses_and_solvers(solver):
    """Two experiments: one with a bolus on x at t = 1 (a segment cut before the event), one whose threshold is a
    parameter of its own (c_alt, set by its condition); Dormand-Prince and Rodas. NLL and gradient against the closed
    forms (gradient by central differences)."""
    m = oi.Model.from_equations({"x": "-k*x + u", "u": "0"}, params=["k", "c", "r"]).observe(
        {"xo": "x"}, noise=oi.Normal(sigma=0.1))
    rng = np.random.default_rng(9)
    y1 = _switched_after_dose(T, 0.7, 1.5, 2.0, 2.0, 1.0) + 0.1 * rng.standard_normal(T.size)
    y2 = switched(T, 0.7, 1.2, 2.0) + 0.1 * rng.standard_normal(T.size)
    exps = oi.Experiments([oi.Data(T, y1[:, None], ["xo"], t0=0.0), oi.Data(T, y2[:, None], ["xo"], t0=0.0)],
                          names=["dosed", "low"], conditions={"dosed": oi.Condition(doses=[oi.Dose(1.0, "x", 2.0)]),
                                                              "low": oi.Condition(params={"c": "c_alt"})})
    problem = oi.FitProblem(m, exps, {"k": oi.Param(), "c": oi.Param(), "r": oi.Param(), "c_alt": oi.Param()},
                            x0={"x": X0, "u": 0.0}, events=[oi.Event("x < c", {"u": "r"})])
    assert problem.estimated == ("k", "c", "r", "c_alt")

    def nll(u):
        k, c, r, c_alt = u
        res = np.concatenate([y1 - _switched_after_dose(T, k, c, r, 2.0, 1.0), y2 - switched(T, k, c_alt, r)])
        return float(np.sum(0.5 * np.log(2 * np.pi * 0.01) + res ** 2 / 0.02))

    u = np.array([0.7, 1.5, 2.0, 1.2])
    obj = oi.Objective(problem, solver=solver)
    ev = obj(u)
    assert ev.failure is None
    assert ev.nll == pytest.approx(nll(u), rel=1e-8)
    alone = obj.value(u)  # the same events, doses and conditions on solves of the states alone
    assert alone.grad is None and alone.nll == pytest.approx(nll(u), rel=1e-8)
    fd = np.array([(nll(u + 1e-6 * e) - nll(u - 1e-6 * e)) / 2e-6 for e in np.eye(4)])
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)


# --- jumps and kinks of the right-hand side where a condition on the states changes ----------------
def _switch_rhs(t, k, c, r, q, y0=5.0, x0=2.0):
    """y' = -k y; x' = where(y < c, r, -q x): x decays until y falls below c at t1 = log(y0 / c) / k, then grows
    at the rate r."""
    t1 = math.log(y0 / c) / k
    x = np.where(t < t1, x0 * np.exp(-q * t), x0 * math.exp(-q * t1) + r * (t - t1))
    return np.stack([x, y0 * np.exp(-k * t)], 1)


def _kink_rhs(t, k, c, a, y0=5.0, x0=2.0):
    """y' = -k y; x' = where(y > c, a (y - c), 0), continuous where y = c (a kink): x grows until t1, then stays."""
    t1 = math.log(y0 / c) / k
    tt = np.minimum(t, t1)
    return np.stack([x0 + a * (y0 / k * (1 - np.exp(-k * tt)) - c * tt), y0 * np.exp(-k * t)], 1)


@pytest.mark.parametrize("rhs, closed, truth", [
    ("where(y < c, r, -q*x)", _switch_rhs, [0.5, 1.0, 0.3, 0.4]),
    ("where(y > c, a*(y - c), 0)", _kink_rhs, [0.5, 1.0, 0.3]),
])
def test_a_state_dependent_jump_or_kink_of_the_right_hand_side_is_located(rhs, closed, truth):
    """The likelihood locates where the condition on y changes and adds the sensitivities' jump there (for the jump
    of x' from -q x to r); the solvers alone refuse gradients through such a jump."""
    names = ["k", "c", "r", "q"] if "q" in rhs else ["k", "c", "a"]
    m = oi.Model.from_equations({"x": rhs, "y": "-k*y"}, params=names).observe(
        {"xo": "x", "yo": "y"}, noise=oi.Normal(sigma=0.1))
    truth = np.array(truth)
    rng = np.random.default_rng(2)
    Y = closed(T, *truth) + 0.1 * rng.standard_normal((T.size, 2))
    problem = oi.FitProblem(m, oi.Data(T, Y, ["xo", "yo"], t0=0.0), {n: oi.Param() for n in names},
                            x0={"x": 2.0, "y": 5.0})

    def nll(u):
        return float(np.sum(0.5 * np.log(2 * np.pi * 0.01) + (Y - closed(T, *u)) ** 2 / 0.02))

    obj = oi.Objective(problem, solver=tight())
    ev = obj(truth)
    assert ev.failure is None
    assert ev.nll == pytest.approx(nll(truth), rel=1e-8)
    assert obj.value(truth).nll == pytest.approx(nll(truth), rel=1e-8)
    fd = np.array([(nll(truth + 1e-6 * e) - nll(truth - 1e-6 * e)) / 2e-6 for e in np.eye(truth.size)])
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-6)
    if "q" in rhs:
        with pytest.raises(InputError, match="jump of the right-hand side"):
            oi.bind(oi.Problem(m, T), gradient=oi.Forward())


def test_a_trajectory_that_slides_along_a_switch_fails_with_the_reason():
    """x' = -x + where(x < c, k, 0) with k > c: below c the production pushes x up, above it x decays: x slides
    along c (a Filippov sliding mode): with each branch held between located switches, the switch fires again and
    again at one time, and the failure says so."""
    m = oi.Model.from_equations({"x": "-x + where(x < c, k, 0)"}, params=["k", "c"]).observe(
        {"xo": "x"}, noise=oi.Normal(sigma=0.1))
    problem = oi.FitProblem(m, oi.Data(T, np.ones((T.size, 1)), ["xo"], t0=0.0),
                            {"k": oi.Param(), "c": oi.Param()}, x0={"x": 2.0})
    ev = oi.Objective(problem)(np.array([1.5, 1.0]))
    assert not ev.ok
    assert "the switch at" in ev.failure and "fired again and again" in ev.failure
    assert "for a switch of the right-hand side, it slides along it" in ev.failure
