"""The negative log-likelihood of a :class:`~odeinfer.likelihood.FitProblem`, its exact gradient
and its Fisher information, on the estimation scale.

Per experiment the model runs from ``t0`` (or from the steady state of its pre-equilibration)
through segments cut at dose times and at the knots of inputs (a linear input ``u`` runs as
``u + u__rate t`` with constant coefficients between knots, see ``FitProblem.solve_model``); each segment is one
prebuilt :class:`~odeinfer.solve.Solver` with forward sensitivities in the right-hand side's
parameters and the segment's initial state, chained to the problem's parameters through the
exact Jacobian of the condition mapping ``v(theta) = p | q | x0 | doses | p_pre | x0_pre``. A
dose adds its amount to the state (and the amount's gradient to the state's sensitivities: the
jump condition of a bolus at a fixed time); a dose with ``mode="set"`` sets the state to its amount
and the state's sensitivities to the amount's gradient (the jump condition of a reset at a fixed
time). A jump of the right-hand side at a time that is a
function of the parameters alone (``where(t >= tau, ...)``, :mod:`odeinfer.likelihood.switches`)
cuts the integration too, at cut times that move with the parameters (segments cached by them),
and adds ``(f(tau-) - f(tau+)) dtau/dtheta`` to the state sensitivities there. Events whose triggers depend
on the states (:class:`~odeinfer.Event`, :mod:`odeinfer.likelihood.events`) are looked for on a finer grid of
each segment, located by re-solves from the grid point before them, and applied with their jump conditions;
the integration starts again after each. Measurements at ``t = inf``
(:class:`~odeinfer.Data` ``steady_state=True``) see the steady state that
:class:`~odeinfer.likelihood.steady.SteadyState` reaches under the experiment's parameters from the end of
its finite-time trajectory (the last finite measurement or dose), chained with its sensitivities
``d x_ss / d(p, x_end)``. Observables and noise models (exact derivatives)
give the NLL terms (:mod:`odeinfer.likelihood.noise`); per experiment, the observables' values
and partial derivatives are written into buffers that one numba kernel turns into the NLL, the
gradient and the Fisher information (:mod:`odeinfer.likelihood.assemble`).
"""

from __future__ import annotations

import math

import numpy as np

from odeinfer.errors import InputError
from odeinfer.likelihood.assemble import OK, assemble, assemble_adjoint
from odeinfer.likelihood.events import (MAX_FIRINGS, CompiledEvents, StatesOnly, check_grid, crossings, euler_step,
                                       fire, held_switches, locate, state_switches)
from odeinfer.likelihood.mapping import ConditionMapping
from odeinfer.likelihood.noise import DIST_CODES, SCALE_CODES, transform_data
from odeinfer.likelihood.observe import ObservableFunctions
from odeinfer.likelihood.parameters import dnatural_dscaled, from_scale
from odeinfer.likelihood.steady import SteadyState
from odeinfer.likelihood.switches import TimeSwitches
from odeinfer.solve import Forward, Problem, bind
from odeinfer.solve.config import as_solver, default_solver
from odeinfer.solve.abi import Info, Status, status_message

__all__ = ["Objective", "Evaluation"]


class Evaluation:
    """One evaluation: ``nll``, ``grad`` and ``fim`` (estimation scale) or ``failure`` (a message).

    ``curvature`` is what the fits' trust region takes as the NLL's Hessian: the Fisher information with
    the noise sds' expected information replaced by its observed value at the current residuals (see
    :mod:`odeinfer.likelihood.assemble`); the two agree where no sd depends on an estimated parameter.
    Covariances take ``fim``. Default: ``fim``."""

    __slots__ = ("nll", "grad", "fim", "curvature", "failure")

    def __init__(self, nll=np.inf, grad=None, fim=None, failure=None, curvature=None):
        self.nll, self.grad, self.fim, self.failure = nll, grad, fim, failure
        self.curvature = fim if curvature is None else curvature

    @property
    def ok(self):
        return self.failure is None


class _Segment:
    __slots__ = ("start", "solver", "out", "rows", "end_extra", "jumps", "switches", "p_inputs", "fine", "_alone",
                 "vjp")

    def alone(self, fine=False):
        """The states-only twin of the segment's solver (of its events' check-grid solver with ``fine``), built
        on first use: called like it, it returns sensitivities with no columns."""
        if self._alone is None:
            self._alone = {}
        twin = self._alone.get(fine)
        if twin is None:
            twin = self._alone[fine] = _StatesAlone((self.fine[2] if fine else self.solver).states_alone())
        return twin


class _StatesAlone:
    """A bound solver's twin without sensitivities (same class, method and options), called like the
    directional solver, ``(y, S, status) = twin(p, x0, pdir, s0)``, with ``S`` of no columns."""

    __slots__ = ("solver", "_empty")

    def __init__(self, solver):
        self.solver = solver
        self._empty = np.zeros((solver.t.size, solver.compiled.n_states, 0))

    def __call__(self, params, x0, *directions):
        y, _, status = self.solver(params, x0)
        return y, self._empty, status

    def retimed(self, t, t0):
        return _StatesAlone(self.solver.retimed(t, t0))

    info = property(lambda self: self.solver.info)
    max_steps = property(lambda self: self.solver.max_steps)
    compiled = property(lambda self: self.solver.compiled)


