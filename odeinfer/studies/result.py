"""Result of a Monte Carlo study: :class:`StudyResult`."""

from __future__ import annotations

import html
import math
from statistics import NormalDist

import numpy as np
from odeinfer._lazy import pandas as pd

from ..errors import StudyError

__all__ = ["StudyResult", "COLUMNS"]

COLUMNS = ("rep", "estimator", "param", "truth", "estimate", "stderr", "converged", "time", "error")
"""Columns of :attr:`StudyResult.frame`, in order."""

_SUMMARY_COLUMNS = (
    "estimator", "param", "truth", "n", "n_converged", "mean", "bias", "bias_mcse", "sd", "mse",
    "mean_stderr", "sd_ratio", "coverage", "coverage_mcse", "n_failed", "n_coverage",
)


def _mean(x):
    return float(np.mean(x)) if x.size else math.nan


def _sd(x):
    return float(np.std(x, ddof=1)) if x.size > 1 else math.nan


class StudyResult:
    """Immutable outcome of :func:`~odeinfer.studies.monte_carlo`.

    Parameters
    ----------
    frame : pandas.DataFrame
        Tidy table with columns ``rep, estimator, param, truth, estimate,
        stderr, converged, time, error`` (one row per replication, estimator
        and parameter); a copy is stored.
    seed : numpy.random.SeedSequence, optional
        Root seed of the replications; passing it back as ``rng=`` repeats the
        study.

    Notes
    -----
    ``frame`` returns a new copy on every access, so the stored table cannot
    be changed. Column meanings: ``truth`` the true value (NaN for parameters
    the estimator reports but the simulation has no truth for); ``estimate`` and
    ``stderr`` the estimator's ``params`` and ``bse`` (NaN when missing or when
    the estimator raised); ``converged`` its flag (False when it raised);
    ``time`` wall-clock seconds of the estimator call, repeated on each of its
    parameter rows (the only column that differs between repeated runs); ``error`` ``"Type: message"`` of the
    exception the estimator raised, else missing.
    """

    __slots__ = ("_frame", "_seed")

    def __init__(self, frame, *, seed=None):
        if not isinstance(frame, pd.DataFrame):
            raise StudyError(
                f"`frame` must be a pandas DataFrame; received {type(frame).__name__}. "
                f"StudyResult is normally built by monte_carlo()."
            )
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise StudyError(
                f"`frame` lacks column(s) {missing}; expected the columns {list(COLUMNS)}. "
                f"Build it with monte_carlo() or pd.read_csv of StudyResult.to_csv()."
            )
        if seed is not None and not isinstance(seed, np.random.SeedSequence):
            raise StudyError(f"`seed` must be a numpy SeedSequence or None; received {type(seed).__name__}.")
        table = frame.loc[:, list(COLUMNS)].copy(deep=True).reset_index(drop=True)
        object.__setattr__(self, "_frame", table)
        object.__setattr__(self, "_seed", seed)

    def __setattr__(self, key, value):
        raise AttributeError(f"StudyResult is immutable; cannot set {key!r}.")

    def __reduce__(self):
        return (_rebuild, (self._frame, self._seed))

    @property
    def frame(self):
        """pandas.DataFrame: the tidy per-replication table (a new copy)."""
        return self._frame.copy(deep=True)

    @property
    def seed(self):
        """numpy.random.SeedSequence or None: a fresh copy of the root seed (pass as ``rng=``)."""
        s = self._seed
        if s is None:
            return None
        return np.random.SeedSequence(s.entropy, spawn_key=s.spawn_key, pool_size=s.pool_size)

    @property
    def n_rep(self):
        """int: number of replications."""
        return int(self._frame["rep"].nunique())

    @property
    def estimators(self):
        """tuple of str: estimator names in order of appearance."""
        return tuple(pd.unique(self._frame["estimator"]))

    def summary(self, alpha=0.05):
        """Per (estimator, param) operating characteristics.

        Parameters
        ----------
        alpha : float, default 0.05
            Wald intervals ``estimate +- z * stderr`` with ``z`` the
            ``1 - alpha/2`` normal quantile (nominal coverage ``1 - alpha``).

        Returns
        -------
        pandas.DataFrame
            One row per (estimator, param), columns: ``truth`` (mean true
            value), ``n`` (replications), ``n_converged``, ``mean`` (of the
            estimates), ``bias`` (mean of estimate - truth), ``bias_mcse``
            (its Monte Carlo standard error, ``sd / sqrt(m)``), ``sd``
            (standard deviation of estimate - truth, ddof=1; of the estimate
            when there is no truth), ``mse`` (mean squared error),
            ``mean_stderr`` (mean reported standard error), ``sd_ratio``
            (``mean_stderr / sd``; near 1 when standard errors are honest),
            ``coverage`` (fraction of intervals containing the truth) and
            ``coverage_mcse`` (``sqrt(c (1 - c) / m)``), ``n_failed``
            (replications left out of every statistic: not converged, raised,
            or a non-finite estimate) and ``n_coverage`` (the denominator of
            ``coverage``: usable replications with a finite ``stderr``).

        Notes
        -----
        Only converged replications with a finite estimate are used (``m`` of
        them); coverage and ``mean_stderr`` further need a finite ``stderr``.
        Coverage is therefore a coverage over successful fits: read it with
        ``n_failed`` and ``n_coverage`` next to it. Statistics with no usable
        replication are NaN.
        """
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
            raise StudyError(
                f"`alpha` must be a number in (0, 1); received {alpha!r}. "
                f"Pass e.g. alpha=0.05 for 95% intervals."
            )
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        out = []
        for (est_name, param), g in self._frame.groupby(["estimator", "param"], sort=False):
            est = g["estimate"].to_numpy(dtype=float)
            truth = g["truth"].to_numpy(dtype=float)
            se = g["stderr"].to_numpy(dtype=float)
            conv = g["converged"].to_numpy(dtype=bool)
            use = conv & np.isfinite(est)
            has_truth = use & np.isfinite(truth)
            err = est[has_truth] - truth[has_truth]
            sd = _sd(err) if has_truth.any() else _sd(est[use])
            with_se = use & np.isfinite(se)
            cov_rows = has_truth & np.isfinite(se)
            covered = np.abs(est[cov_rows] - truth[cov_rows]) <= z * se[cov_rows]
            coverage = _mean(covered.astype(float))
            mean_stderr = _mean(se[with_se])
            out.append({
                "estimator": est_name,
                "param": param,
                "truth": _mean(truth[np.isfinite(truth)]),
                "n": int(len(g)),
                "n_converged": int(conv.sum()),
                "mean": _mean(est[use]),
                "bias": _mean(err),
                "bias_mcse": _sd(err) / math.sqrt(err.size) if err.size > 1 else math.nan,
                "sd": sd,
                "mse": _mean(err**2),
                "mean_stderr": mean_stderr,
                "sd_ratio": mean_stderr / sd if sd > 0 else math.nan,
                "coverage": coverage,
                "coverage_mcse": math.sqrt(coverage * (1 - coverage) / covered.size) if covered.size else math.nan,
                "n_failed": int(len(g) - use.sum()),
                "n_coverage": int(covered.size),
            })
        return pd.DataFrame(out, columns=list(_SUMMARY_COLUMNS))

    def to_csv(self, path, **kwargs):
        """Write :attr:`frame` to a CSV file (without the index).

        Parameters
        ----------
        path : str or path-like or file-like
            Destination.
        **kwargs
            Passed to :meth:`pandas.DataFrame.to_csv`.
        """
        kwargs.setdefault("index", False)
        return self._frame.to_csv(path, **kwargs)

    def __repr__(self):
        failed = int(self._frame["error"].notna().sum())
        return (
            f"StudyResult(n_rep={self.n_rep}, estimators={self.estimators}, "
            f"params={tuple(pd.unique(self._frame['param']))}, rows={len(self._frame)}, "
            f"failed_rows={failed})"
        )

    def _repr_html_(self):
        return (
            f"<div class='odeinfer-study'><p>{html.escape(repr(self))}</p>"
            f"{self.summary().to_html(index=False, escape=True)}</div>"
        )


def _rebuild(frame, seed):
    return StudyResult(frame, seed=seed)
