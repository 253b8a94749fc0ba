"""The estimator contract: ``Estimator(config).fit(model, data, start=..., fixed=...) -> Estimate``.

Every estimator is a frozen dataclass of its configuration (validated at
construction) deriving from :class:`Estimator`. ``fit`` validates the inputs
once through :func:`prepare` (which never mutates the model, the data or the
start values), runs the numerical work, and returns an
:class:`~odeinfer.results.Estimate` built with :func:`make_estimate`.
"""

from __future__ import annotations

import abc
import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

import numpy as np
import sympy as sp

from odeinfer.data import Data, Experiments, as_experiments
from odeinfer.data.experiments import refuse_steady_state
from odeinfer.errors import DataError, InputError, ModelDefinitionError, OdeinferWarning
from odeinfer.model import CompiledModel, Model
from odeinfer.results import Estimate

__all__ = ["Estimator", "Problem", "prepare", "make_estimate", "IdentifiabilityWarning", "OverflowWarning",
           "EstimationError", "check_log_noise_data", "check_data_scale", "finite_values"]


class IdentifiabilityWarning(OdeinferWarning):
    """The Jacobian of the estimating equations is (nearly) rank deficient: some parameters are
    not identifiable from these data; their standard errors are reported as NaN. Also: a trajectory
    fit's parameter ran away along a flat direction (its magnitude grew by 1e3 or more from its start
    and the data cannot tell it from twice its value; ``extras["runaway"]``)."""


class OverflowWarning(OdeinferWarning):
    """The objective, the estimate or its covariance overflowed float64 (not finite): the estimate
    is reported as ``"failed"``; rescale the data or the parameters."""


class EstimationError(ModelDefinitionError):
    """The estimator cannot be applied to this model/data combination (raised before any work)."""


@dataclass(frozen=True)
class Problem:
    """Validated inputs of one fit.

    Attributes
    ----------
    model : Model
    compiled : CompiledModel
    experiments : Experiments
        The data, as a sequence of experiments (a single Data becomes one experiment).
    free : tuple of str
        Names of the model parameters to estimate (model order).
    fixed : dict
        Model parameters held fixed, name -> value.
    start : numpy.ndarray (n_free,)
        Starting values of the free parameters (NaN where none was given).
    x0 : dict or None
        Known initial states, ``{state: value}``, if given.
    """

    model: Model
    compiled: CompiledModel
    experiments: Experiments
    free: tuple
    fixed: dict
    start: np.ndarray
    x0: dict | None

    @property
    def free_index(self) -> np.ndarray:
        return np.array([self.model.params.index(n) for n in self.free], dtype=np.int64)

    def full_params(self, theta_free) -> np.ndarray:
        """All model parameters (model order) from the free ones and the fixed values."""
        p = np.empty(self.model.n_params)
        for i, name in enumerate(self.model.params):
            p[i] = self.fixed[name] if name in self.fixed else np.nan
        p[self.free_index] = theta_free
        return p


def _check_finite(argument, values: dict, allow_nan: bool, hint: str) -> dict:
    """Refuse infinite values (and NaN unless ``allow_nan``: NaN then means "no value")."""
    for k, v in values.items():
        if math.isinf(v) or (math.isnan(v) and not allow_nan):
            expected = "a finite number (or NaN for none)" if allow_nan else "a finite number"
            raise InputError(f"{argument}[{k!r}]: expected {expected}, got {v!r}; {hint.format(name=k)}")
    return values


_FINITE_HINT = {
    "fixed": "give a finite value, or leave {name!r} free (drop it from fixed=)",
    "start": "give a finite starting value, or leave {name!r} out of start= where the estimator can do without",
    "x0": "give a finite initial state, or leave {name!r} out of x0=",
}


def _values_by_name(argument, values, names, allowed, *, allow_nan=None):
    """A dict name -> float from a mapping, an Estimate or a sequence in ``names`` order.

    Infinite values are refused with an :class:`InputError`, and NaN too unless ``allow_nan``
    (default: NaN means "no value" for ``start`` and ``x0``, never for ``fixed``).
    """
    return finite_values(argument, _values_by_name_raw(argument, values, names, allowed), allow_nan=allow_nan)