class _Run:
    """The compiled plan of one experiment."""

    def __init__(self, obj, plan, times=None, share=None, solver=None):
        prob, m = obj.problem, obj.problem.model
        self.name = plan.name
        self.n_p, self.n_q, self.n_s = m.n_params, len(m.obs_params), m.n_states
        # the solver's parameters: the model's, then input rates, then the held state switches' branches
        self.n_ps = obj.solve_model.n_params
        self.all_states = np.arange(m.n_states)
        self.n_d = len(plan.doses)
        self._solve_model, self._held_model, self.obj_switches = prob.solve_model, obj.solve_model, obj.switches
        self.events = obj.events
        self._kinks = None  # the model's kinks at state thresholds, for a failure message (_kink_note)
        self._mapper = obj.mapper
        self._rows = obj.mapper.rows(plan)
        jac = obj.mapper.jacobian(self._rows)
        # a parameter that moves a jump of the right-hand side (e.g. a step input's end time) is
        # fine while this experiment holds it fixed: its sensitivity columns are not needed
        held = [k for k in range(self.n_p) if all(e == 0 for e in jac.row(k))]
        # a jump at a time that is a function of the parameters alone (a time switch) is fine too:
        # the run cuts its integration there and adds the jump of the sensitivities; not when the
        # time depends on one of this run's inputs (a parameter that changes at the input's knots)
        sw = obj.switches
        inputs = {m.param_symbols[k] for k in plan.inputs}
        self.switch_ids = [i for i in range(sw.n) if not sw.symbols[i] & inputs]
        moved = set().union(*(sw.symbols[i] for i in range(sw.n) if i not in self.switch_ids))
        handled = [k for k in range(self.n_p) if m.params[k] in sw.handled and m.param_symbols[k] not in moved]
        # a parameter in a condition on the states: the run locates that switch and adds its jump (events.py)
        located = set().union(*(g.free_symbols for g, *_ in obj.state_switches))
        handled += [k for k in range(self.n_p) if m.param_symbols[k] in located and k not in handled]
        switching = prob.solve_model.switching_params
        excluded = sorted({k for k in held if m.params[k] in switching} | set(handled))
        self.excluded = np.array(excluded, np.int64)  # no sensitivities: fixed, or moved only by the switch times
        # directional sensitivities along the estimated parameters that move the trajectory (the
        # right-hand side's parameters, initial states, doses, pre-equilibration): not the noise or
        # observable-only ones, nor anything per fixed parameter or initial state
        traj_rows = list(range(self.n_p)) + list(range(self.n_p + self.n_q, jac.rows))
        self.traj_cols = np.array([j for j in range(jac.cols) if any(jac[i, j] != 0 for i in traj_rows)], np.int64)
        self.col_sel = _as_slice(self.traj_cols)  # the same columns, as a slice where they are contiguous
        # the held switches' branches are set per segment, not estimated (held_switches)
        held_names = obj.solve_model.params[prob.solve_model.n_params:]
        gradient = Forward(exclude=tuple(m.params[k] for k in excluded) + held_names,
                           directions=max(self.traj_cols.size, 1))
        self.preeq = obj.steady if plan.preequilibrate else None
        if self.preeq is not None:  # the pre-equilibration cuts no switch: its jumps' parameters must be held
            op = self.n_p + self.n_q + self.n_s + self.n_d
            # the entries of (p, x0) under the pre-condition that the estimated parameters move
            self.preeq_moving = np.array([any(e != 0 for e in jac.row(op + k)) for k in range(self.n_p + self.n_s)])
            self.preeq.prepare(list(np.flatnonzero(~self.preeq_moving[:self.n_p])))
        self.keep_x0 = plan.keep_x0
        # --- output times and segments ---------------------------------------------------------
        t0 = plan.t0
        if times is None:
            self.times, self.row_out = np.unique(plan.t_rows, return_inverse=True)
        else:  # the union of the times of the experiments that share this one's trajectory
            self.times, self.row_out = times, np.searchsorted(times, plan.t_rows)
        self.share = share
        finite = self.times[np.isfinite(self.times)]
        self.at_inf = np.flatnonzero(np.isinf(self.times))  # the rows of the steady state
        # the finite-time trajectory ends at the last finite time (or, before a steady state, the last dose)
        t_end = max([t0, *finite[-1:], *[d.time for d in plan.doses]]) if self.at_inf.size else (
            float(self.times[-1]) if self.times.size else t0)
        self.t0, self.t_end = t0, float(t_end)
        # measurements at t = inf: the steady state reached from the end of the finite-time trajectory
        # under the experiment's parameters (no switch is cut there either: their parameters must be held)
        self.steady = obj.steady if self.at_inf.size else None
        self.inf_moving = np.r_[[k not in held for k in range(self.n_p)], np.ones(self.n_s, bool)]
        if self.steady is not None:
            try:
                self.steady.prepare(held)
            except InputError as exc:
                raise InputError(f"experiment {plan.name!r} has measurements at the steady state (t = inf), but the "
                                 "run to steady state cannot differentiate through a jump that an estimated "
                                 f"parameter moves ({exc}); fix those parameters in the experiment's condition or "
                                 "drop the rows at t = inf") from None
        cuts = {d.time for d in plan.doses if d.time > t0}
        for inp in plan.inputs.values():
            cuts |= {k for k in inp.t if t0 < k < t_end}
        self.fixed_cuts = sorted(cuts)
        self.x0_doses = [(m.states.index(d.state), i, d.resets) for i, d in enumerate(plan.doses) if d.time <= t0]
        self.dose_times = [(d.time, (m.states.index(d.state), i, d.resets)) for i, d in enumerate(plan.doses)]
        self.p_inputs = [(k, inp, prob.rates.get(k)) for k, inp in plan.inputs.items()]
        self.solver = obj.solver if solver is None else solver
        self.step_log = obj.step_log
        self.adjoint = obj.adjoint  # the solver of the adjoint's segments, or None (forward sensitivities)
        self.gradient = gradient
        self._cache = {}  # segments by their cut times (switch times move with the parameters)
        self._segments = None
        if share is None:  # bound (and the gradient's validity checked) once here, at the fixed cuts
            self._segments = self._cut([])
            self._cache[self._key([])] = self._segments

        # --- measurements grouped by observable ------------------------------------------------
        self.groups = []
        for k, o in enumerate(m.observables):
            rows = np.flatnonzero(plan.obs_rows == k)
            if rows.size == 0:
                continue
            y = plan.y_rows[rows]
            scale = SCALE_CODES[o.noise.scale]
            if scale and np.any(y <= 0):
                bad = plan.t_rows[rows][y <= 0][:5].tolist()
                raise _data_error(plan.name, o, bad)
            zy, jac_term = transform_data(y, scale)
            self.groups.append((k, rows, plan.t_rows[rows], self.row_out[rows], zy, jac_term,
                                DIST_CODES[o.noise.distribution], scale))
        self.n_rows = plan.t_rows.size
        # the groups' rows one after the other: the layout of the assembly kernel's buffers
        sizes = [grp[1].size for grp in self.groups]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.slices = [slice(int(a), int(b)) for a, b in zip(self.starts[:-1], self.starts[1:])]
        cat = (lambda parts, dtype=float: np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype))
        self.idx = cat([grp[3] for grp in self.groups], np.int64)
        self.zy = cat([grp[4] for grp in self.groups])
        self.jac_terms = cat([grp[5] for grp in self.groups])
        self.dist = np.array([grp[6] for grp in self.groups], np.int64)
        self.scale = np.array([grp[7] for grp in self.groups], np.int64)
        # the observables' buffers of the assembly, made once: every call writes all of H and S and the
        # same (row, column) entries of the partial derivatives (their other entries stay zero)
        n = self.idx.size
        self.buffers = (np.empty(n), np.empty(n), np.zeros((n, 1)), *(
            np.zeros((n, k)) for k in (self.n_s, self.n_p, self.n_q, self.n_s, self.n_p, self.n_q)))
        # the rows held at the solver's resolution by Objective._observe_into, and their computed values
        self.floored, self.raw = np.zeros(n, bool), np.zeros(n)

    def resolution(self, sl):
        """``atol * sum_s |dh/dx_s|`` for the rows ``sl`` of the buffers: the solve's resolution of each observable."""
        return float(np.max(self.solver.atol)) * np.abs(self.buffers[3][sl]).sum(axis=1)

    @property
    def segments(self):
        """The segments of the last solve (before any: those of the fixed cuts)."""
        return (self.share or self)._segments

    @staticmethod
    def _key(switches):
        return tuple((lo, hi) for _, lo, hi, _ in switches)

    def _cut(self, switches):
        """The segments between ``t0``, the fixed cuts (doses, input knots) and the ``switches``
        (``(tau, t_lo, t_hi, dtau/dp)``, inside ``(t0, t_end)``): a segment ending at a switch stops at
        ``t_lo``, the next starts at ``t_hi``, the two floats next to ``tau`` on either side of the jump."""
        t0, t_end = self.t0, self.t_end
        cuts = [(c, c, c, None) for c in self.fixed_cuts]
        cuts += [(tau, lo, hi, j) for j, (tau, lo, hi, _) in enumerate(switches)]
        cuts.sort(key=lambda c: (c[0], c[3] is not None))
        merged = []  # a switch within a cut's bracket (a coincidence) shares that cut
        for c in cuts:
            if merged and c[1] <= merged[-1][2]:
                tau, lo, hi, ids = merged[-1]
                merged[-1] = (tau, min(lo, c[1]), max(hi, c[2]), ids + ([] if c[3] is None else [c[3]]))
            else:
                merged.append((c[0], c[1], c[2], [] if c[3] is None else [c[3]]))
        if not merged or merged[-1][0] < t_end:
            merged.append((t_end, t_end, t_end, []))
        segments, start, prev = [], t0, None
        for tau, end, nxt, ids in merged:
            sel = (self.times > prev if prev is not None else self.times >= start) & (self.times <= tau)
            out = np.flatnonzero(sel)
            tt = np.clip(self.times[out], start, end)  # a measurement inside a switch's bracket: at its side
            extra = not (tt.size and tt[-1] == end)
            if extra:
                tt = np.append(tt, end)
            seg = _Segment()
            seg.start, seg.out, seg.rows, seg.end_extra = start, out, _as_slice(out), extra
            seg.solver = self._bind(tt, start)
            seg.fine = seg._alone = seg.vjp = None
            if self.events is not None:  # the triggers are checked on a finer grid too
                fine = check_grid(start, end, tt)
                solver = self._bind(fine, start)
                seg.fine = (fine, np.searchsorted(fine, tt), solver, StatesOnly(solver))
            seg.jumps = [dose for (td, dose) in self.dose_times if td == tau and td > self.t0]
            seg.switches = ids
            seg.p_inputs = [_input_at(k, inp, start, r) for k, inp, r in self.p_inputs]
            segments.append(seg)
            start, prev = nxt, tau
        return segments

    def _bind(self, tt, start):
        if self._segments is None:  # the first binding validates the options
            return bind(Problem(self._held_model, tt, t0=start), solver=self.solver, gradient=self.gradient)
        return _retimed(self._segments[0].solver, tt, start)

    def _segments_at(self, p):
        """The segments for the switch times at the parameters ``p`` (cached by the cut times) and the
        switches inside ``(t0, t_end)``."""
        inside = [s for s in self.obj_switches.at(p, self.switch_ids) if s[1] > self.t0 and s[2] < self.t_end]
        key = self._key(inside)
        segs = self._cache.get(key)
        if segs is None:
            segs = self._cut(inside)
            if len(self._cache) >= _CACHE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = segs
        if segs is not self._segments:
            _carry_stiffness(self._segments, segs)
            self._segments = segs
        return segs, inside

    def mapping(self, theta):
        return self._mapper.at(theta, self._rows)

    def _kink_note(self, status):
        """For a collapsed step: the model's kinks at state thresholds (a trajectory sliding along one) as a
        possible cause."""
        if status != Status.STEP_TOO_SMALL:
            return ""
        if self._kinks is None:
            from odeinfer.solve._inputs import state_kinks

            self._kinks = state_kinks(self._solve_model)
        if not self._kinks:
            return ""
        return (f"; the right-hand side has kinks where a state crosses a threshold ({', '.join(self._kinks[:3])}"
                f"{', ...' if len(self._kinks) > 3 else ''}): the run locates where they switch, but a trajectory that "
                "stays on a threshold (sliding along it) collapses the step; a smooth version of the kink in the model "
                "avoids it")

    def states(self, v, Jv, sens=True, trace=None):
        """States ``(n_times, n_s)`` and their gradients ``(n_times, n_s, n_est)``, or a failure text; without
        ``sens``, solves of the states alone (the gradients have no columns). ``trace`` (a list): filled with what
        the adjoint's reverse pass needs, the switches inside the run, then per segment ``(segment, its parameters,
        the state at its start, at its end before the jumps there)``."""
        n_p, n_q, n_s = self.n_p, self.n_q, self.n_s
        if not sens:
            Jv = Jv[:, :0]
        ne = Jv.shape[1]
        p, dp = v[:n_p].copy(), Jv[:n_p]
        o = n_p + n_q
        x, dx = v[o:o + n_s].copy(), Jv[o:o + n_s].copy()
        od = o + n_s
        if self.preeq is not None:
            op = od + self.n_d
            if sens:
                res = self.preeq(v[op:op + n_p], v[op + n_p:op + n_p + n_s], Jv[op:op + n_p],
                                 Jv[op + n_p:op + n_p + n_s])
            else:  # the states alone (recorded for the adjoint)
                res = self.preeq.states(v[op:op + n_p], v[op + n_p:op + n_p + n_s], moving=self.preeq_moving)
                res = res if isinstance(res, str) else (res, np.zeros((n_s, 0)))
            if isinstance(res, str):
                return f"experiment {self.name!r}: {res}"
            xs, dxs = res
            keep = self.keep_x0
            x = np.where(keep, x, xs)
            dx = np.where(keep[:, None], dx, dxs)
        apply_doses(x, dx, self.x0_doses, v[od:], Jv[od:])
        X = np.empty((self.times.size, n_s))
        dX = np.zeros((self.times.size, n_s, ne))
        n_ps, cols, sel = self.n_ps, self.traj_cols, self.col_sel
        if not sens:
            cols = sel = cols[:0]
        k_dir = max(cols.size, 1) if sens else 0
        s0 = np.zeros((n_s, k_dir))
        if self.switch_ids:
            segments, switches = self._segments_at(p)
        else:
            segments, switches = self._segments, ()
        if trace is not None:
            trace.append(switches)
        armed = None  # per event: may it fire (its trigger has been false since it last fired)?
        for seg in segments:
            pdir = np.zeros((n_ps, k_dir))
            pdir[:n_p, :cols.size] = dp[:, sel]
            pj = p
            if seg.p_inputs or n_ps > n_p:
                pj = np.zeros(n_ps)
                pj[:n_p] = p
                for k, u, r, rate in seg.p_inputs:
                    pj[k] = u
                    pdir[k] = 0.0
                    if r is not None:
                        pj[r] = rate
            s0[:, :cols.size] = dx[:, sel]
            x_start = x
            if seg.fine is None and trace is not None and self.adjoint.method == "rodas":
                # the adjoint's own forward pass: the reverse pass sweeps its record (no second solve)
                used = self._vjp(seg)
                st = used.record(pj, np.ascontiguousarray(x))
                y, S = used.y, np.empty((used.t.size, n_s, 0))
            else:
                used = seg.solver if sens else seg.alone()
                if seg.fine is None and sens:
                    y, S, st, used = self._limited(seg, pj, np.ascontiguousarray(x), pdir, s0)
                elif seg.fine is None:
                    y, S, st = used(pj, np.ascontiguousarray(x), pdir, s0)
                else:
                    res = self._run_events(seg, pj, x, pdir, s0, armed, sens)
                    if isinstance(res, str):
                        return f"experiment {self.name!r}: {res}"
                    y, S, st, armed = res
            if st != 0:
                why = status_message(st, t_reached=used.info[0], max_steps=used.max_steps)
                return f"experiment {self.name!r}: {why}{self._kink_note(st)}"
            n_out = seg.out.size
            X[seg.rows] = y[:n_out]
            if isinstance(seg.rows, slice) and isinstance(sel, slice):
                dX[seg.rows, :, sel] = S[:n_out, :, :cols.size]
            else:
                dX[np.ix_(seg.out, self.all_states, cols)] = S[:n_out, :, :cols.size]
            x = y[-1].copy()
            if trace is not None:
                trace.append((seg, pj, np.array(x_start), x.copy()))
            dx = np.zeros((n_s, ne))
            dx[:, sel] = S[-1, :, :cols.size]
            for j in seg.switches:  # the jump of the sensitivities at a switch time
                _, lo, hi, dtau = switches[j]
                cm = seg.solver.compiled
                dx += np.outer(cm.f(lo, x, pj) - cm.f(hi, x, pj), dtau @ dp)
            apply_doses(x, dx, seg.jumps, v[od:], Jv[od:])
        if self.at_inf.size:
            what = "the run to steady state (measurements at t = inf)"
            res = (self.steady(p, x, dp, dx, what=what, t0=self.t_end) if sens else
                   self.steady.states(p, x, what=what, t0=self.t_end, moving=self.inf_moving))
            if isinstance(res, str):
                return f"experiment {self.name!r}: {res}"
            if sens:
                X[self.at_inf], dX[self.at_inf] = res
            else:
                X[self.at_inf] = res
        return X, dX

    def _limited(self, seg, pj, x, pdir, s0):
        """``seg``'s solve with sensitivities under the step limit (:meth:`Objective.limit_steps`): ``(y, S, status,
        the solver that answered)``. A solve stopped at the limit is checked by a solve of the states alone: when
        that fails as well (a trajectory that blows up or stalls, where the sensitivities' error control can take
        10^5 steps to fail), its failure is the answer; else the solve runs again to the solver's ``max_steps``,
        so the limit changes no evaluation that would succeed, only the cost of some that fail."""
        solver, limit = seg.solver, int(self.step_log[0])
        solver.limit_steps(limit or None)
        y, S, st = solver(pj, x, pdir, s0)
        if st == Status.MAX_STEPS and 0 < limit < solver.max_steps:
            alone = seg.alone()
            y_alone, S_alone, st_alone = alone(pj, x, pdir, s0)
            if st_alone != 0:
                return y_alone, S_alone, st_alone, alone
            solver.limit_steps(None)
            y, S, st = solver(pj, x, pdir, s0)
        self.step_log[1] = max(self.step_log[1], solver.info[Info.N_STEPS])
        return y, S, st, solver

    def reverse(self, v, Jv, trace, Xbar, pbar):
        """The gradient on the natural scale of the estimated parameters from the adjoint: ``Xbar`` (n_times, n_s)
        and ``pbar`` (n_p,), the NLL's partial derivatives with respect to the states at the output times and the
        right-hand side's parameters, carried back through the steady state, the segments (:meth:`states`'
        ``trace``), their jumps, the doses and the pre-equilibration to ``v``, then ``Jv^T``; or a failure text."""
        n_p, n_q, n_s = self.n_p, self.n_q, self.n_s
        o = n_p + n_q
        od = o + n_s
        p, dp = v[:n_p], Jv[:n_p]
        vbar = np.zeros(v.size)
        vbar[:n_p] = pbar
        tbar = np.zeros(Jv.shape[1])  # what goes to the estimated parameters directly (switch times)
        switches, segs = trace[0], trace[1:]
        xbar = np.zeros(n_s)
        if self.at_inf.size:  # X(inf) = x_ss(p, x(t_end))
            x_end = segs[-1][3].copy()
            apply_doses(x_end, None, segs[-1][0].jumps, v[od:], None)
            wbar = Xbar[self.at_inf].sum(axis=0)
            res = self.steady.vjp(p, x_end, wbar, dp, t0=self.t_end, moving=self.inf_moving,
                                  what="the run to steady state (measurements at t = inf)")
            if isinstance(res, str):
                return f"experiment {self.name!r}: {res}"
            tbar += dp.T @ res[0]
            xbar += res[1]
        for seg, pj, x_start, x_end in reversed(segs):
            for i, a, resets in reversed(seg.jumps):  # the doses at the segment's end
                vbar[od + a] += xbar[i]
                if resets:
                    xbar[i] = 0.0
            for j in seg.switches:  # the state's jump where a switch time moves: (f(t-) - f(t+)) dtau
                _, lo, hi, dtau = switches[j]
                cm = seg.solver.compiled
                tbar += float(xbar @ (cm.f(lo, x_end, pj) - cm.f(hi, x_end, pj))) * (dtau @ dp)
            n_out = seg.out.size
            vjp = self._vjp(seg)
            g = np.zeros((vjp.t.size, n_s))
            g[:n_out] = Xbar[seg.out]
            g[-1] += xbar
            pj = np.ascontiguousarray(pj, dtype=float)
            # Rodas: the sweep over the steps that states() recorded; Dormand-Prince: its adjoint solves again
            grad, st = vjp.sweep(pj, g) if self.adjoint.method == "rodas" else vjp(pj, x_start, g)
            if st != 0:
                return (f"experiment {self.name!r}: the adjoint's forward solve failed ("
                        f"{status_message(st, t_reached=vjp.info[0], max_steps=vjp.max_steps)})")
            gp = grad[:n_p].copy()  # the input rates and held branches beyond n_p are not estimated
            gp[self.excluded] = 0.0  # as the forward sensitivities' excluded columns: the switch times carry them
            vbar[:n_p] += gp
            xbar = grad[pj.size:].copy()
        for i, a, resets in reversed(self.x0_doses):
            vbar[od + a] += xbar[i]
            if resets:
                xbar[i] = 0.0
        if self.preeq is not None:  # x0 = keep x0 + (1 - keep) x_ss(p_pre, x_pre)
            keep = self.keep_x0
            op = od + self.n_d
            res = self.preeq.vjp(v[op:op + n_p], v[op + n_p:op + n_p + n_s], np.where(keep, 0.0, xbar), Jv[op:op + n_p],
                                 moving=self.preeq_moving)
            if isinstance(res, str):
                return f"experiment {self.name!r}: {res}"
            tbar += Jv[op:op + n_p].T @ res[0] + Jv[op + n_p:op + n_p + n_s].T @ res[1]
            xbar = np.where(keep, xbar, 0.0)
        vbar[o:o + n_s] += xbar
        return Jv.T @ vbar + tbar

    def _vjp(self, seg):
        """The adjoint of ``seg``'s solve (bound on first use): its solver's method, options and output times."""
        if seg.vjp is None:  # bound directly: the parameters that move jumps are excluded (see reverse)
            from odeinfer.solve import Adjoint
            from odeinfer.solve._inputs import compiled_model
            from odeinfer.solve.adjoint import VJP

            seg.vjp = VJP(compiled_model(self._held_model), seg.solver.t, seg.solver.t0, self.adjoint, Adjoint())
        return seg.vjp

    def _run_events(self, seg, pj, x, pdir, s0, armed, sens=True):
        """The segment ``seg`` with its events (:mod:`odeinfer.likelihood.events`): ``(y, S, status, armed)``
        at the segment's output times like its solver's, or a failure text. ``armed``: None at the
        experiment's start (then each event's ``initial_value`` decides). Without ``sens``, the states alone."""
        ev, n = self.events, self.n_s
        fine, pick, solver, plain = seg.fine
        if not sens:
            solver = seg.alone(fine=True)
        Y = np.empty((fine.size, n))
        SS = np.empty((fine.size, n, pdir.shape[1]))
        t_cur, x_cur, S_cur = seg.start, np.array(x, float), np.array(s0, float)
        if armed is None:  # before the start, each trigger has its initial_value
            armed = [not e.initial_value or not ev.true_at(k, t_cur, x_cur, pj) for k, e in enumerate(ev.events)]
        # an armed trigger true at the segment's start (the experiment's start, or a dose just applied) fires
        # there, at a time that does not move with the parameters
        for k in range(ev.n):
            if armed[k] and ev.true_at(k, t_cur, x_cur, pj):
                x_cur, S_cur = fire(ev, k, t_cur, x_cur, S_cur, pj, pdir, None, None)
            armed[k] = not ev.true_at(k, t_cur, x_cur, pj)
        ev.hold(pj, t_cur, x_cur)
        i0, fired, t_twenty = 0, 0, t_cur
        while True:
            y, S, st = solver(pj, np.ascontiguousarray(x_cur), pdir, S_cur)
            times = fine[i0:]
            if st != 0:  # an event before the failure is still handled (the solve after it may go on)
                why = status_message(st, t_reached=solver.info[0], max_steps=solver.max_steps)
                if fired:  # a solve that fails right after an event
                    why += (f"; it started at t={t_cur:.10g}, where {ev.events[last].label(last)} had just fired (the "
                            "state it set or the branch of the right-hand side it switched to)")
                n_ok = int(np.searchsorted(times, solver.info[0], side="left"))
                times = times[:n_ok]
            scan = crossings(ev, armed, times, y, True, plain, pj)
            if isinstance(scan, str):
                return scan
            first, hits, peaks = scan
            if not hits and st != 0 and n_ok:
                # the sensitivities' step collapsed where the states alone pass, e.g. at a kink of the right-hand
                # side: a crossing found on the states alone, with valid sensitivities before it, is handled
                probe, st_probe = plain.run(t_cur, fine[i0:], x_cur, pj)
                if st_probe == 0:
                    first, hits, _ = crossings(ev, armed, fine[i0:], probe, False, plain, pj)
                    if hits and 1 <= first <= n_ok:
                        times, peaks = fine[i0:], {}
                    else:
                        hits = []
            if not hits:
                if st != 0:
                    return why
                Y[i0:], SS[i0:] = y, S
                armed = [not ev.true_at(k, times[-1], y[-1], pj) for k in range(ev.n)]
                return Y[pick], SS[pick], 0, armed
            fired += 1
            if fired > MAX_FIRINGS or (fired > 20 and t_cur - t_twenty <= 1e-9 * max(abs(t_cur), 1.0)):
                what = ev.events[hits[0]].label(hits[0])
                return (f"{what} fired again and again at t={t_cur:.10g} ({fired} events since t={seg.start:g}): the "
                        "trajectory stays on its threshold (for a switch of the right-hand side, it slides along it; "
                        "for an event, its assignment leaves the trigger about to turn true again); change the model "
                        "there, e.g. a smooth switch")
            if fired % 20 == 1:
                t_twenty = t_cur  # where the last 20 firings began: 20 at one time is a trajectory stuck there
            Y[i0:i0 + first], SS[i0:i0 + first] = y[:first], S[:first]
            lo = (t_cur, x_cur, S_cur) if first == 0 else (times[first - 1], y[first - 1], S[first - 1])
            roots = {k: locate(ev, k, plain, lo, peaks.get(k) or times[first], pj) for k in hits}
            bad = [k for k, r in roots.items() if isinstance(r, str)]
            if bad:
                return roots[bad[0]]
            tau = min(r[0] for r in roots.values())
            t_lo, x_lo, S_lo = lo
            x_cur, S_cur, st = _solve_to(solver, t_lo, tau, x_lo, S_lo, pj, pdir)
            if st != 0:
                return status_message(st, t_reached=tau, max_steps=solver.max_steps)
            now = sorted(k for k, r in roots.items() if r[0] <= tau)  # simultaneous events: in their order
            last = now[0]
            g_t, g_x, g_p = ev.dg(now[0], tau, x_cur, pj)
            den = g_x @ ev.sides(now[0], tau, x_cur, x_cur, pj, solver.compiled)[0] + g_t
            if not (np.isfinite(den) and den > 0):
                return (f"{ev.events[now[0]].label(now[0])} fires at t={tau:.17g}, where its trigger function does "
                        f"not cross zero at a positive rate (dg/dt = {den:.3g}): its time has no derivative")
            dtau = -(g_x @ S_cur + g_p[:pdir.shape[0]] @ pdir) / den
            g_minus = {k: ev.g(k, tau, x_cur, pj)[0] for k in now}
            for k in now:
                x_cur, S_cur = fire(ev, k, tau, x_cur, S_cur, pj, pdir, dtau, solver.compiled)
            # an assignment that makes another armed trigger true fires that event at the same time
            for k in range(ev.n):
                if k not in now and armed[k] and ev.true_at(k, tau, x_cur, pj):
                    g_minus[k] = ev.g(k, tau, x_cur, pj)[0]
                    x_cur, S_cur = fire(ev, k, tau, x_cur, S_cur, pj, pdir, dtau, solver.compiled)
                g_plus = ev.g(k, tau, x_cur, pj)[0]
                # a trigger that has just turned true (at its root, g ~ 0) waits until it is false again, unless
                # the assignments made it false
                armed[k] = g_plus < g_minus[k] and g_plus < 0 if k in g_minus else not g_plus > 0
            ev.hold(pj, tau, x_cur, list(g_minus))
            i0 += first
            t_cur = tau
            solver = _retimed(solver, fine[i0:], tau)


