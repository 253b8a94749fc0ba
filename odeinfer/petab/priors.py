"""PEtab v1 priors of the parameter table: :class:`Prior` (one parameter's prior), the objective
with its priors (:class:`PriorObjective`) and the parsing of the prior columns
(:func:`read_prior`).

Definitions (PEtab v1, parameter table, ``objectivePriorType`` / ``initializationPriorType``
and their ``...PriorParameters`` "a;b"): the priors whose name starts with ``parameterScale``
are densities of the parameter on its ``parameterScale`` (lin, log, log10) and their parameters
are on that scale; the others are densities of the parameter in natural (linear) units with
parameters in natural units:

=========================  ==================  ===============================================
type                       parameters a; b     density of z (z = u for parameterScale*, else x)
=========================  ==================  ===============================================
uniform, parameterScale-   lower; upper        1 / (b - a) on [a, b], 0 outside
  Uniform
normal, parameterScale-    mean; sd            N(a, b^2)
  Normal
laplace, parameterScale-   location; scale     exp(-|z - a| / b) / (2 b)
  Laplace
logNormal                  mean; sd of log x   x = exp(N(a, b^2)) (natural log)
logLaplace                 location; scale     x = exp(Laplace(a, b))
                           of log x
=========================  ==================  ===============================================

The objective adds the negative log density with all constants (PEtab's convention, as
pyPESTO computes it): ``-log p(z(u))`` evaluated at the parameter's value, without a Jacobian
of the change to the estimation scale. Its gradient is exact; the Fisher information gets the
Gauss-Newton term of the Gaussian priors (``(dr/du)^2`` with the standardised residual
``r = (z - a) / b``, or ``(log x - a) / b`` for logNormal), which is their exact second
derivative wherever that is constant (a normal prior on the estimation scale, a logNormal prior
of a log-scale parameter); uniform and Laplace priors have no curvature (zero). Initialization
priors draw the starts of a multistart fit; draws are clipped to the bounds (PEtab's rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError, PetabError
from odeinfer.likelihood import Objective

__all__ = ["PRIOR_TYPES", "Prior", "PriorObjective", "read_prior"]

PRIOR_TYPES = ("uniform", "normal", "laplace", "logNormal", "logLaplace", "parameterScaleUniform",
               "parameterScaleNormal", "parameterScaleLaplace")
_BASE = {"lin": None, "log": math.e, "log10": 10.0}


@dataclass(frozen=True)
class Prior:
    """One parameter's PEtab prior.

    Parameters
    ----------
    kind : str
        One of :data:`PRIOR_TYPES`.
    a, b : float
        Its parameters (see the module's table): lower/upper, mean/sd or location/scale.
    scale : {"lin", "log", "log10"}
        The parameter's estimation scale ``u``.
    """

    kind: str
    a: float
    b: float
    scale: str = "lin"

    def __post_init__(self):
        if self.kind not in PRIOR_TYPES:
            raise InputError(f"kind: {self.kind!r} is not a PEtab v1 prior type; use one of {list(PRIOR_TYPES)}")
        if self.scale not in _BASE:
            raise InputError(f"scale: expected 'lin', 'log' or 'log10', got {self.scale!r}")
        a, b = float(self.a), float(self.b)
        if not (math.isfinite(a) and math.isfinite(b)):
            raise InputError(f"a, b: the parameters of a {self.kind} prior must be finite, got {a!r}; {b!r}")
        if self.kind.endswith(("Uniform", "uniform")):
            if not a < b:
                raise InputError(f"a, b: a {self.kind} prior needs lower < upper, got {a!r}; {b!r}")
        elif not b > 0:
            raise InputError(f"b: the {'sd' if 'ormal' in self.kind else 'scale'} of a {self.kind} prior must be > 0, "
                             f"got {b!r}")
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)

    @property
    def on_scale(self) -> bool:
        """True when the density is of the parameter on its estimation scale."""
        return self.kind.startswith("parameterScale")

    def _z(self, u, xp):
        """The variable of the density: ``u`` itself, or the natural value ``x(u)``."""
        if self.on_scale or self.scale == "lin":
            return u
        return xp.exp(u) if self.scale == "log" else 10.0 ** u

    def _nll_of_z(self, z, xp):
        a, b, kind = self.a, self.b, self.kind
        if kind in ("uniform", "parameterScaleUniform"):
            return xp.where((z >= a) & (z <= b), math.log(b - a), math.inf)
        if kind in ("normal", "parameterScaleNormal"):
            return 0.5 * math.log(2 * math.pi * b * b) + 0.5 * ((z - a) / b) ** 2
        if kind in ("laplace", "parameterScaleLaplace"):
            return math.log(2 * b) + xp.abs(z - a) / b
        lz = xp.log(z)
        if kind == "logNormal":
            return lz + 0.5 * math.log(2 * math.pi * b * b) + 0.5 * ((lz - a) / b) ** 2
        return lz + math.log(2 * b) + xp.abs(lz - a) / b  # logLaplace

    def nll(self, u) -> float:
        """``-log p`` at ``u`` (the parameter on its estimation scale); inf outside the support."""
        z = self._z(float(u), np)
        if self.kind in ("logNormal", "logLaplace") and not z > 0:
            return math.inf
        return float(self._nll_of_z(np.float64(z), np))

    def terms(self, u):
        """``(nll, d nll / du, Fisher term)`` at ``u`` (see the module's notes)."""
        u = float(u)
        z = self._z(u, np)
        value = self.nll(u)
        if not math.isfinite(value):
            return value, 0.0, 0.0
        dz = 1.0 if (self.on_scale or self.scale == "lin") else z * math.log(_BASE[self.scale])
        a, b, kind = self.a, self.b, self.kind
        if kind.endswith(("Uniform", "uniform")):
            return value, 0.0, 0.0
        if kind in ("normal", "parameterScaleNormal"):
            return value, (z - a) / b ** 2 * dz, (dz / b) ** 2
        if kind in ("laplace", "parameterScaleLaplace"):
            return value, math.copysign(1.0, z - a) / b * dz if z != a else 0.0, 0.0
        lz = math.log(z)
        if kind == "logNormal":
            return value, (1.0 / z + (lz - a) / (b * b * z)) * dz, (dz / (b * z)) ** 2
        slope = math.copysign(1.0, lz - a) / b if lz != a else 0.0
        return value, (1.0 + slope) / z * dz, 0.0  # logLaplace

    def tensor_nll(self, u):
        """``-log p`` of a PyTensor variable ``u`` (the parameter on its estimation scale)."""
        import pytensor.tensor as pt

        return self._nll_of_z(self._z(u, pt), pt)

    def draw(self, n, rng) -> np.ndarray:
        """``n`` natural values drawn from the prior (``rng``: a numpy Generator), not clipped."""
        a, b, kind = self.a, self.b, self.kind
        if kind.endswith(("Uniform", "uniform")):
            z = rng.uniform(a, b, n)
        elif kind.endswith(("Normal", "normal")):
            z = rng.normal(a, b, n)
        else:
            z = rng.laplace(a, b, n)
        if kind in ("logNormal", "logLaplace"):
            return np.exp(z)
        if self.on_scale and self.scale != "lin":
            return np.exp(z) if self.scale == "log" else 10.0 ** z
        return z


def read_prior(row, column, pid, scale, lower, upper, fail):
    """The :class:`Prior` in columns ``<column>Type`` / ``<column>Parameters`` of a parameter-table
    row (``column`` is ``objectivePrior`` or ``initializationPrior``), or None where there is none.

    ``row["_where"]`` names the file and line; ``fail(message)`` raises the PetabError. Without
    parameters, the uniform types take the bounds (on the parameter's scale for
    parameterScaleUniform); the other types need them.
    """
    from odeinfer.likelihood.parameters import to_scale

    where = row["_where"]
    kind, text = row.get(f"{column}Type", ""), row.get(f"{column}Parameters", "")
    if not kind and not text:
        return None
    kind = kind or "parameterScaleUniform"
    if kind not in PRIOR_TYPES:
        shown = kind if len(kind) <= 40 else kind[:40] + "..."
        fail(f"{where}: column '{column}Type' of parameter {pid!r} is {shown!r}, which is not a PEtab v1 prior type "
             f"({', '.join(PRIOR_TYPES)}); use one of them")
    if text:
        items = [x.strip() for x in text.split(";")]
        try:
            values = [float(x) for x in items]
        except ValueError:
            values = None
        if values is None or len(values) != 2 or not all(math.isfinite(v) for v in values):
            fail(f"{where}: column '{column}Parameters' of parameter {pid!r} holds no two finite numbers separated by "
                 f"';' (a {kind} prior needs two: see the PEtab v1 parameter table); fix the entry")
    elif kind in ("uniform", "parameterScaleUniform"):
        values = [lower, upper] if kind == "uniform" else list(to_scale([lower, upper], [scale, scale]))
    else:
        fail(f"{where}: parameter {pid!r} has a {kind} {column} but column '{column}Parameters' is empty; give its "
             "two parameters separated by ';'")
    try:
        return Prior(kind, values[0], values[1], scale)
    except InputError as exc:
        raise PetabError(f"{where}: the {column} of parameter {pid!r} is invalid: {exc}") from None


class PriorObjective(Objective):
    """An :class:`~odeinfer.Objective` plus the negative log densities of ``priors``
    (``{estimated parameter: Prior}``) in its value, gradient and Fisher information."""

    def __init__(self, problem, priors, solver=None, gradient=None):
        super().__init__(problem, solver=solver, gradient=gradient)
        names = list(problem.estimated)
        unknown = [k for k in priors if k not in names]
        if unknown:
            raise InputError(f"priors: {unknown} are not estimated parameters {names}")
        self.priors = [(names.index(k), p) for k, p in priors.items()]

    def prior_nll(self, u) -> float:
        """The priors' part of the objective at ``u``."""
        return float(sum(p.nll(u[i]) for i, p in self.priors))

    def _evaluate(self, u, grad, sens):  # every entry point (__call__, value) adds the priors
        from odeinfer.likelihood.objective import Evaluation

        u = self._vector(u)
        ev = super()._evaluate(u, grad, sens)
        if not ev.ok:
            return ev
        nll = ev.nll
        g = None if ev.grad is None else ev.grad.copy()
        F = None if ev.fim is None else ev.fim.copy()
        C = None if ev.curvature is None else ev.curvature.copy()
        for i, p in self.priors:
            v, d, f = p.terms(u[i])
            nll += v
            if g is not None:
                g[i] += d
            if F is not None:
                F[i, i] += f
                C[i, i] += f
        if not math.isfinite(nll):
            return Evaluation(failure="the parameters lie outside the support of a prior of the parameter table")
        return Evaluation(nll, g, F, curvature=C)
