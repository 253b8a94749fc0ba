"""The zoo's entry type (:class:`ZooEntry`) and its name registry (:func:`available`, :func:`get`)."""

from __future__ import annotations

import difflib
import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from odeinfer.errors import ModelDefinitionError
from odeinfer.model import Model

__all__ = ["ZooEntry", "available", "get"]


@dataclass(frozen=True, eq=False)
class ZooEntry:
    """A model from the literature with default true values and their provenance.

    Every field is validated at construction and stored read-only.

    Attributes
    ----------
    name : str
        Registry name (``odeinfer.zoo.get(name)`` returns this entry).
    model : Model
        The ODE model (additive noise unless ``notes`` say otherwise).
    params : mapping of str to float
        True parameter values, keyed by ``model.params`` (in that order).
    x0 : mapping of str to float
        Initial state at ``t0``, keyed by ``model.states`` (in that order).
    t0 : float
        Time of the initial state.
    t : ndarray of float64, shape (n_times,)
        Default observation times: finite, strictly increasing, ``>= t0``; read-only.
    sigma : float or mapping of str to float
        Default noise standard deviation: one value for every observed state, or
        one per observed state (keys exactly ``model.observed``).
    source : str
        Citation: paper, section, equation.
    notes : str
        What the source does not state and what was chosen here; every such
        choice is marked ``[choice]``.
    """

    name: str
    model: Model
    params: Mapping[str, float]
    x0: Mapping[str, float]
    t0: float
    t: np.ndarray
    sigma: float | Mapping[str, float]
    source: str
    notes: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ModelDefinitionError(f"ZooEntry name: expected a non-empty string, got {self.name!r}")
        where = f"zoo entry {self.name!r}"
        if not isinstance(self.model, Model):
            raise ModelDefinitionError(
                f"{where}: model must be an odeinfer Model, got {type(self.model).__name__}"
            )
        object.__setattr__(self, "params", _named_values(where, "params", self.params, self.model.params))
        object.__setattr__(self, "x0", _named_values(where, "x0", self.x0, self.model.states))
        object.__setattr__(self, "t0", _finite_float(where, "t0", self.t0))
        object.__setattr__(self, "t", _times(where, self.t, self.t0))
        object.__setattr__(self, "sigma", _sigma(where, self.sigma, self.model.observed))
        for field_name in ("source", "notes"):
            if not isinstance(getattr(self, field_name), str):
                raise ModelDefinitionError(
                    f"{where}: {field_name} must be a string, got {type(getattr(self, field_name)).__name__}"
                )
        if not self.source.strip():
            raise ModelDefinitionError(f"{where}: source is empty; cite the paper and section")

    def params_array(self) -> np.ndarray:
        """True parameter values as a new float64 array, in ``model.params`` order, shape (n_params,)."""
        return np.array([self.params[p] for p in self.model.params], dtype=np.float64)

    def x0_array(self) -> np.ndarray:
        """Initial state as a new float64 array, in ``model.states`` order, shape (n_states,)."""
        return np.array([self.x0[s] for s in self.model.states], dtype=np.float64)

    def sigma_array(self) -> np.ndarray:
        """Noise sd per observed state, in ``model.observed`` order, shape (n_observed,)."""
        if isinstance(self.sigma, Mapping):
            return np.array([self.sigma[s] for s in self.model.observed], dtype=np.float64)
        return np.full(len(self.model.observed), self.sigma, dtype=np.float64)

    def __repr__(self):
        return (f"ZooEntry({self.name!r}, states={list(self.model.states)}, params={dict(self.params)}, "
                f"x0={dict(self.x0)}, t0={self.t0}, t=[{self.t[0]:g} .. {self.t[-1]:g}] ({self.t.size} points), "
                f"sigma={self.sigma if not isinstance(self.sigma, Mapping) else dict(self.sigma)})")


def _finite_float(where, argument, value):
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ModelDefinitionError(f"{where}: {argument} must be a real number, got {value!r}") from None
    if not math.isfinite(out):
        raise ModelDefinitionError(f"{where}: {argument} must be finite, got {value!r}")
    return out


def _named_values(where, argument, values, names):
    if not isinstance(values, Mapping):
        raise ModelDefinitionError(
            f"{where}: {argument} must be a dict {{name: value}} over {list(names)}, got {type(values).__name__}"
        )
    missing = [n for n in names if n not in values]
    extra = [k for k in values if k not in names]
    if missing or extra:
        raise ModelDefinitionError(
            f"{where}: {argument} must give exactly {list(names)} (missing: {missing}, unknown: {extra})"
        )
    return MappingProxyType({n: _finite_float(where, f"{argument}[{n!r}]", values[n]) for n in names})


