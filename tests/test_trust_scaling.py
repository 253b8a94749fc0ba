"""fides' scaling matrices as :class:`odeinfer.estimators._trust._Diagonal` instead of
``scipy.sparse.csc_matrix``: the same numbers bit for bit (reference: scipy.sparse itself, and
fides run unpatched on the same problems), so the optimisation path does not change."""

import contextlib

import numpy as np
import pytest
from scipy.sparse import csc_matrix

import odeinfer.estimators._trust as trust
from odeinfer.estimators._trust import _Diagonal, trust_region


def _operands(rng, n=7):
    d = rng.uniform(0.1, 3.0, n) * rng.choice([1.0, -1.0], n)
    d[2] = 0.0  # a zero on the diagonal (scipy stores nothing there)
    H = rng.normal(size=(n, n))
    H[1, :] = -0.0
    return d, H, rng.normal(size=n)


@pytest.mark.parametrize("seed", range(5))
def test_diagonal_arithmetic_is_scipy_sparse_bit_for_bit(seed):
    d, H, x = _operands(np.random.default_rng(seed))
    S, D = csc_matrix(np.diag(d)), _Diagonal(np.diag(d))
    g = csc_matrix(np.diag(np.abs(x) * (d != 0)))
    gD = _Diagonal(np.diag(np.abs(x) * (d != 0)))
    ref = np.asarray(S * H * S + g)
    got = np.asarray(D * H * D + gD)
    for r, o in ((S.dot(x), D.dot(x)), (np.asarray(S * H), D * H), (ref, got), (S.diagonal(), D.copy().diagonal())):
        assert r.shape == o.shape
        assert r.tobytes() == o.tobytes()  # the same bits, signs of zeros included
    assert got.flags.f_contiguous == ref.flags.f_contiguous


def _rosenbrock(x):
    a, b = x[:-1], x[1:]
    f = float(np.sum(100 * (b - a**2) ** 2 + (1 - a) ** 2))
    g = np.zeros_like(x)
    g[:-1] += -400 * a * (b - a**2) - 2 * (1 - a)
    g[1:] += 200 * (b - a**2)
    H = np.diag(np.r_[1200 * a**2 - 400 * b + 2, 0.0]) + np.diag(np.r_[0.0, 200 * np.ones(b.size)])
    H -= np.diag(400 * a, 1) + np.diag(400 * a, -1)
    return f, g, H


@pytest.mark.parametrize("x0", [[-1.2, 0.7, 0.5, 0.3], [1.5, -0.5, 0.8, 2.0], [0.9, 0.1, 0.4, 0.8]])
def test_the_optimisation_path_is_unchanged(x0, monkeypatch):
    lo, hi = np.array([-2.0, -1.0, 0.0, 0.25]), np.array([2.0, 0.8, 0.9, 3.0])  # active bounds at the optimum
    paths = []
    for patched in (True, False):
        if not patched:
            monkeypatch.setattr(trust, "_diagonal_scaling", contextlib.nullcontext)
        seen = []

        def fun(x, seen=seen):
            seen.append(np.array(x))
            return _rosenbrock(x)

        res = trust_region(fun, x0, lo, hi)
        paths.append((np.array(seen), res))
    (a, ra), (b, rb) = paths
    assert a.shape == b.shape and a.tobytes() == b.tobytes()
    assert ra.x.tobytes() == rb.x.tobytes() and ra.status == rb.status and ra.n_iter == rb.n_iter


def test_fides_is_left_unpatched_afterwards():
    import fides.minimize
    import fides.trust_region

    def quadratic(x):
        d = x - np.array([0.3, -0.2, 0.1])
        return float(d @ d), 2 * d, 2 * np.eye(3)

    trust_region(quadratic, [0.5, 0.5, 0.5], [-1.0] * 3, [1.0] * 3)
    assert fides.minimize.csc_matrix is csc_matrix and fides.trust_region.csc_matrix is csc_matrix


