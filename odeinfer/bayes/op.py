"""A PyTensor Op around odeinfer's numba solvers: :class:`ODEOp` and its forward problem.

The Op maps ``(theta, x0)`` to the states at the observation times **and** their
forward sensitivities, in one solve. The sensitivities are a second output that
only the gradient uses: ``L_op`` builds the vector-Jacobian product
``g_theta = sum_{i,s} g_y[i, s] * sens[i, s, :]`` as an ordinary tensor
contraction, so a log density and its gradient cost one solve (PyTensor merges
the forward node of ``logp`` and ``dlogp``). A graph that never uses the
sensitivities (a plain ``logp``, posterior predictive draws) is rewritten to the
cheaper states-only solve (:func:`_drop_unused_sensitivities`).

With ``gradient=oi.Adjoint()`` the Op solves the states only and its ``L_op``
applies :class:`VJPOp`, which gets the vector-Jacobian product from one
states-only forward solve and one backward adjoint solve of ``n + m``
components (for models with many parameters, where the ``n (1 + m + n)``
sensitivity system is the cost).

Failure policy (DESIGN.md, house style 4): a failed solve (blow-up, stiffness,
too many steps) gives NaN outputs, so the sampler sees a NaN log density and
rejects the point (a divergence in NUTS); nothing raises, nothing hangs
(``max_steps`` bounds the work of one solve).

The forward map is an object with a small interface (:class:`ODEProblem`):
``n_params``, ``n_states``, ``t``, ``python_solve(theta, x0, sens)`` and
``numba_solve(sens)``, plus ``n_init`` (length of the second input),
``init_name`` and ``at_times(t)``. A delay-differential problem
(:class:`~odeinfer.bayes.dde_problem.DDEProblem`) plugs in the same way: its
``params`` include the delays and its second input holds the history
parameters instead of the initial states.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytensor.tensor as pt
from numba import njit
from pytensor.gradient import DisconnectedType
from pytensor.graph.basic import Apply
from pytensor.graph.null_type import NullType
from pytensor.graph.op import Op

from odeinfer.errors import InputError
from odeinfer.solve.abi import INFO_SIZE, Status

_MAX_STEPS, _NON_FINITE, _INFO_SIZE = int(Status.MAX_STEPS), int(Status.NON_FINITE), INFO_SIZE
__all__ = ["ForwardProblem", "ODEProblem", "ODEOp", "VJPOp", "ode_op"]


@njit(cache=True, error_model="numpy")
def split_augmented(z, n, k, status):
    """``(y (n_out, n), S (n_out, n, k))`` from the solvers' augmented output rows ``z``
    (states, then ``n`` blocks of ``k`` sensitivities); NaN-filled when ``status != 0``."""
    n_out = z.shape[0]
    y = np.empty((n_out, n))
    s = np.empty((n_out, n, k))
    if status != 0:
        y[:] = np.nan
        s[:] = np.nan
        return y, s
    for i in range(n_out):
        for a in range(n):
            y[i, a] = z[i, a]
            for b in range(k):
                s[i, a, b] = z[i, n + a * k + b]
    return y, s


class ForwardProblem:
    """What :class:`ODEProblem` and :class:`~odeinfer.bayes.dde_problem.DDEProblem` share: sizes,
    identity by ``key`` (equal problems compare and hash equal, so PyTensor merges their Op
    applications) and pickling without compiled solvers. Subclasses set ``model``, ``t``,
    ``_solvers`` and define ``n_init``, ``init_names`` and ``key``."""

    @property
    def n_params(self) -> int:
        return self.model.n_params

    @property
    def n_states(self) -> int:
        return self.model.n_states

    @property
    def n_times(self) -> int:
        return int(self.t.size)

    def check_adjoint(self):
        """InputError unless the adjoint gradient is available for this problem."""

    def __eq__(self, other):
        return type(other) is type(self) and other.key == self.key

    def __hash__(self):
        return hash(self.key)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_solvers"] = {}
        return state


class ODEProblem(ForwardProblem):
    """The forward map of an ODE model at fixed output times, for :class:`ODEOp`.

    Parameters
    ----------
    model : Model or CompiledModel
    t : array-like (n_times,)
        Output (observation) times, sorted, ``>= t0``.
    t0 : float, optional
        Time of the initial state; default ``t[0]``.
    solver : Dopri5 or Rodas, optional
        Default ``oi.Dopri5(max_steps=20_000)`` (the ``sample`` role's: a bounded step count
        makes a bad point in the sampler fail fast, as NaN).
    sens_error_control : bool, default False
        Control the step size by the sensitivities' error as well. Off by
        default: the sensitivities are then integrated by the same Runge-Kutta
        steps as the states, which makes them the exact derivative of the
        computed solution (internal differentiation), so the gradient is
        consistent with the log density the sampler sees, and solves take
        fewer steps.

    Notes
    -----
    Equal problems (same model equations, times, options) compare and hash
    equal, so PyTensor can merge identical Op applications. The problem pickles
    without its compiled kernels (worker processes rebuild them from the disk cache).
    """

    kind = "ode"
    #: name of the build_model deterministic holding the Op's second input
    init_name = "x0"

    def __init__(self, model, t, t0=None, *, solver=None, sens_error_control=False):
        from odeinfer.solve import Problem
        from odeinfer.solve.config import as_solver
        from odeinfer.solve.problem import model_of

        problem = Problem(model, t, t0=t0)  # validates the model and times once
        self.solver = as_solver(solver, delays=False, role="sample")
        self.model = model_of(problem.model)
        self.t = problem.t
        self.t0 = float(problem.t0)
        self.method, self.rtol, self.atol = self.solver.method, self.solver.rtol, self.solver.atol
        self.max_steps = self.solver.max_steps
        self.sens_error_control = bool(sens_error_control)
        self._solvers = {}

    # sizes and identity ---------------------------------------------------------------------
    @property
    def n_init(self) -> int:
        """Length of the Op's second input: the initial states."""
        return self.model.n_states

    @property
    def init_names(self) -> tuple:
        return tuple(f"x0[{s}]" for s in self.model.states)

    @property
    def key(self) -> str:
        """Hash of the equations, times and solver options (identity of the forward map)."""
        text = repr((self.kind, self.model.fingerprint, self.t.tobytes().hex(), self.t0, self.solver,
                     self.sens_error_control))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def __repr__(self):
        return f"ODEProblem({self.model.name!r}, n_times={self.n_times}, t0={self.t0:g}, solver={self.solver!r})"

    def at_times(self, t):
        """The same problem at other output times ``t`` (>= t0)."""
        return ODEProblem(self.model, t, self.t0, solver=self.solver, sens_error_control=self.sens_error_control)

    # solving ----------------------------------------------------------------------------------
    def _solver(self, sens):
        solver = self._solvers.get(sens)
        if solver is None:
            from odeinfer.solve import Forward, Problem, bind

            gradient = Forward(error_control=self.sens_error_control) if sens else None
            solver = self._solvers[sens] = bind(Problem(self.model, self.t, t0=self.t0), solver=self.solver,
                                                gradient=gradient)
        return solver

    def python_solve(self, theta, x0, sens=True):
        """``(y, S, status)`` as new arrays; NaN everywhere when the solve fails.

        ``y`` has shape (n_times, n_states), ``S`` (n_times, n_states, n_params +
        n_states) (``None`` when ``sens`` is False).
        """
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        x0 = np.ascontiguousarray(x0, dtype=np.float64)
        solver = self._solver(bool(sens))
        if theta.shape != (self.n_params,) or x0.shape != (self.n_states,):
            status = Status.BAD_INPUT
        elif not (np.all(np.isfinite(theta)) and np.all(np.isfinite(x0))):
            status = Status.NON_FINITE
        else:
            _, _, status = solver(theta, x0)
        y = np.array(solver._y)
        s = None if not sens else np.array(solver._sens)
        if status != 0:
            y.fill(np.nan)
            if s is not None:
                s.fill(np.nan)
        return y, s, int(status)

    def numba_solve(self, sens=True):
        """An ``@njit`` function ``(theta, x0) -> (y, S)`` with NaN outputs on failure.

        It calls the model's generated dopri5/rodas kernel directly (no Python; adapter
        :func:`odeinfer.solve.abi.njit_ode_solve`); with ``sens=False``, ``S`` has shape
        (n_times, n_states, 0).
        """
        from odeinfer.solve import abi

        n, m, n_out = self.n_states, self.n_params, self.n_times
        k = n + m if sens else 0
        work_size = abi.ode_work_size(self.method, n, m, k)
        run = abi.njit_ode_solve(self.model.compile(), self.method, bool(sens), self.t0, np.array(self.t), self.rtol,
                                 self.atol, self.max_steps, self.sens_error_control)
        width = n * (1 + k)

        @njit(error_model="numpy")
        def solve(theta, x0):
            z = np.empty((n_out, width))
            work = np.empty(work_size)
            info = np.zeros(_INFO_SIZE)
            p = np.ascontiguousarray(theta)
            y0 = np.ascontiguousarray(x0)
            ok = p.shape[0] == m and y0.shape[0] == n
            if ok:
                for j in range(m):
                    ok = ok and np.isfinite(p[j])
                for j in range(n):
                    ok = ok and np.isfinite(y0[j])
            status = run(p, y0, z, work, info) if ok else _NON_FINITE
            return split_augmented(z, n, k, status)

        return solve

    # adjoint gradient -------------------------------------------------------------------------
    def check_adjoint(self):
        """InputError unless the adjoint gradient is available (``solver=oi.Dopri5(...)``)."""
        if self.method != "dopri5":
            raise InputError(f"gradient: oi.Adjoint() runs on the Dormand-Prince steps, but this problem uses "
                             f"solver={self.solver!r}; use solver=oi.Dopri5(...) or gradient=oi.Forward()")

    def _vjp(self):
        vjp = self._solvers.get("vjp")
        if vjp is None:
            from odeinfer.solve import Adjoint, Problem, bind

            vjp = self._solvers["vjp"] = bind(Problem(self.model, self.t, t0=self.t0), solver=self.solver,
                                              gradient=Adjoint())
        return vjp

    def python_vjp(self, theta, x0, g):
        """``(g_theta, g_x0, status)``: ``sum_i g[i]^T d y(t_i) / d(theta, x0)`` by the adjoint, new
        arrays; NaN when the solve fails or an input is not finite (never raises).

        ``g`` has shape (n_times, n_states); ``g_theta`` (n_params,), ``g_x0`` (n_states,).
        """
        self.check_adjoint()
        m, n = self.n_params, self.n_states
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        x0 = np.ascontiguousarray(x0, dtype=np.float64)
        g = np.ascontiguousarray(g, dtype=np.float64)
        grad = np.full(m + n, np.nan)
        if theta.shape != (m,) or x0.shape != (n,) or g.shape != (self.n_times, n):
            status = Status.BAD_INPUT
        elif not (np.all(np.isfinite(theta)) and np.all(np.isfinite(x0)) and np.all(np.isfinite(g))):
            status = Status.NON_FINITE
        else:
            out, status = self._vjp()(theta, x0, g)
            if status == 0:
                grad = np.array(out)
        return grad[:m], grad[m:], int(status)

    def numba_vjp(self):
        """An ``@njit`` function ``(theta, x0, g) -> (g_theta, g_x0)``, NaN on failure (the adjoint
        kernel ``dopri5_adjoint_vjp`` called directly, no Python; adapter
        :func:`odeinfer.solve.abi.njit_adjoint_vjp`)."""
        from odeinfer.solve import abi

        self.check_adjoint()
        n, m, n_out = self.n_states, self.n_params, self.n_times
        work_size = abi.adjoint_work_size(n, m)
        max_steps, cols = self.max_steps, abi.adjoint_record_cols(n)
        run = abi.njit_adjoint_vjp(self.model.compile(), self.t0, np.array(self.t), self.rtol, self.atol, 1)

        @njit(error_model="numpy")
        def vjp(theta, x0, g):
            p = np.ascontiguousarray(theta)
            y0 = np.ascontiguousarray(x0)
            gc = np.ascontiguousarray(g)
            grad = np.empty(m + n)
            ok = p.shape[0] == m and y0.shape[0] == n and gc.shape[0] == n_out and gc.shape[1] == n
            if ok:
                ok = np.all(np.isfinite(p)) and np.all(np.isfinite(y0)) and np.all(np.isfinite(gc))
            status = _NON_FINITE
            if ok:
                y = np.empty((n_out, n))
                work = np.empty(work_size)
                info = np.zeros(_INFO_SIZE)
                # the step record needs a row per step: start small, and only when the solve runs out
                # of steps rerun it with 4x the rows, up to max_steps (as the DDE dense store grows)
                rows = min(512, max_steps)
                while True:
                    rec = np.empty((rows, cols))
                    status = run(p, y0, gc, rows, y, rec, grad, work, info)
                    if status != _MAX_STEPS or rows >= max_steps:
                        break
                    rows = min(4 * rows, max_steps)
            if status != 0:
                grad[:] = np.nan
            return grad[:m].copy(), grad[m:].copy()

        return vjp


