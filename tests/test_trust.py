"""The bound-constrained trust-region minimiser (fides) of odeinfer.estimators._trust.

References: Rosenbrock's analytic minimum (1, 1) and, with a <= 1/2, the constrained minimum
(1/2, 1/4) (for fixed a, b = a^2 is optimal and (1 - a)^2 decreases up to a = 1); scipy's
L-BFGS-B and least_squares (trf) as independent optimisers.
"""

import logging

import numpy as np
import pytest
from scipy.optimize import least_squares, minimize

from odeinfer.errors import InputError
from odeinfer.estimators._trust import TrustResult, trust_region


def rosen(x):
    a, b = x
    f = (1 - a) ** 2 + 100 * (b - a * a) ** 2
    g = np.array([-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)])
    H = np.array([[2 - 400 * (b - 3 * a * a), -400 * a], [-400 * a, 200.0]])
    return f, g, H


def rosen_f(x):
    return rosen(x)[0]


def rosen_g(x):
    return rosen(x)[1]


def lbfgsb(x0, bounds):
    return minimize(rosen_f, x0, jac=rosen_g, method="L-BFGS-B", bounds=bounds,
                    options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10000}).x


def projected_gradient(x, g, lo, hi, tol=1e-7):
    """The KKT residual: g where x is interior; g's infeasible sign at an active bound."""
    pg = g.copy()
    at_lo, at_hi = x - lo <= tol, hi - x <= tol
    pg[at_lo] = np.minimum(g[at_lo], 0.0)  # at a lower bound g >= 0 is fine
    pg[at_hi] = np.maximum(g[at_hi], 0.0)  # at an upper bound g <= 0 is fine
    return pg


def test_rosenbrock_interior_optimum():
    lo, hi = np.array([-2.0, -2.0]), np.array([2.0, 3.0])
    res = trust_region(rosen, [-1.2, 1.0], lo, hi)
    assert isinstance(res, TrustResult) and res.status == "converged", res.message
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(res.x, lbfgsb([-1.2, 1.0], list(zip(lo, hi))), atol=1e-6)
    assert res.f < 1e-12 and np.linalg.norm(res.g) < 1e-5
    assert res.history.shape == (res.n_iter + 1,) and res.history[0] == pytest.approx(24.2)
    assert res.history[-1] == res.f and np.all(np.diff(res.history) <= 0)  # accepted steps only decrease f
    assert res.n_eval == res.n_iter + 1 and res.n_fail == 0


@pytest.mark.parametrize("x0", [[-1.2, 1.0], [0.5, 0.0]])  # the second starts on the active bound
def test_rosenbrock_active_bound_kkt(x0):
    lo, hi = np.array([-2.0, -2.0]), np.array([0.5, 3.0])
    res = trust_region(rosen, x0, lo, hi)
    assert res.status == "converged", res.message
    np.testing.assert_allclose(res.x, [0.5, 0.25], atol=1e-6)
    np.testing.assert_allclose(res.x, lbfgsb(x0, list(zip(lo, hi))), atol=1e-6)
    assert np.all(res.x >= lo) and np.all(res.x <= hi)
    assert np.max(np.abs(projected_gradient(res.x, res.g, lo, hi))) < 1e-6
    assert res.g[0] == pytest.approx(-1.0, abs=1e-5)  # the multiplier of a <= 1/2: df/da = -2 (1 - a)


def test_exponential_decay_gauss_newton_matches_least_squares_trf():
    rng = np.random.default_rng(3)
    t = np.linspace(0.0, 4.0, 25)
    y = 2.5 * np.exp(-1.3 * t) + 0.4 + rng.normal(0.0, 0.02, t.size)

    def residual(x):
        return x[0] * np.exp(-x[1] * t) + x[2] - y

    def jac(x):
        e = np.exp(-x[1] * t)
        return np.column_stack([e, -x[0] * t * e, np.ones_like(t)])

    def fun(x):
        r, J = residual(x), jac(x)
        return 0.5 * float(r @ r), J.T @ r, J.T @ J

    lo, hi = np.array([0.0, 0.0, -1.0]), np.array([10.0, 10.0, 1.0])
    x0 = np.array([1.0, 0.3, 0.0])
    res = trust_region(fun, x0, lo, hi)
    ref = least_squares(residual, x0, jac=jac, bounds=(lo, hi), method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15)
    assert res.status == "converged", res.message
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-6, atol=1e-8)
    assert res.f == pytest.approx(ref.cost, rel=1e-10)
    np.testing.assert_allclose(res.H, jac(res.x).T @ jac(res.x), rtol=1e-12)


