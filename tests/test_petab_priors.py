"""PEtab v1 priors of the parameter table (odeinfer.petab.priors).

Expected values come from outside odeinfer: scipy.stats log densities (norm, laplace, uniform,
lognorm with s = sd and scale = exp(mean), loglaplace with c = 1 / scale and scale = exp(location))
of the parameter in natural units, or of its log10 for the parameterScale types, as the PEtab v1
parameter-table documentation defines them; central finite differences for the gradients.
Problems: copies of Perelson_Science1996 (tests/data/petab) with hand-written parameter tables.
"""

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import odeinfer as oi
from odeinfer.errors import PetabError
from odeinfer.petab.priors import Prior

PETAB = Path(__file__).parent / "data" / "petab"
NAME = "Perelson_Science1996"
HEADER = ("parameterId\tparameterName\tparameterScale\tlowerBound\tupperBound\tnominalValue\testimate\t"
          "objectivePriorType\tobjectivePriorParameters\tinitializationPriorType\tinitializationPriorParameters")
NOMINAL = {"NN": 480.0, "T0": 11000.0, "c": 2.06, "delta": 0.53, "K0": 3.9e-07, "sd_task0_model0_perelson1_V": 1e5}


def problem(tmp_path, priors, scales=None, init=None):
    """Perelson with every parameter estimated; ``priors``/``init``: {id: (type, "a;b")}."""
    folder = tmp_path / NAME
    shutil.copytree(PETAB / NAME, folder)
    lines = [HEADER]
    for pid, x in NOMINAL.items():
        scale = (scales or {}).get(pid, "log10")
        lo, hi = (1e-10, 1e10) if pid.startswith("sd") else (1e-7, 1e5)
        ot, op = priors.get(pid, ("", ""))
        it, ip = (init or {}).get(pid, ("", ""))
        lines.append(f"{pid}\t{pid}\t{scale}\t{lo}\t{hi}\t{x}\t1\t{ot}\t{op}\t{it}\t{ip}")
    (folder / f"parameters_{NAME}.tsv").write_text("\n".join(lines) + "\n")
    return oi.petab.load(folder / f"{NAME}.yaml")


def scipy_nll(kind, a, b, x, scale):
    """-log density of PEtab's prior from scipy.stats (x natural; parameterScale types on the scale)."""
    z = {"lin": x, "log": math.log(x), "log10": math.log10(x)}[scale] if kind.startswith("parameterScale") else x
    dist = {"uniform": lambda: stats.uniform(loc=a, scale=b - a), "normal": lambda: stats.norm(a, b),
            "laplace": lambda: stats.laplace(a, b), "logNormal": lambda: stats.lognorm(s=b, scale=math.exp(a)),
            "logLaplace": lambda: stats.loglaplace(c=1 / b, scale=math.exp(a))}[
        kind.replace("parameterScale", "").lower() if kind.startswith("parameterScale") else kind]()
    return -float(dist.logpdf(z))


TABLE_1 = {"c": ("normal", "2;0.5"), "delta": ("laplace", "0.4;0.2"), "NN": ("logNormal", "6;1.5"),
           "T0": ("parameterScaleNormal", "4;0.3"), "K0": ("parameterScaleLaplace", "-6;0.5"),
           "sd_task0_model0_perelson1_V": ("uniform", "1e3;1e6")}
TABLE_2 = {"c": ("logLaplace", "0.5;0.4"), "delta": ("parameterScaleUniform", "-2;1"), "NN": ("normal", "500;40")}
SCALES_2 = {"c": "log", "delta": "log10", "NN": "lin"}


@pytest.mark.parametrize("table, scales", [(TABLE_1, None), (TABLE_2, SCALES_2)])
def test_objective_priors_are_scipys_negative_log_densities(tmp_path, table, scales):
    pp = problem(tmp_path, table, scales)
    assert set(pp.objective_priors) == set(table)
    total = 0.0
    for pid, (kind, text) in table.items():
        a, b = map(float, text.split(";"))
        prior = pp.objective_priors[pid]
        scale = (scales or {}).get(pid, "log10")
        assert (prior.kind, prior.a, prior.b, prior.scale) == (kind, a, b, scale)
        for factor in (0.7, 1.0, 1.3):  # around the nominal value
            x = NOMINAL[pid] * factor
            u = {"lin": x, "log": math.log(x), "log10": math.log10(x)}[scale]
            assert prior.nll(u) == pytest.approx(scipy_nll(kind, a, b, x, scale), rel=1e-12, abs=1e-12)
        total += scipy_nll(kind, a, b, NOMINAL[pid], scale)
    with_priors, without = pp.objective(priors=True), pp.objective()
    u = pp.u_nominal
    assert with_priors(u, grad=False).nll - without(u, grad=False).nll == pytest.approx(total, rel=1e-10)
    assert with_priors.value(u).nll - without.value(u).nll == pytest.approx(total, rel=1e-10)  # every entry point
    assert pp.nll_nominal(priors=True) == pytest.approx(pp.nll_nominal() + total, rel=1e-10)