def finite_values(argument, values: dict, *, allow_nan=None) -> dict:
    """``values`` (name -> float) after refusing infinite values, and NaN unless ``allow_nan``
    (default: NaN means "no value" for ``start`` and ``x0``, never for ``fixed``).

    Raises
    ------
    InputError
        ``"{argument}['name']: expected a finite number, got nan; ..."``.
    """
    if allow_nan is None:
        allow_nan = argument != "fixed"
    return _check_finite(argument, values, allow_nan, _FINITE_HINT.get(argument, "give a finite value"))


def _values_by_name_raw(argument, values, names, allowed):
    if values is None:
        return {}
    if isinstance(values, Estimate):
        return {n: float(v) for n, v in zip(values.names, values.values) if n in allowed}
    if isinstance(values, Mapping):
        unknown = [k for k in values if k not in allowed]
        if unknown:
            raise ModelDefinitionError(
                f"{argument}: {unknown} are not among the model's names {list(allowed)}"
            )
        out = {}
        for k, v in values.items():
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                raise ModelDefinitionError(f"{argument}[{k!r}]: expected a number, got {v!r}") from None
        return out
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size != len(names):
        raise ModelDefinitionError(
            f"{argument}: expected {len(names)} values (for {list(names)}), got {arr.size}; "
            "or pass a dict {name: value}"
        )
    return dict(zip(names, arr.tolist()))


def _refuse_observables(model, estimator):
    """Estimators other than the trajectory ones (Embedding, Simultaneous) read states from the data:
    refuse observables, naming them."""
    states = {sp.Symbol(s, real=True) for s in model.states}
    direct = [o.name for o in model.observables if o.expr in states and o.noise.distribution == "normal"
              and o.noise.scale in ("lin", "log")]
    other = [o.name for o in model.observables if o.name not in direct]
    fix = ("fit it with oi.Embedding() or oi.Simultaneous() (maximum likelihood with the observables and noise "
           "models)")
    if other:
        raise EstimationError(
            f"{estimator} matches states smoothed from the data, but the observables {other} of model {model.name!r} are "
            f"not states measured directly; {fix}")
    raise EstimationError(
        f"{estimator} estimates the noise of directly observed states itself: the observables {direct} are states, so "
        f"declare them with @oi.model(..., observed=[...], noise='additive' or 'log') instead of model.observe(), "
        f"or {fix}")


def likelihood_problem(est, model, data, fixed, x0, *, defaults, how, build):
    """The :class:`~odeinfer.FitProblem` of a trajectory estimator's likelihood fit (``model`` a
    FitProblem or a :class:`~odeinfer.petab.PetabProblem`, or a model with observables: ``build(model, data, fixed, x0)``), or None for a model
    without observables. ``defaults``: ``((setting, default), ...)`` of ``est`` that a likelihood fit
    does not use (a changed one is refused); ``how``: the words that say what the fit uses instead."""
    from odeinfer.likelihood import FitProblem
    from odeinfer.petab.tables import PetabProblem

    if isinstance(model, PetabProblem):
        model = model.problem
    if isinstance(model, FitProblem):
        if data is not None or fixed or x0 is not None:
            raise InputError("fit: a FitProblem carries its data, fixed parameters and initial states; call "
                             "fit(problem, start=...) without data, fixed or x0")
    elif not getattr(model, "observables", ()):
        return None
    odd = [f"{k}={getattr(est, k)!r}" for k, v in defaults if getattr(est, k) != v]
    if odd:
        raise InputError(f"{', '.join(odd)}: a model with observables is fitted by maximum likelihood with its noise "
                         f"models, {how}; drop these settings")
    if isinstance(model, FitProblem):
        return model
    if data is None:
        raise InputError("data: expected Data or Experiments with the observables' measurements, got None")
    return build(model, data, fixed, x0)


