"""Delay differential equations: method of steps with Dormand-Prince 5(4),
dense-output interpolation of lagged values, breakpoint tracking and forward
sensitivities w.r.t. parameters, delays and history parameters.

Appended (after ``common.py``) to the generated module of every model with
delays; the model kernels have the DDE contract of
``odeinfer/model/codegen_dde.py`` (``model_f(t, y, ylag, p, out)``,
``model_jac_y``, ``model_jac_ylag``, ``model_jac_p``, ``N_DELAYS``,
``DELAY_PARAMS``).

Method
------
* Steps are capped at ``min(tau)``, so every lagged time of a stage lies in an
  accepted step (or in the history): no iteration is needed.
* The breakpoints ``t0 + sum_k n_k tau_k`` with ``sum_k n_k <= 5`` (where the
  derivatives of orders up to 6 may jump) are step ends: the solver lands on
  them exactly, so the 5th-order tableau keeps its order.
* Every accepted step stores the coefficients of the Dormand-Prince continuous
  extension (4th order, Hairer's CONTD5) of the augmented state in ``buf``;
  lagged values (and lagged sensitivities) are read from it.
* At a lagged time exactly on ``t0`` the side matters (the derivative of the
  solution may jump there): stages with ``c > 0`` use the left limit (the
  history), the first stage uses the right limit; after landing on a
  breakpoint the first stage is recomputed (no FSAL there).

Sensitivities
-------------
With ``Y_k(t) = y(t - tau_k)`` and the parameter vector ``theta = [p, phi]``
(model parameters, delays among them, then the ``q`` history parameters)::

    S' = J_y S + sum_k J_lag_k dY_k + [J_p | 0],
    dY_k[:, j] = S(t - tau_k)[:, j] - ydot(t - tau_k) [j == index of tau_k],

where for ``s < t0`` the history gives ``S(s) = [0 | dX0/dphi(u)]`` and
``ydot(s) = dX0/du(u)`` (``u = s - t0``): the term the DDE-Find paper's delay
gradient misses (see the spec ``seed-002-dde-find.md`` section 1.4). For
``s >= t0``, ``ydot(s) = f(s, y(s), y(s - tau), p)`` from the dense output.
``S(t0) = [0 | dX0/dphi(0)]`` since ``y(t0) = X0(0)``.

Augmented layout: as in ``common.py`` with ``k = m + q`` columns;
``z[n + i*k + j] = d y_i / d theta_j``.

Public kernels
--------------
``dde_work_size(k, q) -> int``, ``dde_breakpoint_capacity() -> int``
``dde_solve(t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol,
first_step, max_steps, z_out, work, buf, info) -> int``
    ``p`` (m,): model parameters (delays at ``DELAY_PARAMS``); ``hkind`` int
    history kind (0 constant, 1 affine, 2 periodic, 3 piecewise cubic);
    ``phi`` (q,) history parameters; ``hb`` (nb+1,) piecewise breaks relative
    to ``t0`` and ``hc`` (4, nb, n) its coefficients (dummies otherwise);
    ``k`` = 0 (states only) or ``m + q``; ``sens_err``: error control on the
    sensitivities too; ``z_out`` (n_out, n*(1+k)); ``buf`` (cap, 2 + 5*n*(1+k))
    out: the dense output of every accepted step (row: t_start, h,
    coefficients); ``info`` (DDE_INFO_SIZE,) out: ``INFO_*`` of ``common.py``
    plus ``DDE_INFO_N_STORED`` (rows of ``buf`` used) and
    ``DDE_INFO_BUF_FULL`` (1.0 when ``buf`` ran out: status ``ST_MAX_STEPS``).
``dde_history(kind, u, phi, hb, hc, x, dx, g)``: history values, ``d/du``
    and ``d/dphi`` (g (n, q)) at ``u <= 0``.
``dde_dense_eval(s, left, t0, kind, phi, hb, hc, buf, nbuf, ncomp, k, out, hx, hdx, hg) -> int``
    The augmented state at time ``s`` (first ``ncomp`` entries) from history or
    ``buf``; returns 1 when the history was used (then ``hdx`` = dX0/du).
"""
import math

