"""The Bock iteration and the reduced Gauss-Newton covariance of :class:`odeinfer.estimators.Simultaneous`.

Linear algebra with a fixed pattern: the constraint Jacobian ``C`` (values from the numba
kernels of ``odeinfer/solve/kernels/collocation.py``, written into one preallocated data array
whose (row, column) pattern is computed once) and the KKT matrix ``[[diag(D), C^T], [C, 0]]``
(``D = diag(R^T R)``, as each residual touches one unknown) are scattered each iteration into
a preallocated LAPACK band array through index maps computed once (see :class:`_KKT`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import math
import warnings

import numpy as np
from numba import njit
import scipy.sparse as sps
import scipy.linalg as la
import scipy.sparse.linalg as spla

from odeinfer.solve import abi

__all__ = ["iterate", "covariance", "BockResult", "Hessian"]

_ARMIJO = 1e-4
_MAX_BACKTRACK = 40
_MIN_ALPHA = 1e-10
_RESTORE_RISE = 1e-3


@njit(cache=True)
def band_lu(a, kl, ku, mult, piv):
    """In-place band LU with partial pivoting (the scheme of LAPACK ``dgbtf2``).

    ``a`` (nb, 2 kl + ku + 1): row ``i`` holds columns ``i - kl .. i + ku + kl`` (the last ``kl``
    slots take the fill of row interchanges), ``a[i, j - i + kl] = A[i, j]``. On return ``a``
    holds U, ``mult`` (nb, kl) the multipliers, ``piv`` (nb,) the interchanges. Returns 0, or
    ``k + 1`` if the pivot of column ``k`` is zero (singular).
    """
    nb = a.shape[0]
    for k in range(nb):
        last = min(nb - 1, k + kl)
        p = k
        best = abs(a[k, kl])
        for i in range(k + 1, last + 1):
            v = abs(a[i, k - i + kl])
            if v > best:
                best, p = v, i
        piv[k] = p
        if best == 0.0 or not math.isfinite(best):
            return k + 1
        jmax = min(nb - 1, k + kl + ku)
        if p != k:
            for j in range(k, jmax + 1):
                tmp = a[k, j - k + kl]
                a[k, j - k + kl] = a[p, j - p + kl]
                a[p, j - p + kl] = tmp
        inv = 1.0 / a[k, kl]
        for i in range(k + 1, last + 1):
            m = a[i, k - i + kl] * inv
            mult[k, i - k - 1] = m
            a[i, k - i + kl] = 0.0
            if m != 0.0:
                for j in range(k + 1, jmax + 1):
                    a[i, j - i + kl] -= m * a[k, j - k + kl]
    return 0


@njit(cache=True)
def band_solve(a, kl, ku, mult, piv, b):
    """Solve in place with the factors of :func:`band_lu`; ``b`` (nb, nrhs)."""
    nb = a.shape[0]
    nr = b.shape[1]
    for k in range(nb):
        p = piv[k]
        if p != k:
            for c in range(nr):
                tmp = b[k, c]
                b[k, c] = b[p, c]
                b[p, c] = tmp
        for i in range(k + 1, min(nb - 1, k + kl) + 1):
            m = mult[k, i - k - 1]
            if m != 0.0:
                for c in range(nr):
                    b[i, c] -= m * b[k, c]
    for k in range(nb - 1, -1, -1):
        jmax = min(nb - 1, k + kl + ku)
        inv = 1.0 / a[k, kl]
        for c in range(nr):
            s = b[k, c]
            for j in range(k + 1, jmax + 1):
                s -= a[k, j - k + kl] * b[j, c]
            b[k, c] = s * inv



@dataclass
class Hessian:
    """A Gauss-Newton Hessian of an objective in ``z = [node values, parameters]`` whose x-x part is
    block diagonal by node: ``blocks`` (n_nodes, n, n), ``xt`` (nx, q) the x-parameter block,
    ``tt`` (q, q) the parameter block."""

    blocks: np.ndarray
    xt: np.ndarray
    tt: np.ndarray


@dataclass
class BockResult:
    z: np.ndarray
    status: str
    message: str
    cost: float
    lam_max: float
    mu: float
    history: dict = field(default_factory=dict)


class _Evaluator:
    """Constraint values and Jacobian data of all experiments into preallocated buffers."""

    def __init__(self, prob, constraints, scheme):
        # constraints: the collocation kernel (coll_constraints, or the shared tier's while the
        # model's compiles: odeinfer.solve.shared.TieredKernel)
        self.prob, self.kernel, self.scheme = prob, constraints, scheme
        n, q = prob.n, prob.q
        self.c = np.empty(prob.mc)
        self.cdata = np.empty(prob.crows.size)
        self.cdata[prob.crows.size - prob.known_rows.size:] = 1.0
        self.work = []
        d0 = 0
        for e, r0 in zip(prob.exps, prob.crow_off):
            N = e.t.size
            m = (N - 1) * n
            self.work.append((np.empty((N, n)), np.empty((N, n, n)), np.empty((N, n, q)),
                              self.c[r0:r0 + m], self.cdata[d0:d0 + m * (2 * n + q)]))
            d0 += m * (2 * n + q)
        self.pidx = np.ascontiguousarray(prob.pidx, dtype=np.int64)

    def constraints(self, z, want_jac):
        """Fill ``self.c`` (and ``self.cdata``); returns False if a value is not finite."""
        prob = self.prob
        p = prob.theta_full(z)
        for e, (F, JY, JP, c, jd) in zip(prob.exps, self.work):
            st = abi.call(self.kernel, "coll_constraints", scheme=self.scheme, t=e.t, X=prob.X(z, e), p=p,
                          pidx=self.pidx, F=F, JY=JY, JP=JP, c=c, jdata=jd, want_jac=want_jac)
            if st != 0:
                return False
        self.c[prob.n_coll:] = z[prob.known_cols] - prob.known_vals
        return True


class _KKT:
    """The KKT matrix, solved as a band matrix plus a Schur complement on the parameters.

    Unknowns other than the parameters are ordered node by node, ``[x_0, lambda_known,
    lambda_0, x_1, lambda_1, ..., x_{N-1}]`` per experiment, which makes that part ``A`` a band
    matrix (half-bandwidth about ``2n``), factored by :func:`band_lu` (partial pivoting within the
    band, as LAPACK ``dgbtf2``; numba, faster than scipy's ``dgbtrf`` wrapper at these tiny
    bandwidths). The parameter columns ``B`` (``C_theta`` in the multiplier rows) are eliminated
    by the ``q x q`` Schur complement ``B^T A^-1 B`` (the parameter-parameter block of the KKT
    matrix is zero: no residual depends on a parameter directly). SuperLU on the whole arrow
    matrix is much slower here: partial pivoting picks the dense parameter rows as pivots and
    the factors fill in (millions of entries for 2000 Lorenz nodes).
    """

    def __init__(self, prob):
        nz, n, q = prob.nz, prob.n, prob.q
        nx = prob.theta_off
        self.nb = nb = nx + prob.mc
        pos_z = np.empty(nx, dtype=np.int64)
        pos_c = np.empty(prob.mc, dtype=np.int64)
        start, k0 = 0, 0
        for e, r0 in zip(prob.exps, prob.crow_off):
            N, nk = e.t.size, e.known0.size
            j = np.arange(N)
            xs = start + j * 2 * n + np.where(j > 0, nk, 0)
            pos_z[e.offset:e.offset + N * n] = (xs[:, None] + np.arange(n)[None, :]).ravel()
            pos_c[prob.n_coll + k0:prob.n_coll + k0 + nk] = start + n + np.arange(nk)
            ls = start + j[:-1] * 2 * n + n + nk
            pos_c[r0:r0 + (N - 1) * n] = (ls[:, None] + np.arange(n)[None, :]).ravel()
            start += N * n + (N - 1) * n + nk
            k0 += nk
        is_x = prob.ccols < nx
        ci, cx = pos_c[prob.crows[is_x]], pos_z[prob.ccols[is_x]]
        # the x-x block of the objective's Hessian: its diagonal (least squares: each residual
        # touches one unknown), or full n x n blocks per node (a likelihood whose observables
        # mix the states of a node: ``prob.block_hessian``)
        self.blocks = bool(getattr(prob, "block_hessian", False))
        if self.blocks:
            node = pos_z.reshape(-1, n)
            hr = np.repeat(node, n, axis=1).ravel()
            hc = np.tile(node, (1, n)).ravel()
        else:
            hr = hc = pos_z
        rows = np.concatenate([hr, ci, cx])
        cols = np.concatenate([hc, cx, ci])
        self.kl = kl = int(max(np.max(rows - cols), 0))
        self.ku = ku = int(max(np.max(cols - rows), 0))
        self.width = 2 * kl + ku + 1
        self.ab = np.zeros((nb, self.width))
        self.mult = np.zeros((nb, max(kl, 1)))
        self.piv = np.zeros(nb, dtype=np.int64)
        self.flat = rows * self.width + (cols - rows + kl)
        self.is_x = is_x
        self.B = np.zeros((nb, q))
        th = ~is_x
        self.b_flat = pos_c[prob.crows[th]] * q + (prob.ccols[th] - nx)
        self.pos_z, self.pos_c, self.nx, self.nz, self.q = pos_z, pos_c, nx, nz, q
        self.vals = np.empty(rows.size)
        self.nh = hr.size

    def factor(self, H, cdata, reg=0.0):
        """Factor at the current values; returns self (raises RuntimeError when singular).

        ``H``: the objective's Gauss-Newton Hessian, the vector ``D`` (nz,) of its diagonal
        (least squares), or a :class:`Hessian` (blocks per node, the x-parameter and the
        parameter-parameter blocks) when the problem has ``block_hessian``."""
        nx, q, nh = self.nx, self.q, self.nh
        cx = cdata[self.is_x]
        m = cx.size
        if self.blocks:
            n = H.blocks.shape[1]
            self.vals[:nh] = (H.blocks + reg * np.eye(n)).ravel()
        else:
            self.vals[:nh] = H[:nx] + reg
        self.vals[nh:nh + m] = cx
        self.vals[nh + m:] = cx
        ab = self.ab
        ab[:] = 0.0
        ab.ravel()[self.flat] = self.vals
        info = band_lu(ab, self.kl, self.ku, self.mult, self.piv)
        if info != 0:
            raise RuntimeError(f"singular KKT band matrix (zero pivot in column {info - 1})")
        self.B[:] = 0.0
        self.B.ravel()[self.b_flat] = cdata[~self.is_x]
        Htt = 0.0
        if self.blocks:
            self.B[self.pos_z] += H.xt
            Htt = H.tt
        if q:
            self.AiB = self._band_solve(self.B)
            S = self.S = self.B.T @ self.AiB - Htt - np.diag(np.full(q, reg))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", la.LinAlgWarning)  # exactly singular: handled below
                    self.S_lu = la.lu_factor(S, check_finite=True)
            except (ValueError, la.LinAlgError, la.LinAlgWarning) as exc:
                raise RuntimeError(f"singular parameter Schur complement ({exc})") from None
            if not np.all(np.isfinite(self.S_lu[0])) or np.any(np.diag(self.S_lu[0]) == 0):
                raise RuntimeError("singular parameter Schur complement")
        return self

    def _band_solve(self, b):
        x = np.array(b, dtype=float, order="C")
        band_solve(self.ab, self.kl, self.ku, self.mult, self.piv, x)
        return x

    def solve(self, rhs, held=None):
        """Solve the KKT system; ``rhs`` and the result in the ``[z, lambda]`` order. ``held`` (q,) bool:
        parameters whose step is held at 0 (active bounds; their stationarity rows are dropped)."""
        nx, nz, q = self.nx, self.nz, self.q
        f = np.empty(self.nb)
        f[self.pos_z] = rhs[:nx]
        f[self.pos_c] = rhs[nz:]
        u = self._band_solve(f[:, None])[:, 0]
        out = np.empty(rhs.size)
        if q:
            r2 = self.B.T @ u - rhs[nx:nz]
            if held is None or not held.any():
                v = la.lu_solve(self.S_lu, r2)
            else:
                free = ~held
                v = np.zeros(q)
                v[free] = np.linalg.solve(self.S[np.ix_(free, free)], r2[free]) if free.any() else 0.0
            u = u - self.AiB @ v
            out[nx:nz] = v
        out[:nx] = u[self.pos_z]
        out[nz:] = u[self.pos_c]
        return out


def _state_scale(prob, z):
    """Per-entry scale for the step test: max |x_k| over the grid for node values, ``prob.param_scale``
    (1e-6 for natural parameters, 1 on an estimation scale) for parameters."""
    s = np.full(prob.nz, float(getattr(prob, "param_scale", 1e-6)))
    smax = np.zeros(prob.n)
    for e in prob.exps:
        smax = np.maximum(smax, np.abs(prob.X(z, e)).max(axis=0))
    smax[smax == 0] = 1.0
    for e in prob.exps:
        s[e.offset:e.offset + e.t.size * prob.n] = np.tile(smax, e.t.size)
    return s, float(smax.max())


def iterate(prob, constraints, z0, scheme, max_iter, xtol, ctol, evaluator=None):
    """Run the Bock iteration from ``z0``; never raises on numerical failure (status instead).

    ``prob`` gives the objective: ``prob.terms(z)`` is ``(value, gradient (nz,), Gauss-Newton
    Hessian)`` (see :meth:`_KKT.factor`) or None where it is not finite, ``prob.value(z)`` the
    value (inf where not finite), ``prob.nonfinite_start`` the message when it is not finite at
    ``z0``. ``evaluator`` fills the constraints (default :class:`_Evaluator`: one collocation kernel
    call per experiment)."""
    ev = (evaluator or _Evaluator)(prob, constraints, scheme)
    bounds = getattr(prob, "bounds", None)  # (lower, upper) of the parameters, or None
    kkt = _KKT(prob)
    nz = prob.nz
    z = z0.copy()
    hist = {k: [] for k in ("cost", "constraint", "merit", "mu", "step", "step_norm", "multiplier")}
    if not ev.constraints(z, True):
        return BockResult(z, "failed", "the collocation equations are not finite at the starting point; check the "
                          "start values (parameters, x0, start_states)", np.nan, np.nan, np.nan,
                          {k: np.array([np.nan]) for k in hist})
    terms = prob.terms(z)
    if terms is None:
        return BockResult(z, "failed", prob.nonfinite_start, np.nan, np.nan, np.nan,
                          {k: np.array([np.nan]) for k in hist})
    mu, lam_max, prev_cost = 0.0, np.nan, np.inf
    status, message = "max_iter", f"no convergence within max_iter={max_iter} iterations; the best point is kept"
    iterates = []
    for it in range(max_iter + 1):
        cost, g, H = terms
        c1 = float(np.abs(ev.c).sum())
        cinf = float(np.abs(ev.c).max()) if ev.c.size else 0.0
        rhs = np.concatenate([-g, -ev.c])
        try:
            lu = kkt.factor(H, ev.cdata)
        except RuntimeError:
            try:  # singular KKT (a direction neither observed nor constrained): tiny Levenberg shift
                big = float(np.max(H.blocks)) if isinstance(H, Hessian) else float(H.max())
                lu = kkt.factor(H, ev.cdata, reg=1e-10 * max(big, 1.0))
            except RuntimeError:
                status, message = "failed", (f"the KKT matrix is singular at iteration {it}: some direction of the "
                                             "unknowns moves neither the objective nor the constraints there (e.g. "
                                             "a parameter without effect along the start trajectory); give other "
                                             "start values or start_states")
                iterates.append((cost, c1, z.copy()))
                _record(hist, cost, cinf, cost + mu * c1, mu, np.nan, np.nan, np.nan)
                break
        sol = lu.solve(rhs) if bounds is None else _bounded_solve(lu, rhs, z, prob.theta_off, *bounds)
        dz, lam = sol[:nz], sol[nz:]
        if not np.all(np.isfinite(sol)):
            status, message = "failed", f"the KKT solve gave non-finite values at iteration {it}"
            iterates.append((cost, c1, z.copy()))
            _record(hist, cost, cinf, cost + mu * c1, mu, np.nan, np.nan, np.nan)
            break
        lam_max = float(np.abs(lam).max()) if lam.size else 0.0
        mu = max(mu, 1.5 * lam_max + 1e-12)
        phi = cost + mu * c1
        scale, xmax = _state_scale(prob, z)
        snorm = float(np.max(np.abs(dz) / (np.abs(z) + scale)))
        iterates.append((cost, c1, z.copy()))
        if snorm <= xtol and cinf <= ctol * (1.0 + xmax):
            _record(hist, cost, cinf, phi, mu, np.nan, snorm, lam_max)
            status, message = "converged", f"step and constraint tolerances met after {it} iterations"
            break
        if it == max_iter:
            _record(hist, cost, cinf, phi, mu, np.nan, snorm, lam_max)
            break
        dphi = float(g @ dz) - mu * c1
        alpha, accepted = 1.0 if bounds is None else _max_step(z[prob.theta_off:], dz[prob.theta_off:], *bounds), False
        for _ in range(_MAX_BACKTRACK):
            zt = _clip(z + alpha * dz, prob.theta_off, bounds)
            phit = _merit(prob, ev, zt, mu)
            if phit <= phi + _ARMIJO * alpha * dphi:
                accepted = True
                break
            if alpha == 1.0 and np.isfinite(phit):  # second-order correction (Maratos effect)
                corr = lu.solve(np.concatenate([np.zeros(nz), -ev.c]))[:nz]
                zs = _clip(zt + corr, prob.theta_off, bounds)
                phis = _merit(prob, ev, zs, mu)
                if phis <= phi + _ARMIJO * dphi:
                    zt, phit, accepted = zs, phis, True
                    break
            if np.isfinite(phit) and phit > phi:
                a_q = -dphi * alpha * alpha / (2.0 * (phit - phi - dphi * alpha))
                alpha = min(0.5 * alpha, max(0.1 * alpha, a_q))
            else:
                alpha *= 0.25
            if alpha < _MIN_ALPHA:
                break
        _record(hist, cost, cinf, phi, mu, alpha if accepted else 0.0, snorm, lam_max)
        if not accepted and _stalled(prob, ev, lu, z, cost, prev_cost, ctol * (1.0 + xmax), bounds):
            z = ev.z_restored
            status, message = "converged", (
                f"the objective stalled at iteration {it} (it changed by {abs(prev_cost - cost):.1e} < "
                f"fatol={prob.fatol:g} in the last step and no step decreases the merit function: a kink of "
                f"Laplace noise or the round-off floor); a last step restored the constraints to "
                f"{ev.c_restored:.1e}, changing the objective by {ev.rise:.1e}")
            iterates.append((prob.value(z), 0.0, z.copy()))
            break
        if not accepted:
            status = "failed"
            message = (f"line search failed at iteration {it}: no step length down to {alpha:.1e} decreases the "
                       f"merit function (directional derivative {dphi:.3g}); the best point is kept. Try better "
                       "start values or a finer grid")
            break
        if phit >= phi:  # accepted only through round-off: the merit cannot decrease any more
            z = zt if phit == phi else z
            if cinf <= ctol * (1.0 + xmax):
                status, message = "converged", (f"stopped at the round-off floor after {it + 1} iterations (merit "
                                                f"unchanged; scaled step {snorm:.1e} > xtol={xtol:g})")
            else:
                status, message = "failed", (f"the line search stagnated at iteration {it} with constraint "
                                             f"violation {cinf:.3g}; the best point is kept")
            iterates.append((cost, c1, z.copy()))
            _record(hist, *_final_values(prob, ev, z, mu), mu, np.nan, np.nan, lam_max)
            break
        z, prev_cost = zt, cost
        ev.constraints(z, True)
        terms = prob.terms(z)
        if terms is None:  # the merit was finite there, so the objective is: defensive
            status, message = "failed", f"the objective is not finite after iteration {it}; the best point is kept"
            break
    if status != "converged":
        mu_f = mu
        best = min(range(len(iterates)), key=lambda i: iterates[i][0] + mu_f * iterates[i][1])
        z = iterates[best][2]
    return BockResult(z, status, message, prob.value(z), lam_max, mu,
                      {k: np.asarray(v, float) for k, v in hist.items()})


def _stalled(prob, ev, lu, z, cost, prev_cost, c_tol, bounds):
    """After a failed line search, for objectives with ``prob.fatol`` (likelihoods): the objective
    changed by less than ``fatol`` in the last accepted step, and the feasibility step (the KKT
    solve without the gradient, first order in the violation) meets the constraint tolerance without
    raising the objective by more than ``_RESTORE_RISE`` (NLL units: far below the 1.92 of a 95%
    likelihood-ratio interval). Leaves the restored point in ``ev.z_restored``."""
    fatol = getattr(prob, "fatol", None)
    if fatol is None or not abs(prev_cost - cost) < fatol:
        return False
    corr = lu.solve(np.concatenate([np.zeros(prob.nz), -ev.c]))[:prob.nz]
    zc = _clip(z + corr, prob.theta_off, bounds)
    if not ev.constraints(zc, False):
        return False
    ev.z_restored, ev.c_restored = zc, float(np.abs(ev.c).max()) if ev.c.size else 0.0
    ev.rise = prob.value(zc) - cost
    return ev.c_restored <= c_tol and ev.rise <= _RESTORE_RISE


def _bounded_solve(lu, rhs, z, off, lower, upper):
    """The KKT step with the parameters that sit on a bound and would leave it held there (one
    more held per round until none would)."""
    u = z[off:]
    held = np.zeros(u.size, bool)
    while True:
        sol = lu.solve(rhs, held)
        du = sol[off:off + u.size]
        out = ~held & (((u <= lower) & (du < 0)) | ((u >= upper) & (du > 0)))
        if not out.any():
            return sol
        held |= out


def _max_step(u, du, lower, upper):
    """The largest step length in (0, 1] along ``du`` that keeps ``u`` within its bounds."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(du > 0, (upper - u) / du, np.where(du < 0, (lower - u) / du, np.inf))
    return float(min(1.0, max(np.min(a, initial=np.inf), 0.0))) or 1.0


