"""Rodas4: stiffly accurate Rosenbrock method of order 4(3) with dense output
(order 3) and forward sensitivities through the exact augmented Jacobian.

Appended to every generated model module (after ``rk.py``, whose error scale, output
window and step-size limits it shares); see ``kernels/__init__.py`` and the augmented-state
layout in ``kernels/common.py``.

Method: E. Hairer and G. Wanner, Solving Ordinary Differential Equations II,
2nd ed. (1996), Sec. IV.7 (method RODAS, p. 452 of the book, in the transformed
variables u_i = sum_j gamma_ij k_j of eq. (7.25)); coefficient set METH=1 of
Hairer's rodas.f (subroutine ROCOE, version of October 28, 1996), transcribed
from the published values and checked against the order conditions in
tests/test_solve_rodas.py. One step, with E = I/(h gamma) - J_y(t, y)::

    E u_i = f(t + c_i h, y + sum_j a_ij u_j) + sum_j (c_ij / h) u_j + h d_i f_t
    y_hat = y + a51 u1 + ... + a54 u4 + u5      (embedded, order 3)
    y_new = y_hat + u6                          (order 4), error = u6

Predictive (Gustafsson) step-size control and the continuous extension
``y(t + s h) = (1-s) y + s (y_new + (1-s) (w2 + s w3))`` as in rodas.f.

Sensitivities: the same method is applied to ``z = [y, S]`` with the exact
augmented Jacobian. It is block lower-triangular with ``J_y`` on every
diagonal block, so one n x n LU per step suffices (from ``LU_SPARSE_MIN`` states on, the sparse LU that
``rodas_lu_plan`` plans at the solve's start, see ``linalg.py``); the off-diagonal block of
column ``j`` acts on ``v`` as ``B_j v = jac_y_dir(v) s_j + jac_p_dir(v)[:, j]``
(no ``jac_p_dir`` term for initial-state columns), evaluated at the step start. Directional
sensitivities (``S_W = S [pdir; s0]``, see ``common.py``): ``B_j v = jac_y_dir(v) s_j +
jac_p_dir(v) pdir[:, j]``, and ``J_p,t pdir`` in the time derivative.

The discrete adjoint (``rodas_adjoint_vjp``; ``rodas_solve_record`` and ``rodas_adjoint_sweep`` for its two
passes) is described where it is defined, at the end of this file.

Public kernels (callable from other njit code of the same module)
-----------------------------------------------------------------
``rodas_work_size(sens) -> int``
    Length of the float64 ``work`` buffer.
``rodas_solve(t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out,
work, info) -> int``
``rodas_solve_sens(t0, t_eval, y0, p, sens_err, rtol, atol, first_step,
max_steps, z_out, work, info) -> int``
``rodas_solve_dir(t0, t_eval, y0, p, pdir, s0, sens_err, rtol, atol, first_step,
max_steps, z_out, work, info) -> int``
    Same arguments and outputs as ``dopri5_solve`` / ``dopri5_solve_sens`` /
    ``dopri5_solve_dir`` (see ``dopri.py``; ``work``: ``rodas_work_size_dir(k)``); they also
    return ``ST_SINGULAR`` when
    ``I/(h gamma) - J_y`` stays singular after five step halvings. Each call
    allocates one (n,) int64 pivot array.
"""
import math

import numpy as np
from numba import njit

_RO_GAMMA = 0.25
_RO_C2 = 0.386
_RO_C3 = 0.21
_RO_C4 = 0.63
_RO_D1 = 0.25
_RO_D2 = -0.1043
_RO_D3 = 0.1035
_RO_D4 = -0.3620000000000023e-01
_RO_A21 = 0.1544000000000000e+01
_RO_A31 = 0.9466785280815826e+00
_RO_A32 = 0.2557011698983284e+00
_RO_A41 = 0.3314825187068521e+01
_RO_A42 = 0.2896124015972201e+01
_RO_A43 = 0.9986419139977817e+00
_RO_A51 = 0.1221224509226641e+01
_RO_A52 = 0.6019134481288629e+01
_RO_A53 = 0.1253708332932087e+02
_RO_A54 = -0.6878860361058950e+00
_RO_C21 = -0.5668800000000000e+01
_RO_C31 = -0.2430093356833875e+01
_RO_C32 = -0.2063599157091915e+00
_RO_C41 = -0.1073529058151375e+00
_RO_C42 = -0.9594562251023355e+01
_RO_C43 = -0.2047028614809616e+02
_RO_C51 = 0.7496443313967647e+01
_RO_C52 = -0.1024680431464352e+02
_RO_C53 = -0.3399990352819905e+02
_RO_C54 = 0.1170890893206160e+02
_RO_C61 = 0.8083246795921522e+01
_RO_C62 = -0.7981132988064893e+01
_RO_C63 = -0.3152159432874371e+02
_RO_C64 = 0.1631930543123136e+02
_RO_C65 = -0.6058818238834054e+01
_RO_W21 = 0.1012623508344586e+02  # dense output (D21..D25 of rodas.f)
_RO_W22 = -0.7487995877610167e+01
_RO_W23 = -0.3480091861555747e+02
_RO_W24 = -0.7992771707568823e+01
_RO_W25 = 0.1025137723295662e+01
_RO_W31 = -0.6762803392801253e+00  # dense output (D31..D35 of rodas.f)
_RO_W32 = 0.6087714651680015e+01
_RO_W33 = 0.1643084320892478e+02
_RO_W34 = 0.2476722511418386e+02
_RO_W35 = -0.6594389125716872e+01
# step-size control (rodas.f defaults): 1/6 <= h_new / h <= 5
_RO_SAFE = 0.9
_RO_FAC1 = 5.0
_RO_FAC2 = 1.0 / 6.0
_RO_MAX_SINGULAR = 5


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_work_size(sens):
    """Length of the ``work`` buffer of :func:`rodas_solve`."""
    return _rodas_work_len(N_STATES, N_PARAMS, n_sens_columns(sens))


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_work_size_dir(k):
    """Length of the ``work`` buffer of :func:`rodas_solve_dir` with ``k`` directions."""
    return _rodas_work_len(N_STATES, N_PARAMS, k)