import numpy as np
from numba import njit

DDE_INFO_N_STORED = 6
DDE_INFO_BUF_FULL = 7
DDE_INFO_SIZE = 8
_DDE_BP_ORDER = 5  # breakpoints sum_k n_k tau_k with sum n_k <= 5

_DDE_C2 = 1.0 / 5.0
_DDE_C3 = 3.0 / 10.0
_DDE_C4 = 4.0 / 5.0
_DDE_C5 = 8.0 / 9.0
_DDE_A21 = 1.0 / 5.0
_DDE_A31 = 3.0 / 40.0
_DDE_A32 = 9.0 / 40.0
_DDE_A41 = 44.0 / 45.0
_DDE_A42 = -56.0 / 15.0
_DDE_A43 = 32.0 / 9.0
_DDE_A51 = 19372.0 / 6561.0
_DDE_A52 = -25360.0 / 2187.0
_DDE_A53 = 64448.0 / 6561.0
_DDE_A54 = -212.0 / 729.0
_DDE_A61 = 9017.0 / 3168.0
_DDE_A62 = -355.0 / 33.0
_DDE_A63 = 46732.0 / 5247.0
_DDE_A64 = 49.0 / 176.0
_DDE_A65 = -5103.0 / 18656.0
_DDE_A71 = 35.0 / 384.0
_DDE_A73 = 500.0 / 1113.0
_DDE_A74 = 125.0 / 192.0
_DDE_A75 = -2187.0 / 6784.0
_DDE_A76 = 11.0 / 84.0
_DDE_E1 = 71.0 / 57600.0
_DDE_E3 = -71.0 / 16695.0
_DDE_E4 = 71.0 / 1920.0
_DDE_E5 = -17253.0 / 339200.0
_DDE_E6 = 22.0 / 525.0
_DDE_E7 = -1.0 / 40.0
_DDE_D1 = -12715105075.0 / 11282082432.0
_DDE_D3 = 87487479700.0 / 32700410799.0
_DDE_D4 = -10690763975.0 / 1880347072.0
_DDE_D5 = 701980252875.0 / 199316789632.0
_DDE_D6 = -1453857185.0 / 822651844.0
_DDE_D7 = 69997945.0 / 29380423.0
_DDE_SAFE = 0.9
_DDE_BETA = 0.04
_DDE_EXPO1 = 0.2 - 0.04 * 0.75
_DDE_FACC1 = 5.0
_DDE_FACC2 = 0.1
_DDE_LOG_FACOLD_MIN = math.log(1.0e-4)


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_breakpoint_capacity():
    """Number of multi-indices ``n`` with ``sum(n) <= 5`` over ``N_DELAYS`` delays."""
    return _dde_bp_capacity(MODEL_HANDLE)


@njit(cache=True, error_model="numpy", fastmath=False)
def _dde_bp_capacity(mh):
    c = 1
    for i in range(1, mh[2] + 1):
        c = c * (_DDE_BP_ORDER + i) // i
    return c


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_work_size(k, q):
    """Length of the ``work`` buffer of :func:`dde_solve` for ``k`` sensitivity columns."""
    return _dde_work_size(MODEL_HANDLE, k, q)


