"""Numba solver kernels, compiled once per model.

The files listed in :data:`KERNEL_FILES` are not imported as modules: their text
is appended to each model's generated module (see :mod:`odeinfer.model.cache`),
so that the solver calls the model's kernels as plain globals and numba can cache
the machine code on disk. Rules for these files:

* import only ``math``, ``numpy as np`` and ``numba`` names (``numba.extending`` included;
  ``pointer.py`` also ``llvmlite``); views of a kernel's ``work`` buffer are made by
  ``work_view`` (``common.py``), not ``reshape``;
* use ``@njit(cache=True, error_model="numpy", fastmath=False)``, the flag set
  and never fast-math (same bits in every kernel, in every order): numba compiles
  a callee that does not set ``fastmath`` with its *caller's* flags, keeps that
  machine code for the signature (in the process and in the disk cache, whose
  key is the signature and the CPU, not the flags), and PyTensor's NUMBA mode
  (the ODE Op under NUTS) calls these kernels from fast-math functions: a
  kernel or ``model_f`` first compiled that way gave every later process
  fast-math bits (issue 13: the shared ``ptr_*`` kernels of ``pointer.py`` then
  differed from the model's). With the flags set, a kernel's bits do not depend
  on who compiled it first;
  out-buffers and integer status codes, no exceptions;
* a function that is called in a solver's loop without being inlined, and neither allocates an
  array nor returns one (nor calls a non-inlined function that does), adds ``_nrt=False``
  (numba's reference counting off): otherwise every array argument costs an atomic increment
  at entry and a decrement at exit (37% of Rodas' adjoint sweep on Boehm_JProteomeRes2014 was
  spent there). The generated model kernels are such functions too
  (:mod:`odeinfer.model.codegen`); ``tests/test_kernel_abi.py`` checks the rule;
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

Solver kernels defined by these files (documented in each file):
``direct.py`` (the model handle ``MODEL_HANDLE`` and ``mh_f``, ``mh_jac_y``, ``mh_jac_p``,
through which the shared kernels below call the model), ``common.py`` (status codes ``ST_*``,
``INFO_*`` layout, ``aug_rhs``, ``add_sens_row``),
``rk.py`` (the Runge-Kutta core of the ODE and delay solvers: the Dormand-Prince tableau
``RK_*``, stages ``rk_stage``, error norm ``rk_err2``, controller ``rk_accept`` / ``rk_reject`` /
``rk_next_step``, continuous extension ``rk_dense``, stiffness test ``rk_stiffness``),
``linalg.py`` (``lu_factor``, ``lu_solve``, ``lu_solve_rows``; the planned sparse LU ``plu_factor``,
``plu_solve``, ...), ``dopri.py`` (``dopri5_solve``,
``dopri5_solve_sens``, ``dopri5_solve_dir``, ``dopri5_fixed``, ``dopri5_work_size``,
``dopri5_work_size_dir``), ``adjoint.py``
(``dopri5_adjoint_vjp``, ``dopri5_adjoint_work_size``), ``rodas.py``
(``rodas_solve``, ``rodas_solve_sens``, ``rodas_solve_dir``, ``rodas_work_size``,
``rodas_work_size_dir``; the discrete adjoint ``rodas_adjoint_vjp``, or in two passes ``rodas_solve_record``
then ``rodas_adjoint_sweep``), ``residuals.py`` (``eval_f_batch``, ``eval_jac_p_batch``,
``gm_residuals``, ``gm_normal_eq``: batched evaluations for the equation-error
estimators of :mod:`odeinfer.estimators.newton`; ``gm_descent``: their gradient-descent loop),
``collocation.py`` (``coll_constraints``: the collocation constraints of
:class:`odeinfer.estimators.Simultaneous`), ``noise_cov.py``
(``nc_obs_accumulate``: the Newton family's delta-method covariance terms). Names are shared with
the model kernels in one module, so private names carry a file prefix (``_RK_``/``_dopri5_``/``_dde_``,
``_RO_``/``_rodas_``).
"""

KERNEL_FILES: tuple[str, ...] = ("direct.py", "common.py", "rk.py", "linalg.py", "dopri.py", "adjoint.py",
                                 "rodas.py", "residuals.py", "collocation.py", "noise_cov.py")

#: The model-independent module (compiled once per machine): ``pointer.py`` defines the model
#: handles' calls through C function pointers and the ``ptr_*`` entry points (every solver kind); it may
#: import ``llvmlite`` and ``numba.extending`` (see :mod:`odeinfer.solve.shared`).
SHARED_KERNEL_FILES: tuple[str, ...] = ("pointer.py", "common.py", "rk.py", "linalg.py", "dopri.py", "adjoint.py",
                                        "rodas.py", "collocation.py", "residuals.py", "noise_cov.py", "dde.py",
                                        "dde_adjoint.py")

#: Appended to a model's source alone: its C callbacks for the shared module (Dormand-Prince).
MODEL_CFUNC_FILES: tuple[str, ...] = ("cfuncs.py",)

#: The same, with the further callbacks the shared Rodas kernels need (built only for them).
RODAS_CFUNC_FILES: tuple[str, ...] = ("cfuncs.py", "cfuncs_rodas.py")

#: The same for a model with delays.
DDE_MODEL_CFUNC_FILES: tuple[str, ...] = ("dde_cfuncs.py",)

#: Kernel files of models with delays (their model kernels take the lagged
#: states: see :mod:`odeinfer.model.codegen_dde` and ``dde.py``).
DDE_KERNEL_FILES: tuple[str, ...] = ("dde_direct.py", "common.py", "rk.py", "dde.py", "dde_adjoint.py")
