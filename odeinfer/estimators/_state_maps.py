"""Matching estimators on models with observables: each observable an invertible function of one state.

The matching estimators (:class:`~odeinfer.OrthogonalConditions`, :class:`~odeinfer.GradientMatching`,
the Newton family) smooth the states from the data; they never integrate the model through an
observation function. They take a model with observables (:meth:`odeinfer.Model.observe`) when every
observable measures one state through a known, invertible map:

* ``h(x_i)`` depends on one state ``x_i`` only (not on ``t``), and every parameter in it is fixed
  (``fixed={"scale": 2.5}``); e.g. ``"x"``, ``"log(x)"``, ``"2.5*x + 1"``, ``"scale*x"``;
* the noise is :class:`~odeinfer.Normal` on the ``"lin"``, ``"log"`` or ``"log10"`` scale with a sd
  that does not depend on the observable's value (a number or parameters: homoscedastic on the noise
  scale, where the spline is fitted); the sd need not be known (the smoother measures it);
* on the noise scale ``z = g(h(x))`` (``g``: identity, ``log`` or ``log10``) the equation
  ``z = g(h(x))`` has exactly one real solution ``x = phi(z)`` (sympy) for every measurement, and
  ``g(h(x))`` is strictly monotone over the range of the states so recovered;
* every state is measured by exactly one observable; experiments carry no condition other than a
  start time ``t0`` (no parameter overrides, initial states, doses or pre-equilibration).

The smoothing is then done on the noise scale, where the noise is additive and homoscedastic: the
proxy of ``x_i`` is ``phi(s(t))`` with ``s`` the regression spline of ``z``, and its derivative and its
derivatives with respect to the spline coefficients follow by the chain rule with ``phi'``, ``phi''``
from sympy (:class:`~odeinfer.estimators._log_proxy.MappedSplineFit`; ``noise="log"`` on a state is the
case ``phi = exp``). The Newton family smooths ``z`` (``derivative="spline"``) and maps the rows; an
affine ``phi`` (``"2.5*x + 1"`` with linear noise) commutes with every derivative scheme, so the
difference stencils and their delta-method covariance apply to the samples ``phi(z)`` unchanged.
Trajectory checks and the ``L`` scan compare on the noise scale. The estimate reports the user's
model, the fixed observable parameters in ``fixed``, the residual sd per observable in ``sigma``
and, for :class:`~odeinfer.OrthogonalConditions` and :class:`~odeinfer.GradientMatching`, each free
noise-sd parameter (an observable's sd that is one observable parameter) after the model's
parameters, valued at the pooled residual sd with a NaN standard error: a start, so that
``oi.Embedding().fit(model, data, start=estimate, fixed=...)`` starts every parameter (the quick
start). The parametric bootstrap is not offered for these estimates (it would simulate observables).

Everything else is refused by :func:`state_view` with an :class:`~odeinfer.estimators.base.EstimationError`
naming the observables it cannot use, before any work; the trajectory estimators
(:class:`~odeinfer.Embedding`) fit any observable by maximum likelihood.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import sympy as sp

from odeinfer.errors import DataError

__all__ = ["StateMap", "StateView", "state_view", "state_inputs", "EXP_MAP"]

_X = sp.Symbol("x_state", real=True)
_Z = sp.Symbol("z_noise", real=True)
_EMBEDDING = ("fit it with oi.Embedding() (maximum likelihood with any observables and noise models), or observe "
              "the states directly")


@dataclass(frozen=True, eq=False)
class ScalarMap:
    """``x = phi(z)`` with ``phi'``, ``phi''`` and the forward map ``z = zeta(x)`` (numpy, from sympy)."""

    phi: sp.Expr    # in _Z
    zeta: sp.Expr   # in _X

    def __post_init__(self):
        d1 = sp.diff(self.phi, _Z)
        d2 = sp.diff(d1, _Z)
        set_ = object.__setattr__
        set_(self, "_f", sp.lambdify(_Z, [self.phi, d1, d2], modules="numpy"))
        set_(self, "_g", sp.lambdify(_X, [self.zeta, sp.diff(self.zeta, _X)], modules="numpy"))
        set_(self, "affine", sp.simplify(d2) == 0)
        set_(self, "identity", sp.simplify(self.phi - _Z) == 0)

    def _eval(self, fn, v, k):
        v = np.asarray(v, dtype=float)
        with np.errstate(all="ignore"):
            out = np.asarray(fn(v)[k])
        if np.iscomplexobj(out):  # a complex branch (e.g. z**(1/3) of z < 0) has no real value
            out = np.where(out.imag == 0, out.real, np.nan)
        return np.broadcast_to(out.astype(float), v.shape).copy()

    def x(self, z):
        """``phi(z)``: the state from the noise-scale value."""
        return self._eval(self._f, z, 0)

    def dx(self, z):
        """``phi'(z)``."""
        return self._eval(self._f, z, 1)

    def d2x(self, z):
        """``phi''(z)``."""
        return self._eval(self._f, z, 2)

    def z(self, x):
        """``zeta(x) = g(h(x))``: the noise-scale value of state ``x``."""
        return self._eval(self._g, x, 0)

    def dz(self, x):
        """``zeta'(x)``."""
        return self._eval(self._g, x, 1)


