"""Numba source code for the kernels of a model with delays (a DDE).

Generated only for models with ``delays``, so ODE models compile nothing extra.
Kernel contract (all arrays float64, C-contiguous; ``n`` states, ``m`` params,
``D`` delays):

``model_f(t, y, ylag, p, out)``          out (n,)      = f(t, y, Y, p)
``model_jac_y(t, y, ylag, p, out)``      out (n, n)    = df/dy (lags held fixed)
``model_jac_ylag(t, y, ylag, p, out)``   out (D, n, n), out[k, i, l] = df_i / dY[l, k]
``model_jac_p(t, y, ylag, p, out)``      out (n, m)    = df/dp (explicit dependence)

with ``ylag`` of shape (n, D), ``ylag[i, k] = y_i(t - tau_k)``, and the
constants ``N_STATES``, ``N_PARAMS``, ``N_DELAYS`` and ``DELAY_PARAMS`` (tuple of
the delays' positions in ``p``).
"""

from __future__ import annotations

from odeinfer.model.codegen import _kernel, safe_symbols

__all__ = ["dde_model_source"]


def dde_model_source(model) -> str:
    """Python source of the DDE kernels of ``model`` (without the module header)."""
    d = model.delay_derivatives
    n, m, nd = model.n_states, model.n_params, model.n_delays
    rename = safe_symbols(d.state_symbols, d.param_symbols, d.lag_symbols)
    loads = [(f"_l{i}_{k}", f"ylag[{i}, {k}]") for i in range(n) for k in range(nd)]
    ins = [("y", n), ("p", m)]
    args = ["t", "y", "ylag", "p", "out"]

    def kern(name, outputs):
        return _kernel(name, args, outputs, rename, ins, loads)

    f = [(f"{i}", d.f[i]) for i in range(n)]
    jy = [(f"{i}, {l}", d.jac_y[i, l]) for i in range(n) for l in range(n)]
    jl = [(f"{k}, {i}, {l}", d.jac_ylag[k][i, l]) for k in range(nd) for i in range(n) for l in range(n)]
    jp = [(f"{i}, {j}", d.jac_p[i, j]) for i in range(n) for j in range(m)]
    idx = ", ".join(str(j) for j in model.delay_indices)
    header = (f"N_STATES = {n}\nN_PARAMS = {m}\nN_DELAYS = {nd}\n"
              f"DELAY_PARAMS = ({idx},)\n")
    return "\n\n".join([header, kern("model_f", f), kern("model_jac_y", jy), kern("model_jac_ylag", jl),
                        kern("model_jac_p", jp)])
