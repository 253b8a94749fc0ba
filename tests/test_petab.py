"""PEtab v1 import (odeinfer.petab.load, in odeinfer.petab.tables).

Expected values come from outside odeinfer:

* the log-likelihoods at the nominal parameters that AMICI's benchmark tests publish
  (``tests/benchmark_models/benchmark_models.yaml`` of the AMICI repository: Boehm
  -138.22199693517703, Fujita 53.08377736998929, Crauste -190.96521897435176, Elowitz
  63.20279991419332, Zheng 278.33353271001477, Bruno 46.688176988431806, Borghans
  83.3237191357272, Fiedler 58.58390161681, Brannmark -141.889113770537; the NLL is their negative);
* for Perelson (no published value) and Crauste, scipy's solve_ivp of the ODE written here by
  hand from the SBML reaction lists, with PEtab's NLL written by hand from the tables (read
  with the csv module);
* central finite differences for the gradients;
* hand-built PEtab folders for the bad-input cases (each a typed error naming the file, column
  and id, never the file's other text).

Each benchmark problem is loaded and evaluated once (cached); Fujita and Zheng take a few seconds.
"""

import csv
import functools
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError, PetabError
from odeinfer.petab import load

from odeinfer.petab import tables as LOAD  # noqa: N812

PETAB = Path(__file__).parent / "data" / "petab"
# AMICI's published log-likelihoods at the nominal parameters (see the module docstring)
AMICI_LLH = {"Boehm_JProteomeRes2014": -138.22199693517703, "Fujita_SciSignal2010": 53.08377736998929,
             "Crauste_CellSystems2017": -190.96521897435176, "Elowitz_Nature2000": 63.20279991419332,
             "Zheng_PNAS2012": 278.33353271001477, "Bruno_JExpBot2016": 46.688176988431806,
             "Borghans_BiophysChem1997": 83.3237191357272, "Fiedler_BMCSystBiol2016": 58.58390161681,
             "Brannmark_JBC2010": -141.889113770537}
SECRET = "SECRET-PAYLOAD-42"


def tight():
    return oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=200_000)


@functools.cache
def benchmark(name):
    """(PetabProblem, Objective with a tight solver, NLL at the nominal parameters)."""
    pp = load(PETAB / name / f"{name}.yaml")
    obj = pp.objective(tight())
    ev = obj(pp.u_nominal, grad=False)
    assert ev.ok, ev.failure
    return pp, obj, ev.nll


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def nominal_table(name):
    return {r["parameterId"]: float(r["nominalValue"])
            for r in rows(PETAB / name / f"parameters_{name}.tsv")}


# -- the published references ------------------------------------------------------------------
@pytest.mark.parametrize("name", [
    "Boehm_JProteomeRes2014", "Elowitz_Nature2000", "Fujita_SciSignal2010", "Zheng_PNAS2012",
    # from the survey of the whole collection (benchmarks/petab_collection.py): 42 experiments
    # (Bruno), a fitted offset and scale per observable (Borghans), pre-equilibration of a model
    # whose step-input times each condition fixes (Brannmark)
    "Bruno_JExpBot2016", "Borghans_BiophysChem1997", "Fiedler_BMCSystBiol2016", "Brannmark_JBC2010",
    pytest.param("Crauste_CellSystems2017", marks=pytest.mark.xfail(strict=True, reason=(
        "measured NLL 190.963978 vs AMICI's 190.965219 (difference 1.24e-3): AMICI computed its reference "
        "with rtol = atol = 1e-8 (its test file); the model is ill-conditioned (the NLL moves by 1e-3 when "
        "rho_E moves by 1e-7 relative) and scipy's BDF at 1e-8 is itself off by 2.5e-4, while Radau, LSODA "
        "and BDF at 1e-10 and odeinfer's Rodas at 1e-8..1e-12 agree on 190.963978 to 1e-7, as do "
        "libRoadRunner's CVODE at rtol 1e-10..1e-12 (190.96606 at 1e-8; benchmarks/roadrunner_reference.py) "
        "and the collection's own simulatedData file; "
        "test_crauste_matches_a_hand_written_scipy_solution checks that value"))),
])
def test_nll_at_nominal_matches_amici_reference(name):
    pp, obj, nll = benchmark(name)
    assert abs(nll - (-AMICI_LLH[name])) < 1e-3, (nll, -AMICI_LLH[name])
    # the value alone (solves of the states alone, no sensitivities): the same reference
    alone = obj.value(pp.u_nominal)
    assert alone.ok and alone.grad is None, alone.failure
    assert abs(alone.nll - (-AMICI_LLH[name])) < 1e-3, (alone.nll, -AMICI_LLH[name])
    assert all(seg.alone().solver.gradient is None for run in obj.runs for seg in run.segments)


def _hand_nll(name, rhs, x0, observe, t_end):
    """PEtab's NLL from the measurement table, with the states from scipy's Radau solution of ``rhs``."""
    from scipy.integrate import solve_ivp

    data = rows(PETAB / name / f"measurementData_{name}.tsv")
    params = nominal_table(name)
    times = sorted({float(r["time"]) for r in data})
    sol = solve_ivp(lambda t, y: rhs(y, params), (0.0, t_end), x0, method="Radau", t_eval=times,
                    rtol=1e-12, atol=1e-10, dense_output=False)
    assert sol.success
    nll = 0.0
    for r in data:
        y = sol.y[:, times.index(float(r["time"]))]
        nll += observe(r, y, params)
    return nll


def _perelson_rhs(y, p):
    # by hand from the SBML reactions (compartment default = 1): v1: -> Tstar at K0*T0*Vin;
    # v2: Tstar -> at delta*Tstar; v3: V + Vin -> at c*Vin; v4: V + Vni -> at c*Vni;
    # v5: -> V + Vni at delta*NN*Tstar
    tstar, _v, vin, vni = y
    v1, v2, v3 = p["K0"] * p["T0"] * vin, p["delta"] * tstar, p["c"] * vin
    v4, v5 = p["c"] * vni, p["delta"] * p["NN"] * tstar
    return [v1 - v2, -v3 - v4 + v5, -v3, -v4 + v5]


def test_perelson_matches_a_hand_written_scipy_solution():
    name = "Perelson_Science1996"
    rhs = _perelson_rhs

    # observable V, log10-normal noise with sd sd_task0_model0_perelson1_V (log10 units):
    # 0.5 log(2 pi s^2) + 0.5 ((log10 y - log10 h) / s)^2 + log(y ln 10)
    def observe(r, y, p):
        s, m, h = p["sd_task0_model0_perelson1_V"], float(r["measurement"]), y[1]
        return 0.5 * math.log(2 * math.pi * s * s) + 0.5 * ((math.log10(m) - math.log10(h)) / s) ** 2 + \
            math.log(m * math.log(10))

    expected = _hand_nll(name, rhs, [15061.32075, 1860000.0, 1860000.0, 0.0], observe, 6.973)
    _, _, nll = benchmark(name)
    assert nll == pytest.approx(expected, rel=1e-9, abs=1e-7)


