"""Steady states of a model under constant parameters, with their sensitivities, by long-time
integration with a convergence check: the pre-equilibration of an experiment, and the state its
measurements at ``t = inf`` see (from the end of its finite-time trajectory).

The model and its forward sensitivities are integrated with the stiff solver and read at the
times ``t0 + 10^k`` (``k = 0 .. 10``, one stage each; ``t0`` matters only to a model whose right-hand
side depends on ``t``); the first time at which both ``|dx/dt|`` and the time
derivative of the sensitivities ``|J_x S + J_p|`` are below ``atol + rtol |.|`` (``100 atol + 100 rtol |S|`` for the
sensitivities), and so are their changes over the stage just run, gives the steady state and its sensitivities
``d x_ss / d(p, x0)``. The rates alone would pass a sensitivity that grows as ``t`` (a parameter that breaks a
conservation law) once ``t > 1 / (100 rtol)``; the changes cost one more stage where a steady state is reached.
Integrating keeps models with conservation laws (singular ``J_x``) right: their steady state depends on the initial
state, and the integrated sensitivities carry that dependence.

Mostly the sensitivities are not integrated (:meth:`SteadyState._by_newton`): the states alone are integrated stage
by stage until ``|dx/dt|`` passes the test, then Newton's method takes them to the steady state itself (the
``t -> inf`` limit, also along modes too slow for the integration's test), and the implicit function theorem gives
the sensitivities. Linear conservation laws ``C f = 0`` at the parameters (:class:`ConservationLaws`, from the
right-hand side's terms) are kept: the steady state solves ``f(x) = 0`` and ``C x = C x0``, so
``[J_x; C] d x_ss = [-J_p dp; C dx0 - (dC/dp dp) (x_ss - x0)]`` (without conservation laws ``d x_ss / d x0 = 0``: an
isolated, attracting steady state does not move with the start; ``dC/dp``: laws weighted by compartment volumes).
A law that holds only at a parameter's value (a rate set to 0) has no derivative along that parameter: a call
that moves it takes the integration route. States that start at 0 and stay there whatever the call moves (a ligand's
complexes where a condition holds the ligand at 0, and a sink they feed: :meth:`SteadyState._zeros`) are left out of
the system, 0 with derivatives 0. This route is taken when the eigenvalues of ``J_x`` other than the conservation
laws' zeros have negative real parts, ``[J_x; C]`` equilibrated has a condition number of at most ``1e10`` and the
sensitivities' error (steps of iterative refinement) is within the integration route's tolerance; otherwise the
integration route below. A
right-hand side that depends on ``t`` (inputs) is taken at the time where the states passed the test, as the
integration route's tests take it. One sensitivity solve of Zheng_PNAS2012's pre-equilibration (15 states, 46
parameters) took 0.03-0.65 s along a fit; this route takes a few ms.

Without sensitivities (:meth:`SteadyState.states`, for the likelihood's value and its adjoint) the Newton route
is tried first. Where it does not apply, the states are integrated stage by stage with their steps recorded, and
beside them two directional sensitivities ``S w`` along fixed random directions ``w`` of ``(p, x0)``: the run stops
where ``|dx/dt|``, ``|J_x S w + J_p w_p|`` and their changes over the stage pass the tests above (a slow mode the
states barely show, e.g. along a conservation law's complement, still moves the sensitivities; the probe waits for it
as the full sensitivities do).
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

__all__ = ["ConservationLaws", "SteadyState", "conservation_laws"]

_STAGES = np.r_[0.0, 10.0 ** np.arange(0, 11)]
_RECENT = 16  # steady states remembered: one per distinct pre-equilibration of an evaluation
_PROBES = 2  # directional sensitivities that watch the states-only runs' convergence
_COND_MAX = 1e10  # the largest condition number of [J_x; C] for the implicit function theorem (module docstring)
_NULL = 1e-12  # singular values of the terms' coefficients below this fraction of the largest: conservation laws
_NEWTON_ITERATIONS = 10
_REFINEMENTS = 3  # steps of iterative refinement of the Newton route's sensitivities (Brannmark_JBC2010 needs 2)


class ConservationLaws:
    """The linear conservation laws of a model at given parameters: the rows ``c`` with ``c^T f(t, x, p) = 0`` for
    every ``t`` and ``x``, and how they move with ``p``.

    The right-hand side is written ``f_i = sum_c M_ic(p) m_c(t, x, p)``: each ``f_i`` expanded into terms, each term
    split into its factors of parameters and numbers alone (``M``'s entry) and the rest (the monomial ``m_c``: states,
    ``t``, inputs and the functions of them; each distinct one a column). The monomials are independent functions of
    ``(t, x)``, so the laws at ``p`` are the left null space of ``M(p)``. That covers the stoichiometric numbers of one
    compartment, compartment volumes as weights where species live in compartments of other sizes
    (Blasi_CellSystems2016), and laws that hold only at ``p``, where a rate is zero (Isensee_JCB2018's knock-outs).
    Scaling ``M``'s columns does not move its left null space: they are equilibrated before the SVD (the entries are
    rates spanning decades; on the Jacobian itself the null space is lost to rounding, Brannmark_JBC2010's singular
    values span 3e8 down to its laws' 1e-12 .. 1e-26)."""

    def __init__(self, model):
        import sympy

        from odeinfer.model.codegen import safe_symbols
        from odeinfer.model.derivatives import differentiate

        params = set(model.param_symbols)
        states = {x: i for i, x in enumerate(model.state_symbols)}
        entries, columns = {}, {}
        for i, e in enumerate(model.exprs):
            for term in sympy.Add.make_args(sympy.expand(e)):
                coeff, rest = [], []
                for factor in sympy.Mul.make_args(term):
                    (coeff if factor.free_symbols <= params else rest).append(factor)
                key = (i, columns.setdefault(sympy.Mul(*rest), len(columns)))
                entries[key] = entries.get(key, 0) + sympy.Mul(*coeff)
        self.shape = (len(model.exprs), max(len(columns), 1))
        # per column, the states whose zero makes its monomial zero (a factor x or x**k, k > 0)
        self._zeroing = [frozenset(states[b] for b, e in (f.as_base_exp() for f in sympy.Mul.make_args(m))
                                   if b in states and e.is_positive) for m in columns]
        self._rows = np.array([i for i, _ in entries], dtype=np.int64)
        self._cols = np.array([c for _, c in entries], dtype=np.int64)
        exprs = list(entries.values())
        self._values = np.array([float(e) if e.is_number else 0.0 for e in exprs])
        self._symbolic = np.array([k for k, e in enumerate(exprs) if not e.is_number], dtype=np.int64)
        index = {s: j for j, s in enumerate(model.param_symbols)}
        d_entry, d_param, d_exprs = [], [], []  # the entries' derivatives in the parameters
        for k in self._symbolic:
            for s in sorted(exprs[k].free_symbols & params, key=index.get):
                d_entry.append(k)
                d_param.append(index[s])
                d_exprs.append(differentiate(exprs[k], s))
        # each derivative's row and column of M and its parameter
        self._d_rows, self._d_cols = self._rows[d_entry], self._cols[d_entry]
        self._d_params = np.array(d_param, dtype=np.int64)
        self._fn = None
        if self._symbolic.size:
            rename = safe_symbols(model.state_symbols, model.param_symbols)
            args = [rename[s] for s in model.param_symbols]
            self._fn = sympy.lambdify(args, [exprs[k].xreplace(rename) for k in self._symbolic] +
                                      [e.xreplace(rename) for e in d_exprs], modules="numpy")
        self.n_params = len(model.param_symbols)
        self._last = None

    def at(self, p, zero=()):
        """``(C, shift)`` at ``p``: ``C`` (k, n_states) orthonormal rows spanning the laws, and
        ``shift(dx) -> (D, moved)`` with ``D[:, j] = (dC/dp_j) dx`` (k, n_params) for ``dx = x_ss - x0`` (the
        constraint ``C (x_ss - x0) = 0`` differentiated: ``C (dx_ss - dx0) = -D dp``; the part of ``dC/dp_j`` inside
        the laws' span meets ``C dx = 0``) and ``moved`` (n_params,) True where the laws do not persist as ``p_j``
        moves (a law that holds only at ``p_j``'s value: ``D[:, j]`` is 0 there and means nothing).

        ``zero``: states held at 0 (:meth:`SteadyState._zeros`); the laws are then those of the other states (``C``
        has a column for each of them, ``dx`` is theirs), on the monomials that do not vanish with those states."""
        p = np.ascontiguousarray(p, float)
        zero = tuple(zero)
        if self._last is not None and np.array_equal(self._last[0], p) and self._last[1] == zero:
            return self._last[2]
        values = self._values.copy()
        derivs = np.zeros(0)
        if self._fn is not None:
            out = np.array(self._fn(*p), float).reshape(-1)
            values[self._symbolic] = out[:self._symbolic.size]
            derivs = out[self._symbolic.size:]
        row_at = np.full(self.shape[0], -1)  # each state's row in the laws' system, -1 for the zero states
        kept = np.setdiff1d(np.arange(self.shape[0]), zero)
        row_at[kept] = np.arange(kept.size)
        col_kept = np.array([not (z & set(zero)) for z in self._zeroing] or [True])
        col_at = np.cumsum(col_kept) - 1
        n, n_cols = kept.size, max(int(col_kept.sum()), 1)
        use = (row_at[self._rows] >= 0) & col_kept[self._cols]
        M = np.zeros((n, n_cols))
        np.add.at(M, (row_at[self._rows[use]], col_at[self._cols[use]]), values[use])
        scale = np.abs(M).max(axis=0)
        scale = 1.0 / np.where(scale > 0.0, scale, 1.0)
        U, sv, Vt = np.linalg.svd(M * scale)
        rank = int(np.sum(sv > _NULL * max(sv[0], 1.0))) if sv.size else 0
        C = np.ascontiguousarray(U[:, rank:].T)
        use = (row_at[self._d_rows] >= 0) & col_kept[self._d_cols]
        rows, cols, params = row_at[self._d_rows[use]], col_at[self._d_cols[use]], self._d_params[use]
        derivs = derivs[use]
        dms = derivs * scale[cols]  # the entries of each (dM/dp_j) S
        # c^T M = 0 at every p gives (dc/dp_j)^T Ms = -c^T (dM/dp_j) S (Ms = M S, S the column scales), solvable when
        # c^T (dM/dp_j) S is orthogonal to Ms's right null space Z (tested on fixed random combinations of Z's
        # columns, against the largest entry of (dM/dp_j) S: rounding's scale); else the laws do not persist
        Z = Vt[rank:].T @ _unit_columns(n_cols - rank)
        R = np.zeros((n, self.n_params, Z.shape[1]))
        np.add.at(R, (rows, params), dms[:, None] * Z[cols])
        size = np.zeros(self.n_params)
        np.maximum.at(size, params, np.abs(dms))
        moved = np.abs(np.einsum("ki,ijr->kjr", C, R)).max(axis=(0, 2), initial=0.0) > 1e-8 * size

        def shift(dx):
            w = scale * (Vt[:rank].T @ ((U[:, :rank].T @ dx) / sv[:rank]))  # S Ms^+ dx
            Dp = np.zeros((n, self.n_params))
            np.add.at(Dp, (rows, params), derivs * w[cols])
            D = -C @ Dp  # (dc/dp_j)^T dx = -c^T (dM/dp_j) S Ms^+ dx
            D[:, moved] = 0.0
            return D, moved

        self._last = (p.copy(), zero, (C, shift))
        return C, shift


def _unit_columns(n, k=2):
    """``k`` fixed random unit vectors of length ``n`` (columns)."""
    G = np.random.default_rng(1).standard_normal((n, k))
    return G / np.maximum(np.linalg.norm(G, axis=0), 1e-300)


def conservation_laws(model, p):
    """``C`` (k, n_states), orthonormal rows: the model's linear conservation laws at the parameters ``p``
    (:class:`ConservationLaws`)."""
    return ConservationLaws(model).at(p)[0]


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
        self._zero_sets = {}  # (states starting at 0, held parameters at 0) -> the states that stay 0 (_zeros)

    def _solvers(self, held, t0=0.0, k=1):
        """The stages' solvers from ``t0`` with ``k`` directional sensitivities, none for the parameters ``held``
        (indices): those that move a jump of the right-hand side are fine while the caller holds them fixed."""
        key = (held, t0, k)
        if key not in self._bound:
            gradient = Forward(directions=k, exclude=tuple(self.model.params[j] for j in held))
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
        moving = np.r_[np.any(dp, axis=1), np.any(dx0, axis=1)]  # the columns of d x_ss / d(p, x0) the call uses
        key = (p.tobytes(), x.tobytes(), held, t0, moving.tobytes())
        res = self._recent.get(key) or self._keep(key, self._integrate(p, x, held, t0, moving=moving))
        if not isinstance(res, str) and np.any(dp[res[2]]):  # laws at p that a moving parameter breaks: integrate
            key += ("integration",)
            res = self._recent.get(key) or self._keep(key, self._integrate(p, x, held, t0, False, moving))
        if isinstance(res, str):
            return f"{what} {res}"
        xs, sens = res[:2]
        n_p = p.size
        return xs.copy(), sens[:, :n_p] @ dp + sens[:, n_p:] @ dx0

    def _keep(self, key, res):
        """``res``, remembered under ``key`` (the last :data:`_RECENT` results)."""
        if len(self._recent) >= _RECENT:
            self._recent.pop(next(iter(self._recent)))
        self._recent[key] = res
        return res

    def _states_key(self, p, x0, t0, moving):
        """``(p, x0, t0, moving, key)`` of a states-only run, as :meth:`states` and :meth:`vjp` keep them."""
        p = np.ascontiguousarray(p, float)
        x = np.ascontiguousarray(x0, float)
        t0 = float(t0) if self._timed else 0.0
        moving = np.ones(p.size + x.size, bool) if moving is None else np.asarray(moving, bool)
        return p, x, t0, moving, ("states", p.tobytes(), x.tobytes(), t0, moving.tobytes())

    def states(self, p, x0, *, what="pre-equilibration", t0=0.0, moving=None):
        """The steady state reached from ``x0`` under ``p``, from solves of the states alone (their steps
        recorded for :meth:`vjp`), or a message when it is not reached. ``moving`` (n_params + n_states,
        bool; default all): the entries of ``(p, x0)`` whose gradient :meth:`vjp` will be asked for (the others
        may have none: a parameter that breaks a conservation law at its value here)."""
        p, x, t0, moving, key = self._states_key(p, x0, t0, moving)
        res = self._recent.get(key)
        if res is None:
            res = self._keep(key, self._run_states(p, x, t0, moving=moving))
            self._recorded = key
        if isinstance(res, str):
            return f"{what} {res}"
        return res[0].copy()

    def vjp(self, p, x0, xbar, dp, *, what="pre-equilibration", t0=0.0, moving=None):
        """``(pbar, x0bar)``: ``xbar^T`` times the derivatives of :meth:`states`' steady state with respect to ``p``
        and ``x0``, or a message when the steady state or its gradient does not converge. ``dp`` (n_params, k): how
        the parameters move (as in a call); a parameter that moves a jump of the right-hand side must not (its
        entry of ``pbar`` is zero), nor an entry outside ``moving`` (as :meth:`states`')."""
        p, x, t0, moving, key = self._states_key(p, x0, t0, moving)
        res = self._recent.get(key)
        if res is None or (not isinstance(res, str) and res[1] > 0 and self._recorded != key):
            self._recent.pop(key, None)  # another run's steps are in the records: again
            self.states(p, x, what=what, t0=t0, moving=moving)
            res = self._recent[key]
        if not isinstance(res, str) and res[1] == 0 and np.any(dp[res[3]]):  # laws at p that dp breaks: integrate
            res = self._keep(key, self._run_states(p, x, t0, newton=False, moving=moving))
            self._recorded = key
        if isinstance(res, str):
            return f"{what} {res}"
        x_ss, n_stages = res[:2]
        n_p = p.size
        held = [k for k in self._switching if not np.any(dp[k])]
        xbar = np.ascontiguousarray(xbar, float)
        if n_stages == 0:  # the Newton route: its sensitivities res[2] (see the module docstring)
            G = res[2].T @ xbar
            G[held] = 0.0
            G[~moving] = 0.0
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
        G[~moving] = dG[~moving] = 0.0
        scale = 100 * (self.atol * np.abs(xbar).sum() + self.rtol * np.abs(G))
        if np.any(np.abs(dG) > scale):
            j = int(np.argmax(np.abs(dG) / np.maximum(scale, 1e-300)))
            return (f"{what}: its states converged by t={t:.0e}, but the gradient through it still changes there "
                    f"(entry {j}: dG/dt = {dG[j]:.3g}, tolerance {scale[j]:.3g}); a slow mode the states barely show: "
                    "use gradient=oi.Forward(), whose steady state waits for the sensitivities too")
        return G[:n_p], G[n_p:]

    def _run_states(self, p, x, t0, newton=True, moving=None):
        """``(x_ss, stages used)`` from ``x`` under ``p``, states alone (recorded), or why not; the stages end where
        the states and the probe's directional sensitivities (along the entries of ``(p, x0)`` in ``moving``) pass
        the tests (see the module docstring). ``(x_ss, 0, d x_ss / d(p, x0), moved)``: found by the Newton route
        (unless ``newton`` is false), nothing recorded."""
        found = self._by_newton(p, x, t0, moving) if newton else None
        if found is not None:
            return found[0], 0, found[1], found[2]
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
        if moving is not None:
            w[~moving] = 0.0
        pdir, S, xp = np.ascontiguousarray(w[:n_p]), np.ascontiguousarray(w[n_p:]), x.copy()
        worst = np.inf
        for k, (vjp, probe) in enumerate(zip(self._vjps[t0], self._probes[t0])):
            st = vjp.record(p, x)
            if st == 0:
                y, sens, st = probe(p, xp, pdir, S)
                xp, S_before, S = y[0].copy(), S, np.ascontiguousarray(sens[0])
            if st != 0:
                return self._stopped(st, vjp.info if vjp.info[0] < vjp.t[0] else probe.info, vjp.max_steps, worst)
            x_before, x = x, vjp.y[0].copy()
            t, cm = vjp.t[0], vjp.compiled
            err, at = self._stage_error(x, x_before, cm.f(t, x, p), S, S_before,
                                        lambda: cm.jac_y(t, xp, p) @ S + cm.jac_p(t, xp, p) @ pdir)
            if err <= 1.0:
                return x, k + 1
            worst, last = min(worst, err), (err, at)
        return self._not_reached(t0, worst, last)

    def _in_tolerances(self, v, dv, factor=1):
        """``max |dv| / (factor atol + factor rtol |v|)``: how fast ``v`` still moves, in units of the tolerance
        (``factor`` 100 for the sensitivities); at most 1 passes the test."""
        return np.max(np.abs(dv) / (factor * self.atol + factor * self.rtol * np.abs(v)))

    def _settled(self, v, v_before, dv, factor=1):
        """The integration route's test of ``v`` at the end of a stage: ``(error, index)``, the error in units of
        the tolerance (at most 1 passes) from its rate ``dv`` and its change over the stage (from ``v_before``, a
        tenth of the time before), and the index of ``v``'s entry furthest from passing. The rate alone passes
        anything that grows linearly once ``t > 1 / (factor rtol)``: a sensitivity along a parameter that breaks a
        conservation law (``z' = q (x - z)`` at ``q = 0``: ``d z / d q`` grows as ``t``), or one of a mode too slow to
        have decayed by the end of the stages."""
        ratio = np.maximum(np.abs(dv), np.abs(v - v_before)) / (factor * self.atol + factor * self.rtol * np.abs(v))
        if not ratio.size:
            return 0.0, None
        at = np.unravel_index(np.argmax(ratio), ratio.shape)
        return float(ratio[at]), at

    def _stage_error(self, x, x_before, dx, S, S_before, dS):
        """``(error, at)`` at the end of a stage: the states' :meth:`_settled` test, and once they pass, the
        sensitivities' (``dS()`` their rate); ``at`` = ``("state", (i,))`` or ``("sens", (i, j))`` names the entry
        furthest from passing."""
        err, at = self._settled(x, x_before, dx)
        where = ("state", at)
        if err <= 1.0:
            err_s, at_s = self._settled(S, S_before, dS(), 100)
            if err_s > err:
                err, where = err_s, ("sens", at_s)
        return err, where

    @staticmethod
    def _stopped(st, info, max_steps, worst):
        return (f"did not reach a steady state: the solver stopped at t={info[0]:.6g} "
                f"({status_message(st, t_reached=info[0], max_steps=max_steps)}); the closest it came "
                f"(|dx/dt| and the change over a stage) was {worst:.3g} times the tolerance")

    def _not_reached(self, t0, worst, last, cols=None):
        """The message of a run whose stages ended unsettled: ``worst`` the smallest error of a stage, ``last`` the last
        stage's :meth:`_stage_error`; ``cols``: the columns of ``d x / d(p, x0)`` the sensitivities are (None: the
        probe's directions)."""
        err, (kind, at) = last
        states = self.model.states
        if kind == "state":
            where = f"the state {states[at[0]]!r}"
        elif cols is None:
            where = f"the sensitivities of the state {states[at[0]]!r}"
        else:
            names = list(self.model.params) + [f"the start of {x!r}" for x in states]
            where = f"the derivative of {states[at[0]]!r} along {names[cols[at[1]]]}"
        return (f"did not reach a steady state by t={t0 + _STAGES[-1]:.0e}: its states or their sensitivities still "
                f"move, their rate |dx/dt| or their change over the last tenfold time at best {worst:.3g} times the "
                f"tolerance (atol={self.atol:g} + rtol={self.rtol:g} |x|, 100 times that for the sensitivities), at "
                f"the end {err:.3g} times, furthest {where}; a parameter may break a conservation law of the "
                "model, or the model may oscillate or grow under this condition: check its parameters")

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

    def _zeros(self, p, x0, moving):
        """The states that stay 0 whatever the moving entries of ``(p, x0)`` (``moving``, None: all move): the largest
        set Z of states that start at 0 (their starts held) whose right-hand sides vanish when Z's states and the held
        parameters whose value is 0 are set to 0 (sympy; the other parameters, ``t`` and the inputs stay symbols).
        From such a start ``x_Z`` stays 0 and so do its sensitivities along the moving entries: e.g. the complexes
        of a ligand absent from a pre-condition, and a sink fed by them only, whose zero column of ``J_x`` would
        make the Newton route refuse (PEtab's Raimundez_PCB2020)."""
        if moving is None:
            return ()
        n_p, n = p.size, x0.size
        start = tuple(i for i in range(n) if x0[i] == 0.0 and not moving[n_p + i])
        held = tuple(j for j in range(n_p) if p[j] == 0.0 and not moving[j])
        if not start:
            return ()
        key = (start, held)
        if key not in self._zero_sets:
            import sympy

            m = self.model
            Z = set(start)
            to_zero = {m.state_symbols[i]: 0 for i in Z} | {m.param_symbols[j]: 0 for j in held}
            pending = set(Z)
            while pending:  # a state leaves Z when its right-hand side does not vanish: check those that read it
                i = pending.pop()
                if sympy.expand(m.exprs[i].xreplace(to_zero)) != 0:
                    Z.discard(i)
                    del to_zero[m.state_symbols[i]]
                    pending |= {j for j in Z if m.state_symbols[i] in m.exprs[j].free_symbols}
            self._zero_sets[key] = tuple(sorted(Z))
        return self._zero_sets[key]

    def _by_newton(self, p, x0, t0, moving=None):
        """``(x_ss, d x_ss / d(p, x0), moved)`` by the Newton route (see the module docstring), the right-hand side
        taken at the time the states passed the test, or None where it does not apply: a failed or unfinished run of
        the states, no :meth:`_linearised` system, Newton's method not converging, or sensitivities whose error
        (estimated by the last of up to :data:`_REFINEMENTS` steps of iterative refinement on ``[J_x; C] S = rhs``)
        stays above ``100 (atol + rtol |S|)``, the integration route's tolerance; the caller then integrates.
        ``moved`` (n_params,): the parameters along which the conservation laws at ``p`` do not persist
        (:meth:`ConservationLaws.at`); their columns are 0 and mean nothing, callers that move them integrate.
        The states that stay 0 (:meth:`_zeros`, given ``moving``) are left out of the system: 0, with sensitivities
        0 (those along the entries that do not move mean nothing)."""
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
        if self._conserved is None:
            self._conserved = ConservationLaws(self.model)
        zero = self._zeros(p, x0, moving)
        C, shift = self._conserved.at(p, zero)
        R = np.setdiff1d(np.arange(x.size), zero)  # the states of the system solved
        x = x.copy()
        x[list(zero)] = 0.0
        for _ in range(_NEWTON_ITERATIONS):
            lin = self._linearised(p, x, t, C, R)
            if lin is None:
                return None
            dx = -lin[1] @ np.concatenate([cm.f(t, x, p)[R], C @ (x[R] - x0[R])])  # lin = (J_x on R, P)
            x[R] += dx
            if np.max(np.abs(dx) / (self.atol + self.rtol * np.abs(x[R]))) <= 1.0:
                lin = self._linearised(p, x, t, C, R)
                if lin is None:
                    return None
                J, P = lin
                n, n_p = R.size, p.size
                D, moved = shift(x[R] - x0[R])
                rhs = np.zeros((n + C.shape[0], n_p + x.size))  # [J_x; C] d x_ss = [-J_p dp; C dx0 - D dp] on R
                rhs[:n, :n_p] = -cm.jac_p(t, x, p)[R]
                rhs[n:, :n_p] = -D
                rhs[n:, n_p + R] = C
                sens = P @ rhs
                for _ in range(_REFINEMENTS):  # iterative refinement: each step's size estimates the error before it
                    fix = P @ (np.vstack([J @ sens, C @ sens]) - rhs)
                    sens -= fix
                    if self._in_tolerances(sens, fix, 100) <= 1.0:
                        break
                else:
                    return None
                self.route = "newton"
                full = np.zeros((x.size, sens.shape[1]))
                full[R] = sens
                return x, full, moved
        return None

    def _linearised(self, p, x, t, C, R):
        """``(J_x, P)`` at ``x``, ``J_x``'s rows and columns of the states ``R`` (:meth:`_zeros`' left out): ``P``
        solves ``[J_x; C] y = b`` as ``y = P b`` (``C``: the laws at ``p``; ``P`` the pseudo-inverse of the row- and
        column-equilibrated matrix, scaled back: kinetic models' Jacobians span many decades); or None where the
        Newton route does not apply: no state in ``R``, an eigenvalue of ``J_x`` besides the conservation laws' zeros
        with a real part >= 0, or ``[J_x; C]`` equilibrated with a condition number above :data:`_COND_MAX` (``J_x``
        singular beyond its conservation laws)."""
        J = self._compiled().jac_y(t, x, p)[np.ix_(R, R)]
        if R.size == 0 or not np.all(np.isfinite(J)):
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

    def _integrate(self, p, x, held, t0=0.0, newton=True, moving=None):
        """``(x_ss, d x_ss / d(p, x0), moved)`` from ``x`` under ``p`` (``moved`` as :meth:`_by_newton`'s, none
        moved on the integration route), or why not (a message to follow the steady state's name). On the
        integration route only the columns of ``d x_ss / d(p, x0)`` in ``moving`` (default all) are integrated (as
        directional sensitivities) and tested, the others are 0: a parameter held at a value where it breaks a
        conservation law has none (it grows as ``t``)."""
        found = self._by_newton(p, x, t0, moving) if newton else None
        if found is not None:
            xs, sens, moved = found[0], found[1].copy(), found[2]
            sens[:, list(held)] = 0.0
            return xs, sens, moved
        self.route = "integration"
        n_p, n = p.size, x.size
        cols = np.flatnonzero(np.ones(n_p + n, bool) if moving is None else moving)
        pc = cols[cols < n_p]  # the moving parameters
        W = np.zeros((n_p + n, max(cols.size, 1)))  # the directions: the moving columns of d x / d(p, x0)
        W[cols, np.arange(cols.size)] = 1.0
        pdir, S = np.ascontiguousarray(W[:n_p]), np.ascontiguousarray(W[n_p:])
        worst = np.inf
        for solver in self._solvers(held, t0, W.shape[1]):
            y, sens, st = solver(p, x, pdir, S)
            t = solver.t[0]
            if st != 0:
                return self._stopped(st, solver.info, solver.max_steps, worst)
            x_before, x = x, y[0].copy()
            S_before, S = S, np.ascontiguousarray(sens[0])
            cm = solver.compiled
            err, at = self._stage_error(x, x_before, cm.f(t, x, p), S, S_before,
                                        lambda: cm.jac_y(t, x, p) @ S + cm.jac_p(t, x, p)[:, pc] @ pdir[pc])
            if err <= 1.0:
                sens = np.zeros((n, n_p + n))
                sens[:, cols] = S[:, :cols.size]
                return x, sens, np.zeros(n_p, dtype=bool)
            worst, last = min(worst, err), (err, at)
        return self._not_reached(t0, worst, last, cols)