def _subproblems(seed, n=400):
    """Random 2 x 2 trust-region subproblems of every kind: positive definite with the Newton step
    inside or outside the radius, indefinite, singular with g orthogonal to the null vector (the hard
    case), symmetric up to rounding as fides' reduced Hessians are."""
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

    counts = {}
    for kind, b, g, delta in _subproblems(seed):
        s, label = trust._subproblem_2d(b, g, delta)
        counts[label] = counts.get(label, 0) + 1
        scale = np.linalg.norm(b) * delta + np.linalg.norm(g)
        norm_s = np.linalg.norm(s)
        assert norm_s <= delta * (1 + 1e-8), (kind, label)
        # lam from the conditions: (B + lam I) s = -g  =>  lam = -(g + B s).s / |s|^2
        lam = max(0.0, -float((g + b @ s) @ s) / norm_s**2) if norm_s > 0 else 0.0
        assert np.linalg.norm(b @ s + lam * s + g) <= 1e-8 * scale, (kind, label)
        assert np.linalg.eigvalsh(b).min() + lam >= -1e-8 * np.linalg.norm(b), (kind, label)
        assert lam * (delta - norm_s) <= 1e-8 * scale * delta, (kind, label)
        if kind < 2:
            ref, ref_label = solve_nd_trust_region_subproblem(b, g, delta)
            assert label == ref_label
            np.testing.assert_allclose(s, np.real(ref), rtol=1e-9, atol=1e-12 * delta)
    assert set(counts) >= {"posdef", "indef", "hard"}  # every branch was exercised


def test_fits_with_the_fast_subproblem_reach_fides_optimum(monkeypatch):
    """The Rosenbrock fits above, with fides' own subproblem solver and with ours: the same end point (to
    the optimiser's tolerances) and status."""
    lo, hi = np.array([-2.0, -1.0, 0.0, 0.25]), np.array([2.0, 0.8, 0.9, 3.0])
    for x0 in ([-1.2, 0.7, 0.5, 0.3], [1.5, -0.5, 0.8, 2.0], [0.9, 0.1, 0.4, 0.8]):
        fast = trust_region(_rosenbrock, x0, lo, hi)
        with monkeypatch.context() as m:
            m.setattr(trust, "_fast_subproblem", contextlib.nullcontext)
            ref = trust_region(_rosenbrock, x0, lo, hi)
        assert fast.status == ref.status == "converged"
        np.testing.assert_allclose(fast.x, ref.x, rtol=1e-6, atol=1e-8)
        assert abs(fast.f - ref.f) <= 1e-10 * max(1.0, abs(ref.f))


@pytest.mark.parametrize("kind", ["newton", "posdef", "indefinite", "singular"])
def test_the_2d_step_spans_fides_subspace(kind):
    """``_step_2d_class`` (one eigh) against fides' ``TRStep2D`` (eig and lstsq) on 30-parameter steps: the same
    flags (positive definite, Newton step taken) and the same subspace (each basis vector equal up to sign, to
    1e-8), for a Hessian with the Newton step inside the radius, outside it, an indefinite one and a singular
    positive semi-definite one."""
    from fides.steps import TRStep2D

    rng = np.random.default_rng({"newton": 0, "posdef": 1, "indefinite": 2, "singular": 3}[kind])
    n = 30
    q = np.linalg.qr(rng.normal(size=(n, n)))[0]
    e = 10.0 ** rng.uniform(-2, 2, n)
    if kind == "indefinite":
        e[:3] *= -1
    if kind == "singular":
        e[:4] = 0.0
    H = q @ np.diag(e) @ q.T
    x, g = rng.uniform(-0.5, 0.5, n), rng.normal(size=n)
    lb, ub = np.full(n, -1.0), np.full(n, 1.0)
    scaling = csc_matrix(np.diag(rng.uniform(0.5, 1.0, n)))
    dscale = csc_matrix(np.diag(np.abs(g) * rng.uniform(0.0, 0.1, n)))
    sg = scaling.dot(g)
    delta = {"newton": 1e3, "posdef": 1e-2}.get(kind, 1.0)
    args = (x, sg, H, scaling, dscale, delta, 0.95, ub, lb, None)
    ours, ref = trust._step_2d_class()(*args), TRStep2D(*args)
    assert (ours.posdef, ours.newton) == (ref.posdef, ref.newton)
    assert ours.newton == (kind == "newton") and ours.posdef == (kind != "indefinite")
    assert ours.subspace.shape == ref.subspace.shape
    for a, b in zip(ours.subspace.T, np.real(ref.subspace).T):
        np.testing.assert_allclose(a * np.sign(a @ b), b, atol=1e-8)
