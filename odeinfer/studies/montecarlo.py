"""Monte Carlo replication studies of estimators: :func:`monte_carlo`."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
from odeinfer._lazy import pandas as pd

from ..errors import OdeinferWarning, StudyError
from ._worker import describe, run_chunk, run_payload_chunk
from .result import COLUMNS, StudyResult

__all__ = ["monte_carlo", "EstimatorLike", "ResultLike"]


@runtime_checkable
class ResultLike(Protocol):
    """What an estimator returns, as far as :func:`monte_carlo` is concerned.

    Attributes
    ----------
    params : mapping or pandas.Series
        Parameter name -> estimate (scalars).
    bse : mapping or pandas.Series or None
        Parameter name -> standard error; NaN or None when not available.
    converged : bool
        Whether the estimator reports success.
    """

    params: Any
    bse: Any
    converged: bool


class EstimatorLike(Protocol):
    """A callable ``estimator(data) -> ResultLike`` (duck typed; see :class:`ResultLike`).

    Typically a closure or ``functools.partial`` around ``Estimator(...).fit``
    with the model and start values fixed.
    """

    def __call__(self, data: Any) -> ResultLike: ...


def _root_seed(rng):
    """A SeedSequence from ``rng`` without modifying the caller's object."""
    if isinstance(rng, np.random.SeedSequence):
        return np.random.SeedSequence(rng.entropy, spawn_key=rng.spawn_key, pool_size=rng.pool_size)
    if isinstance(rng, np.random.Generator):
        entropy = int(rng.integers(0, 2**63)) << 64 | int(rng.integers(0, 2**63))
        return np.random.SeedSequence(entropy)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)) and rng >= 0:
        return np.random.SeedSequence(int(rng))
    raise StudyError(
        f"`rng` must be a non-negative int seed, a numpy SeedSequence or a numpy Generator; "
        f"received {rng!r}. Pass e.g. rng=2024 for a reproducible study."
    )


def _check_inputs(simulate_fn, estimators, n_rep, n_jobs, chunk_size, client, executor):
    if not callable(simulate_fn):
        raise StudyError(
            f"`simulate_fn` must be callable as simulate_fn(rng) -> (data, truth); received "
            f"{type(simulate_fn).__name__}."
        )
    if not isinstance(estimators, Mapping) or not estimators:
        raise StudyError(
            f"`estimators` must be a non-empty dict name -> callable(data); received "
            f"{type(estimators).__name__ if not isinstance(estimators, Mapping) else 'an empty dict'}. "
            f"Pass e.g. estimators={{'two_step': fit_two_step}}."
        )
    for name, est in estimators.items():
        if not isinstance(name, str) or not name:
            raise StudyError(f"`estimators` keys must be non-empty str names; received {name!r}.")
        if not callable(est):
            raise StudyError(
                f"`estimators[{name!r}]` must be callable(data) returning an object with params, "
                f"bse and converged; received {type(est).__name__}."
            )
    if isinstance(n_rep, (bool, np.bool_)) or not isinstance(n_rep, (int, np.integer)) or n_rep < 1:
        raise StudyError(f"`n_rep` must be an int >= 1; received {n_rep!r}. Pass e.g. n_rep=500.")
    if isinstance(n_jobs, (bool, np.bool_)) or not isinstance(n_jobs, (int, np.integer)) or (
        n_jobs < 1 and n_jobs != -1
    ):
        raise StudyError(
            f"`n_jobs` must be an int >= 1, or -1 for all CPU cores; received {n_jobs!r}."
        )
    if chunk_size is not None and (
        isinstance(chunk_size, (bool, np.bool_)) or not isinstance(chunk_size, (int, np.integer))
        or chunk_size < 1
    ):
        raise StudyError(
            f"`chunk_size` must be None or an int >= 1 (replications per task); received "
            f"{chunk_size!r}. Leave it None for about four tasks per worker."
        )
    if executor is not None and (client is not None or n_jobs != 1):
        other = "client" if client is not None else f"n_jobs={n_jobs!r}"
        raise StudyError(
            f"`executor` and `{other.split('=')[0]}` exclude each other; received executor= with {other}. "
            f"The executor's workers run the replications: drop {other.split('=')[0]}."
        )
    if client is not None:
        if n_jobs != 1:
            raise StudyError(
                f"`n_jobs` and `client` exclude each other; received n_jobs={n_jobs!r} with a "
                f"client. With client= the cluster's workers run the replications: drop n_jobs."
            )
        from ._dask import check_client

        check_client(client)


