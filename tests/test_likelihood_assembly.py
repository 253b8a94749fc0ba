"""The Objective's assembly (noise-model terms, chain rule, gradient, Fisher information in one
kernel over the measurements of an experiment) against references built without it.

References: the Fisher information of one measurement from the distributions' own expected
information (normal: 1/sigma^2 for the location and 2/sigma^2 for the sd; Laplace: 1/b^2 for both),
with the gradients of the prediction and of the sd by central finite differences of
``Objective.noise_model_at`` on a model the solver integrates exactly (x' = k: x0 + k t); the NLL
from scipy.stats; the gradient by central finite differences of the NLL.
"""

import math
import re

import numpy as np
import pytest
from scipy import stats

import odeinfer as oi


@oi.model(states=["x"], params=["k"])
def ramp(t, y, p):
    return {"x": p.k}


T = np.array([0.5, 1.0, 2.0, 3.0, 5.0])
Y = np.c_[[1.3, 1.45, 2.2, 2.45, 3.6], [0.6, 0.9, 1.7, 2.1, 3.3]]
VALUES = {"k": 0.5, "s": 1.2, "off": 0.1, "a": 0.05, "b": 0.02, "sd2": 0.3}
SCALES = {"k": "log10", "s": "log", "off": "lin", "a": "log10", "b": "log", "sd2": "log10"}


def _problem(dist, scale):
    law = oi.Normal if dist == "normal" else oi.Laplace
    m = ramp.observe({"sig": "s*x + off", "kx": "k*x"},
                     noise={"sig": law(sigma="a + b*sig", scale=scale), "kx": oi.Normal(sigma="sd2")},
                     params=["s", "off", "a", "b", "sd2"])
    d = oi.Data(T, Y, ["sig", "kx"])
    params = {n: oi.Param(v, 1e-3, 10.0, SCALES[n]) for n, v in VALUES.items()}
    prob = oi.FitProblem(m, d, params, x0={"x": 1.0})
    return oi.Objective(prob, solver=oi.Dopri5(rtol=1e-12, atol=1e-14))


def _u(obj):
    nat = np.array([VALUES[n] for n in obj.problem.estimated])
    return np.array([{"lin": v, "log": math.log(v), "log10": math.log10(v)}[s] for v, s in zip(nat, obj.scales)])


def _model_at(obj, u):
    h, sd, dist, scale = obj.noise_model_at(u)[0]
    return h, sd, dist, scale


@pytest.mark.parametrize("dist", ["normal", "laplace"])
@pytest.mark.parametrize("scale", ["lin", "log", "log10"])
def test_nll_gradient_and_fisher_information_match_independent_references(dist, scale):
    obj = _problem(dist, scale)
    u = _u(obj)
    ev = obj(u)
    assert ev.ok
    h, sd, dcode, scode = _model_at(obj, u)
    # NLL: scipy.stats log densities on the noise scale plus the change-of-variables term
    plan = obj.problem.plans[0]
    nll = 0.0
    for r in range(h.size):
        y = plan.y_rows[r]
        z = {0: lambda v: v, 1: math.log, 2: math.log10}[int(scode[r])]
        jac = {0: 0.0, 1: math.log(y), 2: math.log(y * math.log(10))}[int(scode[r])]
        law = stats.norm if dcode[r] == 0 else stats.laplace
        nll += -law.logpdf(z(y), loc=z(h[r]), scale=sd[r]) + jac
    assert ev.nll == pytest.approx(nll, rel=1e-12)
    # gradients of h and sd by central differences (h and sd are smooth and exactly integrated)
    eps = 1e-6
    Dh, Ds = np.empty((h.size, u.size)), np.empty((h.size, u.size))
    G = np.empty(u.size)
    for i in range(u.size):
        e = np.zeros(u.size)
        e[i] = eps
        hp, sp, _, _ = _model_at(obj, u + e)
        hm, sm, _, _ = _model_at(obj, u - e)
        Dh[:, i], Ds[:, i] = (hp - hm) / (2 * eps), (sp - sm) / (2 * eps)
        G[i] = (obj(u + e, grad=False).nll - obj(u - e, grad=False).nll) / (2 * eps)
    dz = np.where(scode == 0, 1.0, np.where(scode == 1, 1.0 / h, 1.0 / (h * math.log(10))))
    info_loc = 1.0 / sd ** 2  # normal and Laplace alike
    info_sd = np.where(dcode == 0, 2.0, 1.0) / sd ** 2
    fim = (Dh * (info_loc * dz ** 2)[:, None]).T @ Dh + (Ds * info_sd[:, None]).T @ Ds
    np.testing.assert_allclose(ev.grad, G, rtol=1e-6, atol=1e-6 * np.abs(G).max())
    np.testing.assert_allclose(ev.fim, fim, rtol=1e-6, atol=1e-7 * np.abs(fim).max())


