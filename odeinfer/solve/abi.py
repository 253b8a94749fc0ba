"""The solver kernels' calling convention (ABI), on the Python side: the one module that knows it.

* status codes (:class:`Status`, with messages) and the layout of the ``info`` vector every
  solver kernel fills (:class:`Info`, :data:`INFO_SIZE`, :data:`DDE_INFO_SIZE`);
* each kernel's positional signature (:data:`SIGNATURES`; the shared module's ``ptr_<name>``
  takes the model handle first, see ``odeinfer/solve/kernels/pointer.py``) and which shared
  kernels need the full model handle (:func:`needs_full_handle`);
* the length of each kernel's ``work`` buffer (``*_work_size``: the kernels' own size rules,
  run from the model-independent module, so they compile once per machine);
* the adapters through which every caller runs a kernel: closures over preallocated buffers
  for Python callers (``*_call``), :func:`call` (arguments by name) for the estimators' kernels,
  and ``@njit`` closures for the numba Ops of :mod:`odeinfer.bayes` (``njit_*``). This module is the only place where a kernel is called
  positionally; its callers pass named values;
* the argument types: float64, int64 and bool scalars; C-contiguous float64 arrays, the output times
  read-only (as :class:`~odeinfer.Problem` makes them) and every other array writable (history
  values, target breaks and coefficients as writable copies made once). numba compiles a kernel
  once per tuple of argument types and a read-only array is another type, so a caller that departs
  from this compiles the kernel a second time (``tests/test_kernel_signatures.py``).

The kernel files (``odeinfer/solve/kernels``: ``common.py``'s ``ST_*``, ``INFO_*``; ``dde.py``'s
``DDE_INFO_*``) cannot import Python modules, so the values are written there too;
``tests/test_kernel_abi.py`` checks every generated module (codes, info layout, argument names)
and the shared module against this one. Python code reads ``info`` and compares statuses through
these names only.
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["Status", "Info", "INFO_SIZE", "DDE_INFO_SIZE", "SIGNATURES", "status_message", "needs_full_handle",
           "solve_kernel_name", "ode_work_size", "adjoint_work_size", "dde_work_size", "dde_adjoint_work_size",
           "adjoint_record_cols", "dde_buffer_cols", "call", "ode_solve_call", "fixed_step_call", "adjoint_vjp_call",
           "dde_solve_call", "dde_adjoint_vjp_call", "dde_adjoint_gradient_call", "njit_ode_solve", "njit_adjoint_vjp",
           "njit_dde_solve", "njit_dde_adjoint_vjp"]


class Status(enum.IntEnum):
    """Outcome of a solve. ``SUCCESS`` is 0; every other value is a failure."""

    SUCCESS = 0
    MAX_STEPS = 1
    STEP_TOO_SMALL = 2
    STIFF = 3
    NON_FINITE = 4
    SINGULAR = 5
    BAD_INPUT = 6


class Info(enum.IntEnum):
    """Entries of the float64 ``info`` vector a solver kernel fills."""

    T_REACHED = 0  # time of the last accepted step (t0 if none)
    N_STEPS = 1  # attempted steps (accepted + rejected)
    N_REJECTED = 2  # rejected steps (error test or non-finite stages)
    N_RHS = 3  # evaluations of the (augmented) right-hand side
    H_NEXT = 4  # step size proposed for the next step
    N_LU = 5  # LU decompositions (Rosenbrock only)
    N_STORED = 6  # delay solver: rows of the dense-output store used
    BUF_FULL = 7  # delay solver: 1.0 when the dense-output store ran out


#: Length of ``info`` for the ODE kernels and for the delay solver.
INFO_SIZE, DDE_INFO_SIZE = 6, 8


_MESSAGES = {
    Status.SUCCESS: "the solver reached the last output time",
    Status.MAX_STEPS: (
        "the solver took max_steps={max_steps} steps and stopped at t={t_reached:.6g}; "
        "raise max_steps, loosen rtol/atol, or, if the problem is stiff, use solver=oi.Rodas() (or "
        "solver=oi.Auto(), which switches to it when Dormand-Prince finds the problem stiff)"
    ),
    Status.STEP_TOO_SMALL: (
        "the step size fell below the rounding unit of t at t={t_reached:.6g}: the solution "
        "probably blows up in finite time near there (check the model and the parameter values)"
    ),
    Status.STIFF: (
        "the problem became stiff at t={t_reached:.6g} (Hairer's test in dopri5 fired 15 "
        "times); use solver=oi.Rodas() (or solver=oi.Auto(), which switches to it when Dormand-Prince "
        "finds the problem stiff)"
    ),
    Status.NON_FINITE: (
        "the solution or its derivative became inf or NaN at t={t_reached:.6g} and shorter "
        "steps did not help: check the model, the parameters and the initial state for "
        "overflow or invalid operations (log of a negative number, division by zero)"
    ),
    Status.SINGULAR: (
        "the Rosenbrock matrix I/(h*gamma) - df/dy stayed singular at t={t_reached:.6g} "
        "after five step halvings: check df/dy for inf/NaN"
    ),
    Status.BAD_INPUT: (
        "the solver kernel rejected its arguments (sizes, or times not sorted, finite "
        "and >= t0)"
    ),
}


def status_message(status: int, *, t_reached: float = float("nan"), max_steps: int = 0) -> str:
    """Human-readable explanation of a status code, with the advice to fix it.

    Parameters
    ----------
    status : int
        A code returned by a solver kernel.
    t_reached : float, optional
        Time of the last accepted step.
    max_steps : int, optional
        The step limit in force (quoted for ``MAX_STEPS``).
    """
    try:
        code = Status(int(status))
    except ValueError:
        return f"unknown solver status {status!r}"
    return _MESSAGES[code].format(t_reached=t_reached, max_steps=max_steps)


# ---- signatures -------------------------------------------------------------------------------------

_SOLVE = ("t0", "t_eval", "y0", "p", "rtol", "atol", "first_step", "max_steps", "z_out", "work", "info")
_SOLVE_SENS = _SOLVE[:4] + ("sens_err",) + _SOLVE[4:]
_SOLVE_DIR = _SOLVE[:4] + ("pdir", "s0", "sens_err") + _SOLVE[4:]

#: Each kernel's arguments, in order (documented in its kernel file). The model's generated module
#: defines ``<name>``; the shared module ``ptr_<name>(mh, ...)``.
SIGNATURES: dict[str, tuple[str, ...]] = {
    "dopri5_solve": _SOLVE,
    "dopri5_solve_sens": _SOLVE_SENS,
    "dopri5_solve_dir": _SOLVE_DIR,
    "dopri5_fixed": ("t0", "t_eval", "y0", "p", "sens", "h", "z_out", "work", "info"),
    "rodas_solve": _SOLVE,
    "rodas_solve_sens": _SOLVE_SENS,
    "rodas_solve_dir": _SOLVE_DIR,
    "dopri5_adjoint_vjp": ("t0", "t_eval", "y0", "p", "g", "rtol", "atol", "max_steps", "nsub", "z_out", "rec",
                           "grad", "work", "info"),
    "rodas_adjoint_vjp": ("t0", "t_eval", "y0", "p", "g", "rtol", "atol", "max_steps", "nsub", "z_out", "rec",
                          "grad", "work", "info"),
    "rodas_solve_record": ("t0", "t_eval", "y0", "p", "rtol", "atol", "max_steps", "z_out", "rec", "work", "info"),
    "rodas_adjoint_sweep": ("t_eval", "p", "g", "rec", "grad", "info"),
    "dde_solve": ("t0", "t_eval", "p", "hkind", "phi", "hb", "hc", "k", "sens_err", "rtol", "atol", "first_step",
                  "max_steps", "z_out", "work", "buf", "info"),
    "dde_adjoint_vjp": ("t0", "t_obs", "g", "p", "hkind", "phi", "hb", "hc", "buf", "nbuf", "nsub", "grad"),
    "dde_adjoint_gradient": ("t0", "t_end", "p", "hkind", "phi", "hb", "hc", "buf", "nbuf", "tb", "tc", "wl", "nsub",
                             "paper", "grad", "anodes", "adnodes", "work"),
    "coll_constraints": ("scheme", "t", "X", "p", "pidx", "F", "JY", "JP", "c", "jdata", "want_jac"),
    "gm_residuals": ("t", "X", "D", "p", "E"),
    "gm_normal_eq": ("t", "X", "D", "p", "w", "want_meat", "jtj", "jte", "meat", "acc"),
    "gm_descent": ("t", "X", "D", "base", "free", "w", "theta", "max_iter", "xtol", "gtol", "max_backtrack", "hist",
                   "info"),
    "nc_obs_accumulate": ("t", "X", "D", "p", "free", "a", "c", "Y", "carry", "Q"),
}


def needs_full_handle(kernel: str) -> bool:
    """Whether the shared ``ptr_<kernel>`` needs the model's time and second-order derivative callbacks
    (the full ODE model handle of :func:`odeinfer.solve.shared.model_handle`): Rodas's kernels and
    ``nc_obs_accumulate``."""
    return kernel.startswith("rodas") or kernel == "nc_obs_accumulate"


def solve_kernel_name(method: str, sensitivities: bool, directions: bool = False) -> str:
    """The ODE solver kernel of ``method`` (``"dopri5"`` or ``"rodas"``): ``<method>_solve``,
    ``<method>_solve_sens`` or, with directional sensitivities, ``<method>_solve_dir``."""
    return f"{method}_solve" + ("_dir" if directions else "_sens" if sensitivities else "")


# ---- work sizes: the kernels' own rules, from the shared module (compiled once per machine) ----------

def _shared():
    from odeinfer.solve.shared import shared_module

    return shared_module()


def ode_work_size(method: str, n: int, m: int, k: int) -> int:
    """Length of ``work`` for ``<method>_solve*`` (and ``dopri5_fixed``) with ``n`` states, ``m``
    parameters and ``k`` sensitivity columns (0, ``n + m``, or the number of directions)."""
    mod = _shared()
    size = mod._rodas_work_len if method == "rodas" else mod._dopri5_work_len
    return int(size(n, m, k))


def adjoint_record_cols(n: int, method: str = "dopri5") -> int:
    """Columns of ``rec``, the step record of ``<method>_adjoint_vjp`` (a row per accepted forward step):
    Dormand-Prince's ``t, h, t + h``, then the 5 continuous-extension coefficient vectors of the ``n`` states;
    Rodas's ``t, h, t_new``, the step's first and end output indices, then its start state."""
    return 3 + 5 * n if method == "dopri5" else 5 + n


def dde_buffer_cols(n: int, k: int) -> int:
    """Columns of ``buf``, the dense-output store of ``dde_solve`` (a row per accepted step: step start,
    size, the 5 continuous-extension coefficient vectors of the ``n * (1 + k)`` components)."""
    return 2 + 5 * n * (1 + k)


def adjoint_work_size(n: int, m: int, method: str = "dopri5") -> int:
    """Length of ``work`` for ``<method>_adjoint_vjp``."""
    return int(_shared()._adj_work_len(n, m)) if method == "dopri5" else ode_work_size(method, n, m, 0)


def _sizes_handle(model):
    """The sizes of a delay model's handle (no callbacks): enough for its size rules."""
    return (model.n_states, model.n_params, model.n_delays, np.array(model.delay_indices, dtype=np.int64), 0, 0, 0, 0)


