"""Noise sds that depend on the model's states and on t (PEtab's noiseFormula may name model entities:
Raia_CancerResearch2011's ``sd_abs + sd_rel * CD274mRNA * scale``).

Model: x' = k, x(0) = x0, so x = x0 + k t exactly (the solver integrates a linear right-hand side to
rounding). Observables: ``y1 = s x`` with normal noise, sd ``a + b x`` (a state, not the observable's
own value); ``y2 = x`` with Laplace noise on the log scale, sd ``c (1 + t) x`` (t and a state).

References, written here from scipy.stats and by hand, independent of odeinfer's assembly:
the NLL from ``scipy.stats.norm.logpdf`` / ``scipy.stats.laplace.logpdf`` (the log-scale density of y
is the density of log y times 1/y); the gradient from the closed-form derivatives of each term
(normal: d/dh = -r/sd^2, d/dsd = 1/sd - r^2/sd^3; Laplace on log y: d/dlog h = -sign(d)/sd,
d/dsd = 1/sd - |d|/sd^2) chained through h and sd written as functions of (k, x0, s, a, b, c) and
t; the Fisher information from the distributions' expected information (normal: 1/sd^2 for the
location, 2/sd^2 for the sd; Laplace: 1/sd^2 for both). Tolerances (fixed before the first run):
1e-10 relative for the NLL, the gradient and the Fisher information.
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
Y = np.c_[[1.3, 1.45, 2.2, 2.45, 3.6], [1.2, 1.6, 1.9, 2.7, 3.4]]
VALUES = {"k": 0.5, "x0": 1.1, "s": 1.2, "a": 0.05, "b": 0.1, "c": 0.04}
SCALES = {"k": "log10", "x0": "log", "s": "lin", "a": "log10", "b": "lin", "c": "log"}
NAMES = ["k", "x0", "s", "a", "b", "c"]


def _objective():
    m = ramp.observe({"y1": "s*x", "y2": "x"},
                     noise={"y1": oi.Normal(sigma="a + b*x"), "y2": oi.Laplace(sigma="c*(1 + t)*x", scale="log")},
                     params=["s", "a", "b", "c"])
    params = {n: oi.Param(v, 1e-3, 10.0, SCALES[n]) for n, v in VALUES.items()}
    prob = oi.FitProblem(m, oi.Data(T, Y, ["y1", "y2"]), params, x0={"x": "x0"})
    return oi.Objective(prob, solver=oi.Dopri5(rtol=1e-12, atol=1e-14))


def _u(obj):
    nat = np.array([VALUES[n] for n in obj.problem.estimated])
    return np.array([{"lin": v, "log": math.log(v), "log10": math.log10(v)}[s] for v, s in zip(nat, obj.scales)])


def _reference():
    """``(nll, gradient, Fisher information)`` in the natural parameters, in the order ``NAMES``."""
    k, x0, s, a, b, c = (VALUES[n] for n in NAMES)
    x = x0 + k * T
    dx = np.c_[T, np.ones_like(T), 0 * T, 0 * T, 0 * T, 0 * T]  # d x / d(k, x0, s, a, b, c)
    # y1 = s x, sd1 = a + b x, normal
    h1, sd1 = s * x, a + b * x
    dh1 = s * dx + np.c_[0 * T, 0 * T, x, 0 * T, 0 * T, 0 * T]
    dsd1 = b * dx + np.c_[0 * T, 0 * T, 0 * T, np.ones_like(T), x, 0 * T]
    r = Y[:, 0] - h1
    nll = -stats.norm.logpdf(Y[:, 0], loc=h1, scale=sd1).sum()
    grad = (-r / sd1 ** 2) @ dh1 + (1 / sd1 - r ** 2 / sd1 ** 3) @ dsd1
    fim = (dh1 / sd1[:, None] ** 2).T @ dh1 + (2 * dsd1 / sd1[:, None] ** 2).T @ dsd1
    # y2 = x, sd2 = c (1 + t) x, Laplace on log y
    sd2 = c * (1 + T) * x
    dlogh = dx / x[:, None]
    dsd2 = c * (1 + T)[:, None] * dx + np.c_[0 * T, 0 * T, 0 * T, 0 * T, 0 * T, (1 + T) * x]
    d = np.log(Y[:, 1]) - np.log(x)
    nll += -(stats.laplace.logpdf(np.log(Y[:, 1]), loc=np.log(x), scale=sd2) - np.log(Y[:, 1])).sum()
    grad += (-np.sign(d) / sd2) @ dlogh + (1 / sd2 - np.abs(d) / sd2 ** 2) @ dsd2
    fim += (dlogh / sd2[:, None] ** 2).T @ dlogh + (dsd2 / sd2[:, None] ** 2).T @ dsd2
    return nll, grad, fim


def test_state_and_time_dependent_sds_match_scipy_and_the_closed_form_gradient():
    obj = _objective()
    ev = obj(_u(obj))
    assert ev.ok, ev.failure
    nll, grad, fim = _reference()
    order = [NAMES.index(n) for n in obj.problem.estimated]
    assert sorted(order) == list(range(len(NAMES)))
    grad, fim = grad[order], fim[np.ix_(order, order)]
    # natural -> estimation scale: d theta / d u = theta ln 10 (log10), theta (log), 1 (lin)
    d = np.array([VALUES[n] * {"lin": 1 / VALUES[n], "log": 1.0, "log10": math.log(10.0)}[SCALES[n]]
                  for n in obj.problem.estimated])
    assert ev.nll == pytest.approx(nll, rel=1e-10)
    np.testing.assert_allclose(ev.grad, grad * d, rtol=1e-10, atol=1e-10 * np.abs(grad * d).max())
    fim = fim * np.outer(d, d)
    np.testing.assert_allclose(ev.fim, fim, rtol=1e-10, atol=1e-10 * np.abs(fim).max())


def test_noise_model_at_gives_the_state_dependent_sds():
    obj = _objective()
    h, sd, dist, scale = obj.noise_model_at(_u(obj))[0]
    k, x0, s, a, b, c = (VALUES[n] for n in NAMES)
    x = x0 + k * T
    t, which, _ = obj.predictions(_u(obj))[obj.problem.plans[0].name]
    y1 = which == "y1"
    xt = x0 + k * t
    np.testing.assert_allclose(sd[y1], a + b * xt[y1], rtol=1e-12)
    np.testing.assert_allclose(sd[~y1], c * (1 + t[~y1]) * xt[~y1], rtol=1e-12)
    assert sorted(t[y1]) == sorted(T) and np.allclose(np.sort(sd[y1]), np.sort(a + b * x))


def test_a_state_dependent_sd_that_is_not_positive_fails_naming_its_measurements():
    m = ramp.observe({"o": "x"}, noise=oi.Normal(sigma="a - b*x"), params=["a", "b"])
    prob = oi.FitProblem(m, oi.Data(T, Y[:, 0], "o", name="e"),
                         {"k": oi.Param(0.5), "a": oi.Param(2.2), "b": oi.Param(1.0)}, x0={"x": 1.0})
    # x = 1 + 0.5 t: a - b x = 1.2 - 0.5 t is -0.3 at t = 3 and -1.3 at t = 5 (rows 3, 4), 0.2 at t = 2
    ev = oi.Objective(prob)(np.array([0.5, 2.2, 1.0]))
    assert not ev.ok
    m = re.fullmatch(r"experiment 'e': the noise sd of 'o' is not positive \((\S+)\) in 2 measurement\(s\), rows "
                     r"\[3, 4\] of the experiment at t=\[3.0, 5.0\]", ev.failure)
    assert m, ev.failure
    assert float(m[1]) == pytest.approx(-0.3, abs=1e-6)


def test_simultaneous_likelihood_gradient_with_state_dependent_sds_matches_central_differences():
    """The collocation likelihood (states as unknowns on a grid): the sd's derivative in the node
    states (``dsd/dx + dsd/dh dh/dx``) enters the gradient; central differences as the oracle at a
    point off the constraint manifold (same tolerances as the collocation's own gradient test)."""
    from odeinfer.estimators._simultaneous_likelihood import LikelihoodCollocation

    lc = LikelihoodCollocation(_objective().problem, oi.Simultaneous(n_grid=8))
    rng = np.random.default_rng(5)
    z = lc.start(_u(_objective()), None)
    z[:lc.theta_off] *= 1.0 + 0.05 * rng.standard_normal(lc.theta_off)
    nll, g, _ = lc.terms(z)
    g_fd = np.empty(lc.nz)
    for i in range(lc.nz):
        e = np.zeros(lc.nz)
        e[i] = 1e-6 * max(1.0, abs(z[i]))
        g_fd[i] = (lc.value(z + e) - lc.value(z - e)) / (2 * e[i])
    np.testing.assert_allclose(g, g_fd, rtol=1e-6, atol=1e-6)
