"""A model's further C callbacks for the shared Rodas kernels of ``pointer.py``.

Appended after ``cfuncs.py`` (``RODAS_CFUNC_FILES``) when a Rodas solve of the model first needs
the shared tier: ``model_f_t_c``, ``model_jac_y_t_c``, ``model_jac_p_t_c`` as
``void(double t, double *y, double *p, double *out)`` and ``model_jac_y_dir_c``,
``model_jac_p_dir_c`` as ``void(double t, double *y, double *p, double *v, double *out)``.
"""
from numba import carray, cfunc, types

_C_SIG_DIR = types.void(types.float64, _C_PTR, _C_PTR, _C_PTR, _C_PTR)


@cfunc(_C_SIG, cache=True, error_model="numpy")
def model_f_t_c(t, y, p, out):
    model_f_t(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(out, (N_STATES,)))


@cfunc(_C_SIG, cache=True, error_model="numpy")
def model_jac_y_t_c(t, y, p, out):
    model_jac_y_t(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(out, (N_STATES, N_STATES)))


@cfunc(_C_SIG, cache=True, error_model="numpy")
def model_jac_p_t_c(t, y, p, out):
    model_jac_p_t(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(out, (N_STATES, N_PARAMS)))


@cfunc(_C_SIG_DIR, cache=True, error_model="numpy")
def model_jac_y_dir_c(t, y, p, v, out):
    model_jac_y_dir(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(v, (N_STATES,)),
                    carray(out, (N_STATES, N_STATES)))


@cfunc(_C_SIG_DIR, cache=True, error_model="numpy")
def model_jac_p_dir_c(t, y, p, v, out):
    model_jac_p_dir(t, carray(y, (N_STATES,)), carray(p, (N_PARAMS,)), carray(v, (N_STATES,)),
                    carray(out, (N_STATES, N_PARAMS)))
