"""Run a picklable function over chunks of tasks on any :class:`concurrent.futures.Executor`.

:func:`map_chunks` sends odeinfer's parallel work (multi-start fits, profile walks, bootstrap
refits, Monte Carlo studies given ``executor=``) to other processes or machines. It takes ``executor=`` -- any
``concurrent.futures.Executor``: local processes (the default, ``n_jobs`` spawned workers), a
Dask client (``client`` itself or ``client.get_executor()``), ``mpi4py.futures``'
executor -- and guarantees:

- results in the order of the chunks, whatever order the workers finish in; the work is seeded
  per task by the caller (never per worker), so the results are bitwise equal to a local run;
- a progress bar (``tqdm.auto`` when installed) when ``progress=True``;
- refusal before any work of an executor that is shut down (or a closed Dask client) and of a
  function or payload that cannot be sent to the workers (:class:`~odeinfer.errors.InputError`
  naming it and saying what to change);
- a task that raises is retried once, then reported as an
  :class:`~odeinfer.errors.ExecutionError` naming the task; a worker process that dies breaks a
  process pool (``BrokenProcessPool``): the default local pool is restarted once for the
  unfinished tasks, a pool the caller gave is reported (never a hang).

Taking the same code to a cluster
---------------------------------
The code does not change; only the executor does. On one machine::

    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(4) as pool:
        fit = oi.Embedding(starts=64, bounds=b, executor=pool).fit(model, data)
        ci = fit.conf_int(method="bootstrap", n_boot=2000, seed=1, executor=pool, progress=True)

On a Dask cluster (workers in the same Python environment: same odeinfer, numpy, numba; one
thread per worker process, as numba kernels hold the GIL)::

    from dask.distributed import Client
    client = Client("tcp://scheduler:8786")          # or Client(LocalCluster(...))
    fit = oi.Embedding(starts=64, bounds=b, executor=client).fit(model, data)

On Slurm or PBS, ``dask-jobqueue`` starts the workers as batch jobs::

    from dask_jobqueue import SLURMCluster            # PBSCluster for PBS/Torque
    cluster = SLURMCluster(cores=1, processes=1, memory="4GB", walltime="02:00:00",
                           job_extra_directives=["--account=myproject"],
                           job_script_prologue=["export ODEINFER_CACHE_DIR=/shared/odeinfer-cache"])
    cluster.scale(jobs=32)
    client = Client(cluster)                          # then executor=client as above

Point ``ODEINFER_CACHE_DIR`` at shared storage so the model kernels compile once for the whole
cluster. Any other ``concurrent.futures.Executor`` (e.g. ``mpi4py.futures.MPIPoolExecutor()``) works
the same way.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import sys
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool

from odeinfer.errors import ExecutionError, InputError

__all__ = ["as_executor", "check_executor", "check_picklable", "pickling_problem", "split", "map_chunks", "iter_chunks",
           "n_slots"]

_FIX_EXECUTOR = ("pass a running concurrent.futures.Executor (e.g. ProcessPoolExecutor(), a Dask "
                 "Client or client.get_executor()), or executor=None for local processes")


def _is_dask_client(obj):
    return type(obj).__module__.split(".")[0] == "distributed" and callable(getattr(obj, "get_executor", None))


def as_executor(executor, *, argument="executor"):
    """``executor`` as a :class:`concurrent.futures.Executor` (None stays None).

    A Dask ``Client`` becomes ``client.get_executor()``. Anything else that is not an Executor
    raises :class:`InputError` naming ``argument``.
    """
    if executor is None or isinstance(executor, Executor):
        return executor
    if _is_dask_client(executor):
        return executor.get_executor()
    raise InputError(f"{argument}: expected a concurrent.futures.Executor or a Dask Client, got "
                     f"{type(executor).__name__}; {_FIX_EXECUTOR}")


def check_executor(executor, *, argument="executor"):
    """Refuse an executor that cannot take work (shut down, broken, or its Dask client closed).

    Probes it with one trivial task (``int()``, a builtin: nothing to import on the worker).
    """
    if executor is None:
        return
    try:
        probe = executor.submit(int)
    except Exception as exc:
        raise InputError(f"{argument}: the {type(executor).__name__} given cannot take work ({_describe(exc)}); it "
                         "was shut down, its worker process died or its client was closed. Create a new executor "
                         "(or Dask Client) and pass it, or executor=None for local processes") from None
    probe.cancel()


def _by_value(executor):
    """Whether the executor's workers receive functions by value (cloudpickle: Dask, Ray)."""
    return type(executor).__module__.split(".")[0] in ("distributed", "ray")