def prepare(model, data, *, start=None, fixed=None, x0=None, require_all_observed=False,
            estimator="estimator") -> Problem:
    """Validate ``fit`` inputs and compile the model; raises before any numerical work.

    Parameters
    ----------
    model : Model
    data : Data or Experiments
    start : dict, array-like (n_free,), Estimate or None
        Starting values of the free parameters (by name, or in model order of the free ones).
    fixed : dict, optional
        Parameters held fixed, name -> value.
    x0 : dict or array-like (n_states,), optional
        Known initial state.
    require_all_observed : bool
        Raise an :class:`EstimationError` if a state is never observed (matching
        estimators need every state).
    estimator : str
        Name used in error messages.
    """
    if not isinstance(model, Model):
        raise TypeError(f"model: expected an odeinfer Model (from @oi.model), got {type(model).__name__}")
    if not isinstance(data, (Data, Experiments)):
        raise DataError(f"data: expected oi.Data or oi.Experiments, got {type(data).__name__}")
    if model.observables and estimator != "Embedding":
        _refuse_observables(model, estimator)
    exps = as_experiments(data)
    refuse_steady_state(exps, estimator)
    for d in exps:
        d.check_states(model.states)
    if require_all_observed:
        seen = set()
        for d in exps:
            seen |= {s for k, s in enumerate(d.states) if d.mask[:, k].any()}
        missing = [s for s in model.states if s not in seen]
        if missing:
            raise EstimationError(
                f"{estimator} needs every state observed, but {missing} are never observed in the data. "
                "Use a trajectory estimator (oi.Embedding or oi.Simultaneous), which handles partial observation"
            )
    check_log_noise_data(model, exps)
    check_data_scale(exps)
    fixed_d = _values_by_name("fixed", fixed, model.params, model.params)
    free = tuple(n for n in model.params if n not in fixed_d)
    if not free:
        raise ModelDefinitionError("fixed: every parameter is fixed; leave at least one free")
    start_d = _values_by_name("start", start, free, model.params)
    start_arr = np.array([start_d.get(n, np.nan) for n in free])
    x0_d = None if x0 is None else _values_by_name("x0", x0, model.states, model.states)
    return Problem(model, model.compile(), exps, free, fixed_d, start_arr, x0_d)


def _named(experiments):
    """``(name, Data)`` pairs; unnamed experiments are ``experiment_<i>``."""
    names = experiments.names if isinstance(experiments, Experiments) else [d.name for d in experiments]
    return [(n if n is not None else f"experiment_{e}", d) for e, (n, d) in enumerate(zip(names, experiments))]


def _observed_columns(model, exps):
    """``(experiment name, state, observed values)`` of the model's observed states, per experiment."""
    for name, d in _named(exps):
        for c, s in enumerate(d.states):
            if s in model.observed:
                yield name, s, np.asarray(d.y)[np.asarray(d.mask)[:, c], c]


def check_log_noise_data(model, experiments) -> None:
    """Refuse observations ``<= 0`` of a model declared with ``noise="log"`` (shared by every estimator).

    Raises
    ------
    DataError
        Naming the experiment, the state, how many values and the smallest one.
    """
    if model.observation.noise != "log":
        return
    for name, s, v in _observed_columns(model, experiments):
        bad = v[v <= 0]
        if bad.size:
            raise DataError(
                f"data: state {s!r} of experiment {name!r} has {bad.size} observations <= 0, but the model's noise "
                f"is 'log' (log y = log x + e needs positive data; the smallest is {float(bad.min()):g}); "
                "drop those values (set them to NaN) or declare the model with "
                "model.with_observation(noise='additive')")


#: Observations beyond this magnitude make sums of squares overflow float64 (``sqrt(max) / 1e4``).
_MAX_DATA_SCALE = math.sqrt(np.finfo(float).max) / 1e4


def check_data_scale(experiments) -> None:
    """Refuse observations so large that least-squares sums overflow float64 (shared by every estimator).

    Raises
    ------
    DataError
        Naming the experiment, the state and the largest magnitude, suggesting a rescaling.
    """
    for name, d in _named(experiments):
        y = np.abs(np.where(np.asarray(d.mask), np.asarray(d.y), 0.0))
        if y.size and y.max() > _MAX_DATA_SCALE:
            c = int(np.argmax(y.max(axis=0)))
            big = float(y[:, c].max())
            unit = 10.0 ** math.floor(math.log10(big))
            raise DataError(
                f"data: state {d.states[c]!r} of experiment {name!r} reaches |y| = {big:.3g}; squares of such values "
                f"overflow float64 (largest {np.finfo(float).max:.3g}), so no objective, Jacobian or covariance could "
                f"be computed (numerical overflow). Rescale the data (change units, e.g. divide by {unit:.0e}) so "
                f"that |y| stays below {_MAX_DATA_SCALE:.3g}")


def _clip_to_bounds(names, values, bounds):
    """Values clipped to ``bounds`` (tuples ``(name, lower, upper)``; ``name`` or ``name@experiment``)."""
    values = np.array(values, dtype=float)
    for name, lo, hi in bounds or ():
        for k, n in enumerate(names):
            if (n == name or n.split("@")[0] == name) and np.isfinite(values[k]):
                values[k] = min(max(values[k], lo), hi)
    return values


