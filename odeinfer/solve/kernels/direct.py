"""The model handle of a model's own module: the solvers call the model's kernels directly.

Kernels shared with the model-independent module (``aug_rhs``, ``_dopri5_run``, ``_rodas_run``,
...) take a model handle ``mh = (n, m, f, jac_y, jac_p, f_t, jac_y_t, jac_p_t, jac_y_dir,
jac_p_dir)`` and call the model through ``mh_f``, ``mh_jac_y``, ``mh_jac_p`` and (Rodas)
``mh_f_t``, ``mh_jac_y_t``, ``mh_jac_p_t``, ``mh_jac_y_dir``, ``mh_jac_p_dir``. In a model's generated module the handle is the constant
:data:`MODEL_HANDLE` and these functions call ``model_f`` & co. by name, so numba and LLVM see
the whole model (sizes are compile-time constants, the loops unroll); ``pointer.py`` defines
the same names for the shared module, where the model comes as C function pointers.
"""
from numba import njit

MODEL_HANDLE = (N_STATES, N_PARAMS, 0, 0, 0, 0, 0, 0, 0, 0)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_f(mh, t, y, p, out):
    """``out = f(t, y, p)``."""
    model_f(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_y(mh, t, y, p, out):
    """``out = df/dy``."""
    model_jac_y(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_p(mh, t, y, p, out):
    """``out = df/dp``."""
    model_jac_p(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_f_t(mh, t, y, p, out):
    """``out = df/dt``."""
    model_f_t(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_y_t(mh, t, y, p, out):
    """``out = d/dt df/dy``."""
    model_jac_y_t(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_p_t(mh, t, y, p, out):
    """``out = d/dt df/dp``."""
    model_jac_p_t(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_y_dir(mh, t, y, p, v, out):
    """``out[i, k] = sum_l d2f_i/dy_k dy_l v_l``."""
    model_jac_y_dir(t, y, p, v, out)


@njit(cache=True, error_model="numpy", fastmath=False, _nrt=False)
def mh_jac_p_dir(mh, t, y, p, v, out):
    """``out[i, j] = sum_l d2f_i/dp_j dy_l v_l``."""
    model_jac_p_dir(t, y, p, v, out)
