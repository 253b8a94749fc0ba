"""Numba solver kernels, compiled once per model.

The files listed in :data:`KERNEL_FILES` are not imported as modules: their text
is appended to each model's generated module (see :mod:`odeinfer.model.cache`),
so that the solver calls the model's kernels as plain globals and numba can cache
the machine code on disk. Rules for these files:

* import only ``math``, ``numpy as np`` and ``numba`` names;
* use ``@njit(cache=True)``; out-buffers and integer status codes, no exceptions;
* call the model through these globals, defined by the generated model source
  (``n`` states, ``m`` parameters, all arrays float64, C-contiguous):

  ``model_f(t, y, p, out)``            out (n,)   = f(t, y, p)
  ``model_jac_y(t, y, p, out)``        out (n, n) = df/dy
  ``model_jac_p(t, y, p, out)``        out (n, m) = df/dp
  ``model_f_t(t, y, p, out)``          out (n,)   = df/dt
  ``model_jac_y_dir(t, y, p, v, out)`` out (n, n), out[i, k] = sum_l d2f_i/dy_k dy_l v_l
  ``model_jac_p_dir(t, y, p, v, out)`` out (n, m), out[i, j] = sum_l d2f_i/dp_j dy_l v_l
  ``model_jac_y_t(t, y, p, out)``      out (n, n) = d/dt df/dy
  ``model_jac_p_t(t, y, p, out)``      out (n, m) = d/dt df/dp

  and the integer constants ``N_STATES`` and ``N_PARAMS``.
"""

KERNEL_FILES: tuple[str, ...] = ()