def test_uniform_priors_are_zero_outside_their_range_and_the_parameterscale_default_is_the_bounds(tmp_path):
    pp = problem(tmp_path, {"c": ("uniform", "1;3"), "delta": ("parameterScaleUniform", "")})
    assert pp.objective_priors["c"].nll(math.log10(3.5)) == math.inf
    assert pp.objective_priors["c"].nll(math.log10(2.0)) == pytest.approx(math.log(2.0))
    d = pp.objective_priors["delta"]
    assert (d.a, d.b) == pytest.approx((-7.0, 5.0))  # log10 of the bounds 1e-7, 1e5
    obj = pp.objective(priors=True)
    u = pp.u_nominal.copy()
    u[list(pp.problem.estimated).index("c")] = math.log10(3.5)
    ev = obj(u, grad=False)
    assert not ev.ok and "outside the support of a prior" in ev.failure


CASES = [(k, s) for k in ("uniform", "normal", "laplace", "logNormal", "logLaplace", "parameterScaleUniform",
                          "parameterScaleNormal", "parameterScaleLaplace") for s in ("lin", "log", "log10")]


@pytest.mark.parametrize("kind, scale", CASES)
def test_prior_gradients_match_central_differences(kind, scale):
    natural = not kind.startswith("parameterScale")
    a, b = ((0.5, 4.0) if "niform" in kind else (1.2, 0.7)) if natural or scale == "lin" else (
        (-0.5, 1.5) if "niform" in kind else (0.1, 0.4))
    prior = Prior(kind, a, b, scale)
    for x in (0.8, 1.7, 2.9):
        u = {"lin": x, "log": math.log(x), "log10": math.log10(x)}[scale]
        _, g, _ = prior.terms(u)
        h = 1e-6
        fd = (prior.nll(u + h) - prior.nll(u - h)) / (2 * h)
        assert g == pytest.approx(fd, rel=1e-6, abs=1e-8), (kind, scale, x)


def test_fisher_terms_are_the_constant_second_derivatives():
    # normal on the estimation scale: d2/du2 = 1/sd^2; logNormal of a log-scale parameter: 1/sd^2;
    # logNormal of a log10 parameter: (ln 10 / sd)^2; Laplace and uniform: 0
    for prior, expected in ((Prior("parameterScaleNormal", 0.1, 0.4, "log10"), 1 / 0.4**2),
                            (Prior("normal", 1.2, 0.7, "lin"), 1 / 0.7**2),
                            (Prior("logNormal", 0.3, 0.5, "log"), 1 / 0.5**2),
                            (Prior("logNormal", 0.3, 0.5, "log10"), (math.log(10) / 0.5) ** 2),
                            (Prior("parameterScaleLaplace", 0.1, 0.4, "log"), 0.0),
                            (Prior("uniform", 0.1, 4.0, "log"), 0.0)):
        for u in (-0.3, 0.2, 0.4):
            h = 1e-4
            second = (prior.nll(u + h) - 2 * prior.nll(u) + prior.nll(u - h)) / h**2
            assert prior.terms(u)[2] == pytest.approx(expected, rel=1e-12)
            assert second == pytest.approx(expected, rel=1e-5, abs=1e-6), prior


def test_the_objective_gradient_and_fisher_information_include_the_priors(tmp_path):
    pp = problem(tmp_path, {"c": ("parameterScaleNormal", "0.2;0.1"), "delta": ("logNormal", "-0.5;0.3")})
    est = list(pp.problem.estimated)
    with_priors, without = pp.objective(priors=True), pp.objective()
    u = pp.u_nominal + 0.05
    ev, base = with_priors(u), without(u)
    ic, idl = est.index("c"), est.index("delta")
    x_delta = 10 ** u[idl]
    expected = np.zeros(len(est))
    expected[ic] = (u[ic] - 0.2) / 0.1**2
    expected[idl] = (1 / x_delta + (math.log(x_delta) + 0.5) / (0.3**2 * x_delta)) * x_delta * math.log(10)
    np.testing.assert_allclose(ev.grad - base.grad, expected, rtol=1e-10, atol=1e-10)
    fim = np.zeros((len(est), len(est)))
    fim[ic, ic], fim[idl, idl] = 1 / 0.1**2, (math.log(10) / 0.3) ** 2
    np.testing.assert_allclose(ev.fim - base.fim, fim, rtol=1e-10, atol=1e-8)
    for k in (ic, idl):  # the whole objective against central differences in the prior's parameters
        e = np.zeros(len(est))
        e[k] = 1e-5
        fd = (with_priors(u + e, grad=False).nll - with_priors(u - e, grad=False).nll) / 2e-5
        assert ev.grad[k] == pytest.approx(fd, rel=1e-4)