@pytest.mark.parametrize("reason", ["the problem became stiff at t=3 (test)", None])
def test_failed_trial_points_are_rejected_steps(reason):
    calls = []

    def fun(x):
        calls.append(x.copy())
        if x[1] > 1.1:  # the optimum (1, 1) is outside the failing region, trial points on the way are in it
            return reason
        return rosen(x)

    res = trust_region(fun, [-1.2, 1.0], [-2.0, -2.0], [2.0, 3.0])
    n_bad = sum(c[1] > 1.1 for c in calls)
    assert n_bad > 0  # the test exercises the failure path
    assert res.status == "converged", res.message
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-6)
    assert res.n_fail == n_bad and res.n_eval == len(calls)
    assert f"could not be computed at {n_bad} of {len(calls)} points" in res.message
    assert (reason or "the objective reported a failure") in res.message


def test_a_step_below_xtol_after_failed_trial_points_is_no_convergence():
    """Every point but the start fails: the radius shrinks until the step is below xtol. Rosenbrock's gradient at
    (-1.2, 1) is (-215.6, -88), so the model promises a large decrease: failed, not converged. At the optimum the
    same collapse is a stationary point: converged."""
    x0 = np.array([-1.2, 1.0])

    def fun(x):
        return rosen(x) if np.array_equal(x, x0) else "the model blew up (test)"

    res = trust_region(fun, x0, [-2.0, -2.0], [2.0, 3.0], xtol=1e-6)
    assert res.stop == "XTOL" and res.status == "failed", (res.stop, res.status)
    assert res.message.startswith("the step fell below xtol after rejected trial points"), res.message
    assert "the model still predicts a decrease of" in res.message and "the model blew up (test)" in res.message
    x0 = np.array([1.0, 1.0])
    res = trust_region(fun, x0, [-2.0, -2.0], [2.0, 3.0], xtol=1e-6)
    assert res.status == "converged" and np.array_equal(res.x, x0), (res.status, res.message)


def test_failure_at_the_start():
    res = trust_region(lambda x: "experiment 'a': the problem became stiff at t=0.5", [0.0, 0.0], [-1, -1], [1, 1])
    assert res.status == "failed" and res.n_eval == 1 and res.n_fail == 1 and res.n_iter == 0
    assert res.message == ("the objective could not be computed at the start: experiment 'a': the problem became "
                           "stiff at t=0.5")


def test_non_finite_gradient_counts_as_failure():
    def fun(x):
        f, g, H = rosen(x)
        return (f, np.full(2, np.nan), H) if x[1] > 1.1 else (f, g, H)

    res = trust_region(fun, [-1.2, 1.0], [-2.0, -2.0], [2.0, 3.0])
    assert res.status == "converged" and res.n_fail > 0
    assert "the gradient or the curvature matrix H is not finite" in res.message


def rosen_fg(x):
    return rosen(x)[:2]


@pytest.mark.parametrize("upper, x_opt", [([2.0, 3.0], [1.0, 1.0]), ([0.5, 3.0], [0.5, 0.25])])
def test_bfgs_curvature_reaches_the_optimum_interior_and_on_a_bound(upper, x_opt):
    """``curvature="bfgs"``: fun gives (f, g) only. The same optima as with the exact Hessian, and as L-BFGS-B."""
    lo, hi = np.array([-2.0, -2.0]), np.array(upper)
    res = trust_region(rosen_fg, [-1.2, 1.0], lo, hi, curvature="bfgs", fatol=0.0, frtol=0.0, gatol=1e-9)
    assert res.status == "converged", res.message
    np.testing.assert_allclose(res.x, x_opt, atol=1e-6)
    np.testing.assert_allclose(res.x, lbfgsb([-1.2, 1.0], list(zip(lo, hi))), atol=1e-6)
    assert np.max(np.abs(projected_gradient(res.x, res.g, lo, hi))) < 1e-6
    assert np.all(np.linalg.eigvalsh(res.H) > 0)  # the BFGS matrix stays positive definite
    # a restart from a point on a bound evaluates it again, moved inward by 1e-8 (f may rise there)
    assert res.n_eval >= res.n_iter + 1 and res.history.shape == (res.n_iter + 1,)
    assert np.all(np.diff(res.history) <= 2e-8 * np.abs(res.g).max())  # |g| 1e-8 to first order