@njit(cache=True, error_model="numpy", fastmath=False)
def _rodas_work_len(n, m, k):
    size = n * (1 + k)
    return 13 * size + 2 * n + 5 * n * n + 3 * n * m


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _rodas_time_derivative(mh, t, ystart, p, k, pdir, z, ft, jyt, jpt, fx):
    """``fx = d/dt`` of the augmented right-hand side at fixed ``z``:
    ``[f_t; J_y,t S + J_p,t pdir]`` (``[f_t; J_y,t S + [J_p,t | 0]]`` for the full layout)."""
    n = mh[0]
    m = mh[1]
    mh_f_t(mh, t, ystart, p, ft)
    for i in range(n):
        fx[i] = ft[i]
    if k == 0:
        return
    mh_jac_y_t(mh, t, ystart, p, jyt)
    mh_jac_p_t(mh, t, ystart, p, jpt)
    for q in range(n, n * (1 + k)):
        fx[q] = 0.0
    for i in range(n):
        add_sens_row(i, n, m, k, pdir, jpt, jyt, z, fx)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _rodas_stage_solve(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u, col, jyd, jpd):
    """Solve ``(I/(h gamma) - J_aug) u = r`` by block forward substitution.

    ``J_aug`` is taken at the step start ``(t, ystart, S = z[n:])``; ``lu``
    holds the LU factors of ``I/(h gamma) - J_y``.
    """
    n = mh[0]
    for i in range(n):
        col[i] = r[i]
    plu_solve(lu, piv, plan, col)
    for i in range(n):
        u[i] = col[i]
    if k > 0:
        _rodas_stage_sens(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u, jyd, jpd)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _rodas_stage_sens(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u, jyd, jpd):
    """The sensitivity blocks of :func:`_rodas_stage_solve`, after its state block ``u[:n]``: a
    function of its own, so that the states-only solver's stage solve stays small (about 20%
    faster: the compiler inlines it)."""
    n = mh[0]
    m = mh[1]
    uy = u[0:n]
    mh_jac_y_dir(mh, t, ystart, p, uy, jyd)
    mh_jac_p_dir(mh, t, ystart, p, uy, jpd)
    for q in range(n, n * (1 + k)):
        u[q] = r[q]
    for i in range(n):
        add_sens_row(i, n, m, k, pdir, jpd, jyd, z, u)
    plu_solve_rows(lu, piv, plan, u, n, k)


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_solve(t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out, work, info):
    """Adaptive Rodas4 for the states alone; see the module docstring."""
    none = no_directions(work)
    return _rodas_run(MODEL_HANDLE, t0, t_eval, y0, p, 0, none, none, N_STATES, rtol, atol, first_step, max_steps,
                      z_out, work, info, none)


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_solve_sens(t0, t_eval, y0, p, sens_err, rtol, atol, first_step, max_steps,
                     z_out, work, info):
    """Adaptive Rodas4 for states and sensitivities; see the module docstring."""
    k = N_PARAMS + N_STATES
    nc = N_STATES * (1 + k) if sens_err else N_STATES
    none = no_directions(work)
    return _rodas_run(MODEL_HANDLE, t0, t_eval, y0, p, k, none, none, nc, rtol, atol, first_step, max_steps,
                      z_out, work, info, none)


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_solve_dir(t0, t_eval, y0, p, pdir, s0, sens_err, rtol, atol, first_step, max_steps,
                    z_out, work, info):
    """Adaptive Rodas4 for states and directional sensitivities; see the module docstring."""
    k = pdir.shape[1]
    nc = N_STATES * (1 + k) if sens_err else N_STATES
    return _rodas_run(MODEL_HANDLE, t0, t_eval, y0, p, k, pdir, s0, nc, rtol, atol, first_step, max_steps,
                      z_out, work, info, no_directions(work))


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _rodas_run(mh, t0, t_eval, y0, p, k, pdir, s0, nc, rtol, atol, first_step, max_steps, z_out,
               work, info, rec):
    # mh: the model handle, as in _dopri5_run (direct.py in a model's module, pointer.py in the
    # shared one); rec: the accepted steps' record of the adjoint (rodas_adjoint_vjp), or no rows
    n = mh[0]
    m = mh[1]
    size = n * (1 + k)
    n_out = t_eval.shape[0]
    status = start_solve(info, t0, t_eval)
    if (status != ST_SUCCESS or y0.shape[0] != n or p.shape[0] != m or z_out.shape[0] != n_out
            or z_out.shape[1] != size or work.shape[0] < _rodas_work_len(n, m, k)
            or bad_directions(n, m, k, pdir, s0)):
        return ST_BAD_INPUT
    z = work[0:size]
    z1 = work[size:2 * size]
    zs = work[2 * size:3 * size]
    dz = work[3 * size:4 * size]
    dy1 = work[4 * size:5 * size]
    fx = work[5 * size:6 * size]
    r = work[6 * size:7 * size]
    u1 = work[7 * size:8 * size]
    u2 = work[8 * size:9 * size]
    u3 = work[9 * size:10 * size]
    u4 = work[10 * size:11 * size]
    u5 = work[11 * size:12 * size]
    u6 = work[12 * size:13 * size]
    off = 13 * size
    ft = work[off:off + n]
    col = work[off + n:off + 2 * n]
    off += 2 * n
    jy = work_view(work, off, (n, n))
    jy0 = work_view(work, off + n * n, (n, n))
    lu = work_view(work, off + 2 * n * n, (n, n))
    jyd = work_view(work, off + 3 * n * n, (n, n))
    jyt = work_view(work, off + 4 * n * n, (n, n))
    off += 5 * n * n
    jp = work_view(work, off, (n, m))
    jpd = work_view(work, off + n * m, (n, m))
    jpt = work_view(work, off + 2 * n * m, (n, m))
    piv = np.empty(n, dtype=np.int64)
    plan, pattern = rodas_lu_buffers(n)
    # state parts, handed to the model kernels without copies; z (and so
    # ystart) only changes when a step is accepted
    ystart = z[0:n]
    z1y = z1[0:n]
    zsy = zs[0:n]
    dzy = dz[0:n]
    dy1y = dy1[0:n]

    status, i_out, h, n_rhs = ode_start(mh, t0, t_eval, y0, p, k, pdir, s0, nc, 4.0, first_step, rtol, atol,
                                        z, ystart, dy1, dy1y, z1, z1y, dz, dzy, jy, jp, z_out, info)
    if status != ST_SUCCESS or i_out == n_out:
        return status
    t_end = t_eval[n_out - 1]
    hmax = t_end - t0

    t = t0
    n_steps = 0
    n_rej = 0
    n_acc = 0
    n_lu = 0
    n_sing = 0
    n_bad = 0
    hacc = h
    erracc = 1.0
    reject = False
    need_jac = False  # dy1 at t0 is already computed above
    rodas_lu_plan(mh, t, ystart, p, jyd, col, plan, pattern)
    mh_jac_y(mh, t, ystart, p, jy0)
    _rodas_time_derivative(mh, t, ystart, p, k, pdir, z, ft, jyt, jpt, fx)
    while True:
        status = rk_step_allowed(n_steps, max_steps, h, t)
        if status != ST_SUCCESS:
            break
        last = False
        if t + 1.0001 * h - t_end >= 0.0:
            h = t_end - t
            last = True
        if need_jac:
            aug_rhs(mh, t, z, ystart, p, k, pdir, jy, jp, dy1, dy1y)
            n_rhs += 1
            mh_jac_y(mh, t, ystart, p, jy0)
            _rodas_time_derivative(mh, t, ystart, p, k, pdir, z, ft, jyt, jpt, fx)
            need_jac = False
        n_lu += 1
        if plu_factor(jy0, 1.0 / (h * _RO_GAMMA), lu, piv, plan, pattern) != ST_SUCCESS:
            n_sing += 1
            if n_sing >= _RO_MAX_SINGULAR:
                status = ST_SINGULAR
                break
            h *= 0.5
            reject = True
            continue
        n_steps += 1

        hd1 = h * _RO_D1
        for q in range(size):
            r[q] = dy1[q] + hd1 * fx[q]
        _rodas_stage_solve(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u1, col, jyd, jpd)

        for q in range(size):
            zs[q] = z[q] + _RO_A21 * u1[q]
        aug_rhs(mh, t + _RO_C2 * h, zs, zsy, p, k, pdir, jy, jp, dz, dzy)
        hd = h * _RO_D2
        for q in range(size):
            r[q] = dz[q] + (_RO_C21 * u1[q]) / h + hd * fx[q]
        _rodas_stage_solve(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u2, col, jyd, jpd)

        for q in range(size):
            zs[q] = z[q] + _RO_A31 * u1[q] + _RO_A32 * u2[q]
        aug_rhs(mh, t + _RO_C3 * h, zs, zsy, p, k, pdir, jy, jp, dz, dzy)
        hd = h * _RO_D3
        for q in range(size):
            r[q] = dz[q] + (_RO_C31 * u1[q] + _RO_C32 * u2[q]) / h + hd * fx[q]
        _rodas_stage_solve(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u3, col, jyd, jpd)

        for q in range(size):
            zs[q] = z[q] + _RO_A41 * u1[q] + _RO_A42 * u2[q] + _RO_A43 * u3[q]
        aug_rhs(mh, t + _RO_C4 * h, zs, zsy, p, k, pdir, jy, jp, dz, dzy)
        hd = h * _RO_D4
        for q in range(size):
            r[q] = (dz[q] + (_RO_C41 * u1[q] + _RO_C42 * u2[q] + _RO_C43 * u3[q]) / h
                    + hd * fx[q])
        _rodas_stage_solve(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u4, col, jyd, jpd)

        t_new = t_end if last else t + h
        for q in range(size):
            zs[q] = z[q] + _RO_A51 * u1[q] + _RO_A52 * u2[q] + _RO_A53 * u3[q] + _RO_A54 * u4[q]
        aug_rhs(mh, t_new, zs, zsy, p, k, pdir, jy, jp, dz, dzy)
        for q in range(size):
            r[q] = dz[q] + (_RO_C51 * u1[q] + _RO_C52 * u2[q] + _RO_C53 * u3[q]
                            + _RO_C54 * u4[q]) / h
        _rodas_stage_solve(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u5, col, jyd, jpd)

        for q in range(size):
            zs[q] += u5[q]  # embedded solution
        aug_rhs(mh, t_new, zs, zsy, p, k, pdir, jy, jp, dz, dzy)
        for q in range(size):
            r[q] = dz[q] + (_RO_C61 * u1[q] + _RO_C62 * u2[q] + _RO_C63 * u3[q]
                            + _RO_C64 * u4[q] + _RO_C65 * u5[q]) / h
        _rodas_stage_solve(mh, t, ystart, p, k, pdir, z, lu, piv, plan, r, u6, col, jyd, jpd)
        for q in range(size):
            z1[q] = zs[q] + u6[q]
        n_rhs += 5

        err = 0.0
        for q in range(nc):
            err += rk_scaled(u6[q], z[q], z1[q], rtol, atol) ** 2
        err = math.sqrt(err / nc)
        if not (math.isfinite(err) and all_finite(z1, size)):
            h, n_bad, n_rej, status = rk_nonfinite(h, n_bad, n_rej, False)
            reject = True
            if status != ST_SUCCESS:
                break
            continue
        n_bad = 0
        fac = max(_RO_FAC2, min(_RO_FAC1, err ** 0.25 / _RO_SAFE))
        hnew = h / fac
        if err > 1.0:
            h = hnew
            reject = True
            n_rej += 1
            continue
        n_acc += 1
        if n_acc > 1:
            # predictive controller of Gustafsson
            facgus = (hacc / h) * (err * err / erracc) ** 0.25 / _RO_SAFE
            facgus = max(_RO_FAC2, min(_RO_FAC1, facgus))
            fac = max(fac, facgus)
            hnew = h / fac
        hacc = h
        erracc = max(1.0e-2, err)
        j_end = rk_outputs_due(t_eval, i_out, last, t_new)
        if rec.shape[0] > 0:
            _rodas_record(rec, n_acc - 1, t, h, t_new, i_out, j_end, ystart)
        if j_end > i_out:
            for q in range(size):
                w2 = (_RO_W21 * u1[q] + _RO_W22 * u2[q] + _RO_W23 * u3[q]
                      + _RO_W24 * u4[q] + _RO_W25 * u5[q])
                w3 = (_RO_W31 * u1[q] + _RO_W32 * u2[q] + _RO_W33 * u3[q]
                      + _RO_W34 * u4[q] + _RO_W35 * u5[q])
                for j in range(i_out, j_end):
                    if t_eval[j] >= t_new:
                        z_out[j, q] = z1[q]
                    else:
                        s = (t_eval[j] - t) / h
                        s1 = 1.0 - s
                        z_out[j, q] = s1 * z[q] + s * (z1[q] + s1 * (w2 + s * w3))
            i_out = j_end
        for q in range(size):
            z[q] = z1[q]
        t = t_new
        need_jac = True
        n_sing = 0
        if last:
            break
        h = rk_next_step(hnew, h, hmax, reject)
        reject = False
    write_info(info, t, n_steps, n_rej, n_rhs, h)
    info[INFO_N_LU] = n_lu
    return status