def _spawned(executor):
    """Whether functions must be importable by workers started fresh (not forked, not threads)."""
    if isinstance(executor, ThreadPoolExecutor) or _by_value(executor):
        return False
    ctx = getattr(executor, "_mp_context", None)
    return ctx is None or ctx.get_start_method() != "fork"


def check_picklable(named, executor, *, local_processes=False):
    """Refuse, before any work, objects the executor's workers could not receive.

    Parameters
    ----------
    named : sequence of (label, object)
        The objects sent (user callbacks first, so the message names the culprit).
    executor : Executor or None
    local_processes : bool
        ``executor`` is None and spawned local processes will run the tasks.

    Raises
    ------
    InputError
        ``"{label}: cannot be sent to the workers of ...: ...; define it at the top level ..."``.
    """
    if executor is None and not local_processes or isinstance(executor, ThreadPoolExecutor):
        return
    where = "local worker processes" if executor is None else f"the workers of the {type(executor).__name__}"
    by_value = executor is not None and _by_value(executor)
    spawned = not by_value and (executor is None or _spawned(executor))
    for label, obj in named:
        why = pickling_problem(obj, spawned=spawned, by_value=by_value)
        if why:
            raise InputError(
                f"{label}: cannot be sent to {where}: {why}; received {type(obj).__name__}. Define functions at the "
                "top level of an importable .py module (no lambdas, nested functions or notebook cells) and capture "
                "only picklable objects (a Model, Data and numbers, not open files, locks or solvers); or pass a Dask "
                "Client as executor (it sends functions by value), or run in this process (executor=None, n_jobs=1)")


def pickling_problem(obj, *, spawned=True, by_value=False):
    """Why ``obj`` cannot be sent to worker processes, or None.

    ``spawned``: the workers start fresh, so a function of an interactive ``__main__`` (a notebook
    cell) cannot be found there. ``by_value``: the workers receive functions by value (cloudpickle).
    """
    main = sys.modules.get("__main__")
    interactive = not getattr(main, "__file__", None)
    module = getattr(obj, "__module__", None) or type(obj).__module__
    if spawned and interactive and module == "__main__" and callable(obj):
        return "it is defined in an interactive session or notebook (module __main__)"
    if by_value:
        import cloudpickle as dumper
    else:
        dumper = pickle
    try:
        dumper.dumps(obj)
    except Exception as exc:
        return f"it cannot be pickled ({_describe(exc)})"
    return None


def n_slots(executor, n_jobs=1):
    """Worker slots of ``executor`` (processes or threads), or of ``n_jobs`` local processes."""
    if executor is None:
        return (os.cpu_count() or 1) if n_jobs == -1 else max(1, int(n_jobs))
    client = getattr(executor, "_client", None) if _by_value(executor) else None
    if client is not None:
        try:
            return max(1, sum(client.nthreads().values()))
        except Exception:
            return 1
    return max(1, int(getattr(executor, "_max_workers", None) or os.cpu_count() or 1))


def split(tasks, slots, chunk_size=None):
    """``tasks`` in consecutive chunks: ``chunk_size`` each, default about four chunks per slot."""
    tasks = list(tasks)
    size = int(chunk_size) if chunk_size else max(1, math.ceil(len(tasks) / (4 * max(1, slots))))
    return [tasks[i:i + size] for i in range(0, len(tasks), size)]