def dde_work_size(model, k: int, q: int) -> int:
    """Length of ``work`` for ``dde_solve`` of the delay ``model`` with ``k`` sensitivity columns and
    ``q`` history parameters."""
    return int(_shared()._dde_work_size(_sizes_handle(model), k, q))


def dde_adjoint_work_size(model, q: int) -> int:
    """Length of ``work`` for ``dde_adjoint_gradient`` of the delay ``model`` with ``q`` history parameters."""
    return int(_shared()._ddeadj_work_size(_sizes_handle(model), q))


def call(kernel, name: str, **values):
    """``kernel(...)`` with the arguments of kernel ``name`` given by name (:data:`SIGNATURES`): the
    adapter of the estimators' kernels (``coll_constraints``, ``gm_residuals``, ``nc_obs_accumulate``),
    whose arguments change from call to call. ``kernel``: the model's dispatcher or its
    :class:`~odeinfer.solve.shared.TieredKernel`."""
    names = SIGNATURES[name]
    if values.keys() != set(names):
        raise TypeError(f"{name}: expected the arguments {list(names)}, got {sorted(values)}")
    return kernel(*[values[a] for a in names])


# ---- adapters for Python callers: closures over the bound values (the cheapest call from Python) ----

def kernel_array(a):
    """``a`` as the kernels' compiled signatures take an input array: itself when it is a writable
    C-contiguous float64 array, else such a copy. A read-only, strided or integer array is another
    argument type to numba, which would compile the whole kernel again for it (10-30 s): the bound
    solvers pass what callers give them (e.g. ``problem.x0``, ``history.values``, read-only) through
    this."""
    if type(a) is np.ndarray and a.dtype == _F8 and a.flags.writeable and a.flags.c_contiguous:
        return a
    return np.array(a, dtype=np.float64, order="C")