# ---- the discrete adjoint: vector-Jacobian products of the Rodas solution ----------------------------------
#
# ``rodas_adjoint_vjp`` differentiates the computed solution itself (the discrete adjoint of the accepted steps,
# their sizes held fixed): the gradient of ``L = sum_i g_i . y(t_i)``, ``y`` the Rodas solution with its dense
# output at ``t_eval``, with respect to ``p`` and ``y0``. The forward solve (states alone) records each accepted
# step (``_rodas_record``); the backward sweep recomputes the step's stages from its start and runs them in
# reverse. One stage ``E u_i = f(t_i, Y_i) + sum_j (c_ij / h) u_j + h d_i f_t(t, y)``, ``E = I / (h gamma) -
# J_y(t, y)``, gives with ``r = E^-T ubar_i``: ``ubar_j += (c_ij / h) r``; ``Ybar_i = J_y(t_i, Y_i)^T r``,
# ``pbar += J_p(t_i, Y_i)^T r``; through ``E``: ``ybar += jac_y_dir(u_i)^T r``, ``pbar += jac_p_dir(u_i)^T r``
# (``d(J_y u)/dy = jac_y_dir(u)`` and ``d(J_y u)/dp = jac_p_dir(u)``, by the symmetry of second derivatives);
# through ``f_t``: ``ybar += J_y,t^T (h d_i r)``, ``pbar += J_p,t^T (h d_i r)``.

