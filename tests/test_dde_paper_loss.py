"""The l1 integral loss of DDE-Find's HIV experiment (Stephany 2024, sec. 6.5):
``odeinfer.estimators._dde_paper.L1IntegralLoss`` and ``run_paper(..., loss="l1")``.

Independent references: the loss against scipy ``quad`` of ``|x(t) - spline(t)|`` with ``x`` from
the method-of-steps DOP853 solution at rtol 1e-12 (tests/dde_reference.py) and ``spline`` scipy's
not-a-knot ``CubicSpline`` of the data; the gradient against central finite differences of the
same quadrature.
"""

import itertools
import time
import warnings

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.interpolate import CubicSpline

import odeinfer as oi
from odeinfer import zoo
from odeinfer.errors import InputError
from odeinfer.estimators._dde_paper import L1IntegralLoss, run_paper
from odeinfer.estimators._dde_setup import build_setup
from odeinfer.estimators.adjoint_dde import AdjointDDE
from odeinfer.model import History


def _ref():
    import dde_reference  # tests/ is on sys.path (conftest.py)

    return dde_reference


@pytest.fixture(scope="module")
def ded():
    """DED (DDE-Find sec. 6.1) on [0, 4], 41 samples, noise 0.3 sd; the setup of the unknowns."""
    e = zoo.get("delay_exponential_decay")
    t = np.linspace(0.0, 4.0, 41)
    clean = _ref().reference_solution(e, t)
    y = clean + 0.3 * np.std(clean, ddof=1) * np.random.default_rng(7).standard_normal(clean.shape)
    data = oi.Data(t, y, ["x"])
    S = build_setup(AdjointDDE(mode="paper"), e.model, data, History.affine(1.5, 4.0), None, None, None)
    return e, t, y, S


def _setup_at(e, t, y, rtol, atol):
    """The fixture's setup with the DDE solver at ``rtol``, ``atol``."""
    est = AdjointDDE(mode="paper", solver=oi.MethodOfSteps(oi.Dopri5(rtol=rtol, atol=atol)))
    return build_setup(est, e.model, oi.Data(t, y, ["x"]), History.affine(1.5, 4.0), None, None, None)


def test_l1_loss_matches_quad_of_reference_solution(ded):
    e, t, y, _S = ded
    u = np.array([-2.0, -2.0, 1.0, 1.5, 4.0])          # the truth: x is the reference solution
    ev = _ref().method_of_steps(lambda tt, x, lags: _ref().ded(tt, x, lags, dict(e.params)),
                                _ref().hand_history(e), [1.0], 0.0, 4.0)
    spl = CubicSpline(t, y[:, 0])
    ref = sum(quad(lambda s: abs(ev(s)[0, 0] - spl(s)), a, b, limit=200, epsabs=1e-12)[0]
              for a, b in itertools.pairwise(t))
    loss, g = L1IntegralLoss(_setup_at(e, t, y, 1e-10, 1e-12), n_sub=200)(u)
    assert loss == pytest.approx(ref, rel=1e-4)
    assert g.shape == (5,) and np.all(np.isfinite(g))


def test_l1_gradient_matches_central_differences(ded):
    e, t, y, _S = ded
    f = L1IntegralLoss(_setup_at(e, t, y, 1e-11, 1e-13), n_sub=10)
    u = np.array([-1.7, -2.3, 1.1, 1.2, 3.6])
    _, g = f(u)
    h = 1e-6
    fd = np.array([(f(u + h * np.eye(5)[j])[0] - f(u - h * np.eye(5)[j])[0]) / (2 * h) for j in range(5)])
    np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-6 * np.abs(g).max())


def test_run_paper_l1_reduces_the_loss(ded):
    e, t, y, _S = ded
    est = AdjointDDE(mode="paper", epochs=60)
    S2 = build_setup(est, e.model, oi.Data(t, y, ["x"]), History.affine(2.25, 2.8),
                     {"theta0": -1.5, "theta1": -2.5, "tau": 1.5}, None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_paper(est, S2, time.perf_counter(), loss="l1")
    c = r.history["cost"]
    assert r.extras["loss"] == "l1" and c.size == 60
    assert c[-1] < 0.5 * c[0]


def test_l1_bad_inputs(ded):
    e, t, y, S = ded
    with pytest.raises(InputError, match="n_sub: expected an int >= 1"):
        L1IntegralLoss(S, n_sub=0)
    S2 = build_setup(AdjointDDE(mode="paper"), e.model, oi.Data(t, y, ["x"]), History.affine(1.5, 4.0),
                     {"theta0": -2.0, "theta1": -2.0, "tau": 1.0}, None, None)
    with pytest.raises(InputError, match="loss: expected 'l2'.*or 'l1'"):
        run_paper(AdjointDDE(mode="paper"), S2, time.perf_counter(), loss="linf")


def test_adjoint_dde_loss_option(ded):
    """AdjointDDE(mode="paper", loss="l1") runs the l1 Adam loop (its objective is the l1 loss);
    loss="l1" outside paper mode and unknown losses are refused with the fix named."""
    e, t, y, S = ded
    data = oi.Data(t, y, ["x"])
    est = AdjointDDE(mode="paper", loss="l1", epochs=3)
    u = {"theta0": -2.0, "theta1": -2.0, "tau": 1.0, "a[x]": 1.5, "b[x]": 4.0}
    value, grad, names = est.objective(e.model, data, u, history=History.affine(1.5, 4.0))
    ref, ref_g = L1IntegralLoss(S)(np.array([u[n] for n in names]))
    assert value == pytest.approx(ref, rel=1e-12) and np.allclose(grad, ref_g, rtol=1e-12)
    fit = est.fit(e.model, data, history=History.affine(1.5, 4.0), start={"theta0": -1.5, "theta1": -1.5,
                                                                          "tau": 0.8})
    assert fit.history["cost"][0] > fit.history["cost"][-1]
    with pytest.raises(InputError, match=r"loss: 'l1' is an integral loss of mode='paper'.*pass mode='paper'"):
        AdjointDDE(loss="l1")
    with pytest.raises(InputError, match=r"loss: expected 'l2' or 'l1', got 'huber'"):
        AdjointDDE(mode="paper", loss="huber")