_F8 = np.dtype(np.float64)


def ode_solve_call(kernel, sensitivities, directions, t0, t_eval, rtol, atol, first_step, max_steps, sens_err,
                   z_out, work, info):
    """``run(p, y0) -> status`` calling ``kernel`` (``<method>_solve`` or, with ``sensitivities``,
    ``<method>_solve_sens``; a model kernel, its shared counterpart's :class:`TieredKernel`, ...);
    with ``directions``, ``run(p, y0, pdir, s0)`` for ``<method>_solve_dir``. ``max_steps``: a one-element int64
    array, read at each call (so the caller may lower it between calls)."""
    if directions:
        def run(p, y0, pdir, s0):
            return kernel(t0, t_eval, y0, p, pdir, s0, sens_err, rtol, atol, first_step, max_steps[0], z_out, work,
                          info)
    elif sensitivities:
        def run(p, y0):
            return kernel(t0, t_eval, y0, p, sens_err, rtol, atol, first_step, max_steps[0], z_out, work, info)
    else:
        def run(p, y0):
            return kernel(t0, t_eval, y0, p, rtol, atol, first_step, max_steps[0], z_out, work, info)
    return run


def fixed_step_call(kernel, t0, t_eval, sens, h, z_out, work, info):
    """``run(p, y0) -> status`` calling ``dopri5_fixed`` with the constant step ``h``."""
    def run(p, y0):
        return kernel(t0, t_eval, y0, p, sens, h, z_out, work, info)
    return run


