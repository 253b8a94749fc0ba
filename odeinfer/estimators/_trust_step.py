"""The step of the interior trust-region reflective method (Coleman and Li, 1994/1996) as fides
computes it with its default options (two-dimensional Newton/gradient subspace, recursive
reflections at the bounds), compiled: one call per iteration of :func:`odeinfer.estimators._trust.trust_region`.

fides' own implementation spends 0.3-0.4 ms of Python per iteration building step objects; a
likelihood on a small model costs 0.05-1 ms, so most of a fit's time was the optimiser's. This
kernel follows fides 0.8's arithmetic operation by operation (``tests/test_trust.py`` checks its steps
and whole optimisation paths against fides), with three deliberate differences:

* the Newton direction of the 2-D subspace comes from one symmetric eigendecomposition (fides takes a
  general one and two least-squares solves): the same subspace to rounding;
* the 2-D subproblem's eigenvectors come from a Jacobi rotation of the symmetrised 2 x 2 matrix;
* where that matrix is indefinite and fides' Newton iteration on the secular equation would start on a
  pole (where it evaluates ``w_i`` in place of ``w_i / 0`` and stops at once), the secular equation takes
  its limit there and the Brent search that fides falls back to runs directly.

Notation as in fides: ``v``, ``dv`` the affine scaling and its derivative, ``d = sqrt(|v|)`` the
diagonal scaling, ``sg = d g`` the scaled gradient, ``B = d H d + diag(|g| dv)`` the scaled curvature;
``ss`` a step in scaled coordinates, ``s = d ss`` in the original ones; ``s0``/``ss0`` the part of a
reflected step taken before its last reflection.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["propose_step"]

_EPS = np.spacing(1.0)
_SQRT_EPS = math.sqrt(np.spacing(1.0))
_BRENT_RTOL = 4.0 * np.spacing(1.0)  # scipy.optimize.brentq's default rtol


@njit(cache=True, error_model="numpy")
def _norm(v):
    s = 0.0
    for i in range(v.size):
        s += v[i] * v[i]
    return math.sqrt(s)


@njit(cache=True, error_model="numpy")
def _normalize(v):
    nv = _norm(v)
    if nv > 0:
        for i in range(v.size):
            v[i] = v[i] / nv


@njit(cache=True, error_model="numpy")
def _quadratic(B, g, z):
    """``0.5 z'Bz + g'z``."""
    n = z.size
    q = 0.0
    for i in range(n):
        bz = 0.0
        for j in range(n):
            bz += z[j] * B[j, i]
        q += bz * z[i]
    gz = 0.0
    for i in range(n):
        gz += g[i] * z[i]
    return 0.5 * q + gz


@njit(cache=True, error_model="numpy")
def _boundary_1d(B, g, s, s0, delta):
    """The ``t`` with ``||s0 + t s|| = delta`` of lower model value (fides'
    ``get_1d_trust_region_boundary_solution``)."""
    a = np.dot(s, s)
    b = 2.0 * np.dot(s0, s)
    c = np.dot(s0, s0) - delta ** 2
    aux = b + math.copysign(math.sqrt(b ** 2 - 4.0 * a * c), b)
    t1, t2 = -aux / (2.0 * a), -2.0 * c / aux
    q1 = _quadratic(B, g, s0 + t1 * s)
    q2 = _quadratic(B, g, s0 + t2 * s)
    return t2 if q2 < q1 else t1


@njit(cache=True, error_model="numpy")
def _subproblem_1d(B, g, s, delta, s0):
    """``argmin_t q(s0 + t s)`` within the radius (fides' ``solve_1d_trust_region_subproblem``)."""
    if delta == 0.0:
        return 0.0
    zero = True
    for i in range(s.size):
        if s[i] != 0.0:
            zero = False
    if zero:
        return 0.0
    a = 0.5 * np.dot(B.dot(s), s)
    b_coef = np.dot(s, B.dot(s0) + g)
    minq = -b_coef / (2.0 * a)
    if a > 0 and _norm(minq * s + s0) <= delta:
        return minq
    return _boundary_1d(B, g, s, s0, delta)


@njit(cache=True, error_model="numpy")
def _coef(lam, w0, w1, e0, e1):
    k0 = w0 / (e0 + lam) if e0 + lam != 0 else w0
    k1 = w1 / (e1 + lam) if e1 + lam != 0 else w1
    return k0, k1


@njit(cache=True, error_model="numpy")
def _secular(lam, w0, w1, e0, e1, mineig, delta):
    if lam < -mineig:
        return math.inf
    if (e0 + lam == 0 and w0 != 0) or (e1 + lam == 0 and w1 != 0):
        return -1.0 / delta  # the limit at a pole (||s|| -> inf)
    k0, k1 = _coef(lam, w0, w1, e0, e1)
    sn = math.hypot(k0, k1)
    return 1.0 / sn - 1.0 / delta if sn > 0 else math.inf


@njit(cache=True, error_model="numpy")
def _dsecular(lam, w0, w1, e0, e1):
    k0, k1 = _coef(lam, w0, w1, e0, e1)
    sn = math.hypot(k0, k1)
    if sn == 0:
        return math.inf
    d = 0.0
    if e0 + lam != 0:
        d += k0 * k0 / (e0 + lam)
    if e1 + lam != 0:
        d += k1 * k1 / (e1 + lam)
    return d / sn ** 3


@njit(cache=True, error_model="numpy")
def _brentq(xa, xb, maxiter, w0, w1, e0, e1, mineig, delta):
    """scipy.optimize.brentq on the secular equation (scipy's C brentq, xtol 1e-12, default rtol):
    ``(root, ok)``; not ok where scipy raises (no sign change, no convergence)."""
    xtol = 1e-12
    xpre, xcur = xa, xb
    fpre = _secular(xpre, w0, w1, e0, e1, mineig, delta)
    fcur = _secular(xcur, w0, w1, e0, e1, mineig, delta)
    if fpre * fcur > 0:
        return math.nan, False
    if fpre == 0:
        return xpre, True
    if fcur == 0:
        return xcur, True
    xblk = fblk = spre = scur = 0.0
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and (math.copysign(1.0, fpre) != math.copysign(1.0, fcur)):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        tol = (xtol + _BRENT_RTOL * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < tol:
            return xcur, True
        if abs(spre) > tol and abs(fcur) < abs(fpre):
            if xpre == xblk:
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - tol):
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        if abs(scur) > tol:
            xcur += scur
        else:
            xcur += tol if sbis > 0 else -tol
        fcur = _secular(xcur, w0, w1, e0, e1, mineig, delta)
    return math.nan, False


@njit(cache=True, error_model="numpy")
def _subproblem_2d(b, g, delta):
    """``argmin 0.5 c'bc + g'c`` over ``||c|| <= delta`` for a 2 x 2 ``b`` (fides'
    ``solve_nd_trust_region_subproblem``; see the module docstring for the differences)."""
    out = np.zeros(2)
    if delta == 0:
        return out
    a, c, d = b[0, 0], 0.5 * (b[0, 1] + b[1, 0]), b[1, 1]
    if c == 0.0:
        cs, sn = 1.0, 0.0
    else:
        theta = 0.5 * math.atan2(2.0 * c, a - d)
        cs, sn = math.cos(theta), math.sin(theta)
    e0 = a * cs * cs + 2.0 * c * cs * sn + d * sn * sn
    e1 = a * sn * sn - 2.0 * c * cs * sn + d * cs * cs
    # eigenvectors: columns (cs, sn) and (-sn, cs)
    w0 = -(cs * g[0] + sn * g[1])
    w1 = -(-sn * g[0] + cs * g[1])
    jmin = 0 if e0 <= e1 else 1
    mineig = e0 if jmin == 0 else e1
    if mineig > 0:
        k0, k1 = _coef(0.0, w0, w1, e0, e1)
        if math.hypot(k0, k1) <= delta + _SQRT_EPS:
            out[0], out[1] = cs * k0 - sn * k1, sn * k0 + cs * k1
            return out
        laminit = 0.0
    else:
        laminit = -mineig
    pole = (e0 + laminit == 0 and w0 != 0) or (e1 + laminit == 0 and w1 != 0)
    if _secular(laminit, w0, w1, e0, e1, mineig, delta) < 0:
        lam = math.nan
        if not pole:
            lam = laminit
            converged = False
            for _ in range(100):  # scipy.optimize.newton(secular, laminit, dsecular, tol=1e-12, maxiter=100)
                f = _secular(lam, w0, w1, e0, e1, mineig, delta)
                if f == 0:
                    converged = True
                    break
                df = _dsecular(lam, w0, w1, e0, e1)
                if df == 0 or not math.isfinite(f / df):
                    break
                nxt = lam - f / df
                if abs(nxt - lam) <= 1e-12:
                    lam = nxt
                    converged = True
                    break
                lam = nxt
            if not converged:
                lam = math.nan
        if math.isfinite(lam):
            k0, k1 = _coef(lam, w0, w1, e0, e1)
            if math.hypot(k0, k1) <= delta + 1e-12:
                out[0], out[1] = cs * k0 - sn * k1, sn * k0 + cs * k1
                return out
        lo, hi, left = laminit, (laminit + _SQRT_EPS) * 10, 100
        while _secular(hi, w0, w1, e0, e1, mineig, delta) < 0 and left > 0:
            lo, hi, left = hi, hi * 10, left - 1
        if left > 0:
            lam, ok = _brentq(lo, hi, left, w0, w1, e0, e1, mineig, delta)
            if ok:
                k0, k1 = _coef(lam, w0, w1, e0, e1)
                if math.hypot(k0, k1) <= delta + _SQRT_EPS:
                    out[0], out[1] = cs * k0 - sn * k1, sn * k0 + cs * k1
                    return out
    # the hard case: g orthogonal to the eigenvector of the smallest eigenvalue
    wh0 = 0.0 if e0 - mineig == 0 else w0
    wh1 = 0.0 if e1 - mineig == 0 else w1
    k0, k1 = _coef(-mineig, wh0, wh1, e0, e1)
    sigma = math.sqrt(max(delta ** 2 - (k0 ** 2 + k1 ** 2), 0.0))
    out[0], out[1] = cs * k0 - sn * k1, sn * k0 + cs * k1
    if jmin == 0:
        out[0] += sigma * cs
        out[1] += sigma * sn
    else:
        out[0] += sigma * -sn
        out[1] += sigma * cs
    return out


@njit(cache=True, error_model="numpy")
def _step_back(x, lb, ub, theta, s, ss, br):
    """Shorten the step ``s`` (and ``ss``) to ``theta`` times the distance to the first bound it crosses:
    returns ``(alpha, minbr)`` and leaves the bound ratios in ``br``."""
    n = x.size
    for i in range(n):
        if abs(s[i]) > 0:
            br[i] = max((ub[i] - x[i]) / s[i], (lb[i] - x[i]) / s[i])
        else:
            br[i] = math.inf
    minbr = br.min()
    alpha = min(1.0, theta * minbr)
    for i in range(n):
        s[i] *= alpha
        ss[i] *= alpha
    return alpha, minbr


@njit(cache=True, error_model="numpy")
def _one_dim_step(x, lb, ub, theta, d, sg, B, delta, direction, s0, ss0, s, ss, og_s, og_ss, br):
    """A step along one (unit) scaled ``direction`` after ``ss0`` (fides' gradient and reflected steps):
    fills ``s``, ``ss`` (the part after ``s0``/``ss0``, stepped back), ``og_s``, ``og_ss`` (the same before
    the step back) and returns ``(qpval, alpha, minbr)``."""
    n = x.size
    tau = _subproblem_1d(B, sg, direction, delta, ss0)
    for i in range(n):
        ss[i] = direction[i] * tau
        s[i] = d[i] * ss[i] + 0.0
        og_s[i], og_ss[i] = s[i], ss[i]
    xs = x + s0
    alpha, minbr = _step_back(xs, lb, ub, theta, s, ss, br)
    return _quadratic(B, sg, ss + ss0), alpha, minbr


@njit(cache=True, error_model="numpy")
def propose_step(x, g, H, lb, ub, delta, theta_max, s_out, s0_out, ss_out, dv):
    """The trust-region reflective step at ``x`` (gradient ``g``, curvature ``H``, radius ``delta``),
    chosen as fides chooses it: the 2-D subspace step, and where that was stepped back at a bound, the
    gradient step and up to ``n - 1`` successive reflections; the one of least model value. Writes the
    step as ``s_out + s0_out`` (original coordinates; fides adds them in that order), its scaled form
    ``ss_out`` (``ss + ss0``) and the affine scaling's derivative ``dv``; returns the model value ``qpval``."""
    n = x.size
    # affine scaling (fides' Optimizer.get_affine_scaling)
    v = np.empty(n)
    vg = 0.0
    for i in range(n):
        v[i] = (1.0 if g[i] >= 0 else -1.0) if g[i] != 0 else 1.0
        bound = ub[i] if g[i] < 0 else lb[i]
        dv[i] = 0.0
        if math.isfinite(bound):
            v[i] = x[i] - bound
            dv[i] = 1.0
        vg = max(vg, abs(v[i] * g[i]))
    theta = max(theta_max, 1.0 - vg)
    d = np.sqrt(np.abs(v))
    sg = np.empty(n)
    for i in range(n):
        sg[i] = d[i] * g[i] + 0.0
    B = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            B[i, j] = (d[i] * H[i, j] + 0.0) * d[j] + 0.0
    for i in range(n):
        gd = abs(g[i]) * dv[i]
        if gd != 0:
            B[i, i] += gd
    # the 2-D subspace (fides' TRStep2D)
    if n == 1:
        sub = np.empty((1, 1))
        sub[0, 0] = -sg[0] / B[0, 0]
        k = 1
    else:
        e, V = np.linalg.eigh(0.5 * (B + B.T))
        emax = np.abs(e).max()
        posdef = e[0] > -_EPS * emax
        s_newt = np.zeros(n)
        k = 0
        if posdef:
            for j in range(n):
                if abs(e[j]) > _EPS * emax:
                    cj = 0.0
                    for i in range(n):
                        cj += V[i, j] * sg[i]
                    cj /= e[j]
                    for i in range(n):
                        s_newt[i] -= V[i, j] * cj
            if _norm(s_newt) < delta:
                _normalize(s_newt)
                sub = s_newt.reshape((n, 1)).copy()
                k = 1
            else:
                s_grad = sg.copy()
        else:
            s_newt[:] = V[:, 0]
            s_grad = np.empty(n)
            for i in range(n):
                sgn = (1.0 if sg[i] > 0 else -1.0) if sg[i] != 0 else 0.0
                s_grad[i] = d[i] * (sgn + (1.0 if sg[i] == 0 else 0.0)) + 0.0
        if k == 0:
            _normalize(s_newt)
            s_grad = s_grad - s_newt * np.dot(s_newt, s_grad)
            if _norm(s_grad) > _EPS:
                _normalize(s_grad)
                sub = np.empty((n, 2))
                sub[:, 0] = s_newt
                sub[:, 1] = s_grad
                k = 2
            else:
                sub = s_newt.reshape((n, 1)).copy()
                k = 1
    zeros = np.zeros(n)
    ss = np.empty(n)
    s = np.empty(n)
    br = np.empty(n)
    if k == 2:
        chess = sub.T.dot(B.dot(sub))
        cg = sub.T.dot(sg)
        sc = _subproblem_2d(chess, cg, math.sqrt(max(delta ** 2 - 0.0, 0.0)))  # fides: sqrt(delta^2 - |ss0|^2)
    else:
        sc = np.array([_subproblem_1d(B, sg, sub[:, 0].copy(), delta, zeros)])
    for i in range(n):
        acc = 0.0
        for j in range(k):
            acc += sub[i, j] * sc[j]
        ss[i] = acc
        s[i] = d[i] * ss[i] + 0.0
    og_s, og_ss = s.copy(), ss.copy()
    alpha, minbr = _step_back(x, lb, ub, theta, s, ss, br)
    best_q = _quadratic(B, sg, ss + zeros)
    s_out[:] = s
    s0_out[:] = 0.0
    ss_out[:] = ss + zeros
    if alpha < 1.0 and n > 1:
        # the gradient step
        direction = sg.copy()
        _normalize(direction)
        gs, gss, gbr = np.empty(n), np.empty(n), np.empty(n)
        q, _, _ = _one_dim_step(x, lb, ub, theta, d, sg, B, delta, direction, zeros, zeros, gs, gss,
                                np.empty(n), np.empty(n), gbr)
        if q < best_q:
            best_q = q
            s_out[:] = gs
            s0_out[:] = 0.0
            ss_out[:] = gss + zeros
        # reflections (fides' stepback_reflect): each from the previous step's bound crossing
        s0, ss0 = zeros.copy(), zeros.copy()
        prev_minbr = minbr
        for _ in range(n):
            a = min(prev_minbr, 1.0)
            s0 = a * og_s + s0
            ss0 = a * og_ss + ss0
            direction = og_ss.copy()
            for i in range(n):
                if br[i] == prev_minbr:
                    direction[i] *= -1
            _normalize(direction)
            rs, rss = np.empty(n), np.empty(n)
            og_s, og_ss = np.empty(n), np.empty(n)
            q, alpha, minbr = _one_dim_step(x, lb, ub, theta, d, sg, B, delta, direction, s0, ss0, rs, rss,
                                            og_s, og_ss, br)
            if q < best_q:
                best_q = q
                s_out[:] = rs
                s0_out[:] = s0
                ss_out[:] = rss + ss0
            prev_minbr = minbr
            if alpha == 1.0:
                break
    return best_q
