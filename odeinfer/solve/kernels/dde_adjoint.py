"""Continuous adjoint of a DDE: gradient of an integral loss (DDE-Find, Stephany 2024,
Theorem 1 plus the history term of the spec ``seed-002-dde-find.md`` section 1.4) and
vector-Jacobian products of the solution at output times (point sources).

Appended after ``dde.py`` to the module of every model with delays, and to the shared module
(``pointer.py``'s ``ptr_dde_adjoint_vjp`` and ``ptr_dde_adjoint_gradient``): the private kernels take
the delay model handle ``mh`` of ``dde.py`` and call the model through ``mh_dde_jac_y``,
``mh_dde_jac_ylag``, ``mh_dde_jac_p`` (and ``mh_dde_f``). Functional::

    L = int_{t0}^{T} sum_i w_i (x_i(t) - target_i(t))^2 dt          (dde_adjoint_gradient)
    L = sum_r g_r . x(t_r),  T = the last t_r with g_r != 0        (dde_adjoint_vjp)

``target`` a piecewise cubic (scipy ``PPoly`` layout, absolute time). Adjoint
(``a = -lambda`` of the paper, ``a(T+) = 0``)::

    a'(t) = -J_y(t)^T a(t) - grad l(t) - sum_k 1[t + tau_k < T] J_lag_k(t + tau_k)^T a(t + tau_k),
    a(t_r-) = a(t_r+) + g_r   (jump at each output time, going backward).

Gradient, ``theta = [p, phi]``, with ``D_k[:, j]`` the direct dependence of
``x(t - tau_k)`` on ``theta_j`` (history: ``dX0/dphi``; delay ``tau_k``: ``-xdot(t - tau_k)``,
which for ``t - tau_k < t0`` is ``-dX0/du``: the term the paper drops)::

    dL/dtheta_j = a(t0-)^T dX0/dtheta_j(0) + int_{t0}^{T} a^T (J_p[:, j] + sum_k J_lag_k D_k[:, j]) dt.

``paper = True`` drops the history part of the delay term (eq. 5 of the paper).

Discretisation: classical RK4 backward; the forward solution comes from the dense
output ``buf`` of ``dde_solve`` (states only, ``k = 0``); advanced adjoint values from
cubic Hermite interpolation of the stored nodes. The loss and gradient integrals are
integrated with the adjoint (same RK4), so everything is 4th order in the step.

* ``dde_adjoint_gradient``: the grid ``t0 + j h``, ``h = min(tau) / nsub`` (last step
  shortened to end on ``T``), so breakpoints ``t0 + n tau`` of one delay are nodes.
* ``dde_adjoint_vjp``: the forward solver's accepted steps, each split into ``nsub``
  equal parts (the adaptive mesh resolves the time scales, so the adjoint's error follows
  the forward tolerance), plus every point where the adjoint or the forward solution
  loses smoothness: ``t0``, the forward breakpoints ``t0 + sum_k n_k tau_k`` (``sum n_k <= 5``),
  the output times ``t_r`` (jumps of ``a``) and their images ``t_r - sum_k n_k tau_k``
  (``sum n_k <= 3``: kinks of ``a`` and higher); points closer than
  ``2e-10 max(1, |t0|, |T|)`` are merged (an output time keeps its exact value), gaps
  longer than ``min(tau)`` are split. At a node the adjoint has a left (``a(t-)``, after
  the jump) and a right value (and derivative, recomputed where ``a'`` jumps); the Hermite
  interpolant and the lookups of advanced values take the side of the stage (``left`` =
  limit from below), so the jumps are exact.

``dde_adjoint_gradient(t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub,
paper, grad, anodes, adnodes, work) -> int``: fills ``grad`` (m + q + 1,):
the gradient, then the loss value (last entry). ``anodes``, ``adnodes`` (N + 1, n)
with ``N = ceil((T - t0) / h)``; ``work`` at least ``dde_adjoint_work_size(q)``.

``dde_adjoint_vjp(t0, t_obs, g, p, hkind, phi, hb, hc, buf, nbuf, nsub, grad) -> int``:
``t_obs`` (N_obs,) sorted, ``>= t0`` (the solve's output times), ``g`` (N_obs, n) finite
weights; fills ``grad`` (m + q,) with ``sum_r g_r^T dx(t_r)/dtheta`` (NaN on failure).
``buf``/``nbuf``: the dense output of the states-only ``dde_solve`` (``k = 0``) for these
output times; ``nsub`` >= 1 RK4 steps per forward step. Allocates its node arrays.
"""
import math