def _clip(z, off, bounds):
    if bounds is not None:
        z[off:] = np.clip(z[off:], *bounds)
    return z


def _record(hist, cost, cinf, phi, mu, step, snorm, lam):
    for k, v in zip(("cost", "constraint", "merit", "mu", "step", "step_norm", "multiplier"),
                    (cost, cinf, phi, mu, step, snorm, lam)):
        hist[k].append(v)


def _final_values(prob, ev, z, mu):
    ev.constraints(z, False)
    cost = prob.value(z)
    return cost, float(np.abs(ev.c).max()) if ev.c.size else 0.0, cost + mu * float(np.abs(ev.c).sum())


def _merit(prob, ev, z, mu):
    if not ev.constraints(z, False):
        return np.inf
    return prob.value(z) + mu * float(np.abs(ev.c).sum())


def reduced_jacobian(prob, constraints, z, scheme):
    """``J = dr/dw`` on the constraint manifold, ``w = (theta_free, estimated x0 per experiment)``."""
    ev = _Evaluator(prob, constraints, scheme)
    if not ev.constraints(z, True):
        return None
    n, q = prob.n, prob.q
    C = sps.csc_matrix((ev.cdata, (prob.crows, prob.ccols)), shape=(prob.mc, prob.nz))
    nw = q + sum(e.est0.size for e in prob.exps)
    Z = np.zeros((prob.nz, nw))
    Z[prob.theta_off:, :q] = np.eye(q)
    col = q
    for e, r0 in zip(prob.exps, prob.crow_off):
        N = e.t.size
        Ce = C[r0:r0 + (N - 1) * n, :]
        rest = np.arange(e.offset + n, e.offset + N * n)
        k0 = e.est0.size
        rhs = np.hstack([Ce[:, prob.theta_off:].toarray(), Ce[:, e.offset + e.est0].toarray()])
        S = -spla.splu(Ce[:, rest].tocsc()).solve(rhs)
        Z[rest, :q] = S[:, :q]
        Z[rest, col:col + k0] = S[:, q:]
        Z[e.offset + e.est0, col + np.arange(k0)] = 1.0
        col += k0
    _, d = prob.residuals(z)
    return d[:, None] * Z[prob.ridx]