def _solve_to(solver, t0, t, x, S, pj, pdir):
    """The states and sensitivities at ``t`` from ``(t0, x, S)`` (a short re-solve; :func:`euler_step` where it is
    shorter than a solver's rounding unit)."""
    x_t = euler_step(solver.compiled, t0, t, x, pj)
    if x_t is not None:
        return x_t, np.array(S), 0
    y, St, st = _retimed(solver, [t], t0)(pj, np.ascontiguousarray(x), pdir, np.ascontiguousarray(S))
    return y[0], St[0], st


def _retimed(solver, t, t0):
    """A solver like the bound ``solver`` (same class, options, gradient, kernel tier and method) for the output times
    ``t`` from ``t0``, built without validating again."""
    t = np.array(t, dtype=np.float64)
    t.flags.writeable = False
    return solver.retimed(t, float(t0))


_CACHE = 8  # segment lists kept per run (by their cut times)


def apply_doses(x, dx, doses, amounts, damounts, keep=None):
    """Apply the doses ``[(state index, amount index, resets)]`` of one time, in order, to the states
    ``x`` and their gradients ``dx`` (in place; ``dx`` may be None): a bolus adds ``amounts[a]``
    (and ``damounts[a]``), a reset sets the state to it (and the state's gradient row to
    ``damounts[a]``: the jump condition of a reset at a fixed time). ``keep`` (optional, ones): set
    to 0 at the reset states, so that ``x+ = keep x- + jump`` when ``x`` and ``dx`` start at 0."""
    for i, a, resets in doses:
        if resets:
            x[i] = amounts[a]
            if dx is not None:
                dx[i] = damounts[a]
            if keep is not None:
                keep[i] = 0.0
        else:
            x[i] += amounts[a]
            if dx is not None:
                dx[i] += damounts[a]


