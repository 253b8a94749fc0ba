"""Row sources for the equation-error estimators: in-memory data, chunk iterators, memory maps.

A *row source* yields blocks ``(t_r, X_r, D_r)`` of rows (see
:mod:`odeinfer.estimators.finite_difference`). Streamed sources keep only one chunk (plus
the few samples a difference stencil needs from the previous chunk) in memory, so the
normal equations ``J^T J``, ``J^T E`` can be accumulated exactly over any series length.
Streamed sources also give the raw samples in consecutive, non-overlapping chunks
(``sample_chunks``) for the one-pass delta-method covariance of
:mod:`odeinfer.estimators._noise_cov`.

Accepted streamed inputs (``fit_stream(model, source, ...)``):

* a tuple ``(t, y)`` of arrays, ``t`` (N,), ``y`` (N, n), e.g. ``np.load(path, mmap_mode="r")``
  memory maps: random access, re-read for every pass, chunks of ``chunk_size`` samples;
* a 2-D array ``(N, 1 + n)`` whose first column is time (or a path to such a ``.npy``
  file, opened with ``mmap_mode="r"``);
* a callable returning a fresh iterator of ``(t_chunk, y_chunk)`` pairs (one per pass);
* a re-iterable (e.g. a list of ``(t_chunk, y_chunk)`` pairs);
* a one-shot iterator of pairs: one pass only (stochastic estimators with ``max_epochs=1``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import numpy as np

from odeinfer.errors import DataError, InputError

__all__ = ["InMemoryRows", "ArrayRows", "IteratorRows", "as_row_source"]


class InMemoryRows:
    """Rows computed once from in-memory series (one block per experiment)."""

    reiterable = True
    random_access = True

    def __init__(self, blocks):
        self._blocks = [tuple(np.ascontiguousarray(a, dtype=float) for a in b) for b in blocks]
        self.total_rows = sum(b[0].shape[0] for b in self._blocks)

    def blocks(self, rng=None):
        order = range(len(self._blocks)) if rng is None else rng.permutation(len(self._blocks))
        for j in order:
            yield self._blocks[j]

    def describe(self):
        return f"in-memory rows ({self.total_rows})"


def _check_chunk(j, t, y, n, cols, last_t):
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if t.ndim != 1:
        raise DataError(f"chunk {j}: t_chunk must be 1-D (n_times,), got shape {t.shape}")
    if y.ndim == 1 and n == 1:
        y = y[:, None]
    width = len(cols)
    if y.ndim != 2 or y.shape != (t.size, width):
        raise DataError(f"chunk {j}: y_chunk has shape {y.shape}, expected ({t.size}, {width}) "
                        f"(one row per time in t_chunk, one column per state); every chunk must have the same "
                        "number of columns and as many rows as its times")
    if not np.all(np.isfinite(t)):
        raise DataError(f"chunk {j}: t_chunk contains non-finite times; remove or interpolate them")
    if t.size and (np.any(np.diff(t) <= 0) or t[0] <= last_t):
        raise DataError(f"chunk {j}: times must increase strictly within and across chunks "
                        f"(previous chunk ended at t = {last_t!r}); sort the series and drop repeated times")
    return t, np.ascontiguousarray(y[:, cols])


def _pair(j, item):
    try:
        tc, yc = item
    except (TypeError, ValueError):
        raise DataError(f"chunk {j}: expected a pair (t_chunk, y_chunk), got {type(item).__name__}") from None
    return tc, yc


class ArrayRows:
    """Rows from random-access arrays (memory maps allowed), read ``chunk_size`` samples at a time."""

    reiterable = True
    random_access = True

    def __init__(self, t, y, scheme, n_states, cols, chunk_size):
        if t.ndim != 1 or y.ndim != 2 or y.shape[0] != t.shape[0]:
            raise DataError(f"source: expected t (N,) and y (N, n) with the same N, got shapes {t.shape} and {y.shape}")
        if y.shape[1] != len(cols):
            raise DataError(f"source: y has {y.shape[1]} columns, expected {len(cols)} (one per state in `states`)")
        self.t, self.y, self.scheme, self.n, self.cols = t, y, scheme, n_states, cols
        self.chunk_size = chunk_size
        lo, hi = scheme.halo
        self.lo, self.hi = lo, hi
        N = t.shape[0]
        if N < scheme.min_samples():
            raise DataError(f"source: {N} samples, derivative={scheme.name!r} needs at least {scheme.min_samples()}")
        starts = np.arange(lo, N - hi, chunk_size)
        self.ranges = [(int(s), int(min(s + chunk_size, N - hi))) for s in starts]
        self.total_rows = N - lo - hi

    def blocks(self, rng=None):
        order = range(len(self.ranges)) if rng is None else rng.permutation(len(self.ranges))
        for j in order:
            s, e = self.ranges[j]
            tw, yw = _check_chunk(j, self.t[s - self.lo:e + self.hi], self.y[s - self.lo:e + self.hi],
                                  self.n, self.cols, -np.inf)
            yield self.scheme.rows(tw, yw)

    def sample_chunks(self):
        """The samples ``(t, y)`` (model-state columns) in consecutive chunks of ``chunk_size``, in order."""
        last_t = -np.inf
        N = self.t.shape[0]
        for j, s in enumerate(range(0, N, self.chunk_size)):
            t, y = _check_chunk(j, self.t[s:s + self.chunk_size], self.y[s:s + self.chunk_size], self.n, self.cols,
                                last_t)
            last_t = t[-1]
            yield t, y

    def describe(self):
        return f"arrays of {self.t.shape[0]} samples in {len(self.ranges)} chunks"


class IteratorRows:
    """Rows from an iterator of ``(t_chunk, y_chunk)``, carrying the stencil halo across chunks."""

    random_access = False
    total_rows = None

    def __init__(self, make_iter, reiterable, scheme, n_states, cols):
        self.make_iter, self.reiterable = make_iter, reiterable
        self.scheme, self.n, self.cols = scheme, n_states, cols
        self.passes = 0
        self.n_chunks = None

    def _pass(self):
        if self.passes and not self.reiterable:
            raise InputError("source: a one-shot iterator can be read only once, but this fit needs another pass; "
                             "pass a callable that returns a new iterator, a list of chunks, or (t, y) arrays "
                             "(np.load(..., mmap_mode='r'))")
        self.passes += 1

    def sample_chunks(self):
        """The validated, non-empty chunks ``(t, y)`` (model-state columns) of one pass, in order."""
        self._pass()
        last_t = -np.inf
        for j, item in enumerate(self.make_iter()):
            tc, yc = _pair(j, item)
            tc, yc = _check_chunk(j, tc, yc, self.n, self.cols, last_t)
            if tc.size:
                last_t = tc[-1]
                yield tc, yc

    def blocks(self, rng=None):
        self._pass()
        lo, hi = self.scheme.halo
        c = lo + hi
        carry_t = np.empty(0)
        carry_y = np.empty((0, self.n))
        last_t = -np.inf
        j = -1
        for j, item in enumerate(self.make_iter()):
            tc, yc = _pair(j, item)
            tc, yc = _check_chunk(j, tc, yc, self.n, self.cols, last_t)
            if tc.size == 0:
                continue
            last_t = tc[-1]
            tb = np.concatenate([carry_t, tc])
            yb = np.concatenate([carry_y, yc])
            if tb.size > c:
                rows = self.scheme.rows(tb, yb)
                if rows[0].size:
                    yield rows
                carry_t, carry_y = tb[tb.size - c:], yb[tb.size - c:]
            else:
                carry_t, carry_y = tb, yb
        self.n_chunks = j + 1

    def describe(self):
        return f"iterator of chunks ({'re-iterable' if self.reiterable else 'one-shot'})"


def as_row_source(source, scheme, model_states, states=None, chunk_size=100_000):
    """Wrap a streamed ``source`` (see the module notes) as a row source."""
    if not scheme.streamable:
        raise InputError(f"derivative={scheme.name!r} needs the whole series at once and cannot be streamed; "
                         "use derivative='local_polynomial' (a consistent, local smoother) or 'forward'")
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise InputError(f"chunk_size: expected a positive int (samples per chunk), got {chunk_size!r}")
    lo, hi = scheme.halo
    if chunk_size <= lo + hi:
        raise InputError(f"chunk_size: {chunk_size} is not larger than the stencil ({lo + hi + 1} samples); "
                         "use a larger chunk_size")
    names = tuple(model_states) if states is None else tuple(states)
    missing = [s for s in model_states if s not in names]
    unknown = [s for s in names if s not in model_states]
    if missing or unknown or len(set(names)) != len(names):
        raise DataError(f"states: the columns of y must name every model state once; got {list(names)} "
                        f"(model states {list(model_states)}; missing {missing}, unknown {unknown})")
    cols = np.array([names.index(s) for s in model_states], dtype=np.int64)
    n = len(model_states)
    if isinstance(source, (str, os.PathLike)):
        source = np.load(source, mmap_mode="r")
    if isinstance(source, np.ndarray):
        if source.ndim != 2 or source.shape[1] != n + 1:
            raise DataError(f"source: a single array must have shape (N, 1 + n_states) = (N, {n + 1}) with time "
                            f"in column 0, got shape {source.shape}")
        return ArrayRows(source[:, 0], source[:, 1:], scheme, n, cols, int(chunk_size))
    if (isinstance(source, tuple) and len(source) == 2 and isinstance(source[0], np.ndarray)
            and source[0].ndim == 1 and isinstance(source[1], np.ndarray)):
        return ArrayRows(source[0], source[1], scheme, n, cols, int(chunk_size))
    if callable(source):
        def make():
            it = source()
            if not isinstance(it, Iterable):
                raise InputError(f"source: the callable must return an iterator of (t_chunk, y_chunk), "
                                 f"got {type(it).__name__}")
            return iter(it)
        return IteratorRows(make, True, scheme, n, cols)
    if isinstance(source, Iterator):
        return IteratorRows(lambda: source, False, scheme, n, cols)
    if isinstance(source, Iterable) and not isinstance(source, (bytes, dict)):
        return IteratorRows(lambda: iter(source), True, scheme, n, cols)
    raise InputError(f"source: expected (t, y) arrays, an (N, 1 + n) array or .npy path, a callable returning "
                     f"an iterator of (t_chunk, y_chunk), or an iterable of such pairs; got {type(source).__name__}")


def minibatches(source, batch_size, rng):
    """Per epoch: lists of row blocks holding ``batch_size`` rows each (rows shuffled within blocks).

    A final partial batch is used when it holds at least half a batch.
    """
    pending, count = [], 0
    for t, X, D in source.blocks(rng if source.random_access else None):
        if rng is not None and t.size > 1:
            perm = rng.permutation(t.size)
            t, X, D = t[perm], X[perm], D[perm]
        s = 0
        while s < t.size:
            take = min(batch_size - count, t.size - s)
            pending.append((t[s:s + take], X[s:s + take], D[s:s + take]))
            count += take
            s += take
            if count == batch_size:
                yield pending
                pending, count = [], 0
    if pending and 2 * count >= batch_size:
        yield pending