#: ``x = exp(z)``: a state with log-normal noise (``noise="log"``).
EXP_MAP = ScalarMap(sp.exp(_Z), sp.log(_X))


@dataclass(frozen=True, eq=False)
class StateMap:
    """How observable ``observable`` (noise scale ``scale``) measures state ``state``."""

    observable: str
    state: str
    scale: str
    text: str
    fn: ScalarMap

    @property
    def affine(self) -> bool:
        return self.fn.affine

    @property
    def identity(self) -> bool:
        return self.fn.identity


@dataclass(frozen=True)
class StateView:
    """A model with observables seen as the matching estimators need it.

    Attributes
    ----------
    source : Model
        The user's model (with observables); the estimate reports it.
    model : Model
        The same right-hand side, every state observed directly, additive noise.
    data : Data or Experiments
        One column per state, on the state scale: ``phi(z)`` of each measurement.
    maps : dict of str to StateMap
        Per state, the observable measuring it (the identity map too).
    fixed_obs : dict
        The observables' fixed parameters (reported in the estimate's ``fixed``).
    fixed : dict or None
        ``fixed`` without the observable parameters (for the model's ``prepare``).
    """

    source: object
    model: object
    data: object
    maps: dict
    fixed_obs: dict
    fixed: dict | None

    @property
    def mapped(self) -> dict:
        """The maps that are not the identity, ``{state: ScalarMap}``."""
        return {s: m.fn for s, m in self.maps.items() if not m.identity}

    @property
    def nonlinear(self) -> list:
        return [m for m in self.maps.values() if not m.affine]

    def sigma(self, by_state) -> dict:
        """``{state: sd}`` -> ``{observable: sd}`` (the sd is on the observable's noise scale)."""
        return {self.maps[s].observable: v for s, v in by_state.items() if s in self.maps}

    def noise_starts(self, proxies) -> dict:
        """``{parameter: value}`` for the observables' noise sds that are one free observable parameter:
        the smoothers' residual sd on the noise scale, pooled (by the number of measurements) over the
        experiments and the observables sharing it; a start for a likelihood fit, not an estimate with
        a standard error."""
        by_param = {}
        for o in self.source.observables:
            name = str(o.sigma_expr)
            if not (o.sigma_expr.is_Symbol and name in self.source.obs_params and name not in self.fixed_obs):
                continue
            state = next((m.state for m in self.maps.values() if m.observable == o.name), None)
            for pr in proxies:
                f = pr[state]
                ss, n = by_param.get(name, (0.0, 0))
                by_param[name] = (ss + f.nobs * f.sigma ** 2, n + f.nobs)
        return {k: math.sqrt(ss / n) for k, (ss, n) in by_param.items() if n > 0}

    def extend(self, names, values, cov, proxies):
        """``(names, values, cov)`` with the :meth:`noise_starts` appended (NaN covariance: no standard
        error), so that ``oi.Embedding().fit(model, data, start=estimate)`` starts every parameter."""
        extra = self.noise_starts(proxies)
        if not extra:
            return names, values, cov
        k, m = len(names), len(extra)
        if cov is not None:
            full = np.full((k + m, k + m), np.nan)
            full[:k, :k] = cov
            cov = full
        return tuple(names) + tuple(extra), np.concatenate([values, list(extra.values())]), cov

    def report(self, problem):
        """``problem`` as the estimate reports it: the user's model, its fixed observable parameters."""
        return replace(problem, model=self.source, fixed={**problem.fixed, **self.fixed_obs})


def _fixed_dict(fixed, model, estimator):
    from odeinfer.estimators.base import EstimationError, _values_by_name

    if fixed is None:
        return {}
    if not isinstance(fixed, dict):
        raise EstimationError(f"fixed: {estimator} on a model with observables takes a dict {{name: value}} (model "
                              f"and observable parameters), got {type(fixed).__name__}")
    return _values_by_name("fixed", fixed, model.full_params, model.full_params)


def _refuse(estimator, model, bad):
    from odeinfer.estimators.base import EstimationError

    listed = "; ".join(f"{n!r} ({why})" for n, why in bad)
    raise EstimationError(
        f"{estimator} matches states smoothed from the data, so every observable must be an invertible function of "
        f"one state with a known map and normal noise whose sd does not depend on the observable, the states or t; it "
        f"cannot use the "
        f"observables of model {model.name!r}: {listed}. {_EMBEDDING[0].upper()}{_EMBEDDING[1:]}")