def test_crauste_matches_a_hand_written_scipy_solution():
    name = "Crauste_CellSystems2017"

    # by hand from the SBML reactions (compartment default = 1; N E L M P)
    def rhs(y, p):
        n, e, l_, _m, pa = y
        return [-n * p["mu_N"] - n * pa * p["delta_NE"],
                n * pa * p["delta_NE"] + e * pa * p["rho_E"] - e * e * p["mu_EE"] - e * p["delta_EL"],
                e * p["delta_EL"] - l_ * l_ * p["mu_LL"] - e * l_ * p["mu_LE"] - l_ * p["delta_LM"],
                l_ * p["delta_LM"],
                pa * pa * p["rho_P"] - e * pa * p["mu_PE"] - l_ * pa * p["mu_PL"] - pa * p["mu_P"]]

    index = {"observable_Naive": 0, "observable_EarlyEffector": 1, "observable_LateEffector": 2,
             "observable_Memory": 3}

    def observe(r, y, p):  # normal, sd given per row (noiseParameters)
        s, m, h = float(r["noiseParameters"]), float(r["measurement"]), y[index[r["observableId"]]]
        return 0.5 * math.log(2 * math.pi * s * s) + 0.5 * ((m - h) / s) ** 2

    expected = _hand_nll(name, rhs, [8090.0, 0.0, 0.0, 0.0, 1.0], observe, 28.0)
    pp, _, nll = benchmark(name)
    assert nll == pytest.approx(expected, abs=1e-6)
    # the sd varies per row: one experiment per set of overrides, named in order of appearance
    assert pp.experiments.names == tuple(f"model1_data1#{k}" for k in range(1, 8))


# -- gradients --------------------------------------------------------------------------------
@pytest.mark.parametrize("name, components", [
    ("Boehm_JProteomeRes2014", ["Epo_degradation_BaF3", "k_phos", "sd_pSTAT5A_rel"]),
    ("Fujita_SciSignal2010", ["reaction_2_k2"]),  # one solve takes seconds: one component and a direction
])
def test_gradient_matches_central_differences(name, components):
    # near the nominal parameters, not at them: they are published optima, where the gradient is
    # ~1e-2 against an NLL ~1e2 and central differences are dominated by their truncation error
    # (AMICI's benchmark test perturbs the same way)
    pp, obj, _ = benchmark(name)
    rng = np.random.default_rng(0)
    u = pp.u_nominal + 0.05 * rng.standard_normal(pp.u_nominal.size)
    ev = obj(u)
    assert ev.ok, ev.failure
    h = 1e-4
    direction = rng.standard_normal(u.size)
    directions = {c: np.eye(u.size)[pp.problem.estimated.index(c)] for c in components}
    directions["a random direction (every component)"] = direction / np.linalg.norm(direction)
    for c, d in directions.items():
        fd = (obj(u + h * d, grad=False).nll - obj(u - h * d, grad=False).nll) / (2 * h)
        assert abs(fd) > 1.0  # a meaningful comparison
        assert ev.grad @ d == pytest.approx(fd, rel=1e-4), c


# -- what the tables become ----------------------------------------------------------------------
def test_boehm_layout():
    pp, _, _ = benchmark("Boehm_JProteomeRes2014")
    table = nominal_table("Boehm_JProteomeRes2014")
    est = {r["parameterId"] for r in rows(PETAB / "Boehm_JProteomeRes2014" / "parameters_Boehm_JProteomeRes2014.tsv")
           if r["estimate"] == "1"}
    assert set(pp.problem.estimated) == est
    assert {n: pp.nominal[n] for n in table} == table
    # compartments are held at their SBML sizes; the noise placeholders are overridden by sd_* ids
    assert pp.parameters["cyt"].estimate is False and pp.nominal["cyt"] == 1.4
    assert pp.experiments.names == ("model1_data1",)
    cond = pp.experiments.condition("model1_data1")
    assert cond.params["noiseParameter1_pSTAT5A_rel"] == "sd_pSTAT5A_rel"
    assert pp.parameters["k_phos"].scale == "log10"
    assert pp.name == "Boehm_JProteomeRes2014"
    assert oi.petab.load is load


def test_zheng_preequilibrates_under_its_own_condition():
    pp, _, _ = benchmark("Zheng_PNAS2012")
    cond = pp.experiments.condition("preequilibration->simCondition")
    assert cond.params["dilution"] == 0.0 and cond.preequilibrate.params["dilution"] == 1.0
    assert cond.x0 == {}  # every state starts at the pre-equilibrated value


def test_fujita_conditions_set_the_input_parameters():
    pp, _, _ = benchmark("Fujita_SciSignal2010")
    names = pp.experiments.names
    assert all(n.startswith("condition_step_") for n in names)
    cond = pp.experiments.condition(names[0])
    assert (cond.params["EGF_0"], cond.params["EGF_rate"], cond.params["EGF_end"]) == (0.1, 0.0, 3600.0)
    assert "EGF_end" not in pp.problem.names  # overridden in every experiment


# -- hand-built problems ---------------------------------------------------------------------------
def copy_problem(tmp_path, name="Boehm_JProteomeRes2014"):
    folder = tmp_path / name
    shutil.copytree(PETAB / name, folder)
    return folder, folder / f"{name}.yaml"


def edit(path, old, new, count=1):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


def test_replicated_measurements_count_twice(tmp_path):
    folder, yaml = copy_problem(tmp_path, "Perelson_Science1996")
    table = folder / "measurementData_Perelson_Science1996.tsv"
    lines = table.read_text().splitlines()
    table.write_text("\n".join(lines + lines[1:]) + "\n")  # every measurement twice
    pp = load(yaml)
    assert pp.experiments[0].t.size == 32
    _, _, once = benchmark("Perelson_Science1996")
    assert pp.nll_nominal(tight()) == pytest.approx(2 * once, rel=1e-10)


