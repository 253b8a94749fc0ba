"""Multi-start optimisation helpers: space-filling starts in a box, a process-parallel runner and the
check of how often the best was reached.

:func:`sample_starts` draws scrambled Sobol or Latin-hypercube points (``scipy.stats.qmc``)
in a box; :func:`run_starts` runs ``fn(payload, chunk)`` over chunks of starts, in this process,
on local processes or on any ``concurrent.futures`` executor. A start that raises is recorded as failed
(its error text kept) by ``fn``, never fatal. :func:`best_reached_once` says when a single start found the
best objective (:class:`MultistartWarning`).
"""

from __future__ import annotations

import math

import numpy as np

from odeinfer.errors import InputError, OdeinferWarning

__all__ = ["sample_starts", "run_starts", "best_reached_once", "MultistartWarning"]

NEAR_BEST = 0.1  # starts whose objective ends within this of the best reached it (PEtab benchmarks' convention)


class MultistartWarning(OdeinferWarning):
    """Of several starts, one alone reached the best objective: a minimum found once may not be the global
    one; the message gives the counts, the next best start's objective and the fix (more starts)."""


def best_reached_once(objectives, what="negative log-likelihood"):
    """The message of :class:`MultistartWarning` when exactly one of two or more finite ``objectives`` (one per
    start, NaN for a failed one) ends within :data:`NEAR_BEST` of their minimum, else None."""
    f = np.asarray(objectives, float)
    ok = np.sort(f[np.isfinite(f)])
    if ok.size < 2 or ok[1] <= ok[0] + NEAR_BEST:
        return None
    return (f"the best {what} ({ok[0]:.6g}) was reached from 1 of {f.size} starts ({ok.size} ended with a finite "
            f"value; the next best ended {ok[1] - ok[0]:.3g} higher): a minimum found once may not be the global "
            f"one. Run more starts (e.g. Embedding(starts={2 * f.size})) and check that the best is reached again.")


def sample_starts(lo, hi, n, *, sampler="sobol", rng=None):
    """``n`` points in the box ``[lo, hi]`` (finite bounds).

    Parameters
    ----------
    lo, hi : ndarray (k,)
        Finite bounds, ``lo < hi``.
    n : int
        Number of points.
    sampler : {"sobol", "lhs"}, default "sobol"
        Scrambled Sobol sequence (first ``n`` points; ``n`` need not be a power of two) or
        Latin hypercube.
    rng : int or numpy.random.Generator, optional
        Seed of the scrambling / permutation.

    Returns
    -------
    ndarray (n, k)
    """
    import warnings

    from scipy.stats import qmc

    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise InputError(f"bounds: multi-start needs finite bounds lo < hi for every sampled unknown; got lo={lo}, "
                         f"hi={hi}")
    if sampler == "sobol":
        eng = qmc.Sobol(lo.size, scramble=True, seed=rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "balance properties" warning when n is not a power of 2
            x = eng.random(n)
    elif sampler == "lhs":
        x = qmc.LatinHypercube(lo.size, seed=rng).random(n)
    else:
        raise InputError(f"sampler: expected 'sobol' or 'lhs', got {sampler!r}")
    return qmc.scale(x, lo, hi)


def run_starts(fn, payload, starts, *, n_jobs=1, executor=None, progress=False):
    """Run ``fn(payload, [(index, start), ...]) -> [result dict, ...]`` over all starts.

    Parameters
    ----------
    fn : callable
        Top-level (picklable) function; it must catch its own per-start failures and return
        one dict per start with at least ``"index"``.
    payload : object
        Passed unchanged to every call (picklable when ``n_jobs > 1`` or ``executor`` is given).
    starts : ndarray (n, k)
    n_jobs : int, default 1
        Worker processes (``-1``: all cores); 1 runs in this process. Ignored with ``executor``.
    executor : concurrent.futures.Executor or Dask Client, optional
        Run the starts there (see :func:`odeinfer.inference.executor.map_chunks`); each start's
        fit depends on its start only, so the results are those of a run in this process.
    progress : bool, default False
        Progress bar over the starts.

    Returns
    -------
    list of dict, ordered by start index.

    Raises
    ------
    InputError
        ``executor`` is shut down, or ``payload`` cannot be sent to its workers (before any work).
    ExecutionError
        A chunk of starts raised twice, or its worker process died (see ``map_chunks``).
    """
    from odeinfer.inference.executor import as_executor, map_chunks, n_slots, split

    executor = as_executor(executor)
    tasks = list(enumerate(np.asarray(starts, float)))
    if executor is None:  # one chunk per local worker
        workers = n_slots(None, n_jobs)
        chunks = split(tasks, 1, chunk_size=max(1, math.ceil(len(tasks) / workers)) if tasks else 1)
    else:
        chunks = split(tasks, n_slots(executor))
    outs = map_chunks(fn, payload, chunks, executor=executor, n_jobs=n_jobs, progress=progress, desc="multistart")
    return sorted((d for out in outs for d in out), key=lambda d: d["index"])
