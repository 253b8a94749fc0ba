"""Frequentist confidence intervals next to posterior credible intervals: :func:`compare_intervals`."""

from __future__ import annotations

import math

import numpy as np

from odeinfer._lazy import pandas as pd
from odeinfer.diagnostics._names import draws_matrix, has_name, posterior_of
from odeinfer.errors import InputError, OdeinferError

__all__ = ["compare_intervals", "COLUMNS", "as_estimates", "source_labels", "posterior_summary"]

COLUMNS = ("param", "source", "method", "estimate", "lower", "upper", "width", "overlap", "mahalanobis", "note")
"""Columns of the table :func:`compare_intervals` returns, in order."""

_METHODS = ("wald", "profile")


def _model_key(model):
    return (model.name, tuple(model.states), tuple(model.params), tuple(sorted(model.equations().items())))


def as_estimates(estimates, argument="estimates"):
    """Validate a single Estimate or a sequence of them, all of one model: list of Estimate."""
    from odeinfer.results import Estimate

    if isinstance(estimates, Estimate):
        estimates = [estimates]
    if isinstance(estimates, (str, bytes)) or not hasattr(estimates, "__iter__"):
        raise InputError(f"{argument}: expected an Estimate or a list of Estimates, got {type(estimates).__name__}")
    estimates = list(estimates)
    bad = [f"{i}: {type(e).__name__}" for i, e in enumerate(estimates) if not isinstance(e, Estimate)]
    if bad:
        raise InputError(f"{argument}: every item must be an odeinfer Estimate (from an estimator's fit); "
                         f"got {', '.join(bad)}")
    if estimates:
        key = _model_key(estimates[0].model)
        other = [f"{e.estimator} ({e.model.name!r})" for e in estimates[1:] if _model_key(e.model) != key]
        if other:
            raise InputError(f"{argument}: estimates of different models cannot be compared; the first is of "
                             f"model {estimates[0].model.name!r}, but {other} differ (states, parameters or "
                             "equations); pass estimates of one model")
    return estimates


def source_labels(estimates):
    """One label per estimate: the estimator's name, numbered (``"#2"``) when repeated."""
    counts, seen, out = {}, {}, []
    for e in estimates:
        counts[e.estimator] = counts.get(e.estimator, 0) + 1
    for e in estimates:
        seen[e.estimator] = seen.get(e.estimator, 0) + 1
        out.append(e.estimator if counts[e.estimator] == 1 else f"{e.estimator}#{seen[e.estimator]}")
    return out


def _check_alpha(alpha):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"alpha: expected a number in (0, 1) (1 - the interval level), got {alpha!r}")
    return float(alpha)


def posterior_summary(idata, names, alpha=0.05):
    """Posterior mean, equal-tailed and HDI ``1 - alpha`` intervals of ``names``.

    Returns
    -------
    dict name -> dict(mean, et=(lo, hi), hdi=(lo, hi))
    """
    from odeinfer.bayes._idata import hdi

    X = draws_matrix(idata, list(names))
    out = {}
    for j, n in enumerate(names):
        x = X[:, j]
        lo, hi = np.quantile(x, [alpha / 2, 1 - alpha / 2])
        h = hdi(x, 1 - alpha)
        out[n] = {"mean": float(np.mean(x)), "et": (float(lo), float(hi)), "hdi": (float(h[0]), float(h[1]))}
    return out


def mahalanobis(point, draws):
    """``sqrt((point - mean)' Sigma^-1 (point - mean))`` with the draws' mean and covariance (k >= 1)."""
    draws = np.asarray(draws, dtype=float)
    mu = draws.mean(axis=0)
    cov = np.atleast_2d(np.cov(draws, rowvar=False))
    r = np.asarray(point, dtype=float) - mu
    try:
        d2 = float(r @ np.linalg.solve(cov, r))
    except np.linalg.LinAlgError:
        d2 = float(r @ np.linalg.pinv(cov) @ r)
    return math.sqrt(max(d2, 0.0))


def _overlap(lo, hi, plo, phi):
    width = hi - lo
    if not (np.isfinite(width) and width > 0 and np.isfinite(plo) and np.isfinite(phi)):
        return math.nan
    return max(0.0, min(hi, phi) - max(lo, plo)) / width


