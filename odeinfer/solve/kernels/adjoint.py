"""Vector-Jacobian products of an ODE solution by the continuous adjoint.

Appended after ``dopri.py`` to every ODE model's module. For output times
``t_1 <= ... <= t_N`` and weights ``g`` (N, n), the kernel returns the gradient of
``L = sum_i g_i . x(t_i)`` with respect to the parameters and the initial state,
``[sum_i g_i^T dx(t_i)/dp, sum_i g_i^T dx(t_i)/dx0]``, at the cost of one forward
solve of the states and one backward solve of ``n + m`` adjoint components,
independent of the number of parameters (forward sensitivities integrate
``n (1 + m + n)`` components).

Adjoint (e.g. Y. Cao, S. Li, L. Petzold, R. Serban, "Adjoint sensitivity
analysis for differential-algebraic equations", SIAM J. Sci. Comput. 24 (2003)
1076-1089, the ODE case)::

    lam' = -J_y(t, x(t))^T lam,       lam(T+) = 0,   lam(t_i-) = lam(t_i+) + g_i,
    mu'  = -J_p(t, x(t))^T lam,       mu(T) = 0,
    dL/dp = mu(t0),   dL/dx0 = lam(t0-).

Discretisation (an interpolating adjoint on the forward mesh, as in CVODES's
checkpointed adjoint with Hermite interpolation replaced by the solver's own
dense output): the forward Dormand-Prince solve records every accepted step's
4th-order continuous extension (``rec`` rows: ``t, h, t + h`` then 5 blocks of
``n`` coefficients, see ``rk_store_dense`` in ``rk.py``); the adjoint is integrated backward over
the same steps, each split at the output times inside it and into ``nsub``
equal substeps, by the Dormand-Prince 5th-order formula (fixed step), with
``x(t)`` from the recorded extension. The forward steps are chosen for the states'
error, so the adjoint's error is of the order of the tolerance (``nsub > 1``
refines it).

``dopri5_adjoint_vjp(t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out,
rec, grad, work, info) -> int``
    ``g`` (n_out, n); ``z_out`` (n_out, n) out: the states at ``t_eval`` (as
    ``dopri5_solve``); ``rec`` (max_steps, 3 + 5 n) scratch; ``grad`` (m + n,)
    out: ``[dL/dp, dL/dx0]``; ``work`` at least ``dopri5_adjoint_work_size()``;
    ``info`` as for ``dopri5_solve`` (the forward solve's counts). Returns a
    status code ``ST_*``.
"""
import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_adjoint_work_size():
    """Length of the ``work`` buffer of :func:`dopri5_adjoint_vjp`."""
    return _adj_work_len(N_STATES, N_PARAMS)


@njit(cache=True, error_model="numpy", fastmath=False)
def _adj_work_len(n, m):
    return 10 * n + n * n + n * m + 8 * (n + m) + n + n * n + n * m  # the forward solve's, then the adjoint's


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _adj_state_at(s, r, rec, x):
    """``x(s)`` from the continuous extension recorded in row ``r`` of ``rec``."""
    n = x.shape[0]
    th = (s - rec[r, 0]) / rec[r, 1]
    for q in range(n):
        x[q] = rk_dense_value(th, rec[r, 3 + q], rec[r, 3 + n + q], rec[r, 3 + 2 * n + q],
                              rec[r, 3 + 3 * n + q], rec[r, 3 + 4 * n + q])


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _adj_rhs(mh, s, r, rec, p, w, x, jy, jp, out):
    """``out = [-J_y^T lam; -J_p^T lam]`` at time ``s`` (``w = [lam; mu]``)."""
    n = mh[0]
    m = mh[1]
    _adj_state_at(s, r, rec, x)
    mh_jac_y(mh, s, x, p, jy)
    mh_jac_p(mh, s, x, p, jp)
    for k in range(n):
        acc = 0.0
        for i in range(n):
            acc += jy[i, k] * w[i]
        out[k] = -acc
    for j in range(m):
        acc = 0.0
        for i in range(n):
            acc += jp[i, j] * w[i]
        out[n + j] = -acc


