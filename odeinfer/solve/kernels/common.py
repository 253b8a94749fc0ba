"""Shared solver kernels: status codes, the info vector, the augmented
(forward-sensitivity) right-hand side, Hairer's initial step heuristic and the
start and end of every one-step solver (``start_solve``, ``ode_start``,
``write_info``).

This text is appended to every generated model module (see
``odeinfer/solve/kernels/__init__.py``) and to the shared module of
``pointer.py``. The kernels that touch the model take a model handle ``mh``
(``mh[0]`` states, ``mh[1]`` parameters) and call it through ``mh_f``,
``mh_jac_y`` and ``mh_jac_p``: direct calls of ``model_f`` & co. in a model's
module (``direct.py``), C function pointers in the shared one.

Augmented state layout
----------------------
With ``n`` states, ``m`` parameters and ``k`` sensitivity columns (``k = m + n``
when sensitivities are requested, else ``0``) the solvers integrate the flat
vector ``z`` of length ``n * (1 + k)``::

    z[0:n]                 y
    z[n + i*k + j]         S[i, j] = d y_i / d theta_j

where the columns ``j < m`` are the parameters and ``j >= m`` the initial
states, so a row of an output buffer ``z_out[:, n:]`` reshapes (without a copy)
to the ``(n, k)`` sensitivity matrix. ``S`` obeys
``S' = J_y S + [J_p | 0]`` with ``S(t0) = [0 | I]``.

Directional sensitivities: given directions ``pdir`` (m, k) and ``s0`` (n, k) (the matrix
``W = [pdir; s0]``, e.g. ``[dp/dtheta; dx0/dtheta]``), the same layout holds ``S_W = S W``, which
obeys ``S_W' = J_y S_W + J_p pdir`` with ``S_W(t0) = s0``. The kernels below take ``pdir`` and
``s0`` for every solve: arrays with no columns (shape ``(0, 0)``, see :func:`no_directions`)
stand for the identity ``W`` of the full layout above (``k = m + n``), computed without the
products, so the full and the directional sensitivities are one implementation; with
``W = I`` the directional kernels give the full ones' bits (the products add exact zeros).
Zero entries of the Jacobians are skipped (:func:`add_sens_row`).
"""
import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

# Status codes returned by every solver kernel (mirrored, and tested, by
# odeinfer.solve.abi.Status).
ST_SUCCESS = 0
ST_MAX_STEPS = 1
ST_STEP_TOO_SMALL = 2
ST_STIFF = 3
ST_NON_FINITE = 4
ST_SINGULAR = 5
ST_BAD_INPUT = 6

# Layout of the float64 ``info`` vector every solver kernel fills.
INFO_T_REACHED = 0  # time of the last accepted step (t0 if none)
INFO_N_STEPS = 1  # attempted steps (accepted + rejected)
INFO_N_REJECTED = 2  # rejected steps (error test or non-finite stages)
INFO_N_RHS = 3  # evaluations of the (augmented) right-hand side
INFO_H_NEXT = 4  # step size proposed for the next step
INFO_N_LU = 5  # LU decompositions (Rosenbrock only)
INFO_SIZE = 6

UROUND = 2.220446049250313e-16
MAX_NONFINITE_REJECTS = 10  # consecutive non-finite trial steps before NON_FINITE


@intrinsic
def _c_view(typingctx, vec, shape):
    # ``vec.reshape(shape)`` for a 1-D C-contiguous ``vec`` of exactly ``prod(shape)`` entries
    # (the caller slices it), the C strides computed here: numba's reshape gets them from an
    # external call, opaque to LLVM, which then cannot tell the view's entries from those of
    # other views of the same buffer and reloads them after every store
    from numba.core.imputils import impl_ret_borrowed
    from numba.np.arrayobj import make_array, populate_array
    if not (isinstance(vec, types.Array) and vec.ndim == 1 and vec.layout == "C"
            and isinstance(shape, types.UniTuple) and isinstance(shape.dtype, types.Integer)):
        return None
    retty = types.Array(vec.dtype, shape.count, "C", readonly=not vec.mutable)
    sig = retty(vec, shape)

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, args[0])
        dims = [context.cast(builder, builder.extract_value(args[1], i), shape.dtype, types.intp)
                for i in range(shape.count)]
        strides = [src.itemsize]
        for d in reversed(dims[1:]):
            strides.insert(0, builder.mul(strides[0], d))
        out = make_array(retty)(context, builder)
        populate_array(out, data=src.data, shape=dims, strides=strides, itemsize=src.itemsize,
                       meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, retty, out._getvalue())

    return sig, codegen


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def work_view(work, off, shape):
    """``work[off:off + prod(shape)].reshape(shape)``, the strides known to the optimiser (about
    30% off a Dormand-Prince step with sensitivities: the Jacobians stay in registers). ``work``
    is 1-D, C-contiguous and holds at least ``off + prod(shape)`` entries (the kernels check
    their work size first)."""
    size = 1
    for d in shape:
        if d < 0:
            raise ValueError("work_view: negative dimension")
        size *= d
    if off < 0 or work.shape[0] < off + size:
        raise ValueError("work_view: the work buffer is too short")  # as numba's reshape would
    return _c_view(work[off:off + size], shape)