def test_prior_errors_name_the_type_the_parameter_and_the_file(tmp_path):
    with pytest.raises(PetabError, match=r"parameters_Perelson_Science1996.tsv' line 4: column 'objectivePriorType' "
                                         r"of parameter 'c' is 'gamma', which is not a PEtab v1 prior type"):
        problem(tmp_path / "a", {"c": ("gamma", "1;2")})
    with pytest.raises(PetabError, match=r"line 5: column 'initializationPriorType' of parameter 'delta' is 'logUniform'"):
        problem(tmp_path / "b", {}, init={"delta": ("logUniform", "1;2")})
    with pytest.raises(PetabError, match=r"line 4: column 'objectivePriorParameters' of parameter 'c' holds no two "
                                         r"finite numbers"):
        problem(tmp_path / "c", {"c": ("normal", "1")})
    with pytest.raises(PetabError, match=r"line 4: parameter 'c' has a normal objectivePrior but column "
                                         r"'objectivePriorParameters' is empty"):
        problem(tmp_path / "d", {"c": ("normal", "")})
    with pytest.raises(PetabError, match=r"line 4: the objectivePrior of parameter 'c' is invalid: b: the sd of a "
                                         r"normal prior must be > 0, got -1.0"):
        problem(tmp_path / "e", {"c": ("normal", "1;-1")})
    pp = problem(tmp_path / "f", {})
    with pytest.raises(oi.errors.InputError, match=r"priors: expected True .* or False, got 'yes'"):
        pp.objective(priors="yes")


def test_initialization_priors_draw_the_starts(tmp_path):
    pp = problem(tmp_path, {}, init={"c": ("parameterScaleNormal", "0.5;0.2"), "delta": ("uniform", "0.1;2e5")})
    est = list(pp.problem.estimated)
    x = pp.sample_starts(4000, rng=3)
    assert x.shape == (4000, len(est))
    c = np.log10(x[:, est.index("c")])
    assert abs(c.mean() - 0.5) < 4 * 0.2 / math.sqrt(4000) and abs(c.std() - 0.2) < 0.01
    d = x[:, est.index("delta")]
    assert d.max() == 1e5  # uniform up to 2e5, clipped to the upper bound 1e5 (PEtab's rule)
    assert np.mean(d == 1e5) == pytest.approx(0.5, abs=0.05)
    sd = np.log10(x[:, est.index("sd_task0_model0_perelson1_V")])  # no prior: uniform on log10 in the bounds
    assert sd.min() >= -10 and sd.max() <= 10 and abs(sd.mean()) < 0.3
    np.testing.assert_array_equal(pp.sample_starts(5, rng=3), pp.sample_starts(5, rng=3))
    with pytest.raises(oi.errors.InputError, match=r"n: expected an int >= 1 \(the number of starts\), got 0"):
        pp.sample_starts(0)


def test_the_bayes_model_uses_the_objective_priors(tmp_path):
    import pytensor

    from odeinfer.bayes import build_problem_model

    pp = problem(tmp_path, {"c": ("parameterScaleNormal", "0.2;0.1"), "delta": ("logNormal", "-0.5;0.3")})
    m = build_problem_model(pp)
    names = {v.name for v in m.potentials}
    assert {"prior_log10_c", "prior_log10_delta", "loglik"} <= names
    assert "prior_log10_sd_task0_model0_perelson1_V" not in names  # default: uniform on the scale
    for var, kind, a, b, x in (("log10_c", "parameterScaleNormal", 0.2, 0.1, 1.9),
                               ("log10_delta", "logNormal", -0.5, 0.3, 0.6)):
        pot = m[f"prior_{var}"]
        value = pytensor.clone_replace(pot, {m[var]: pytensor.tensor.as_tensor(math.log10(x))}).eval()
        assert float(value) == pytest.approx(-scipy_nll(kind, a, b, x, "log10"), rel=1e-12)
    with pytest.raises(oi.errors.InputError, match="a FitProblem carries its data"):
        oi.bayes.sample(pp, pp.experiments)  # a PetabProblem goes the FitProblem way