def test_a_noise_formula_may_name_states_and_t(tmp_path):
    # PEtab v1 allows model entities in the noiseFormula (Raia_CancerResearch2011: sd_abs + sd_rel * state);
    # reference: the hand-written NLL with the sd evaluated on scipy's Radau states; gradient against
    # central differences (an oracle, tight solver). Tolerances as the Perelson tests above.
    folder, yaml = copy_problem(tmp_path, "Perelson_Science1996")
    name = "Perelson_Science1996"
    sd = "noiseParameter1_task0_model0_perelson1_V"
    edit(folder / f"observables_{name}.tsv", f"\t{sd}\t", f"\t{sd} * (1 + Tstar / (Tstar + 1e4)) + 0.01 * t\t")
    pp = load(yaml)
    from scipy.integrate import solve_ivp

    data = rows(folder / f"measurementData_{name}.tsv")
    p = nominal_table(name)
    times = sorted({float(r["time"]) for r in data})
    sol = solve_ivp(lambda t, y: _perelson_rhs(y, p), (0.0, 6.973), [15061.32075, 1860000.0, 1860000.0, 0.0],
                    method="Radau", t_eval=times, rtol=1e-12, atol=1e-10)
    assert sol.success
    expected = 0.0
    for r in data:
        t = float(r["time"])
        y = sol.y[:, times.index(t)]
        s = p["sd_task0_model0_perelson1_V"] * (1 + y[0] / (y[0] + 1e4)) + 0.01 * t
        m = float(r["measurement"])
        expected += 0.5 * math.log(2 * math.pi * s * s) + 0.5 * ((math.log10(m) - math.log10(y[1])) / s) ** 2 + \
            math.log(m * math.log(10))
    obj = pp.objective(tight())
    ev = obj(pp.u_nominal)
    assert ev.nll == pytest.approx(expected, rel=1e-9, abs=1e-7)
    u = pp.u_nominal + 0.02
    g = obj(u).grad
    fd = np.array([(obj(u + e, grad=False).nll - obj(u - e, grad=False).nll) / 2e-5 for e in 1e-5 * np.eye(u.size)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


def test_tables_that_start_with_a_byte_order_mark_load(tmp_path):
    # spreadsheet exports write a UTF-8 byte-order mark (Giordano_Nature2020's condition table has one)
    folder, yaml = copy_problem(tmp_path, "Perelson_Science1996")
    for table in folder.glob("*.tsv"):
        table.write_bytes(b"\xef\xbb\xbf" + table.read_bytes())
    _, _, nll = benchmark("Perelson_Science1996")
    assert load(yaml).nll_nominal(tight()) == pytest.approx(nll, rel=1e-12)


def test_an_estimated_log_scale_parameter_may_have_the_nominal_value_zero(tmp_path):
    # PEtab allows it (Lang_PLOSComputBiol2024's published fit has one): the nominal point is u = -inf,
    # the parameter's value (a start) its lower bound; the NLL there is that of the parameter fixed at 0
    folder, yaml = copy_problem(tmp_path, "Perelson_Science1996")
    table = folder / "parameters_Perelson_Science1996.tsv"
    edit(table, "2.06000000014632\t1", "0\t1")
    pp = load(yaml)
    k = pp.problem.estimated.index("c")
    assert pp.nominal["c"] == 0.0 and pp.u_nominal[k] == -math.inf and pp.parameters["c"].value == 1e-5
    nll = pp.nll_nominal(tight())
    edit(table, "0\t1", "0\t0")
    assert nll == pytest.approx(load(yaml).nll_nominal(tight()), rel=1e-12)


def test_an_estimated_parameter_may_have_its_nominal_value_outside_its_bounds(tmp_path):
    # Lang_PLOSComputBiol2024: sCDKN1B's nominal 2e-10 lies above its upper bound 1.99e-10
    folder, yaml = copy_problem(tmp_path, "Perelson_Science1996")
    table = folder / "parameters_Perelson_Science1996.tsv"
    edit(table, "c\tc\tlog10\t1E-05\t100000\t2.06000000014632\t1", "c\tc\tlog10\t1E-05\t2\t2.06000000014632\t1")
    pp = load(yaml)
    assert pp.nominal["c"] == 2.06000000014632 and pp.parameters["c"].value == 2.0
    edit(table, "2.06000000014632\t1", "2.06000000014632\t0")
    assert pp.nll_nominal(tight()) == pytest.approx(load(yaml).nll_nominal(tight()), rel=1e-12)


def test_a_condition_override_enters_the_initial_values(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    table = folder / "experimentalCondition_Boehm_JProteomeRes2014.tsv"
    table.write_text("conditionId\tconditionName\tratio\tpApB\nmodel1_data1\tcondition1\t0.5\t3\n")
    pp = load(yaml)
    x0 = pp.experiments.condition("model1_data1").x0
    # SBML: STAT5A = 207.6 * ratio, STAT5B = 207.6 - 207.6 * ratio; pApB set by the condition
    assert float(x0["STAT5A"]) == pytest.approx(103.8) and float(x0["STAT5B"]) == pytest.approx(103.8)
    assert x0["pApB"] == 3.0
    assert "ratio" not in pp.problem.names or pp.parameters["ratio"].estimate is False


def test_the_yaml_must_lie_inside_root(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(InputError, match=r"yaml_path: .* lies outside root"):
        load(yaml, root=other)
    # a table outside the YAML's folder (the default root)
    shutil.copy(folder / "parameters_Boehm_JProteomeRes2014.tsv", tmp_path / "p.tsv")
    edit(yaml, "parameter_file: parameters_Boehm_JProteomeRes2014.tsv", "parameter_file: ../p.tsv")
    with pytest.raises(InputError, match=r"parameter_file\[0\]: .*'\.\./p\.tsv' lies outside root"):
        load(yaml)
    assert load(yaml, root=tmp_path).name == "Boehm_JProteomeRes2014"  # allowed with a wider root
    (folder / "link.tsv").symlink_to(tmp_path / "p.tsv")
    edit(yaml, "parameter_file: ../p.tsv", "parameter_file: link.tsv")
    with pytest.raises(InputError, match=r"parameter_file\[0\]: .*'link\.tsv'.* lies outside root .*symbolic links"):
        load(yaml)


def test_the_yaml_must_be_a_small_mapping(tmp_path, monkeypatch):
    _, yaml = copy_problem(tmp_path)
    monkeypatch.setattr(LOAD, "MAX_YAML_BYTES", 100)
    with pytest.raises(PetabError, match=r"yaml_path: .* has \d+ bytes; PEtab YAML files of at most 100 bytes"):
        load(yaml)
    monkeypatch.undo()
    yaml.write_text(f"- {SECRET}\n- b\n")
    with pytest.raises(PetabError, match=r"holds a list, not a mapping") as err:
        load(yaml)
    assert SECRET not in str(err.value)
    yaml.write_text(f"a: [{SECRET}\n")
    with pytest.raises(PetabError, match=r"is not valid YAML \(line \d+, column \d+\)") as err:
        load(yaml)
    assert SECRET not in str(err.value)
    yaml.write_text(f"key: !!python/object/apply:os.system ['{SECRET}']\n")  # safe_load refuses it
    with pytest.raises(PetabError, match=r"is not valid YAML") as err:
        load(yaml)
    assert SECRET not in str(err.value)


def test_format_version_2_is_refused(tmp_path):
    _, yaml = copy_problem(tmp_path)
    edit(yaml, "format_version: 1", "format_version: 2.0.0")
    with pytest.raises(PetabError, match=r"format_version .*; PEtab v2 is not supported yet"):
        load(yaml)
    edit(yaml, "format_version: 2.0.0", "format_version: 7")
    with pytest.raises(PetabError, match=r"format_version 7; odeinfer reads PEtab format version 1"):
        load(yaml)


def test_yaml_structure_errors_name_the_key(tmp_path):
    _, yaml = copy_problem(tmp_path)
    edit(yaml, "  sbml_files:\n  - model_Boehm_JProteomeRes2014.xml",
         "  sbml_files:\n  - model_Boehm_JProteomeRes2014.xml\n  - other.xml")
    with pytest.raises(PetabError, match=r"lists 2 files under 'sbml_files'; odeinfer reads exactly one"):
        load(yaml)
    edit(yaml, "  - other.xml\n", "")
    edit(yaml, "  measurement_files:\n  - measurementData_Boehm_JProteomeRes2014.tsv\n", "")
    with pytest.raises(PetabError, match=r"problems\[0\] needs 'measurement_files'"):
        load(yaml)


def test_a_missing_table_is_named(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    (folder / "measurementData_Boehm_JProteomeRes2014.tsv").unlink()
    with pytest.raises(InputError, match=r"measurement_files\[0\]: cannot open .*measurementData_Boehm"):
        load(yaml)


def test_a_too_large_table_is_refused_before_reading(tmp_path, monkeypatch):
    _, yaml = copy_problem(tmp_path)
    monkeypatch.setattr(LOAD, "MAX_TABLE_BYTES", 50)
    with pytest.raises(PetabError, match=r"parameter_file\[0\]: 'parameters_Boehm.*' has \d+ bytes; PEtab tables of at "
                                         r"most 50 bytes"):
        load(yaml)


def test_measurement_ids_must_be_known(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    table = folder / "measurementData_Boehm_JProteomeRes2014.tsv"
    edit(table, "pSTAT5A_rel\t\tmodel1_data1\t7.9", "pSTAT5X_rel\t\tmodel1_data1\t7.9")
    with pytest.raises(PetabError, match=r"measurement_files: 'measurementData_Boehm_JProteomeRes2014\.tsv' line 2: "
                                         r"column 'observableId' names 'pSTAT5X_rel', which is not in the observable "
                                         "table"):
        load(yaml)
    edit(table, "pSTAT5X_rel\t\tmodel1_data1\t7.9", "pSTAT5A_rel\t\tmodel9\t7.9")
    with pytest.raises(PetabError, match=r"line 2: column 'simulationConditionId' names 'model9', which is not in the "
                                         "condition table"):
        load(yaml)
    edit(table, "pSTAT5A_rel\t\tmodel9\t7.9", "pSTAT5A_rel\tpre9\tmodel1_data1\t7.9")
    with pytest.raises(PetabError, match=r"line 2: column 'preequilibrationConditionId' names 'pre9'"):
        load(yaml)


def test_measurement_values_and_overrides_are_checked(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    table = folder / "measurementData_Boehm_JProteomeRes2014.tsv"
    original = table.read_text()
    table.write_text(original.replace("7.90107299873911\t0.0", "7.90107299873911\t-inf", 1))
    with pytest.raises(PetabError, match=r"line 2: column 'time' is not finite; give a finite number or inf \(a "
                                         r"measurement at the steady state\)"):
        load(yaml)
    table.write_text(original.replace("7.90107299873911", SECRET, 1))
    with pytest.raises(PetabError, match=r"line 2: column 'measurement' is not a number") as err:
        load(yaml)
    assert SECRET not in str(err.value)
    table.write_text(original.replace("0.0\t\tsd_pSTAT5A_rel", "0.0\t\tsd_unknown", 1))
    with pytest.raises(PetabError, match=r"line 2: entry 1 of column 'noiseParameters' names 'sd_unknown', which is "
                                         "neither in the parameter table nor an SBML parameter"):
        load(yaml)
    table.write_text(original.replace("0.0\t\tsd_pSTAT5A_rel", "0.0\t\tsd_pSTAT5A_rel;2", 1))
    with pytest.raises(PetabError, match=r"line 2: column 'noiseParameters' holds 2 value\(s\) but observable "
                                         r"'pSTAT5A_rel' has 1 noise placeholder"):
        load(yaml)


def test_parameter_table_ids_must_be_used(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    table = folder / "parameters_Boehm_JProteomeRes2014.tsv"
    table.write_text(table.read_text() + "k_nowhere\tk\tlog10\t1E-05\t100000\t1\t1\n")
    with pytest.raises(PetabError, match=r"parameter_file: the parameters \['k_nowhere'\] are used nowhere"):
        load(yaml)
    table.write_text(table.read_text().replace("k_nowhere\tk\tlog10\t1E-05\t100000\t1\t1", f"k2\tk\tlog10\t1E-05\t"
                                                                                          f"{SECRET}\t1\t1"))
    with pytest.raises(PetabError, match=r"line 13: column 'upperBound' of parameter 'k2' is not a number") as err:
        load(yaml)
    assert SECRET not in str(err.value)


def test_condition_columns_must_be_model_entities(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    table = folder / "experimentalCondition_Boehm_JProteomeRes2014.tsv"
    table.write_text("conditionId\tconditionName\tk_unknown\nmodel1_data1\tcondition1\t1\n")
    with pytest.raises(PetabError, match=r"condition_files: the column 'k_unknown' is no parameter, compartment or "
                                         "species"):
        load(yaml)
    table.write_text("conditionId\tconditionName\tBaF3_Epo\nmodel1_data1\tcondition1\t1\n")
    with pytest.raises(PetabError, match=r"the column 'BaF3_Epo' names an assignment-rule target"):
        load(yaml)
    table.write_text(f"conditionId\tconditionName\tratio\nmodel1_data1\tcondition1\t{SECRET}-x\n")
    with pytest.raises(PetabError, match=r"line 2: column 'ratio' of condition 'model1_data1' is neither a number nor "
                                         "a parameter id") as err:
        load(yaml)
    assert SECRET not in str(err.value)


def test_formulas_name_known_things_only(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    table = folder / "observables_Boehm_JProteomeRes2014.tsv"
    edit(table, "(100 * pApB + 200 * pApA * specC17)", "(100 * pApB + 200 * pApA * mystery)")
    with pytest.raises(PetabError, match=r"line 2: the observableFormula of observable 'pSTAT5A_rel' uses 'mystery', "
                                         "which is no state"):
        load(yaml)
    edit(table, "mystery", "log10(specC17)")
    with pytest.raises(PetabError, match=r"line 2: the observableFormula of observable 'pSTAT5A_rel' calls 'log10', "
                                         "which is no function of odeinfer's expression language"):
        load(yaml)
    edit(table, "log10(specC17)", "specC17")
    edit(table, "noiseParameter1_pSTAT5A_rel", "noiseParameter1_pSTAT5B_rel")
    with pytest.raises(PetabError, match=r"uses 'noiseParameter1_pSTAT5B_rel', which is a placeholder of another "
                                         "observable"):
        load(yaml)


def test_a_table_parameter_named_like_another_observables_placeholder_is_a_parameter(tmp_path):
    # Lang_PLOSComputBiol2024 names table parameters noiseParameter2_cycA_nuc and uses them in the noise formulas
    # of several observables: the parameter table, not the placeholder pattern, says what they are. Rewritten so,
    # Boehm's pSTAT5A_rel noise (sd_pSTAT5A_rel through a placeholder before) must give the unchanged NLL.
    folder, yaml = copy_problem(tmp_path)
    edit(folder / "observables_Boehm_JProteomeRes2014.tsv", "noiseParameter1_pSTAT5A_rel", "noiseParameter2_pSTAT5B_rel")
    measurements = folder / "measurementData_Boehm_JProteomeRes2014.tsv"
    edit(measurements, "\tsd_pSTAT5A_rel\t", "\t\t", count=-1)
    table = folder / "parameters_Boehm_JProteomeRes2014.tsv"
    row = next(r for r in table.read_text().splitlines() if r.startswith("sd_pSTAT5A_rel\t"))
    edit(table, row, row.replace("sd_pSTAT5A_rel\t", "noiseParameter2_pSTAT5B_rel\t", 1))
    pp = load(yaml)
    assert "noiseParameter2_pSTAT5B_rel" in pp.problem.estimated and "sd_pSTAT5A_rel" not in pp.parameters
    _, _, nll = benchmark("Boehm_JProteomeRes2014")
    assert pp.nll_nominal(tight()) == pytest.approx(nll, rel=1e-12)


def test_assignment_rules_and_powers_in_formulas(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    table = folder / "observables_Boehm_JProteomeRes2014.tsv"
    # BaF3_Epo is an assignment rule (1.25e-7 exp(-Epo_degradation_BaF3 t)); ^ is PEtab's power
    edit(table, "(100 * pApB + 200 * pApA * specC17)", "(100 * pApB + 200 * pApA * specC17 + 1e-20 * BaF3_Epo^2)")
    pp = load(yaml)
    text = pp.model.observables[0].text
    assert "exp(" in text and "Epo_degradation_BaF3" in text
    _, _, nll = benchmark("Boehm_JProteomeRes2014")
    assert pp.nll_nominal(tight()) == pytest.approx(nll, rel=1e-12)


def test_condition_values_may_name_parameters(tmp_path):
    folder, yaml = copy_problem(tmp_path)
    (folder / "experimentalCondition_Boehm_JProteomeRes2014.tsv").write_text(
        "conditionId\tconditionName\tspecC17\nmodel1_data1\tcondition1\tspecC17_cond\n")
    table = folder / "parameters_Boehm_JProteomeRes2014.tsv"
    table.write_text(table.read_text() + "specC17_cond\ts\tlin\t-5\t5\t0.107\t0\n")
    pp = load(yaml)
    assert pp.experiments.condition("model1_data1").params["specC17"] == "specC17_cond"
    assert "specC17_cond" in pp.problem.names and "specC17" not in pp.problem.names
    _, _, nll = benchmark("Boehm_JProteomeRes2014")  # the same value under another name: the same NLL
    assert pp.nll_nominal(tight()) == pytest.approx(nll, rel=1e-12)


def test_species_set_by_the_simulation_condition_override_the_preequilibrium(tmp_path):
    folder, yaml = copy_problem(tmp_path, "Zheng_PNAS2012")
    (folder / "experimentalCondition_Zheng_PNAS2012.tsv").write_text(
        "conditionId\tconditionName\tdilution\tK27me0K36me0\n"
        "preequilibration\t\t1\t0.5\nsimCondition\t\t0\t0.25\n")
    pp = load(yaml)
    cond = pp.experiments.condition("preequilibration->simCondition")
    assert cond.x0 == {"K27me0K36me0": 0.25}  # set after the pre-equilibration; the rest keep its value
    assert cond.preequilibrate.x0 == {"K27me0K36me0": 0.5}
    plan = pp.problem.plans[0]
    assert plan.keep_x0.tolist() == [s == "K27me0K36me0" for s in pp.model.states]


# -- SBML events as doses ---------------------------------------------------------------------------
def _mathml(formula):
    """MathML of an SBML L3 formula (libsbml's parser), without the XML declaration."""
    import libsbml

    return libsbml.writeMathMLToString(libsbml.parseL3Formula(formula)).split("\n", 1)[1]


def _event_of_a(eid, t, value):
    """An SBML event setting species A to ``value`` (L3 formula text) when ``time >= t``."""
    return (f'<event id="{eid}" useValuesFromTriggerTime="true"><trigger initialValue="false" persistent="true">'
            f'{_mathml(f"time >= {t}")}</trigger><listOfEventAssignments><eventAssignment variable="A">'
            f'{_mathml(value)}</eventAssignment></listOfEventAssignments></event>')


def _dosed_problem(tmp_path):
    """A -> (degradation k), doses amt at t = 2 and 3 at t = 5 (SBML events); A measured at 1, 3, 6."""
    def ev(eid, t, amount):
        return _event_of_a(eid, t, f"A + {amount}")

    sbml = ('<?xml version="1.0" encoding="UTF-8"?>\n<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" '
            'level="3" version="2"><model id="dosed"><listOfCompartments><compartment id="C" spatialDimensions="3" '
            'size="1" constant="true"/></listOfCompartments><listOfSpecies><species id="A" compartment="C" '
            'initialConcentration="1.5" hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/>'
            '</listOfSpecies><listOfParameters><parameter id="k" value="0.4" constant="true"/><parameter id="amt" '
            'value="4" constant="true"/></listOfParameters><listOfReactions><reaction id="deg" reversible="false">'
            f'<listOfReactants><speciesReference species="A" stoichiometry="1" constant="true"/></listOfReactants>'
            f'<kineticLaw>{_mathml("k * A * C")}</kineticLaw></reaction></listOfReactions><listOfEvents>'
            f'{ev("dose1", 2, "amt")}{ev("dose2", 5, 3)}</listOfEvents></model></sbml>\n')
    folder = tmp_path / "dosed"
    folder.mkdir()
    (folder / "model.xml").write_text(sbml)
    (folder / "conditions.tsv").write_text("conditionId\tamt\nc1\t\nc2\t1\n")
    (folder / "observables.tsv").write_text("observableId\tobservableFormula\tnoiseFormula\nobs_A\tA\t0.1\n")
    data = [("c1", 1.0, 1.1), ("c1", 3.0, 4.2), ("c1", 6.0, 4.4), ("c2", 1.0, 1.0), ("c2", 3.0, 1.3),
            ("c2", 4.0, 0.9)]
    (folder / "measurements.tsv").write_text("observableId\tsimulationConditionId\tmeasurement\ttime\n" + "".join(
        f"obs_A\t{c}\t{y}\t{t}\n" for c, t, y in data))
    (folder / "parameters.tsv").write_text(
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "k\tlog10\t0.001\t10\t0.4\t1\namt\tlin\t0\t10\t4\t1\n")
    (folder / "dosed.yaml").write_text(
        "format_version: 1\nparameter_file: parameters.tsv\nproblems:\n- condition_files: [conditions.tsv]\n"
        "  measurement_files: [measurements.tsv]\n  observable_files: [observables.tsv]\n  sbml_files: [model.xml]\n")
    return load(folder / "dosed.yaml"), data


def test_sbml_events_are_doses_of_every_experiment(tmp_path):
    pp, data = _dosed_problem(tmp_path)
    doses = {n: pp.experiments.condition(n).doses for n in ("c1", "c2")}
    assert [(d.time, d.state, d.amount) for d in doses["c1"]] == [(2.0, "A", "amt"), (5.0, "A", 3.0)]
    # c2 ends at t = 4 (the dose at 5 changes nothing measured) and sets amt = 1 in the dose's amount
    assert [(d.time, d.state, d.amount) for d in doses["c2"]] == [(2.0, "A", 1.0)]

    def a_of(t, k, amt):  # the closed form: decay from 1.5 with boluses amt at 2 and 3 at 5
        return 1.5 * math.exp(-k * t) + (t >= 2) * amt * math.exp(-k * (t - 2)) + (t >= 5) * 3 * math.exp(-k * (t - 5))

    def nll(k, amt):
        return sum(0.5 * math.log(2 * math.pi * 0.1**2) + 0.5 * ((y - a_of(t, k, amt if c == "c1" else 1.0)) / 0.1)**2
                   for c, t, y in data)

    obj = pp.objective(tight())
    u = np.array([math.log10(0.4), 4.0])
    assert list(pp.problem.estimated) == ["k", "amt"]
    ev = obj(u)
    assert ev.nll == pytest.approx(nll(0.4, 4.0), rel=1e-8)
    h = 1e-6
    fd = [(nll(10 ** (u[0] + h), 4.0) - nll(10 ** (u[0] - h), 4.0)) / (2 * h), (nll(0.4, 4.0 + h) - nll(0.4, 4.0 - h)) / (2 * h)]
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-5)


def _reset_problem(tmp_path, conditions="conditionId\tt_w\tA\nc1\t2\t1\nc2\t3\t2\nc3\t\t1.5\n",
                   t_r_estimated=0):
    """Production-degradation A' = k - d A (SBML reactions) with resets as SBML events: A = 0 at t_w (set per
    condition by the condition table; c3 leaves it to its SBML value 4) and A = a_set at t_r (fixed by the
    parameter table at 5; its SBML value is 100); A's initial value is set by the condition table."""
    ev = _event_of_a

    sbml = ('<?xml version="1.0" encoding="UTF-8"?>\n<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" '
            'level="3" version="2"><model id="resets"><listOfCompartments><compartment id="C" spatialDimensions="3" '
            'size="1" constant="true"/></listOfCompartments><listOfSpecies><species id="A" compartment="C" '
            'initialConcentration="0.5" hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/>'
            '</listOfSpecies><listOfParameters>' + "".join(
                f'<parameter id="{p}" value="{v}" constant="true"/>'
                for p, v in (("k", 0.8), ("d", 0.5), ("a_set", 1.0), ("t_w", 4), ("t_r", 100))) +
            '</listOfParameters><listOfReactions><reaction id="prod" reversible="false"><listOfProducts>'
            '<speciesReference species="A" stoichiometry="1" constant="true"/></listOfProducts>'
            f'<kineticLaw>{_mathml("k * C")}</kineticLaw></reaction><reaction id="deg" reversible="false">'
            '<listOfReactants><speciesReference species="A" stoichiometry="1" constant="true"/></listOfReactants>'
            f'<kineticLaw>{_mathml("d * A * C")}</kineticLaw></reaction></listOfReactions><listOfEvents>'
            f'{ev("wash", "t_w", "0")}{ev("refill", "t_r", "a_set")}</listOfEvents></model></sbml>\n')
    folder = tmp_path / "resets"
    folder.mkdir()
    (folder / "model.xml").write_text(sbml)
    (folder / "conditions.tsv").write_text(conditions)
    (folder / "observables.tsv").write_text("observableId\tobservableFormula\tnoiseFormula\nobs_A\tA\t0.1\n")
    times = [1.0, 2.0, 2.5, 3.0, 4.0, 4.5, 5.0, 6.0, 7.0]
    rng = np.random.default_rng(8)
    data = [(c, t, round(float(1.0 + rng.uniform(-0.5, 0.5)), 3)) for c in ("c1", "c2", "c3") for t in times]
    (folder / "measurements.tsv").write_text("observableId\tsimulationConditionId\tmeasurement\ttime\n" + "".join(
        f"obs_A\t{c}\t{y}\t{t}\n" for c, t, y in data))
    (folder / "parameters.tsv").write_text(
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        f"k\tlog10\t0.001\t10\t0.8\t1\nd\tlin\t0\t10\t0.5\t1\na_set\tlin\t0\t10\t1.2\t1\n"
        f"t_r\tlin\t0\t10\t5\t{t_r_estimated}\n")
    (folder / "resets.yaml").write_text(
        "format_version: 1\nparameter_file: parameters.tsv\nproblems:\n- condition_files: [conditions.tsv]\n"
        "  measurement_files: [measurements.tsv]\n  observable_files: [observables.tsv]\n  sbml_files: [model.xml]\n")
    return folder / "resets.yaml", data


def test_sbml_resets_at_parameter_times_fixed_per_condition(tmp_path):
    """Reference: the NLL written by hand from scipy's solve_ivp (LSODA, rtol 1e-12, atol 1e-14) of A' = k - d A,
    run segment by segment between the resets (A = 0 at t_w = 2, 3 or 4 (SBML value), A = a_set at t_r = 5; a
    measurement at a reset time sees A before it); its gradient by central differences of that NLL (step 1e-5).
    Tolerances fixed beforehand: NLL rel 1e-8, gradient rel 1e-5."""
    from scipy.integrate import solve_ivp

    yaml, data = _reset_problem(tmp_path)
    pp = load(yaml)
    got = {n: [(d.time, d.state, d.amount, d.mode) for d in pp.experiments.condition(n).doses]
           for n in ("c1", "c2", "c3")}
    assert got == {"c1": [(2.0, "A", 0.0, "set"), (5.0, "A", "a_set", "set")],
                   "c2": [(3.0, "A", 0.0, "set"), (5.0, "A", "a_set", "set")],
                   "c3": [(4.0, "A", 0.0, "set"), (5.0, "A", "a_set", "set")]}
    assert list(pp.problem.estimated) == ["k", "d", "a_set"]
    a0, t_w = {"c1": 1.0, "c2": 2.0, "c3": 1.5}, {"c1": 2.0, "c2": 3.0, "c3": 4.0}

    def nll(k, d, a_set):
        out = 0.0
        for c in ("c1", "c2", "c3"):
            ts = np.array([t for cc, t, _ in data if cc == c])
            ys = np.array([y for cc, _, y in data if cc == c])
            h, x, start = np.empty(ts.size), a0[c], 0.0
            for end, value in ((t_w[c], 0.0), (5.0, a_set), (np.inf, None)):
                sel = (ts > start) & (ts <= end)
                stop = min(end, ts.max())
                if stop > start:
                    te = np.unique(np.r_[ts[sel], stop])
                    sol = solve_ivp(lambda t, y: k - d * y, (start, stop), [x], method="LSODA", rtol=1e-12, atol=1e-14,
                                    t_eval=te)
                    h[sel] = sol.y[0][np.searchsorted(te, ts[sel])]
                    x = sol.y[0][-1]
                x, start = value, end
                if value is None:
                    break
            out += float(np.sum(0.5 * np.log(2 * np.pi * 0.1**2) + 0.5 * ((ys - h) / 0.1) ** 2))
        return out

    u = np.array([math.log10(0.8), 0.5, 1.2])
    theta = lambda v: (10 ** v[0], v[1], v[2])  # noqa: E731
    ev = pp.objective(tight())(u)
    assert ev.nll == pytest.approx(nll(*theta(u)), rel=1e-8)
    assert pp.nll_nominal(tight()) == pytest.approx(ev.nll, rel=1e-12)
    h = 1e-5
    fd = [(nll(*theta(u + e)) - nll(*theta(u - e))) / (2 * h) for e in np.eye(3) * h]
    np.testing.assert_allclose(ev.grad, fd, rtol=1e-5)


@pytest.mark.parametrize("conditions, t_r_estimated, match", [
    ("conditionId\tt_w\tA\nc1\t2\t1\nc2\t3\t2\nc3\t\t1.5\n", 1,
     r"'model.xml': event 'refill' triggers at time >= t_r, and in condition 'c1' the parameter 't_r' is estimated "
     r"\(parameter table, estimate = 1\); an estimated event time is not supported yet"),
    ("conditionId\tt_w\tA\nc1\t2\t1\nc2\tk\t2\nc3\t\t1.5\n", 0,
     r"'model.xml': event 'wash' triggers at time >= t_w, and in condition 'c2' the parameter 'k' is estimated"),
    ("conditionId\tt_w\tA\nc1\t2\t1\nc2\t-3\t2\nc3\t\t1.5\n", 0,
     r"'model.xml': event 'wash' triggers at time >= t_w, which is -3.0 in condition 'c2'; events are supported at "
     r"fixed times > 0 only"),
])
def test_sbml_event_times_that_are_not_fixed_and_positive_are_refused(tmp_path, conditions, t_r_estimated, match):
    yaml, _ = _reset_problem(tmp_path, conditions, t_r_estimated)
    with pytest.raises(PetabError, match=match):
        load(yaml)


def _underscore_problem(tmp_path, extra_parameters=""):
    """SBML and PEtab ids with a leading '_' (SalazarCavazos_MBoC2020's '_rateLaw1'): _A decays at rate _k,
    starts at 2 (c1) or at the parameter-table value _a0 (c2); observed as _scale*_A with sd _sd."""
    sbml = ('<?xml version="1.0" encoding="UTF-8"?>\n<sbml xmlns="http://www.sbml.org/sbml/level3/version2/core" '
            'level="3" version="2"><model id="under"><listOfCompartments><compartment id="C" spatialDimensions="3" '
            'size="1" constant="true"/></listOfCompartments><listOfSpecies><species id="_A" compartment="C" '
            'initialConcentration="1.5" hasOnlySubstanceUnits="false" boundaryCondition="false" constant="false"/>'
            '</listOfSpecies><listOfParameters><parameter id="_k" value="0.4" constant="true"/></listOfParameters>'
            '<listOfReactions><reaction id="_deg" reversible="false"><listOfReactants><speciesReference '
            f'species="_A" stoichiometry="1" constant="true"/></listOfReactants><kineticLaw>{_mathml("_k * _A * C")}'
            '</kineticLaw></reaction></listOfReactions></model></sbml>\n')
    folder = tmp_path / "under"
    folder.mkdir()
    (folder / "model.xml").write_text(sbml)
    (folder / "conditions.tsv").write_text("conditionId\t_A\nc1\t2\nc2\t_a0\n")
    (folder / "observables.tsv").write_text("observableId\tobservableFormula\tnoiseFormula\n"
                                            "obs_A\t_scale * _A\tnoiseParameter1_obs_A\n")
    data = [("c1", 1.0, 2.1), ("c1", 3.0, 0.9), ("c2", 1.0, 0.8), ("c2", 2.0, 0.5)]
    (folder / "measurements.tsv").write_text(
        "observableId\tsimulationConditionId\tmeasurement\ttime\tnoiseParameters\n" + "".join(
            f"obs_A\t{c}\t{y}\t{t}\t_sd\n" for c, t, y in data))
    (folder / "parameters.tsv").write_text(
        "parameterId\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\n"
        "_k\tlog10\t0.001\t10\t0.4\t1\n_scale\tlin\t0.1\t10\t1.5\t1\n_a0\tlin\t0\t10\t1\t0\n"
        "_sd\tlin\t0\t10\t0.2\t0\n" + extra_parameters)
    (folder / "under.yaml").write_text(
        "format_version: 1\nparameter_file: parameters.tsv\nproblems:\n- condition_files: [conditions.tsv]\n"
        "  measurement_files: [measurements.tsv]\n  observable_files: [observables.tsv]\n  sbml_files: [model.xml]\n")
    return folder / "under.yaml", data


def test_ids_with_a_leading_underscore_are_prefixed_with_sbml(tmp_path):
    yaml_path, data = _underscore_problem(tmp_path)
    pp = load(yaml_path)
    assert pp.renamed == {"_A": "sbml_A", "_k": "sbml_k", "_deg": "sbml_deg", "_scale": "sbml_scale",
                          "_a0": "sbml_a0", "_sd": "sbml_sd"}
    assert pp.model.states == ("sbml_A",) and list(pp.problem.estimated) == ["sbml_k", "sbml_scale"]
    assert pp.nominal == {"C": 1.0, "sbml_k": 0.4, "sbml_scale": 1.5, "sbml_a0": 1.0, "sbml_sd": 0.2}

    def nll(k, scale):  # closed form: y = scale * A0 * exp(-k t), A0 = 2 (c1) or _a0 = 1 (c2), sd 0.2
        return sum(0.5 * math.log(2 * math.pi * 0.2**2)
                   + 0.5 * ((y - scale * (2.0 if c == "c1" else 1.0) * math.exp(-k * t)) / 0.2)**2 for c, t, y in data)

    assert pp.nll_nominal(tight()) == pytest.approx(nll(0.4, 1.5), rel=1e-8)
    (tmp_path / "clash").mkdir()
    yaml_path, _ = _underscore_problem(tmp_path / "clash", "sbml_k\tlin\t0\t10\t1\t0\n")
    with pytest.raises(PetabError, match=r"parameters.tsv' line 6: the parameter 'sbml_k' has the odeinfer name "
                                         r"'sbml_k', as has '_k' \(ids with a leading '_' get the prefix 'sbml'\); rename one of them"):
        load(yaml_path)


@pytest.mark.parametrize("edit, message", [
    # the parameter table holds sbml_k as it stands; the SBML's _k (kept out of the table) gets that name
    ({"parameters.tsv": ("_k\tlog10", "sbml_k\tlog10")},
     r"parameter_file: column 'parameterId' names 'sbml_k', which is also the odeinfer name of the id '_k'"),
    # a table parameter named like the SBML reaction _deg's odeinfer name
    ({"parameters.tsv": ("_sd\tlin", "sbml_deg\tlin\t0\t10\t1\t0\n_sd\tlin")},
     r"parameter_file: column 'parameterId' names 'sbml_deg', which is also the odeinfer name of the id '_deg'"),
    # the SBML holds sbml_a0 as it stands; the table's _a0 would get that name
    ({"model.xml": ('<parameter id="_k"', '<parameter id="sbml_a0" value="1" constant="true"/><parameter id="_k"')},
     r"parameter_file: the parameter '_a0' has the odeinfer name 'sbml_a0', which is also an id of the SBML model"),
    ({"conditions.tsv": ("conditionId\t_A", "conditionId\tsbml_A")},
     r"condition_files: a column names 'sbml_A', which is also the odeinfer name of the id '_A'"),
    ({"conditions.tsv": ("c2\t_a0", "c2\tsbml_a0")},
     r"conditions.tsv' line 3: column '_A' of condition 'c2' names 'sbml_a0', which is also the odeinfer name of "
     r"the id '_a0'"),
    ({"observables.tsv": ("_scale * _A", "sbml_scale * _A")},
     r"observables.tsv' line 2: the observableFormula of observable 'obs_A' names 'sbml_scale', which is also "
     r"the odeinfer name of the id '_scale'"),
    ({"observables.tsv": ("obs_A\t", "sbml_sd\t"), "measurements.tsv": ("obs_A\t", "sbml_sd\t")},
     r"observables.tsv' line 2: column 'observableId' names 'sbml_sd', which is also the odeinfer name of the id "
     r"'_sd'"),
    ({"measurements.tsv": ("\t_sd\n", "\tsbml_sd\n")},
     r"measurements.tsv' line 2: .*names 'sbml_sd', which is also the odeinfer name of the id '_sd'"),
])
def test_an_id_written_as_another_ids_odeinfer_name_is_refused(tmp_path, edit, message):
    """'_k' loads as 'sbml_k'; an id written 'sbml_k' in the SBML model or any table is another id in PEtab's
    eyes, and would be the same odeinfer name: refused, naming both (rename one in the files)."""
    yaml_path, _ = _underscore_problem(tmp_path)
    _edit_files(yaml_path.parent, [(file, *pair) for file, pair in edit.items()])
    with pytest.raises(PetabError, match=message + r".*\(ids with a leading '_' get the prefix 'sbml'\); rename one"):
        load(yaml_path)


def _edit_files(folder, edits):
    """Apply ``[(file, old, new)]`` in order, each replacing every ``old`` (which must be there) in ``folder/file``."""
    for file, old, new in edits:
        path = folder / file
        text = path.read_text()
        assert old in text, (file, old)
        path.write_text(text.replace(old, new))


# the underscore problem with the observable _obs (a placeholder for its scale, set to _scale by the measurements;
# its sd grows with its value: noise formula 0.2 + 0.1 * _obs) and the condition c1 renamed _c1
_UNDERSCORE_OBSERVABLE = [
    ("observables.tsv", "obs_A\t_scale * _A\tnoiseParameter1_obs_A",
     "_obs\tobservableParameter1__obs * _A\tnoiseParameter1__obs + 0.1 * _obs"),
    ("measurements.tsv", "obs_A\t", "_obs\t"),
    ("measurements.tsv", "noiseParameters\n", "noiseParameters\tobservableParameters\n"),
    ("measurements.tsv", "\t_sd\n", "\t_sd\t_scale\n"),
    ("measurements.tsv", "\tc1\t", "\t_c1\t"),
    ("conditions.tsv", "c1\t", "_c1\t"),
]


def test_observable_and_condition_ids_with_a_leading_underscore_load(tmp_path):
    """PEtab ids match [a-zA-Z_]\\w*: the observable _obs is the model's sbml_obs (its placeholders keep their
    PEtab names, noiseParameter1__obs), the condition _c1 names its experiment as it stands."""
    yaml_path, data = _underscore_problem(tmp_path)
    _edit_files(yaml_path.parent, _UNDERSCORE_OBSERVABLE)
    pp = load(yaml_path)
    assert pp.renamed["_obs"] == "sbml_obs" and pp.model.observable_names == ("sbml_obs",)
    assert list(pp.experiments.names) == ["_c1", "c2"]
    assert all(d.states == ("sbml_obs",) for d in pp.experiments)
    assert pp.experiments.condition("_c1").params["observableParameter1__obs"] == "sbml_scale"

    def nll(k, scale):  # closed form: h = scale * A0 * exp(-k t), A0 = 2 (c1) or _a0 = 1 (c2); sd 0.2 + 0.1 h
        out = 0.0
        for c, t, y in data:
            h = scale * (2.0 if c == "c1" else 1.0) * math.exp(-k * t)
            sd = 0.2 + 0.1 * h
            out += 0.5 * math.log(2 * math.pi * sd**2) + 0.5 * ((y - h) / sd)**2
        return out

    assert pp.nll_nominal(tight()) == pytest.approx(nll(0.4, 1.5), rel=1e-8)


@pytest.mark.parametrize("edits, message", [
    # two observables, _obs and sbml_obs, in either order: one odeinfer name
    ([("observables.tsv", "noiseFormula\n", "noiseFormula\nsbml_obs\t_A\t1\n")],
     r"observables.tsv' line 2: column 'observableId' names 'sbml_obs', which is also the odeinfer name of the id "
     r"'_obs' \(ids with a leading '_' get the prefix 'sbml'\); rename one of them"),
    ([("observables.tsv", "0.1 * _obs\n", "0.1 * _obs\nsbml_obs\t_A\t1\n")],
     r"observables.tsv' line 3: column 'observableId' names 'sbml_obs', which is also the odeinfer name of the id "
     r"'_obs' \(ids with a leading '_' get the prefix 'sbml'\); rename one of them"),
    ([("parameters.tsv", "_sd\tlin", "sbml_obs\tlin\t0\t10\t1\t0\n_sd\tlin")],
     r"parameter_file: column 'parameterId' names 'sbml_obs', which is also the odeinfer name of the id '_obs' "
     r"\(ids with a leading '_' get the prefix 'sbml'\); rename one of them"),
    ([("observables.tsv", "0.1 * _obs", "0.1 * sbml_obs")],
     r"observables.tsv' line 2: the noiseFormula of observable '_obs' names 'sbml_obs', which is also the odeinfer "
     r"name of the id '_obs' \(ids with a leading '_' get the prefix 'sbml'\); rename one of them"),
    # an observable id that is (or whose odeinfer name is) a model or parameter id
    ([("model.xml", '<parameter id="_k"', '<parameter id="sbml_obs" value="1" constant="true"/><parameter id="_k"')],
     r"observables.tsv' line 2: column 'observableId' names '_obs', whose odeinfer name 'sbml_obs' \(ids with a "
     r"leading '_' get the prefix 'sbml'\) is also an id of the SBML model; give the observable an id of its own"),
    ([("observables.tsv", "_obs", "_sd"), ("measurements.tsv", "_obs\t", "_sd\t")],
     r"observables.tsv' line 2: column 'observableId' names '_sd', whose odeinfer name 'sbml_sd' \(ids with a "
     r"leading '_' get the prefix 'sbml'\) is also a parameter of the parameter table; give the observable an id"),
    ([("observables.tsv", "_obs", "C"), ("measurements.tsv", "_obs\t", "C\t")],
     r"observables.tsv' line 2: column 'observableId' names 'C', which is also an id of the SBML model; give the "
     r"observable an id of its own"),
    # valid PEtab ids that no odeinfer name can be
    ([("observables.tsv", "_obs", "lambda"), ("measurements.tsv", "_obs\t", "lambda\t")],
     r"observables.tsv' line 2: column 'observableId' names 'lambda', which cannot be an odeinfer name \(it is a "
     r"Python keyword\); rename it in the files"),
    ([("parameters.tsv", "_sd\t", "t\t"), ("measurements.tsv", "\t_sd\t", "\tt\t")],
     r"parameter_file: column 'parameterId' names 't', which cannot be an odeinfer name \(it is odeinfer's time\); "
     r"rename it in the files"),
])
def test_observable_ids_that_clash_or_cannot_be_names_are_refused(tmp_path, edits, message):
    yaml_path, _ = _underscore_problem(tmp_path)
    _edit_files(yaml_path.parent, _UNDERSCORE_OBSERVABLE + edits)
    with pytest.raises(PetabError, match=message):
        load(yaml_path)
