"""Delay differential equations: method of steps with Dormand-Prince 5(4),
dense-output interpolation of lagged values, breakpoint tracking and forward
sensitivities w.r.t. parameters, delays and history parameters.

Appended (after ``common.py`` and ``rk.py``, whose Runge-Kutta core it shares with the ODE
solver of ``dopri.py``) to the generated module of every model with delays; the model kernels have the DDE contract of
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


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
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


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
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


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
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


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
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
    for c in range(ncomp):
        base = 2 + c
        out[c] = rk_dense_value(th, buf[r, base], buf[r, base + size], buf[r, base + 2 * size],
                                buf[r, base + 3 * size], buf[r, base + 4 * size])
    return 0


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
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


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
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


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
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
        if dde_next_multi_index(cnt, np.int64(_DDE_BP_ORDER)):
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


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _dde_run(mh, t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps,
             z_out, work, buf, info):
    n = mh[0]
    m = mh[1]
    d = mh[2]
    q = phi.shape[0]
    size = n * (1 + k)
    n_out = t_eval.shape[0]
    status = start_solve(info, t0, t_eval)
    if (status != ST_SUCCESS or p.shape[0] != m or z_out.shape[0] != n_out or z_out.shape[1] != size
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
    if n_out == 0:
        return ST_SUCCESS
    t_end = t_eval[n_out - 1]
    eps = 64.0 * UROUND * max(abs(t0), abs(t_end), 1.0)
    # work layout
    (k1, k2, k3, k4, k5, k6, k7, z, z1, zs), (k1y, k2y, k3y, k4y, k5y, k6y, k7y, zy, z1y, zsy) = \
        rk_vectors(work, size, n)
    off = 10 * size
    jy = work_view(work, off, (n, n))
    off += n * n
    jl = work_view(work, off, (d, n, n))
    off += d * n * n
    jp = work_view(work, off, (n, m))
    off += n * m
    ylag = work_view(work, off, (n, d))
    off += n * d
    ylag2 = work_view(work, off, (n, d))
    off += n * d
    lz = work_view(work, off, (d, size))
    off += d * size
    yd = work_view(work, off, (d, n))
    off += d * n
    ys = work[off:off + n]
    fd = work[off + n:off + 2 * n]
    hx = work[off + 2 * n:off + 3 * n]
    hdx = work[off + 3 * n:off + 4 * n]
    off += 4 * n
    hg = work_view(work, off, (n, max(q, 1)))
    off += n * max(q, 1)
    bps = work[off:off + _dde_bp_capacity(mh)]
    w = (jy, jl, jp, ylag, lz, yd, ylag2, ys, fd, hx, hdx, hg)
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
    nbuf = np.int64(0)  # typed: a literal 0 would compile _dde_rhs and its callees once more
    i_out = emit_initial_outputs(t0, t_eval, z, z_out)
    if i_out == n_out:
        return ST_SUCCESS
    nbp = _dde_breakpoints(mh, t0, t_end, p, eps, bps)
    ibp = 0
    # _dde_rhs's side flag as np.bool_, not a literal True / False: numba compiles a callee once per
    # literal value it is passed (here _dde_rhs and everything it calls, twice: ~20% of the kernel's compile)
    stage, start = np.bool_(True), np.bool_(False)
    _dde_rhs(mh, t0, start, z, zy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k1, k1y)
    n_rhs = 1
    if not (all_finite(z, size) and all_finite(k1, size)):
        info[INFO_N_RHS] = n_rhs
        return ST_NON_FINITE
    hmax = min(t_end - t0, tau_min)
    if first_step > 0.0:
        h = min(first_step, hmax)
    else:  # Hairer's heuristic (initial_step of common.py) around the delay right-hand side
        h, dnf = initial_step_euler(z, k1, nc, hmax, rtol, atol, z1)
        _dde_rhs(mh, t0 + h, stage, z1, z1y, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k2, k2y)
        n_rhs += 1
        h = initial_step_finish(h, dnf, z, k1, k2, nc, RK_ORDER, hmax, rtol, atol, t0)

    t = t0
    lfacold = RK_LOG_FACOLD_MIN  # log(facold), facold = max(err, 1e-4)
    n_steps = n_rej = n_bad = 0  # attempted and rejected steps, consecutive non-finite trials
    reject = False  # the last trial step was rejected
    while True:
        status = rk_step_allowed(n_steps, max_steps, h, t)
        if status != ST_SUCCESS:
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
        rk_stage(2, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        _dde_rhs(mh, t + RK_C2 * h, stage, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k2, k2y)
        rk_stage(3, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        _dde_rhs(mh, t + RK_C3 * h, stage, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k3, k3y)
        rk_stage(4, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        _dde_rhs(mh, t + RK_C4 * h, stage, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k4, k4y)
        rk_stage(5, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        _dde_rhs(mh, t + RK_C5 * h, stage, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k5, k5y)
        rk_stage(6, size, z, h, k1, k2, k3, k4, k5, k6, zs)
        if last:
            t_new = t_end
        elif at_bp:
            t_new = bps[ibp]
        else:
            t_new = t + h
        _dde_rhs(mh, t_new, stage, zs, zsy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k6, k6y)
        rk_stage(7, size, z, h, k1, k2, k3, k4, k5, k6, z1)
        _dde_rhs(mh, t_new, stage, z1, z1y, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k7, k7y)
        n_rhs += 6
        err2 = rk_err2(nc, z, z1, h, k1, k3, k4, k5, k6, k7, rtol, atol)
        if not (math.isfinite(err2) and all_finite(z1, size) and all_finite(k7, size)):
            h, n_bad, n_rej, status = rk_nonfinite(h, n_bad, n_rej, False)
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
        rk_store_dense(buf, nbuf, 2, size, t, h, z, z1, k1, k3, k4, k5, k6, k7)  # the step's dense output
        nbuf += 1
        i_out = rk_emit(t_eval, i_out, last, size, t, h, t_new, z, z1, k1, k3, k4, k5, k6, k7, z_out)
        for a in range(size):
            z[a] = z1[a]
        t = t_new
        if last:
            break
        if at_bp:  # the right limit at a breakpoint: no FSAL
            _dde_rhs(mh, t, start, z, zy, p, k, t0, eps, hkind, phi, hb, hc, buf, nbuf, w, k1, k1y)
            n_rhs += 1
        else:
            for a in range(size):
                k1[a] = k7[a]
        h = rk_next_step(hnew, h, hmax, reject)
        reject = False
    write_info(info, t, n_steps, n_rej, n_rhs, h)
    info[DDE_INFO_N_STORED] = nbuf
    return status
