"""The forward problem of a delay differential equation for :class:`~odeinfer.bayes.op.ODEOp`.

:class:`DDEProblem` has the interface of :class:`~odeinfer.bayes.op.ODEProblem`
with the history parameters in place of the initial states: the Op maps
``(theta, phi)`` -- the model parameters (delays included, ``model.params``
order) and the parameters of the history family (``History.param_names``
order, e.g. ``"A[x]", "omega[x]", "b[x]"``) -- to the states at the
observation times and their forward sensitivities ``d y / d (theta, phi)``
(the DDE solver's, :mod:`odeinfer.solve.kernels.dde`: method of steps with
Dormand-Prince 5(4), including the history-derivative term of the delay
sensitivity). A data-driven (piecewise) history has no parameters: ``phi`` is
then an empty vector.

Failure policy as for ODEs: a failed solve, a delay <= 0 or non-finite inputs
give NaN outputs; so does a delay longer than a data-driven history's window
(the solve would read the spline outside the data it was fitted to).
"""

from __future__ import annotations

import hashlib

import numpy as np

from odeinfer.bayes.op import ForwardProblem
from odeinfer.solve import abi
from odeinfer.solve.abi import DDE_INFO_SIZE, Info, Status

__all__ = ["DDEProblem"]

# plain ints for the numba solve below
_N_STORED, _BUF_FULL, _INFO_SIZE = int(Info.N_STORED), int(Info.BUF_FULL), DDE_INFO_SIZE
_BAD_INPUT = int(Status.BAD_INPUT)