import numpy as np
from numba import njit

_DDEADJ_BP_ORDER = 3  # adjoint nodes t_r - sum_k n_k tau_k with sum n_k <= 3
_DDEADJ_SNAP = 1e-10  # node merge / side-snapping tolerance, relative to max(1, |t0|, |T|)


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_adjoint_work_size(q):
    """Length of the ``work`` buffer of :func:`dde_adjoint_gradient` for ``q`` history parameters."""
    return _ddeadj_work_size(MODEL_HANDLE, q)


@njit(cache=True, error_model="numpy", fastmath=False)
def _ddeadj_work_size(mh, q):
    n = mh[0]
    m = mh[1]
    d = mh[2]
    kq = max(q, 1)
    return (2 * n * d + 9 * n + 2 * n * n + 2 * d * n * n + n * m + d * n + d * n * kq + n * kq
            + 4 * (n + m + q + 1) + 2 * (n + m + q + 1) + d)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _ddeadj_hermite(s, t0, h, nnode, t_end, anodes, adnodes, out):
    n = out.shape[0]
    if s >= t_end:
        for i in range(n):
            out[i] = 0.0
        return
    j = int((s - t0) / h)
    if j > nnode - 2:
        j = nnode - 2
    if j < 0:
        j = 0
    ta = t0 + j * h
    tb = t_end if j + 1 == nnode - 1 else t0 + (j + 1) * h
    hh = tb - ta
    th = (s - ta) / hh
    h00 = (1.0 + 2.0 * th) * (1.0 - th) ** 2
    h10 = th * (1.0 - th) ** 2
    h01 = th * th * (3.0 - 2.0 * th)
    h11 = th * th * (th - 1.0)
    for i in range(n):
        out[i] = (h00 * anodes[j, i] + h10 * hh * adnodes[j, i] + h01 * anodes[j + 1, i]
                  + h11 * hh * adnodes[j + 1, i])


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _ddeadj_hermite_nodes(s, left, snap, tnodes, nnode, anodes, adnodes, adright, gnode, jflag, out):
    """``a(s-)`` (left) or ``a(s+)`` on a non-uniform grid with jumps; returns False when it is 0 (s >= T)."""
    n = out.shape[0]
    t_end = tnodes[nnode - 1]
    if s > t_end + snap or (not left and s >= t_end - snap) or nnode < 2:
        return False
    j = dde_last_at_or_below(tnodes, nnode - 2, s)  # last interval with tnodes[j] <= s
    ta = tnodes[j]
    tb = tnodes[j + 1]
    if left and j > 0 and s - ta <= snap:
        j -= 1
        tb = ta
        ta = tnodes[j]
        th = 1.0
    elif not left and tb - s <= snap:
        j += 1
        ta = tb
        tb = tnodes[j + 1]
        th = 0.0
    else:
        th = min(max((s - ta) / (tb - ta), 0.0), 1.0)
    hh = tb - ta
    h00 = (1.0 + 2.0 * th) * (1.0 - th) ** 2
    h10 = th * (1.0 - th) ** 2
    h01 = th * th * (3.0 - 2.0 * th)
    h11 = th * th * (th - 1.0)
    for i in range(n):
        d0 = adright[j, i] if jflag[j] != 0 else adnodes[j, i]
        out[i] = (h00 * anodes[j, i] + h10 * hh * d0 + h01 * (anodes[j + 1, i] + gnode[j + 1, i])
                  + h11 * hh * adnodes[j + 1, i])
    return True


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def _ddeadj_rhs(mh, t, left, a, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
             anodes, adnodes, w, out, tnodes, adright, gnode, jflag, snap):
    """d/dt of the augmented backward state [a (n), integrands (m + q), l] at ``t``.

    ``h > 0``: uniform grid ``t0 + j h``; ``h == 0``: nodes ``tnodes`` with jumps ``gnode``.
    ``tb.shape[0] < 2``: no running loss.
    """
    n = mh[0]
    m = mh[1]
    d = mh[2]
    dpar = mh[3]
    q = phi.shape[0]
    x, ylag, ylag2, ys, fd, hx, hdx, tx, tdx, aadv, jy, jl, jp, jl2, yd, gk, tg, ishist = w
    # typed values, not literals (no sensitivity columns; the target's cubic history kind): see _ddeadj_solve
    k0, cubic = np.int64(0), np.int64(3)
    dde_dense_eval(t, left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, k0, x, hx, hdx, tg)
    for kk in range(d):
        tau = p[dpar[kk]]
        hist = dde_dense_eval(t - tau, left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, k0, hx, hx, hdx, gk[kk])
        ishist[kk] = hist
        for i in range(n):
            ylag[i, kk] = hx[i]
        if hist == 1:
            for i in range(n):
                yd[kk, i] = hdx[i]
        else:
            _dde_ydot(mh, t - tau, left, t0, eps, p, hkind, phi, hb, hc, buf, nbuf, k0, ys, ylag2, fd, hx, hdx, tg)
            for i in range(n):
                yd[kk, i] = fd[i]
    mh_dde_jac_y(mh, t, x, ylag, p, jy)
    mh_dde_jac_ylag(mh, t, x, ylag, p, jl)
    mh_dde_jac_p(mh, t, x, ylag, p, jp)
    # target and loss integrand
    has_loss = tb.shape[0] > 1
    if has_loss:
        dde_history(cubic, t, phi[0:0], tb, tc, tx, tdx, tg)
    lval = 0.0
    for i in range(n):
        if has_loss:
            r = x[i] - tx[i]
            lval += wl[i] * r * r
            out[i] = -2.0 * wl[i] * r
        else:
            out[i] = 0.0
        acc = 0.0
        for l in range(n):
            acc += jy[l, i] * a[l]
        out[i] -= acc
    # advanced terms: J_lag_k(t + tau_k)^T a(t + tau_k)
    for kk in range(d):
        s = t + p[dpar[kk]]
        if h > 0.0:
            use = s < t_end - eps
            if use:
                _ddeadj_hermite(s, t0, h, nnode, t_end, anodes, adnodes, aadv)
        else:
            use = _ddeadj_hermite_nodes(s, left, snap, tnodes, nnode, anodes, adnodes, adright, gnode, jflag,
                                     aadv)
        if use:
            dde_dense_eval(s, left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, k0, ys, hx, hdx, tg)
            for ll in range(d):
                dde_dense_eval(s - p[dpar[ll]], left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, k0,
                               hx, hx, hdx, tg)
                for i in range(n):
                    ylag2[i, ll] = hx[i]
            mh_dde_jac_ylag(mh, s, ys, ylag2, p, jl2)
            for i in range(n):
                acc = 0.0
                for l in range(n):
                    acc += jl2[kk, l, i] * aadv[l]
                out[i] -= acc
    # gradient integrands (stored negated: integrated backward they accumulate +int)
    for j in range(m + q):
        acc = 0.0
        if j < m:
            for i in range(n):
                acc += a[i] * jp[i, j]
        for kk in range(d):
            for i in range(n):
                dij = 0.0
                if j >= m:
                    if ishist[kk] == 1:
                        dij = 0.0
                        for l in range(n):
                            dij += jl[kk, i, l] * gk[kk][l, j - m]
                elif j == dpar[kk] and not (paper and ishist[kk] == 1):
                    for l in range(n):
                        dij -= jl[kk, i, l] * yd[kk, l]
                acc += a[i] * dij
        out[n + j] = -acc
    out[n + m + q] = -lval


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _ddeadj_solve(mh, t0, t_end, nstep, h, tnodes, gnode, jflag, adright, p, hkind, phi, hb, hc, buf, nbuf, tb, tc,
               wl, paper, grad, anodes, adnodes, work):
    """RK4 backward adjoint on ``nstep`` steps: uniform (``h > 0``) or on ``tnodes`` with jumps ``gnode``.

    Checks done by the callers. Fills ``grad`` (m + q + 1,); returns a status code.
    """
    n = mh[0]
    m = mh[1]
    d = mh[2]
    q = phi.shape[0]
    kq = max(q, 1)
    size = n + m + q + 1
    nnode = nstep + 1
    eps = 64.0 * UROUND * max(abs(t0), abs(t_end), 1.0)
    snap = _DDEADJ_SNAP * max(abs(t0), abs(t_end), 1.0)
    uniform = h > 0.0
    off = 0
    x = work[off:off + n]
    off += n
    ylag = work_view(work, off, (n, d))
    off += n * d
    ylag2 = work_view(work, off, (n, d))
    off += n * d
    ys = work[off:off + n]
    fd = work[off + n:off + 2 * n]
    hx = work[off + 2 * n:off + 3 * n]
    hdx = work[off + 3 * n:off + 4 * n]
    tx = work[off + 4 * n:off + 5 * n]
    tdx = work[off + 5 * n:off + 6 * n]
    aadv = work[off + 6 * n:off + 7 * n]
    off += 8 * n
    jy = work_view(work, off, (n, n))
    off += 2 * n * n
    jl = work_view(work, off, (d, n, n))
    off += d * n * n
    jl2 = work_view(work, off, (d, n, n))
    off += d * n * n
    jp = work_view(work, off, (n, m))
    off += n * m
    yd = work_view(work, off, (d, n))
    off += d * n
    gk = work_view(work, off, (d, n, kq))
    off += d * n * kq
    tg = work_view(work, off, (n, kq))
    off += n * kq
    k1 = work[off:off + size]
    k2 = work[off + size:off + 2 * size]
    k3 = work[off + 2 * size:off + 3 * size]
    k4 = work[off + 3 * size:off + 4 * size]
    off += 4 * size
    z = work[off:off + size]
    zs = work[off + size:off + 2 * size]
    off += 2 * size
    ishist = np.zeros(d, dtype=np.int64)
    w = (x, ylag, ylag2, ys, fd, hx, hdx, tx, tdx, aadv, jy, jl, jp, jl2, yd, gk, tg, ishist)
    # _ddeadj_rhs's side flag (left limits or right limits) as np.bool_, not a literal True / False:
    # numba compiles a callee, and all it calls, once per literal argument
    lim_l, lim_r = np.bool_(True), np.bool_(False)
    for c in range(size):
        z[c] = 0.0
    for i in range(n):
        anodes[nnode - 1, i] = 0.0
        adnodes[nnode - 1, i] = 0.0
    if not uniform and nnode > 1:
        for i in range(n):
            z[i] = gnode[nnode - 1, i]  # a(T-)
    for jn in range(nstep - 1, -1, -1):
        if uniform:
            ta = t0 + jn * h
            tb_ = t_end if jn == nstep - 1 else t0 + (jn + 1) * h
        else:
            ta = tnodes[jn]
            tb_ = tnodes[jn + 1]
        hh = tb_ - ta
        # k1 at the right end (left limits), k4 at the left end (right limits)
        _ddeadj_rhs(mh, tb_, lim_l, z, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
                 anodes, adnodes, w, k1, tnodes, adright, gnode, jflag, snap)
        for i in range(n):
            adnodes[jn + 1, i] = k1[i]
        for c in range(size):
            zs[c] = z[c] - 0.5 * hh * k1[c]
        _ddeadj_rhs(mh, tb_ - 0.5 * hh, lim_l, zs, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper,
                 h, nnode, anodes, adnodes, w, k2, tnodes, adright, gnode, jflag, snap)
        for c in range(size):
            zs[c] = z[c] - 0.5 * hh * k2[c]
        _ddeadj_rhs(mh, tb_ - 0.5 * hh, lim_l, zs, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper,
                 h, nnode, anodes, adnodes, w, k3, tnodes, adright, gnode, jflag, snap)
        for c in range(size):
            zs[c] = z[c] - hh * k3[c]
        _ddeadj_rhs(mh, ta, lim_r, zs, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
                 anodes, adnodes, w, k4, tnodes, adright, gnode, jflag, snap)
        for c in range(size):
            z[c] = z[c] - hh * (k1[c] + 2.0 * k2[c] + 2.0 * k3[c] + k4[c]) / 6.0
        for i in range(n):
            anodes[jn, i] = z[i]
        if not all_finite(z, size):
            return ST_NON_FINITE
        if not uniform and jn > 0:
            if jflag[jn] != 0:  # a' jumps here: the right-limit derivative for the interpolant
                _ddeadj_rhs(mh, ta, lim_r, z, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h,
                         nnode, anodes, adnodes, w, k1, tnodes, adright, gnode, jflag, snap)
                for i in range(n):
                    adright[jn, i] = k1[i]
            for i in range(n):
                z[i] += gnode[jn, i]
    if uniform:
        _ddeadj_rhs(mh, t0, lim_r, z, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
                 anodes, adnodes, w, k1, tnodes, adright, gnode, jflag, snap)
        for i in range(n):
            adnodes[0, i] = k1[i]
    else:
        for i in range(n):
            z[i] += gnode[0, i]  # a(t0-): an output at t0
    # a(t0-)^T dx0/dtheta: only the history parameters move x0 = X0(0)
    dde_history(hkind, 0.0, phi, hb, hc, hx, hdx, tg)
    for j in range(m + q):
        acc = z[n + j]
        if j >= m:
            for i in range(n):
                acc += z[i] * tg[i, j - m]
        grad[j] = acc
    grad[m + q] = z[n + m + q]
    return ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_adjoint_gradient(t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub, paper, grad,
                         anodes, adnodes, work):
    """RK4 backward adjoint of the integral loss; see the module docstring. Returns a status code."""
    return _ddeadj_gradient(MODEL_HANDLE, t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub, paper,
                            grad, anodes, adnodes, work)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _ddeadj_gradient(mh, t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub, paper, grad, anodes,
                     adnodes, work):
    n = mh[0]
    m = mh[1]
    d = mh[2]
    q = phi.shape[0]
    tau_min = np.inf
    for kk in range(d):
        tau = p[mh[3][kk]]
        if not (tau > 0.0):
            return ST_BAD_INPUT
        tau_min = min(tau_min, tau)
    if not (t_end > t0) or nsub < 1 or grad.shape[0] != m + q + 1 or work.shape[0] < _ddeadj_work_size(mh, q):
        return ST_BAD_INPUT
    h = tau_min / nsub
    nstep = int(math.ceil((t_end - t0) / h - 1e-9))
    nnode = nstep + 1
    if anodes.shape[0] < nnode or adnodes.shape[0] < nnode:
        return ST_BAD_INPUT
    tnodes = np.zeros(0)
    gnode = np.zeros((0, n))
    jflag = np.zeros(0, dtype=np.int64)
    return _ddeadj_solve(mh, t0, t_end, nstep, h, tnodes, gnode, jflag, gnode, p, hkind, phi, hb, hc, buf, nbuf, tb,
                      tc, wl, paper, grad, anodes, adnodes, work)