# Dormand-Prince 5 stages as a table (row i: c_i, then a_i1 .. a_i5), and the
# 5th-order weights, so that one step has a single (inlined) call site of _adj_rhs
_ADJ_TAB = np.array([
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [RK_C2, RK_A21, 0.0, 0.0, 0.0, 0.0],
    [RK_C3, RK_A31, RK_A32, 0.0, 0.0, 0.0],
    [RK_C4, RK_A41, RK_A42, RK_A43, 0.0, 0.0],
    [RK_C5, RK_A51, RK_A52, RK_A53, RK_A54, 0.0],
    [1.0, RK_A61, RK_A62, RK_A63, RK_A64, RK_A65],
])
_ADJ_B = np.array([RK_A71, 0.0, RK_A73, RK_A74, RK_A75, RK_A76])


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _adj_step(mh, s, hb, r, rec, p, w, ws, kst, x, jy, jp):
    """One Dormand-Prince 5 step of size ``hb`` (< 0: backward) of ``w`` in place;
    ``kst`` (6, n + m) holds the stages."""
    size = w.shape[0]
    for i in range(6):
        for q in range(size):
            acc = 0.0
            for j in range(i):
                acc += _ADJ_TAB[i, 1 + j] * kst[j, q]
            ws[q] = w[q] + hb * acc
        _adj_rhs(mh, s + _ADJ_TAB[i, 0] * hb, r, rec, p, ws, x, jy, jp, kst[i])
    for q in range(size):
        acc = 0.0
        for i in range(6):
            acc += _ADJ_B[i] * kst[i, q]
        w[q] += hb * acc


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_adjoint_vjp(t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info):
    """Gradient of ``sum_i g_i . x(t_i)`` by the adjoint; see the module docstring."""
    return _adj_vjp(MODEL_HANDLE, t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _adj_vjp(mh, t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info):
    n = mh[0]
    m = mh[1]
    n_out = t_eval.shape[0]
    size = n + m
    if (g.shape[0] != n_out or g.shape[1] != n or grad.shape[0] != size or nsub < 1
            or rec.shape[0] < max_steps or rec.shape[1] != 3 + 5 * n
            or work.shape[0] < _adj_work_len(n, m)):
        return ST_BAD_INPUT
    none = no_directions(work)
    status = _dopri5_run(mh, t0, t_eval, y0, p, 0, none, none, n, rtol, atol, 0.0, 0.0, max_steps, z_out, work,
                         info, True, rec)
    if status != ST_SUCCESS:
        return status
    n_rec = int(info[INFO_N_STEPS] - info[INFO_N_REJECTED])
    off = 10 * n + n * n + n * m  # after the forward solve's work (dopri5_work_size(False))
    w = work[off:off + size]
    ws = work[off + size:off + 2 * size]
    kst = work_view(work, off + 2 * size, (6, size))
    off += 8 * size
    x = work[off:off + n]
    off += n
    jy = work_view(work, off, (n, n))
    off += n * n
    jp = work_view(work, off, (n, m))
    for q in range(size):
        w[q] = 0.0
    i = n_out - 1  # the latest output whose jump is still due
    for r in range(n_rec - 1, -1, -1):
        ta = rec[r, 0]
        s = rec[r, 2]
        while True:
            # jumps of the outputs at or after s (outputs in (ta, t_b] belong to step r)
            while i >= 0 and t_eval[i] >= s and t_eval[i] > ta:
                for k in range(n):
                    w[k] += g[i, k]
                i -= 1
            s_next = ta
            if i >= 0 and t_eval[i] > ta:
                s_next = t_eval[i]
            hb = (s_next - s) / nsub
            for _ in range(nsub):
                _adj_step(mh, s, hb, r, rec, p, w, ws, kst, x, jy, jp)
                s += hb
            s = s_next
            if s_next == ta:
                break
        if not all_finite(w, size):
            return ST_NON_FINITE
    while i >= 0:  # outputs at t0
        for k in range(n):
            w[k] += g[i, k]
        i -= 1
    for j in range(m):
        grad[j] = w[n + j]
    for k in range(n):
        grad[m + k] = w[k]
    return ST_SUCCESS
