"""A model's C callbacks for the shared solver of ``pointer.py``.

Appended to the model source alone (``MODEL_CFUNC_FILES``): ``model_f_c``, ``model_jac_y_c``
and ``model_jac_p_c`` wrap ``model_f``, ``model_jac_y`` and ``model_jac_p`` as
``void(double t, double *y, double *p, double *out)``; their ``.address`` goes into the model
handle. Compiled when the module is imported (three small functions), cached on disk.
"""
from numba import carray, cfunc, types

_C_PTR = types.CPointer(types.float64)
_C_SIG = types.void(types.float64, _C_PTR, _C_PTR, _C_PTR)


@cfunc(_C_SIG, cache=True, error_model="numpy", fastmath=False)
def model_f_c(t, y, p, out):
    model_f(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(out, (N_STATES,)))


@cfunc(_C_SIG, cache=True, error_model="numpy", fastmath=False)
def model_jac_y_c(t, y, p, out):
    model_jac_y(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(out, (N_STATES, N_STATES)))


@cfunc(_C_SIG, cache=True, error_model="numpy", fastmath=False)
def model_jac_p_c(t, y, p, out):
    model_jac_p(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(out, (N_STATES, N_PARAMS)))
