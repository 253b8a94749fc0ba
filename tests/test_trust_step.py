"""The compiled trust-region reflective step (:mod:`odeinfer.estimators._trust_step`) and the iteration
around it (:func:`odeinfer.estimators._trust.trust_region`) against fides 0.8 run unpatched (the
reference implementation of the method: Froehlich and Sorger 2022), and the 2-D subproblem against the
subproblem's optimality conditions (More and Sorensen 1983)."""

import logging
import warnings

import numpy as np
import pytest

from odeinfer.estimators._trust import trust_region
from odeinfer.estimators._trust_step import _subproblem_2d, propose_step


def _rosenbrock(x):
    a, b = x[:-1], x[1:]
    f = float(np.sum(100 * (b - a**2) ** 2 + (1 - a) ** 2))
    g = np.zeros_like(x)
    g[:-1] += -400 * a * (b - a**2) - 2 * (1 - a)
    g[1:] += 200 * (b - a**2)
    H = np.diag(np.r_[1200 * a**2 - 400 * b + 2, 0.0]) + np.diag(np.r_[0.0, 200 * np.ones(b.size)])
    H -= np.diag(400 * a, 1) + np.diag(400 * a, -1)
    return f, g, H


def _fides_path(fun, x0, lo, hi, bfgs=False, hybrid=False):
    """The trial points of fides' own optimiser (options as trust_region's defaults)."""
    import fides

    seen = []

    def wrapped(x):
        seen.append(np.array(x))
        out = fun(x)
        return out[:2] if bfgs else out

    opt = fides.Optimizer(wrapped, ub=hi, lb=lo, verbose=logging.CRITICAL + 10,
                          options={fides.Options.MAXITER: 1000, fides.Options.FATOL: 1e-10,
                                   fides.Options.FRTOL: 1e-12, fides.Options.XTOL: 1e-10,
                                   fides.Options.GATOL: 1e-8, fides.Options.GRTOL: 0.0},
                          hessian_update=fides.BFGS() if bfgs else fides.HybridFixed() if hybrid else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.minimize(np.array(x0, float))
    opt.logger.handlers.clear()
    # fides' secular-equation Newton iteration started on a pole (w_i / 0 evaluated as w_i: numpy warns)
    opt.on_pole = any("invalid value" in str(w.message) and "subproblem" in w.filename for w in caught)
    return np.array(seen), opt


def _newton_polish(x, lo, hi, n_iter=30):
    """The local minimum of the Rosenbrock function near ``x`` in the box: Newton's method on the components
    not held at a bound by an outward gradient (the oracle for the end point where fides' path is not followed)."""
    x = np.array(x, float)
    for _ in range(n_iter):
        _, g, H = _rosenbrock(x)
        free = ~(((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)))
        x[free] = np.clip(x[free] - np.linalg.solve(H[np.ix_(free, free)], g[free]), lo[free], hi[free])
    g = _rosenbrock(x)[1]
    assert np.max(np.abs(g[free])) < 1e-12, g
    return x, free


_BOXES = [(np.array([-2.0, -1.0, 0.0, 0.25]), np.array([2.0, 0.8, 0.9, 3.0])),  # active bounds at the optimum
          (np.full(6, -2.0), np.full(6, 2.0)),  # the interior optimum (1, ..., 1)
          (np.full(3, -2.0), np.array([0.6, 0.5, 2.0]))]


@pytest.mark.parametrize("box", range(len(_BOXES)))
@pytest.mark.parametrize("seed", range(3))
def test_the_optimisation_path_is_fides_path(box, seed):
    """Given curvature: every trial point, the end point and the stopping test equal fides' (to 1e-12
    relative: the steps differ from fides' by rounding only). Where fides' 2-D subproblem started its
    Newton iteration on a pole of the secular equation (four of the nine paths with numpy 2.4.6 and fides 0.8.0,
    one on earlier machines), the paths part there (see the module docstring of odeinfer.estimators._trust_step):
    then the end point is compared with the local minimum, found independently."""
    lo, hi = _BOXES[box]
    x0 = np.random.default_rng(seed).uniform(lo, hi)
    ref, opt = _fides_path(_rosenbrock, x0, lo, hi)
    seen = []

    def fun(x):
        seen.append(np.array(x))
        return _rosenbrock(x)

    res = trust_region(fun, x0, lo, hi)
    if opt.on_pole:
        # the paths part where fides' step came from the pole, and which stopping test fires first at the end
        # depends on the path taken (numpy 2.4: box 1 / seed 2 stops on FTOL here, on GTOL in fides). So the end
        # point is compared with the local minimum both reach, found independently by Newton's method.
        assert res.stop in ("FTOL", "XTOL", "GTOL"), res.stop
        x_star, free = _newton_polish(opt.x, lo, hi)
        h_inv = np.linalg.norm(np.linalg.inv(_rosenbrock(x_star)[2][np.ix_(free, free)]), 2)
        g_ours, g_fides = (np.linalg.norm(_rosenbrock(x)[1][free]) for x in (res.x, opt.x))
        assert g_ours <= max(g_fides, 1e-8), (g_ours, g_fides)  # as stationary as fides' end point, or within gatol
        for x, g in ((res.x, g_ours), (opt.x, g_fides)):
            # the same minimum: the first-order distance, doubled for the second-order term
            assert np.linalg.norm(x - x_star) <= 2 * h_inv * g + 1e-14, (x - x_star, h_inv, g)
        return
    assert res.stop == opt.exitflag.name
    assert np.array(seen).shape == ref.shape
    np.testing.assert_allclose(np.array(seen), ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.x, opt.x, rtol=1e-12, atol=1e-14)
    assert res.n_iter == opt.iteration and res.history.size == opt.iteration + 1


@pytest.mark.parametrize("seed", range(3))
def test_bfgs_path_is_fides_path_until_the_restart(seed):
    """BFGS curvature: fides' trial points until fides stops (trust_region may then restart from the
    identity, which fides does not)."""
    lo, hi = _BOXES[1]
    x0 = np.random.default_rng(seed).uniform(lo, hi)
    ref, _ = _fides_path(_rosenbrock, x0, lo, hi, bfgs=True)
    seen = []

    def fun(x):
        seen.append(np.array(x))
        return _rosenbrock(x)[:2]

    trust_region(fun, x0, lo, hi, curvature="bfgs")
    np.testing.assert_allclose(np.array(seen)[:len(ref)], ref, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_hybrid_path_is_fides_hybrid_fixed_path(seed):
    """``curvature="hybrid"`` against fides' ``HybridFixed`` (pyPESTO's default): a given curvature 100 times the
    Hessian makes the steps short and interior, the radius stays put, and after 20 such iterations both switch to
    their BFGS matrices. fides' trial points up to and including the first step after the switch (found as where the
    path leaves the one that never switches) to 1e-10 relative; then rounding grows along the BFGS updates (to
    2e-5 near the optimum), so the rest is compared by its length, stopping test and end point."""
    lo, hi = _BOXES[1]
    x0 = np.random.default_rng(seed).uniform(lo, hi)

    def too_curved(x):
        f, g, H = _rosenbrock(x)
        return f, g, 100 * H

    ref, opt = _fides_path(too_curved, x0, lo, hi, hybrid=True)
    assert opt.hessian_update._switched
    seen, never = [], []
    hybrid = trust_region(lambda x: (seen.append(np.array(x)), too_curved(x))[1], x0, lo, hi, curvature="hybrid")
    trust_region(lambda x: (never.append(np.array(x)), too_curved(x))[1], x0, lo, hi, curvature="hybrid", switch=10**9)
    seen, never = np.array(seen), np.array(never)
    k = int(np.argmax(np.any(seen[:len(never)] != never[:len(seen)], axis=1)))
    assert 20 < k < len(ref) - 1, k
    np.testing.assert_allclose(seen[:k + 1], ref[:k + 1], rtol=1e-10, atol=1e-12)
    assert hybrid.stop == opt.exitflag.name and seen.shape == ref.shape
    np.testing.assert_allclose(hybrid.x, opt.x, rtol=1e-6)
    assert len(never) > len(seen)  # the too-large curvature, kept, needs more iterations


def _fides_step(x, g, H, lb, ub, delta):
    from fides.constants import StepBackStrategy, SubSpaceDim
    from fides.trust_region import trust_region as fides_trust_region
    from scipy.sparse import csc_matrix

    v = np.sign(g) + (g == 0)
    dv = np.zeros(x.shape)
    bounds = lb.copy()
    bounds[g < 0] = ub[g < 0]
    fin = np.isfinite(bounds)
    v[fin], dv[fin] = x[fin] - bounds[fin], 1
    theta = max(0.95, 1 - np.linalg.norm(v * g, np.inf))
    step = fides_trust_region(x, g, H, csc_matrix(np.diag(np.sqrt(np.abs(v)))), delta, dv, theta, lb, ub,
                              SubSpaceDim.TWO, StepBackStrategy.REFLECT, logging.getLogger("fides-test"))
    return step, dv


@pytest.mark.parametrize("kind", ["posdef", "indefinite", "singular", "tight box", "one parameter"])
def test_each_step_is_fides_step(kind, monkeypatch):
    """Random steps (30 per kind; 12 parameters, 1 for "one parameter"): the same step ``s + s0``, scaled
    step and model value as fides' ``trust_region`` with its default options, including steps stepped back
    at a bound and replaced by a reflection or the gradient step ("tight box"). fides' 2-D subproblems are
    solved by ``_subproblem_2d`` here (tested against the optimality conditions below): where the reduced
    matrix is indefinite, fides' own solver starts on a pole and returns a step that need not solve the
    subproblem (the module docstring of odeinfer.estimators._trust_step)."""
    import fides.steps

    monkeypatch.setattr(fides.steps, "solve_nd_trust_region_subproblem",
                        lambda b, g, delta, logger=None: (_subproblem_2d(np.ascontiguousarray(b), g, delta), ""))
    rng = np.random.default_rng(["posdef", "indefinite", "singular", "tight box", "one parameter"].index(kind))
    n = 1 if kind == "one parameter" else 12
    kinds_of_step = set()
    for _ in range(30):
        q = np.linalg.qr(rng.normal(size=(n, n)))[0]
        e = 10.0 ** rng.uniform(-2, 2, n)
        if kind == "indefinite":
            e[:3] *= -1
        if kind == "singular":
            e[:4] = 0.0
        H = q @ np.diag(e) @ q.T
        half = 0.05 if kind == "tight box" else 1.0
        lb, ub = -half * rng.uniform(0.5, 1.5, n), half * rng.uniform(0.5, 1.5, n)
        x = rng.uniform(lb, ub)
        if kind != "one parameter":
            lb[0] = -np.inf  # an unbounded side
        g = rng.normal(size=n) * 10.0 ** rng.uniform(-2, 2)
        delta = 10.0 ** rng.uniform(-2, 1)
        ref, dv_ref = _fides_step(x, g, H, lb, ub, delta)
        s, s0, ss, dv = (np.empty(n) for _ in range(4))
        qp = propose_step(x, g, H, lb, ub, delta, 0.95, s, s0, ss, dv)
        kinds_of_step.add(ref.type)
        np.testing.assert_array_equal(dv, dv_ref)
        np.testing.assert_allclose(s + s0, ref.s + ref.s0, rtol=1e-8, atol=1e-12 * delta)
        np.testing.assert_allclose(ss, ref.ss + ref.ss0, rtol=1e-8, atol=1e-12 * delta)
        assert qp == pytest.approx(ref.qpval, rel=1e-8, abs=1e-14)
        assert np.all(x + s + s0 >= lb) and np.all(x + s + s0 <= ub)
    if kind == "tight box":
        assert kinds_of_step >= {"2d", "trr"}  # a reflection was chosen at least once


def _subproblems(seed, n=400):
    """Random 2 x 2 trust-region subproblems of every kind: positive definite with the Newton step
    inside or outside the radius, indefinite, singular with g orthogonal to the null vector (the hard
    case), symmetric up to rounding as the reduced Hessians are."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        q = np.linalg.qr(rng.normal(size=(2, 2)))[0]
        kind = i % 4
        e = {0: rng.uniform(0.1, 10, 2), 1: rng.uniform(0.1, 10, 2), 2: np.array([-rng.uniform(0.1, 5),
             rng.uniform(-5, 5)]), 3: np.array([0.0, rng.uniform(0.1, 5)])}[kind] * 10.0 ** rng.uniform(-3, 3)
        b = q @ np.diag(e) @ q.T
        g = rng.normal(size=2) * 10.0 ** rng.uniform(-3, 3)
        if kind == 3:
            g = q[:, 1] * g[0]  # orthogonal to the null vector q[:, 0]
        newton = np.linalg.solve(b, -g) if kind < 2 else g
        delta = {0: 2.0, 1: 0.3}.get(kind, 1.0) * np.linalg.norm(newton) * rng.uniform(0.5, 1.5)
        yield kind, b, g, delta


@pytest.mark.parametrize("seed", range(3))
def test_the_2d_subproblem_solver_solves_the_subproblem_and_agrees_with_fides(seed):
    """Reference: the optimality conditions of the trust-region subproblem (More and Sorensen 1983):
    s solves min g.s + s.B.s/2 over ||s|| <= delta iff (B + lam I) s = -g for some lam >= 0 with
    B + lam I positive semi-definite and lam (delta - ||s||) = 0; and fides' own solver where B is
    positive definite (where fides' Newton iteration runs as ours does)."""
    from fides.subproblem import solve_nd_trust_region_subproblem

    for kind, b, g, delta in _subproblems(seed):
        s = _subproblem_2d(b, g, delta)
        scale = np.linalg.norm(b) * delta + np.linalg.norm(g)
        norm_s = np.linalg.norm(s)
        assert norm_s <= delta * (1 + 1e-8), kind
        # lam from the conditions: (B + lam I) s = -g  =>  lam = -(g + B s).s / |s|^2
        lam = max(0.0, -float((g + b @ s) @ s) / norm_s**2) if norm_s > 0 else 0.0
        assert np.linalg.norm(b @ s + lam * s + g) <= 1e-8 * scale, kind
        assert np.linalg.eigvalsh(b).min() + lam >= -1e-8 * np.linalg.norm(b), kind
        assert lam * (delta - norm_s) <= 1e-8 * scale * delta, kind
        if kind < 2:
            ref, _ = solve_nd_trust_region_subproblem(b, g, delta)
            np.testing.assert_allclose(s, np.real(ref), rtol=1e-9, atol=1e-12 * delta)