def _candidate_maps(o, model, fixed, estimator):
    """``(state, [phi candidates], zeta)`` of observable ``o``, or ``(None, why)``."""
    states = {sp.Symbol(s, real=True): s for s in model.states}
    used = o.expr.free_symbols
    on = [states[s] for s in used if s in states]
    if sp.Symbol("t", real=True) in used:
        return None, "depends on t"
    if len(on) != 1:
        return None, (f"depends on {len(on)} states {sorted(on)}" if on else "depends on no state")
    params = sorted(str(s) for s in used if s not in states)
    free = [p for p in params if p not in fixed]
    if free:
        return None, f"uses the parameters {free}, which are not fixed: pass fixed={{{free[0]!r}: value}}"
    nz = o.noise
    if nz.distribution != "normal":
        return None, f"{nz.distribution} noise: the smoother assumes normal noise"
    if o.symbol in o.sigma_expr.free_symbols:
        return None, f"its noise sd {nz.sigma!r} depends on the observable's value (not homoscedastic)"
    moving = sorted(str(s) for s in o.sigma_expr.free_symbols if s in states or s == sp.Symbol("t", real=True))
    if moving:
        return None, f"its noise sd {nz.sigma!r} depends on {moving} (not homoscedastic)"
    subs = {sp.Symbol(p, real=True): fixed[p] for p in params}
    h = o.expr.xreplace(subs).xreplace({sp.Symbol(on[0], real=True): _X})
    zeta = {"lin": h, "log": sp.log(h), "log10": sp.log(h) / sp.log(10)}[nz.scale]
    try:
        sols = sp.solve(sp.Eq(zeta, _Z), _X, dict=False)
    except (NotImplementedError, ValueError, TypeError):
        sols = []
    sols = [s for s in sols if isinstance(s, sp.Expr) and _X not in s.free_symbols]
    if not sols:
        return None, f"sympy finds no inverse of {o.text!r} on the {nz.scale} noise scale"
    return on[0], sols, zeta


def _noise_values(d, j, scale, where):
    """Measurements of column ``j`` on the noise scale (log / log10 need positive values)."""
    y = np.asarray(d.y, float)[:, j]
    ok = np.asarray(d.mask)[:, j]
    if scale != "lin":
        bad = np.nonzero(ok & ~(y > 0))[0]
        if bad.size:
            rows = ", ".join(str(int(i)) for i in bad[:5]) + (" ..." if bad.size > 5 else "")
            raise DataError(f"data: {where} has {bad.size} measurements <= 0 (rows {rows}), but its noise is on the "
                            f"{scale} scale, which needs positive data; drop those values (set them to NaN) or use a "
                            "'lin' noise scale")
        with np.errstate(all="ignore"):
            y = np.where(ok, np.log(np.where(ok, y, 1.0)) / (1.0 if scale == "log" else np.log(10.0)), np.nan)
    return np.where(ok, y, np.nan), ok


def _choose(o, state, sols, zeta, zs, estimator, model):
    """The unique inverse that reproduces every measurement, checked monotone on the recovered range."""
    picks = []
    for s in sols:
        fn = ScalarMap(s, zeta)
        x = fn.x(zs)
        if np.all(np.isfinite(x)) and np.allclose(fn.z(x), zs, rtol=1e-8, atol=1e-10):
            picks.append(fn)
    if len(picks) != 1:
        why = ("no real inverse reproduces the measurements" if not picks else
               f"{len(picks)} inverses reproduce the measurements (not one-to-one on them)")
        _refuse(estimator, model, [(o.name, f"{o.text!r}: {why}")])
    fn = picks[0]
    if zs.size:
        x = fn.x(zs)
        grid = np.concatenate([x, np.linspace(x.min(), x.max(), 201)])
        slope = fn.dz(grid)
        if not (np.all(np.isfinite(slope)) and (np.all(slope > 0) or np.all(slope < 0))):
            _refuse(estimator, model, [(o.name, f"{o.text!r} is not strictly monotone in {state!r} over the range "
                                                f"[{x.min():.4g}, {x.max():.4g}] of the states it measures")])
    return fn