def _overflow(values, cov, cost) -> bool:
    """Whether the estimate, its objective or its covariance is not finite in a way only overflow explains
    (an infinite cost or covariance entry, or a non-finite value)."""
    if not np.all(np.isfinite(values)) or (cost is not None and np.isinf(cost)):
        return True
    return cov is not None and bool(np.isinf(np.asarray(cov, float)).any())


def make_estimate(estimator: "Estimator", problem: Problem, names, values, cov, status, *, t_start,
                  **kwargs) -> Estimate:
    """Build the :class:`Estimate`, adding ``fixed`` and ``provenance``.

    The values are clipped to the estimator's ``bounds`` (a configuration field, when it has one):
    an optimum on a bound can come back a rounding step outside it (``exp(log(1e-5)) < 1e-5``).
    A "converged" estimate whose values, objective or covariance overflowed (not finite) becomes
    "failed" with an :class:`OverflowWarning`.
    """
    import odeinfer

    if "bounds" in {f.name for f in fields(estimator)}:
        values = _clip_to_bounds(names, values, estimator.bounds)
    if status == "converged" and _overflow(values, cov, kwargs.get("cost")):
        msg = (f"{type(estimator).__name__}: the estimate, its objective or its covariance is not finite (numerical "
               "overflow); rescale the data (change units) or the parameters so that the values stay moderate")
        warnings.warn(msg, OverflowWarning, stacklevel=3)
        status = "failed"
        kwargs["message"] = msg
        kwargs["warnings"] = tuple(kwargs.get("warnings", ())) + (msg,)

    prov = {
        "odeinfer": odeinfer.__version__,
        "estimator": type(estimator).__name__,
        "config": {f.name: repr(getattr(estimator, f.name)) for f in fields(estimator)},
        "data": [d.name for d in problem.experiments],
        "elapsed_s": time.perf_counter() - t_start,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    prov.update(kwargs.pop("provenance", {}))
    return Estimate(type(estimator).__name__, problem.model, tuple(names), np.asarray(values, float), cov, status,
                    fixed=dict(problem.fixed), provenance=prov, **kwargs)


def norm_bounds(bounds):
    """Config helper: ``{name: (lower, upper)}`` -> tuple of ``(name, lower, upper)`` (None stays None)."""
    if bounds is None:
        return None
    if isinstance(bounds, tuple) and all(isinstance(b, tuple) and len(b) == 3 for b in bounds):
        return bounds
    if not isinstance(bounds, Mapping):
        raise InputError(f"bounds: expected a dict {{name: (lower, upper)}}, got {type(bounds).__name__}")
    out = []
    for k, v in bounds.items():
        try:
            a, b = (float(x) for x in v)
        except (TypeError, ValueError):
            raise InputError(f"bounds[{k!r}]: expected (lower, upper), got {v!r}") from None
        if math.isnan(a) or math.isnan(b) or not a < b:
            raise InputError(f"bounds[{k!r}]: expected lower < upper, got ({a}, {b})")
        out.append((str(k), a, b))
    return tuple(out)


def norm_sigma(sigma):
    """Config helper: ``"pooled"``, ``"per_state"`` or ``{state: sd}`` (-> tuple of ``(state, sd)``)."""
    if isinstance(sigma, Mapping):
        items = []
        for k, v in sigma.items():
            try:
                v = float(v)
            except (TypeError, ValueError):
                v = float("nan")
            if not (math.isfinite(v) and v > 0):
                raise InputError(f"sigma[{k!r}]: expected a positive noise sd, got {sigma[k]!r}")
            items.append((str(k), v))
        return tuple(items)
    if not (isinstance(sigma, tuple) or sigma in ("pooled", "per_state")):
        raise InputError(f"sigma: expected 'pooled', 'per_state' or a dict {{state: sd}}, got {sigma!r}")
    return sigma


class Estimator(abc.ABC):
    """Abstract base of every estimator (subclasses are frozen dataclasses of their settings)."""

    @abc.abstractmethod
    def fit(self, model: Model, data, *, start=None, fixed=None, **kwargs) -> Estimate:
        """Estimate the parameters of ``model`` from ``data``; never mutates its inputs."""

    def config(self) -> dict:
        """The configuration as a dict."""
        return asdict(self)
