"""Steady states of a model under constant parameters, with their sensitivities, by long-time
integration with a convergence check: the pre-equilibration of an experiment, and the state its
measurements at ``t = inf`` see (from the end of its finite-time trajectory).

The model and its forward sensitivities are integrated with the stiff solver and read at the
times ``t0 + 10^k`` (``k = 0 .. 10``, one stage each; ``t0`` matters only to a model whose right-hand
side depends on ``t``); the first time at which both ``|dx/dt|`` and the time
derivative of the sensitivities ``|J_x S + J_p|`` are below ``atol + rtol |.|`` gives the steady
state and its sensitivities ``d x_ss / d(p, x0)``. Integrating keeps models with conservation laws (singular
``J_x``) right: their steady state depends on the initial state, and the integrated sensitivities carry that
dependence.

Mostly the sensitivities are not integrated (:meth:`SteadyState._by_newton`): the states alone are integrated stage
by stage until ``|dx/dt|`` passes the test, then Newton's method takes them to the steady state itself (the
``t -> inf`` limit, also along modes too slow for the integration's test), and the implicit function theorem gives
the sensitivities. Linear conservation laws ``C f = 0`` (:func:`conservation_laws`, from the right-hand side's terms)
are kept: the steady state solves ``f(x) = 0`` and ``C x = C x0``, so ``[J_x; C] d x_ss = [-J_p dp; C dx0]`` (without
conservation laws ``d x_ss / d x0 = 0``: an isolated, attracting steady state does not move with the start). This
route is taken when the eigenvalues of ``J_x`` other than the conservation laws' zeros have negative real parts,
``[J_x; C]`` equilibrated has a condition number of at most ``1e10`` and the sensitivities' error (steps of
iterative refinement) is within the integration route's tolerance; otherwise the integration route below. A
right-hand side that depends on ``t`` (inputs) is taken at the time where the states passed the test, as the
integration route's tests take it. One sensitivity solve of Zheng_PNAS2012's pre-equilibration (15 states, 46
parameters) took 0.03-0.65 s along a fit; this route takes a few ms.

Without sensitivities (:meth:`SteadyState.states`, for the likelihood's value and its adjoint) the Newton route
is tried first. Where it does not apply, the states are integrated stage by stage with their steps recorded, and
beside them two directional sensitivities ``S w`` along fixed random directions ``w`` of ``(p, x0)``: the run stops
where ``|dx/dt|`` and ``|J_x S w + J_p w_p|`` pass the tests above (a slow mode the states barely show, e.g. along a
conservation law's complement, still moves the sensitivities; the probe waits for it as the full sensitivities do).
The adjoint (:meth:`SteadyState.vjp`) gives ``xbar^T d x_ss / d(p, x0)`` for one ``xbar``: on the Newton route
``xbar^T`` times the sensitivities that route computed, otherwise the discrete adjoint of the stages' Rodas steps,
run back from the last stage to the first. Its convergence test is the forward one contracted with ``xbar``: the
gradient ``G(T) = xbar^T d x(T) / d(p, x0)`` must have stopped changing,
``|dG/dT| = |xbar^T (J_x S + [J_p, 0])| <= 100 (atol sum |xbar| + rtol |G|)``, where ``xbar^T J_x S`` is one more
sweep, with ``J_x^T xbar`` in place of ``xbar``; a gradient still moving fails the evaluation with the figure.
"""

from __future__ import annotations

import numpy as np

from odeinfer.model.trace import T_SYMBOL
from odeinfer.solve import Adjoint, Forward, Problem, Rodas, bind
from odeinfer.solve.abi import status_message

__all__ = ["SteadyState", "conservation_laws"]

_STAGES = np.r_[0.0, 10.0 ** np.arange(0, 11)]
_RECENT = 16  # steady states remembered: one per distinct pre-equilibration of an evaluation
_PROBES = 2  # directional sensitivities that watch the states-only runs' convergence
_COND_MAX = 1e10  # the largest condition number of [J_x; C] for the implicit function theorem (module docstring)
_NULL = 1e-12  # singular values of the terms' coefficients below this fraction of the largest: conservation laws
_NEWTON_ITERATIONS = 10
_REFINEMENTS = 3  # steps of iterative refinement of the Newton route's sensitivities (Brannmark_JBC2010 needs 2)