def _carry_stiffness(old, new):
    """An :class:`~odeinfer.solve.AutoSolver` of the run that has switched to Rodas (in the current
    auto scope) has found the run stiff: the segments cut anew start on Rodas too."""
    if old and any(getattr(s.solver, "stiff_in_scope", False) for s in old):
        for seg in new:
            if hasattr(seg.solver, "go_stiff") and not seg.solver.stiff_in_scope:
                seg.solver.go_stiff(next(s.solver.switch_reason for s in old if s.solver.stiff_in_scope))


def _as_slice(index):
    """``index`` (sorted int array) as a slice if it is a contiguous range, else unchanged."""
    if index.size and index[-1] - index[0] == index.size - 1:
        return slice(int(index[0]), int(index[-1]) + 1)
    return index


def _chain(hx, dX, hp, dp, hq, dq):
    """``dh/dtheta`` per measurement: through the states, the right-hand side's and the observable parameters."""
    return np.einsum("rs,rse->re", hx, dX) + hp @ dp + hq @ dq


def _runs(obj, problem):
    """One run per experiment; experiments whose trajectories are the same (same start, right-hand side
    parameters, initial states, doses, inputs, pre-equilibration: e.g. a PEtab condition split by its
    per-measurement noise parameters) share one solve over the union of their times."""
    m = problem.model
    n_p, n_q = m.n_params, len(m.obs_params)
    groups = {}
    for plan in problem.plans:
        key = (plan.t0, plan.exprs[:n_p], plan.exprs[n_p + n_q:], plan.keep_x0.tobytes(), plan.doses,
               tuple(sorted(plan.inputs.items())), plan.preequilibrate)
        groups.setdefault(key, []).append(plan)
    first = {}
    for key, plans in groups.items():
        first[key] = np.unique(np.concatenate([p.t_rows for p in plans]))
    runs, leaders = [], {}
    for plan in problem.plans:
        key = next(k for k, ps in groups.items() if any(p is plan for p in ps))
        run = _Run(obj, plan, times=first[key], share=leaders.get(key))
        leaders.setdefault(key, run)
        runs.append(run)
    return runs