class ODEOp(Op):
    """``(theta, x0) -> (y, sens)``: states at the observation times and their sensitivities.

    Parameters
    ----------
    problem : ODEProblem or DDEProblem (or another forward problem with the same interface)
    sensitivities : bool, default True
        Compute ``sens`` (needed by the gradient). The states-only variant is
        put in automatically where the sensitivities are not used.
    gradient : Forward or Adjoint, default Forward()
        How ``L_op`` computes the vector-Jacobian product: contracted with the
        forward sensitivities (the log density and its gradient share one
        solve), or by the continuous adjoint (:class:`VJPOp`: a states-only
        forward solve plus one backward solve of ``n + m`` components, whatever
        the number of parameters; the Op's own solve is then states-only,
        ``sensitivities`` is ignored). For models with many parameters.

    Inputs: ``theta`` float64 (n_params,), ``x0`` float64 (n_init,): the
    initial states (n_states,) of an ODE, the history parameters of a DDE.
    Outputs: ``y`` float64 (n_times, n_states); ``sens`` float64 (n_times,
    n_states, n_params + n_init) (columns: parameters then the second input;
    width 0 when ``sensitivities=False``). NaN outputs mean the solve failed.
    """

    __props__ = ("problem", "sensitivities", "gradient")

    def __init__(self, problem, sensitivities=True, gradient=None):
        from odeinfer.solve.config import Adjoint, Forward, as_gradient

        gradient = Forward() if gradient is None else gradient
        if not isinstance(gradient, (Forward, Adjoint)):
            raise InputError(f"gradient: expected oi.Forward() or oi.Adjoint(), got {gradient!r}")
        as_gradient(gradient)  # refuses Forward(directions=...): the Op's outputs are the full sensitivities
        if isinstance(gradient, Adjoint):
            problem.check_adjoint()
            sensitivities = False
        self.problem = problem
        self.sensitivities = bool(sensitivities)
        self.gradient = gradient
        super().__init__()

    def make_node(self, theta, x0):
        p = self.problem
        theta, x0 = pt.cast(pt.as_tensor_variable(theta), "float64"), pt.cast(pt.as_tensor_variable(x0), "float64")
        if theta.ndim != 1 or x0.ndim != 1:
            raise InputError(f"ODEOp: theta and x0 must be vectors, got ndim {theta.ndim} and {x0.ndim}")
        for name, var, size in (("theta", theta, p.n_params), ("x0", x0, p.n_init)):
            if var.type.shape[0] is not None and var.type.shape[0] != size:
                raise InputError(f"ODEOp: {name} must have length {size}, got {var.type.shape[0]}")
        k = p.n_params + p.n_init if self.sensitivities else 0
        y = pt.tensor(dtype="float64", shape=(p.n_times, p.n_states))
        s = pt.tensor(dtype="float64", shape=(p.n_times, p.n_states, k))
        return Apply(self, [theta, x0], [y, s])

    def perform(self, node, inputs, output_storage):
        theta, x0 = inputs
        y, s, _ = self.problem.python_solve(theta, x0, sens=self.sensitivities)
        if s is None:
            s = np.empty((self.problem.n_times, self.problem.n_states, 0))
        output_storage[0][0] = y
        output_storage[1][0] = s

    def infer_shape(self, fgraph, node, input_shapes):
        p = self.problem
        k = p.n_params + p.n_init if self.sensitivities else 0
        return [(p.n_times, p.n_states), (p.n_times, p.n_states, k)]

    def L_op(self, inputs, outputs, output_grads):
        theta, x0 = inputs
        m = self.problem.n_params
        g_y, g_s = output_grads
        if not isinstance(g_s.type, DisconnectedType):
            return [NullType("the sensitivities output of ODEOp has no gradient")(),
                    NullType("the sensitivities output of ODEOp has no gradient")()]
        if isinstance(g_y.type, DisconnectedType):
            return [pt.zeros_like(theta), pt.zeros_like(x0)]
        if self.adjoint:
            return VJPOp(self.problem)(theta, x0, g_y, return_list=True)
        if not self.sensitivities:
            full = ODEOp(self.problem, True)(theta, x0)
            sens = full[1]
        else:
            sens = outputs[1]
        g = pt.tensordot(g_y, sens, axes=[[0, 1], [0, 1]])
        return [g[:m], g[m:]]

    def connection_pattern(self, node):
        return [[True, True], [True, True]]

    @property
    def adjoint(self) -> bool:
        """Whether ``L_op`` uses the continuous adjoint."""
        from odeinfer.solve.config import Adjoint

        return isinstance(self.gradient, Adjoint)

    def __str__(self):
        if self.adjoint:
            return f"ODEOp({self.problem.model.name}, adjoint)"
        return f"ODEOp({self.problem.model.name}, sens={self.sensitivities})"