def test_a_failing_noise_sd_names_the_first_bad_observable_and_value():
    m = ramp.observe({"sig": "s*x", "kx": "k*x"}, noise={"sig": oi.Normal(sigma="a - sig"), "kx": oi.Normal(sigma="a")},
                     params=["s", "a"])
    prob = oi.FitProblem(m, oi.Data(T, Y, ["sig", "kx"]), {"k": oi.Param(0.5), "s": oi.Param(1.0),
                                                            "a": oi.Param(1.8)}, x0={"x": 1.0})
    ev = oi.Objective(prob)(prob.nominal(prob.estimated))
    # sig = x = 1 + 0.5 t: the sd 1.8 - sig of 'sig' is 0.55, 0.3, then -0.2 at t = 2 (its first non-positive value)
    assert not ev.ok
    assert "the noise sd of 'sig' is not positive" in ev.failure
    quoted = float(re.search(r"\((?:np\.float64\()?(-?[0-9.e+-]+)", ev.failure).group(1))
    assert quoted == pytest.approx(-0.2, rel=1e-6)


def _sd_only(dist):
    """A problem whose second observable's sd is a plain parameter (log10 scale): ln sd is linear in it and
    the prediction does not depend on it, so the NLL's exact second derivative in it is a sum over the
    measurements of d^2 nll / d(ln sd)^2 times ln(10)^2."""
    law = oi.Normal if dist == "normal" else oi.Laplace
    m = ramp.observe({"kx": "k*x"}, noise={"kx": law(sigma="sd2")}, params=["sd2"])
    params = {"k": oi.Param(0.5, 1e-3, 10.0, "log10"), "sd2": oi.Param(0.3, 1e-3, 10.0, "log10")}
    prob = oi.FitProblem(m, oi.Data(T, Y[:, 1], ["kx"]), params, x0={"x": 1.0})
    return oi.Objective(prob, solver=oi.Dopri5(rtol=1e-12, atol=1e-14))


@pytest.mark.parametrize("dist", ["normal", "laplace"])
@pytest.mark.parametrize("sd", [0.03, 0.3, 30.0])
def test_the_fits_curvature_of_a_noise_parameter_is_the_nlls_second_derivative(dist, sd):
    # the fits' curvature takes the observed information of the noise sd (the NLL's second derivative in ln sd,
    # at the current residuals) in place of its expected value: reference, central second differences of the NLL
    obj = _sd_only(dist)
    u = np.array([math.log10(0.5), math.log10(sd)])
    ev = obj(u)
    eps = 1e-3
    e = np.array([0.0, eps])
    d2 = (obj(u + e, grad=False).nll - 2 * ev.nll + obj(u - e, grad=False).nll) / eps ** 2
    # second differences: truncation O(eps^2) relative (1e-5 here); rounding at most 4 ulp(nll) / eps^2 (x4)
    assert ev.curvature[1, 1] == pytest.approx(d2, rel=1e-5, abs=16 * np.finfo(float).eps * abs(ev.nll) / eps ** 2)
    # the Fisher information keeps the expected value: 2 (normal) or 1 (Laplace) per measurement, times ln(10)^2
    per = 2.0 if dist == "normal" else 1.0
    assert ev.fim[1, 1] == pytest.approx(per * T.size * math.log(10) ** 2, rel=1e-12)
    # the prediction's block and the cross terms are the Fisher information's
    np.testing.assert_array_equal(ev.curvature[0], ev.fim[0])
    np.testing.assert_array_equal(ev.curvature[:, 0], ev.fim[:, 0])


@pytest.mark.parametrize("dist", ["normal", "laplace"])
def test_the_fits_curvature_reweights_the_sd_terms_by_the_residuals(dist):
    # sd = a + b * sig depends on a, b and (through sig) on k, s, off: the curvature is the Fisher information
    # with each measurement's sd term weighted by e^2 (normal) or |d| / sd (Laplace), d the residual on the
    # noise scale and e = d / sd; Dh, Ds by central differences as in the Fisher information's test above
    obj = _problem(dist, "log")
    u = _u(obj)
    ev = obj(u)
    h, sd, dcode, scode = _model_at(obj, u)
    plan = obj.problem.plans[0]
    z = np.where(scode == 0, 1.0, 0.0) * plan.y_rows + np.where(scode == 1, 1.0, 0.0) * np.log(np.abs(plan.y_rows))
    zh = np.where(scode == 0, h, np.log(np.abs(h)))
    assert set(np.unique(scode)) <= {0, 1}
    d = z - zh
    eps = 1e-6
    Ds = np.empty((h.size, u.size))
    for i in range(u.size):
        step = np.zeros(u.size)
        step[i] = eps
        Ds[:, i] = (_model_at(obj, u + step)[1] - _model_at(obj, u - step)[1]) / (2 * eps)
    info_sd = np.where(dcode == 0, 2.0, 1.0) / sd ** 2
    weight = np.where(dcode == 0, (d / sd) ** 2, np.abs(d) / sd)
    ref = ev.fim + (Ds * (info_sd * (weight - 1.0))[:, None]).T @ Ds
    np.testing.assert_allclose(ev.curvature, ref, rtol=1e-6, atol=1e-7 * np.abs(ref).max())
    assert np.abs(ev.curvature - ev.fim).max() > 1e-3 * np.abs(ev.fim).max()  # the reweighting is not negligible here