@njit(cache=True, error_model="numpy", fastmath=False)
def _dde_work_size(mh, k, q):
    n = mh[0]
    m = mh[1]
    d = mh[2]
    size = n * (1 + k)
    return (10 * size + n * n + d * n * n + n * m + 2 * n * d + d * size + d * n
            + 4 * n + n * max(q, 1) + _dde_bp_capacity(mh))


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_history(kind, u, phi, hb, hc, x, dx, g):
    """History ``X0(u)`` (x), ``dX0/du`` (dx) and ``dX0/dphi`` (g, (n, q)) at ``u = s - t0``."""
    n = x.shape[0]
    q = phi.shape[0]
    for i in range(n):
        for j in range(q):
            g[i, j] = 0.0
    if kind == 0:
        for i in range(n):
            x[i] = phi[i]
            dx[i] = 0.0
            g[i, i] = 1.0
    elif kind == 1:
        for i in range(n):
            a = phi[i]
            x[i] = a * u + phi[n + i]
            dx[i] = a
            g[i, i] = u
            g[i, n + i] = 1.0
    elif kind == 2:
        for i in range(n):
            amp = phi[i]
            w = phi[n + i]
            sn = math.sin(w * u)
            cs = math.cos(w * u)
            x[i] = amp * sn + phi[2 * n + i]
            dx[i] = amp * w * cs
            g[i, i] = sn
            g[i, n + i] = amp * u * cs
            g[i, 2 * n + i] = 1.0
    else:
        lo = dde_last_at_or_below(hb, hb.shape[0] - 2, u)  # the piece holding u
        r = u - hb[lo]
        for i in range(n):
            c0 = hc[0, lo, i]
            c1 = hc[1, lo, i]
            c2 = hc[2, lo, i]
            c3 = hc[3, lo, i]
            x[i] = ((c0 * r + c1) * r + c2) * r + c3
            dx[i] = (3.0 * c0 * r + 2.0 * c1) * r + c2


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_last_at_or_below(a, hi, x):
    """Largest ``i`` in ``[0, hi]`` with ``a[i] <= x`` (``a`` sorted; 0 if none), by bisection."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid] <= x:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True, error_model="numpy", fastmath=False)
def _dde_find_row(buf, nbuf, s, left):
    """Row of ``buf`` whose step holds ``s`` (left: the step ending at ``s`` if ``s`` is a step start)."""
    lo = 0
    hi = nbuf - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ts = buf[mid, 0]
        if ts < s or (ts == s and not left):
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_dense_eval(s, left, t0, eps, kind, phi, hb, hc, buf, nbuf, ncomp, k, out, hx, hdx, hg):
    """Augmented state at ``s`` into ``out[:ncomp]``; returns 1 if from the history (``hdx`` = dX0/du)."""
    n = hx.shape[0]
    if nbuf == 0 or s < t0 - eps or (left and s <= t0 + eps):
        u = min(s - t0, 0.0)
        dde_history(kind, u, phi, hb, hc, hx, hdx, hg)
        for i in range(n):
            out[i] = hx[i]
        if ncomp > n:  # sensitivities: k = m + q columns
            q = phi.shape[0]
            m = k - q
            for i in range(n):
                row = n + i * k
                for j in range(m):
                    out[row + j] = 0.0
                for j in range(q):
                    out[row + m + j] = hg[i, j]
        return 1
    r = _dde_find_row(buf, nbuf, s, left)
    ts = buf[r, 0]
    h = buf[r, 1]
    size = n * (1 + k)
    th = (s - ts) / h
    th1 = 1.0 - th
    for c in range(ncomp):
        base = 2 + c
        out[c] = buf[r, base] + th * (buf[r, base + size] + th1 * (buf[r, base + 2 * size] + th * (
            buf[r, base + 3 * size] + th1 * buf[r, base + 4 * size])))
    return 0


@njit(cache=True, error_model="numpy", fastmath=False)
def _dde_ydot(mh, s, left, t0, eps, p, kind, phi, hb, hc, buf, nbuf, k, ys, ylag2, fd, hx, hdx, hg):
    """``ydot(s)`` into ``fd``: the history's ``dX0/du`` or ``f`` at ``s`` from the dense output."""
    n = mh[0]
    if dde_dense_eval(s, left, t0, eps, kind, phi, hb, hc, buf, nbuf, n, k, ys, hx, hdx, hg) == 1:
        for i in range(n):
            fd[i] = hdx[i]
        return
    for kk in range(mh[2]):
        dde_dense_eval(s - p[mh[3][kk]], left, t0, eps, kind, phi, hb, hc, buf, nbuf, n, k,
                       hx, hx, hdx, hg)
        for i in range(n):
            ylag2[i, kk] = hx[i]
    mh_dde_f(mh, s, ys, ylag2, p, fd)


