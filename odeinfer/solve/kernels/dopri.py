"""Dormand-Prince 5(4) with FSAL, PI step-size control, stiffness detection,
4th-order dense output and forward sensitivities.

Appended to every generated model module (after ``common.py`` and ``rk.py``); see
``kernels/__init__.py`` and the augmented-state layout in ``kernels/common.py``. The tableau,
error norm, controller, continuous extension and stiffness test are the Runge-Kutta core of
``rk.py``, shared with the method of steps of ``dde.py``.

Public kernels (callable from other njit code of the same module)
-----------------------------------------------------------------
``dopri5_work_size(sens) -> int``
    Length of the float64 ``work`` buffer.
``dopri5_solve(t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out,
work, info) -> int``
    Adaptive solve of the states alone (``z_out`` has ``n`` columns); returns a
    status code (``ST_*`` in ``common.py``).
``dopri5_solve_sens(t0, t_eval, y0, p, sens_err, rtol, atol, first_step,
max_steps, z_out, work, info) -> int``
    The same with sensitivities (``z_out`` has ``n * (1 + m + n)`` columns).
``dopri5_solve_dir(t0, t_eval, y0, p, pdir, s0, sens_err, rtol, atol, first_step,
max_steps, z_out, work, info) -> int``
    The same with the directional sensitivities ``S_W = S [pdir; s0]`` (``pdir`` (m, k),
    ``s0`` (n, k) float64 C-contiguous, ``k >= 1``; see ``common.py``): ``z_out`` has
    ``n * (1 + k)`` columns; ``work`` at least ``dopri5_work_size_dir(k)``. With
    ``[pdir; s0]`` the identity, the results of ``dopri5_solve_sens``, bit for bit.
``dopri5_fixed(t0, t_eval, y0, p, sens, h, z_out, work, info) -> int``
    Same tableau with the constant step ``h`` (last step shortened to hit
    ``t_eval[-1]``); no error control and no stiffness test. For convergence
    studies; its loops are not specialised (slower, compiles separately).

Arguments: ``t0`` float; ``t_eval`` (n_out,) float64, non-decreasing, ``>= t0``;
``y0`` (n,), ``p`` (m,) float64; ``sens`` bool (integrate ``S`` too);
``sens_err`` bool (error control on ``S`` as well as ``y``); ``rtol``, ``atol``
float; ``first_step`` float (``<= 0``: Hairer's heuristic); ``max_steps`` int
(attempted steps); ``z_out`` (n_out, n*(1+k)) float64, out: the augmented
state at ``t_eval`` (rows after a failure are NaN); ``work`` float64 scratch of
at least ``dopri5_work_size(sens)``; ``info`` (INFO_SIZE,) float64, out.
"""
import math

import numpy as np
from numba import njit

@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_work_size(sens):
    """Length of the ``work`` buffer of :func:`dopri5_solve` / :func:`dopri5_fixed`."""
    return _dopri5_work_len(N_STATES, N_PARAMS, n_sens_columns(sens))


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_work_size_dir(k):
    """Length of the ``work`` buffer of :func:`dopri5_solve_dir` with ``k`` directions."""
    return _dopri5_work_len(N_STATES, N_PARAMS, k)