@njit(cache=True, error_model="numpy", fastmath=False)
def n_sens_columns(sens):
    """Number ``k`` of sensitivity columns: ``N_PARAMS + N_STATES`` or 0."""
    return N_PARAMS + N_STATES if sens else 0


@njit(cache=True, error_model="numpy", fastmath=False)
def no_directions(work):
    """A ``(0, 0)`` view of ``work``: the ``pdir`` and ``s0`` of the full layout (``W = I``)."""
    return work_view(work, 0, (0, 0))


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def add_sens_row(i, n, m, k, pdir, ap, ay, s, out):
    """Add row ``i`` of ``ap @ pdir + ay @ S`` to the row ``out[n + i*k : n + (i+1)*k]``, ``S`` the
    ``(n, k)`` matrix of ``s[n:]`` and ``[ap | 0]`` in place of ``ap @ pdir`` for the full layout
    (``pdir`` with no columns): the sensitivities' part of the augmented right-hand side (``ap =
    J_p``, ``ay = J_y``) or of its derivatives (Rodas). Each entry gets the terms in the order of the
    parameters, then of the states. Zero entries of ``ap`` and ``ay`` are skipped (their products are
    exact zeros: the Jacobians of reaction networks are sparse), each tested once per row, not once per
    column of ``S``: a row costs ``m + n`` tests and ``k`` multiply-adds per nonzero (with 500 states and
    155 columns, 1,900 operations instead of 77,500). ``out`` and ``s`` must not overlap."""
    row = n + i * k
    if pdir.shape[1] == 0:
        for j in range(min(k, m)):
            out[row + j] += ap[i, j]
    else:
        for q in range(m):
            a = ap[i, q]
            if a != 0.0:
                for j in range(k):
                    out[row + j] += a * pdir[q, j]
    for l in range(n):
        a = ay[i, l]
        if a != 0.0:
            col = n + l * k
            for j in range(k):
                out[row + j] += a * s[col + j]


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def aug_rhs(mh, t, z, zy, p, k, pdir, jy, jp, out, outy):
    """Augmented right-hand side ``[f; J_y S + J_p pdir]`` at ``(t, z)``
    (``[f; J_y S + [J_p | 0]]`` for the full layout).

    Inlined into the solvers. The model kernels read and write the state part
    in place through the views ``zy`` and ``outy`` (made once per solve, so no
    copies and no reference counting in the step loop).

    Parameters
    ----------
    mh : model handle
        ``(n, m, ...)``; the model kernels are called through ``mh_f``,
        ``mh_jac_y`` and ``mh_jac_p`` (see ``direct.py`` and ``pointer.py``).
    t : float
    z : (n*(1+k),) float64
        Augmented state (layout in the module docstring).
    zy : (n,) float64
        The view ``z[:n]``.
    p : (m,) float64
    k : int
        Number of sensitivity columns (0: states only).
    pdir : (m, k) or (0, 0) float64
        The parameter directions, or none: the full layout (``k = m + n``).
    jy : (n, n) float64
        Out: ``J_y(t, y)`` (only written when ``k > 0``).
    jp : (n, m) float64
        Out: ``J_p(t, y)`` (only written when ``k > 0``).
    out : (n*(1+k),) float64
        Out: the derivative of ``z``.
    outy : (n,) float64
        The view ``out[:n]``.
    """
    n = mh[0]
    m = mh[1]
    mh_f(mh, t, zy, p, outy)
    if k == 0:
        return
    mh_jac_y(mh, t, zy, p, jy)
    mh_jac_p(mh, t, zy, p, jp)
    for q in range(n, n * (1 + k)):
        out[q] = 0.0
    for i in range(n):
        add_sens_row(i, n, m, k, pdir, jp, jy, z, out)