def _input_at(k, inp, a, rate_index):
    """``(parameter index, value, rate index, rate)`` of an input on the segment starting at ``a``:
    a step input's value there; a linear one as ``c0 + rate * t`` between its knots."""
    if inp.kind == "step" or rate_index is None:
        return k, float(inp(a)), rate_index, 0.0
    t, v = np.asarray(inp.t), np.asarray(inp.values)
    i = int(np.searchsorted(t, a, side="right")) - 1
    rate = float((v[i + 1] - v[i]) / (t[i + 1] - t[i])) if 0 <= i < t.size - 1 else 0.0
    return k, float(inp(a)) - rate * a, rate_index, rate


def _data_error(name, o, times):
    from odeinfer.errors import DataError

    return DataError(
        f"data: observable {o.name!r} has noise on the {o.noise.scale} scale but non-positive measurements in "
        f"experiment {name!r} at t={times}; use a linear-scale noise model for it or remove those rows")


class Objective:
    """``nll(u)``, its gradient and Fisher information at ``u`` (estimated parameters on their
    scales, in the order of ``problem.estimated``).

    Parameters
    ----------
    problem : FitProblem
    solver : Dopri5, Rodas or Auto, optional
        For every segment; default the ``likelihood`` role's (``Auto(rtol=1e-6, atol=1e-8)``, see
        :data:`odeinfer.solve.config.DEFAULT_SOLVERS` for the accuracy it gives).
    gradient : Forward or Adjoint, optional
        How the gradient is computed. ``oi.Forward()`` (default): directional forward sensitivities along the
        estimated parameters, which also give the Fisher information (what the trust-region fits use).
        ``oi.Adjoint()``: the adjoint, one backward sweep per trajectory whatever the number of estimated
        parameters (for models with hundreds of them); the NLL and gradient only (``fim`` is None). It runs one
        method: ``oi.Rodas`` (the discrete adjoint, exact for the computed solution; an ``oi.Auto`` solver runs
        its stiff method) or ``oi.Dopri5`` (the continuous adjoint). Its steps are chosen for the states alone, so
        at the default tolerance its gradient is 5-70x less accurate than the forward one (largest error 1.2e-4 of
        the gradient's largest entry on the PEtab problems of benchmarks/RESULTS.md, session 23); pass a tighter
        solver where that matters. Steady states (pre-equilibration, measurements at ``t = inf``) get the adjoint of
        their own run (:meth:`~odeinfer.likelihood.steady.SteadyState.vjp`, which fails the evaluation when the
        gradient through the steady state has not converged). Problems with events or switches of the right-hand
        side at state thresholds need ``oi.Forward()``.

    Notes
    -----
    An observable on a log scale whose computed value is within the solver's resolution of zero (a state decayed
    below the absolute tolerance: ``|h| < atol * sum_s |dh/dx_s|``) is held at that resolution with zero derivatives,
    where PEtab's objective is undefined or solver noise; a fit whose optimum has such measurements warns
    (:class:`~odeinfer.errors.ResolutionWarning`, with a tolerance that resolves them).
    """

    def __init__(self, problem, solver=None, gradient=None):
        self.problem = problem
        m = problem.model
        self.solver = as_solver(solver, delays=False, role="likelihood")
        self.adjoint = _adjoint_solver(gradient, self.solver)
        if self.adjoint is not None:  # the solves of the states are those the adjoint differentiates
            self.solver = self.adjoint
        self.steady = SteadyState(m)
        self.switches = TimeSwitches(problem.solve_model, m.n_params)
        events = getattr(problem, "events", ())
        # the right-hand side's jumps and kinks where a condition on the states changes are located like events
        self.state_switches = state_switches(problem.solve_model)
        # the solver's model holds each of them by a parameter (held_switches)
        self.solve_model = held_switches(problem.solve_model)
        self.events = (CompiledEvents(events, m, self.solve_model, self.state_switches)
                       if events or self.state_switches else None)
        if self.adjoint is not None and self.events is not None:
            what = "events" if events else "switches of the right-hand side where a state crosses a threshold"
            raise InputError(f"gradient: oi.Adjoint() does not run through {what} (the problem has them); pass "
                             "gradient=oi.Forward()")
        self.obsf = ObservableFunctions(m)
        self.mapper = ConditionMapping(problem)
        self.est_index = np.array([problem.names.index(n) for n in problem.estimated], np.int64)
        self.scales = [problem.params[n].scale for n in problem.estimated]
        self.theta = problem.nominal()
        self.lower = np.array([_scaled(problem.params[n].lower, problem.params[n].scale) for n in problem.estimated])
        self.upper = np.array([_scaled(problem.params[n].upper, problem.params[n].scale) for n in problem.estimated])
        # [0]: the step limit of the forward-sensitivity solves (0: the solver's max_steps; limit_steps);
        # [1]: the most steps one of them took in the last evaluation (steps_used)
        self.step_log = np.zeros(2, np.int64)
        self.runs = _runs(self, problem)
        self.n_data = sum(r.n_rows for r in self.runs)
        self.n_eval = 0

    @property
    def n(self):
        return self.est_index.size

    def natural(self, u):
        """All parameters' natural values with the estimated ones at ``u``."""
        theta = self.theta.copy()
        theta[self.est_index] = from_scale(self._vector(u), self.scales)
        return theta

    def _vector(self, u):
        """``u`` as a float vector with one entry per estimated parameter, or a typed error."""
        try:
            a = np.asarray(u, dtype=float)
        except (TypeError, ValueError):
            a = None
        if a is None or a.shape != (self.n,):
            got = f"shape {a.shape}" if a is not None else f"a {type(u).__name__} that is not numeric"
            names = list(self.problem.estimated)
            raise InputError(f"u: expected {self.n} numbers, the estimated parameters {names[:4]}"
                             f"{' ...' if len(names) > 4 else ''} on their estimation scales, got {got}; pass one "
                             "value per name of problem.estimated, in that order")
        return a

    def __call__(self, u, *, grad=True) -> Evaluation:
        """Evaluate at ``u``; ``grad=False`` skips nothing of the solve but the assembly (the same solves, so the
        same value: what a finite-difference check of the gradient needs). See :meth:`value` for the cheap
        value alone."""
        return self._evaluate(u, grad, True)

    def value(self, u) -> Evaluation:
        """The negative log-likelihood alone at ``u`` (``Evaluation`` without gradient), from solves of the states
        alone: no sensitivities, so a small fraction of a full evaluation's cost on a model with many estimated
        parameters. Its solver takes its own steps, controlled on the states alone, so the value differs from
        ``self(u).nll`` by the solver's error (at the default rtol 1e-6 and the nominal parameters: by 1.4e-5 on
        PEtab's Boehm_JProteomeRes2014, by 2.2e-3 on Fujita_SciSignal2010, where the sensitivities' error control
        makes the full evaluation's steps finer); for a value to a given accuracy, build the objective with a
        tighter solver."""
        return self._evaluate(u, False, False)

    def limit_steps(self, n=None):
        """Check each forward-sensitivity solve of later evaluations after ``n`` steps (``None``: no check, the
        solver's ``max_steps`` alone): a solve that needs more is answered by a solve of the states alone when
        that fails (see ``_Run._limited``), and otherwise runs to ``max_steps``. The trust-region fits set it
        for their trial points (:func:`odeinfer.estimators._likelihood_fit.trial_step_limit`)."""
        self.step_log[0] = 0 if n is None else int(n)

    @property
    def steps_used(self) -> int:
        """The most steps one forward-sensitivity solve took in the last evaluation."""
        return int(self.step_log[1])

    def _evaluate(self, u, grad, sens):
        self.n_eval += 1
        self.step_log[1] = 0
        theta = self.natural(u)
        if not np.all(np.isfinite(theta[self.est_index])):
            return Evaluation(failure="a parameter is not finite on the natural scale")
        if grad and self.adjoint is not None:
            return self._evaluate_adjoint(theta)
        ne = self.n
        nll, g, F, C = 0.0, np.zeros(ne), np.zeros((ne, ne)), np.zeros((ne, ne))
        out = np.empty(1)
        solved = {}
        for run in self.runs:
            v, Jv = run.mapping(theta)
            leader = run.share or run
            res = solved.get(id(leader))
            if res is None:
                res = solved[id(leader)] = run.states(v, Jv, sens)
            if isinstance(res, str):
                return Evaluation(failure=res)
            X, dX = res
            p, dp = v[:run.n_p], Jv[:run.n_p]
            q, dq = v[run.n_p:run.n_p + run.n_q], Jv[run.n_p:run.n_p + run.n_q]
            H, S, SH, HX, HP, HQ, SX, SP, SQ = run.buffers
            bad = self._observe_into(run, X, p, q)
            if bad is not None:
                return bad
            if assemble(run.starts, run.idx, dX, H, HX, HP, dp, HQ, dq, S, SX, SP, SQ, SH, run.zy, run.jac_terms,
                        run.dist, run.scale, grad, g, F, C, out) != OK:
                return self._bad_sigma(run, S, len(run.groups))
            nll += float(out[0])
        if not np.isfinite(nll):
            return Evaluation(failure="the negative log-likelihood is not finite")
        if not grad:
            return Evaluation(nll)
        d = dnatural_dscaled(theta[self.est_index], self.scales)
        dd = np.outer(d, d)
        return Evaluation(nll, g * d, F * dd, curvature=(F + C) * dd)

    def unresolved(self, u, fraction=0.1):
        """A note (str) where the solver's absolute tolerance does not resolve the measurements at ``u``
        (estimation scale), else None (also when the evaluation fails). Per measurement, ``atol`` propagated to
        its observable, ``atol * sum_s |dh/dx_s|`` (on a log scale relative to ``|h|``, in the noise scale's
        units), is compared with the noise sd; above ``fraction`` of it, the NLL there is partly solver noise: a
        state observed on a log scale that decays far below ``atol``, or data in units where the noise sd is
        near ``atol`` (e.g. x' = -100 x observed on the log scale at t = 0.3, x = 9e-14: at ``atol`` 1e-8 the NLL
        of four such measurements is off by 200 and no solver failure says so). The tolerance the note proposes
        is checked the same way with a solver at it (up to three times tighter still, as the unresolved values
        themselves are solver noise); the note says if even the last one does not resolve them."""
        found = self._unresolved_at(u, fraction)
        if not found:
            return None
        text, need = found
        verified = " (not verified: still unresolved there)"
        for _ in range(3):
            again = Objective(self.problem, self.solver.replace(atol=need))._unresolved_at(u, fraction)
            if again is False:
                verified = " (not verified: the evaluation failed there)"
                break
            if again is None:
                verified = f" (at {need:.0e} they are)"
                break
            need = again[1]
        return (f"{text}; fit again with atol <= {need:.0e}{verified} (e.g. oi.Embedding(solver=oi.Auto("
                f"atol={need:.0e}))) or express the data in larger units")

    def _unresolved_at(self, u, fraction):
        """``(what is unresolved, the atol proposed)``, None (resolved) or False (the evaluation failed):
        :meth:`unresolved`'s test at this solver."""
        ev = self._evaluate(self._vector(u), True, True)  # the compiled path of the fits (no states-alone twin)
        if not ev.ok:
            return False
        atol = float(np.max(self.solver.atol))
        worst, n_bad, n_all = None, 0, 0
        for run in self.runs:
            H, S = run.buffers[:2]
            for j, (k, rows, t, idx, zy, jac_term, dist, scale) in enumerate(run.groups):
                sl = run.slices[j]
                # a row held at the resolution r (value r, zero derivatives) is unresolved whatever its ratio; its
                # error r is taken relative to its computed value (solver noise, below r as the true value is), which
                # scales the tolerance proposed
                held = run.floored[sl]
                err = np.where(held, H[sl], run.resolution(sl))
                if scale:
                    value = np.where(held & (run.raw[sl] != 0), np.abs(run.raw[sl]), np.abs(H[sl]))
                    err = err / (value * (1.0 if scale == 1 else math.log(10.0)))
                ratio = err / S[sl]
                bad = (ratio > fraction) | held
                n_all += ratio.size
                n_bad += int(np.count_nonzero(bad))
                if bad.any():
                    i = int(np.argmax(np.where(bad, ratio, -1.0)))
                    if worst is None or ratio[i] > worst[0]:
                        worst = (float(ratio[i]), run.name, self.problem.model.observables[k].name, float(t[i]),
                                 float(err[i]), float(S[sl][i]))
        if worst is None:
            return None
        ratio, exp, obs, t, err, sd = worst
        need = min(10.0 ** math.floor(math.log10(atol * fraction / ratio)), atol / 10)
        return (f"the solver's absolute tolerance {atol:g} does not resolve {n_bad} of {n_all} measurements: "
                f"propagated to the observable it exceeds {fraction:g} of the noise sd (worst: {obs!r} in experiment "
                f"{exp!r} at t={t:g}, about {err:.2g} on the noise scale against an sd of {sd:.2g}), so the NLL there "
                "is partly solver noise"), need

    def _observe_into(self, run, X, p, q):
        """The observables, noise sds and their partial derivatives of ``run``'s measurements into its buffers;
        a failed :class:`Evaluation` where an observable on a log scale is negative beyond the solver's resolution
        or an sd is not positive, else None.

        An observable on a log scale whose computed value is within the solver's resolution of zero, ``|h| <
        r = atol * sum_s |dh/dx_s|`` (a state decayed below ``atol``: its computed value is solver noise, of
        either sign), is held at ``r`` with zero derivatives (``max(h, r)`` for ``h > -r``: continuous where the
        value is resolved).
        The NLL there is the one of the largest value the solve cannot tell from zero, instead of a failure that a
        one-ulp change of a parameter turns into a success and back (which stalls the trust region). Such rows are
        marked in ``run.floored``; :meth:`unresolved` reports them."""
        H, S, SH, HX, HP, HQ, SX, SP, SQ = run.buffers
        run.floored[:] = False
        for j, (k, rows, t, idx, zy, jac_term, dist, scale) in enumerate(run.groups):
            sl = run.slices[j]
            Xk = X[idx]
            h = self.obsf.h_into(k, sl, t, Xk, p, q, H, HX, HP, HQ)
            if scale:
                r = run.resolution(sl)
                low = np.abs(h) < r
                if np.any(low):
                    run.raw[sl][low] = h[low]
                    h[low] = r[low]  # h is a view of H[sl]
                    for D in (HX, HP, HQ):
                        D[sl][low] = 0.0
                    run.floored[sl] = low
            if scale and np.any(h <= 0):  # an earlier group's bad sd is reported first, as the checks run in order
                return self._bad_sigma(run, S, j) or self._bad_h(run, j, h)
            self.obsf.sigma_into(k, sl, t, Xk, p, q, h, S, SX, SP, SQ, SH)
        return None

    def _evaluate_adjoint(self, theta):
        """NLL and gradient by the adjoint (``gradient=oi.Adjoint()``): solves of the states alone, the NLL's
        partial derivatives with respect to them (:func:`assemble_adjoint`), then each trajectory's reverse pass
        (:meth:`_Run.reverse`), once for the experiments that share it."""
        nll, g = 0.0, np.zeros(self.n)
        out = np.empty(1)
        solved = {}
        for run in self.runs:
            v, Jv = run.mapping(theta)
            leader = run.share or run
            traj = solved.get(id(leader))
            if traj is None:
                trace = []
                res = leader.states(v, Jv, False, trace)
                if isinstance(res, str):
                    return Evaluation(failure=res)
                traj = solved[id(leader)] = (leader, v, Jv, trace, res[0], np.zeros_like(res[0]), np.zeros(run.n_p))
            X, Xbar, pbar = traj[4:]
            p, q = v[:run.n_p], v[run.n_p:run.n_p + run.n_q]
            bad = self._observe_into(run, X, p, q)
            if bad is not None:
                return bad
            H, S, SH, HX, HP, HQ, SX, SP, SQ = run.buffers
            qbar = np.zeros(run.n_q)
            if assemble_adjoint(run.starts, run.idx, H, HX, HP, HQ, S, SX, SP, SQ, SH, run.zy, run.jac_terms,
                                run.dist, run.scale, Xbar, pbar, qbar, out) != OK:
                return self._bad_sigma(run, S, len(run.groups))
            nll += float(out[0])
            g += Jv[run.n_p:run.n_p + run.n_q].T @ qbar
        if not np.isfinite(nll):
            return Evaluation(failure="the negative log-likelihood is not finite")
        for leader, v, Jv, trace, _, Xbar, pbar in solved.values():
            res = leader.reverse(v, Jv, trace, Xbar, pbar)
            if isinstance(res, str):
                return Evaluation(failure=res)
            g += res
        return Evaluation(nll, g * dnatural_dscaled(theta[self.est_index], self.scales))

    def _bad_h(self, run, j, h):
        o = self.problem.model.observables[run.groups[j][0]]
        t = run.groups[j][2]
        return Evaluation(failure=f"experiment {run.name!r}: observable {o.name!r} is <= 0 at "
                                  f"t={t[h <= 0][:3].tolist()} but its noise is on the {o.noise.scale} scale")

    def _bad_sigma(self, run, S, n_groups):
        """The failure of the first of the first ``n_groups`` groups of ``run`` whose sd is not positive, or None."""
        for j in range(n_groups):
            s = S[run.slices[j]]
            bad = ~(s > 0)
            if np.any(bad):
                o = self.problem.model.observables[run.groups[j][0]]
                rows, t = run.groups[j][1][bad], run.groups[j][2][bad]
                return Evaluation(failure=f"experiment {run.name!r}: the noise sd of {o.name!r} is not positive "
                                          f"({float(s[bad][0])!r}) in {rows.size} measurement(s), rows "
                                          f"{rows[:5].tolist()} of the experiment at t={t[:5].tolist()}")
        return None

    def predictions(self, u):
        """The observables at the measurements: ``{experiment: (t, observable names, h)}``, one row per
        measurement, in the data's order (raises :class:`~odeinfer.errors.SolverError` on a failed solve)."""
        names = self.problem.model.observable_names
        out = {}
        for run in self.runs:
            h = np.empty(run.n_rows)
            t = np.empty(run.n_rows)
            which = np.empty(run.n_rows, object)
            for k, rows, tr, hk, *_ in self._observe(run, u, grad=False):
                h[rows], t[rows], which[rows] = hk, tr, names[k]
            out[run.name] = (t, which, h)
        return out

    def noise_model_at(self, u):
        """Per experiment (in order), the measurement model at ``u``: ``(h, sigma, dist, scale)`` per row
        of its plan (prediction on the natural scale, sd on the noise scale, codes of
        :mod:`odeinfer.likelihood.noise`); what a parametric bootstrap simulates from. Raises
        :class:`~odeinfer.errors.SolverError` on a failed solve."""
        theta = self.natural(u)
        out = []
        for run in self.runs:
            h, sd = np.empty(run.n_rows), np.empty(run.n_rows)
            dist, scale = np.empty(run.n_rows, np.int64), np.empty(run.n_rows, np.int64)
            v, _ = run.mapping(theta)
            p, q = v[:run.n_p], v[run.n_p:run.n_p + run.n_q]
            for (k, rows, tr, hk, _, Xk), group in zip(self._observe(run, u, grad=False), run.groups):
                h[rows] = hk
                sd[rows] = self.obsf.sigma(k, tr, Xk, p, q, hk)[0]
                dist[rows], scale[rows] = group[6], group[7]
            out.append((h, sd, dist, scale))
        return out

    def observe_at(self, u, experiment, t):
        """The observables of ``experiment`` at times ``t`` (its conditions, doses, inputs) and their
        gradients on the estimation scale: ``h`` (n_times, n_observables), ``dh`` (n_times, n_observables,
        n_estimated). Solved to the ``fit`` role's tolerances or tighter (a prediction is one solve, so it
        need not share the looser tolerances of the objective's many evaluations). Raises
        :class:`~odeinfer.errors.SolverError` on a failed solve."""
        from dataclasses import replace

        names = [p.name for p in self.problem.plans]
        if experiment not in names:
            from odeinfer.errors import InputError

            raise InputError(f"experiment: {experiment!r} is not one of the problem's experiments {names}")
        plan = self.problem.plans[names.index(experiment)]
        t = np.asarray(t, float)
        n_o = len(self.problem.model.observables)
        synth = replace(plan, t_rows=np.repeat(t, n_o), obs_rows=np.tile(np.arange(n_o), t.size),
                        y_rows=np.ones(t.size * n_o))
        fit = default_solver("fit")
        run = _Run(self, synth, solver=self.solver.replace(rtol=min(self.solver.rtol, fit.rtol),
                                                           atol=min(self.solver.atol, fit.atol)))
        h = np.empty((t.size, n_o))
        dh = np.empty((t.size, n_o, self.n))
        d = dnatural_dscaled(self.natural(u)[self.est_index], self.scales)
        for k, rows, _, hk, Dh, _ in self._observe(run, u, grad=True):
            h[rows // n_o, k] = hk
            dh[rows // n_o, k] = Dh * d
        return h, dh

    def _observe(self, run, u, grad):
        """``(observable index, rows, t, h, dh/dtheta or None, states at t)`` per observable group of ``run``."""
        from odeinfer.errors import SolverError

        theta = self.natural(u)
        v, Jv = run.mapping(theta)
        # an experiment that shares another's trajectory solves with that run's segments (its own has none);
        # the trajectory's parameters in v are the same for both (that is what sharing means)
        res = (run.share or run).states(v, Jv, grad)
        if isinstance(res, str):
            raise SolverError(res)
        X, dX = res
        p, dp = v[:run.n_p], Jv[:run.n_p]
        q, dq = v[run.n_p:run.n_p + run.n_q], Jv[run.n_p:run.n_p + run.n_q]
        for k, rows, tr, idx, *_ in run.groups:
            h, hx, hp, hq = self.obsf.h(k, tr, X[idx], p, q)
            Dh = _chain(hx, dX[idx], hp, dp, hq, dq) if grad else None
            yield k, rows, tr, h, Dh, X[idx]


def _adjoint_solver(gradient, solver):
    """The solver of the adjoint's segments for ``gradient``, or None for forward sensitivities."""
    from odeinfer.solve import Adjoint
    from odeinfer.solve.config import Auto

    if gradient is None or isinstance(gradient, Forward) and gradient == Forward():
        return None
    if not isinstance(gradient, Adjoint):
        raise InputError(f"gradient: expected oi.Forward() or oi.Adjoint(), got {gradient!r}; the likelihood chooses "
                         "its own sensitivity directions")
    return solver.stiff() if isinstance(solver, Auto) else solver


def _scaled(x, scale):
    """A bound on the estimation scale."""
    if scale == "lin" or x == np.inf:
        return x
    if x <= 0:
        return -np.inf
    return float(np.log(x) if scale == "log" else np.log10(x))
