"""Solver entry points shared by every model: the model comes as C function pointers.

This file starts the model-independent module (``SHARED_KERNEL_FILES``: this file, then
``common.py``, ``rk.py``, ``dopri.py`` and ``dde.py``), compiled and cached once per machine, not once per
model. A model contributes only a few small C callbacks (``cfuncs.py``, ``dde_cfuncs.py``), so
its first solve does not wait for its own solver to compile (see :mod:`odeinfer.solve.shared`).
The numerics are those of ``dopri.py`` and ``dde.py`` (the same source text, operation for
operation, and the same Runge-Kutta core ``rk.py``).

Model handles (int64 entries): ODE ``mh = (n, m, f, jac_y, jac_p)``, the numbers of states and
parameters and the addresses of ``void f(double t, double *y, double *p, double *out)`` and of
the two Jacobians (``out`` row-major ``(n, n)`` and ``(n, m)``); models with delays
``mh = (n, m, d, delay_params, f, jac_y, jac_ylag, jac_p)`` with ``delay_params`` an int64
array (the delays' positions in ``p``) and callbacks ``void(double t, double *y, double *ylag,
double *p, double *out)`` (``ylag`` (n, d); ``jac_ylag`` out (d, n, n)).

Public kernels: ``ptr_dopri5_solve(mh, <the arguments of dopri5_solve>)``,
``ptr_dopri5_solve_sens(mh, <the arguments of dopri5_solve_sens>)`` (``work`` has at least
``10 * size + n * n + n * m`` entries, ``size = n * (1 + k)``) and
``ptr_dde_solve(mh, <the arguments of dde_solve>)`` (``work``: ``_dde_work_size(mh, k, q)``).
"""
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def _ptr_call(typingctx, addr, t, arrays):
    """Call the C function at ``addr`` with ``t`` and the data pointers of ``arrays`` (a tuple of
    C-contiguous float64 arrays)."""
    if not (isinstance(addr, types.Integer) and isinstance(arrays, types.BaseTuple)
            and all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float64 for a in arrays)):
        return None
    sig = types.void(addr, t, arrays)

    def codegen(context, builder, signature, args):
        dbl = ir.DoubleType()
        tys = signature.args[2]
        fnty = ir.FunctionType(ir.VoidType(), [dbl] + [dbl.as_pointer()] * len(tys))
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        data = [context.make_array(ty)(context, builder, builder.extract_value(args[2], i)).data
                for i, ty in enumerate(tys)]
        builder.call(fn, [args[1], *data])
        return context.get_dummy_value()

    return sig, codegen


# ---- ODE models: mh = (n, m, f, jac_y, jac_p)
@njit(cache=True, error_model="numpy")
def mh_f(mh, t, y, p, out):
    _ptr_call(mh[2], t, (y, p, out))


@njit(cache=True, error_model="numpy")
def mh_jac_y(mh, t, y, p, out):
    _ptr_call(mh[3], t, (y, p, out))


@njit(cache=True, error_model="numpy")
def mh_jac_p(mh, t, y, p, out):
    _ptr_call(mh[4], t, (y, p, out))


@njit(cache=True, error_model="numpy")
def ptr_dopri5_solve(mh, t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out, work, info):
    """``dopri5_solve`` for the model behind ``mh``."""
    return _dopri5_run(mh, t0, t_eval, y0, p, 0, mh[0], rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy")
def ptr_dopri5_solve_sens(mh, t0, t_eval, y0, p, sens_err, rtol, atol, first_step, max_steps,
                          z_out, work, info):
    """``dopri5_solve_sens`` for the model behind ``mh``."""
    k = mh[0] + mh[1]
    nc = mh[0] * (1 + k) if sens_err else mh[0]
    return _dopri5_run(mh, t0, t_eval, y0, p, k, nc, rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


# ---- models with delays: mh = (n, m, d, delay_params, f, jac_y, jac_ylag, jac_p)
@njit(cache=True, error_model="numpy")
def mh_dde_f(mh, t, y, ylag, p, out):
    _ptr_call(mh[4], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy")
def mh_dde_jac_y(mh, t, y, ylag, p, out):
    _ptr_call(mh[5], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy")
def mh_dde_jac_ylag(mh, t, y, ylag, p, out):
    _ptr_call(mh[6], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy")
def mh_dde_jac_p(mh, t, y, ylag, p, out):
    _ptr_call(mh[7], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy")
def ptr_dde_solve(mh, t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps,
                  z_out, work, buf, info):
    """``dde_solve`` for the model behind ``mh``."""
    return _dde_run(mh, t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps,
                    z_out, work, buf, info)