@njit(cache=True, error_model="numpy", fastmath=False)
def _ddeadj_vjp_points(mh, t0, t_end, t_obs, nobs, keep, p, buf, nbuf, nsub, snap, pts, flags):
    """Candidate nodes (unsorted) into ``pts``/``flags`` (2: output time, 1: a' jumps, 0: other); returns their number."""
    d = mh[2]
    npt = 0
    pts[npt] = t0
    flags[npt] = 0
    npt += 1
    bps = np.empty(_dde_bp_capacity(mh))
    nbp = _dde_breakpoints(mh, t0, t_end, p, snap, bps)
    for a in range(nbp):
        pts[npt] = bps[a]
        flags[npt] = 0
        npt += 1
    for a in range(nbuf):  # the forward solver's mesh, each step split in nsub: it resolves the time scales
        for b in range(nsub):
            v = buf[a, 0] + buf[a, 1] * b / nsub
            if v < t_end:
                pts[npt] = v
                flags[npt] = 0
                npt += 1
    cnt = np.zeros(d, dtype=np.int64)
    for r in range(nobs):
        if not keep[r]:
            continue
        for kk in range(d):
            cnt[kk] = 0
        while True:  # multi-indices with sum <= _DDEADJ_BP_ORDER (odometer)
            tot = 0
            val = t_obs[r]
            for kk in range(d):
                tot += cnt[kk]
                val -= cnt[kk] * p[mh[3][kk]]
            if tot <= _DDEADJ_BP_ORDER and val > t0 - snap:
                pts[npt] = max(val, t0) if tot > 0 else t_obs[r]
                flags[npt] = 2 if tot == 0 else (1 if tot == 1 else 0)
                npt += 1
            if dde_next_multi_index(cnt, np.int64(_DDEADJ_BP_ORDER)):
                break
    return npt