def covariance(prob, constraints, z, scheme, rcond):
    """``(J^T J)^{-1}`` of the reduced Jacobian; NaN rows/columns for non-identifiable directions."""
    names, _ = prob.names_values(z)
    J = reduced_jacobian(prob, constraints, z, scheme)
    if J is None or not np.all(np.isfinite(J)):
        return None, {"cov_note": "reduced Jacobian not finite"}, []
    scale = np.linalg.norm(J, axis=0)
    scale[scale == 0] = 1.0
    _, S, Vt = np.linalg.svd(J / scale, full_matrices=False)
    keep = S > rcond * S[0]
    V = Vt.T
    cov = (V[:, keep] / S[keep] ** 2) @ V[:, keep].T / np.outer(scale, scale)
    bad = []
    if not keep.all():
        weight = np.sum(V[:, ~keep] ** 2, axis=1)
        badmask = weight > 1e-3
        cov[badmask, :] = np.nan
        cov[:, badmask] = np.nan
        bad = [nm for nm, b in zip(names, badmask) if b]
    extras = {"rank": int(keep.sum()), "condition_number": float(S[0] / S[-1]) if S[-1] > 0 else np.inf,
              "cov_type": "reduced Gauss-Newton (J^T W J)^-1 on the collocation manifold"}
    return cov, extras, bad
