"""The Runge-Kutta core shared by the ODE (``dopri.py``) and the delay (``dde.py``) kernels:
the Dormand-Prince 5(4) tableau (one copy), its stages, the scaled RMS error norm, the PI
step-size controller, the continuous extension, the stiffness test and the output window;
``rodas.py`` shares the error scale, the output window, the step-size limits and the retry after
an overflow.

Appended (after ``common.py``) to every generated module that holds an adaptive solver; see
``kernels/__init__.py``. The shared module keeps numba's inlining for this file alone (see
:func:`odeinfer.solve.shared.shared_module`): its helpers run several times a step. The helpers are ``inline="always"``: each kernel keeps its own loop (the
right-hand side differs: ``aug_rhs`` for ODEs, ``_dde_rhs`` for the method of steps), and the
arithmetic is written once, so both kernels run the same operations in the same order (a delay
model whose delays have no effect gives the ODE solver's bits; ``tests/test_rk_core.py``).

Tableau, error coefficients and continuous extension: J. R. Dormand and P. J. Prince, "A family
of embedded Runge-Kutta formulae", J. Comput. Appl. Math. 6 (1980) 19-26; dense output, PI
controller (beta = 0.04) and the stiffness test as in E. Hairer, S. P. Norsett, G. Wanner,
Solving Ordinary Differential Equations I, 2nd ed. (1993), Sec. II.5, II.6, IV.2 and the
accompanying code dopri5.f (coefficients cross-checked against it).

Vectors are the augmented states of ``common.py`` (``size = n * (1 + k)`` entries); ``k1`` ..
``k7`` the stage derivatives, ``z`` the state at ``t``, ``z1`` the 5th-order solution at
``t + h`` (its derivative is ``k7``: first same as last).
"""
import math

from numba import njit

