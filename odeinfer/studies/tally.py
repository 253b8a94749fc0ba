"""Per-replication arrays of one estimator from a study frame, failed replications counted.

A replication *fails* when the estimator raised (``error`` set) or returned a non-finite
estimate for any of the requested parameters. Failed replications are excluded from every
statistic computed on the arrays, and their number travels with them (``n_failed``) so that
it is reported next to the statistic, never dropped silently: :func:`replicates`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import StudyError

__all__ = ["Replicates", "replicates"]


class Replicates(NamedTuple):
    """Successful replications of one estimator.

    Attributes
    ----------
    reps : ndarray, shape (n_ok,)
        Replication numbers kept.
    estimate, stderr : ndarray, shape (n_ok, k)
        Estimates and reported standard errors (stderr may be NaN) of the ``k`` parameters.
    truth : ndarray, shape (k,)
        True values.
    converged : ndarray of bool, shape (n_ok,)
        The estimator's own flag, for the kept replications.
    n : int
        Replications run.
    n_failed : int
        Replications that raised or gave a non-finite estimate (``n - n_ok``).
    """

    reps: np.ndarray
    estimate: np.ndarray
    stderr: np.ndarray
    truth: np.ndarray
    converged: np.ndarray
    n: int
    n_failed: int

    @property
    def n_ok(self):
        """int: replications kept."""
        return self.n - self.n_failed

    def label(self):
        """``"n_ok of n (n_failed failed)"``: the denominator of statistics on these arrays."""
        return f"{self.n_ok} of {self.n} ({self.n_failed} failed)"


def replicates(frame, estimator, params):
    """The successful replications of ``estimator`` in a study ``frame``, failures counted.

    Parameters
    ----------
    frame : pandas.DataFrame
        :attr:`StudyResult.frame` (or the same table read back from CSV).
    estimator : str
        Name of the estimator in the frame.
    params : sequence of str
        Parameters to extract, in this order.

    Returns
    -------
    Replicates

    Raises
    ------
    StudyError
        ``estimator`` or one of ``params`` is not in the frame.
    """
    params = list(params)
    g = frame[frame["estimator"] == estimator]
    if g.empty:
        raise StudyError(f"`estimator`: {estimator!r} is not in the study; it has "
                         f"{sorted(map(str, frame['estimator'].unique()))}.")
    missing = [p for p in params if p not in set(g["param"])]
    if missing:
        raise StudyError(f"`params`: {missing} not reported by {estimator!r}; it reports "
                         f"{sorted(map(str, g['param'].unique()))}.")
    g = g[g["param"].isin(params)]
    est = g.pivot(index="rep", columns="param", values="estimate")[params]
    se = g.pivot(index="rep", columns="param", values="stderr")[params].reindex(est.index)
    by_rep = g.groupby("rep")
    raised = by_rep["error"].apply(lambda e: bool(e.notna().any())).reindex(est.index).to_numpy()
    conv = by_rep["converged"].apply(lambda c: bool(np.all(c.astype(bool)))).reindex(est.index).to_numpy()
    values = est.to_numpy(dtype=float)
    ok = ~raised & np.all(np.isfinite(values), axis=1)
    truth = g.groupby("param")["truth"].first()[params].to_numpy(dtype=float)
    return Replicates(est.index.to_numpy()[ok], values[ok], se.to_numpy(dtype=float)[ok], truth, conv[ok],
                      int(len(values)), int((~ok).sum()))
