"""Runs Monte Carlo chunks on a Dask cluster, for ``monte_carlo(..., client=...)``.

Dask is imported here only, and only when a client is given. The replications
run the same :func:`~odeinfer.studies._worker.run_chunk` as the local path, with
the same per-replication seeds, so the rows are the same bit for bit.

The functions are pickled once on the client (cloudpickle, as Dask does: by
value for lambdas, closures and notebook functions; a captured compiled model or
solver brings its generated module's source text, see :func:`_load_generated`),
scattered once, and unpickled once per worker thread (:data:`_PAYLOADS`), so
every chunk a worker thread runs reuses the same estimator objects, and all use
the model kernels that worker process has compiled or loaded from its numba
cache (``$ODEINFER_CACHE_DIR``).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import sys
import threading
import types
import uuid
import warnings
from collections import OrderedDict
from pathlib import Path


from ..errors import OdeinferWarning, StudyError
from ..model.cache import _PREFIX as _GENERATED  # module name prefix of the generated modules
from ._worker import describe, run_chunk

__all__ = ["check_client", "dumps_payload", "n_slots", "run_on_client", "worker_environment",
           "compare_environments"]

_INSTALL = "pip install 'odeinfer[dask]'"
_PAYLOADS: OrderedDict = OrderedDict()  # (token, thread) -> (simulate_fn, estimators), per process
_PAYLOADS_LOCK = threading.Lock()
_MAX_PAYLOADS = 64  # recent studies x worker threads

_VERSIONED = ("odeinfer", "numpy", "numba")


def check_client(client):
    """Raise :class:`StudyError` unless ``client`` is a running synchronous Dask Client."""
    try:
        from distributed import Client
    except ImportError as exc:
        raise StudyError(
            f"`client` needs dask.distributed, which is not installed (received "
            f"{type(client).__name__}). Install it with {_INSTALL} (or 'dask[distributed]'), or "
            f"leave client=None and use n_jobs= for local worker processes."
        ) from exc
    if not isinstance(client, Client):
        raise StudyError(
            f"`client` must be a dask.distributed.Client; received {type(client).__name__} "
            f"({client!r:.80}). Connect one first, e.g. client=Client('tcp://scheduler:8786') or "
            f"client=Client(LocalCluster()), or leave client=None to run locally."
        )
    if getattr(client, "_asynchronous", False):  # made with Client(asynchronous=True)
        raise StudyError(
            "`client` is asynchronous (Client(asynchronous=True)); monte_carlo blocks until the "
            "study is done and needs a synchronous Client. Create it without asynchronous=True."
        )
    if client.status != "running":
        raise StudyError(
            f"`client` is not connected (status {client.status!r}); received a closed or failed "
            f"Client. Create a new one, e.g. Client('tcp://scheduler:8786')."
        )


def _own_reduction(cls):
    return any(k in vars(c) for c in cls.__mro__[:-1] for k in ("__reduce__", "__reduce_ex__", "__getstate__"))


def _dumps(obj):
    """cloudpickle, aware of odeinfer's compiled kernels.

    - a generated kernel module is sent as its source text and imported from
      the worker's cache dir (:func:`_load_generated`); cloudpickle would send it
      by name, which a worker that has not built the model cannot import;
    - a numba kernel of such a module is sent as (module, name), so the worker
      uses the module's cached machine code (cloudpickle would send the Python
      function and recompile it);
    - a :class:`~odeinfer.solve.Solver` rebuilds itself from its model and values (its own
      ``__reduce__``: its ``y`` and ``sens`` are views of one buffer, which pickling would separate);
    - other solver objects holding views of shared buffers are refused unless
      their class defines its own pickling.
    """
    import cloudpickle
    from numba.core.registry import CPUDispatcher

    from odeinfer.solve.dde import DDESolver
    from odeinfer.solve.dde_adjoint import AdjointGradient

    class _Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, types.ModuleType) and obj.__name__.startswith(_GENERATED):
                return _load_generated, (obj.__name__, Path(obj.__file__).read_text(encoding="utf-8"))
            if isinstance(obj, CPUDispatcher) and getattr(obj.py_func, "__module__", "").startswith(_GENERATED):
                return getattr, (sys.modules[obj.py_func.__module__], obj.py_func.__name__)
            if isinstance(obj, (DDESolver, AdjointGradient)) and not _own_reduction(type(obj)):
                raise TypeError(
                    f"a {type(obj).__name__} (preallocated numba buffers) cannot be sent; capture the "
                    f"Model and build the {type(obj).__name__} inside the function (once per process, "
                    f"e.g. in a functools.cache'd helper)"
                )
            return super().reducer_override(obj)

    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def _load_generated(name, text):
    """On a worker: the generated module ``name``, imported from its cache dir (written if missing).

    The same file name and text as on the client, so numba finds (or stores)
    its machine code next to it: a shared cache directory means no compile.
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    from odeinfer.model.cache import load_module

    return load_module(name, text)


