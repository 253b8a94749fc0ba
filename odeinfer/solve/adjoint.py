"""Vector-Jacobian products of ODE solutions by the adjoint: :class:`VJP`, what
``oi.bind(problem, solver=..., gradient=oi.Adjoint())`` returns.

``sum_i g_i . x(t_i)`` differentiated with respect to the parameters and the initial
state costs one forward solve of the states and one backward sweep of ``n + m``
adjoint components, whatever the number of parameters; forward sensitivities integrate
``n (1 + m + n)`` components. For models with many parameters, and for the gradient of a log
density (one ``g`` per evaluation), this is the cheaper path. With ``oi.Dopri5`` the continuous
adjoint is integrated backward on the forward steps (kernel ``dopri5_adjoint_vjp``,
``odeinfer/solve/kernels/adjoint.py``); with ``oi.Rodas`` (stiff models) the sweep is the discrete
adjoint of the Rosenbrock steps, the exact gradient of the computed solution (``rodas_adjoint_vjp``,
``odeinfer/solve/kernels/rodas.py``).
"""

from __future__ import annotations

import numpy as np

from odeinfer.solve import abi
from odeinfer.solve.abi import INFO_SIZE, Status
from odeinfer.solve.shared import TieredKernel

__all__ = ["VJP"]

_FIRST_ROWS = 1024  # the step record's first size (rows)


class VJP:
    """The adjoint vector-Jacobian product bound to a model, output times and options.

    Made by ``oi.bind(problem, solver=oi.Dopri5(...), gradient=oi.Adjoint(nsub=...))`` or, for a stiff model,
    ``oi.bind(problem, solver=oi.Rodas(...), gradient=oi.Adjoint())`` (``nsub`` has no use there).
    ``grad, status = vjp(params, x0, g)`` with float64 C-contiguous ``params`` (n_params,), ``x0`` (n_states,) and ``g`` (n_times,
    n_states) (not converted or validated on this fast path; wrong sizes give
    ``status == Status.BAD_INPUT``). ``grad`` (n_params + n_states,) =
    ``[sum_i g_i^T dx(t_i)/dp, sum_i g_i^T dx(t_i)/dx0]`` and ``y`` (the states at
    ``t``, attribute) are buffers that the **next call overwrites**.

    Attributes
    ----------
    compiled : CompiledModel
    t : ndarray (n_times,), read-only
    t0, rtol, atol : float
    max_steps, nsub : int
    y : ndarray (n_times, n_states)
        States at ``t`` from the last call's forward solve.
    info : ndarray (6,)
        The forward solve's t_reached, n_steps, n_rejected, n_rhs, h_next.
    kernel : numba dispatcher
        ``module.dopri5_adjoint_vjp``, for use from numba code (signature in
        :data:`odeinfer.solve.abi.SIGNATURES`).
    tier : str
        Which kernel answers (see the property).
    """

    __slots__ = ("compiled", "solver", "gradient", "t", "t0", "rtol", "atol", "max_steps", "nsub", "kernel", "y",
                 "grad", "rec", "work", "info", "_run", "_tiers", "_split")

    def __init__(self, compiled, t, t0, solver, gradient):
        module = compiled.module
        n, m = compiled.n_states, compiled.n_params
        self.compiled, self.t, self.t0 = compiled, t, t0
        self.solver, self.gradient = solver, gradient
        self.rtol, self.atol, self.max_steps = solver.rtol, solver.atol, solver.max_steps
        self.nsub = 1 if gradient.nsub is None else gradient.nsub
        method = solver.method
        self.kernel = getattr(module, f"{method}_adjoint_vjp")
        self.y = np.empty((t.size, n))
        self.grad = np.empty(n + m)
        # the step record grows with the steps taken (up to max_steps rows): a model of 100 states with the default
        # max_steps would hold 100 MB per bound adjoint from the start
        self.rec = np.empty((min(self.max_steps, _FIRST_ROWS), abi.adjoint_record_cols(n, method)))
        self.work = np.empty(abi.adjoint_work_size(n, m, method))
        self.info = np.zeros(INFO_SIZE)
        self._tiers = TieredKernel(compiled, self.kernel)  # the shared kernel while the model's compiles
        self._split = None
        if method == "rodas":  # the forward pass and the sweep, also one at a time (record, sweep)
            self._split = (TieredKernel(compiled, module.rodas_solve_record),
                           TieredKernel(compiled, module.rodas_adjoint_sweep))
        self._bind()

    def _bind(self):
        rows = self.rec.shape[0]  # a solve that needs more steps stops with MAX_STEPS: the record grows
        self._run = abi.adjoint_vjp_call(self._tiers, self.t0, self.t, self.rtol, self.atol, rows, self.nsub,
                                         self.y, self.rec, self.grad, self.work, self.info)

    def _grows(self, status):
        """After a call: whether it stopped for the record's rows alone (then the record has grown)."""
        if status != Status.MAX_STEPS or self.rec.shape[0] >= self.max_steps:
            return False
        self.rec = np.empty((min(self.max_steps, 8 * self.rec.shape[0]), self.rec.shape[1]))
        self._bind()
        return True

    def __call__(self, params, x0, g):
        """Gradient of ``sum_i g[i] . x(t_i)``: returns ``(grad, status)``."""
        params, x0, g = abi.kernel_array(params), abi.kernel_array(x0), abi.kernel_array(g)
        status = self._run(params, x0, g)
        while self._grows(status):
            status = self._run(params, x0, g)
        return self.grad, status

    def record(self, params, x0):
        """The forward pass alone (Rodas): the states at ``t`` into :attr:`y` and the steps into the record;
        returns the status. :meth:`sweep` then gives the gradient for any ``g`` at the same ``params``."""
        params, x0 = abi.kernel_array(params), abi.kernel_array(x0)
        while True:
            status = self._split[0](self.t0, self.t, x0, params, self.rtol, self.atol, self.rec.shape[0], self.y,
                                    self.rec, self.work, self.info)
            if not self._grows(status):
                return status

    def sweep(self, params, g):
        """The backward sweep (Rodas) over the steps of the last :meth:`record` (the same ``params``): ``(grad,
        status)`` as a call."""
        return self.grad, self._split[1](self.t, abi.kernel_array(params), abi.kernel_array(g), self.rec, self.grad,
                                         self.info)

    @property
    def tier(self):
        """Which kernel answers: ``"model"`` (:attr:`kernel`), ``"shared"`` (``ptr_dopri5_adjoint_vjp``
        while :attr:`kernel` compiles; same results) or ``"pending"`` (before the first call)."""
        return self._tiers.tier

    def __reduce__(self):
        from odeinfer.solve.api import rebuild

        return (rebuild, (VJP, self.compiled.model, np.array(self.t), self.t0, self.solver, self.gradient))

    def __repr__(self):
        return (f"VJP(model={self.compiled.model.name!r}, n_times={self.t.size}, rtol={self.rtol:g}, "
                f"atol={self.atol:g}, nsub={self.nsub})")