class VJPOp(Op):
    """``(theta, x0, g) -> (g_theta, g_x0)``: the adjoint vector-Jacobian product of :class:`ODEOp`.

    ``g`` float64 (n_times, n_states) is the gradient with respect to the Op's
    states output; the outputs are ``sum_i g[i]^T d y(t_i) / d theta`` (n_params,)
    and ``... / d x0`` (n_init,), computed by ``problem.python_vjp`` (ODEs:
    :mod:`odeinfer.solve.adjoint`; DDEs: the DDE-Find adjoint with the corrected
    delay term). NaN outputs when the solve fails. Made by ``ODEOp(...,
    gradient=oi.Adjoint()).L_op``; it has no gradient itself.
    """

    __props__ = ("problem",)

    def __init__(self, problem):
        self.problem = problem
        super().__init__()

    def make_node(self, theta, x0, g):
        theta, x0 = pt.cast(pt.as_tensor_variable(theta), "float64"), pt.cast(pt.as_tensor_variable(x0), "float64")
        g = pt.cast(pt.as_tensor_variable(g), "float64")
        p = self.problem
        outputs = [pt.tensor(dtype="float64", shape=(p.n_params,)), pt.tensor(dtype="float64", shape=(p.n_init,))]
        return Apply(self, [theta, x0, g], outputs)

    def perform(self, node, inputs, output_storage):
        g_theta, g_init, _ = self.problem.python_vjp(*inputs)
        output_storage[0][0] = g_theta
        output_storage[1][0] = g_init

    def infer_shape(self, fgraph, node, input_shapes):
        return [(self.problem.n_params,), (self.problem.n_init,)]

    def L_op(self, inputs, outputs, output_grads):
        return [NullType("the adjoint VJP of ODEOp has no second derivative")() for _ in inputs]

    def __str__(self):
        return f"VJPOp({self.problem.model.name})"