def conservation_laws(model):
    """``C`` (k, n_states), orthonormal rows: the linear conservation laws ``C f = 0`` that hold identically, from
    the right-hand side's terms: each ``f_i`` expanded into terms ``a * m`` (``a`` a number, ``m`` a product of
    states, parameters and functions), ``c`` is a law when ``sum_i c_i a_i(m) = 0`` for every ``m``. The term
    coefficients are stoichiometric numbers, so the null space is found in floating point to rounding (on the
    Jacobian it is not: Brannmark_JBC2010's spans 3e8 down to its laws' 1e-12 .. 1e-26). Laws whose weights are
    parameters (species in compartments of different, estimated volumes) are not found: those models' singular
    ``J_x`` leaves them to the integration route."""
    import sympy

    n = len(model.exprs)
    index = {}
    rows, cols, vals = [], [], []
    for i, e in enumerate(model.exprs):
        for term in sympy.Add.make_args(sympy.expand(e)):
            a, m = term.as_coeff_Mul()
            rows.append(i)
            cols.append(index.setdefault(m, len(index)))
            vals.append(float(a))
    M = np.zeros((n, max(len(index), 1)))
    np.add.at(M, (rows, cols), vals)
    U, sv, _ = np.linalg.svd(M)
    k = n - int(np.sum(sv > _NULL * max(sv[0], 1.0)))
    return np.ascontiguousarray(U[:, n - k:].T)


def _equilibration(M):
    """``(r, c)``: row and column scales that make the largest magnitude in each row, then each column, of
    ``r[:, None] * M * c`` one (rows or columns of zeros keep the scale 1)."""
    a = np.abs(M)
    r = a.max(axis=1)
    r = 1.0 / np.where(r > 0.0, r, 1.0)
    c = (a * r[:, None]).max(axis=0)
    return r, 1.0 / np.where(c > 0.0, c, 1.0)


def probe_directions(n):
    """The probe's directions in ``(p, x0)`` (``n`` rows, :data:`_PROBES` columns): fixed random ones, so the same run
    ends at the same stage."""
    return np.random.default_rng(0).standard_normal((n, _PROBES))