def _describe(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass


def _bar(progress, total, desc):
    if not progress:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress bars are optional
        return _NoBar()
    return tqdm(total=total, desc=desc, unit="task")


def _size(chunk):
    try:
        return len(chunk)
    except TypeError:
        return 1


def map_chunks(fn, payload, chunks, *, executor=None, n_jobs=1, progress=False, desc="tasks", check=()):
    """``[fn(payload, chunk) for chunk in chunks]``, run on ``executor`` (or ``n_jobs`` local processes).

    Parameters
    ----------
    fn : callable
        ``fn(payload, chunk) -> result``; top level of an importable module when processes run it.
    payload : object
        Passed unchanged to every call (sent once per task).
    chunks : sequence
        One task per chunk; the progress bar advances by ``len(chunk)``.
    executor : concurrent.futures.Executor or Dask Client, optional
        Where the tasks run; not shut down here. Default: this process when ``n_jobs == 1``,
        else ``n_jobs`` spawned local processes (``-1``: all cores), shut down at the end.
    n_jobs : int, default 1
        Local processes when ``executor`` is None.
    progress : bool, default False
        Show a progress bar (tqdm, when installed).
    desc : str
        Label of the progress bar and of error messages (``"bootstrap"``, ``"multistart"``).
    check : sequence of (label, object)
        User objects inside ``payload`` to name when they cannot be sent to the workers.

    Returns
    -------
    list
        The results, in the order of ``chunks``.

    Raises
    ------
    InputError
        Before any work: ``executor`` is not an executor, is shut down or closed, or ``fn``,
        ``payload`` or an object of ``check`` cannot be sent to its workers.
    ExecutionError
        A task raised twice (its retry included), or a worker died twice (the default local pool
        is restarted once) or broke a pool the caller gave.
    """
    chunks = list(chunks)
    done = iter_chunks(fn, payload, chunks, executor=executor, n_jobs=n_jobs, desc=desc, check=check)
    results = [None] * len(chunks)
    bar = _bar(progress, sum(_size(c) for c in chunks), desc)
    try:
        for i, res in done:
            results[i] = res
            bar.update(_size(chunks[i]))
    finally:
        bar.close()
        done.close()  # cancels outstanding tasks after an error or Ctrl-C
    return results


def iter_chunks(fn, payload, chunks, *, executor=None, n_jobs=1, desc="tasks", check=()):
    """Like :func:`map_chunks` (same arguments but ``progress``, same checks made now, before any
    work), as a generator of ``(chunk index, result)`` in the order the tasks finish. Closing it
    early cancels the outstanding tasks (and shuts down the local pool)."""
    executor = as_executor(executor)
    chunks = list(chunks)
    local = executor is None and ((os.cpu_count() or 1) if n_jobs == -1 else int(n_jobs)) > 1 and len(chunks) > 1
    check_executor(executor)
    check_picklable(list(check) + [(f"{desc} task function", fn), (f"{desc} payload", payload)], executor,
                    local_processes=local)
    if executor is None and not local:
        return _in_process(fn, payload, chunks, desc)
    if local:
        workers = min(n_slots(None, n_jobs), len(chunks))
        ctx = multiprocessing.get_context("spawn")
        return _on_pools(lambda: ProcessPoolExecutor(max_workers=workers, mp_context=ctx), True, fn, payload,
                         chunks, desc)
    return _on_pools(lambda: executor, False, fn, payload, chunks, desc)


def _in_process(fn, payload, chunks, desc):
    for i, chunk in enumerate(chunks):
        try:
            res = fn(payload, chunk)
        except Exception:
            try:
                res = fn(payload, chunk)
            except Exception as exc:
                raise _failed(desc, i, exc, 2) from exc
        yield i, res


def _failed(desc, i, exc, tries):
    return ExecutionError(f"{desc}: task {i} failed {'twice (retried once)' if tries > 1 else 'once'}: "
                          f"{_describe(exc)}", task=i)


def _on_pools(make_pool, owned, fn, payload, chunks, desc):
    """Run on ``make_pool()``, yielding ``(index, result)``; retry each failed task once (on a fresh
    pool if ``owned`` and it broke)."""
    tries = [0] * len(chunks)
    pending = list(range(len(chunks)))
    pool = make_pool()
    futures = {}
    try:
        while pending:
            futures = {}
            for i in pending:
                try:
                    futures[pool.submit(fn, payload, chunks[i])] = i
                except BrokenProcessPool as exc:
                    raise _broken(desc, i, exc, owned) from exc
            pending, broken = [], None
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    res = fut.result()
                except Exception as exc:
                    tries[i] += 1
                    if isinstance(exc, BrokenProcessPool):
                        if not owned or tries[i] > 1:
                            raise _broken(desc, i, exc, owned) from exc
                        broken = exc
                    elif tries[i] > 1:
                        raise _failed(desc, i, exc, tries[i]) from exc
                    pending.append(i)
                    continue
                yield i, res
            if broken is not None:  # our own pool: restart it for the unfinished tasks
                pool.shutdown(wait=False, cancel_futures=True)
                pool = make_pool()
            pending.sort()
    finally:
        for fut in futures:
            fut.cancel()
        if owned:
            pool.shutdown(wait=False, cancel_futures=True)


def _broken(desc, i, exc, owned):
    what = ("a local worker process died twice while running it (the pool was restarted once)" if owned
            else "a worker process of the executor died (the pool is broken and cannot run more tasks)")
    return ExecutionError(f"{desc}: task {i} did not finish: {what} ({_describe(exc)}). A crash in compiled code or "
                          "running out of memory kills a worker; run it in this process (executor=None, n_jobs=1) "
                          "to see the error" + ("" if owned else ", or create a new executor and pass it"), task=i)
