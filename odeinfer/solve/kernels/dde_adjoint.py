"""Continuous adjoint of a DDE for an integral loss, with the delay gradient
corrected (DDE-Find, Stephany 2024, Theorem 1 plus the history term of the spec
``seed-002-dde-find.md`` section 1.4).

Appended after ``dde.py`` to the module of every model with delays. Loss::

    L = int_{t0}^{T} sum_i w_i (x_i(t) - target_i(t))^2 dt,

``target`` a piecewise cubic (scipy ``PPoly`` layout, absolute time). Adjoint
(``a = -lambda`` of the paper, ``a(T) = 0``)::

    a'(t) = -J_y(t)^T a(t) - grad l(t) - sum_k 1[t + tau_k < T] J_lag_k(t + tau_k)^T a(t + tau_k)

Gradient, ``theta = [p, phi]``, with ``D_k[:, j]`` the direct dependence of
``x(t - tau_k)`` on ``theta_j`` (history: ``dX0/dphi``; delay ``tau_k``: ``-xdot(t - tau_k)``,
which for ``t - tau_k < t0`` is ``-dX0/du``: the term the paper drops)::

    dL/dtheta_j = a(t0)^T dX0/dtheta_j(0) + int_{t0}^{T} a^T (J_p[:, j] + sum_k J_lag_k D_k[:, j]) dt.

``paper = True`` drops the history part of the delay term (eq. 5 of the paper).

Discretisation: classical RK4 backward on the grid ``t0 + j h``, ``h = min(tau) / nsub``
(last step shortened to end on ``T``), so breakpoints ``t0 + n tau`` of one delay are
nodes; the forward solution comes from the dense output ``buf`` of ``dde_solve``
(states only, ``k = 0``); advanced adjoint values from cubic Hermite interpolation of
the stored nodes ``(a_j, a'_j)``. The loss and gradient integrals are integrated
with the adjoint (same RK4), so everything is 4th order in ``h``.

``dde_adjoint_gradient(t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub,
paper, grad, anodes, adnodes, work) -> int``: fills ``grad`` (m + q + 1,):
the gradient, then the loss value (last entry). ``anodes``, ``adnodes`` (N + 1, n)
with ``N = ceil((T - t0) / h)``; ``work`` at least ``dde_adjoint_work_size(q)``.
"""
import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def dde_adjoint_work_size(q):
    n = N_STATES
    m = N_PARAMS
    d = N_DELAYS
    kq = max(q, 1)
    return (2 * n * d + 9 * n + 2 * n * n + 2 * d * n * n + n * m + d * n + d * n * kq + n * kq
            + 4 * (n + m + q + 1) + 2 * (n + m + q + 1) + d)


@njit(cache=True, error_model="numpy")
def _adj_hermite(s, t0, h, nnode, t_end, anodes, adnodes, out):
    n = N_STATES
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


