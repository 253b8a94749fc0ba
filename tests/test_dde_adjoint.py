"""Adjoint gradient of the DDE-Find integral loss, with the corrected delay gradient.

References:
* the spec's independent check (seed-002-dde-find.md section 1.4, script
  seed-002-dde-find-gradcheck.py: scipy DOP853 method of steps at rtol 1e-12, adjoint by
  quadrature, central finite differences h = 1e-5) for the delay exponential decay model;
* on every DDE zoo model, the gradient from the forward sensitivities (themselves checked
  against central differences in test_dde_solver.py), int 2 w (x - target) S dt by
  composite Simpson on a grid aligned with the breakpoints.
"""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer import zoo
from odeinfer.errors import InputError
from odeinfer.model import History
from odeinfer.solve.dde_adjoint import dde_loss_gradient


def _xt(t):
    return np.array([4.0 * np.exp(-t / 3.0) * np.cos(t)])


# (theta0, theta1, tau), (a, b), dL/dtau of eq. (5), dL/dtau by central FD (spec table, section 1.4)
SPEC_CASES = [
    ((-2.0, -2.0, 1.0), (1.5, 4.0), 35.20053063, 24.31352928),
    ((-1.5, -2.5, 2.0), (2.25, 2.8), -37.84517580, -108.89883343),
]


@pytest.mark.parametrize("theta, phi, paper_value, fd_value", SPEC_CASES)
def test_delay_gradient_matches_finite_differences_and_the_paper_formula_does_not(theta, phi, paper_value,
                                                                                   fd_value):
    model = zoo.get("delay_exponential_decay").model
    g = dde_loss_gradient(model, theta, History.affine(*phi), _xt, 10.0)
    assert g.names == ("theta0", "theta1", "tau", "a[x]", "b[x]")
    assert g.grad[2] == pytest.approx(fd_value, rel=1e-6)
    paper = dde_loss_gradient(model, theta, History.affine(*phi), _xt, 10.0, paper=True)
    assert paper.grad[2] == pytest.approx(paper_value, rel=1e-6)       # we reproduce eq. (5) ...
    assert abs(paper.grad[2] - fd_value) > 0.1 * abs(fd_value)         # ... and it is wrong
    np.testing.assert_allclose(paper.grad[[0, 1, 3, 4]], g.grad[[0, 1, 3, 4]], rtol=1e-12)  # only tau differs


def test_paper_formula_has_the_wrong_sign_at_the_papers_starting_point():
    """Spec section 1.4, third case: target = the true DED trajectory, start (-1.5, -2.5, 2, 2.25, 2.8):
    eq. (5) gives +5.86376171, the true gradient (FD) is -27.76543856."""
    e = zoo.get("delay_exponential_decay")
    s = np.linspace(0.0, 10.0, 2001)
    truth = oi.solve(oi.Problem(e.model, s, history=e.history), e.params_array(),
                     solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-11, atol=1e-13)))
    target = History.from_data(s, truth.y)
    g = dde_loss_gradient(e.model, (-1.5, -2.5, 2.0), History.affine(2.25, 2.8), target, 10.0)
    paper = dde_loss_gradient(e.model, (-1.5, -2.5, 2.0), History.affine(2.25, 2.8), target, 10.0, paper=True)
    assert g.grad[2] == pytest.approx(-27.76543856, rel=1e-5)
    assert paper.grad[2] == pytest.approx(5.86376171, rel=1e-5)


def _simpson_gradient(entry, target, t_end, per_tau=200):
    tau = entry.params["tau"]
    n_panels = int(np.ceil((t_end - entry.t0) / tau * per_tau / 2))
    t = np.linspace(entry.t0, t_end, 2 * n_panels + 1)
    # aligned with t0 + k tau when (t_end - t0) / tau is an integer, else dense enough for 1e-6
    sol = oi.solve(oi.Problem(entry.model, t, history=entry.history, t0=entry.t0), entry.params_array(),
                   solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-11, atol=1e-13)), gradient=oi.Forward())
    r = sol.y - target(t)
    integrand = 2.0 * np.einsum("ti,tij->tj", r, sol.sens)
    loss_i = np.sum(r * r, axis=1)
    wts = np.ones(t.size)
    wts[1:-1:2], wts[2:-1:2] = 4.0, 2.0
    dt = t[1] - t[0]
    return dt / 3.0 * wts @ loss_i, dt / 3.0 * wts @ integrand


@pytest.mark.parametrize("name", zoo.available("dde"))
def test_adjoint_gradient_matches_the_sensitivity_gradient(name):
    e = zoo.get(name)
    t_end = float(e.t[-1])
    x0 = e.x0_array()
    target = History.from_function(lambda s: x0 * (1.0 + 0.1 * np.sin(s)), e.t0, t_end, n_points=4001)
    g = dde_loss_gradient(e.model, e.params_array(), e.history, target, t_end, t0=e.t0, gradient=oi.Adjoint(nsub=100))
    loss, grad = _simpson_gradient(e, target, t_end)
    assert g.loss == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(g.grad, grad, rtol=0, atol=1e-6 * np.max(np.abs(grad)))


def test_bad_input():
    model = zoo.get("delay_exponential_decay").model
    with pytest.raises(InputError, match="target: covers \\[0, 5\\] but the loss integrates over \\[0, 10\\]"):
        dde_loss_gradient(model, (-2.0, -2.0, 1.0), History.affine(1.5, 4.0),
                          (np.linspace(0, 5, 11), np.zeros(11)), 10.0)
    with pytest.raises(InputError, match="the delay 'tau' must be > 0"):
        dde_loss_gradient(model, (-2.0, -2.0, 0.0), History.affine(1.5, 4.0), _xt, 10.0)
    with pytest.raises(InputError, match="t_end: must be > t0"):
        dde_loss_gradient(model, (-2.0, -2.0, 1.0), History.affine(1.5, 4.0), _xt, 0.0)
    with pytest.raises(InputError, match="weights: expected 1 finite numbers"):
        dde_loss_gradient(model, (-2.0, -2.0, 1.0), History.affine(1.5, 4.0), _xt, 10.0, weights=[1.0, 2.0])