class SteadyState:
    """``steady(p, x0, dp, dx0) -> (x_ss, dx_ss)`` (gradients chained through ``dp``, ``dx0``,
    which are ``(n_params, n)`` and ``(n_states, n)``) or a message when it does not converge
    (``what=`` names the steady state in it; ``t0=``: the start time).

    Parameters
    ----------
    model : Model
    rtol, atol : float
        The convergence test on the states; the sensitivities use ``100 rtol``, ``100 atol``.
    solver : Rodas, optional
        Default ``oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=20_000)`` (per stage).
    """

    def __init__(self, model, *, rtol=1e-8, atol=1e-10, solver=None):
        self.model, self.rtol, self.atol = model, rtol, atol
        self.solver = solver or Rodas(rtol=1e-10, atol=1e-12, max_steps=20_000)
        self._switching = [model.params.index(q) for q in model.switching_params]
        self._timed = any(T_SYMBOL in e.free_symbols for e in model.exprs)  # the start time matters
        self._bound = {}
        self._recent = {}  # (p, x0, held) -> the integration's result, the last _RECENT keys
        self._vjps = {}  # t0 -> the stages' adjoints (their step records: the states-only runs)
        self._probes = {}  # t0 -> the stages' solvers with the probe's directional sensitivities
        self._recorded = None  # the key of the run whose steps the stages' adjoints hold
        self._plain = {}  # t0 -> the stages' solvers of the states alone (the Newton route's start)
        self.route = None  # "newton" or "integration": how the last steady state was computed
        self._conserved = None  # the model's conservation laws, C (k, n_states), once needed

    def _solvers(self, held, t0=0.0):
        """The stages' solvers from ``t0`` without sensitivities for the parameters ``held`` (indices):
        those that move a jump of the right-hand side are fine while the caller holds them fixed."""
        key = (held, t0)
        if key not in self._bound:
            gradient = Forward(exclude=tuple(self.model.params[k] for k in held))
            stages = _STAGES + t0
            self._bound[key] = [bind(Problem(self.model, [b], t0=a), solver=self.solver, gradient=gradient)
                                for a, b in zip(stages[:-1], stages[1:])]
        return self._bound[key]

    def prepare(self, held):
        """Bind the stages' solvers for the switching parameters ``held`` (indices) fixed: raises
        :class:`~odeinfer.errors.InputError` (as :func:`odeinfer.bind`) when another parameter moves a
        jump of the right-hand side, which the integrated steady-state sensitivities would miss."""
        self._solvers(tuple(k for k in self._switching if k in held))

    def __call__(self, p, x0, dp, dx0, *, what="pre-equilibration", t0=0.0):
        p = np.ascontiguousarray(p, float)
        x = np.ascontiguousarray(x0, float)
        held = tuple(k for k in self._switching if not np.any(dp[k]))  # their (NaN) columns meet zero rows
        t0 = float(t0) if self._timed else 0.0
        # experiments that pre-equilibrate under the same condition share one integration (PEtab's
        # Brannmark_JBC2010: 8 experiments, one pre-condition): the steady state and d x_ss / d(p, x0)
        # depend on (p, x0) alone, the chaining through (dp, dx0) is per call
        key = (p.tobytes(), x.tobytes(), held, t0)
        res = self._recent.get(key)
        if res is None:
            res = self._integrate(p, x, held, t0)
            if len(self._recent) >= _RECENT:
                self._recent.pop(next(iter(self._recent)))
            self._recent[key] = res
        if isinstance(res, str):
            return f"{what} {res}"
        xs, sens = res
        n_p = p.size
        return xs.copy(), sens[:, :n_p] @ dp + sens[:, n_p:] @ dx0

    def _states_key(self, p, x0, t0):
        """``(p, x0, t0, key)`` of a states-only run, as :meth:`states` and :meth:`vjp` keep them."""
        p = np.ascontiguousarray(p, float)
        x = np.ascontiguousarray(x0, float)
        t0 = float(t0) if self._timed else 0.0
        return p, x, t0, ("states", p.tobytes(), x.tobytes(), t0)

    def states(self, p, x0, *, what="pre-equilibration", t0=0.0):
        """The steady state reached from ``x0`` under ``p``, from solves of the states alone (their steps
        recorded for :meth:`vjp`), or a message when it is not reached."""
        p, x, t0, key = self._states_key(p, x0, t0)
        res = self._recent.get(key)
        if res is None:
            res = self._run_states(p, x, t0)
            if len(self._recent) >= _RECENT:
                self._recent.pop(next(iter(self._recent)))
            self._recent[key] = res
            self._recorded = key
        if isinstance(res, str):
            return f"{what} {res}"
        return res[0].copy()

    def vjp(self, p, x0, xbar, dp, *, what="pre-equilibration", t0=0.0):
        """``(pbar, x0bar)``: ``xbar^T`` times the derivatives of :meth:`states`' steady state with respect to ``p``
        and ``x0``, or a message when the steady state or its gradient does not converge. ``dp`` (n_params, k): how
        the parameters move (as in a call); a parameter that moves a jump of the right-hand side must not (its
        entry of ``pbar`` is zero)."""
        p, x, t0, key = self._states_key(p, x0, t0)
        res = self._recent.get(key)
        newton = res is not None and not isinstance(res, str) and res[1] == 0  # no steps recorded or needed
        if not newton and (self._recorded != key or res is None):  # another run's steps are in the records: again
            self._recent.pop(key, None)
            self.states(p, x, what=what, t0=t0)
        res = self._recent[key]
        if isinstance(res, str):
            return f"{what} {res}"
        x_ss, n_stages = res[:2]
        n_p = p.size
        held = [k for k in self._switching if not np.any(dp[k])]
        xbar = np.ascontiguousarray(xbar, float)
        if n_stages == 0:  # the Newton route: its sensitivities res[2] (see the module docstring)
            G = res[2].T @ xbar
            G[held] = 0.0
            return G[:n_p], G[n_p:]
        vjps = self._vjps[t0][:n_stages]
        t = vjps[-1].t[0]
        cm = vjps[-1].compiled
        grads = []
        for g in (xbar, cm.jac_y(t, x_ss, p).T @ xbar):  # G, then xbar^T J_x S (see the module docstring)
            acc = np.zeros(n_p)
            for vjp in reversed(vjps):
                grad, st = vjp.sweep(p, g[None, :])
                if st != 0:
                    return f"{what}: the adjoint of its run failed ({status_message(st)})"
                acc += grad[:n_p]
                g = grad[n_p:].copy()
            grads.append(np.concatenate([acc, g]))
        G, dG = grads
        dG[:n_p] += cm.jac_p(t, x_ss, p).T @ xbar
        G[held] = dG[held] = 0.0
        scale = 100 * (self.atol * np.abs(xbar).sum() + self.rtol * np.abs(G))
        if np.any(np.abs(dG) > scale):
            j = int(np.argmax(np.abs(dG) / np.maximum(scale, 1e-300)))
            return (f"{what}: its states converged by t={t:.0e}, but the gradient through it still changes there "
                    f"(entry {j}: dG/dt = {dG[j]:.3g}, tolerance {scale[j]:.3g}); a slow mode the states barely show: "
                    "use gradient=oi.Forward(), whose steady state waits for the sensitivities too")
        return G[:n_p], G[n_p:]

    def _run_states(self, p, x, t0):
        """``(x_ss, stages used)`` from ``x`` under ``p``, states alone (recorded), or why not; the stages end where
        the states and the probe's directional sensitivities pass the tests (see the module docstring). ``(x_ss, 0,
        d x_ss / d(p, x0))``: found by the Newton route, nothing recorded."""
        newton = self._by_newton(p, x, t0)
        if newton is not None:
            return newton[0], 0, newton[1]
        self.route = "integration"
        if t0 not in self._vjps:  # bound directly: a parameter that moves a jump gets no gradient (held, see vjp)
            from odeinfer.solve._inputs import compiled_model
            from odeinfer.solve.adjoint import VJP

            stages = _STAGES + t0
            cm = compiled_model(self.model)
            switching = tuple(self.model.params[k] for k in self._switching)
            probe = Forward(directions=_PROBES, exclude=switching)
            self._vjps[t0] = [VJP(cm, np.array([b]), float(a), self.solver, Adjoint())
                              for a, b in zip(stages[:-1], stages[1:])]
            self._probes[t0] = [bind(Problem(self.model, [b], t0=a), solver=self.solver, gradient=probe)
                                for a, b in zip(stages[:-1], stages[1:])]
        n_p = p.size
        w = probe_directions(n_p + x.size)
        w[list(self._switching)] = 0.0
        pdir, S, xp = np.ascontiguousarray(w[:n_p]), np.ascontiguousarray(w[n_p:]), x.copy()
        worst = np.inf
        for k, (vjp, probe) in enumerate(zip(self._vjps[t0], self._probes[t0])):
            st = vjp.record(p, x)
            if st == 0:
                y, sens, st = probe(p, xp, pdir, S)
                xp, S = y[0].copy(), np.ascontiguousarray(sens[0])
            if st != 0:
                return self._stopped(st, vjp.info if vjp.info[0] < vjp.t[0] else probe.info, vjp.max_steps, worst)
            x = vjp.y[0].copy()
            t, cm = vjp.t[0], vjp.compiled
            err = self._in_tolerances(x, cm.f(t, x, p))
            if err <= 1.0:
                err = max(err, self._in_tolerances(S, cm.jac_y(t, xp, p) @ S + cm.jac_p(t, xp, p) @ pdir, 100))
                if err <= 1.0:
                    return x, k + 1
            worst = min(worst, err)
        return self._not_reached(t0, worst)

    def _in_tolerances(self, v, dv, factor=1):
        """``max |dv| / (factor atol + factor rtol |v|)``: how fast ``v`` still moves, in units of the tolerance
        (``factor`` 100 for the sensitivities); at most 1 passes the test."""
        return np.max(np.abs(dv) / (factor * self.atol + factor * self.rtol * np.abs(v)))

    @staticmethod
    def _stopped(st, info, max_steps, worst):
        return (f"did not reach a steady state: the solver stopped at t={info[0]:.6g} "
                f"({status_message(st, t_reached=info[0], max_steps=max_steps)}); the smallest "
                f"|dx/dt| seen was {worst:.3g} times the tolerance")

    def _not_reached(self, t0, worst):
        return (f"did not reach a steady state by t={t0 + _STAGES[-1]:.0e}: |dx/dt| is still "
                f"{worst:.3g} times the tolerance (atol={self.atol:g} + rtol={self.rtol:g} |x|); the model may "
                "oscillate or grow under this condition: check its parameters")

    def _compiled(self):
        """The model's compiled right-hand side and Jacobians (``f``, ``jac_y``, ``jac_p`` at a point)."""
        from odeinfer.solve._inputs import compiled_model

        return compiled_model(self.model)

    def _plain_solvers(self, t0):
        """The stages' solvers from ``t0`` of the states alone (the Newton route's start)."""
        if t0 not in self._plain:
            stages = _STAGES + t0
            self._plain[t0] = [bind(Problem(self.model, [b], t0=a), solver=self.solver)
                               for a, b in zip(stages[:-1], stages[1:])]
        return self._plain[t0]

    def _by_newton(self, p, x0, t0):
        """``(x_ss, d x_ss / d(p, x0))`` by the Newton route (see the module docstring), the right-hand side taken
        at the time the states passed the test, or None where it does not apply: a failed or unfinished run of the
        states, no :meth:`_linearised` system, Newton's method not converging, or sensitivities whose error
        (estimated by the last of up to :data:`_REFINEMENTS` steps of iterative refinement on ``J_x S + J_p = 0``)
        stays above ``100 (atol + rtol |S|)``, the integration route's tolerance; the caller then integrates."""
        cm, x = self._compiled(), x0
        for solver in self._plain_solvers(t0):
            y, _, st = solver(p, x)
            if st != 0:
                return None
            x, t = y[0].copy(), float(solver.t[0])
            if self._in_tolerances(x, cm.f(t, x, p)) <= 1.0:
                break
        else:
            return None
        for _ in range(_NEWTON_ITERATIONS):
            lin = self._linearised(p, x, t)
            if lin is None:
                return None
            C = self._laws()
            dx = -lin[1] @ np.concatenate([cm.f(t, x, p), C @ (x - x0)])  # lin = (J_x, P)
            x = x + dx
            if np.max(np.abs(dx) / (self.atol + self.rtol * np.abs(x))) <= 1.0:
                lin = self._linearised(p, x, t)
                if lin is None:
                    return None
                J, P = lin
                n, jp = x.size, cm.jac_p(t, x, p)
                sens = np.hstack([-P[:, :n] @ jp, P[:, n:] @ C])
                for _ in range(_REFINEMENTS):  # iterative refinement: each step's size estimates the error before it
                    res = J @ sens
                    res[:, :p.size] += jp
                    fix = P[:, :n] @ res
                    sens -= fix
                    if self._in_tolerances(sens, fix, 100) <= 1.0:
                        break
                else:
                    return None
                self.route = "newton"
                return x, sens
        return None

    def _laws(self):
        """The model's conservation laws ``C`` (:func:`conservation_laws`), found once."""
        if self._conserved is None:
            self._conserved = conservation_laws(self.model)
        return self._conserved

    def _linearised(self, p, x, t):
        """``(J_x, P)`` at ``x``: ``P`` (n, n + k) solves ``[J_x; C] y = b`` as ``y = P b`` (``C``: :meth:`_laws`; ``P``
        the pseudo-inverse of the row- and column-equilibrated matrix, scaled back: kinetic models' Jacobians span
        many decades); or None where the Newton route does not apply: an eigenvalue of ``J_x`` besides the
        conservation laws' zeros has a real part >= 0, or ``[J_x; C]`` equilibrated has a condition number above
        :data:`_COND_MAX` (``J_x`` singular beyond its conservation laws)."""
        C = self._laws()
        J = self._compiled().jac_y(t, x, p)
        if not np.all(np.isfinite(J)):
            return None
        eig = np.linalg.eigvals(J)
        eig = eig[np.argsort(np.abs(eig))[C.shape[0]:]]
        if not np.all(eig.real < 0.0):
            return None
        A = np.vstack([J, C])
        r, c = _equilibration(A)
        U, sa, Vt = np.linalg.svd(r[:, None] * A * c, full_matrices=False)
        if sa[-1] * _COND_MAX < sa[0]:
            return None
        return J, (c[:, None] * Vt.T / sa) @ (U.T * r)

    def _integrate(self, p, x, held, t0=0.0):
        """``(x_ss, d x_ss / d(p, x0))`` from ``x`` under ``p``, or why not (a message to follow the
        steady state's name)."""
        newton = self._by_newton(p, x, t0)
        if newton is not None:
            xs, sens = newton[0], newton[1].copy()
            sens[:, list(held)] = 0.0
            return xs, sens
        self.route = "integration"
        n_p, n = p.size, x.size
        sens = np.hstack([np.zeros((n, n_p)), np.eye(n)])  # d x / d(p, x0)
        worst = np.inf
        for solver in self._solvers(held, t0):
            y, S, st = solver(p, x)
            if held:
                S = S.copy()
                S[:, :, list(held)] = 0.0
            t = solver.t[0]
            if st != 0:
                return self._stopped(st, solver.info, solver.max_steps, worst)
            x = y[0].copy()
            sens = S[0][:, n_p:] @ sens
            sens[:, :n_p] += S[0][:, :n_p]
            cm = solver.compiled
            err = self._in_tolerances(x, cm.f(t, x, p))
            if err <= 1.0:
                dS = cm.jac_y(t, x, p) @ sens
                dS[:, :n_p] += cm.jac_p(t, x, p)
                err = max(err, self._in_tolerances(sens, dS, 100))
                if err <= 1.0:
                    return x, sens
            worst = min(worst, err)
        return self._not_reached(t0, worst)
