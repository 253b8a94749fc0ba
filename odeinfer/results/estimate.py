"""The result of every estimator: :class:`Estimate` (immutable, statsmodels vocabulary)."""

from __future__ import annotations

import json
import os
import re
import stat
from statistics import NormalDist
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from odeinfer._lazy import pandas as pd

from odeinfer._io import write_atomic
from odeinfer.errors import InputError, OdeinferError, ResultFileError
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
        Noise standard deviation per observed state, as estimated or given (per observable, on its
        noise scale, for a matching estimate of a model with observables).
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
    #: has ``conf_int(alpha) -> DataFrame``, and ``conf_int(alpha, executor=, progress=)`` to run on an
    #: executor (see :mod:`odeinfer.inference.profile`).
    _profiler = None
    #: Likelihood fits (models with observables) keep their objective here (not a field, never
    #: serialised): :meth:`predict` then predicts the observables of an experiment.
    _objective = None

    #: Parametric-bootstrap hook (not a field, never serialised): estimators that can refit set it
    #: like ``_profiler``; see :class:`odeinfer.inference.bootstrap.ParametricBootstrap`.
    _bootstrapper = None

    def conf_int(self, alpha: float = 0.05, method: str = "wald", *, kind=None, n_boot=None, seed=None,
                 executor=None, progress=False) -> pd.DataFrame:
        """Confidence intervals, columns ``lower`` and ``upper``.

        Parameters
        ----------
        alpha : float, default 0.05
            1 - confidence level.
        method : {"wald", "profile", "bootstrap"}
            ``"wald"``: estimate +- z_{1-alpha/2} * bse on the scale the quantity was fitted on
            (``extras["scales"]``): for a log-scale fit (``log_params=True``, ``Param(scale="log")``
            or ``"log10"``), ``exp(log(estimate) +- z * se_log)``, so a positive rate keeps a positive
            lower end; linear-scale quantities are unchanged. ``"profile"``: profile
            likelihood (re-optimising the other quantities), for estimates whose
            estimator provides a profiler (e.g. ``oi.Embedding``); computed on
            first use and cached. ``"bootstrap"``: parametric bootstrap, for estimates whose
            estimator can refit (``oi.Embedding``, ``oi.Simultaneous``,
            ``oi.OrthogonalConditions``, ``oi.GradientMatching`` and the Newton family
            (``oi.NewtonRaphson``, ``oi.GradientDescent``, ``oi.StochasticNewton``,
            ``oi.StochasticGradient``; in-memory data) of ODE models): ``n_boot``
            datasets are simulated from the fitted model, each is refitted by the same estimator
            starting at the estimate, and the intervals come from the refits (see ``kind``). A
            trajectory fit simulates the trajectory at the estimate (estimated or given initial
            states; for the matching estimators the given ``x0``, else the smoothing proxy at
            ``t0``; for the Newton family each state's smoothing spline at ``t0``) plus Gaussian
            noise with the fitted sd per state (the Newton family: the data's own noise sd, from
            local cubic pseudo-residuals) (on the log scale for a
            model with log noise); ``oi.AdjointDDE`` the fitted delay trajectory (estimated history
            included) the same way, its refits with the same history family; a maximum-likelihood
            fit (a model with observables) draws every measurement from its noise model at the
            estimate (normal or Laplace; lin, log or log10 scale).
            Times, states or observables, missing values and conditions are the data's. Refits
            that fail or do not converge are left out, counted in the frame's ``attrs``
            (``n_failed``, ``n_unconverged``, ``n_used`` per quantity) and reported by a
            :class:`~odeinfer.inference.bootstrap.BootstrapWarning`.
            The refits are cached on the estimate per ``(n_boot, seed)``, so both kinds and every
            ``alpha`` reuse them. Bootstrap intervals are not available after a JSON or pickle
            round trip, profile intervals only for likelihood fits read back by :meth:`from_json`
            (which rebuilds their objective).
        kind : {"percentile", "studentized"}, default "percentile"
            Bootstrap only. ``"percentile"``: the ``alpha/2`` and ``1 - alpha/2`` quantiles of
            the refitted values. ``"studentized"`` (bootstrap-t): ``estimate - q(t*) * bse`` with
            ``t* = (refit - estimate) / refit_bse``; exact for a linear Gaussian model.
        n_boot : int, default 1000
            Bootstrap only: number of simulated datasets (>= 10). The Monte Carlo error of a
            quantile shrinks as ``1 / sqrt(n_boot)``.
        seed : int, default 0
            Bootstrap only: replicate ``b`` uses the ``b``-th child of
            ``numpy.random.SeedSequence(seed)``, so the same seed gives the same intervals, bit
            for bit, wherever the refits run.
        executor : concurrent.futures.Executor or Dask Client, optional
            Profile and bootstrap: run the refits (bootstrap) or the walks along each side of
            each profile there (default: in this process), with the same results bit for bit; see
            :func:`odeinfer.inference.executor.map_chunks`.
        progress : bool, default False
            Show a progress bar (tqdm) over the bootstrap refits, or over the profile walks run on
            an executor.

        Examples
        --------
        >>> import odeinfer as oi
        >>> m = oi.Model.from_equations({"x": "-k*x"}, params=["k"])
        >>> data, _ = oi.simulate(m, {"k": 0.5}, {"x": 2.0}, [0, 0.5, 1, 1.5, 2, 3, 4], noise=0.02, rng=1)
        >>> est = oi.Embedding().fit(m, data, start={"k": 1.0})
        >>> ci = est.conf_int(method="bootstrap", n_boot=50, seed=1)
        >>> ci.attrs["n_failed"], bool(ci.loc["k", "lower"] < est.params["k"] < ci.loc["k", "upper"])
        (0, True)
        """
        if not (0 < alpha < 1):
            raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")
        available = ["wald"] + (["profile"] if self._profiler is not None else []) + \
            (["bootstrap"] if self._bootstrapper is not None else [])
        if method not in available:
            why = {"profile": " (profile intervals need an estimate fitted in this session by an estimator that "
                              "provides them, e.g. oi.Embedding)",
                   "bootstrap": " (bootstrap intervals need an estimate fitted in this session by an estimator that "
                                "can refit: oi.Embedding, oi.Simultaneous, oi.OrthogonalConditions, "
                                "oi.GradientMatching or the Newton family, on in-memory data of an ODE model, or "
                                "oi.AdjointDDE in its default mode)"}.get(
                                    method, "")
            raise ValueError(f"method: {method!r} is not available for this {self.estimator} estimate{why}; "
                             f"available: {available}")
        given = [k for k, v in (("kind", kind), ("n_boot", n_boot), ("seed", seed)) if v is not None]
        if method != "bootstrap" and given:
            raise InputError(f"{given[0]}: applies to method='bootstrap' only, got {given[0]}= with method={method!r}; "
                             f"drop it or pass method='bootstrap'")
        if method == "wald" and (executor is not None or progress):
            arg = "executor" if executor is not None else "progress"
            raise InputError(f"{arg}: applies to method='profile' or 'bootstrap' only, got {arg}= with "
                             "method='wald' (computed here, instantly); drop it")
        if method == "bootstrap":
            return self._bootstrap(alpha, kind, n_boot, seed, executor, progress)
        if method == "profile":
            if executor is None:  # progress bars follow the tasks of an executor
                return self._profiler.conf_int(alpha).reindex(list(self.names))
            return self._profiler.conf_int(alpha, executor=executor, progress=bool(progress)).reindex(list(self.names))
        z = NormalDist().inv_cdf(1 - alpha / 2)
        u, se_u, scales = self._estimation_scale()
        lower, upper = u - z * se_u, u + z * se_u
        for i, s in enumerate(scales):
            if s == "log":
                lower[i], upper[i] = np.exp(lower[i]), np.exp(upper[i])
            elif s == "log10":
                lower[i], upper[i] = 10.0 ** lower[i], 10.0 ** upper[i]
        return pd.DataFrame({"lower": lower, "upper": upper}, index=list(self.names))

    def _estimation_scale(self):
        """Values, standard errors and scale names on the scale each quantity was fitted on.

        ``extras["scales"]`` (``{name: "lin" | "log" | "log10"}``, written by the estimators that fit on
        a log scale; missing names are "lin") says where; the standard errors come from
        ``extras["cov_scaled"]`` (the covariance on that scale) when present, else from the natural
        ones by the inverse delta method (``se_log = se / value``, ``se_log10 = se / (value ln 10)``).
        """
        scales_map = dict(self.extras.get("scales") or {})
        scales = [scales_map.get(n, "lin") for n in self.names]
        se = self.bse.to_numpy()
        u = np.array(self.values, dtype=float)
        se_u = se.copy()
        logged = [i for i, s in enumerate(scales) if s in ("log", "log10")]
        if not logged:
            return u, se_u, scales
        cov_u = self.extras.get("cov_scaled")
        k = len(self.names)
        d_u = None
        if cov_u is not None and np.shape(cov_u) == (k, k):
            d_u = np.diag(np.asarray(cov_u, dtype=float))
        for i in logged:
            v = u[i]
            if not v > 0:  # a log-scale quantity is positive; anything else has no log-scale interval
                u[i], se_u[i], scales[i] = np.nan, np.nan, "lin"
                continue
            ln = 1.0 if scales[i] == "log" else np.log(10.0)
            u[i] = np.log(v) / ln
            se_u[i] = np.sqrt(d_u[i]) if d_u is not None and d_u[i] >= 0 else se[i] / (v * ln)
        return u, se_u, scales

    def _bootstrap(self, alpha, kind, n_boot, seed, executor, progress):
        from odeinfer.inference.bootstrap import KINDS
        from odeinfer.inference.executor import as_executor, check_executor

        kind = "percentile" if kind is None else kind
        if kind not in KINDS:
            raise InputError(f"kind: expected one of {list(KINDS)}, got {kind!r}")
        n_boot = 1000 if n_boot is None else n_boot
        if isinstance(n_boot, (bool, np.bool_)) or not isinstance(n_boot, (int, np.integer)) or n_boot < 10:
            raise InputError(f"n_boot: expected an int >= 10 (bootstrap datasets; 1000 or more for 95% intervals), "
                             f"got {n_boot!r}")
        seed = 0 if seed is None else seed
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise InputError(f"seed: expected a non-negative int (the bootstrap's root seed), got {seed!r}; pass e.g. "
                             "seed=2024")
        executor = as_executor(executor)
        check_executor(executor)  # before the simulation's first solve
        return self._bootstrapper.conf_int(alpha, kind=kind, n_boot=int(n_boot), seed=int(seed), executor=executor,
                                           progress=bool(progress))

    @property
    def nll(self) -> float:
        """Negative log-likelihood with all constants (PEtab's definition) at the estimate, for
        likelihood fits (models with observables); NaN for estimators that report another cost."""
        return float(self.extras.get("nll", float("nan")))

    def _objective_words(self):
        if "nll" not in self.extras:
            return "cost"
        return self.extras.get("objective_kind", "negative log-likelihood")

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

    def predict(self, t, *, x0=None, t0=None, history=None, alpha=0.05, solver=None, experiment=None):
        """The model's trajectory at this estimate with pointwise (1 - alpha) confidence bands.

        For a likelihood fit (a model with observables), the observables of ``experiment``
        (under its condition: overrides, doses, inputs, pre-equilibration; default the only
        experiment) with bands on each observable's noise scale; ``x0``, ``t0``, ``history`` and
        ``solver`` do not apply there.

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
            :class:`~odeinfer.Problem`; a parametric :class:`~odeinfer.History` takes its
            parameters from this estimate where they were estimated.
        alpha : float, default 0.05
        solver : Dopri5, Rodas, Auto or MethodOfSteps, optional
            Default ``oi.Auto(rtol=1e-8, atol=1e-10)``; ``oi.MethodOfSteps(oi.Dopri5(rtol=1e-8,
            atol=1e-10))`` for a delay model.

        Returns
        -------
        Prediction
            ``y``, ``se``, ``lower``, ``upper`` of shape (n_times, n_states); the
            bands propagate ``cov`` through the forward sensitivities (delta method), on the
            model's noise scale (log-normal bands ``y exp(-+ z se / y)`` for the observed states
            of a model with ``noise="log"``).
        """
        from odeinfer.results.prediction import predict, predict_observables

        if self._objective is not None:
            if x0 is not None or t0 is not None or history is not None or solver is not None:
                raise InputError("predict: a likelihood fit predicts its experiments' observables; drop x0, t0, "
                                 "history and solver (pass experiment=... instead)")
            return predict_observables(self, t, experiment=experiment, alpha=alpha)
        if experiment is not None:
            raise InputError("experiment: only likelihood fits (models with observables) predict by experiment")
        return predict(self, t, x0=x0, t0=t0, history=history, alpha=alpha, solver=solver)

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
                f"iterations: {self.n_iter}   {self._objective_words()}: {self.cost:.6g}   nobs: {self.nobs}"]
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
        """A JSON-serialisable dict (the model is stored as its equations, with its observables and noise
        models; a likelihood fit also stores its problem: experiments, conditions, parameter table, solver)."""
        from odeinfer.results._problem_json import observables_to_dict, problem_to_dict

        def arr(a):
            return None if a is None else np.asarray(a).tolist()

        out = {
            "format": _FORMAT,
            "estimator": self.estimator,
            "model": {"name": self.model.name, "states": list(self.model.states),
                      "params": list(self.model.params), "equations": self.model.equations(),
                      "observed": list(self.model.observed), "noise": self.model.observation.noise},
            "fingerprint": self.model.fingerprint,
            "names": list(self.names), "values": arr(self.values), "cov": arr(self.cov),
            "status": self.status, "message": self.message, "n_iter": self.n_iter,
            "cost": self.cost, "nobs": self.nobs, "fixed": dict(self.fixed), "sigma": dict(self.sigma),
            "residuals": arr(self.residuals), "history": {k: arr(v) for k, v in self.history.items()},
            "extras": _jsonable(dict(self.extras)), "warnings": list(self.warnings),
            "provenance": _jsonable(dict(self.provenance)),
        }
        if self.model.observables:
            out["model"]["observables"] = observables_to_dict(self.model)
        if self._objective is not None:
            out["problem"] = problem_to_dict(self._objective)
        return out

    def to_json(self, path=None, **kwargs) -> str:
        """JSON text (written to ``path`` if given). NaN is written as ``NaN``.

        The file is written atomically (a temporary file in the same directory, flushed to
        disk, then renamed): if the write fails, an existing file keeps its old content, and
        an overwritten file keeps its permission bits.
        """
        text = json.dumps(self.to_dict(), **kwargs)
        if path is not None:
            write_atomic(text, path)
        return text

    @classmethod
    def from_json(cls, text_or_path, model: Model | None = None) -> "Estimate":
        """Read an estimate written by :meth:`to_json`.

        Parameters
        ----------
        text_or_path : str or os.PathLike
            The JSON text (a str starting with ``{``) or the path of a file written by
            :meth:`to_json`. Files larger than 64 MiB and JSON nested more than 64 levels
            deep are refused before parsing.
        model : Model, optional
            The model the estimate was fitted with; default: rebuilt from the stored
            equations and observables (parsed safely, never evaluated). A model whose states,
            parameters, equations (fingerprint) or observables differ from the stored ones is
            refused.

        Notes
        -----
        A likelihood fit (a model with observables, fitted by :class:`~odeinfer.Embedding`) comes
        back with its observables, noise models and fit problem (experiments' data and
        conditions, parameter table, solver settings), rebuilt through the validating
        constructors: ``predict(t, experiment=...)`` then gives the observables with their bands as
        before the round trip, and ``conf_int(method="profile")`` re-optimises the rebuilt objective
        (with Embedding's default ``max_iter``). Bootstrap intervals need the fit's session.

        Raises
        ------
        ResultFileError
            The text or file is not a complete estimate written by :meth:`to_json` (not
            JSON, no such file, truncated, missing or mistyped fields, too deep or too large).
        InputError
            ``model`` is not the estimate's model.
        """
        from odeinfer.results._problem_json import attach, objective_from_dict, observe_from_dict

        text, where = _read_source(text_or_path)
        d = _parse(text, where)
        stored = d["model"]
        observables = stored.get("observables")
        if model is None:
            try:
                model = Model.from_equations(stored["equations"], stored["params"], name=stored["name"],
                                             observed=stored["observed"], noise=stored["noise"])
            except OdeinferError as exc:
                raise ResultFileError(f"{where}: its model cannot be rebuilt from the stored equations "
                                      f"({type(exc).__name__}: {_short(exc)})") from exc
            if observables is not None:
                model = observe_from_dict(model, observables, where)
        else:
            _check_model(model, stored, d.get("fingerprint"))
            _check_observables(model, observables)
        objective = None
        if d.get("problem") is not None and model.observables:
            objective = objective_from_dict(model, d["problem"], where)

        def array(key, ndim=None):
            if d[key] is None and key in ("cov", "residuals"):
                return None
            try:
                arr = np.array(d[key], dtype=float)
            except (TypeError, ValueError):
                arr = None
            if arr is None or (ndim is not None and arr.ndim != ndim):
                what = {1: "a list of numbers", 2: "a list of lists of numbers"}.get(ndim, "numbers")
                raise ResultFileError(f"{where}: the field {key!r} must be {what}; the file holds something else. "
                                      "Write the estimate again with Estimate.to_json")
            return arr

        values, cov, residuals = array("values", 1), array("cov", 2), array("residuals")
        try:
            out = cls(str(d["estimator"]), model, tuple(d["names"]), values, cov,
                      d["status"], str(d["message"]), int(d["n_iter"]), float(d["cost"]), int(d["nobs"]),
                      dict(d["fixed"]), dict(d["sigma"]), residuals,
                      {k: np.array(v, float) for k, v in dict(d["history"]).items()}, dict(d["extras"]),
                      tuple(d["warnings"]), dict(d["provenance"]))
        except (TypeError, ValueError) as exc:
            raise ResultFileError(f"{where}: the stored fields do not fit together ({_short(exc)}); "
                                  "write the estimate again with Estimate.to_json") from None
        if objective is not None:
            if tuple(objective.problem.estimated) != out.names:
                raise ResultFileError(f"{where}: the stored problem estimates {list(objective.problem.estimated)[:8]}, "
                                      f"but the estimate holds {list(out.names)[:8]}; write the estimate again with "
                                      "Estimate.to_json")
            from odeinfer.estimators.embedding import MAX_ITER

            attach(out, objective, MAX_ITER["likelihood"])
        return out