def state_view(model, data, fixed, estimator) -> StateView | None:
    """The :class:`StateView` of ``model`` and ``data`` (None for a model without observables).

    Raises
    ------
    EstimationError
        Observables the matching estimators cannot use (named, with why), states no observable
        measures, states measured twice, experiment conditions other than ``t0``.
    DataError
        Data columns that are not observables; non-positive data under log noise (rows named);
        measurements the inverse map cannot take.
    """
    from odeinfer.data import Data, Experiments, as_experiments
    from odeinfer.estimators.base import EstimationError
    from odeinfer.model.core import Observation

    if not getattr(model, "observables", ()) or not isinstance(data, (Data, Experiments)):
        return None
    fixed_all = _fixed_dict(fixed, model, estimator)
    exps = as_experiments(data)
    names = list(exps.names)
    obs = {o.name: o for o in model.observables}
    for n, d in zip(names, exps):
        unknown = [c for c in d.states if c not in obs]
        if unknown:
            raise DataError(f"data: experiment {n!r} has columns {unknown} that are not observables of model "
                            f"{model.name!r} (observables: {list(obs)}); rename the columns or add observables")
    cands, bad = {}, []
    for o in model.observables:
        r = _candidate_maps(o, model, fixed_all, estimator)
        if r[0] is None:
            bad.append((o.name, r[1]))
        else:
            cands[o.name] = r
    if bad:
        _refuse(estimator, model, bad)
    for n in names:
        c = exps.condition(n)
        if (c.params or c.x0 or c.doses or c.preequilibrate is not None):
            raise EstimationError(f"data: experiment {n!r} has a condition (parameter overrides, initial states, doses "
                                  f"or pre-equilibration); {estimator} smooths each experiment's states and cannot "
                                  f"apply it. {_EMBEDDING[0].upper()}{_EMBEDDING[1:]}")
    by_state = {}
    for name, (state, _, _) in cands.items():
        by_state.setdefault(state, []).append(name)
    twice = {s: v for s, v in by_state.items() if len(v) > 1}
    if twice:
        s, v = next(iter(twice.items()))
        raise EstimationError(f"{estimator}: state {s!r} is measured by several observables {v}; a matching estimator "
                              f"smooths one series per state. Keep one of them, or {_EMBEDDING}")
    unseen = [s for s in model.states if s not in by_state]
    if unseen:
        raise EstimationError(f"{estimator} needs every state measured, but no observable of model {model.name!r} "
                              f"measures {unseen}. Use a trajectory estimator: {_EMBEDDING}")
    # noise-scale values per experiment and column, then the unique inverse on all of them
    zcols = []
    for n, d in zip(names, exps):
        zcols.append([_noise_values(d, j, obs[c].noise.scale, f"observable {c!r} of experiment {n!r}")
                      for j, c in enumerate(d.states)])
    maps = {}
    for name, (state, sols, zeta) in cands.items():
        zs = np.concatenate([z[ok] for d, cols in zip(exps, zcols) for c, (z, ok) in zip(d.states, cols) if c == name]
                            or [np.empty(0)])
        o = obs[name]
        maps[state] = StateMap(name, state, o.noise.scale, o.text, _choose(o, state, sols, zeta, zs, estimator, model))
    by_obs = {m.observable: m for m in maps.values()}
    datas = []
    for n, d, cols in zip(names, exps, zcols):
        y = np.column_stack([by_obs[c].fn.x(z) for c, (z, ok) in zip(d.states, cols)]) if cols else np.asarray(d.y)
        t0 = d.t0 if exps.condition(n).t0 is None else exps.condition(n).t0
        datas.append(Data(d.t, y, [by_obs[c].state for c in d.states], t0=t0, name=d.name, replicates=d.replicates))
    out = datas[0] if isinstance(data, Data) else Experiments(datas, names=names)
    obs_params = set(model.obs_params)
    state_model = replace(model, observables=(), obs_params=(), observation=Observation(None, "additive"))
    keep = {k: v for k, v in fixed_all.items() if k not in obs_params}
    return StateView(model, state_model, out, maps, {k: v for k, v in fixed_all.items() if k in obs_params},
                     keep or None)


def state_inputs(model, data, fixed, start, estimator):
    """``(view, model, data, fixed, start)`` for a matching estimator's ``prepare``: unchanged for a model
    without observables, else the :class:`StateView`'s model, data and fixed values, and ``start``
    without the observables' parameters (the matching estimators do not use them)."""
    from collections.abc import Mapping

    view = state_view(model, data, fixed, estimator)
    if view is None:
        return None, model, data, fixed, start
    if isinstance(start, Mapping):
        start = {k: v for k, v in start.items() if k not in model.obs_params}
    return view, view.model, view.data, view.fixed, start


def noise_scale(model, maps=None) -> dict:
    """``{state: ScalarMap}`` of the states whose noise scale is not the state itself: the
    observables' maps, or ``exp`` for the observed states of a model with ``noise="log"``."""
    if maps:
        return dict(maps)
    if model.observation.noise == "log":
        return {s: EXP_MAP for s in model.observed}
    return {}