@njit(cache=True, error_model="numpy", fastmath=False)
def init_aug_state(mh, y0, k, pdir, s0, z):
    """``z = [y0, S(t0)]``: the states, then ``S(t0) = s0`` (``[0 | I]`` for the full layout)
    when ``k > 0``."""
    n = mh[0]
    m = mh[1]
    for q in range(z.shape[0]):
        z[q] = 0.0
    for i in range(n):
        z[i] = y0[i]
    if k > 0:
        if pdir.shape[1] == 0:
            for i in range(n):
                z[n + i * k + m + i] = 1.0
        else:
            for i in range(n):
                for j in range(k):
                    z[n + i * k + j] = s0[i, j]


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def bad_directions(n, m, k, pdir, s0):
    """True unless ``pdir`` has no columns (the full layout) or ``pdir`` is (m, k) and ``s0`` (n, k)."""
    if pdir.shape[1] == 0:
        return False
    return pdir.shape[0] != m or pdir.shape[1] != k or s0.shape[0] != n or s0.shape[1] != k


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def all_finite(v, size):
    """True when ``v[:size]`` holds no inf or NaN."""
    acc = 0.0
    for q in range(size):
        acc += v[q] * 0.0
    return acc == 0.0


@njit(cache=True, error_model="numpy", fastmath=False)
def emit_initial_outputs(t0, t_eval, z, z_out):
    """Copy ``z`` to the rows of ``z_out`` whose time equals ``t0``; fill the
    other rows with NaN. Returns the index of the first output still due."""
    n_out = t_eval.shape[0]
    size = z_out.shape[1]
    i_out = 0
    while i_out < n_out and t_eval[i_out] <= t0:
        for q in range(size):
            z_out[i_out, q] = z[q]
        i_out += 1
    for r in range(i_out, n_out):
        for q in range(size):
            z_out[r, q] = np.nan
    return i_out


@njit(cache=True, error_model="numpy", fastmath=False)
def check_times(t0, t_eval):
    """ST_SUCCESS when ``t_eval`` is finite, non-decreasing and ``>= t0``."""
    if not math.isfinite(t0):
        return ST_BAD_INPUT
    prev = t0
    for i in range(t_eval.shape[0]):
        ti = t_eval[i]
        if not math.isfinite(ti) or ti < prev:
            return ST_BAD_INPUT
        prev = ti
    return ST_SUCCESS


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def start_solve(info, t0, t_eval):
    """Clear ``info`` (time reached: ``t0``) and check the output times (:func:`check_times`);
    the solver checks its array sizes after this (``ST_BAD_INPUT`` either way)."""
    for q in range(info.shape[0]):
        info[q] = 0.0
    info[INFO_T_REACHED] = t0
    return check_times(t0, t_eval)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def ode_start(mh, t0, t_eval, y0, p, k, pdir, s0, nc, order, first_step, rtol, atol, z, zy, f0, f0y,
              z1, z1y, f1, f1y, jy, jp, z_out, info):
    """The start of a one-step ODE solver: ``z = [y0, S(t0)]`` (:func:`init_aug_state`), the
    outputs at ``t0``, ``f0`` = the right-hand side at ``(t0, z)`` and the first step
    (``first_step`` if ``> 0``, else :func:`initial_step` of the given ``order``; at most
    ``t_eval[-1] - t0``). Returns ``(status, i_out, h, n_rhs)``: nothing is left to do unless
    ``status == ST_SUCCESS`` and ``i_out < n_out`` (``info[INFO_N_RHS]`` is set on a non-finite
    start)."""
    n_out = t_eval.shape[0]
    init_aug_state(mh, y0, k, pdir, s0, z)
    i_out = emit_initial_outputs(t0, t_eval, z, z_out)
    if i_out == n_out:
        return ST_SUCCESS, i_out, 0.0, 0
    aug_rhs(mh, t0, z, zy, p, k, pdir, jy, jp, f0, f0y)
    if not (all_finite(z, z.shape[0]) and all_finite(f0, z.shape[0])):
        info[INFO_N_RHS] = 1
        return ST_NON_FINITE, i_out, 0.0, 1
    hmax = t_eval[n_out - 1] - t0
    if first_step > 0.0:
        return ST_SUCCESS, i_out, min(first_step, hmax), 1
    h = initial_step(mh, t0, z, f0, p, k, pdir, nc, order, hmax, rtol, atol, z1, z1y, f1, f1y, jy, jp)
    return ST_SUCCESS, i_out, h, 2


