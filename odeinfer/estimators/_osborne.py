"""Osborne's boundary-value embedding: ``B1 x(t0) + B2 x(T) = b`` with ``[B2 B1]`` chosen by
orthogonal factorisation of the linearised trapezoidal system (Osborne 2008, ANZIAM J. 50,
C107-C120, section 2.1).

:func:`optimal_boundary` computes ``B1, B2`` along a trajectory; :class:`BoundaryEmbedding`
turns a single-shooting :class:`~odeinfer.estimators._shooting.ShootingProblem` into the
embedded problem with unknowns ``(theta, b_e)`` per experiment ``e``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["optimal_boundary", "BoundaryEmbedding"]


def optimal_boundary(t, A):
    """``(B1, B2)`` of Osborne's section 2.1 for the linearised ODE ``x' = A(t) x`` on grid ``t``.

    The trapezoidal blocks are ``C_ii = -I - h_i/2 A_i``, ``C_i,i+1 = I - h_i/2 A_{i+1}``.
    With the columns ordered ``(x_2, ..., x_n, x_1)`` (the permutation ``P`` of eq. 7) an
    orthogonal (Householder QR) sweep down the block rows eliminates ``x_2 .. x_{n-1}`` and
    leaves the last block row ``[R_(n-1)(n-1)  R_(n-1)n]`` acting on ``(x_n, x_1)``; its LQ
    factorisation ``[R R'] = [U^T 0] [Q_1^T; Q_2^T]`` gives ``[B2 B1] = Q_2^T``: boundary rows
    orthogonal to the condensed dynamics, so the bordered matrix is as well conditioned as
    ``U``.

    Parameters
    ----------
    t : ndarray (n,)
        Grid, strictly increasing, ``n >= 2``.
    A : ndarray (n, m, m)
        ``df/dx`` along the trajectory at ``t``.

    Returns
    -------
    B1, B2 : ndarray (m, m)
        Coefficients of ``x(t[0])`` and ``x(t[-1])``.
    """
    n, m, _ = A.shape
    eye = np.eye(m)
    h = np.diff(t)
    # current block row acting on (x_{i+1}, x_1)
    top = eye - 0.5 * h[0] * A[1]            # on x_2
    e1 = -eye - 0.5 * h[0] * A[0]            # on x_1
    for i in range(1, n - 1):
        c_ii = -eye - 0.5 * h[i] * A[i]      # on x_{i+1}
        c_next = eye - 0.5 * h[i] * A[i + 1]  # on x_{i+2}
        # stack [[top, 0, e1], [c_ii, c_next, 0]] and triangularise the first block column
        Q, _ = np.linalg.qr(np.vstack([top, c_ii]), mode="complete")
        Qt = Q.T
        lower = Qt[m:]
        top = lower[:, m:] @ c_next
        e1 = lower[:, :m] @ e1
    last = np.hstack([top, e1])              # m x 2m on (x_n, x_1)
    Q, _ = np.linalg.qr(last.T, mode="complete")
    Q2t = Q[:, m:].T                         # m x 2m, rows orthogonal to the dynamics rows
    B2, B1 = Q2t[:, :m], Q2t[:, m:]
    return B1, B2


class BoundaryEmbedding:
    """Unknowns ``v = (theta_internal, b_1, ..., b_E)``; each trial ``v`` solves the BVP
    ``B1 x0 + B2 x(T; x0, theta) = b`` for ``x0`` by Newton's method (exact ``dx(T)/dx0`` from
    the sensitivities), then maps the single-shooting Jacobian ``J_u`` to ``J_v`` by the
    implicit-function theorem: ``dx0/db = M^-1``, ``dx0/dtheta = -M^-1 B2 dx(T)/dtheta`` with
    ``M = B1 + B2 dx(T)/dx0``.
    """

    def __init__(self, sp, B, x0_start, *, newton_tol=1e-10, newton_iter=30):
        self.sp = sp
        self.B = B  # list of (B1, B2) per experiment
        self.n = sp.n
        self.nf = sp.n_free
        self.npar = sp.model.n_params
        self.n_exp = len(sp.x0_base)
        self.x0 = [np.array(x, float) for x in x0_start]
        self.first = [next(s for s in sp.segs if s.exp == e) for e in range(self.n_exp)]
        self.tol, self.iter = newton_tol, newton_iter
        self.n_unknowns = self.nf + self.n * self.n_exp
        self.Jv = np.zeros((sp.n_rows, self.n_unknowns))

    def b_of(self, u):
        """``b_e`` from single-shooting unknowns ``u = (theta, x0_e ...)``."""
        sp = self.sp
        p = sp.p_base.copy()
        p[sp.free_index] = sp.params_natural(u)
        out = []
        for e in range(self.n_exp):
            o = sp.x0_off[e]
            x0 = np.ascontiguousarray(u[o:o + self.n])
            y, _, st = self.first[e].solver(p, x0)
            if st != 0:
                return None
            B1, B2 = self.B[e]
            out.append(B1 @ x0 + B2 @ y[-1])
        return np.concatenate([u[:self.nf]] + out)

    def to_u(self, v):
        """Single-shooting unknowns at ``v`` (solves the BVPs), or None."""
        res = self._solve(v)
        return None if res is None else res[0]

    def _solve(self, v):
        sp = self.sp
        p = sp.p_base.copy()
        pv = sp.params_natural(v)
        p[sp.free_index] = pv
        u = np.empty(sp.n_unknowns)
        u[:self.nf] = v[:self.nf]
        ends = []
        for e in range(self.n_exp):
            B1, B2 = self.B[e]
            b = v[self.nf + e * self.n:self.nf + (e + 1) * self.n]
            x0 = self.x0[e].copy()
            ok = False
            for _ in range(self.iter):
                y, S, st = self.first[e].solver(p, x0)
                if st != 0 or not np.all(np.isfinite(y[-1])):
                    return None
                g = B1 @ x0 + B2 @ y[-1] - b
                M = B1 + B2 @ S[-1][:, self.npar:]
                if np.linalg.norm(g) <= self.tol * (1.0 + np.linalg.norm(b)):
                    ok = True
                    break
                try:
                    x0 = x0 - np.linalg.solve(M, g)
                except np.linalg.LinAlgError:
                    return None
            if not ok:
                return None
            ends.append((M, S[-1][:, sp.free_index].copy()))
            o = sp.x0_off[e]
            u[o:o + self.n] = x0
        return u, ends, pv

    def evaluate(self, v):
        res = self._solve(v)
        if res is None:
            return None
        u, ends, pv = res
        out = self.sp.evaluate(u)
        if out is None:
            return None
        r, J = out
        Jv = self.Jv
        nf = self.nf
        Jv[:, :nf] = J[:, :nf]
        gm = np.where(self.sp.log_mask, pv, 1.0)
        for e, (M, PT) in enumerate(ends):
            B1, B2 = self.B[e]
            Minv = np.linalg.inv(M)
            o = self.sp.x0_off[e]
            Jx = J[:, o:o + self.n]
            Jv[:, :nf] += Jx @ (-(Minv @ (B2 @ PT)) * gm)
            Jv[:, nf + e * self.n:nf + (e + 1) * self.n] = Jx @ Minv
            self.x0[e] = u[o:o + self.n].copy()  # warm start of the next BVP solve
        return r, Jv