@njit(cache=True, error_model="numpy")
def _adj_rhs(t, left, a, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
             anodes, adnodes, w, out):
    """d/dt of the augmented backward state [a (n), integrands (m + q), l] at ``t``."""
    n = N_STATES
    m = N_PARAMS
    d = N_DELAYS
    q = phi.shape[0]
    x, ylag, ylag2, ys, fd, hx, hdx, tx, tdx, aadv, jy, jl, jp, jl2, yd, gk, tg, ishist = w
    dde_dense_eval(t, left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, 0, x, hx, hdx, tg)
    for kk in range(d):
        tau = p[DELAY_PARAMS[kk]]
        hist = dde_dense_eval(t - tau, left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, 0, hx, hx, hdx, gk[kk])
        ishist[kk] = hist
        for i in range(n):
            ylag[i, kk] = hx[i]
        if hist == 1:
            for i in range(n):
                yd[kk, i] = hdx[i]
        else:
            _dde_ydot(t - tau, left, t0, eps, p, hkind, phi, hb, hc, buf, nbuf, 0, ys, ylag2, fd, hx, hdx, tg)
            for i in range(n):
                yd[kk, i] = fd[i]
    model_jac_y(t, x, ylag, p, jy)
    model_jac_ylag(t, x, ylag, p, jl)
    model_jac_p(t, x, ylag, p, jp)
    # target and loss integrand
    dde_history(3, t, phi[0:0], tb, tc, tx, tdx, tg)
    lval = 0.0
    for i in range(n):
        r = x[i] - tx[i]
        lval += wl[i] * r * r
        out[i] = -2.0 * wl[i] * r
        acc = 0.0
        for l in range(n):
            acc += jy[l, i] * a[l]
        out[i] -= acc
    # advanced terms: J_lag_k(t + tau_k)^T a(t + tau_k)
    for kk in range(d):
        s = t + p[DELAY_PARAMS[kk]]
        if s < t_end - eps:
            _adj_hermite(s, t0, h, nnode, t_end, anodes, adnodes, aadv)
            dde_dense_eval(s, left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, 0, ys, hx, hdx, tg)
            for ll in range(d):
                dde_dense_eval(s - p[DELAY_PARAMS[ll]], left, t0, eps, hkind, phi, hb, hc, buf, nbuf, n, 0,
                               hx, hx, hdx, tg)
                for i in range(n):
                    ylag2[i, ll] = hx[i]
            model_jac_ylag(s, ys, ylag2, p, jl2)
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
                elif j == DELAY_PARAMS[kk] and not (paper and ishist[kk] == 1):
                    for l in range(n):
                        dij -= jl[kk, i, l] * yd[kk, l]
                acc += a[i] * dij
        out[n + j] = -acc
    out[n + m + q] = -lval


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def dde_adjoint_gradient(t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub, paper, grad,
                         anodes, adnodes, work):
    """RK4 backward adjoint; see the module docstring. Returns a status code."""
    n = N_STATES
    m = N_PARAMS
    d = N_DELAYS
    q = phi.shape[0]
    kq = max(q, 1)
    size = n + m + q + 1
    tau_min = np.inf
    for kk in range(d):
        tau = p[DELAY_PARAMS[kk]]
        if not (tau > 0.0):
            return ST_BAD_INPUT
        tau_min = min(tau_min, tau)
    if not (t_end > t0) or nsub < 1 or grad.shape[0] != m + q + 1 or work.shape[0] < dde_adjoint_work_size(q):
        return ST_BAD_INPUT
    h = tau_min / nsub
    nstep = int(math.ceil((t_end - t0) / h - 1e-9))
    nnode = nstep + 1
    if anodes.shape[0] < nnode or adnodes.shape[0] < nnode:
        return ST_BAD_INPUT
    eps = 64.0 * UROUND * max(abs(t0), abs(t_end), 1.0)
    off = 0
    x = work[off:off + n]
    off += n
    ylag = work[off:off + n * d].reshape((n, d))
    off += n * d
    ylag2 = work[off:off + n * d].reshape((n, d))
    off += n * d
    ys = work[off:off + n]
    fd = work[off + n:off + 2 * n]
    hx = work[off + 2 * n:off + 3 * n]
    hdx = work[off + 3 * n:off + 4 * n]
    tx = work[off + 4 * n:off + 5 * n]
    tdx = work[off + 5 * n:off + 6 * n]
    aadv = work[off + 6 * n:off + 7 * n]
    off += 8 * n
    jy = work[off:off + n * n].reshape((n, n))
    off += 2 * n * n
    jl = work[off:off + d * n * n].reshape((d, n, n))
    off += d * n * n
    jl2 = work[off:off + d * n * n].reshape((d, n, n))
    off += d * n * n
    jp = work[off:off + n * m].reshape((n, m))
    off += n * m
    yd = work[off:off + d * n].reshape((d, n))
    off += d * n
    gk = work[off:off + d * n * kq].reshape((d, n, kq))
    off += d * n * kq
    tg = work[off:off + n * kq].reshape((n, kq))
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
    for c in range(size):
        z[c] = 0.0
    for i in range(n):
        anodes[nnode - 1, i] = 0.0
        adnodes[nnode - 1, i] = 0.0
    for jn in range(nstep - 1, -1, -1):
        ta = t0 + jn * h
        tb_ = t_end if jn == nstep - 1 else t0 + (jn + 1) * h
        hh = tb_ - ta
        # k1 at the right end (left limits), k4 at the left end (right limits)
        _adj_rhs(tb_, True, z, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
                 anodes, adnodes, w, k1)
        for i in range(n):
            adnodes[jn + 1, i] = k1[i]
        for c in range(size):
            zs[c] = z[c] - 0.5 * hh * k1[c]
        _adj_rhs(tb_ - 0.5 * hh, True, zs, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper,
                 h, nnode, anodes, adnodes, w, k2)
        for c in range(size):
            zs[c] = z[c] - 0.5 * hh * k2[c]
        _adj_rhs(tb_ - 0.5 * hh, True, zs, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper,
                 h, nnode, anodes, adnodes, w, k3)
        for c in range(size):
            zs[c] = z[c] - hh * k3[c]
        _adj_rhs(ta, False, zs, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
                 anodes, adnodes, w, k4)
        for c in range(size):
            z[c] = z[c] - hh * (k1[c] + 2.0 * k2[c] + 2.0 * k3[c] + k4[c]) / 6.0
        for i in range(n):
            anodes[jn, i] = z[i]
        if not all_finite(z, size):
            return ST_NON_FINITE
    _adj_rhs(t0, False, z, t0, t_end, eps, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, paper, h, nnode,
             anodes, adnodes, w, k1)
    for i in range(n):
        adnodes[0, i] = k1[i]
    # a(t0)^T dx0/dtheta: only the history parameters move x0 = X0(0)
    dde_history(hkind, 0.0, phi, hb, hc, hx, hdx, tg)
    for j in range(m + q):
        acc = z[n + j]
        if j >= m:
            for i in range(n):
                acc += z[i] * tg[i, j - m]
        grad[j] = acc
    grad[m + q] = z[n + m + q]
    return ST_SUCCESS
