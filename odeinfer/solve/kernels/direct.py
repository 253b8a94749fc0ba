"""The model handle of a model's own module: the solvers call the model's kernels directly.

Kernels shared with the model-independent module (``aug_rhs``, ``_dopri5_run``, ...) take a
model handle ``mh = (n, m, f, jac_y, jac_p)`` and call the model through ``mh_f``,
``mh_jac_y`` and ``mh_jac_p``. In a model's generated module the handle is the constant
:data:`MODEL_HANDLE` and these functions call ``model_f`` & co. by name, so numba and LLVM see
the whole model (sizes are compile-time constants, the loops unroll); ``pointer.py`` defines
the same names for the shared module, where the model comes as C function pointers.
"""
from numba import njit

MODEL_HANDLE = (N_STATES, N_PARAMS, 0, 0, 0)


@njit(cache=True, error_model="numpy", fastmath=False)
def mh_f(mh, t, y, p, out):
    """``out = f(t, y, p)``."""
    model_f(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False)
def mh_jac_y(mh, t, y, p, out):
    """``out = df/dy``."""
    model_jac_y(t, y, p, out)


@njit(cache=True, error_model="numpy", fastmath=False)
def mh_jac_p(mh, t, y, p, out):
    """``out = df/dp``."""
    model_jac_p(t, y, p, out)