def normal_eq_call(kernel):
    """``run(block, p, w, want_meat, state)`` calling ``gm_normal_eq`` on the rows ``block = (t, X, D)``,
    accumulating into ``state = (jtj, jte, meat, acc)`` (the Newton family's inner loop: no keyword
    mapping per call)."""
    def run(block, p, w, want_meat, state):
        t, X, D = block
        return kernel(t, X, D, p, w, want_meat, state[0], state[1], state[2], state[3])
    return run


def adjoint_vjp_call(kernel, t0, t_eval, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info):
    """``run(p, y0, g) -> status`` calling ``dopri5_adjoint_vjp`` or ``rodas_adjoint_vjp``."""
    def run(p, y0, g):
        return kernel(t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info)
    return run


def dde_solve_call(kernel, t0, t_eval, hkind, hb, hc, k, sens_err, rtol, atol, first_step, max_steps, z_out, work,
                   info):
    """``run(p, phi, buf) -> status`` calling ``dde_solve`` (``buf``: the dense-output store, which
    the caller grows when ``info[Info.BUF_FULL]`` is set)."""
    def run(p, phi, buf):
        return kernel(t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps, z_out,
                      work, buf, info)
    return run


def dde_adjoint_vjp_call(kernel, t0, t_obs, hkind, hb, hc, nsub):
    """``run(p, phi, g, buf, nbuf, grad) -> status`` calling ``dde_adjoint_vjp`` on the dense output
    ``buf[:nbuf]`` of a states-only ``dde_solve`` at the output times ``t_obs``."""
    def run(p, phi, g, buf, nbuf, grad):
        return kernel(t0, t_obs, g, p, hkind, phi, hb, hc, buf, nbuf, nsub, grad)
    return run


def dde_adjoint_gradient_call(kernel, t0, t_end, hkind, hb, hc, tb, tc, wl, paper):
    """``run(p, phi, buf, nbuf, nsub, grad, anodes, adnodes, work) -> status`` calling
    ``dde_adjoint_gradient`` (the integral loss against the target ``tb``, ``tc`` with weights ``wl``)."""
    def run(p, phi, buf, nbuf, nsub, grad, anodes, adnodes, work):
        return kernel(t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub, paper, grad, anodes, adnodes,
                      work)
    return run


# ---- adapters for numba callers (the PyTensor Ops' NUMBA mode) -------------------------------------
# The adapters are inlined into their caller (numba's inline="always"): each numba function that calls
# another links the callee's LLVM module into its own and optimises and compiles it again, kernel
# included, so an adapter as a function of its own cost about a second more per graph on an empty cache
# (PyTensor's NUMBA mode compiles the log density with the Op's function around these adapters). The
# shared kernels are called through a C entry instead (odeinfer.solve.entry), which nothing links.
# Closure values reach numba as literals and read-only arrays; the kernels are passed the plain
# types the Python adapters above pass (int64, bool, writable arrays), so the machine code that
# numba cached for those signatures is reused instead of compiled again.

def _numba_types():
    from numba import types

    f8 = types.float64
    return (f8, types.int64, types.boolean, types.Array(f8, 1, "C"), types.Array(f8, 2, "C"),
            types.Array(f8, 1, "C", readonly=True))


def _njit_kernel(compiled, name, sig):
    # the model's kernel, whose disk-cached machine code the declared signature ``sig`` (the one the
    # Python adapters compile) reuses, or the shared one while the model's compiles in the background
    # (odeinfer.solve.shared.jit_kernel)
    from odeinfer.solve.shared import jit_kernel

    return jit_kernel(compiled, name, sig)