ADJ_REC_HEAD = 5  # rec row: t, h, t_new, first output index, end output index, then the step's start state


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _rodas_record(rec, row, t, h, t_new, i_out, j_end, ystart):
    rec[row, 0] = t
    rec[row, 1] = h
    rec[row, 2] = t_new
    rec[row, 3] = i_out
    rec[row, 4] = j_end
    for i in range(ystart.shape[0]):
        rec[row, ADJ_REC_HEAD + i] = ystart[i]


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_adjoint_vjp(t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info):
    """``[dL/dp, dL/dy0]`` of ``L = sum_i g[i] . y(t_eval[i])`` by the discrete adjoint of Rodas (``nsub`` is
    not used: the sweep runs on the forward steps); ``rec`` (max_steps, 5 + n) scratch, ``work`` as
    ``rodas_solve``'s; ``z_out`` the states at ``t_eval``."""
    return _rodas_adjoint(MODEL_HANDLE, t0, t_eval, y0, p, g, rtol, atol, max_steps, z_out, rec, grad, work, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_solve_record(t0, t_eval, y0, p, rtol, atol, max_steps, z_out, rec, work, info):
    """The forward pass of :func:`rodas_adjoint_vjp` alone (the states at ``t_eval`` into ``z_out``, the steps
    into ``rec``); :func:`rodas_adjoint_sweep` then runs the backward sweep for any ``g``."""
    return _rodas_record_run(MODEL_HANDLE, t0, t_eval, y0, p, rtol, atol, max_steps, z_out, rec, work, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_adjoint_sweep(t_eval, p, g, rec, grad, info):
    """The backward sweep of :func:`rodas_adjoint_vjp` over the steps that the last :func:`rodas_solve_record`
    with the same ``p``, ``t_eval``, ``rec`` and ``info`` recorded."""
    return _rodas_sweep_checked(MODEL_HANDLE, t_eval, p, g, rec, grad, info)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _rodas_adjoint(mh, t0, t_eval, y0, p, g, rtol, atol, max_steps, z_out, rec, grad, work, info):
    status = _rodas_record_run(mh, t0, t_eval, y0, p, rtol, atol, max_steps, z_out, rec, work, info)
    if status != ST_SUCCESS:
        return status
    return _rodas_sweep_checked(mh, t_eval, p, g, rec, grad, info)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _rodas_record_run(mh, t0, t_eval, y0, p, rtol, atol, max_steps, z_out, rec, work, info):
    n = mh[0]
    if rec.shape[0] < max_steps or rec.shape[1] != ADJ_REC_HEAD + n:
        return ST_BAD_INPUT
    none = no_directions(work)
    return _rodas_run(mh, t0, t_eval, y0, p, 0, none, none, n, rtol, atol, 0.0, max_steps, z_out, work, info, rec)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _rodas_sweep_checked(mh, t_eval, p, g, rec, grad, info):
    n = mh[0]
    m = mh[1]
    n_acc = int(info[INFO_N_STEPS] - info[INFO_N_REJECTED])
    if (g.shape[0] != t_eval.shape[0] or g.shape[1] != n or grad.shape[0] != n + m or p.shape[0] != m
            or rec.shape[1] != ADJ_REC_HEAD + n or n_acc > rec.shape[0] or n_acc < 0):
        return ST_BAD_INPUT
    _rodas_sweep(mh, t_eval, p, g, rec, n_acc, grad)
    return ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False)
def _rodas_sweep(mh, t_eval, p, g, rec, n_acc, grad):
    """The backward sweep over the ``n_acc`` recorded steps: ``grad = [pbar, ybar(t0)]``."""
    n = mh[0]
    m = mh[1]
    lu = np.empty((n, n))
    jm = np.empty((n, n))
    pm = np.empty((n, m))
    piv = np.empty(n, dtype=np.int64)
    plan, pattern = rodas_lu_buffers(n)
    u = np.zeros((6, n))  # the stages u1..u6
    ys = np.empty((6, n))  # the stage states Y1 (the step start), Y2..Y6 (Y6: the embedded solution)
    ub = np.empty((6, n))  # their adjoints
    ft = np.empty(n)
    fv = np.empty(n)
    r = np.empty(n)
    ybar = np.zeros(n)  # the adjoint of the current step's end state
    y0bar = np.empty(n)  # ... of its start state
    ftbar = np.empty(n)
    w2b = np.empty(n)
    w3b = np.empty(n)
    pbar = grad[0:m]
    for j in range(m):
        pbar[j] = 0.0
    for s in range(n_acc - 1, -1, -1):
        t = rec[s, 0]
        h = rec[s, 1]
        t_new = rec[s, 2]
        for i in range(n):
            ys[0, i] = rec[s, ADJ_REC_HEAD + i]
        y = ys[0]
        if s == n_acc - 1:
            rodas_lu_plan(mh, t, y, p, jm, r, plan, pattern)
        if _rodas_stages(mh, t, h, t_new, y, p, lu, jm, piv, plan, pattern, u, ys, ft, fv, r) != ST_SUCCESS:
            return  # the forward solve factored the same matrix: cannot happen
        # outputs inside the step (dense output) and at its end
        for i in range(n):
            y0bar[i] = 0.0
            w2b[i] = 0.0
            w3b[i] = 0.0
            ftbar[i] = 0.0
        for j in range(int(rec[s, 3]), int(rec[s, 4])):
            if t_eval[j] >= t_new:
                for i in range(n):
                    ybar[i] += g[j, i]
            else:
                th = (t_eval[j] - t) / h
                th1 = 1.0 - th
                for i in range(n):
                    y0bar[i] += th1 * g[j, i]
                    ybar[i] += th * g[j, i]
                    w2b[i] += th * th1 * g[j, i]
                    w3b[i] += th * th * th1 * g[j, i]
        for i in range(n):
            ub[0, i] = _RO_W21 * w2b[i] + _RO_W31 * w3b[i]
            ub[1, i] = _RO_W22 * w2b[i] + _RO_W32 * w3b[i]
            ub[2, i] = _RO_W23 * w2b[i] + _RO_W33 * w3b[i]
            ub[3, i] = _RO_W24 * w2b[i] + _RO_W34 * w3b[i]
            ub[4, i] = _RO_W25 * w2b[i] + _RO_W35 * w3b[i]
            ub[5, i] = ybar[i]  # y_new = Y6 + u6
        # stage 6: E u6 = f(t_new, Y6) + sum_j c6j u_j / h; Y6 = Y5 + u5 (its adjoint: ybar + f-term)
        _rodas_stage_adjoint(mh, t, h, t_new, y, p, lu, jm, pm, piv, plan, u, ys, ub, 5, r, fv, y0bar, pbar)
        for i in range(n):
            fv[i] += ybar[i]  # Ybar6 = ybar (y_new) + J^T r
            ub[4, i] += fv[i]  # Y6 = Y5 + u5
        for i in range(n):
            ub[0, i] += _RO_C61 * r[i] / h
            ub[1, i] += _RO_C62 * r[i] / h
            ub[2, i] += _RO_C63 * r[i] / h
            ub[3, i] += _RO_C64 * r[i] / h
            ub[4, i] += _RO_C65 * r[i] / h
        for i in range(n):
            ybar[i] = fv[i]  # Ybar5 collects Ybar6 and stage 5's f-term
        # stage 5: E u5 = f(t_new, Y5) + sum_j c5j u_j / h
        _rodas_stage_adjoint(mh, t, h, t_new, y, p, lu, jm, pm, piv, plan, u, ys, ub, 4, r, fv, y0bar, pbar)
        for i in range(n):
            ybar[i] += fv[i]
            ub[0, i] += _RO_C51 * r[i] / h + _RO_A51 * ybar[i]
            ub[1, i] += _RO_C52 * r[i] / h + _RO_A52 * ybar[i]
            ub[2, i] += _RO_C53 * r[i] / h + _RO_A53 * ybar[i]
            ub[3, i] += _RO_C54 * r[i] / h + _RO_A54 * ybar[i]
            y0bar[i] += ybar[i]  # Y5 = y + sum_j a5j u_j
        # stage 4: E u4 = f(t + c4 h, Y4) + sum_j c4j u_j / h + h d4 f_t
        _rodas_stage_adjoint(mh, t, h, t + _RO_C4 * h, y, p, lu, jm, pm, piv, plan, u, ys, ub, 3, r, fv, y0bar, pbar)
        for i in range(n):
            ub[0, i] += _RO_C41 * r[i] / h + _RO_A41 * fv[i]
            ub[1, i] += _RO_C42 * r[i] / h + _RO_A42 * fv[i]
            ub[2, i] += _RO_C43 * r[i] / h + _RO_A43 * fv[i]
            y0bar[i] += fv[i]
            ftbar[i] += h * _RO_D4 * r[i]
        # stage 3
        _rodas_stage_adjoint(mh, t, h, t + _RO_C3 * h, y, p, lu, jm, pm, piv, plan, u, ys, ub, 2, r, fv, y0bar, pbar)
        for i in range(n):
            ub[0, i] += _RO_C31 * r[i] / h + _RO_A31 * fv[i]
            ub[1, i] += _RO_C32 * r[i] / h + _RO_A32 * fv[i]
            y0bar[i] += fv[i]
            ftbar[i] += h * _RO_D3 * r[i]
        # stage 2
        _rodas_stage_adjoint(mh, t, h, t + _RO_C2 * h, y, p, lu, jm, pm, piv, plan, u, ys, ub, 1, r, fv, y0bar, pbar)
        for i in range(n):
            ub[0, i] += _RO_C21 * r[i] / h + _RO_A21 * fv[i]
            y0bar[i] += fv[i]
            ftbar[i] += h * _RO_D2 * r[i]
        # stage 1: E u1 = f(t, y) + h d1 f_t
        _rodas_stage_adjoint(mh, t, h, t, y, p, lu, jm, pm, piv, plan, u, ys, ub, 0, r, fv, y0bar, pbar)
        for i in range(n):
            y0bar[i] += fv[i]
            ftbar[i] += h * _RO_D1 * r[i]
        # f_t(t, y): its derivatives J_y,t and J_p,t
        mh_jac_y_t(mh, t, y, p, jm)
        mh_jac_p_t(mh, t, y, p, pm)
        _rodas_add_t_matvec(jm, ftbar, y0bar)
        _rodas_add_t_matvec(pm, ftbar, pbar)
        for i in range(n):
            ybar[i] = y0bar[i]
    # outputs at t0 (before the first step)
    first = int(rec[0, 3]) if n_acc > 0 else t_eval.shape[0]
    for j in range(first):
        for i in range(n):
            ybar[i] += g[j, i]
    for i in range(n):
        grad[m + i] = ybar[i]


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _rodas_add_t_matvec(a, v, out):
    """``out += a^T v``."""
    for i in range(a.shape[0]):
        vi = v[i]
        if vi != 0.0:
            for j in range(a.shape[1]):
                out[j] += a[i, j] * vi


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _rodas_stage_adjoint(mh, t, h, ti, y, p, lu, jm, pm, piv, plan, u, ys, ub, i, r, fv, ybar, pbar):
    """Stage ``i``'s adjoint: ``r = E^-T ub[i]``; ``fv = J_y(ti, Y_i)^T r`` (the adjoint of the stage state);
    ``pbar += J_p(ti, Y_i)^T r``; through ``E``: ``ybar += jac_y_dir(u_i)^T r``, ``pbar += jac_p_dir(u_i)^T r``."""
    n = y.shape[0]
    for q in range(n):
        r[q] = ub[i, q]
    plu_solve_transposed(lu, piv, plan, r)
    for q in range(n):
        fv[q] = 0.0
    yi = ys[i]
    mh_jac_y(mh, ti, yi, p, jm)
    _rodas_add_t_matvec(jm, r, fv)
    mh_jac_p(mh, ti, yi, p, pm)
    _rodas_add_t_matvec(pm, r, pbar)
    ui = u[i]
    mh_jac_y_dir(mh, t, y, p, ui, jm)
    _rodas_add_t_matvec(jm, r, ybar)
    mh_jac_p_dir(mh, t, y, p, ui, pm)
    _rodas_add_t_matvec(pm, r, pbar)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _rodas_stages(mh, t, h, t_new, y, p, lu, jm, piv, plan, pattern, u, ys, ft, fv, r):
    """One step's stages again, from its start ``y`` (= ``ys[0]``), as ``_rodas_run`` computed them (states
    alone): ``u[0..5]``, the stage states ``ys[1..5]`` (Y2, Y3, Y4, Y5 and the embedded Y6) and ``lu`` (the
    factors of ``E``)."""
    n = y.shape[0]
    mh_jac_y(mh, t, y, p, jm)
    if plu_factor(jm, 1.0 / (h * _RO_GAMMA), lu, piv, plan, pattern) != ST_SUCCESS:
        return ST_SINGULAR
    mh_f_t(mh, t, y, p, ft)
    mh_f(mh, t, y, p, fv)
    for i in range(n):
        r[i] = fv[i] + h * _RO_D1 * ft[i]
    _rodas_solve_into(lu, piv, plan, r, u, 0)
    for i in range(n):
        ys[1, i] = y[i] + _RO_A21 * u[0, i]
    mh_f(mh, t + _RO_C2 * h, ys[1], p, fv)
    for i in range(n):
        r[i] = fv[i] + (_RO_C21 * u[0, i]) / h + h * _RO_D2 * ft[i]
    _rodas_solve_into(lu, piv, plan, r, u, 1)
    for i in range(n):
        ys[2, i] = y[i] + _RO_A31 * u[0, i] + _RO_A32 * u[1, i]
    mh_f(mh, t + _RO_C3 * h, ys[2], p, fv)
    for i in range(n):
        r[i] = fv[i] + (_RO_C31 * u[0, i] + _RO_C32 * u[1, i]) / h + h * _RO_D3 * ft[i]
    _rodas_solve_into(lu, piv, plan, r, u, 2)
    for i in range(n):
        ys[3, i] = y[i] + _RO_A41 * u[0, i] + _RO_A42 * u[1, i] + _RO_A43 * u[2, i]
    mh_f(mh, t + _RO_C4 * h, ys[3], p, fv)
    for i in range(n):
        r[i] = fv[i] + (_RO_C41 * u[0, i] + _RO_C42 * u[1, i] + _RO_C43 * u[2, i]) / h + h * _RO_D4 * ft[i]
    _rodas_solve_into(lu, piv, plan, r, u, 3)
    for i in range(n):
        ys[4, i] = y[i] + _RO_A51 * u[0, i] + _RO_A52 * u[1, i] + _RO_A53 * u[2, i] + _RO_A54 * u[3, i]
    mh_f(mh, t_new, ys[4], p, fv)
    for i in range(n):
        r[i] = fv[i] + (_RO_C51 * u[0, i] + _RO_C52 * u[1, i] + _RO_C53 * u[2, i] + _RO_C54 * u[3, i]) / h
    _rodas_solve_into(lu, piv, plan, r, u, 4)
    for i in range(n):
        ys[5, i] = ys[4, i] + u[4, i]
    mh_f(mh, t_new, ys[5], p, fv)
    for i in range(n):
        r[i] = fv[i] + (_RO_C61 * u[0, i] + _RO_C62 * u[1, i] + _RO_C63 * u[2, i] + _RO_C64 * u[3, i]
                        + _RO_C65 * u[4, i]) / h
    _rodas_solve_into(lu, piv, plan, r, u, 5)
    return ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _rodas_solve_into(lu, piv, plan, r, u, i):
    plu_solve(lu, piv, plan, r)
    for q in range(r.shape[0]):
        u[i, q] = r[q]


@njit(cache=True, error_model="numpy", fastmath=False)
def rodas_lu_buffers(n):
    """The sparse LU's ``plan`` and ``pattern`` (``linalg.py``) for ``n`` states; empty below ``LU_SPARSE_MIN``."""
    size = n if n >= LU_SPARSE_MIN else 0
    return np.zeros(lu_plan_len(n), dtype=np.int64), np.zeros((3, size, size), dtype=np.bool_)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def rodas_lu_plan(mh, t, y, p, jm, yprobe, plan, pattern):
    """Plan the sparse LU of a solve from the Jacobian's nonzeros at its start ``(t, y)`` and at a probe state
    with every entry away from zero (a reaction rate's derivative vanishes where a species does), the diagonal
    included; ``jm`` (n, n) and ``yprobe`` (n,) are scratch. Entries that turn nonzero later make
    :func:`plu_factor` plan again."""
    if plan.shape[0] == 0:
        return
    n = y.shape[0]
    mask = pattern[0]
    mh_jac_y(mh, t, y, p, jm)
    for i in range(n):
        for j in range(n):
            mask[i, j] = i == j or jm[i, j] != 0.0
        yprobe[i] = abs(y[i]) + 1.0 + i / (8.0 * n)
    mh_jac_y(mh, t, yprobe, p, jm)
    for i in range(n):
        for j in range(n):
            if jm[i, j] != 0.0:
                mask[i, j] = True
    lu_plan(pattern, plan)