@njit(cache=True, error_model="numpy", fastmath=False)
def _dopri5_work_len(n, m, k):
    size = n * (1 + k)
    return 10 * size + n * n + n * m  # as checked in _dopri5_run


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_solve(t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out, work, info):
    """Adaptive Dormand-Prince 5(4) for the states alone; see the module docstring."""
    none = no_directions(work)
    return _dopri5_run(MODEL_HANDLE, t0, t_eval, y0, p, 0, none, none, N_STATES, rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_solve_sens(t0, t_eval, y0, p, sens_err, rtol, atol, first_step, max_steps,
                      z_out, work, info):
    """Adaptive Dormand-Prince 5(4) for states and sensitivities; see the module docstring."""
    # the augmented size is a compile-time constant here (the core is inlined),
    # so LLVM fully unrolls the small loops; a separate kernel from the
    # states-only one, so that each compiles only when it is used
    k = N_PARAMS + N_STATES
    nc = N_STATES * (1 + k) if sens_err else N_STATES
    none = no_directions(work)
    return _dopri5_run(MODEL_HANDLE, t0, t_eval, y0, p, k, none, none, nc, rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_solve_dir(t0, t_eval, y0, p, pdir, s0, sens_err, rtol, atol, first_step, max_steps,
                     z_out, work, info):
    """Adaptive Dormand-Prince 5(4) for states and directional sensitivities; see the module docstring."""
    k = pdir.shape[1]
    nc = N_STATES * (1 + k) if sens_err else N_STATES
    return _dopri5_run(MODEL_HANDLE, t0, t_eval, y0, p, k, pdir, s0, nc, rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_fixed(t0, t_eval, y0, p, sens, h, z_out, work, info):
    """Dormand-Prince 5 with constant step ``h > 0``; see the module docstring."""
    return _dopri5_fixed_run(MODEL_HANDLE, t0, t_eval, y0, p, n_sens_columns(sens), h, z_out, work, info)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _dopri5_fixed_run(mh, t0, t_eval, y0, p, k, h, z_out, work, info):
    # the constant-step mode of dopri5_fixed and the shared ptr_dopri5_fixed: no error control
    if not (h > 0.0) or t_eval.shape[0] == 0:
        return ST_BAD_INPUT
    n_max = min((t_eval[t_eval.shape[0] - 1] - t0) / h + 2.0, 9.0e18)
    if not (n_max >= 0.0):
        return ST_BAD_INPUT
    none = no_directions(work)
    return _dopri5_run(mh, t0, t_eval, y0, p, k, none, none, mh[0], 1.0, 1.0, h, h, int(n_max), z_out, work, info,
                       False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _dopri5_run(mh, t0, t_eval, y0, p, k, pdir, s0, nc, rtol, atol, h_init, h_fixed,
                max_steps, z_out, work, info, record, rec):
    # mh: the model handle (n, m, ...) through which aug_rhs calls the model (direct.py in a
    # model's module, pointer.py in the shared module); record: store each accepted step's
    # dense output in the rows of rec (see rk_store_dense and kernels/adjoint.py); callers that
    # do not record pass False and any float64 2-D array (z_out), so the branch costs one test
    # per step
    n = mh[0]
    m = mh[1]
    size = n * (1 + k)
    n_out = t_eval.shape[0]
    status = start_solve(info, t0, t_eval)
    if (status != ST_SUCCESS or y0.shape[0] != n or p.shape[0] != m or z_out.shape[0] != n_out
            or z_out.shape[1] != size or work.shape[0] < _dopri5_work_len(n, m, k)
            or bad_directions(n, m, k, pdir, s0)):
        return ST_BAD_INPUT
    (k1, k2, k3, k4, k5, k6, k7, z, z1, zs), (k1y, k2y, k3y, k4y, k5y, k6y, k7y, zy, z1y, zsy) = \
        rk_vectors(work, size, n)
    off = 10 * size
    jy = work_view(work, off, (n, n))
    off += n * n
    jp = work_view(work, off, (n, m))

    status, i_out, h, n_rhs = ode_start(mh, t0, t_eval, y0, p, k, pdir, s0, nc, RK_ORDER, h_init, rtol, atol,
                                        z, zy, k1, k1y, z1, z1y, k2, k2y, jy, jp, z_out, info)
    if status != ST_SUCCESS or i_out == n_out:
        return status
    t_end = t_eval[n_out - 1]
    hmax = t_end - t0
    fixed = h_fixed > 0.0
    t = t0
    lfacold = RK_LOG_FACOLD_MIN  # log(facold), facold = max(err, 1e-4)
    hlamb = 0.0  # stiffness test: h |lambda|, consecutive stiff / non-stiff verdicts
    iasti = nonsti = 0
    n_acc = 0
    n_steps = n_rej = n_bad = 0  # attempted and rejected steps, consecutive non-finite trials
    reject = False  # the last trial step was rejected
    while True:
        status = rk_step_allowed(n_steps, max_steps, h, t)
        if status != ST_SUCCESS:
            break
        last = False
        if t + 1.01 * h - t_end > 0.0:
            h = t_end - t
            last = True
        n_steps += 1

        rk_stage(2, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        aug_rhs(mh, t + RK_C2 * h, zs, zsy, p, k, pdir, jy, jp, k2, k2y)
        rk_stage(3, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        aug_rhs(mh, t + RK_C3 * h, zs, zsy, p, k, pdir, jy, jp, k3, k3y)
        rk_stage(4, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        aug_rhs(mh, t + RK_C4 * h, zs, zsy, p, k, pdir, jy, jp, k4, k4y)
        rk_stage(5, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        aug_rhs(mh, t + RK_C5 * h, zs, zsy, p, k, pdir, jy, jp, k5, k5y)
        rk_stage(6, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        t_new = t_end if last else t + h
        aug_rhs(mh, t_new, zs, zsy, p, k, pdir, jy, jp, k6, k6y)
        rk_stage(7, size, z, h, k1, k2, k3, k4, k5, k6, z1)
        aug_rhs(mh, t_new, z1, z1y, p, k, pdir, jy, jp, k7, k7y)
        n_rhs += 6

        # mean square of the scaled error (err = sqrt(err2)); a non-finite trial step is retried shorter
        err2 = 0.0 if fixed else rk_err2(nc, z, z1, h, k1, k3, k4, k5, k6, k7, rtol, atol)
        if not (math.isfinite(err2) and all_finite(z1, size) and all_finite(k7, size)):
            h, n_bad, n_rej, status = rk_nonfinite(h, n_bad, n_rej, fixed)
            reject = True
            if status != ST_SUCCESS:
                break
            continue
        n_bad = 0
        lerr = rk_log_err(err2)
        if err2 > 1.0:
            h = rk_reject(h, lerr)
            reject = True
            n_rej += 1
            continue
        hnew, lfacold = rk_accept(h, lerr, lfacold)
        n_acc += 1
        if not fixed and (n_acc % RK_NSTIFF == 0 or iasti > 0):
            hlamb, iasti, nonsti, stiff = rk_stiffness(n, nc, h, z1, zs, k6, k7, jy, k2, hlamb, iasti, nonsti)
            if stiff:
                status = ST_STIFF
        if record:
            rk_store_dense(rec, n_acc - 1, 3, n, t, h, z, z1, k1, k3, k4, k5, k6, k7)
            rec[n_acc - 1, 2] = t_new
        i_out = rk_emit(t_eval, i_out, last, size, t, h, t_new, z, z1, k1, k3, k4, k5, k6, k7, z_out)
        for q in range(size):
            z[q] = z1[q]
            k1[q] = k7[q]
        t = t_new
        if last or status != ST_SUCCESS:
            break
        if not fixed:
            h = rk_next_step(hnew, h, hmax, reject)
        reject = False
    write_info(info, t, n_steps, n_rej, n_rhs, h)
    return status
