"""Simulating noisy observations from a model: ``oi.simulate``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from odeinfer.data import Data
from odeinfer.errors import DataError
from odeinfer.model import Model

__all__ = ["simulate", "Simulation"]


@dataclass(frozen=True)
class Simulation:
    """What :func:`simulate` returns; unpacks as ``data, truth = oi.simulate(...)``.

    Attributes
    ----------
    data : Data
        Noisy observations of the observed states, shape ``(n_times, n_observed)``.
    truth : Data
        The noise-free solution of every state, shape ``(n_times, n_states)``.
    params, x0 : dict
        The values used, by name.
    noise : dict
        Noise standard deviation per observed state (on the log scale when the
        model's noise is ``"log"``).
    """

    data: Data
    truth: Data
    params: dict
    x0: dict
    noise: dict

    def __iter__(self):
        return iter((self.data, self.truth))


def _noise_by_state(noise, observed):
    if noise is None:
        return {s: 0.0 for s in observed}
    if isinstance(noise, Mapping):
        unknown = [k for k in noise if k not in observed]
        missing = [s for s in observed if s not in noise]
        if unknown or missing:
            raise DataError(
                f"noise: keys must be the observed states {list(observed)}; unknown {unknown}, missing {missing}"
            )
        values = {s: noise[s] for s in observed}
    elif np.ndim(noise) == 0:
        values = {s: noise for s in observed}
    else:
        arr = np.asarray(noise, dtype=float)
        if arr.shape != (len(observed),):
            raise DataError(
                f"noise: expected a number, a dict or an array of shape ({len(observed)},) (one sd per observed "
                f"state {list(observed)}), got shape {arr.shape}"
            )
        values = dict(zip(observed, arr))
    out = {}
    for s, v in values.items():
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise DataError(f"noise[{s!r}]: expected a positive number, got {v!r}") from None
        if not np.isfinite(v) or v <= 0:
            raise DataError(
                f"noise[{s!r}]: the noise standard deviation must be a positive finite number, got {v!r}; "
                "pass noise=None for noise-free data"
            )
        out[s] = v
    return out


def simulate(model: Model, params, x0, t, *, t0=None, noise=None, rng=None, solver=None,
             name=None) -> Simulation:
    """Solve ``model`` and add observation noise.

    Parameters
    ----------
    model : Model
        Its observation model says which states are observed and whether noise
        is additive (``y = x + sd * e``) or on the log scale (``y = x * exp(sd * e)``).
    params : array-like (n_params,) or dict
    x0 : array-like (n_states,) or dict
        Initial state at ``t0``.
    t : array-like (n_times,)
        Observation times, sorted.
    t0 : float, optional
        Time of ``x0``; default ``t[0]``.
    noise : float, dict or array-like (n_observed,), optional
        Noise standard deviation per observed state; None (default) for none.
    rng : int or numpy.random.Generator, optional
        Seed or generator for the noise (required for reproducibility).
    solver : Dopri5, Rodas or Auto, optional
        Default ``oi.Auto(rtol=1e-8, atol=1e-10)`` (the ``fit`` role's: tight tolerances, Rodas once
        the model turns out stiff).
    name : str, optional
        Name of the returned Data.

    Returns
    -------
    Simulation
        ``.data`` (noisy, observed states) and ``.truth`` (noise-free, all states).

    Examples
    --------
    >>> import odeinfer as oi
    >>> m = oi.Model.from_equations({"x": "-k*x"}, params=["k"])
    >>> data, truth = oi.simulate(m, [0.5], [1.0], [0.0, 1.0, 2.0], noise=0.01, rng=1)
    >>> data.y.shape, truth.y.shape
    ((3, 1), (3, 1))
    """
    from odeinfer.solve import Problem, solve
    from odeinfer.solve.config import as_solver

    if not isinstance(model, Model):
        raise TypeError(f"model: expected an odeinfer Model, got {type(model).__name__}; build one with @oi.model")
    observed = model.observed
    sd = _noise_by_state(noise, observed)
    solver = as_solver(solver, delays=bool(model.delays), role="fit")
    sol = solve(Problem(model, t, x0=x0, t0=t0), params, solver=solver)
    gen = np.random.default_rng(rng)
    idx = [model.states.index(s) for s in observed]
    x = sol.y[:, idx]
    e = gen.standard_normal(x.shape) * np.array([sd[s] for s in observed])
    if model.observation.noise == "log":
        if np.any(x <= 0):
            raise DataError("log-scale noise needs a positive solution, but an observed state is <= 0")
        y = x * np.exp(e)
    else:
        y = x + e
    t_arr = np.asarray(sol.t, dtype=float)
    t0v = float(t_arr[0] if t0 is None else t0)
    base = name or f"{model.name} (simulated)"
    data = Data(t_arr, y, observed, t0=t0v, name=base)
    truth = Data(t_arr, sol.y, model.states, t0=t0v, name=f"{model.name} (truth)")
    p = dict(zip(model.params, _values(params, model.params)))
    x0d = dict(zip(model.states, _values(x0, model.states)))
    return Simulation(data, truth, p, x0d, sd)


def _values(v, names):
    if isinstance(v, Mapping):
        return [float(v[n]) for n in names]
    return [float(a) for a in np.asarray(v, dtype=float).ravel()]