# nodes c_i (c_6 = c_7 = 1)
RK_C2 = 1.0 / 5.0
RK_C3 = 3.0 / 10.0
RK_C4 = 4.0 / 5.0
RK_C5 = 8.0 / 9.0
# coefficients a_ij; row 7 is the 5th-order solution (b_i = a_7i, b_2 = b_7 = 0)
RK_A21 = 1.0 / 5.0
RK_A31 = 3.0 / 40.0
RK_A32 = 9.0 / 40.0
RK_A41 = 44.0 / 45.0
RK_A42 = -56.0 / 15.0
RK_A43 = 32.0 / 9.0
RK_A51 = 19372.0 / 6561.0
RK_A52 = -25360.0 / 2187.0
RK_A53 = 64448.0 / 6561.0
RK_A54 = -212.0 / 729.0
RK_A61 = 9017.0 / 3168.0
RK_A62 = -355.0 / 33.0
RK_A63 = 46732.0 / 5247.0
RK_A64 = 49.0 / 176.0
RK_A65 = -5103.0 / 18656.0
RK_A71 = 35.0 / 384.0
RK_A73 = 500.0 / 1113.0
RK_A74 = 125.0 / 192.0
RK_A75 = -2187.0 / 6784.0
RK_A76 = 11.0 / 84.0
# error estimate y1 - y1_hat (e_2 = 0)
_RK_E1 = 71.0 / 57600.0
_RK_E3 = -71.0 / 16695.0
_RK_E4 = 71.0 / 1920.0
_RK_E5 = -17253.0 / 339200.0
_RK_E6 = 22.0 / 525.0
_RK_E7 = -1.0 / 40.0
# continuous extension (Hairer's dopri5.f, CONTD5; d_2 = 0)
_RK_D1 = -12715105075.0 / 11282082432.0
_RK_D3 = 87487479700.0 / 32700410799.0
_RK_D4 = -10690763975.0 / 1880347072.0
_RK_D5 = 701980252875.0 / 199316789632.0
_RK_D6 = -1453857185.0 / 822651844.0
_RK_D7 = 69997945.0 / 29380423.0
# step-size control (dopri5.f defaults)
_RK_SAFE = 0.9
_RK_BETA = 0.04
_RK_EXPO1 = 0.2 - 0.04 * 0.75
_RK_FACC1 = 5.0  # 1 / FAC1, FAC1 = 0.2: h_new >= h / 5
_RK_FACC2 = 0.1  # 1 / FAC2, FAC2 = 10: h_new <= 10 h
#: ``log(facold)`` before the first accepted step (``facold = max(err, 1e-4)``)
RK_LOG_FACOLD_MIN = math.log(1.0e-4)
#: The first stiffness test comes after this many accepted steps.
RK_NSTIFF = 1000
#: Power-iteration steps of the stiffness test when the sensitivities control the step (``rk_stiffness``).
RK_STIFF_POWER = 8
#: Order of the step-size heuristic (``initial_step`` in ``common.py``).
RK_ORDER = 5.0


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_vectors(work, size, n):
    """The first ``10 * size`` entries of ``work`` as the vectors of a step,
    ``(k1, k2, k3, k4, k5, k6, k7, z, z1, zs)``, and their state parts (the views ``[:n]``,
    handed to the model kernels without copies) in the same order."""
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
    return ((k1, k2, k3, k4, k5, k6, k7, z, z1, zs),
            (k1[0:n], k2[0:n], k3[0:n], k4[0:n], k5[0:n], k6[0:n], k7[0:n], z[0:n], z1[0:n], zs[0:n]))


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_step_allowed(n_steps, max_steps, h, t):
    """Before a step: ``ST_MAX_STEPS`` after ``max_steps`` attempts, ``ST_STEP_TOO_SMALL`` when
    ``h`` no longer moves ``t`` (``0.1 h <= |t| * UROUND``), else ``ST_SUCCESS``."""
    if n_steps >= max_steps:
        return ST_MAX_STEPS
    if not (0.1 * h > abs(t) * UROUND):
        return ST_STEP_TOO_SMALL
    return ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_stage(i, size, z, h, k1, k2, k3, k4, k5, k6, zs):
    """``zs = z + h * sum_j a_ij k_j``: the state of stage ``i`` (2..6), or with ``i = 7`` the
    5th-order solution (``k2`` .. ``k6`` beyond the row are not read)."""
    if i == 2:
        for q in range(size):
            zs[q] = z[q] + h * RK_A21 * k1[q]
    elif i == 3:
        for q in range(size):
            zs[q] = z[q] + h * (RK_A31 * k1[q] + RK_A32 * k2[q])
    elif i == 4:
        for q in range(size):
            zs[q] = z[q] + h * (RK_A41 * k1[q] + RK_A42 * k2[q] + RK_A43 * k3[q])
    elif i == 5:
        for q in range(size):
            zs[q] = z[q] + h * (RK_A51 * k1[q] + RK_A52 * k2[q] + RK_A53 * k3[q]
                                + RK_A54 * k4[q])
    elif i == 6:
        for q in range(size):
            zs[q] = z[q] + h * (RK_A61 * k1[q] + RK_A62 * k2[q] + RK_A63 * k3[q]
                                + RK_A64 * k4[q] + RK_A65 * k5[q])
    else:
        for q in range(size):
            zs[q] = z[q] + h * (RK_A71 * k1[q] + RK_A73 * k3[q] + RK_A74 * k4[q]
                                + RK_A75 * k5[q] + RK_A76 * k6[q])


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_scaled(e, a, b, rtol, atol):
    """``e / (atol + rtol * max(|a|, |b|))``: an error component in units of the tolerance at
    the step's two ends ``a``, ``b``."""
    return e / (atol + rtol * max(abs(a), abs(b)))


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_err2(nc, z, z1, h, k1, k3, k4, k5, k6, k7, rtol, atol):
    """Mean square of the scaled error estimate over the first ``nc`` components (``err**2``,
    ``err`` the RMS norm; accept the step when ``err2 <= 1``)."""
    err2 = 0.0
    for q in range(nc):
        r = rk_scaled(h * (_RK_E1 * k1[q] + _RK_E3 * k3[q] + _RK_E4 * k4[q]
                           + _RK_E5 * k5[q] + _RK_E6 * k6[q] + _RK_E7 * k7[q]), z[q], z1[q], rtol, atol)
        err2 += r * r
    return err2 / nc


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_log_err(err2):
    """``log(err)`` from ``err2 = err**2`` (``-745`` for 0): the controller works with logs, so
    that a step costs one log and one exp instead of a sqrt and two pows."""
    return 0.5 * math.log(err2) if err2 > 0.0 else -745.0


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_accept(h, lerr, lfacold):
    """PI controller after an accepted step: ``(h_new, log(facold))`` with
    ``h_new = h / fac``, ``fac = err**EXPO1 / facold**BETA / SAFE`` clamped to ``[1/10, 5]``."""
    fac = math.exp(_RK_EXPO1 * lerr - _RK_BETA * lfacold) / _RK_SAFE
    fac = max(_RK_FACC2, min(_RK_FACC1, fac))
    return h / fac, max(lerr, RK_LOG_FACOLD_MIN)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_reject(h, lerr):
    """The shorter step to retry after a rejected one (at most 5 times shorter)."""
    return h / min(_RK_FACC1, math.exp(_RK_EXPO1 * lerr) / _RK_SAFE)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_next_step(hnew, h, hmax, reject):
    """The step after an accepted one: ``hnew`` capped by ``hmax``, and by ``h`` right after a
    rejection (no growth on the step that follows one)."""
    if hnew > hmax:
        hnew = hmax
    if reject:
        hnew = min(hnew, h)
    return hnew


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_nonfinite(h, n_bad, n_rej, fixed):
    """After a non-finite trial step (an overflow): ``(h, n_bad, n_rej, status)``, the step to
    retry 5 times shorter, or ``status == ST_NON_FINITE`` (``h`` unchanged) after
    ``MAX_NONFINITE_REJECTS`` such trials in a row or with a fixed step. ``n_bad`` counts the
    consecutive non-finite trials (reset it after a finite one), ``n_rej`` the rejected steps.
    (Kept out of the hot path: a helper returning the controller's results too made the step
    loop about 7% slower.)"""
    n_rej += 1
    n_bad += 1
    if fixed or n_bad >= MAX_NONFINITE_REJECTS:
        return h, n_bad, n_rej, ST_NON_FINITE
    return h * 0.2, n_bad, n_rej, ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_stiffness(n, nc, h, z1, zs, k6, k7, jy, v, hlamb, iasti, nonsti):
    """Hairer's stiffness test on the states: ``h |lambda| ~ h ||k7 - k6|| / ||z1 - zs||`` (stages
    6 and 7 share their time); returns ``(hlamb, iasti, nonsti, stiff)``, stiff after 15
    consecutive tests with ``h |lambda| > 3.25``.

    When the sensitivities control the step too (``nc > n``), a stiff mode can keep the step at
    the stability limit while it is barely excited in the states, so the secant sees other modes
    (Smith_BMCSystBiol2013: ``h |lambda|`` 3.31 at the limit, secant 1e-4 to 5e-3). The estimate is
    then also taken after :data:`RK_STIFF_POWER` power-iteration steps with ``J_y`` at ``z1``
    (``jy``, at hand in these kernels) from ``z1 - zs``: the ratio of the last two iterates (the
    first would be the secant itself), which tends to ``h rho(J_y)``. ``v`` is scratch of length
    ``2 n``."""
    stnum = 0.0
    stden = 0.0
    for q in range(n):
        stnum += (k7[q] - k6[q]) ** 2
        stden += (z1[q] - zs[q]) ** 2
    if stden > 0.0:
        hlamb = h * math.sqrt(stnum / stden)
        if nc > n:
            hlamb = max(hlamb, h * power_ratio(n, jy, z1, zs, v))
    stiff = False
    if hlamb > 3.25:
        nonsti = 0
        iasti += 1
        stiff = iasti == 15
    else:
        nonsti += 1
        if nonsti == 6:
            iasti = 0
    return hlamb, iasti, nonsti, stiff


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def power_ratio(n, jy, z1, zs, v):
    """``||J u|| / ||u||`` after :data:`RK_STIFF_POWER` - 1 power-iteration steps ``u <- J u / ||J u||``
    from ``u = z1 - zs`` (states); 0.0 if an iterate vanishes or overflows. ``v``: scratch (2 n,)."""
    for q in range(n):
        v[q] = z1[q] - zs[q]
    ratio = 0.0
    for _ in range(RK_STIFF_POWER):
        unorm = 0.0
        wnorm = 0.0
        for i in range(n):
            w = 0.0
            for j in range(n):
                w += jy[i, j] * v[j]
            v[n + i] = w
            unorm += v[i] ** 2
            wnorm += w ** 2
        if not (unorm > 0.0 and wnorm > 0.0 and math.isfinite(wnorm)):
            return 0.0
        ratio = math.sqrt(wnorm / unorm)
        scale = 1.0 / math.sqrt(wnorm)
        for i in range(n):
            v[i] = v[n + i] * scale
    return ratio


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_dense(q, h, z, z1, k1, k3, k4, k5, k6, k7):
    """Coefficients ``(ydiff, bspl, r4, r5)`` of component ``q`` of the continuous extension over
    an accepted step ``(t, t + h)``; see :func:`rk_dense_value`."""
    ydiff = z1[q] - z[q]
    bspl = h * k1[q] - ydiff
    r4 = ydiff - h * k7[q] - bspl
    r5 = h * (_RK_D1 * k1[q] + _RK_D3 * k3[q] + _RK_D4 * k4[q]
              + _RK_D5 * k5[q] + _RK_D6 * k6[q] + _RK_D7 * k7[q])
    return ydiff, bspl, r4, r5


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_dense_value(th, y0, ydiff, bspl, r4, r5):
    """The continuous extension at ``th = (s - t) / h`` from the state ``y0`` at ``t`` and the
    coefficients of :func:`rk_dense`:
    ``y(s) = y0 + th * (ydiff + (1 - th) * (bspl + th * (r4 + (1 - th) * r5)))``."""
    th1 = 1.0 - th
    return y0 + th * (ydiff + th1 * (bspl + th * (r4 + th1 * r5)))


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_store_dense(rec, r, off, ncomp, t, h, z, z1, k1, k3, k4, k5, k6, k7):
    """Row ``r`` of ``rec``: ``t``, ``h``, and from column ``off`` ``ncomp`` entries each of
    ``z``, ``ydiff``, ``bspl``, ``r4``, ``r5`` (five blocks of ``ncomp``), the continuous
    extension of the step ``(t, t + h)``."""
    rec[r, 0] = t
    rec[r, 1] = h
    for q in range(ncomp):
        ydiff, bspl, r4, r5 = rk_dense(q, h, z, z1, k1, k3, k4, k5, k6, k7)
        rec[r, off + q] = z[q]
        rec[r, off + ncomp + q] = ydiff
        rec[r, off + 2 * ncomp + q] = bspl
        rec[r, off + 3 * ncomp + q] = r4
        rec[r, off + 4 * ncomp + q] = r5


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_outputs_due(t_eval, i_out, last, t_new):
    """One past the last output time that the step ending at ``t_new`` covers (all on the last
    step); the step fills the rows ``i_out`` up to it."""
    j_end = i_out
    n_out = t_eval.shape[0]
    while j_end < n_out and (last or t_eval[j_end] <= t_new):
        j_end += 1
    return j_end


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def rk_emit(t_eval, i_out, last, size, t, h, t_new, z, z1, k1, k3, k4, k5, k6, k7, z_out):
    """The rows of ``z_out`` from ``i_out`` that the accepted step ``(t, t_new)`` covers: its end
    ``z1`` at or after ``t_new``, else the continuous extension. Returns the next row due."""
    j_end = rk_outputs_due(t_eval, i_out, last, t_new)
    if j_end > i_out:
        for q in range(size):
            ydiff, bspl, r4, r5 = rk_dense(q, h, z, z1, k1, k3, k4, k5, k6, k7)
            for j in range(i_out, j_end):
                if t_eval[j] >= t_new:
                    z_out[j, q] = z1[q]
                else:
                    z_out[j, q] = rk_dense_value((t_eval[j] - t) / h, z[q], ydiff, bspl, r4, r5)
    return j_end