class DDEProblem(ForwardProblem):
    """The forward map of a DDE model at fixed output times, for :class:`~odeinfer.bayes.op.ODEOp`.

    Parameters
    ----------
    model : Model or CompiledModel
        A model with delays (``@oi.model(..., delays=[...])``).
    t : array-like (n_times,)
        Output (observation) times, sorted, ``>= t0``.
    history : History or number(s)
        The history family (the Op's second input ``phi`` holds its
        parameters, ``history.n_params`` of them) or a data-driven history
        (``History.from_data``; no parameters). Numbers mean ``History.constant``.
    t0 : float, optional
        End of the history window, start of the integration; default ``t[0]``.
    solver : MethodOfSteps, optional
        Default ``oi.MethodOfSteps(oi.Dopri5(max_steps=20_000))`` (the ``sample`` role's: steps per
        solve before it counts as failed, NaN).
    sens_error_control : bool, default False
        As for :class:`~odeinfer.bayes.op.ODEProblem`: off, the sensitivities
        ride on the states' steps (the gradient is then the derivative of the
        computed solution up to the step-size controller).

    Notes
    -----
    Equal problems (same equations, times, history family and known history
    values, options) compare and hash equal. Pickles without compiled kernels.
    """

    kind = "dde"
    #: name of the build_model deterministic holding the Op's second input
    init_name = "history_params"

    def __init__(self, model, t, history, t0=None, *, solver=None, sens_error_control=False):
        from odeinfer.solve import Problem
        from odeinfer.solve.config import as_solver
        from odeinfer.solve.problem import model_of

        problem = Problem(model, t, history=history, t0=t0)  # validates the model, times and history once
        self.solver = as_solver(solver, delays=True, role="sample")
        self.model = model_of(problem.model)
        self.history = problem.history
        self.t = problem.t
        self.t0 = float(problem.t0)
        self.method = self.solver.method
        self.rtol, self.atol, self.max_steps = self.solver.rtol, self.solver.atol, self.solver.max_steps
        self.sens_error_control = bool(sens_error_control)
        window = self.history.window()
        # longest delay the history covers (data-driven histories only)
        self.tau_limit = np.inf if window is None else self.t0 - window[0] + 1e-9 * max(1.0, abs(self.t0))
        self._solvers = {}

    # sizes and identity ---------------------------------------------------------------------
    @property
    def n_init(self) -> int:
        """Length of the Op's second input: the history parameters."""
        return self.history.n_params

    @property
    def init_names(self) -> tuple:
        return self.history.param_names(self.model.states)

    @property
    def key(self) -> str:
        """Hash of the equations, times, history, and solver options."""
        h = self.history
        known = "" if h.kind != "piecewise" else (h.breaks.tobytes().hex() + h.coef.tobytes().hex())
        text = repr((self.kind, self.model.fingerprint, self.t.tobytes().hex(), self.t0, h.kind, h.n_params,
                     known, self.solver, self.sens_error_control))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def __repr__(self):
        return (f"DDEProblem({self.model.name!r}, history={self.history.kind!r}, n_times={self.n_times}, "
                f"t0={self.t0:g}, solver={self.solver!r})")

    def at_times(self, t):
        """The same problem at other output times ``t`` (>= t0)."""
        return DDEProblem(self.model, t, self.history, self.t0, solver=self.solver,
                          sens_error_control=self.sens_error_control)

    # solving ----------------------------------------------------------------------------------
    def _solver(self, sens):
        solver = self._solvers.get(sens)
        if solver is None:
            from odeinfer.solve import Forward, Problem, bind

            gradient = Forward(error_control=self.sens_error_control) if sens else None
            solver = self._solvers[sens] = bind(Problem(self.model, self.t, history=self.history, t0=self.t0),
                                                solver=self.solver, gradient=gradient)
        return solver

    def _delays_ok(self, theta):
        taus = theta[list(self.model.delay_indices)]
        return bool(np.all(taus > 0) and np.all(taus <= self.tau_limit))

    def python_solve(self, theta, phi, sens=True):
        """``(y, S, status)`` as new arrays; NaN everywhere when the solve fails.

        ``y`` (n_times, n_states); ``S`` (n_times, n_states, n_params +
        n_history_params) (None when ``sens`` is False).
        """
        # writable copies (PyTensor may pass read-only arrays: another type to numba, a second compilation)
        theta, phi = np.array(theta, dtype=np.float64), np.array(phi, dtype=np.float64)
        solver = self._solver(bool(sens))
        if theta.shape != (self.n_params,) or phi.shape != (self.n_init,):
            status = Status.BAD_INPUT
        elif not (np.all(np.isfinite(theta)) and np.all(np.isfinite(phi))):
            status = Status.NON_FINITE
        elif not self._delays_ok(theta):
            status = Status.BAD_INPUT
        else:
            _, _, status = solver(theta, phi)
        y = np.array(solver._y)
        s = None if not sens else np.array(solver._sens)
        if status != 0:
            y.fill(np.nan)
            if s is not None:
                s.fill(np.nan)
        return y, s, int(status)

    def numba_solve(self, sens=True):
        """An ``@njit`` function ``(theta, phi) -> (y, S)`` with NaN outputs on failure.

        Calls the model's generated ``dde_solve`` kernel directly (no Python),
        growing the dense-output store as :class:`~odeinfer.solve.DDESolver` does;
        with ``sens=False``, ``S`` has shape (n_times, n_states, 0).
        """
        from numba import njit

        from odeinfer.bayes.op import split_augmented

        n = self.n_states
        kk = self.n_params + self.n_init if sens else 0
        forward = self._numba_forward(kk)

        @njit(error_model="numpy")
        def solve(theta, phi):
            status, z, _, _ = forward(np.ascontiguousarray(theta), np.ascontiguousarray(phi))
            return split_augmented(z, n, kk, status)

        return solve

    def _numba_forward(self, k):
        """An ``@njit`` function ``(p, ph) -> (status, z, buf, info)``: the model's ``dde_solve``
        kernel with ``k`` sensitivity columns (0 or ``n_params + n_init``) after the input checks
        (finite values, ``0 < delay <= tau_limit``; ``Status.BAD_INPUT`` otherwise), growing the
        dense-output store ``buf`` as :class:`~odeinfer.solve.DDESolver` does (adapter
        :func:`odeinfer.solve.abi.njit_dde_solve`)."""
        from numba import njit

        n, m, n_out, q = self.n_states, self.n_params, self.n_times, self.n_init
        work_size = abi.dde_work_size(self.model, k, q)
        hkind, _, hb, hc = self.history.kernel_arrays(self.t0)
        max_steps = self.max_steps
        run = abi.njit_dde_solve(self.model.compile(), self.t0, np.array(self.t), hkind, hb, hc, k,
                                 self.sens_error_control, self.rtol, self.atol, max_steps)
        tau_limit = float(self.tau_limit)
        delay_idx = np.array(self.model.delay_indices, dtype=np.int64)
        width = n * (1 + k)
        cols = abi.dde_buffer_cols(n, k)
        rows0 = min(512, max_steps)

        @njit(error_model="numpy", inline="always")
        def forward(p, ph):
            z = np.empty((n_out, width))
            info = np.zeros(_INFO_SIZE)
            buf = np.empty((0, cols))
            ok = p.shape[0] == m and ph.shape[0] == q
            if ok:
                for j in range(m):
                    ok = ok and np.isfinite(p[j])
                for j in range(q):
                    ok = ok and np.isfinite(ph[j])
                for j in delay_idx:
                    ok = ok and p[j] > 0.0 and p[j] <= tau_limit
            if not ok:
                return _BAD_INPUT, z, buf, info
            work = np.empty(work_size)
            rows = rows0
            while True:
                buf = np.empty((rows, cols))
                status = run(p, ph, z, work, buf, info)
                if status == 0 or info[_BUF_FULL] == 0.0 or rows >= max_steps:
                    break
                rows = min(4 * rows, max_steps)
            return status, z, buf, info

        return forward

    # vector-Jacobian products by the adjoint ----------------------------------------------------
    #: backward RK4 steps per forward step of the adjoint VJP (``dde_adjoint_vjp``; error O(nsub**-4))
    vjp_nsub = 2

    def python_vjp(self, theta, phi, g):
        """``(g_theta (n_params,), g_phi (n_history_params,), status)``: ``sum_r g_r^T dy(t_r)/d(theta, phi)``.

        ``g`` (n_times, n_states): the upstream gradient w.r.t. the states at the
        output times. One states-only forward solve, then the continuous adjoint
        with point sources (:func:`odeinfer.solve.dde_adjoint.dde_vjp`, kernel
        ``dde_adjoint_vjp``, ``vjp_nsub`` RK4 steps per forward step). Never
        raises: bad inputs, a delay <= 0 (or beyond a data-driven history's
        window) or a failed solve give NaN-filled outputs and a nonzero status.
        """
        m, q = self.n_params, self.n_init
        status = Status.BAD_INPUT
        try:
            # writable copies, as in python_solve
            theta, phi, g = (np.array(a, dtype=np.float64) for a in (theta, phi, g))
        except (TypeError, ValueError):
            return np.full(m, np.nan), np.full(q, np.nan), status
        if theta.shape != (m,) or phi.shape != (q,) or g.shape != (self.n_times, self.n_states):
            pass
        elif not (np.all(np.isfinite(theta)) and np.all(np.isfinite(phi)) and np.all(np.isfinite(g))):
            status = Status.NON_FINITE
        elif self._delays_ok(theta):
            vjp = self._solvers.get("vjp")
            if vjp is None:
                from odeinfer.solve import Adjoint
                from odeinfer.solve.dde_adjoint import DDEVJP

                vjp = self._solvers["vjp"] = DDEVJP(self._solver(False), Adjoint(nsub=int(self.vjp_nsub)))
            grad, status = vjp(theta, phi, g)
            if status == 0:
                return grad[:m].copy(), grad[m:].copy(), 0
        return np.full(m, np.nan), np.full(q, np.nan), int(status)

    def numba_vjp(self):
        """An ``@njit`` function ``(theta, phi, g) -> (g_theta, g_phi)``; NaN outputs on failure.

        The numba counterpart of :meth:`python_vjp`: calls the model's generated
        ``dde_solve`` (states only, growing the dense-output store as
        :class:`~odeinfer.solve.DDESolver` does) and ``dde_adjoint_vjp`` kernels
        directly (no Python; adapters :func:`odeinfer.solve.abi.njit_dde_solve` and
        :func:`~odeinfer.solve.abi.njit_dde_adjoint_vjp`).
        """
        from numba import njit

        n, m, n_out, q = self.n_states, self.n_params, self.n_times, self.n_init
        forward = self._numba_forward(0)
        hkind, _, hb, hc = self.history.kernel_arrays(self.t0)
        adjoint = abi.njit_dde_adjoint_vjp(self.model.compile(), self.t0, np.array(self.t),
                                           hkind, hb, hc, int(self.vjp_nsub))

        @njit(error_model="numpy")
        def vjp(theta, phi, g):
            p = np.ascontiguousarray(theta)
            ph = np.ascontiguousarray(phi)
            gg = np.ascontiguousarray(g)
            g_theta = np.full(m, np.nan)
            g_phi = np.full(q, np.nan)
            ok = gg.shape[0] == n_out and gg.shape[1] == n
            if ok:
                for r in range(n_out):
                    for i in range(n):
                        ok = ok and np.isfinite(gg[r, i])
            if not ok:
                return g_theta, g_phi
            status, _, buf, info = forward(p, ph)
            if status != 0:
                return g_theta, g_phi
            grad = np.empty(m + q)
            status = adjoint(p, ph, gg, buf, np.int64(info[_N_STORED]), grad)
            if status == 0:
                for j in range(m):
                    g_theta[j] = grad[j]
                for j in range(q):
                    g_phi[j] = grad[m + j]
            return g_theta, g_phi

        return vjp


def dde_op(model, t, history, t0=None, **options):
    """The :class:`~odeinfer.bayes.op.ODEOp` of a DDE model: ``(theta, phi) -> (y, sens)``.

    Options as for :class:`DDEProblem`.

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt, odeinfer as oi
    >>> entry = oi.zoo.get("logistic_delay")
    >>> op = oi.bayes.dde_op(entry.model, entry.t, entry.history)
    >>> theta, phi = pt.dvector("theta"), pt.dvector("phi")
    >>> y, sens = op(theta, phi)
    >>> y.eval({theta: entry.params_array(), phi: entry.history_params_array()}).shape
    (101, 1)
    """
    from odeinfer.bayes.op import ODEOp

    return ODEOp(DDEProblem(model, t, history, t0, **options))