def _times(where, t, t0):
    arr = np.array(t, dtype=np.float64, copy=True)
    if arr.ndim != 1 or arr.size == 0:
        raise ModelDefinitionError(f"{where}: t must be a non-empty 1-d array of times, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ModelDefinitionError(f"{where}: t must be finite")
    if np.any(np.diff(arr) <= 0):
        raise ModelDefinitionError(f"{where}: t must be strictly increasing")
    if arr[0] < t0:
        raise ModelDefinitionError(f"{where}: t starts at {arr[0]:g}, before t0 = {t0:g}; times must be >= t0")
    arr.flags.writeable = False
    return arr


def _sigma(where, sigma, observed):
    if isinstance(sigma, Mapping):
        values = _named_values(where, "sigma", sigma, observed)
        bad = [k for k, v in values.items() if v <= 0]
    else:
        values = _finite_float(where, "sigma", sigma)
        bad = [] if values > 0 else ["sigma"]
    if bad:
        raise ModelDefinitionError(f"{where}: sigma must be > 0 (offending: {bad})")
    return values


# name -> (module, function); the modules are imported on first use.
_ENTRIES: dict[str, tuple[str, str]] = {
    "lotka_volterra": ("odeinfer.zoo.classic", "lotka_volterra"),
    "population": ("odeinfer.zoo.seed000", "population"),
    "lorenz": ("odeinfer.zoo.seed000", "lorenz"),
    "activator_inhibitor": ("odeinfer.zoo.seed000", "activator_inhibitor"),
    "alpha_pinene": ("odeinfer.zoo.seed001", "alpha_pinene"),
    "riccati": ("odeinfer.zoo.seed001", "riccati"),
    "fitzhugh_nagumo": ("odeinfer.zoo.classic", "fitzhugh_nagumo"),
    "sir": ("odeinfer.zoo.classic", "sir"),
    "linear_decay": ("odeinfer.zoo.classic", "linear_decay"),
}

# delay differential equations (entries are DDEZooEntry, see odeinfer.zoo.dde)
_DDE_ENTRIES: dict[str, tuple[str, str]] = {
    "delay_exponential_decay": ("odeinfer.zoo.dde", "delay_exponential_decay"),
    "logistic_delay": ("odeinfer.zoo.dde", "logistic_delay"),
    "enso": ("odeinfer.zoo.dde", "enso"),
    "cheyne_stokes": ("odeinfer.zoo.dde", "cheyne_stokes"),
    "hiv": ("odeinfer.zoo.dde", "hiv"),
    "nicholson_blowflies": ("odeinfer.zoo.dde", "nicholson_blowflies"),
}
_KINDS = ("ode", "dde", "all")


def available(kind: str = "ode") -> tuple[str, ...]:
    """Names of the zoo's entries, in a fixed order.

    Parameters
    ----------
    kind : {"ode", "dde", "all"}, default "ode"
        ODE entries (:class:`ZooEntry`), delay entries
        (:class:`~odeinfer.zoo.dde.DDEZooEntry`), or both.

    Examples
    --------
    >>> from odeinfer import zoo
    >>> "lorenz" in zoo.available()
    True
    """
    if kind not in _KINDS:
        raise ModelDefinitionError(f"zoo.available: kind must be one of {list(_KINDS)}, got {kind!r}")
    if kind == "ode":
        return tuple(_ENTRIES)
    if kind == "dde":
        return tuple(_DDE_ENTRIES)
    return tuple(_ENTRIES) + tuple(_DDE_ENTRIES)


def get(name: str) -> ZooEntry:
    """The zoo entry called ``name``, with its default settings.

    Parameters
    ----------
    name : str
        One of :func:`available`. Entries with options (``riccati(width=...)``)
        are returned with their defaults; call the entry function for the others.

    Raises
    ------
    ModelDefinitionError
        If ``name`` is not a registered entry; the message lists the names and
        suggests the closest one.

    Examples
    --------
    >>> from odeinfer import zoo
    >>> zoo.get("lorenz").model.states
    ('x1', 'x2', 'x3')
    """
    if not isinstance(name, str):
        raise ModelDefinitionError(
            f"zoo.get: name must be a string, got {type(name).__name__}; available: {list(_ENTRIES)}"
        )
    try:
        module, function = _ENTRIES[name] if name in _ENTRIES else _DDE_ENTRIES[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_ENTRIES) + list(_DDE_ENTRIES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ModelDefinitionError(
            f"zoo.get: no entry named {name!r}; available: {list(_ENTRIES)}, delay models: "
            f"{list(_DDE_ENTRIES)}.{hint}"
        ) from None
    return getattr(importlib.import_module(module), function)()