@njit(cache=True, error_model="numpy", fastmath=False)
def _ddeadj_vjp_grid(mh, t0, t_end, t_obs, nobs, keep, p, buf, nbuf, nsub, hmax, snap):
    """Nodes ``tnodes`` (sorted, ``t0`` .. ``t_end``) and ``jflag`` (> 0 where a' jumps); output times are exact nodes."""
    d = mh[2]
    ncomb = 1
    for i in range(1, d + 1):
        ncomb = ncomb * (_DDEADJ_BP_ORDER + i) // i
    cap = 1 + _dde_bp_capacity(mh) + nbuf * nsub + nobs * ncomb
    pts = np.empty(cap)
    flags = np.empty(cap, dtype=np.int64)
    npt = _ddeadj_vjp_points(mh, t0, t_end, t_obs, nobs, keep, p, buf, nbuf, nsub, snap, pts, flags)
    order = np.argsort(pts[:npt], kind="mergesort")
    # merge points closer than 2 snap; an output time keeps its exact value
    kept = np.empty(npt)
    kflag = np.empty(npt, dtype=np.int64)
    ksrc = np.zeros(npt, dtype=np.bool_)
    nk = 0
    for a in range(npt):
        v = pts[order[a]]
        if v > t_end:
            continue
        fl = flags[order[a]]
        src = fl == 2
        if nk == 0 or v - kept[nk - 1] > 2.0 * snap:
            kept[nk] = v
            kflag[nk] = fl
            ksrc[nk] = src
            nk += 1
        else:
            kflag[nk - 1] = max(kflag[nk - 1], fl)
            if src and not ksrc[nk - 1] and nk > 1:
                kept[nk - 1] = v
                ksrc[nk - 1] = True
    kept[0] = t0
    if nk > 1:
        kept[nk - 1] = t_end
    # split each gap into equal steps <= hmax
    nnode = 1
    for a in range(nk - 1):
        nnode += max(1, int(math.ceil((kept[a + 1] - kept[a]) / hmax - 1e-9)))
    tnodes = np.empty(nnode)
    jflag = np.zeros(nnode, dtype=np.int64)
    c = 0
    for a in range(nk - 1):
        ns = max(1, int(math.ceil((kept[a + 1] - kept[a]) / hmax - 1e-9)))
        tnodes[c] = kept[a]
        jflag[c] = kflag[a]
        for b in range(1, ns):
            tnodes[c + b] = kept[a] + (kept[a + 1] - kept[a]) * b / ns
        c += ns
    tnodes[c] = kept[nk - 1]
    jflag[c] = kflag[nk - 1]
    return tnodes, jflag