def dumps_payload(simulate_fn, estimators):
    """Pickle ``(simulate_fn, estimators)`` for the workers; name the culprit on failure."""
    named = [("simulate_fn", simulate_fn)] + [(f"estimators[{k!r}]", v) for k, v in estimators.items()]
    for label, fn in named:
        try:
            _dumps(fn)
        except Exception as exc:
            raise StudyError(
                f"`{label}` cannot be sent to the Dask workers: it cannot be pickled "
                f"({describe(exc)}). Lambdas, closures and notebook functions are sent by value, "
                f"but everything they capture must pickle too (models, data and solvers do; open "
                f"files, locks and connections do not): create those inside the function."
            ) from exc
    return _dumps((simulate_fn, dict(estimators)))


def n_slots(client):
    """Total worker threads of the cluster right now (at least 1)."""
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:
        return 1


def worker_environment():
    """Versions and cache directory of this process (runs on each worker via ``client.run``)."""
    import numba
    import numpy

    from odeinfer import __version__
    from odeinfer.model.cache import cache_dir

    return {
        "odeinfer": __version__,
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
        "cache_dir": str(cache_dir()),
    }


def compare_environments(local, workers):
    """Raise on a different odeinfer on a worker; warn on different numpy/numba/Python.

    Parameters
    ----------
    local : dict
        :func:`worker_environment` of the client process.
    workers : dict
        Worker address -> :func:`worker_environment` of that worker.
    """
    for address, env in workers.items():
        if env.get("odeinfer") != local["odeinfer"]:
            raise StudyError(
                f"Dask worker {address} runs odeinfer {env.get('odeinfer')}, this process "
                f"{local['odeinfer']}; replications must run the same code everywhere. Install "
                f"odeinfer {local['odeinfer']} on the workers (the same environment as the client)."
            )
    diffs = sorted({
        f"{k} {env.get(k)} on {address} (here {local[k]})"
        for address, env in workers.items()
        for k in (*_VERSIONED[1:], "python")
        if env.get(k) != local[k]
    })
    if diffs:
        warnings.warn(
            f"Dask workers run other versions than this process: {'; '.join(diffs[:3])}"
            f"{' ...' if len(diffs) > 3 else ''}. The study runs, but its results may differ from "
            f"a local run with the same seed; use the same environment on workers and client.",
            OdeinferWarning,
            stacklevel=4,
        )


def _run_payload(token, payload, tasks):
    """Dask task: unpickle the functions once per worker thread, then run the chunk.

    One copy per thread, not per process: estimators may keep mutable state
    (solver buffers) that threads of one worker must not share. The compiled
    kernels are shared by all threads (module-level caches of the process).
    """
    key = (token, threading.get_ident())
    with _PAYLOADS_LOCK:
        fns = _PAYLOADS.get(key)
        if fns is None:
            try:
                fns = pickle.loads(payload)
            except Exception as exc:
                raise RuntimeError(
                    f"the worker could not unpickle simulate_fn/estimators ({describe(exc)})"
                ) from exc
            _PAYLOADS[key] = fns
            while len(_PAYLOADS) > _MAX_PAYLOADS:
                _PAYLOADS.popitem(last=False)
        else:
            _PAYLOADS.move_to_end(key)
    simulate_fn, estimators = fns
    return run_chunk(simulate_fn, estimators, tasks)


def run_on_client(client, payload, chunks):
    """Submit one task per chunk; yield each chunk's :func:`run_chunk` output as it completes.

    Closing the generator early (an error, Ctrl-C) cancels the outstanding tasks.
    """
    from distributed import as_completed

    try:
        compare_environments(worker_environment(), client.run(worker_environment))
    except StudyError:
        raise
    except Exception as exc:
        raise StudyError(
            f"could not query the Dask workers ({describe(exc)}). The workers need odeinfer "
            f"installed (the same version as here, e.g. {_INSTALL} in their environment)."
        ) from exc
    token = hashlib.sha256(payload).hexdigest()[:16] + uuid.uuid4().hex[:8]
    prefix = f"odeinfer-monte-carlo-{token}"
    scattered = client.scatter(payload, hash=False)
    futures = [
        client.submit(_run_payload, token, scattered, chunk, key=f"{prefix}-{i}", pure=False)
        for i, chunk in enumerate(chunks)
    ]
    try:
        for fut in as_completed(futures):
            try:
                out = fut.result()
            except Exception as exc:
                raise StudyError(_task_failure(exc)) from exc
            yield out
    finally:
        client.cancel([*futures, scattered])


def _task_failure(exc):
    name = type(exc).__name__
    if name == "KilledWorker":
        return (f"a Dask worker died while running replications ({describe(exc)}). A crash in "
                f"compiled code or running out of memory kills the worker; run a few replications "
                f"locally (n_jobs=1) to find the failing case.")
    return (f"a Dask task failed ({describe(exc)}). This usually means simulate_fn or an estimator "
            f"could not be imported on the workers: install the module that defines them on every "
            f"worker (or client.upload_file it), or define them in the notebook or script that "
            f"calls monte_carlo so that Dask sends them by value.")
