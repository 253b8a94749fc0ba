"""A delay model's C callbacks for the shared DDE solver of ``pointer.py``.

Appended to the delay model's source alone (``DDE_MODEL_CFUNC_FILES``): ``model_f_c``,
``model_jac_y_c``, ``model_jac_ylag_c`` and ``model_jac_p_c`` wrap the model kernels as
``void(double t, double *y, double *ylag, double *p, double *out)``; their ``.address`` goes
into the model handle. Compiled when the module is imported, cached on disk.
"""
from numba import carray, cfunc, types

_C_PTR = types.CPointer(types.float64)
_C_SIG_LAG = types.void(types.float64, _C_PTR, _C_PTR, _C_PTR, _C_PTR)


@cfunc(_C_SIG_LAG, cache=True, error_model="numpy", fastmath=False)
def model_f_c(t, y, ylag, p, out):
    model_f(t, carray(y, (N_STATES,)), carray(ylag, (N_STATES, N_DELAYS)), carray(p, (N_PARAMS,)),
            carray(out, (N_STATES,)))


@cfunc(_C_SIG_LAG, cache=True, error_model="numpy", fastmath=False)
def model_jac_y_c(t, y, ylag, p, out):
    model_jac_y(t, carray(y, (N_STATES,)), carray(ylag, (N_STATES, N_DELAYS)), carray(p, (N_PARAMS,)),
                carray(out, (N_STATES, N_STATES)))


@cfunc(_C_SIG_LAG, cache=True, error_model="numpy", fastmath=False)
def model_jac_ylag_c(t, y, ylag, p, out):
    model_jac_ylag(t, carray(y, (N_STATES,)), carray(ylag, (N_STATES, N_DELAYS)), carray(p, (N_PARAMS,)),
                   carray(out, (N_DELAYS, N_STATES, N_STATES)))


@cfunc(_C_SIG_LAG, cache=True, error_model="numpy", fastmath=False)
def model_jac_p_c(t, y, ylag, p, out):
    model_jac_p(t, carray(y, (N_STATES,)), carray(ylag, (N_STATES, N_DELAYS)), carray(p, (N_PARAMS,)),
                carray(out, (N_STATES, N_PARAMS)))
