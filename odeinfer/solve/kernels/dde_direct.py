"""The model handle of a delay model's own module: the DDE solver calls the model directly.

``dde.py`` takes a model handle ``mh = (n, m, d, delay_params, f, jac_y, jac_ylag, jac_p)`` and
calls the model through ``mh_dde_f``, ``mh_dde_jac_y``, ``mh_dde_jac_ylag`` and
``mh_dde_jac_p``. In a delay model's generated module the handle is the constant
:data:`MODEL_HANDLE` and these call ``model_f`` & co. by name (compile-time sizes);
``pointer.py`` defines the same names for the shared module (C function pointers).
"""
from numba import njit

MODEL_HANDLE = (N_STATES, N_PARAMS, N_DELAYS, DELAY_PARAMS, 0, 0, 0, 0)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_f(mh, t, y, ylag, p, out):
    """``out = f(t, y, ylag, p)``."""
    model_f(t, y, ylag, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_jac_y(mh, t, y, ylag, p, out):
    """``out = df/dy``."""
    model_jac_y(t, y, ylag, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_jac_ylag(mh, t, y, ylag, p, out):
    """``out[k] = df/dY_k``."""
    model_jac_ylag(t, y, ylag, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_dde_jac_p(mh, t, y, ylag, p, out):
    """``out = df/dp``."""
    model_jac_p(t, y, ylag, p, out)
