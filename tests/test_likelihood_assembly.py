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