@njit(cache=True, error_model="numpy", fastmath=False)
def _dde_rhs(mh, t, left, z, zy, p, k, t0, eps, kind, phi, hb, hc, buf, nbuf, w, out, outy):
    """Augmented right-hand side at stage time ``t`` (scratch arrays in the tuple ``w``)."""
    n = mh[0]
    m = mh[1]
    d = mh[2]
    dpar = mh[3]
    jy, jl, jp, ylag, lz, yd, ylag2, ys, fd, hx, hdx, hg = w
    ncomp = n * (1 + k)
    for kk in range(d):
        lzk = lz[kk]
        dde_dense_eval(t - p[dpar[kk]], left, t0, eps, kind, phi, hb, hc, buf, nbuf, ncomp, k,
                       lzk, hx, hdx, hg)
        for i in range(n):
            ylag[i, kk] = lzk[i]
    mh_dde_f(mh, t, zy, ylag, p, outy)
    if k == 0:
        return
    mh_dde_jac_y(mh, t, zy, ylag, p, jy)
    mh_dde_jac_ylag(mh, t, zy, ylag, p, jl)
    mh_dde_jac_p(mh, t, zy, ylag, p, jp)
    for kk in range(d):
        _dde_ydot(mh, t - p[dpar[kk]], left, t0, eps, p, kind, phi, hb, hc, buf, nbuf, k,
                  ys, ylag2, fd, hx, hdx, hg)
        for i in range(n):
            yd[kk, i] = fd[i]
    for i in range(n):
        row = n + i * k
        for j in range(k):
            acc = jp[i, j] if j < m else 0.0
            for l in range(n):
                acc += jy[i, l] * z[n + l * k + j]
            for kk in range(d):
                lzk = lz[kk]
                for l in range(n):
                    acc += jl[kk, i, l] * lzk[n + l * k + j]
            out[row + j] = acc
        for kk in range(d):
            acc = 0.0
            for l in range(n):
                acc += jl[kk, i, l] * yd[kk, l]
            out[row + dpar[kk]] -= acc


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_next_multi_index(cnt, order):
    """Advance ``cnt`` (one count per delay, each in 0..order) like an odometer; True once it
    has wrapped around to all zeros (every multi-index visited)."""
    pos = 0
    while pos < cnt.shape[0]:
        cnt[pos] += 1
        if cnt[pos] <= order:
            return False
        cnt[pos] = 0
        pos += 1
    return True


