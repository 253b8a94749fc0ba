"""Runs a chunk of Monte Carlo replications (in this process or in a worker process).

Kept free of pandas and of any state so that spawned workers import little.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

import numpy as np

__all__ = ["run_chunk", "run_payload_chunk", "describe"]


def describe(exc):
    """One-line description of an exception: ``"TypeName: message"``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _named_floats(values, what):
    """``{name: float}`` from a mapping or pandas Series (``.items()``)."""
    if isinstance(values, Mapping):
        items = values.items()
    elif callable(getattr(values, "items", None)):  # pandas Series and the like
        items = values.items()
    else:
        raise TypeError(
            f"the estimator's result.{what} must be a mapping or pandas Series name -> value; "
            f"received {type(values).__name__}"
        )
    return {str(k): (math.nan if v is None else float(v)) for k, v in items}


def _unpack_simulation(out):
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(
            f"simulate_fn(rng) must return a tuple (data, truth); received {type(out).__name__}"
        )
    data, truth = out
    if not isinstance(truth, Mapping) or not truth:
        raise TypeError(
            f"simulate_fn(rng) must return truth as a non-empty dict param name -> true value; "
            f"received {type(truth).__name__}"
        )
    return data, {str(k): float(v) for k, v in truth.items()}


def _estimate(estimator, data):
    """Run one estimator; return (params, bse, converged, error) and never raise."""
    try:
        result = estimator(data)
        params = _named_floats(result.params, "params")
        bse = {} if result.bse is None else _named_floats(result.bse, "bse")
        converged = bool(result.converged)
        return params, bse, converged, None
    except Exception as exc:  # a failing estimator is recorded, never fatal
        return {}, {}, False, describe(exc)


def run_chunk(simulate_fn, estimators, tasks):
    """Run replications ``tasks = [(rep, SeedSequence), ...]``.

    Returns
    -------
    dict
        ``{"rows": [...], "n_done": int}``, or on a simulation failure
        ``{"rows": [...], "n_done": int, "failed_rep": rep, "error": text}``.
        Each row is ``(rep, estimator, param, truth, estimate, stderr,
        converged, time, error)``.
    """
    rows = []
    for n_done, (rep, seed) in enumerate(tasks):
        rng = np.random.default_rng(seed)
        try:
            data, truth = _unpack_simulation(simulate_fn(rng))
        except Exception as exc:
            return {"rows": rows, "n_done": n_done, "failed_rep": rep, "error": describe(exc)}
        for name, estimator in estimators.items():
            start = time.perf_counter()
            params, bse, converged, error = _estimate(estimator, data)
            elapsed = time.perf_counter() - start
            names = list(truth) + [p for p in params if p not in truth]
            for p in names:
                rows.append((
                    rep, name, p, truth.get(p, math.nan), params.get(p, math.nan),
                    bse.get(p, math.nan), converged, elapsed, error,
                ))
    return {"rows": rows, "n_done": len(tasks)}


def run_payload_chunk(payload, tasks):
    """:func:`run_chunk` with ``payload = (simulate_fn, estimators)`` (the form executors call)."""
    simulate_fn, estimators = payload
    return run_chunk(simulate_fn, estimators, tasks)
