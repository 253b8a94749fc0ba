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