def _check_picklable(simulate_fn, estimators):
    """Functions sent to spawned worker processes must pickle by reference."""
    from odeinfer.inference.executor import pickling_problem

    named = [("simulate_fn", simulate_fn)] + [(f"estimators[{k!r}]", v) for k, v in estimators.items()]
    for label, fn in named:
        problem = pickling_problem(fn)
        if problem:
            raise StudyError(
                f"`{label}` cannot be sent to worker processes with n_jobs > 1: {problem}. "
                f"Worker processes are started fresh ('spawn'), so functions must be defined at "
                f"the top level of an importable .py module (no lambdas, nested functions or "
                f"notebook cells); import them from there, or use n_jobs=1."
            )


def _chunks(tasks, size):
    return [tasks[i:i + size] for i in range(0, len(tasks), size)]


def _default_chunk(n_rep, n_slots):
    """About four tasks per worker slot: few tasks when replications are fast, balance when slow."""
    return max(1, math.ceil(n_rep / (4 * n_slots)))


def _run_chunks(simulate_fn, estimators, chunks, *, executor=None, n_workers=1):
    """Run chunks on ``executor`` or ``n_workers`` spawned local processes (through
    :func:`odeinfer.inference.executor.iter_chunks`: a chunk that raises is retried once, a dead
    worker's pool restarted once); yield each output as it completes. Closing the generator
    cancels the outstanding chunks."""
    from odeinfer.errors import ExecutionError
    from odeinfer.inference.executor import iter_chunks

    named = [("simulate_fn", simulate_fn)] + [(f"estimators[{k!r}]", v) for k, v in estimators.items()]
    done = iter_chunks(run_payload_chunk, (simulate_fn, estimators), chunks, executor=executor, n_jobs=n_workers,
                       desc="monte_carlo", check=named)
    try:
        for _, out in done:
            yield out
    except ExecutionError as exc:
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        where = "a worker process" if executor is None else f"a worker of the {type(executor).__name__}"
        raise StudyError(
            f"{where} failed ({describe(cause)}), twice: {exc}. This usually means simulate_fn or an "
            f"estimator could not be imported in a fresh process: define them at the top level of an "
            f"importable .py module (in a script, run the study under `if __name__ == '__main__':`), "
            f"or use n_jobs=1."
        ) from exc
    finally:
        done.close()


def _raise_simulation_failure(out):
    raise StudyError(
        f"simulate_fn failed in replication {out['failed_rep']}: {out['error']}. A simulation "
        f"must return (data, truth) for every seed; fix simulate_fn (or resample inside it)."
    )