@njit(cache=True, error_model="numpy", fastmath=False)
def dde_adjoint_vjp(t0, t_obs, g, p, hkind, phi, hb, hc, buf, nbuf, nsub, grad):
    """``grad = sum_r g_r^T dx(t_r)/dtheta`` by the adjoint with point sources; see the module docstring."""
    return _ddeadj_vjp(MODEL_HANDLE, t0, t_obs, g, p, hkind, phi, hb, hc, buf, nbuf, nsub, grad)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def _ddeadj_vjp(mh, t0, t_obs, g, p, hkind, phi, hb, hc, buf, nbuf, nsub, grad):
    n = mh[0]
    m = mh[1]
    d = mh[2]
    q = phi.shape[0]
    nobs = t_obs.shape[0]
    if g.shape[0] != nobs or g.shape[1] != n or grad.shape[0] != m + q or nsub < 1 or p.shape[0] != m:
        return ST_BAD_INPUT
    tau_min = np.inf
    for kk in range(d):
        tau = p[mh[3][kk]]
        if not (tau > 0.0 and math.isfinite(tau)):
            return ST_BAD_INPUT
        tau_min = min(tau_min, tau)
    if check_times(t0, t_obs) != ST_SUCCESS:
        return ST_BAD_INPUT
    keep = np.zeros(nobs, dtype=np.bool_)
    t_end = t0
    any_src = False
    for r in range(nobs):
        for i in range(n):
            if not math.isfinite(g[r, i]):
                return ST_BAD_INPUT
            if g[r, i] != 0.0:
                keep[r] = True
        if keep[r]:
            t_end = t_obs[r]
            any_src = True
    for j in range(m + q):
        grad[j] = 0.0
    if not any_src:
        return ST_SUCCESS
    snap = _DDEADJ_SNAP * max(abs(t0), abs(t_end), 1.0)
    tnodes, jflag = _ddeadj_vjp_grid(mh, t0, t_end, t_obs, nobs, keep, p, buf, nbuf, nsub, tau_min, snap)
    nnode = tnodes.shape[0]
    gnode = np.zeros((nnode, n))
    for r in range(nobs):
        if not keep[r]:
            continue
        lo = dde_last_at_or_below(tnodes, nnode - 1, t_obs[r])  # then the nearer neighbour
        if lo + 1 < nnode and tnodes[lo + 1] - t_obs[r] < t_obs[r] - tnodes[lo]:
            lo += 1
        for i in range(n):
            gnode[lo, i] += g[r, i]
    anodes = np.zeros((nnode, n))
    adnodes = np.zeros((nnode, n))
    adright = np.zeros((nnode, n))
    work = np.empty(_ddeadj_work_size(mh, q))
    full = np.empty(m + q + 1)
    tb = np.zeros(0)
    tc = np.zeros((4, 0, n))
    wl = np.zeros(n)
    status = _ddeadj_solve(mh, t0, t_end, nnode - 1, 0.0, tnodes, gnode, jflag, adright, p, hkind, phi, hb, hc, buf,
                        nbuf, tb, tc, wl, np.bool_(False), full, anodes, adnodes, work)
    for j in range(m + q):
        grad[j] = full[j] if status == ST_SUCCESS else np.nan
    return status