def test_bfgs_curvature_rejects_failed_points():
    def fun(x):
        return "not here (test)" if x[1] > 1.1 else rosen_fg(x)

    res = trust_region(fun, [-1.2, 1.0], [-2.0, -2.0], [2.0, 3.0], curvature="bfgs", fatol=0.0, frtol=0.0)
    assert res.status == "converged" and res.n_fail > 0 and "not here (test)" in res.message
    np.testing.assert_allclose(res.x, [1.0, 1.0], atol=1e-5)


def test_max_iter_is_reported_honestly_and_quietly(capfd, caplog):
    with caplog.at_level(logging.DEBUG):
        res = trust_region(rosen, [-1.2, 1.0], [-2.0, -2.0], [2.0, 3.0], max_iter=3)
    assert res.status == "max_iter" and res.n_iter == 3 and res.history.shape == (4,)
    assert "no convergence within max_iter=3 iterations" in res.message
    assert np.linalg.norm(res.x - 1.0) > 1e-3
    out, err = capfd.readouterr()
    assert out == "" and err == "" and not caplog.records


def test_tolerance_settings_are_used():
    loose = trust_region(rosen, [-1.2, 1.0], [-2.0, -2.0], [2.0, 3.0], fatol=1e-2, frtol=0.0, gatol=0.0, xtol=0.0)
    tight = trust_region(rosen, [-1.2, 1.0], [-2.0, -2.0], [2.0, 3.0])
    assert loose.status == "converged" and "change of f" in loose.message
    assert loose.n_iter < tight.n_iter and loose.f > tight.f
    g = trust_region(rosen, [-1.2, 1.0], [-2.0, -2.0], [2.0, 3.0], fatol=0, frtol=0, xtol=0, gatol=1e-3)
    assert g.status == "converged" and "gradient norm" in g.message and np.linalg.norm(g.g) <= 1e-3


@pytest.mark.parametrize("kwargs, match", [
    ({"x0": [3.0, 0.0]}, r"x0: expected a start inside the bounds, got x0\[0\] = 3\.0 outside \[-2\.0, 2\.0\]; "
                          r"clip it, e\.g\. x0 = np\.clip\(x0, lower, upper\)"),
    ({"lower": [-2.0, 1.0], "upper": [2.0, -1.0]}, r"lower, upper: expected lower < upper, got lower\[1\] = 1\.0 >= "
                                                 r"upper\[1\] = -1\.0; swap them"),
    ({"lower": [-2.0, 0.5], "upper": [2.0, 0.5], "x0": [0.0, 0.5]},
     r"lower < upper, got lower\[1\] = 0\.5 >= upper\[1\]"),
    ({"x0": [np.nan, 0.0]}, r"x0: expected finite values, got x0\[0\] = nan; start from a finite point"),
    ({"x0": [0.0, np.inf]}, r"x0: expected finite values, got x0\[1\] = inf"),
    ({"x0": [0.0, 0.0, 0.0]}, r"lower: expected 3 values \(as many as x0\), got 2"),
    ({"x0": []}, r"x0: expected at least one value, got an empty array"),
    ({"x0": "ab"}, r"x0: expected a 1-D array of numbers, got str"),
    ({"x0": [[0.0, 0.0]]}, r"x0: expected a 1-D array of numbers, got an array of shape \(1, 2\)"),
    ({"lower": [np.nan, -2.0]}, r"lower: expected numbers \(-inf / inf for none\), got lower\[0\] = nan"),
    ({"max_iter": 0}, r"max_iter: expected a positive integer, got 0"),
    ({"max_iter": 2.5}, r"max_iter: expected a positive integer, got 2\.5"),
    ({"fatol": -1.0}, r"fatol: expected a finite number >= 0, got -1\.0"),
    ({"gatol": np.inf}, r"gatol: expected a finite number >= 0, got inf"),
    ({"delta_init": 0.0}, r"delta_init: expected a positive number, got 0\.0"),
    ({"fun": 3}, r"fun: expected a callable fun\(x\) -> \(f, g, H\), got int"),
    ({"fun": lambda x: (1.0, np.zeros(2))}, r"fun: expected fun\(x\) to return \(f, g, H\), None or a reason "
                                             r"\(str\), got tuple of length 2"),
    ({"fun": lambda x: (1.0, np.zeros(3), np.eye(2))}, r"fun: expected a gradient of shape \(2,\) and H of shape "
                                                        r"\(2, 2\), got \(3,\) and \(2, 2\)"),
    ({"curvature": "sr1"}, r"curvature: expected 'given' or 'hybrid' \(fun returns H\) or 'bfgs' \(fun returns "
                           r"\(f, g\)\), got 'sr1'"),
    ({"curvature": "hybrid", "switch": 0}, r"switch: expected a positive integer .*, got 0"),
    ({"curvature": "bfgs"}, r"fun: expected fun\(x\) to return \(f, g\), None or a reason \(str\), got tuple of "
                            r"length 3"),
])
def test_bad_input(kwargs, match):
    args = {"fun": rosen, "x0": [0.0, 0.0], "lower": [-2.0, -2.0], "upper": [2.0, 2.0]}
    args.update(kwargs)
    fun, x0, lo, hi = args.pop("fun"), args.pop("x0"), args.pop("lower"), args.pop("upper")
    with pytest.raises(InputError, match=match):
        trust_region(fun, x0, lo, hi, **args)