def monte_carlo(simulate_fn, estimators, n_rep, *, rng, n_jobs=1, progress=True, client=None,
                chunk_size=None, executor=None):
    """Replicate simulate-then-estimate ``n_rep`` times and collect the estimates.

    Parameters
    ----------
    simulate_fn : callable
        ``simulate_fn(rng) -> (data, truth)``: draws one dataset using the
        :class:`numpy.random.Generator` it is given (and no other randomness),
        and returns it with ``truth``, a dict param name -> true value.
    estimators : dict of str to callable
        ``name -> estimator(data)``, each returning an object with ``params``,
        ``bse`` and ``converged`` (the :class:`ResultLike` protocol, duck
        typed; values must be scalars, None counts as NaN). An estimator that
        raises is recorded (converged False, NaN estimate, the exception in
        ``error``); it never stops the study. There is no time limit: an
        estimator that hangs stalls the study.
    n_rep : int
        Number of replications, >= 1.
    rng : int or numpy.random.SeedSequence or numpy.random.Generator
        Root seed. Replication ``i`` uses ``default_rng(children[i])`` with
        ``children = SeedSequence(...).spawn(n_rep)``, so the results do not
        depend on ``n_jobs``, ``client`` or ``chunk_size``. An int or SeedSequence is a seed: the same value
        repeats the study, and a SeedSequence is not modified. A Generator is
        consumed (128 bits are drawn from it), so reusing it gives a new study.
        ``StudyResult.seed`` repeats any of them.
    n_jobs : int, default 1
        Number of local worker processes (``-1``: all CPU cores). Workers are
        started with the ``"spawn"`` method (safe with numba and threads), so
        ``simulate_fn`` and the estimators must be picklable: defined at the
        top level of an importable module, not in a notebook cell or as lambdas.
    progress : bool, default True
        Show a tqdm progress bar (``tqdm.auto``, so a widget in Jupyter). It
        advances as replications finish, one chunk at a time when ``n_jobs > 1``
        or ``client`` is given.
    client : dask.distributed.Client, optional
        Run the replications on this Dask cluster instead of locally (needs
        ``pip install 'odeinfer[dask]'``; Dask is imported only when a client
        is given). The rows are the same, bit for bit, as a local run with the
        same ``rng`` (except the ``time`` column), provided the workers run the
        same versions of odeinfer, numpy and numba: a different odeinfer on a
        worker raises, a different numpy, numba or Python warns. The functions
        are pickled with Dask's pickler (cloudpickle), so lambdas, closures and
        notebook functions work; what they capture must pickle (capture the
        :class:`~odeinfer.Model`, not its solvers). Excludes ``n_jobs``. See
        Notes.
    executor : concurrent.futures.Executor, optional
        Run the replications on any executor (a ``ProcessPoolExecutor``, a Dask client's
        ``client.get_executor()``, ``mpi4py.futures``'), through
        :func:`odeinfer.inference.executor.iter_chunks`: the same rows as a local run, a chunk
        that raises is retried once, then a :class:`StudyError`; a dead worker is reported,
        never a hang. Excludes
        ``n_jobs`` and ``client`` (``client=`` stays the tuned Dask path: version checks and
        compiled kernels sent by source).
    chunk_size : int, optional
        Replications per task when ``n_jobs > 1``, ``client`` or ``executor`` is given;
        default ``ceil(n_rep / (4 * slots))`` with ``slots`` the local
        processes or the cluster's worker threads when the study starts, so
        fast replications are not sent one by one and slow ones still balance
        (on an adaptive cluster that starts small, pass it). Has no effect on
        the results.

    Returns
    -------
    StudyResult
        ``.frame`` has one row per (replication, estimator, param) and
        ``.summary(alpha)`` the bias, spread, standard-error honesty and
        interval coverage. Parameters an estimator reports beyond ``truth``
        are included with ``truth = NaN``.

    Raises
    ------
    StudyError
        Invalid arguments (including a ``client`` that is not a running
        ``dask.distributed.Client``), functions that cannot be sent to workers,
        a failing ``simulate_fn``, a broken worker process or Dask worker, or
        workers with another odeinfer version.
    InputError
        With ``executor``: it is shut down, or the functions cannot be sent to its workers
        (before any work).

    Notes
    -----
    **On a Dask cluster.** Start a scheduler and workers in the same Python
    environment as the client (same odeinfer, numpy and numba; e.g.
    ``dask scheduler`` and ``dask worker tcp://scheduler:8786 --nthreads 1
    --nworkers 8`` on each node: one thread per process, as numba kernels hold
    the GIL), then::

        from dask.distributed import Client
        client = Client("tcp://scheduler:8786")
        res = monte_carlo(simulate, estimators, 1000, rng=2024, client=client)

    Each worker thread unpickles the functions once and each worker process
    compiles each model once, reusing its kernels for every later chunk: it
    imports the generated module from its own cache directory
    (``$ODEINFER_CACHE_DIR``, else ``~/.cache/odeinfer``), where numba also
    stores the machine code. Set ``ODEINFER_CACHE_DIR`` in the workers'
    environment to a directory on shared storage to compile once for the whole
    cluster (numba keeps one entry per CPU type), or leave it per node and pay
    one compile (about 10-20 s per model) per node. A ``LocalCluster`` inherits
    the client's environment, so its workers share the client's cache. The
    functions' module must be importable on the workers unless it is the
    notebook or script that calls ``monte_carlo`` (Dask then sends them by
    value); or use ``client.upload_file``. A replicate that crashes its worker
    (a segfault, out of memory) is retried by Dask on other workers and then
    raised as a :class:`StudyError`; an estimator that raises is recorded as in
    a local run.

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> def simulate(rng):
    ...     return rng.normal(1.0, 2.0, size=25), {"mu": 1.0}
    >>> def sample_mean(x):
    ...     return SimpleNamespace(params={"mu": x.mean()}, bse={"mu": 2.0 / 5.0}, converged=True)
    >>> res = monte_carlo(simulate, {"mean": sample_mean}, 50, rng=1, progress=False)
    >>> res.frame.shape
    (50, 9)
    """
    _check_inputs(simulate_fn, estimators, n_rep, n_jobs, chunk_size, client, executor)
    n_rep = int(n_rep)
    estimators = dict(estimators)
    root = _root_seed(rng)
    seed = np.random.SeedSequence(root.entropy, spawn_key=root.spawn_key, pool_size=root.pool_size)
    tasks = list(enumerate(root.spawn(n_rep)))

    if executor is not None:
        from odeinfer.inference.executor import as_executor, n_slots

        executor = as_executor(executor)
        chunks = _chunks(tasks, chunk_size or _default_chunk(n_rep, n_slots(executor)))
        outs = _run_chunks(simulate_fn, estimators, chunks, executor=executor)
    elif client is not None:
        from ._dask import dumps_payload, n_slots, run_on_client

        payload = dumps_payload(simulate_fn, estimators)
        chunks = _chunks(tasks, chunk_size or _default_chunk(n_rep, n_slots(client)))
        outs = run_on_client(client, payload, chunks)
    else:
        n_workers = (os.cpu_count() or 1) if n_jobs == -1 else int(n_jobs)
        if n_workers == 1:
            outs = (run_chunk(simulate_fn, estimators, [task]) for task in tasks)
        else:
            _check_picklable(simulate_fn, estimators)
            chunks = _chunks(tasks, chunk_size or _default_chunk(n_rep, n_workers))
            outs = _run_chunks(simulate_fn, estimators, chunks, n_workers=n_workers)

    from tqdm.auto import tqdm

    rows = []
    with tqdm(total=n_rep, disable=not progress, desc="monte_carlo", unit="rep") as bar:
        try:
            for out in outs:
                rows.extend(out["rows"])
                if "failed_rep" in out:
                    _raise_simulation_failure(out)
                bar.update(out["n_done"])
        finally:
            outs.close()  # cancels outstanding work after an error or Ctrl-C
    rows.sort(key=lambda r: r[0])  # stable: keeps estimator and param order within a replication
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame = frame.astype({"rep": "int64", "truth": "float64", "estimate": "float64",
                          "stderr": "float64", "converged": "bool", "time": "float64"})
    _warn_always_failing(frame)
    return StudyResult(frame, seed=seed)


def _warn_always_failing(frame):
    for name, g in frame.groupby("estimator", sort=False):
        if g["error"].notna().all():
            warnings.warn(
                f"estimator {name!r} raised in every replication, e.g. {g['error'].iloc[0]}. "
                f"Check it on one simulated dataset before running a study.",
                OdeinferWarning,
                stacklevel=3,
            )
