"""The result of every estimator: :class:`Estimate` (immutable, statsmodels vocabulary)."""

from __future__ import annotations

import json
from statistics import NormalDist
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from odeinfer._lazy import pandas as pd

from odeinfer.model import Model

__all__ = ["Estimate", "STATUSES"]

#: Status words of an estimate. "converged": the stopping rule was met; "max_iter": the
#: iteration budget ran out; "failed": no usable estimate (values may be NaN).
STATUSES = ("converged", "max_iter", "failed")


def _frozen_array(a, ndim=None):
    if a is None:
        return None
    arr = np.array(a, dtype=float, copy=True)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"expected a {ndim}-D array, got shape {arr.shape}")
    arr.flags.writeable = False
    return arr


def _frozen_map(m):
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True, eq=False)
class Estimate:
    """Point estimate, covariance and diagnostics of one estimator run.

    Every field is always present; "not available" is ``None``/NaN with a
    ``status`` or a ``warnings`` entry, never a missing attribute.

    Attributes
    ----------
    estimator : str
        Name of the estimator (e.g. ``"OrthogonalConditions"``).
    model : Model
    names : tuple of str, length k
        Names of the estimated quantities: model parameters, then estimated
        initial states as ``"x0[state]"`` (per experiment: ``"x0[state]@name"``),
        then any extra (e.g. noise) parameters.
    values : ndarray (k,)
    cov : ndarray (k, k) or None
        Asymptotic covariance of ``values`` (None if not available; see ``warnings``).
    status : {"converged", "max_iter", "failed"}
    message : str
    n_iter : int
    cost : float
        Final value of the estimator's objective.
    nobs : int
        Number of observations used.
    fixed : mapping
        Quantities held fixed, name -> value (parameters and/or initial states).
    sigma : mapping
        Noise standard deviation per observed state, as estimated or given.
    residuals : ndarray or None
        Estimator's residual vector at the optimum (its meaning depends on the estimator).
    history : mapping of str to ndarray
        Per-iteration traces (e.g. ``"cost"``, ``"step"``), for convergence plots.
    extras : mapping
        Estimator-specific diagnostics (e.g. the scan over the number of test functions).
    warnings : tuple of str
    provenance : mapping
        odeinfer version, estimator configuration, data name, elapsed time.
    """

    estimator: str
    model: Model
    names: tuple
    values: np.ndarray
    cov: np.ndarray | None
    status: str
    message: str = ""
    n_iter: int = 0
    cost: float = float("nan")
    nobs: int = 0
    fixed: Mapping = field(default_factory=dict)
    sigma: Mapping = field(default_factory=dict)
    residuals: np.ndarray | None = None
    history: Mapping = field(default_factory=dict)
    extras: Mapping = field(default_factory=dict)
    warnings: tuple = ()
    provenance: Mapping = field(default_factory=dict)

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "names", tuple(str(n) for n in self.names))
        set_(self, "values", _frozen_array(self.values, 1))
        k = len(self.names)
        if self.values.shape != (k,):
            raise ValueError(f"values: expected shape ({k},) to match names, got {self.values.shape}")
        cov = _frozen_array(self.cov, 2)
        if cov is not None and cov.shape != (k, k):
            raise ValueError(f"cov: expected shape ({k}, {k}), got {cov.shape}")
        set_(self, "cov", cov)
        if self.status not in STATUSES:
            raise ValueError(f"status: expected one of {STATUSES}, got {self.status!r}")
        set_(self, "residuals", _frozen_array(self.residuals))
        set_(self, "history", _frozen_map({k_: _frozen_array(v) for k_, v in dict(self.history).items()}))
        for name in ("fixed", "sigma", "extras", "provenance"):
            set_(self, name, _frozen_map(getattr(self, name)))
        set_(self, "warnings", tuple(str(w) for w in self.warnings))

    # statsmodels vocabulary --------------------------------------------------------------
    @property
    def converged(self) -> bool:
        return self.status == "converged"

    @property
    def params(self) -> pd.Series:
        """Estimates by name (a new Series each time)."""
        return pd.Series(np.array(self.values), index=list(self.names), name="estimate")

    @property
    def bse(self) -> pd.Series:
        """Asymptotic standard errors (NaN when no covariance is available)."""
        if self.cov is None:
            se = np.full(len(self.names), np.nan)
        else:
            d = np.diag(self.cov)
            se = np.sqrt(np.where(d >= 0, d, np.nan))
        return pd.Series(se, index=list(self.names), name="std_err")

    def cov_params(self) -> pd.DataFrame:
        """Covariance matrix as a labelled DataFrame (NaN when not available)."""
        cov = np.full((len(self.names),) * 2, np.nan) if self.cov is None else np.array(self.cov)
        return pd.DataFrame(cov, index=list(self.names), columns=list(self.names))

    #: Profile-likelihood hook (not a field, never serialised): estimators that can re-optimise
    #: set it after construction with ``object.__setattr__(est, "_profiler", obj)``; ``obj``
    #: has ``conf_int(alpha) -> DataFrame`` (see :mod:`odeinfer.inference.profile`).
    _profiler = None

    def conf_int(self, alpha: float = 0.05, method: str = "wald") -> pd.DataFrame:
        """Confidence intervals, columns ``lower`` and ``upper``.

        Parameters
        ----------
        alpha : float, default 0.05
            1 - confidence level.
        method : {"wald", "profile"}
            ``"wald"``: estimate +- z_{1-alpha/2} * bse. ``"profile"``: profile
            likelihood (re-optimising the other quantities), for estimates whose
            estimator provides a profiler (e.g. ``oi.Embedding``); computed on
            first use and cached. Not available after a JSON or pickle round trip.
        """
        if not (0 < alpha < 1):
            raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")
        available = ["wald"] + (["profile"] if self._profiler is not None else [])
        if method not in available:
            why = (" (profile intervals need an estimate fitted in this session by an estimator that provides "
                   "them, e.g. oi.Embedding)" if method == "profile" else "")
            raise ValueError(f"method: {method!r} is not available for this {self.estimator} estimate{why}; "
                             f"available: {available}")
        if method == "profile":
            return self._profiler.conf_int(alpha).reindex(list(self.names))
        z = NormalDist().inv_cdf(1 - alpha / 2)
        se = self.bse.to_numpy()
        return pd.DataFrame({"lower": self.values - z * se, "upper": self.values + z * se}, index=list(self.names))

    def to_priors(self, inflate: float = 10.0, **kwargs) -> dict:
        """PyMC priors centred on this estimate, ``inflate`` times wider than its standard errors.

        See :func:`odeinfer.bayes.priors_from_estimate` (``positive=``, ``names=``
        are passed on); the result is meant for ``oi.bayes.build_model(priors=...)``.
        """
        from odeinfer.bayes.priors import priors_from_estimate

        return priors_from_estimate(self, inflate=inflate, **kwargs)

    def correlation(self) -> pd.DataFrame:
        """Correlation matrix of the estimates."""
        cov = self.cov_params().to_numpy()
        d = np.sqrt(np.diag(cov))
        return pd.DataFrame(cov / np.outer(d, d), index=list(self.names), columns=list(self.names))

    def predict(self, t, *, x0=None, t0=None, history=None, alpha=0.05, method="dopri5", rtol=1e-8, atol=1e-10):
        """The model's trajectory at this estimate with pointwise (1 - alpha) confidence bands.

        Parameters
        ----------
        t : array-like (n_times,)
            Output times, sorted.
        x0 : dict or array-like (n_states,), optional
            Initial state; default: the estimated ``x0[state]`` values. Required
            when the estimator did not estimate the initial state.
        t0 : float, optional
            Time of the initial state; default ``t[0]``.
        history : History, numbers or callable, optional
            Delay models only (required there): the states on ``[t0 - max(tau), t0]``, as in
            :func:`odeinfer.solve_dde`; a parametric :class:`~odeinfer.History` takes its
            parameters from this estimate where they were estimated.
        alpha : float, default 0.05
        method, rtol, atol
            Passed to :func:`odeinfer.solve_ode` (``rtol``, ``atol`` to :func:`odeinfer.solve_dde`).

        Returns
        -------
        Prediction
            ``y``, ``se``, ``lower``, ``upper`` of shape (n_times, n_states); the
            bands propagate ``cov`` through the forward sensitivities (delta method), on the
            model's noise scale (log-normal bands ``y exp(-+ z se / y)`` for the observed states
            of a model with ``noise="log"``).
        """
        from odeinfer.results.prediction import predict

        return predict(self, t, x0=x0, t0=t0, history=history, alpha=alpha, method=method, rtol=rtol, atol=atol)

    # display ---------------------------------------------------------------------------
    def summary_frame(self, alpha: float = 0.05) -> pd.DataFrame:
        """Table: estimate, std_err, z, lower, upper per quantity."""
        ci = self.conf_int(alpha)
        se = self.bse
        return pd.DataFrame({"estimate": self.values, "std_err": se.to_numpy(),
                             "z": self.values / se.to_numpy(),
                             f"[{alpha / 2:g}": ci["lower"].to_numpy(),
                             f"{1 - alpha / 2:g}]": ci["upper"].to_numpy()}, index=list(self.names))

    def summary(self, alpha: float = 0.05) -> str:
        """A plain-text summary (estimator, status, table, warnings)."""
        head = [f"{self.estimator} estimate of {self.model.name!r}",
                f"status: {self.status}" + (f" ({self.message})" if self.message else ""),
                f"iterations: {self.n_iter}   cost: {self.cost:.6g}   nobs: {self.nobs}"]
        if self.fixed:
            head.append("fixed: " + ", ".join(f"{k}={v:g}" for k, v in self.fixed.items()))
        table = self.summary_frame(alpha).to_string(float_format=lambda v: f"{v:.6g}")
        tail = [f"warning: {w}" for w in self.warnings]
        return "\n".join(head + ["", table] + ([""] + tail if tail else []))

    def __repr__(self):
        vals = ", ".join(f"{n}={v:.4g}" for n, v in zip(self.names, self.values))
        return f"<Estimate {self.estimator} [{self.status}] {vals}>"

    def _repr_html_(self):
        from html import escape

        frame = self.summary_frame().to_html(float_format=lambda v: f"{v:.5g}", escape=True)
        warn = "".join(f"<li>{escape(w)}</li>" for w in self.warnings)
        return (f"<div><b>{escape(self.estimator)}</b> estimate of <code>{escape(self.model.name)}</code>"
                f" &mdash; status <b>{escape(self.status)}</b>, {self.n_iter} iterations, nobs {self.nobs}"
                f"{frame}" + (f"<ul>{warn}</ul>" if warn else "") + "</div>")

    # JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-serialisable dict (the model is stored as its equations)."""
        def arr(a):
            return None if a is None else np.asarray(a).tolist()

        return {
            "format": "odeinfer.Estimate/1",
            "estimator": self.estimator,
            "model": {"name": self.model.name, "states": list(self.model.states),
                      "params": list(self.model.params), "equations": self.model.equations(),
                      "observed": list(self.model.observed), "noise": self.model.observation.noise},
            "names": list(self.names), "values": arr(self.values), "cov": arr(self.cov),
            "status": self.status, "message": self.message, "n_iter": self.n_iter,
            "cost": self.cost, "nobs": self.nobs, "fixed": dict(self.fixed), "sigma": dict(self.sigma),
            "residuals": arr(self.residuals), "history": {k: arr(v) for k, v in self.history.items()},
            "extras": _jsonable(dict(self.extras)), "warnings": list(self.warnings),
            "provenance": _jsonable(dict(self.provenance)),
        }

    def to_json(self, path=None, **kwargs) -> str:
        """JSON text (written to ``path`` if given). NaN is written as ``NaN``."""
        text = json.dumps(self.to_dict(), **kwargs)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    @classmethod
    def from_json(cls, text_or_path, model: Model | None = None) -> "Estimate":
        """Read an estimate written by :meth:`to_json`.

        The model is rebuilt from its stored equations (parsed safely), unless
        ``model`` is given.
        """
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            with open(text_or_path, encoding="utf-8") as fh:
                text = fh.read()
        d = json.loads(text)
        if d.get("format") != "odeinfer.Estimate/1":
            raise ValueError(f"not an odeinfer Estimate JSON (format {d.get('format')!r})")
        if model is None:
            m = d["model"]
            model = Model.from_equations(m["equations"], m["params"], name=m["name"],
                                         observed=m["observed"], noise=m["noise"])
        return cls(d["estimator"], model, tuple(d["names"]), np.array(d["values"], float),
                   None if d["cov"] is None else np.array(d["cov"], float), d["status"], d["message"],
                   d["n_iter"], d["cost"], d["nobs"], d["fixed"], d["sigma"],
                   None if d["residuals"] is None else np.array(d["residuals"], float),
                   {k: np.array(v, float) for k, v in d["history"].items()}, d["extras"],
                   tuple(d["warnings"]), d["provenance"])


def _jsonable(x):
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)