def compare_intervals(estimates, idata=None, alpha=0.05, methods=("wald",)):
    """Every estimator's confidence interval next to the posterior's credible intervals.

    Parameters
    ----------
    estimates : Estimate or sequence of Estimate
        Estimates of one model (different models raise :class:`~odeinfer.errors.InputError`).
    idata : arviz.InferenceData, optional
        Posterior draws, named as described in :mod:`odeinfer.diagnostics._names`
        (``alpha``, ``x0[prey]``, ``sigma[prey]``, ...).
    alpha : float, default 0.05
        Intervals have level ``1 - alpha``.
    methods : sequence of {"wald", "profile"}, default ("wald",)
        Frequentist interval methods, via ``est.conf_int(alpha, method=...)``; an estimate
        that does not support a method gets a row with NaN bounds and a ``note``
        (``"not available: ..."``, or ``"failed: ..."`` when the computation raised).

    Returns
    -------
    pandas.DataFrame
        Long table with columns ``param, source, method, estimate, lower, upper, width,
        overlap, mahalanobis, note``: one row per (parameter, estimate, method), then per
        parameter with posterior draws two rows with ``source="posterior"`` and methods
        ``"equal-tailed"`` and ``"hdi"`` (``estimate`` = posterior mean).
        ``overlap`` is the fraction of a frequentist interval's length that lies inside the
        posterior's equal-tailed interval (NaN without a posterior). ``mahalanobis`` is
        ``sqrt((theta_hat - mu)' Sigma^-1 (theta_hat - mu))`` with ``mu, Sigma`` the posterior
        mean and covariance over the names the estimate shares with the posterior (one value
        per estimate, repeated on its rows; also in ``df.attrs["mahalanobis"]``).

    Examples
    --------
    >>> table = oi.compare_intervals([est_oc, est_gm], idata)        # doctest: +SKIP
    >>> table.pivot_table(index="param", columns="source", values="width")  # doctest: +SKIP
    """
    estimates = as_estimates(estimates)
    if not estimates:
        raise InputError("estimates: expected at least one Estimate, got an empty list")
    alpha = _check_alpha(alpha)
    if isinstance(methods, str):
        methods = (methods,)
    methods = tuple(methods)
    unknown = [m for m in methods if m not in _METHODS]
    if unknown or not methods:
        raise InputError(f"methods: expected a non-empty sequence of {list(_METHODS)}, got {list(methods)!r}")
    if idata is not None:
        posterior_of(idata)
    labels = source_labels(estimates)

    names = []
    for e in estimates:
        names.extend(n for n in e.names if n not in names)
    post_names = [n for n in names if idata is not None and has_name(idata, n)]
    post = posterior_summary(idata, post_names, alpha) if post_names else {}

    maha = {}
    for e, lab in zip(estimates, labels):
        shared = [n for n in e.names if n in post]
        if shared and np.all(np.isfinite(e.values)):
            point = [float(dict(zip(e.names, e.values))[n]) for n in shared]
            maha[lab] = mahalanobis(point, draws_matrix(idata, shared))
        else:
            maha[lab] = math.nan

    intervals = {}
    for e, lab in zip(estimates, labels):
        for m in methods:
            try:
                ci = e.conf_int(alpha=alpha, method=m)
                intervals[lab, m] = (ci, "")
            except ValueError as exc:  # not supported by this estimate (InputError is a ValueError too)
                intervals[lab, m] = (None, f"not available: {exc}")
            except OdeinferError as exc:  # supported, but the computation failed (e.g. a profile's solve)
                intervals[lab, m] = (None, f"failed: {type(exc).__name__}: {exc}")

    rows = []
    for n in names:
        p = post.get(n)
        for e, lab in zip(estimates, labels):
            if n not in e.names:
                continue
            value = float(e.values[e.names.index(n)])
            for m in methods:
                ci, note = intervals[lab, m]
                lo = hi = math.nan
                if ci is not None and n in ci.index:
                    lo, hi = float(ci.loc[n, "lower"]), float(ci.loc[n, "upper"])
                if ci is not None and not (np.isfinite(lo) and np.isfinite(hi)):
                    note = "no finite interval (no covariance; see the estimate's warnings)"
                ov = _overlap(lo, hi, *p["et"]) if p else math.nan
                rows.append((n, lab, m, value, lo, hi, hi - lo, ov, maha[lab], note))
        if p:
            for m, key in (("equal-tailed", "et"), ("hdi", "hdi")):
                lo, hi = p[key]
                rows.append((n, "posterior", m, p["mean"], lo, hi, hi - lo, math.nan, math.nan, ""))
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df.attrs["alpha"] = alpha
    df.attrs["mahalanobis"] = maha
    return df
