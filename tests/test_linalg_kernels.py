"""The stiff solver's dense LU kernels (``odeinfer/solve/kernels/linalg.py``) against numpy's LAPACK solve:
``lu_solve``, ``lu_solve_transposed`` and ``lu_solve_rows`` after ``lu_factor`` (whose diagonal holds the
reciprocals of U's), with row exchanges, and the singular cases. Reference: ``numpy.linalg.solve``."""

import numpy as np
import pytest

from odeinfer import zoo
from odeinfer.solve.abi import Status


@pytest.fixture(scope="module")
def module():
    return zoo.get("lotka_volterra").model.compile().module


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_solves_match_numpy(module, n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        a = rng.normal(size=(n, n)) + 0.1 * np.eye(n)
        a[[0, n - 1]] = a[[n - 1, 0]]  # pivoting needed more often than not
        lu, piv = a.copy(), np.zeros(n, dtype=np.int64)
        assert module.lu_factor(lu, piv) == Status.SUCCESS
        b = rng.normal(size=n)
        x = b.copy()
        module.lu_solve(lu, piv, x)
        np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-9, atol=1e-12)
        x = b.copy()
        module.lu_solve_transposed(lu, piv, x)
        np.testing.assert_allclose(x, np.linalg.solve(a.T, b), rtol=1e-9, atol=1e-12)
        k, off = 3, 4
        block = rng.normal(size=(n, k))
        buf = np.concatenate([np.full(off, 7.0), block.ravel(), np.full(2, 7.0)])
        module.lu_solve_rows(lu, piv, buf, off, k)
        np.testing.assert_allclose(buf[off:off + n * k].reshape(n, k), np.linalg.solve(a, block), rtol=1e-9,
                                   atol=1e-12)
        assert np.all(buf[:off] == 7.0) and np.all(buf[off + n * k:] == 7.0)  # nothing outside the block