#: Limits of :meth:`Estimate.from_json`: file (or text) size and nesting depth of the JSON.
MAX_JSON_BYTES = 64 * 2**20
MAX_JSON_DEPTH = 64
_FORMAT = "odeinfer.Estimate/1"
_KEYS = ("format", "estimator", "model", "names", "values", "cov", "status", "message", "n_iter", "cost", "nobs",
         "fixed", "sigma", "residuals", "history", "extras", "warnings", "provenance")
_MODEL_KEYS = ("name", "states", "params", "equations", "observed", "noise")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_HOW = "pass the text of Estimate.to_json() or the path of a file it wrote"


def _short(exc, limit=200):
    """An error's text cut to ``limit`` characters (it may quote a long field of the file)."""
    text = str(exc)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _read_source(text_or_path):
    """(JSON text, how to name it in messages) from the text or a path, size-limited."""
    if isinstance(text_or_path, str) and text_or_path.lstrip().startswith(("{", "[")):
        if len(text_or_path) > MAX_JSON_BYTES:
            raise ResultFileError(f"text_or_path: the JSON text is {len(text_or_path) / 2**20:.1f} MiB; an estimate "
                                  f"file is at most {MAX_JSON_BYTES // 2**20} MiB")
        return text_or_path, "text_or_path: the JSON text"
    try:
        path = os.fspath(text_or_path)
    except TypeError:
        raise ResultFileError(f"text_or_path: expected JSON text or a file path, got {type(text_or_path).__name__}; "
                              f"{_HOW}") from None
    shown = path if len(path) <= 80 else "..." + path[-77:]  # keep the file name
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        if isinstance(text_or_path, str):
            raise ResultFileError(f"text_or_path: {shown!r} is neither JSON text (an object starting with '{{') "
                                  f"nor the path of an existing file; {_HOW}") from None
        why = "no file" if isinstance(exc, FileNotFoundError) else f"cannot read ({getattr(exc, 'strerror', exc)})"
        raise ResultFileError(f"text_or_path: {why} {shown!r}; {_HOW}") from None
    where = f"text_or_path: {shown!r}"
    if not stat.S_ISREG(info.st_mode):
        raise ResultFileError(f"{where} is not a regular file; {_HOW}")
    if info.st_size > MAX_JSON_BYTES:
        raise ResultFileError(f"{where} is {info.st_size / 2**20:.1f} MiB; an estimate file is at most "
                              f"{MAX_JSON_BYTES // 2**20} MiB")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise ResultFileError(f"{where}: cannot read ({exc.strerror}); {_HOW}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise ResultFileError(f"{where} is larger than {MAX_JSON_BYTES // 2**20} MiB, the limit of an estimate file")
    try:
        return raw.decode("utf-8"), where
    except UnicodeDecodeError:
        raise ResultFileError(f"{where} is not UTF-8 text; {_HOW}") from None


def _json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` outside strings, without recursion."""
    skeleton = _JSON_STRING.sub("", text).encode("utf-8", "ignore")
    codes = np.frombuffer(skeleton, dtype=np.uint8)
    step = ((codes == ord("[")) | (codes == ord("{"))).astype(np.int64) - ((codes == ord("]")) | (codes == ord("}")))
    return int(np.cumsum(step).max(initial=0))


def _parse(text, where):
    """The checked dict of an estimate file (every key of :meth:`Estimate.to_dict` present)."""
    depth = _json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ResultFileError(f"{where} is nested {depth} levels deep; an estimate file is at most "
                              f"{MAX_JSON_DEPTH} deep. {_HOW[0].upper()}{_HOW[1:]}")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = "; it may be truncated" if exc.pos >= len(text.rstrip()) else ""
        raise ResultFileError(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}){hint}; "
                              f"{_HOW}") from None
    except RecursionError:  # below MAX_JSON_DEPTH this cannot happen; kept as a guard
        raise ResultFileError(f"{where} is nested too deep to read") from None
    if not isinstance(d, dict):
        raise ResultFileError(f"{where}: expected a JSON object written by Estimate.to_json, got a JSON "
                              f"{type(d).__name__}")
    if d.get("format") != _FORMAT:
        raise ResultFileError(f"{where} is not an odeinfer Estimate JSON (format {str(d.get('format'))[:40]!r}, "
                              f"expected {_FORMAT!r}); {_HOW}")
    missing = [k for k in _KEYS if k not in d]
    if missing:
        raise ResultFileError(f"{where} lacks the key(s) {missing}; the file is incomplete. {_HOW[0].upper()}{_HOW[1:]}")
    if not isinstance(d["model"], dict):
        raise ResultFileError(f"{where}: the field 'model' must be an object; the file holds something else")
    missing = [k for k in _MODEL_KEYS if k not in d["model"]]
    if missing:
        raise ResultFileError(f"{where} lacks the key(s) {missing} in 'model'; the file is incomplete")
    return d


def _check_model(model, stored, fingerprint):
    """Refuse a ``model`` that is not the one the stored estimate was fitted with."""
    if not isinstance(model, Model):
        raise InputError(f"model: expected an odeinfer Model (or None to rebuild it from the file), "
                         f"got {type(model).__name__}")
    states = tuple(str(s) for s in stored["states"]) if isinstance(stored["states"], list) else ()
    params = tuple(str(p) for p in stored["params"]) if isinstance(stored["params"], list) else ()
    name = str(stored["name"])[:80]
    if (states, params) != (tuple(model.states), tuple(model.params)):
        raise InputError(f"model: the estimate was fitted with model {name!r} (states {list(states)}, parameters "
                         f"{list(params)}), but the given model {model.name!r} has states {list(model.states)} and "
                         f"parameters {list(model.params)}; pass the estimate's model, or model=None to rebuild "
                         "it from the file")
    if fingerprint is not None and fingerprint != model.fingerprint:
        raise InputError(f"model: the given model {model.name!r} has the names of the estimate's model {name!r} but "
                         f"other equations (fingerprint {model.fingerprint}, the estimate's {str(fingerprint)[:16]}); "
                         "pass the estimate's model, or model=None to rebuild it from the file")


def _check_observables(model, stored):
    """Refuse a ``model`` whose observables are not the stored estimate's (names, expressions, noise)."""
    from odeinfer.results._problem_json import observables_to_dict

    have = observables_to_dict(model) if model.observables else None
    if have is None and stored is None:
        return
    if have is None or stored is None or have != stored:
        def names(x):
            return [str(o.get("name"))[:40] for o in x["observables"]] if isinstance(x, dict) and isinstance(
                x.get("observables"), list) and all(isinstance(o, dict) for o in x["observables"]) else []

        raise InputError(f"model: the estimate was fitted with the observables {names(stored)}, but the given model "
                         f"{model.name!r} has {names(have)} (or other expressions or noise models); pass the estimate's "
                         "model (with model.observe(...)), or model=None to rebuild it from the file")


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
