"""Residuals and exact Jacobians of single and multiple shooting over several experiments.

The unknown vector ``u`` (internal coordinates) is laid out as

* the free model parameters (``log p`` for log-parametrised ones), then
* per experiment, its estimated initial states (those not held fixed), then
* per experiment, per segment ``j = 1 .. m-1`` of multiple shooting, all states at the
  segment's start time (nuisance unknowns, not reported).

One :class:`~odeinfer.solve.Solver` with forward sensitivities per (experiment, segment) gives
``y`` and ``dy / d(params, x0)`` at the segment's observation times (plus, for every segment
but the last, its end time for the continuity condition). Two numba kernels copy them into
preallocated ``r`` and ``J`` buffers:

* observation rows ``w_k (h(x_k(t_i)) - h(y_ik))`` with ``h`` the identity or ``log`` (log-scale
  noise) and ``w_k = 1 / sigma_k``;
* continuity rows ``c_k (x(tau_{j+1}^-; s_j) - s_{j+1})`` with weight ``c_k``.

Only the non-zero pattern is written (it is the same at every call), so the buffers are never
cleared. Columns of log-parametrised unknowns are multiplied by ``p`` (chain rule).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from odeinfer.errors import DataError, InputError
from odeinfer.solve import Forward, Problem, bind
from odeinfer.solve.abi import Info, status_message

__all__ = ["ShootingProblem", "segment_nodes"]


@njit(cache=True)
def _assemble_obs(y, S, ti, si, yobs, w, logobs, rows, src, dst, gm, r, J):
    """Observation rows; returns 1 if a log-observed state is <= 0, else 0."""
    nc = src.shape[0]
    for k in range(ti.shape[0]):
        row = rows[k]
        x = y[ti[k], si[k]]
        if logobs:
            if not x > 0.0:
                return 1
            r[row] = w[k] * (math.log(x) - yobs[k])
            fac = w[k] / x
        else:
            r[row] = w[k] * (x - yobs[k])
            fac = w[k]
        for c in range(nc):
            J[row, dst[c]] = fac * S[ti[k], si[k], src[c]] * gm[dst[c]]
    return 0


@njit(cache=True)
def _assemble_cont(y, S, last, wc, row0, src, dst, gm, next_off, u, r, J):
    """Continuity rows ``wc_s (y[last, s] - u[next_off + s])``."""
    n = y.shape[1]
    nc = src.shape[0]
    for s in range(n):
        row = row0 + s
        r[row] = wc[s] * (y[last, s] - u[next_off + s])
        for c in range(nc):
            J[row, dst[c]] = wc[s] * S[last, s, src[c]] * gm[dst[c]]
        J[row, next_off + s] = -wc[s]


def segment_nodes(data, m, name):
    """Start times of the ``m`` segments of one experiment (``data.t0`` first).

    Nodes are observation times, evenly spread over the distinct times; raises an
    :class:`InputError` when ``m`` exceeds the number of intervals between them.
    """
    T = np.unique(np.asarray(data.t)[np.asarray(data.mask).any(axis=1)])
    n_int = T.size - 1
    if m > max(n_int, 1) or (m > 1 and n_int < 1):
        raise InputError(
            f"segments: got {m}, but experiment {name!r} has only {max(n_int, 0)} interval(s) between its "
            f"{T.size} distinct observation times; use segments <= {max(n_int, 1)}")
    idx = [int(round(j * n_int / m)) for j in range(1, m)]
    return np.concatenate([[float(data.t0)], T[idx]])


class _Segment:
    __slots__ = ("solver", "ti", "si", "yobs", "rows", "src", "dst", "j", "exp", "last", "crow0", "next_off",
                 "start_off", "w_state")


class ShootingProblem:
    """Single/multiple shooting residuals over experiments (see module docstring).

    Parameters
    ----------
    problem : Problem
        From :func:`odeinfer.estimators.base.prepare`.
    x0_known : list of dict
        Per experiment, the initial states held fixed, ``{state: value}``.
    log_mask : ndarray of bool (n_free,)
        Free parameters estimated on the log scale.
    segments : int
        Shooting segments per experiment (1 = single shooting).
    solver : Dopri5, Rodas or Auto
        The IVP solver of every segment.

    Attributes
    ----------
    failure : str or None
        Why the last :meth:`evaluate` that returned None failed: the experiment (and segment)
        and the solver's own status message (with the time reached), or the non-positive
        log-observed state; None before any failure.
    """

    def __init__(self, problem, x0_known, log_mask, segments, *, solver):
        self.problem = problem
        self.solver = solver
        self.failure = None
        model = problem.model
        self.model = model
        n, npar = model.n_states, model.n_params
        self.n = n
        self.logobs = model.observation.noise == "log"
        self.free_index = problem.free_index
        self.n_free = len(problem.free)
        self.log_mask = np.asarray(log_mask, bool)
        self.p_base = problem.full_params(np.zeros(self.n_free))
        exps = list(problem.experiments)
        self.exp_names = list(problem.experiments.names)
        self.multi = len(exps) > 1
        self.segments = int(segments)
        observed = set(model.observed)
        # --- unknown layout ---------------------------------------------------------------
        names = list(problem.free)
        off = self.n_free
        self.x0_base, self.x0_est, self.x0_off = [], [], []
        for e, d in enumerate(exps):
            known = x0_known[e]
            base = np.array([known.get(s, np.nan) for s in model.states])
            est = np.array([i for i, s in enumerate(model.states) if s not in known], dtype=np.int64)
            self.x0_base.append(base)
            self.x0_est.append(est)
            self.x0_off.append(off)
            for i in est:
                names.append(f"x0[{model.states[i]}]" + (f"@{self.exp_names[e]}" if self.multi else ""))
            off += est.size
        self.n_public = off
        self.public_names = tuple(names)
        self.seg_off = []
        self.nodes = []
        for e, d in enumerate(exps):
            nodes = segment_nodes(d, self.segments, self.exp_names[e]) if self.segments > 1 else \
                np.array([float(d.t0)])
            self.nodes.append(nodes)
            offs = []
            for j in range(1, nodes.size):
                offs.append(off)
                off += n
            self.seg_off.append(offs)
        self.n_unknowns = off
        # --- rows -----------------------------------------------------------------------------
        self.segs = []
        row = 0
        row_state, row_exp, row_t = [], [], []
        for e, d in enumerate(exps):
            cols = [k for k, s in enumerate(d.states) if s in observed]
            if not cols or not np.asarray(d.mask)[:, cols].any():
                raise DataError(
                    f"data: experiment {self.exp_names[e]!r} has no observation of the model's observed states "
                    f"{list(model.observed)}; remove it or add observations")
            y = np.asarray(d.y)
            mask = np.asarray(d.mask)
            cols_arr = np.array(cols, np.int64)
            state_of_col = np.array([model.states.index(d.states[c]) for c in cols], np.int64)
            nodes = self.nodes[e]
            m = nodes.size
            for j in range(m):
                lo_t = nodes[j]
                hi_t = nodes[j + 1] if j + 1 < m else np.inf
                sel = (d.t >= lo_t) & (d.t < hi_t) if j + 1 < m else (d.t >= lo_t)
                if j == 0:
                    sel = d.t < hi_t if j + 1 < m else np.ones(d.t.size, bool)
                tt = np.asarray(d.t)[sel]
                out_t = tt if j + 1 == m else np.concatenate([tt, [hi_t]])
                if out_t.size == 0:
                    out_t = np.array([lo_t])
                seg = _Segment()
                seg.exp, seg.j = e, j
                seg.solver = bind(Problem(model, out_t, t0=lo_t), solver=solver,
                                  gradient=Forward(exclude=tuple(problem.fixed)))
                tidx = np.flatnonzero(sel)
                a_idx, c_idx = np.nonzero(mask[np.ix_(tidx, cols_arr)])
                k = a_idx.size
                seg.ti = a_idx.astype(np.int64)
                seg.si = state_of_col[c_idx]
                vals = y[tidx[a_idx], cols_arr[c_idx]]
                seg.yobs = np.log(vals) if self.logobs else vals.astype(float)
                seg.rows = np.arange(row, row + k, dtype=np.int64)
                row_state.append(seg.si)
                row_exp.append(np.full(k, e, np.int64))
                row_t.append(np.asarray(d.t)[tidx[a_idx]])
                row += k
                src, dst = [], []
                for k, pi in enumerate(self.free_index):
                    src.append(int(pi))
                    dst.append(k)
                if j == 0:
                    seg.start_off = -1
                    for a, i in enumerate(self.x0_est[e]):
                        src.append(npar + int(i))
                        dst.append(self.x0_off[e] + a)
                else:
                    seg.start_off = self.seg_off[e][j - 1]
                    for s in range(n):
                        src.append(npar + s)
                        dst.append(seg.start_off + s)
                seg.src = np.array(src, np.int64)
                seg.dst = np.array(dst, np.int64)
                seg.last = out_t.size - 1
                seg.next_off = self.seg_off[e][j] if j + 1 < m else -1
                seg.crow0 = -1
                self.segs.append(seg)
        self.n_obs = row
        for seg in self.segs:
            if seg.next_off >= 0:
                seg.crow0 = row
                row += n
        self.n_rows = row
        self.row_state = np.concatenate(row_state).astype(np.int64)
        self.row_exp = np.concatenate(row_exp).astype(np.int64)
        self.row_t = np.concatenate(row_t).astype(float)
        self.r = np.zeros(self.n_rows)
        self.J = np.zeros((self.n_rows, self.n_unknowns))
        self.gm = np.ones(self.n_unknowns)
        self.p = self.p_base.copy()
        self.x0_buf = [b.copy() for b in self.x0_base]
        self.wc = np.ones(n)
        self._obs_states = np.unique(self.row_state)
        self.set_sigma(np.ones(n))

    # ------------------------------------------------------------------------------------
    def set_sigma(self, sigma_state, continuity_weight=1.0):
        """Weights ``1 / sigma`` per state (ndarray (n_states,)); continuity weight per state is
        ``continuity_weight / sigma`` (unobserved states use the mean of the observed sigmas)."""
        sig = np.asarray(sigma_state, float)
        self.sigma_state = sig.copy()
        inv = 1.0 / sig
        for seg in self.segs:
            seg.w_state = inv[seg.si]
        obs = self._obs_states
        ref = float(np.mean(sig[obs])) if obs.size else 1.0
        scale = np.full(self.n, ref)
        scale[obs] = sig[obs]
        self.wc = continuity_weight / scale

    def params_natural(self, u):
        th = u[:self.n_free]
        return np.where(self.log_mask, np.exp(np.where(self.log_mask, th, 0.0)), th)

    def evaluate(self, u):
        """``(r, J)`` at ``u`` (views of the internal buffers), or None on a solver failure."""
        nf = self.n_free
        pv = self.params_natural(u)
        p = self.p
        p[self.free_index] = pv
        self.gm[:nf] = np.where(self.log_mask, pv, 1.0)
        r, J, gm = self.r, self.J, self.gm
        for seg in self.segs:
            e = seg.exp
            if seg.j == 0:
                x0 = self.x0_buf[e]
                est = self.x0_est[e]
                if est.size:
                    o = self.x0_off[e]
                    x0[est] = u[o:o + est.size]
            else:
                x0 = u[seg.start_off:seg.start_off + self.n]
            y, S, st = seg.solver(p, x0)
            if st != 0:
                info = seg.solver.info
                self.failure = self._where(seg) + status_message(st, t_reached=float(info[Info.T_REACHED]),
                                                                 max_steps=seg.solver.max_steps)
                return None
            if _assemble_obs(y, S, seg.ti, seg.si, seg.yobs, seg.w_state, self.logobs, seg.rows, seg.src,
                             seg.dst, gm, r, J):
                self.failure = self._where(seg) + "an observed state is <= 0, which log-scale noise cannot compare"
                return None
            if seg.next_off >= 0:
                _assemble_cont(y, S, seg.last, self.wc, seg.crow0, seg.src, seg.dst, gm, seg.next_off, u, r, J)
        return r, J

    def _where(self, seg):
        segment = f", segment {seg.j + 1} of {self.segments}" if self.segments > 1 else ""
        return f"experiment {self.exp_names[seg.exp]!r}{segment}: "

    def raw_residuals(self, r):
        """Unweighted ``prediction - data`` (log scale for log noise) of the observation rows."""
        w = np.empty(self.n_obs)
        for seg in self.segs:
            w[seg.rows] = seg.w_state
        return r[:self.n_obs] / w