def test_singular_matrices_are_refused(module):
    piv = np.zeros(3, dtype=np.int64)
    for a in (np.zeros((3, 3)), np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]]),
              np.array([[5e-324, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),  # its reciprocal overflows
              np.array([[np.nan, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])):
        assert module.lu_factor(a.copy(), piv) == Status.SINGULAR


# ---- the sparse LU of large models (linalg.py's second part) ----------------------------------------------------

def _sparse_jacobian(rng, n, per_row=2):
    """A reaction-network-like Jacobian: negative diagonal, a few off-diagonal entries per row."""
    j = np.zeros((n, n))
    for i in range(n):
        j[i, rng.choice(n, per_row, replace=False)] = rng.normal(size=per_row)
        j[i, i] = -abs(rng.normal()) - 0.5
    return j


def _planned(module, jy):
    n = jy.shape[0]
    plan = np.zeros(module.lu_plan_len(n), dtype=np.int64)
    pattern = np.zeros((3, n, n), dtype=np.bool_)
    pattern[0] = (jy != 0) | np.eye(n, dtype=bool)
    return plan, pattern, module.lu_plan(pattern, plan)


def _check_solves(module, a, lu, piv, plan, rng):
    n = a.shape[0]
    b = rng.normal(size=n)
    x = b.copy()
    module.plu_solve(lu, piv, plan, x)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-9, atol=1e-12)
    x = b.copy()
    module.plu_solve_transposed(lu, piv, plan, x)
    np.testing.assert_allclose(x, np.linalg.solve(a.T, b), rtol=1e-9, atol=1e-12)
    k, off = 3, 4
    block = rng.normal(size=(n, k))
    buf = np.concatenate([np.full(off, 7.0), block.ravel(), np.full(2, 7.0)])
    module.plu_solve_rows(lu, piv, plan, buf, off, k)
    np.testing.assert_allclose(buf[off:off + n * k].reshape(n, k), np.linalg.solve(a, block), rtol=1e-9, atol=1e-12)
    assert np.all(buf[:off] == 7.0) and np.all(buf[off + n * k:] == 7.0)


@pytest.mark.parametrize("n", [24, 60, 150])
def test_the_planned_sparse_lu_solves_like_numpy(module, n):
    rng = np.random.default_rng(n)
    jy = _sparse_jacobian(rng, n)
    plan, pattern, made = _planned(module, jy)
    assert made and plan[1] == 1
    order = plan[4:4 + n]
    assert sorted(order) == list(range(n))  # a permutation
    fill = pattern[1]
    assert np.all(fill == fill.T) and np.all(fill[(jy != 0)]) and np.all(np.diag(fill))
    for fac in (10.0, 1.0, 0.3):  # the stiff solver's matrix fac I - J, from small to large steps
        a = fac * np.eye(n) - jy
        lu, piv = np.empty((n, n)), np.zeros(n, dtype=np.int64)
        assert module.plu_factor(jy, fac, lu, piv, plan, pattern) == Status.SUCCESS
        assert plan[0] == 1  # the planned factorization passed its pivot test
        _check_solves(module, a, lu, piv, plan, rng)


def test_a_nonzero_outside_the_plan_plans_again(module):
    """An entry that was zero when the plan was made (a rate whose species was absent at the start) is never
    left out: the factorization plans again with it."""
    n = 40
    rng = np.random.default_rng(1)
    jy = _sparse_jacobian(rng, n)
    plan, pattern, made = _planned(module, jy)
    later = jy.copy()
    i, j = next((i, j) for i in range(n) for j in range(n) if not pattern[1, i, j])
    later[i, j] = 3.0
    lu, piv = np.empty((n, n)), np.zeros(n, dtype=np.int64)
    assert module.plu_factor(later, 2.0, lu, piv, plan, pattern) == Status.SUCCESS
    assert plan[0] == 1 and pattern[1, i, j] and pattern[1, j, i]
    _check_solves(module, 2.0 * np.eye(n) - later, lu, piv, plan, rng)


@pytest.mark.parametrize("n_small", [1, 3, 7])
def test_states_whose_pivots_are_too_small_are_delayed_to_a_dense_block(module, n_small):
    """A planned pivot below a tenth of its column (a stiff step: fac I - J with J's diagonal about fac) delays
    its state to the trailing block, which row exchanges factor; more than n / 4 such states: the dense LU."""
    n = 40
    rng = np.random.default_rng(n_small)
    jy = _sparse_jacobian(rng, n)
    small = rng.choice(n, n_small, replace=False)
    for v in small:
        jy[v, v] = 1.0  # fac I - J has a zero on the diagonal at fac = 1 ...
        jy[(v + 7) % n, v] = 4.0  # ... and a large entry below it
    plan, pattern, made = _planned(module, jy)
    lu, piv = np.empty((n, n)), np.zeros(n, dtype=np.int64)
    assert module.plu_factor(jy, 1.0, lu, piv, plan, pattern) == Status.SUCCESS
    # planned, with a trailing block (of the small pivots that the fill before them did not make large)
    assert plan[0] == 1 and 1 <= plan[3] <= n_small
    assert set(plan[4 + n - plan[3]:4 + n]) <= set(small)
    _check_solves(module, np.eye(n) - jy, lu, piv, plan, rng)
    for v in rng.choice(np.setdiff1d(np.arange(n), small), 10, replace=False):  # 10 + n_small > n / 4
        jy[v, v] = 1.0
        jy[(v + 3) % n, v] = 5.0
    plan, pattern, made = _planned(module, jy)
    assert module.plu_factor(jy, 1.0, lu, piv, plan, pattern) == Status.SUCCESS
    assert plan[0] == 0 and plan[1] == 0  # the dense LU with row exchanges
    _check_solves(module, np.eye(n) - jy, lu, piv, plan, rng)


def test_dense_or_small_matrices_keep_the_dense_lu(module):
    assert module.lu_plan_len(module.LU_SPARSE_MIN - 1) == 0
    n = 30
    jy = np.random.default_rng(3).normal(size=(n, n))  # every entry nonzero: the factors fill everything
    plan, pattern, made = _planned(module, jy)
    assert not made and plan[1] == 0
    lu, piv = np.empty((n, n)), np.zeros(n, dtype=np.int64)
    assert module.plu_factor(jy, 5.0, lu, piv, plan, pattern) == Status.SUCCESS and plan[0] == 0
    _check_solves(module, 5.0 * np.eye(n) - jy, lu, piv, plan, np.random.default_rng(4))
