"""Delay differential equations from the papers: the five DDE-Find experiments
(Stephany 2024, sec. 6) and Nicholson's blowflies (Gurney, Blythe & Nisbet 1980;
orthogonal conditions, Brunel et al. 2013, sec. 6.2).

Each entry carries its model (with ``delays``), true parameter values, history
(:class:`~odeinfer.model.History`), observation times and provenance. Solve one
with ``oi.solve(oi.Problem(e.model, e.t, history=e.history, t0=e.t0), e.params)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

import numpy as np

from odeinfer import math as om
from odeinfer.errors import ModelDefinitionError
from odeinfer.model import History, Model, model

__all__ = ["DDEZooEntry", "delay_exponential_decay", "logistic_delay", "enso", "cheyne_stokes", "hiv",
           "nicholson_blowflies"]

_DDE_FIND = ("R. Stephany, \"DDE-Find: Learning Delay Differential Equations from Noisy, Limited Data\" "
             "(Cornell CAM, arXiv 2024)")
_DDE_FIND_NOTES = (
    "Protocol of the paper (spec seed-002 sec. 2.1): data at {n} equispaced times on [0, {T}]; noise level l "
    "means sigma_j = l * sd(x_true[:, j], ddof=1) per component (levels 0.1, 0.3, 0.9; noise_level holds 0.3, "
    "the level of the main tables). The paper's 'N_Data = {nd}' counts steps; its code has {n} samples "
    "including t = 0. History in relative time u = t - t0 (t0 = 0 as in the paper).")


@dataclass(frozen=True, eq=False)
class DDEZooEntry:
    """A delay model from the literature with true values, history and provenance.

    Attributes
    ----------
    name : str
    model : Model
        Has ``delays``.
    params : mapping of str to float
        True values of ``model.params`` (delays included), in that order.
    history : History
        The states on ``[t0 - max(tau), t0]`` (true history parameters in ``history.values``).
    t0 : float
        End of the history window, start of the integration.
    t : ndarray, shape (n_times,)
        Default observation times (>= t0, strictly increasing), read-only.
    noise_level : float or None
        Relative noise level of the source (sigma = level * sd of the clean
        trajectory per state, DDE-Find's convention), or None.
    sigma : float or None
        Absolute noise sd when the source gives one, else None.
    source, notes : str
    """

    name: str
    model: Model
    params: Mapping[str, float]
    history: History
    t0: float
    t: np.ndarray
    source: str
    notes: str = ""
    noise_level: float | None = None
    sigma: float | None = None

    def __post_init__(self):
        where = f"zoo entry {self.name!r}"
        if not isinstance(self.model, Model) or not self.model.delays:
            raise ModelDefinitionError(f"{where}: model must be an odeinfer Model with delays")
        if set(self.params) != set(self.model.params):
            raise ModelDefinitionError(f"{where}: params must give exactly {list(self.model.params)}")
        values = {k: float(self.params[k]) for k in self.model.params}
        if not all(math.isfinite(v) for v in values.values()):
            raise ModelDefinitionError(f"{where}: params must be finite")
        if any(values[d] <= 0 for d in self.model.delays):
            raise ModelDefinitionError(f"{where}: delays must be > 0")
        object.__setattr__(self, "params", MappingProxyType(values))
        if not isinstance(self.history, History) or self.history.n_states != self.model.n_states:
            raise ModelDefinitionError(f"{where}: history must be a History with one value per state")
        t = np.array(self.t, dtype=np.float64)
        if t.ndim != 1 or t.size == 0 or np.any(np.diff(t) <= 0) or t[0] < self.t0:
            raise ModelDefinitionError(f"{where}: t must be strictly increasing and >= t0")
        t.flags.writeable = False
        object.__setattr__(self, "t", t)
        if not self.source.strip():
            raise ModelDefinitionError(f"{where}: source is empty; cite the paper and section")

    def params_array(self) -> np.ndarray:
        """True parameter values, shape (n_params,), ``model.params`` order."""
        return np.array([self.params[p] for p in self.model.params])

    def history_params_array(self) -> np.ndarray:
        """True history parameters, shape (n_history_params,) (empty for a data-driven history)."""
        return np.array(self.history.values)

    @property
    def history_param_names(self) -> tuple[str, ...]:
        return self.history.param_names(self.model.states)

    def x0_array(self) -> np.ndarray:
        """The state at ``t0`` (the history's value there), shape (n_states,)."""
        return self.history([self.t0], t0=self.t0)[0]

    def __repr__(self):
        return (f"DDEZooEntry({self.name!r}, states={list(self.model.states)}, params={dict(self.params)}, "
                f"history={self.history!r}, t0={self.t0}, t=[{self.t[0]:g} .. {self.t[-1]:g}] ({self.t.size} points))")


# models ---------------------------------------------------------------------------------------

@cache
def _ded_model():
    @model(states=["x"], params=["theta0", "theta1", "tau"], delays=["tau"], name="delay_exponential_decay")
    def delay_exponential_decay(t, y, p):
        """x' = theta0 x(t) + theta1 x(t - tau)."""
        return {"x": p.theta0 * y.x + p.theta1 * om.lag(y.x, "tau")}

    return delay_exponential_decay


@cache
def _logistic_model():
    @model(states=["x"], params=["theta0", "theta1", "tau"], delays=["tau"], name="logistic_delay")
    def logistic_delay(t, y, p):
        """Hutchinson's delayed logistic equation x' = theta0 x(t) (1 - theta1 x(t - tau)), theta1 = 1/K."""
        return {"x": p.theta0 * y.x * (1 - p.theta1 * om.lag(y.x, "tau"))}

    return logistic_delay


@cache
def _enso_model():
    @model(states=["x"], params=["theta0", "theta1", "theta2", "tau"], delays=["tau"], name="enso")
    def enso(t, y, p):
        """Delayed-oscillator ENSO model x' = theta0 x - theta1 x^3 - theta2 x(t - tau)."""
        return {"x": p.theta0 * y.x - p.theta1 * y.x ** 3 - p.theta2 * om.lag(y.x, "tau")}

    return enso


@cache
def _cheyne_stokes_model():
    @model(states=["x"], params=["p", "V0", "alpha", "tau"], delays=["tau"], name="cheyne_stokes")
    def cheyne_stokes(t, y, p):
        """Mackey-Glass CO2 model x' = p - V0 x u / (alpha + u), u = x(t - tau)^8."""
        u = om.lag(y.x, "tau") ** 8
        return {"x": p.p - p.V0 * y.x * u / (p.alpha + u)}

    return cheyne_stokes


@cache
def _hiv_model():
    @model(states=["T_star", "V_I", "V_NI"], params=["k", "m", "delta", "c", "T0", "n_p", "N", "tau"],
           delays=["tau"], name="hiv")
    def hiv(t, y, p):
        """Nelson et al. (2000) delayed HIV model with the survival factor exp(-m tau)."""
        return {"T_star": p.k * p.T0 * om.lag(y.V_I, "tau") * om.exp(-p.m * p.tau) - p.delta * y.T_star,
                "V_I": (1 - p.n_p) * p.N * p.delta * y.T_star - p.c * y.V_I,
                "V_NI": p.n_p * p.N * p.delta * y.T_star - p.c * y.V_NI}

    return hiv


@cache
def _blowfly_model():
    @model(states=["N"], params=["P", "N0", "delta", "tau"], delays=["tau"], name="nicholson_blowflies")
    def nicholson_blowflies(t, y, p):
        """Gurney-Blythe-Nisbet: N' = P N(t - tau) exp(-N(t - tau)/N0) - delta N."""
        lagged = om.lag(y.N, "tau")
        return {"N": p.P * lagged * om.exp(-lagged / p.N0) - p.delta * y.N}

    return nicholson_blowflies


# entries ------------------------------------------------------------------------------------------

def delay_exponential_decay() -> DDEZooEntry:
    """Delay exponential decay (DDE-Find sec. 6.1, Tables 4, 9, 10)."""
    return DDEZooEntry(
        name="delay_exponential_decay", model=_ded_model(),
        params={"theta0": -2.0, "theta1": -2.0, "tau": 1.0}, history=History.affine(1.5, 4.0),
        t0=0.0, t=np.linspace(0.0, 10.0, 101), noise_level=0.3,
        source=f"{_DDE_FIND}, sec. 6.1 and Table 4: x' = theta0 x + theta1 x(t - tau), theta = (-2, -2), tau = 1, "
               "affine history a t + b with a = 1.5, b = 4, T = 10.",
        notes=_DDE_FIND_NOTES.format(n=101, T=10, nd=100)
        + " Paper's initial guess: theta = (-1.5, -2.5), tau = 2, (a, b) = (2.25, 2.8).")


def logistic_delay() -> DDEZooEntry:
    """Delayed logistic (Hutchinson) equation (DDE-Find sec. 6.2, Tables 5, 11, 12)."""
    return DDEZooEntry(
        name="logistic_delay", model=_logistic_model(),
        params={"theta0": 2.0, "theta1": 1.5, "tau": 1.0}, history=History.periodic(-0.5, 3.0, 2.0),
        t0=0.0, t=np.linspace(0.0, 10.0, 101), noise_level=0.3,
        source=f"{_DDE_FIND}, sec. 6.2 and Table 5 (Hutchinson's equation, G. E. Hutchinson, Ann. N. Y. Acad. "
               "Sci. 50 (1948) 221-246, with theta1 = 1/K): theta = (2, 1.5), tau = 1, periodic history "
               "A sin(omega t) + b with A = -0.5, omega = 3, b = 2, T = 10.",
        notes=_DDE_FIND_NOTES.format(n=101, T=10, nd=100)
        + " The text says omega = 5.0; Tables 5/11/12 and the code say 3.0 (used here). Paper's initial guess: "
          "theta = (1, 1), tau = 0.5, (A, omega, b) = (-0.25, 6.0, 2.6).")


def enso() -> DDEZooEntry:
    """Delayed-oscillator ENSO model (DDE-Find sec. 6.3, Tables 6, 13, 14)."""
    return DDEZooEntry(
        name="enso", model=_enso_model(),
        params={"theta0": 1.0, "theta1": 1.0, "theta2": 0.75, "tau": 5.0},
        history=History.periodic(-0.25, 1.0, 1.5), t0=0.0, t=np.linspace(0.0, 10.0, 101), noise_level=0.3,
        source=f"{_DDE_FIND}, sec. 6.3 and Table 6 (modified Suarez-Schopf delayed oscillator): "
               "x' = theta0 x - theta1 x^3 - theta2 x(t - tau), theta = (1, 1, 0.75), tau = 5, periodic history "
               "A = -0.25, omega = 1, b = 1.5, T = 10.",
        notes=_DDE_FIND_NOTES.format(n=101, T=10, nd=100)
        + " The text says theta2 = 1.5; Tables 6/13/14 and the code say 0.75 (used here). T = 2 tau. Paper's "
          "initial guess: theta = (1.5, 0.8, 1.2), tau = 6, (A, omega, b) = (-0.3, 0.8, 1.95).")


def cheyne_stokes() -> DDEZooEntry:
    """Cheyne-Stokes respiration, Mackey-Glass form (DDE-Find sec. 6.4, Tables 7, 15, 16)."""
    return DDEZooEntry(
        name="cheyne_stokes", model=_cheyne_stokes_model(),
        params={"p": 1.0, "V0": 7.0, "alpha": 2.0, "tau": 0.25}, history=History.affine(-5.0, 2.0),
        t0=0.0, t=np.linspace(0.0, 3.0, 121), noise_level=0.3,
        source=f"{_DDE_FIND}, sec. 6.4 and Table 7 (M. C. Mackey and L. Glass, Science 197 (1977) 287-289, "
               "as in J. D. Murray, Mathematical Biology): x' = p - V0 x u/(alpha + u), u = x(t - tau)^m, m = 8 "
               "fixed, (p, V0, alpha) = (1, 7, 2), tau = 0.25, affine history a = -5, b = 2, T = 3.",
        notes=_DDE_FIND_NOTES.format(n=121, T=3, nd=120)
        + " Exponent m = 8 is a fixed constant of the model (not a parameter). Paper's initial guess: "
          "theta = (2, 12, 1.5), tau = 0.5, a = 0, b = first noisy sample.")


def hiv() -> DDEZooEntry:
    """Delayed HIV infection model (Nelson et al. 2000; DDE-Find sec. 6.5, Tables 8, 17-19)."""
    return DDEZooEntry(
        name="hiv", model=_hiv_model(),
        params={"k": 0.00343, "m": 3.8, "delta": 0.05, "c": 2.0, "T0": 1000.0, "n_p": 0.43, "N": 48.0,
                "tau": 1.0},
        history=History.periodic([1.0, 3.0, 0.0], [1.0, 3.0, 0.0], [10.0, 8.0, 0.0]),
        t0=0.0, t=np.linspace(0.0, 10.0, 101), noise_level=0.3,
        source=f"{_DDE_FIND}, sec. 6.5, eq. (13) and Table 8 (P. W. Nelson, J. D. Murray, A. S. Perelson, "
               "Math. Biosci. 163 (2000) 201-215): T*' = k T0 V_I(t - tau) exp(-m tau) - delta T*, "
               "V_I' = (1 - n_p) N delta T* - c V_I, V_NI' = n_p N delta T* - c V_NI; k = 0.00343, m = 3.8, "
               "delta = 0.05, c = 2, T0 = 1000, n_p = 0.43, N = 48, tau = 1; periodic history per state "
               "A = (1, 3, 0), omega = (1, 3, 0), b = (10, 8, 0), T = 10.",
        notes=_DDE_FIND_NOTES.format(n=101, T=10, nd=100)
        + " The rhs depends on tau outside the lag (exp(-m tau)). The model is over-parameterised "
          "(k T0 -> k T0 exp(-tau eta), m -> m - eta; N -> N/eta, delta -> delta eta): the paper fixes every "
          "parameter except tau and learns only tau and the history. Only V_I(t - tau) enters, so A and omega "
          "of T* and V_NI have exactly zero sensitivity. The paper's l1 loss (sec. 6.5) is not part of the entry.")


def nicholson_blowflies() -> DDEZooEntry:
    """Nicholson's blowflies, Gurney-Blythe-Nisbet model, on the bf1 series (Brunel et al. 2013, sec. 6.2)."""
    from odeinfer.datasets import blowflies

    data = blowflies("bf1")
    t_all = np.asarray(data.t, dtype=float)
    y_all = np.asarray(data.y, dtype=float).reshape(t_all.size, -1)[:, 0]
    tau = 14.8
    t0 = float(t_all[0]) + tau
    window = t_all <= 56.0  # days 40..56 cover [t0 - tau, t0] = [40, 54.8]
    first180 = t_all <= t_all[179]
    obs = first180 & (t_all >= t0)
    return DDEZooEntry(
        name="nicholson_blowflies", model=_blowfly_model(),
        params={"P": 7.81, "N0": 381.8, "delta": 0.154, "tau": tau},
        history=History.from_data(t_all[window], y_all[window]), t0=t0, t=t_all[obs],
        source=("W. S. C. Gurney, S. P. Blythe, R. M. Nisbet, \"Nicholson's blowflies revisited\", Nature 287 "
                "(1980) 17-21: N' = P N(t - tau) exp(-N(t - tau)/N0) - delta N. Values: orthogonal-conditions "
                "estimate with L = 11 sine test functions, tau = 14.8 days fixed (N. J.-B. Brunel, Q. Clairon, "
                "F. d'Alche-Buc, arXiv 2013, sec. 6.2 and its table of (P, N0, delta) = (7.81, 381.8, 0.154)); "
                "Wood (2010, Nature 466) ABC posterior means for comparison: (7.39, 365.03, 0.15). Data: Nicholson "
                "(1954) adult-food-limited culture, odeinfer.datasets.blowflies('bf1')."),
        notes=("[choice] The history is an interpolating cubic spline through the bf1 counts of days 40-56 "
               "(the paper estimates the initial function from its proxy between days 40 and 55), t0 = 40 + tau "
               "= 54.8; observation times are the bf1 days in [t0, 220] (the paper uses the first 180 rows, "
               "days 40-220). The source gives no noise level (noise_level and sigma are None)."))