def test_ode_least_squares_with_a_stiff_model_and_solver_messages():
    """The objective of a stiff ODE fit through oi.bind(solver=oi.Auto()) with forward sensitivities
    (Gauss-Newton H); the solver's status message is the failure reason. Reference: scipy
    least_squares on the closed-form solution of a -> b -> 0."""
    import odeinfer as oi
    from odeinfer.solve import status_message

    @oi.model(states=["a", "b"], params=["k1", "k2"])
    def fast_slow(t, y, p):
        return {"a": -p.k1 * y.a, "b": p.k1 * y.a - p.k2 * y.b}

    k1 = 1e4

    def closed_form(t, k2, b0):
        c = k1 / (k1 - k2)  # a(0) = 1
        return np.exp(-k2 * t) * (b0 + c) - c * np.exp(-k1 * t)

    t = np.linspace(0.5, 20.0, 25)
    y = closed_form(t, 0.3, 1.0) + np.random.default_rng(0).normal(0.0, 0.01, t.size)
    p, x0 = np.array([k1, 0.0]), np.array([1.0, 0.0])

    def objective(method):
        solver = oi.bind(oi.Problem(fast_slow, t, t0=0.0), solver=method(rtol=1e-10, atol=1e-12),
                         gradient=oi.Forward())

        def fun(x):  # x = (k2, b0)
            p[1], x0[1] = x
            yy, S, status = solver(p, x0)
            if status:
                return status_message(status, t_reached=float(solver.info[0]), max_steps=solver.max_steps)
            r = yy[:, 1] - y
            J = S[:, 1, [1, 3]]  # d b / d(k2, b0)
            return 0.5 * float(r @ r), J.T @ r, J.T @ J

        return fun, solver

    fun, solver = objective(oi.Dopri5)
    res = trust_region(fun, [1.0, 0.5], [0.01, 0.0], [10.0, 5.0])
    assert res.status == "failed" and res.message.startswith("the objective could not be computed at the start: "
                                                             "the problem became stiff at t=")
    fun, solver = objective(oi.Auto)
    res = trust_region(fun, [1.0, 0.5], [0.01, 0.0], [10.0, 5.0])
    ref = least_squares(lambda x: closed_form(t, *x) - y, [1.0, 0.5], bounds=([0.01, 0.0], [10.0, 5.0]),
                        method="trf", xtol=1e-15, ftol=1e-15, gtol=1e-15)
    assert res.status == "converged" and solver.method_used == "rodas", res.message
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-6)
