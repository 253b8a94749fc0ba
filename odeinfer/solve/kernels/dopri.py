"""Dormand-Prince 5(4) with FSAL, PI step-size control, stiffness detection,
4th-order dense output and forward sensitivities.

Appended to every generated model module; see ``kernels/__init__.py`` and the
augmented-state layout in ``kernels/common.py``.

Tableau, error coefficients and continuous extension: J. R. Dormand and
P. J. Prince, "A family of embedded Runge-Kutta formulae", J. Comput. Appl.
Math. 6 (1980) 19-26; dense output, PI controller (beta = 0.04) and the
stiffness test as in E. Hairer, S. P. Norsett, G. Wanner, Solving Ordinary
Differential Equations I, 2nd ed. (1993), Sec. II.5, II.6, IV.2 and the
accompanying code dopri5.f (coefficients cross-checked against it).

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

_DP_C2 = 1.0 / 5.0
_DP_C3 = 3.0 / 10.0
_DP_C4 = 4.0 / 5.0
_DP_C5 = 8.0 / 9.0
_DP_A21 = 1.0 / 5.0
_DP_A31 = 3.0 / 40.0
_DP_A32 = 9.0 / 40.0
_DP_A41 = 44.0 / 45.0
_DP_A42 = -56.0 / 15.0
_DP_A43 = 32.0 / 9.0
_DP_A51 = 19372.0 / 6561.0
_DP_A52 = -25360.0 / 2187.0
_DP_A53 = 64448.0 / 6561.0
_DP_A54 = -212.0 / 729.0
_DP_A61 = 9017.0 / 3168.0
_DP_A62 = -355.0 / 33.0
_DP_A63 = 46732.0 / 5247.0
_DP_A64 = 49.0 / 176.0
_DP_A65 = -5103.0 / 18656.0
_DP_A71 = 35.0 / 384.0
_DP_A73 = 500.0 / 1113.0
_DP_A74 = 125.0 / 192.0
_DP_A75 = -2187.0 / 6784.0
_DP_A76 = 11.0 / 84.0
# error estimate y1 - y1_hat
_DP_E1 = 71.0 / 57600.0
_DP_E3 = -71.0 / 16695.0
_DP_E4 = 71.0 / 1920.0
_DP_E5 = -17253.0 / 339200.0
_DP_E6 = 22.0 / 525.0
_DP_E7 = -1.0 / 40.0
# continuous extension (Hairer's dopri5.f, CONTD5)
_DP_D1 = -12715105075.0 / 11282082432.0
_DP_D3 = 87487479700.0 / 32700410799.0
_DP_D4 = -10690763975.0 / 1880347072.0
_DP_D5 = 701980252875.0 / 199316789632.0
_DP_D6 = -1453857185.0 / 822651844.0
_DP_D7 = 69997945.0 / 29380423.0
# step-size control (dopri5.f defaults)
_DP_SAFE = 0.9
_DP_BETA = 0.04
_DP_EXPO1 = 0.2 - 0.04 * 0.75
_DP_FACC1 = 5.0  # 1 / FAC1, FAC1 = 0.2: h_new >= h / 5
_DP_FACC2 = 0.1  # 1 / FAC2, FAC2 = 10: h_new <= 10 h
_DP_LOG_FACOLD_MIN = math.log(1.0e-4)
_DP_NSTIFF = 1000  # first stiffness test after this many accepted steps


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_work_size(sens):
    """Length of the ``work`` buffer of :func:`dopri5_solve` / :func:`dopri5_fixed`."""
    n = N_STATES
    size = n * (1 + n_sens_columns(sens))
    return 10 * size + n * n + n * N_PARAMS  # as checked in _dopri5_run


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_solve(t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out, work, info):
    """Adaptive Dormand-Prince 5(4) for the states alone; see the module docstring."""
    return _dopri5_run(MODEL_HANDLE, t0, t_eval, y0, p, 0, N_STATES, rtol, atol, first_step, 0.0,
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
    return _dopri5_run(MODEL_HANDLE, t0, t_eval, y0, p, k, nc, rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def dopri5_fixed(t0, t_eval, y0, p, sens, h, z_out, work, info):
    """Dormand-Prince 5 with constant step ``h > 0``; see the module docstring."""
    if not (h > 0.0) or t_eval.shape[0] == 0:
        return ST_BAD_INPUT
    n_max = min((t_eval[t_eval.shape[0] - 1] - t0) / h + 2.0, 9.0e18)
    if not (n_max >= 0.0):
        return ST_BAD_INPUT
    return _dopri5_run(MODEL_HANDLE, t0, t_eval, y0, p, n_sens_columns(sens), N_STATES, 1.0, 1.0, h, h,
                       int(n_max), z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def _dopri5_dense(q, h, z, z1, k1, k3, k4, k5, k6, k7):
    """Coefficients ``(ydiff, bspl, r4, r5)`` of component ``q`` of the continuous
    extension over an accepted step ``(t, t + h)``: with ``th = (s - t) / h``,
    ``y(s) = z + th * (ydiff + (1 - th) * (bspl + th * (r4 + (1 - th) * r5)))``."""
    ydiff = z1[q] - z[q]
    bspl = h * k1[q] - ydiff
    r4 = ydiff - h * k7[q] - bspl
    r5 = h * (_DP_D1 * k1[q] + _DP_D3 * k3[q] + _DP_D4 * k4[q]
              + _DP_D5 * k5[q] + _DP_D6 * k6[q] + _DP_D7 * k7[q])
    return ydiff, bspl, r4, r5


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _dopri5_run(mh, t0, t_eval, y0, p, k, nc, rtol, atol, h_init, h_fixed,
                max_steps, z_out, work, info, record, rec):
    # mh: the model handle (n, m, ...) through which aug_rhs calls the model (direct.py in a
    # model's module, pointer.py in the shared module); record: store each accepted step's
    # dense output in the rows of rec (see _dopri5_dense and kernels/adjoint.py); callers that
    # do not record pass False and any float64 2-D array (z_out), so the branch costs one test
    # per step
    n = mh[0]
    m = mh[1]
    size = n * (1 + k)
    n_out = t_eval.shape[0]
    for q in range(info.shape[0]):
        info[q] = 0.0
    info[INFO_T_REACHED] = t0
    if (y0.shape[0] != n or p.shape[0] != m or z_out.shape[0] != n_out
            or z_out.shape[1] != size or work.shape[0] < 10 * size + n * n + n * m):
        return ST_BAD_INPUT
    status = check_times(t0, t_eval)
    if status != ST_SUCCESS:
        return status
    k1 = work[0:size]
    k2 = work[size:2 * size]
    k3 = work[2 * size:3 * size]
    k4 = work[3 * size:4 * size]
    k5 = work[4 * size:5 * size]
    k6 = work[5 * size:6 * size]
    k7 = work[6 * size:7 * size]
    z = work[7 * size:8 * size]
    z1 = work[8 * size:9 * size]
    zs = work[9 * size:10 * size]
    off = 10 * size
    jy = work[off:off + n * n].reshape((n, n))
    off += n * n
    jp = work[off:off + n * m].reshape((n, m))
    # state parts, handed to the model kernels without copies
    k1y = k1[0:n]
    k2y = k2[0:n]
    k3y = k3[0:n]
    k4y = k4[0:n]
    k5y = k5[0:n]
    k6y = k6[0:n]
    k7y = k7[0:n]
    zy = z[0:n]
    z1y = z1[0:n]
    zsy = zs[0:n]

    init_aug_state(mh, y0, k, z)
    i_out = emit_initial_outputs(t0, t_eval, z, z_out)
    if i_out == n_out:
        return ST_SUCCESS
    t_end = t_eval[n_out - 1]
    aug_rhs(mh, t0, z, zy, p, k, jy, jp, k1, k1y)
    n_rhs = 1
    if not (all_finite(z, size) and all_finite(k1, size)):
        info[INFO_N_RHS] = n_rhs
        return ST_NON_FINITE
    fixed = h_fixed > 0.0
    hmax = t_end - t0
    if h_init > 0.0:
        h = min(h_init, hmax)
    else:
        h = initial_step(mh, t0, z, k1, p, k, nc, 5.0, hmax, rtol, atol,
                         z1, z1y, k2, k2y, jy, jp)
        n_rhs += 1

    t = t0
    lfacold = _DP_LOG_FACOLD_MIN  # log(facold), facold = max(err, 1e-4)
    hlamb = 0.0
    iasti = 0
    nonsti = 0
    n_acc = 0
    n_steps = 0
    n_rej = 0
    n_bad = 0
    reject = False
    while True:
        if n_steps >= max_steps:
            status = ST_MAX_STEPS
            break
        if not (0.1 * h > abs(t) * UROUND):
            status = ST_STEP_TOO_SMALL
            break
        last = False
        if t + 1.01 * h - t_end > 0.0:
            h = t_end - t
            last = True
        n_steps += 1

        for q in range(size):
            zs[q] = z[q] + h * _DP_A21 * k1[q]
        aug_rhs(mh, t + _DP_C2 * h, zs, zsy, p, k, jy, jp, k2, k2y)
        for q in range(size):
            zs[q] = z[q] + h * (_DP_A31 * k1[q] + _DP_A32 * k2[q])
        aug_rhs(mh, t + _DP_C3 * h, zs, zsy, p, k, jy, jp, k3, k3y)
        for q in range(size):
            zs[q] = z[q] + h * (_DP_A41 * k1[q] + _DP_A42 * k2[q] + _DP_A43 * k3[q])
        aug_rhs(mh, t + _DP_C4 * h, zs, zsy, p, k, jy, jp, k4, k4y)
        for q in range(size):
            zs[q] = z[q] + h * (_DP_A51 * k1[q] + _DP_A52 * k2[q] + _DP_A53 * k3[q]
                                + _DP_A54 * k4[q])
        aug_rhs(mh, t + _DP_C5 * h, zs, zsy, p, k, jy, jp, k5, k5y)
        for q in range(size):
            zs[q] = z[q] + h * (_DP_A61 * k1[q] + _DP_A62 * k2[q] + _DP_A63 * k3[q]
                                + _DP_A64 * k4[q] + _DP_A65 * k5[q])
        t_new = t_end if last else t + h
        aug_rhs(mh, t_new, zs, zsy, p, k, jy, jp, k6, k6y)
        for q in range(size):
            z1[q] = z[q] + h * (_DP_A71 * k1[q] + _DP_A73 * k3[q] + _DP_A74 * k4[q]
                                + _DP_A75 * k5[q] + _DP_A76 * k6[q])
        aug_rhs(mh, t_new, z1, z1y, p, k, jy, jp, k7, k7y)
        n_rhs += 6

        # mean square of the scaled error; err = sqrt(err2). The controller
        # works with log(err) so that a step costs one log and one exp
        # (instead of sqrt and two pow on the critical path of the step).
        err2 = 0.0
        if not fixed:
            for q in range(nc):
                sk = atol + rtol * max(abs(z[q]), abs(z1[q]))
                e = h * (_DP_E1 * k1[q] + _DP_E3 * k3[q] + _DP_E4 * k4[q]
                         + _DP_E5 * k5[q] + _DP_E6 * k6[q] + _DP_E7 * k7[q])
                err2 += (e / sk) * (e / sk)
            err2 = err2 / nc
        if not (math.isfinite(err2) and all_finite(z1, size) and all_finite(k7, size)):
            # overflow in a trial step: retry much shorter, give up if it persists
            n_rej += 1
            n_bad += 1
            if fixed or n_bad >= MAX_NONFINITE_REJECTS:
                status = ST_NON_FINITE
                break
            h *= 0.2
            reject = True
            continue
        n_bad = 0
        lerr = 0.5 * math.log(err2) if err2 > 0.0 else -745.0
        if err2 <= 1.0:
            # accepted: PI controller, fac = err**EXPO1 / facold**BETA / SAFE
            fac = math.exp(_DP_EXPO1 * lerr - _DP_BETA * lfacold) / _DP_SAFE
            fac = max(_DP_FACC2, min(_DP_FACC1, fac))
            hnew = h / fac
            lfacold = max(lerr, _DP_LOG_FACOLD_MIN)
            n_acc += 1
            if not fixed and (n_acc % _DP_NSTIFF == 0 or iasti > 0):
                stnum = 0.0
                stden = 0.0
                for q in range(n):
                    stnum += (k7[q] - k6[q]) ** 2
                    stden += (z1[q] - zs[q]) ** 2
                if stden > 0.0:
                    hlamb = h * math.sqrt(stnum / stden)
                if hlamb > 3.25:
                    nonsti = 0
                    iasti += 1
                    if iasti == 15:
                        status = ST_STIFF
                else:
                    nonsti += 1
                    if nonsti == 6:
                        iasti = 0
            if record:
                r = n_acc - 1
                rec[r, 0] = t
                rec[r, 1] = h
                rec[r, 2] = t_new
                for q in range(n):
                    ydiff, bspl, r4, r5 = _dopri5_dense(q, h, z, z1, k1, k3, k4, k5, k6, k7)
                    rec[r, 3 + q] = z[q]
                    rec[r, 3 + n + q] = ydiff
                    rec[r, 3 + 2 * n + q] = bspl
                    rec[r, 3 + 3 * n + q] = r4
                    rec[r, 3 + 4 * n + q] = r5
            j_end = i_out
            while j_end < n_out and (last or t_eval[j_end] <= t_new):
                j_end += 1
            if j_end > i_out:
                for q in range(size):
                    ydiff, bspl, r4, r5 = _dopri5_dense(q, h, z, z1, k1, k3, k4, k5, k6, k7)
                    for j in range(i_out, j_end):
                        if t_eval[j] >= t_new:
                            z_out[j, q] = z1[q]
                        else:
                            th = (t_eval[j] - t) / h
                            th1 = 1.0 - th
                            z_out[j, q] = z[q] + th * (ydiff + th1 * (bspl + th * (r4 + th1 * r5)))
                i_out = j_end
            for q in range(size):
                z[q] = z1[q]
                k1[q] = k7[q]
            t = t_new
            if last or status != ST_SUCCESS:
                break
            if fixed:
                continue
            if hnew > hmax:
                hnew = hmax
            if reject:
                hnew = min(hnew, h)
            reject = False
            h = hnew
        else:
            h = h / min(_DP_FACC1, math.exp(_DP_EXPO1 * lerr) / _DP_SAFE)
            reject = True
            n_rej += 1
    info[INFO_T_REACHED] = t
    info[INFO_N_STEPS] = n_steps
    info[INFO_N_REJECTED] = n_rej
    info[INFO_N_RHS] = n_rhs
    info[INFO_H_NEXT] = h
    return status