def njit_ode_solve(compiled, method, sensitivities, t0, t_eval, rtol, atol, max_steps, sens_err):
    """An ``@njit`` ``run(p, y0, z_out, work, info) -> status`` calling ``compiled``'s
    ``<method>_solve_sens`` with ``sensitivities``, else ``<method>_solve`` (Hairer's first step): the
    model's own kernel, or the shared one while the model's is not compiled."""
    from numba import njit

    f8, i8, b1, c1, c2, ro1 = _numba_types()
    sig = (f8, ro1, c1, c1) + ((b1,) if sensitivities else ()) + (f8, f8, f8, i8, c2, c1, c1)
    kernel = _njit_kernel(compiled, solve_kernel_name(method, sensitivities), sig)
    t0, rtol, atol = float(t0), float(rtol), float(atol)
    err = 1 if sens_err else 0
    if sensitivities:
        @njit(error_model="numpy", inline="always")
        def run(p, y0, z_out, work, info):
            return kernel(t0, t_eval, y0, p, err != 0, rtol, atol, 0.0, np.int64(max_steps), z_out, work, info)
    else:
        @njit(error_model="numpy", inline="always")
        def run(p, y0, z_out, work, info):
            return kernel(t0, t_eval, y0, p, rtol, atol, 0.0, np.int64(max_steps), z_out, work, info)
    return run


def njit_adjoint_vjp(compiled, t0, t_eval, rtol, atol, nsub):
    """An ``@njit`` ``run(p, y0, g, max_steps, z_out, rec, grad, work, info) -> status`` calling
    ``compiled``'s ``dopri5_adjoint_vjp`` (``rec``: at least ``max_steps`` rows), or the shared one
    while the model's is not compiled."""
    from numba import njit

    f8, i8, _, c1, c2, ro1 = _numba_types()
    kernel = _njit_kernel(compiled, "dopri5_adjoint_vjp", (f8, ro1, c1, c1, c2, f8, f8, i8, i8, c2, c2, c1, c1, c1))
    t0, rtol, atol = float(t0), float(rtol), float(atol)

    @njit(error_model="numpy", inline="always")
    def run(p, y0, g, max_steps, z_out, rec, grad, work, info):
        return kernel(t0, t_eval, y0, p, g, rtol, atol, np.int64(max_steps), np.int64(nsub), z_out, rec, grad, work,
                      info)
    return run


def njit_dde_solve(compiled, t0, t_eval, hkind, hb, hc, k, sens_err, rtol, atol, max_steps):
    """An ``@njit`` ``run(p, phi, z_out, work, buf, info) -> status`` calling the delay model
    ``compiled``'s ``dde_solve`` (Hairer's first step), or the shared one while the model's is not
    compiled."""
    from numba import njit, typeof

    err = 1 if sens_err else 0
    hkind = int(hkind)
    hb, hc = np.ascontiguousarray(hb), np.ascontiguousarray(hc)
    f8, i8, b1, c1, c2, ro1 = _numba_types()
    kernel = _njit_kernel(compiled, "dde_solve", (f8, ro1, c1, i8, c1, typeof(hb), typeof(hc), i8, b1, f8, f8, f8, i8,
                                                  c2, c1, c2, c1))
    t0, rtol, atol = float(t0), float(rtol), float(atol)

    @njit(error_model="numpy", inline="always")
    def run(p, phi, z_out, work, buf, info):
        return kernel(t0, t_eval, p, np.int64(hkind), phi, hb.copy(), hc.copy(), np.int64(k), err != 0, rtol, atol,
                      0.0, np.int64(max_steps), z_out, work, buf, info)
    return run


def njit_dde_adjoint_vjp(compiled, t0, t_obs, hkind, hb, hc, nsub):
    """An ``@njit`` ``run(p, phi, g, buf, nbuf, grad) -> status`` calling the delay model ``compiled``'s
    ``dde_adjoint_vjp``, or the shared one while the model's is not compiled."""
    from numba import njit, typeof

    hkind = int(hkind)
    hb, hc = np.ascontiguousarray(hb), np.ascontiguousarray(hc)
    f8, i8, _, c1, c2, ro1 = _numba_types()
    kernel = _njit_kernel(compiled, "dde_adjoint_vjp", (f8, ro1, c2, c1, i8, c1, typeof(hb), typeof(hc), c2, i8, i8,
                                                        c1))
    t0 = float(t0)

    @njit(error_model="numpy", inline="always")
    def run(p, phi, g, buf, nbuf, grad):
        return kernel(t0, t_obs, g, p, np.int64(hkind), phi, hb.copy(), hc.copy(), buf, np.int64(nbuf),
                      np.int64(nsub), grad)
    return run