@njit(cache=True, error_model="numpy", fastmath=False)
def _dde_breakpoints(mh, t0, t_end, p, eps, bps):
    """Sorted distinct breakpoints in ``(t0, t_end)``; returns their number."""
    d = mh[2]
    cnt = np.zeros(d, dtype=np.int64)
    nbp = 0
    while True:
        tot = 0
        val = 0.0
        for kk in range(d):
            tot += cnt[kk]
            val += cnt[kk] * p[mh[3][kk]]
        if 0 < tot <= _DDE_BP_ORDER and t0 + val < t_end - eps:
            bps[nbp] = t0 + val
            nbp += 1
        if dde_next_multi_index(cnt, _DDE_BP_ORDER):
            break
    for a in range(1, nbp):  # insertion sort
        v = bps[a]
        b = a - 1
        while b >= 0 and bps[b] > v:
            bps[b + 1] = bps[b]
            b -= 1
        bps[b + 1] = v
    out = 0
    for a in range(nbp):
        if out == 0 or bps[a] - bps[out - 1] > eps:
            bps[out] = bps[a]
            out += 1
    return out


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_solve(t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps,
              z_out, work, buf, info):
    """Method of steps with Dormand-Prince 5(4); see the module docstring."""
    # no fast-math contraction: the same bits as ptr_dde_solve of the shared module
    return _dde_run(MODEL_HANDLE, t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step,
                    max_steps, z_out, work, buf, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def _dde_run(mh, t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps,
             z_out, work, buf, info):
    n = mh[0]
    m = mh[1]
    d = mh[2]
    q = phi.shape[0]
    size = n * (1 + k)
    n_out = t_eval.shape[0]
    for a in range(info.shape[0]):
        info[a] = 0.0
    info[INFO_T_REACHED] = t0
    if (p.shape[0] != m or z_out.shape[0] != n_out or z_out.shape[1] != size
            or (k != 0 and k != m + q) or work.shape[0] < _dde_work_size(mh, k, q)
            or buf.shape[1] != 2 + 5 * size or buf.shape[0] < 1 or hkind < 0 or hkind > 3
            or (hkind == 0 and q != n) or (hkind == 1 and q != 2 * n) or (hkind == 2 and q != 3 * n)
            or (hkind == 3 and (q != 0 or hc.shape[2] != n or hb.shape[0] != hc.shape[1] + 1))):
        return ST_BAD_INPUT
    tau_min = np.inf
    for kk in range(d):
        tau = p[mh[3][kk]]
        if not (tau > 0.0 and math.isfinite(tau)):
            return ST_BAD_INPUT
        tau_min = min(tau_min, tau)
    status = check_times(t0, t_eval)
    if status != ST_SUCCESS:
        return status
    if n_out == 0:
        return ST_SUCCESS
    t_end = t_eval[n_out - 1]
    eps = 64.0 * UROUND * max(abs(t0), abs(t_end), 1.0)
    # work layout
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
    jl = work[off:off + d * n * n].reshape((d, n, n))
    off += d * n * n
    jp = work[off:off + n * m].reshape((n, m))
    off += n * m
    ylag = work[off:off + n * d].reshape((n, d))
    off += n * d
    ylag2 = work[off:off + n * d].reshape((n, d))
    off += n * d
    lz = work[off:off + d * size].reshape((d, size))
    off += d * size
    yd = work[off:off + d * n].reshape((d, n))
    off += d * n
    ys = work[off:off + n]
    fd = work[off + n:off + 2 * n]
    hx = work[off + 2 * n:off + 3 * n]
    hdx = work[off + 3 * n:off + 4 * n]
    off += 4 * n
    hg = work[off:off + n * max(q, 1)].reshape((n, max(q, 1)))
    off += n * max(q, 1)
    bps = work[off:off + _dde_bp_capacity(mh)]
    w = (jy, jl, jp, ylag, lz, yd, ylag2, ys, fd, hx, hdx, hg)
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
    nc = size if (sens_err and k > 0) else n

    # initial augmented state from the history at u = 0
    dde_history(hkind, 0.0, phi, hb, hc, hx, hdx, hg)
    for a in range(size):
        z[a] = 0.0
    for i in range(n):
        z[i] = hx[i]
        if k > 0:
            for j in range(q):
                z[n + i * k + m + j] = hg[i, j]
    nbuf = 0
    i_out = emit_initial_outputs(t0, t_eval, z, z_out)
    if i_out == n_out:
        return ST_SUCCESS
    nbp = _dde_breakpoints(mh, t0, t_end, p, eps, bps)
    ibp = 0
    _dde_rhs(mh, t0, False, z, zy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k1, k1y)
    n_rhs = 1
    if not (all_finite(z, size) and all_finite(k1, size)):
        info[INFO_N_RHS] = n_rhs
        return ST_NON_FINITE
    hmax = min(t_end - t0, tau_min)
    if first_step > 0.0:
        h = min(first_step, hmax)
    else:  # Hairer's heuristic (HINIT) on the states (and sensitivities)
        dnf = 0.0
        dny = 0.0
        for a in range(nc):
            sk = atol + rtol * abs(z[a])
            dnf += (k1[a] / sk) ** 2
            dny += (z[a] / sk) ** 2
        h = 1.0e-6 if (dnf <= 1e-10 or dny <= 1e-10) else math.sqrt(dny / dnf) * 0.01
        h = min(h, hmax)
        for a in range(size):
            z1[a] = z[a] + h * k1[a]
        _dde_rhs(mh, t0 + h, True, z1, z1y, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k2, k2y)
        n_rhs += 1
        der2 = 0.0
        for a in range(nc):
            sk = atol + rtol * abs(z[a])
            der2 += ((k2[a] - k1[a]) / sk) ** 2
        der2 = math.sqrt(der2) / h
        der12 = max(abs(der2), math.sqrt(dnf))
        if not math.isfinite(der12):
            h = min(h, 1.0e-6 * max(1.0, hmax))
        else:
            h1 = max(1.0e-6, h * 1.0e-3) if der12 <= 1e-15 else (0.01 / der12) ** 0.2
            h = min(100.0 * h, h1, hmax)

    t = t0
    lfacold = _DDE_LOG_FACOLD_MIN
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
        if nbuf >= buf.shape[0]:
            info[DDE_INFO_BUF_FULL] = 1.0
            status = ST_MAX_STEPS
            break
        while ibp < nbp and bps[ibp] <= t + eps:
            ibp += 1
        last = False
        at_bp = False
        # land exactly on t_end or the next breakpoint (never beyond min(tau):
        # every lagged stage time must lie in an accepted step)
        if t + 1.01 * h - t_end > 0.0 and t_end - t <= hmax:
            h = t_end - t
            last = True
        if ibp < nbp and t + 1.01 * h >= bps[ibp] and bps[ibp] - t <= hmax:
            h = bps[ibp] - t
            at_bp = True
            last = False
        n_steps += 1
        for a in range(size):
            zs[a] = z[a] + h * _DDE_A21 * k1[a]
        _dde_rhs(mh, t + _DDE_C2 * h, True, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k2, k2y)
        for a in range(size):
            zs[a] = z[a] + h * (_DDE_A31 * k1[a] + _DDE_A32 * k2[a])
        _dde_rhs(mh, t + _DDE_C3 * h, True, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k3, k3y)
        for a in range(size):
            zs[a] = z[a] + h * (_DDE_A41 * k1[a] + _DDE_A42 * k2[a] + _DDE_A43 * k3[a])
        _dde_rhs(mh, t + _DDE_C4 * h, True, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k4, k4y)
        for a in range(size):
            zs[a] = z[a] + h * (_DDE_A51 * k1[a] + _DDE_A52 * k2[a] + _DDE_A53 * k3[a] + _DDE_A54 * k4[a])
        _dde_rhs(mh, t + _DDE_C5 * h, True, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k5, k5y)
        for a in range(size):
            zs[a] = z[a] + h * (_DDE_A61 * k1[a] + _DDE_A62 * k2[a] + _DDE_A63 * k3[a]
                                + _DDE_A64 * k4[a] + _DDE_A65 * k5[a])
        if last:
            t_new = t_end
        elif at_bp:
            t_new = bps[ibp]
        else:
            t_new = t + h
        _dde_rhs(mh, t_new, True, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k6, k6y)
        for a in range(size):
            z1[a] = z[a] + h * (_DDE_A71 * k1[a] + _DDE_A73 * k3[a] + _DDE_A74 * k4[a]
                                + _DDE_A75 * k5[a] + _DDE_A76 * k6[a])
        _dde_rhs(mh, t_new, True, z1, z1y, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k7, k7y)
        n_rhs += 6
        err2 = 0.0
        for a in range(nc):
            sk = atol + rtol * max(abs(z[a]), abs(z1[a]))
            e = h * (_DDE_E1 * k1[a] + _DDE_E3 * k3[a] + _DDE_E4 * k4[a]
                     + _DDE_E5 * k5[a] + _DDE_E6 * k6[a] + _DDE_E7 * k7[a])
            err2 += (e / sk) * (e / sk)
        err2 = err2 / nc
        if not (math.isfinite(err2) and all_finite(z1, size) and all_finite(k7, size)):
            n_rej += 1
            n_bad += 1
            if n_bad >= MAX_NONFINITE_REJECTS:
                status = ST_NON_FINITE
                break
            h *= 0.2
            reject = True
            continue
        n_bad = 0
        lerr = 0.5 * math.log(err2) if err2 > 0.0 else -745.0
        if err2 <= 1.0:
            fac = math.exp(_DDE_EXPO1 * lerr - _DDE_BETA * lfacold) / _DDE_SAFE
            fac = max(_DDE_FACC2, min(_DDE_FACC1, fac))
            hnew = h / fac
            lfacold = max(lerr, _DDE_LOG_FACOLD_MIN)
            # store the dense output of the step
            buf[nbuf, 0] = t
            buf[nbuf, 1] = h
            for a in range(size):
                ydiff = z1[a] - z[a]
                bspl = h * k1[a] - ydiff
                buf[nbuf, 2 + a] = z[a]
                buf[nbuf, 2 + size + a] = ydiff
                buf[nbuf, 2 + 2 * size + a] = bspl
                buf[nbuf, 2 + 3 * size + a] = ydiff - h * k7[a] - bspl
                buf[nbuf, 2 + 4 * size + a] = h * (_DDE_D1 * k1[a] + _DDE_D3 * k3[a] + _DDE_D4 * k4[a]
                                                   + _DDE_D5 * k5[a] + _DDE_D6 * k6[a] + _DDE_D7 * k7[a])
            nbuf += 1
            j_end = i_out
            while j_end < n_out and (last or t_eval[j_end] <= t_new):
                j_end += 1
            if j_end > i_out:
                r = nbuf - 1
                for a in range(size):
                    c0 = buf[r, 2 + a]
                    c1 = buf[r, 2 + size + a]
                    c2 = buf[r, 2 + 2 * size + a]
                    c3 = buf[r, 2 + 3 * size + a]
                    c4 = buf[r, 2 + 4 * size + a]
                    for jj in range(i_out, j_end):
                        if t_eval[jj] >= t_new:
                            z_out[jj, a] = z1[a]
                        else:
                            th = (t_eval[jj] - t) / h
                            th1 = 1.0 - th
                            z_out[jj, a] = c0 + th * (c1 + th1 * (c2 + th * (c3 + th1 * c4)))
                i_out = j_end
            for a in range(size):
                z[a] = z1[a]
            t = t_new
            if last:
                break
            if at_bp:  # the right limit at a breakpoint: no FSAL
                _dde_rhs(mh, t, False, z, zy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k1, k1y)
                n_rhs += 1
            else:
                for a in range(size):
                    k1[a] = k7[a]
            hnew = min(hnew, hmax)
            if reject:
                hnew = min(hnew, h)
            reject = False
            h = hnew
        else:
            h = h / min(_DDE_FACC1, math.exp(_DDE_EXPO1 * lerr) / _DDE_SAFE)
            reject = True
            n_rej += 1
    info[INFO_T_REACHED] = t
    info[INFO_N_STEPS] = n_steps
    info[INFO_N_REJECTED] = n_rej
    info[INFO_N_RHS] = n_rhs
    info[INFO_H_NEXT] = h
    info[DDE_INFO_N_STORED] = nbuf
    return status
