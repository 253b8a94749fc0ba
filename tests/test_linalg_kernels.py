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
