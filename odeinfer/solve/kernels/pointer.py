"""Solver entry points shared by every model: the model comes as C function pointers.

This file starts the model-independent module (``SHARED_KERNEL_FILES``: this file, then
``common.py``, ``rk.py``, ``linalg.py``, ``dopri.py``, ``adjoint.py``, ``rodas.py``, ``collocation.py``,
``residuals.py``, ``noise_cov.py``, ``dde.py`` and ``dde_adjoint.py``), compiled and cached once per machine, not once per
model. A model contributes only a few small C callbacks (``cfuncs.py``, ``dde_cfuncs.py``), so
its first solve does not wait for its own solver to compile (see :mod:`odeinfer.solve.shared`).
The numerics are those of ``dopri.py`` and ``dde.py`` (the same source text, operation for
operation, and the same Runge-Kutta core ``rk.py``).

Model handles (int64 entries): ODE ``mh = (n, m, f, jac_y, jac_p, f_t, jac_y_t, jac_p_t,
jac_y_dir, jac_p_dir)``, the numbers of states and parameters and the addresses of
``void f(double t, double *y, double *p, double *out)``, of the two Jacobians (``out``
row-major ``(n, n)`` and ``(n, m)``) and, for Rodas (0 when a handle serves Dormand-Prince
only), of ``f_t``, ``jac_y_t``, ``jac_p_t`` (same signature) and of ``jac_y_dir``,
``jac_p_dir`` (``void(double t, double *y, double *p, double *v, double *out)``); models with delays
``mh = (n, m, d, delay_params, f, jac_y, jac_ylag, jac_p)`` with ``delay_params`` an int64
array (the delays' positions in ``p``) and callbacks ``void(double t, double *y, double *ylag,
double *p, double *out)`` (``ylag`` (n, d); ``jac_ylag`` out (d, n, n)).

Public kernels: ``ptr_dopri5_solve(mh, <the arguments of dopri5_solve>)``,
``ptr_dopri5_solve_sens(mh, <the arguments of dopri5_solve_sens>)``, ``ptr_dopri5_solve_dir``
(``work``: ``_dopri5_work_len(n, m, k)``), ``ptr_dopri5_adjoint_vjp``
(``work``: ``_adj_work_len(n, m)``), ``ptr_rodas_solve``,
``ptr_rodas_solve_sens``, ``ptr_rodas_solve_dir`` (``work``: ``_rodas_work_len(n, m, k)``) and
``ptr_rodas_adjoint_vjp``, ``ptr_rodas_solve_record`` and ``ptr_rodas_adjoint_sweep`` (``work``:
``_rodas_work_len(n, m, 0)``), ``ptr_coll_constraints``
(Simultaneous's collocation constraints), ``ptr_gm_residuals``, ``ptr_gm_normal_eq`` (the Newton
family's normal equations), ``ptr_gm_descent`` (its gradient descent), ``ptr_nc_obs_accumulate`` (its covariance) and
``ptr_dde_solve(mh, <the arguments of dde_solve>)`` (``work``: ``_dde_work_size(mh, k, q)``),
``ptr_dde_adjoint_vjp`` and ``ptr_dde_adjoint_gradient`` (``work``: ``_ddeadj_work_size(mh, q)``).
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
@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_f(mh, t, y, p, out):
    _ptr_call(mh[2], t, (y, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_y(mh, t, y, p, out):
    _ptr_call(mh[3], t, (y, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_p(mh, t, y, p, out):
    _ptr_call(mh[4], t, (y, p, out))


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dopri5_solve(mh, t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out, work, info):
    """``dopri5_solve`` for the model behind ``mh``."""
    none = no_directions(work)
    return _dopri5_run(mh, t0, t_eval, y0, p, 0, none, none, mh[0], rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dopri5_solve_sens(mh, t0, t_eval, y0, p, sens_err, rtol, atol, first_step, max_steps,
                          z_out, work, info):
    """``dopri5_solve_sens`` for the model behind ``mh``."""
    k = mh[0] + mh[1]
    nc = mh[0] * (1 + k) if sens_err else mh[0]
    none = no_directions(work)
    return _dopri5_run(mh, t0, t_eval, y0, p, k, none, none, nc, rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dopri5_solve_dir(mh, t0, t_eval, y0, p, pdir, s0, sens_err, rtol, atol, first_step, max_steps,
                         z_out, work, info):
    """``dopri5_solve_dir`` for the model behind ``mh``."""
    k = pdir.shape[1]
    nc = mh[0] * (1 + k) if sens_err else mh[0]
    return _dopri5_run(mh, t0, t_eval, y0, p, k, pdir, s0, nc, rtol, atol, first_step, 0.0,
                       max_steps, z_out, work, info, False, z_out)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dopri5_fixed(mh, t0, t_eval, y0, p, sens, h, z_out, work, info):
    """``dopri5_fixed`` for the model behind ``mh``."""
    return _dopri5_fixed_run(mh, t0, t_eval, y0, p, mh[0] + mh[1] if sens else 0, h, z_out, work, info)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_f_t(mh, t, y, p, out):
    _ptr_call(mh[5], t, (y, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_y_t(mh, t, y, p, out):
    _ptr_call(mh[6], t, (y, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_p_t(mh, t, y, p, out):
    _ptr_call(mh[7], t, (y, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_y_dir(mh, t, y, p, v, out):
    _ptr_call(mh[8], t, (y, p, v, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_p_dir(mh, t, y, p, v, out):
    _ptr_call(mh[9], t, (y, p, v, out))


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dopri5_adjoint_vjp(mh, t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info):
    """``dopri5_adjoint_vjp`` (``adjoint.py``) for the model behind ``mh``."""
    return _adj_vjp(mh, t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_rodas_adjoint_vjp(mh, t0, t_eval, y0, p, g, rtol, atol, max_steps, nsub, z_out, rec, grad, work, info):
    """``rodas_adjoint_vjp`` (``rodas.py``) for the model behind ``mh``."""
    return _rodas_adjoint(mh, t0, t_eval, y0, p, g, rtol, atol, max_steps, z_out, rec, grad, work, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_rodas_solve_record(mh, t0, t_eval, y0, p, rtol, atol, max_steps, z_out, rec, work, info):
    """``rodas_solve_record`` (``rodas.py``) for the model behind ``mh``."""
    return _rodas_record_run(mh, t0, t_eval, y0, p, rtol, atol, max_steps, z_out, rec, work, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_rodas_adjoint_sweep(mh, t_eval, p, g, rec, grad, info):
    """``rodas_adjoint_sweep`` (``rodas.py``) for the model behind ``mh``."""
    return _rodas_sweep_checked(mh, t_eval, p, g, rec, grad, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_rodas_solve(mh, t0, t_eval, y0, p, rtol, atol, first_step, max_steps, z_out, work, info):
    """``rodas_solve`` for the model behind ``mh``."""
    none = no_directions(work)
    return _rodas_run(mh, t0, t_eval, y0, p, 0, none, none, mh[0], rtol, atol, first_step, max_steps, z_out, work,
                      info, none)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_rodas_solve_sens(mh, t0, t_eval, y0, p, sens_err, rtol, atol, first_step, max_steps,
                         z_out, work, info):
    """``rodas_solve_sens`` for the model behind ``mh``."""
    k = mh[0] + mh[1]
    nc = mh[0] * (1 + k) if sens_err else mh[0]
    none = no_directions(work)
    return _rodas_run(mh, t0, t_eval, y0, p, k, none, none, nc, rtol, atol, first_step, max_steps, z_out, work,
                      info, none)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_rodas_solve_dir(mh, t0, t_eval, y0, p, pdir, s0, sens_err, rtol, atol, first_step, max_steps,
                        z_out, work, info):
    """``rodas_solve_dir`` for the model behind ``mh``."""
    k = pdir.shape[1]
    nc = mh[0] * (1 + k) if sens_err else mh[0]
    return _rodas_run(mh, t0, t_eval, y0, p, k, pdir, s0, nc, rtol, atol, first_step, max_steps, z_out, work,
                      info, no_directions(work))


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_coll_constraints(mh, scheme, t, X, p, pidx, F, JY, JP, c, jdata, want_jac):
    """``coll_constraints`` (``collocation.py``) for the model behind ``mh``."""
    return _coll_constraints(mh, scheme, t, X, p, pidx, F, JY, JP, c, jdata, want_jac)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_gm_residuals(mh, t, X, D, p, E):
    """``gm_residuals`` (``residuals.py``) for the model behind ``mh``."""
    _gm_residuals(mh, t, X, D, p, E)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_gm_normal_eq(mh, t, X, D, p, w, want_meat, jtj, jte, meat, acc):
    """``gm_normal_eq`` (``residuals.py``) for the model behind ``mh``."""
    _gm_normal_eq(mh, t, X, D, p, w, want_meat, jtj, jte, meat, acc)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_gm_descent(mh, t, X, D, base, free, w, theta, max_iter, xtol, gtol, max_backtrack, hist, info):
    """``gm_descent`` (``residuals.py``) for the model behind ``mh``."""
    return _gm_descent(mh, t, X, D, base, free, w, theta, max_iter, xtol, gtol, max_backtrack, hist, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_nc_obs_accumulate(mh, t, X, D, p, free, a, c, Y, carry, Q):
    """``nc_obs_accumulate`` (``noise_cov.py``) for the model behind ``mh`` (a handle with ``jac_p_dir``)."""
    return _nc_obs_accumulate(mh, t, X, D, p, free, a, c, Y, carry, Q)


# ---- models with delays: mh = (n, m, d, delay_params, f, jac_y, jac_ylag, jac_p)
@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_f(mh, t, y, ylag, p, out):
    _ptr_call(mh[4], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_jac_y(mh, t, y, ylag, p, out):
    _ptr_call(mh[5], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_jac_ylag(mh, t, y, ylag, p, out):
    _ptr_call(mh[6], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_jac_p(mh, t, y, ylag, p, out):
    _ptr_call(mh[7], t, (y, ylag, p, out))


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dde_solve(mh, t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps,
                  z_out, work, buf, info):
    """``dde_solve`` for the model behind ``mh``."""
    return _dde_run(mh, t0, t_eval, p, hkind, phi, hb, hc, k, sens_err, rtol, atol, first_step, max_steps,
                    z_out, work, buf, info)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dde_adjoint_vjp(mh, t0, t_obs, g, p, hkind, phi, hb, hc, buf, nbuf, nsub, grad):
    """``dde_adjoint_vjp`` (``dde_adjoint.py``) for the model behind ``mh``."""
    return _ddeadj_vjp(mh, t0, t_obs, g, p, hkind, phi, hb, hc, buf, nbuf, nsub, grad)


@njit(cache=True, error_model="numpy", fastmath=False)
def ptr_dde_adjoint_gradient(mh, t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub, paper, grad,
                             anodes, adnodes, work):
    """``dde_adjoint_gradient`` (``dde_adjoint.py``) for the model behind ``mh`` (``work``:
    ``_ddeadj_work_size(mh, q)``)."""
    return _ddeadj_gradient(mh, t0, t_end, p, hkind, phi, hb, hc, buf, nbuf, tb, tc, wl, nsub, paper, grad,
                            anodes, adnodes, work)
