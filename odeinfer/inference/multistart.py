"""Multi-start optimisation helpers: space-filling starts in a box and a process-parallel runner.

:func:`sample_starts` draws scrambled Sobol or Latin-hypercube points (``scipy.stats.qmc``)
in a box; :func:`run_starts` runs ``fn(payload, chunk)`` over chunks of starts, in this process
or in spawned worker processes. A start that raises is recorded as failed (its error text
kept), never fatal.
"""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from odeinfer.errors import InputError

__all__ = ["sample_starts", "run_starts"]


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


def run_starts(fn, payload, starts, *, n_jobs=1):
    """Run ``fn(payload, [(index, start), ...]) -> [result dict, ...]`` over all starts.

    Parameters
    ----------
    fn : callable
        Top-level (picklable) function; it must catch its own per-start failures and return
        one dict per start with at least ``"index"``.
    payload : object
        Passed unchanged to every call (picklable when ``n_jobs > 1``).
    starts : ndarray (n, k)
    n_jobs : int, default 1
        Worker processes (``-1``: all cores); 1 runs in this process.

    Returns
    -------
    list of dict, ordered by start index. A chunk whose worker crashed gives dicts with
    ``status="failed"`` and the error text.
    """
    import os

    tasks = list(enumerate(np.asarray(starts, float)))
    workers = (os.cpu_count() or 1) if n_jobs == -1 else int(n_jobs)
    if workers <= 1 or len(tasks) <= 1:
        out = fn(payload, tasks)
    else:
        size = max(1, math.ceil(len(tasks) / workers))
        chunks = [tasks[i:i + size] for i in range(0, len(tasks), size)]
        ctx = multiprocessing.get_context("spawn")
        out = []
        with ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=ctx) as pool:
            futs = [(c, pool.submit(fn, payload, c)) for c in chunks]
            for c, fut in futs:
                try:
                    out.extend(fut.result())
                except Exception as exc:  # a broken worker: its starts count as failed
                    out.extend({"index": i, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
                               for i, _ in c)
    return sorted(out, key=lambda d: d["index"])