@njit(cache=True, error_model="numpy", fastmath=False)
def initial_step(mh, t0, z, f0, p, k, pdir, nc, order, hmax, rtol, atol,
                 z1, z1y, f1, f1y, jy, jp):
    """Hairer's initial step heuristic (HINIT of dopri5.f / Hairer, Norsett,
    Wanner, Solving ODE I, 2nd ed., Sec. II.4) for an ODE (``aug_rhs``).

    ``h = 0.01 ||z|| / ||f0||`` guards an explicit Euler step that estimates
    the second derivative; then ``h**order * max(||f0||, ||z''||) = 0.01``,
    capped by ``100 h`` and ``hmax``. Norms are weighted by
    ``atol + rtol |z0|`` over the first ``nc`` components. Uses one
    right-hand side evaluation (scratch ``z1``, ``f1`` and their state views
    ``z1y``, ``f1y``). The two halves around that evaluation,
    :func:`initial_step_euler` and :func:`initial_step_finish`, serve every
    right-hand side (the method of steps calls them around its own).
    """
    h, dnf = initial_step_euler(z, f0, nc, hmax, rtol, atol, z1)
    aug_rhs(mh, t0 + h, z1, z1y, p, k, pdir, jy, jp, f1, f1y)
    return initial_step_finish(h, dnf, z, f0, f1, nc, order, hmax, rtol, atol, t0)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def initial_step_euler(z, f0, nc, hmax, rtol, atol, z1):
    """First half of :func:`initial_step`: the guess ``h`` and the explicit Euler step
    ``z1 = z + h f0`` (evaluate the right-hand side at ``(t0 + h, z1)`` next); returns
    ``(h, ||f0||**2)``."""
    dnf = 0.0
    dny = 0.0
    for q in range(nc):
        sk = atol + rtol * abs(z[q])
        dnf += (f0[q] / sk) ** 2
        dny += (z[q] / sk) ** 2
    if dnf <= 1e-10 or dny <= 1e-10:
        h = 1.0e-6
    else:
        h = math.sqrt(dny / dnf) * 0.01
    h = min(h, hmax)
    for q in range(z.shape[0]):
        z1[q] = z[q] + h * f0[q]
    return h, dnf


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def initial_step_finish(h, dnf, z, f0, f1, nc, order, hmax, rtol, atol, t0):
    """Second half of :func:`initial_step`, from ``f1`` = the right-hand side at the Euler
    step: the initial step, at least 100 rounding units of ``t0`` (a start at rest, ``f0 = 0``,
    gives ``1e-6`` in any time unit, which ``t0 = 1e9`` no longer resolves) and at most ``hmax``."""
    der2 = 0.0
    for q in range(nc):
        sk = atol + rtol * abs(z[q])
        der2 += ((f1[q] - f0[q]) / sk) ** 2
    der2 = math.sqrt(der2) / h
    der12 = max(abs(der2), math.sqrt(dnf))
    floor = 100.0 * UROUND * abs(t0)
    if not math.isfinite(der12):
        return min(max(min(h, 1.0e-6 * max(1.0, hmax)), floor), hmax)
    if der12 <= 1e-15:
        h1 = max(1.0e-6, h * 1.0e-3)
    else:
        h1 = (0.01 / der12) ** (1.0 / order)
    return min(max(min(100.0 * h, h1), floor), hmax)


@njit(cache=True, error_model="numpy", fastmath=False, inline="always")
def write_info(info, t, n_steps, n_rejected, n_rhs, h):
    """Fill the counters of ``info`` common to every solver at its end (``INFO_*``)."""
    info[INFO_T_REACHED] = t
    info[INFO_N_STEPS] = n_steps
    info[INFO_N_REJECTED] = n_rejected
    info[INFO_N_RHS] = n_rhs
    info[INFO_H_NEXT] = h