def _register_rewrites():
    """Register the two graph rewrites of :class:`ODEOp` with PyTensor.

    * ``merge``: a states-only node and a node with sensitivities on the same
      inputs (the first made by a log density, the second by its gradient) become
      one solve with sensitivities (canonicalize and specialize).
    * ``drop``: a node whose sensitivities nobody uses becomes the cheaper
      states-only solve. Only at compile time (specialize): PyMC canonicalizes a
      log density before taking its gradient, and dropping them there would make
      the gradient solve a second time.
    """
    from pytensor.graph.rewriting.basic import node_rewriter
    from pytensor.tensor.rewriting.basic import register_canonicalize, register_specialize

    @node_rewriter([ODEOp])
    def odeinfer_merge_ode_solves(fgraph, node):
        op = node.op
        if op.sensitivities:
            return None
        for client, _ in fgraph.clients.get(node.inputs[0], ()):
            if (client is not node and isinstance(client.op, ODEOp) and client.op.sensitivities
                    and client.op.problem == op.problem and client.inputs == node.inputs):
                return {node.outputs[0]: client.outputs[0]}
        return None

    @node_rewriter([ODEOp])
    def odeinfer_drop_unused_sensitivities(fgraph, node):
        op = node.op
        if not op.sensitivities or fgraph.clients.get(node.outputs[1]):
            return None
        y_new, _ = ODEOp(op.problem, False, op.gradient)(*node.inputs, return_list=True)
        return {node.outputs[0]: y_new}

    register_canonicalize(odeinfer_merge_ode_solves, name="odeinfer_merge_ode_solves")
    register_specialize(odeinfer_merge_ode_solves, name="odeinfer_merge_ode_solves_spec")
    register_specialize(odeinfer_drop_unused_sensitivities, name="odeinfer_drop_unused_sensitivities")


_register_rewrites()

# registers the numba implementation of ODEOp
from odeinfer.bayes import numba_op  # noqa: E402, F401


def ode_op(model, t, t0=None, *, gradient=None, **options):
    """The :class:`ODEOp` for ``model`` at output times ``t`` (``gradient`` as for :class:`ODEOp`,
    other options as for :class:`ODEProblem`).

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt, odeinfer as oi
    >>> entry = oi.zoo.get("linear_decay")
    >>> op = oi.bayes.ode_op(entry.model, entry.t)
    >>> theta, x0 = pt.dvector("theta"), pt.dvector("x0")
    >>> y, sens = op(theta, x0)
    >>> y.eval({theta: [0.5, 0.2], x0: [1.0, 0.0]}).shape
    (20, 2)
    """
    return ODEOp(ODEProblem(model, t, t0, **options), gradient=gradient)
