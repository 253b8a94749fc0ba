"""monte_carlo(..., client=...) on a Dask LocalCluster (2 worker processes, 1 thread each).

The reference for every result is the local serial path (n_jobs=1) with the same seed, which
tests/test_studies.py checks against exact sampling distributions; the Dask path must give the
same rows bit for bit (all columns but ``time``).
"""

import math
import os
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip(
    "distributed",
    reason="dask.distributed is not installed; install it with pip install 'odeinfer[dask]'",
)

import dask  # noqa: E402
from distributed import Client, LocalCluster, get_task_stream  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.errors import OdeinferWarning, StudyError  # noqa: E402
from odeinfer.studies import monte_carlo  # noqa: E402
from odeinfer.studies._dask import compare_environments, worker_environment  # noqa: E402

MU, SIGMA, N = 1.5, 2.0, 16
SE = SIGMA / math.sqrt(N)


@dataclass(frozen=True)
class Result:
    params: Any
    bse: Any
    converged: bool


def simulate(rng):
    return rng.normal(MU, SIGMA, size=N), {"mu": MU}


def sample_mean(x):
    return Result({"mu": float(np.mean(x))}, {"mu": SE}, True)


def always_fails(x):
    raise ValueError("boom")


def fails_sometimes(x):
    if x[0] > MU:
        raise FloatingPointError("diverged")
    return Result({"mu": float(np.mean(x))}, {"mu": SE}, x[1] > MU - 3 * SIGMA)


def bad_simulate(rng):
    return rng.normal(size=3)  # not a (data, truth) tuple


def crash(x):
    os._exit(3)  # kills the worker process, as a segfault in compiled code would


# A real model: the zoo's two-state linear decay, fitted by Newton-Raphson (numba kernels).
DECAY = oi.zoo.get("linear_decay")


def simulate_decay(rng):
    data, _ = oi.simulate(DECAY.model, DECAY.params, DECAY.x0, DECAY.t, noise=DECAY.sigma, rng=rng)
    return data, dict(DECAY.params)


def fit_decay(data):
    est = oi.NewtonRaphson().fit(DECAY.model, data, start=DECAY.params)
    return Result(dict(est.params), dict(est.bse), est.converged)


def loaded_kernels():
    """On a worker: the generated modules imported, and numba cache misses of the model kernel."""
    import sys

    from odeinfer.model.cache import cache_dir

    from numba.core.registry import CPUDispatcher

    mods = [m for k, m in sys.modules.items() if k.startswith("odeinfer_generated_")]
    stats = [f.stats for m in mods for f in vars(m).values() if isinstance(f, CPUDispatcher)]
    return {
        "cache_dir": str(cache_dir()),
        "files": sorted(str(m.__file__) for m in mods),
        "compiled": sum(sum(s.cache_misses.values()) for s in stats),
        "loaded": sum(sum(s.cache_hits.values()) for s in stats),
    }


@pytest.fixture(scope="module")
def client():
    # allowed-failures 0: a task that kills its worker fails at once instead of after 3 retries
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        c = Client(cluster)
    c.wait_for_workers(2, timeout=60)
    yield c
    c.close()
    cluster.close()


def _rows(res):
    return res.frame.drop(columns="time")


def test_same_rows_as_local_path_bitwise(client):
    ests = {"mean": sample_mean, "flaky": fails_sometimes}
    local = _rows(monte_carlo(simulate, ests, 40, rng=11, progress=False))
    remote = monte_carlo(simulate, ests, 40, rng=11, client=client, progress=False)
    pd.testing.assert_frame_equal(local, _rows(remote), check_exact=True)
    assert remote.seed.entropy == 11
    small = monte_carlo(simulate, ests, 40, rng=11, client=client, chunk_size=3, progress=False)
    pd.testing.assert_frame_equal(local, _rows(small), check_exact=True)


def test_failures_recorded_like_the_local_path(client):
    ests = {"mean": sample_mean, "bad": always_fails, "flaky": fails_sometimes}
    with pytest.warns(OdeinferWarning, match=r"'bad' raised in every replication, e.g. ValueError: boom"):
        local = monte_carlo(simulate, ests, 30, rng=1, progress=False)
    with pytest.warns(OdeinferWarning, match=r"'bad' raised in every replication, e.g. ValueError: boom"):
        remote = monte_carlo(simulate, ests, 30, rng=1, client=client, progress=False)
    pd.testing.assert_frame_equal(_rows(local), _rows(remote), check_exact=True)
    flaky = remote.frame.query("estimator == 'flaky'")
    assert 0 < flaky["error"].notna().sum() < 30
    assert (flaky["error"].dropna() == "FloatingPointError: diverged").all()


def test_simulation_failure_raises_like_the_local_path(client):
    with pytest.raises(StudyError, match=r"simulate_fn failed in replication \d+: TypeError: simulate_fn\(rng\)"):
        monte_carlo(bad_simulate, {"mean": sample_mean}, 4, rng=0, client=client, progress=False)


def _n_tasks(ts):
    """Tasks per study seen in a task stream (keys odeinfer-monte-carlo-<token>-<i>), largest first;
    tasks of earlier studies cancelled after an error may still finish inside the window."""
    keys = {str(t["key"]) for t in ts.data if str(t["key"]).startswith("odeinfer-monte-carlo-")}
    return sorted(Counter(k.rsplit("-", 1)[0] for k in keys).values(), reverse=True)


def test_tasks_are_batched(client):
    with get_task_stream(client) as ts:
        monte_carlo(simulate, {"mean": sample_mean}, 200, rng=3, client=client, progress=False)
    # default: ceil(200 / (4 * 2 worker threads)) = 25 replications per task -> 8 tasks
    assert _n_tasks(ts)[0] == 8
    with get_task_stream(client) as ts:
        monte_carlo(simulate, {"mean": sample_mean}, 20, rng=3, client=client, chunk_size=6, progress=False)
    assert _n_tasks(ts) == [4]  # 6+6+6+2


def test_closures_and_lambdas_are_sent_by_value(client):
    offset = 0.25

    def shifted(x):  # a closure: cannot be used with n_jobs > 1, fine with Dask
        return Result({"mu": float(np.mean(x)) + offset}, {"mu": SE}, True)

    res = monte_carlo(simulate, {"shifted": shifted, "lam": lambda x: sample_mean(x)}, 6, rng=2,
                      client=client, progress=False)
    f = res.frame
    local = monte_carlo(simulate, {"mean": sample_mean}, 6, rng=2, progress=False).frame
    assert np.array_equal(f.query("estimator == 'lam'")["estimate"].to_numpy(), local["estimate"].to_numpy())
    assert np.array_equal(f.query("estimator == 'shifted'")["estimate"].to_numpy(),
                          local["estimate"].to_numpy() + offset)


def test_captured_solver_is_rebuilt_on_workers(client):
    """A closure capturing a Solver (numba kernels in a generated module, which a fresh worker cannot
    import by name) works: the module travels as source and is imported from the worker's cache dir."""
    solver = oi.bind(oi.Problem(DECAY.model, DECAY.t))
    p = np.array([DECAY.params[k] for k in DECAY.model.params])
    x0 = np.array([DECAY.x0[k] for k in DECAY.model.states])

    def sse_at_truth(data):  # not an estimator, but a deterministic statistic of the data
        y, _, status = solver(p, x0)
        return Result({"sse": float(np.sum((y - data.y) ** 2))}, None, status == 0)

    local = monte_carlo(simulate_decay, {"sse": sse_at_truth}, 6, rng=8, progress=False)
    solver(2 * p, x0)  # leaves other values in its buffer: a copied (stale) buffer would show
    remote = monte_carlo(simulate_decay, {"sse": sse_at_truth}, 6, rng=8, client=client, progress=False)
    pd.testing.assert_frame_equal(_rows(local), _rows(remote), check_exact=True)
    sse = remote.frame.query("param == 'sse'")
    assert sse["converged"].all()
    # noise sd 0.02 on 2 x 20 observations: E[sse] = 40 * 0.02^2 = 0.016 (chi-square, sd 0.0036)
    assert 0.002 < sse["estimate"].mean() < 0.04
    assert all(w["compiled"] == 0 for w in client.run(loaded_kernels).values())  # cached machine code
    name = solver.compiled.module.__name__

    def where():
        import sys

        return sys.modules[name].__file__

    expected = os.path.join(os.environ["ODEINFER_CACHE_DIR"], name.replace("odeinfer_generated_", "") + ".py")
    assert set(client.run(where).values()) == {expected}


def test_model_kernels_reused_from_the_cache_on_workers(client):
    """Workers import the generated module from the client's cache dir (inherited env var) and load
    numba machine code from disk instead of compiling; every chunk on a worker reuses it."""
    local = monte_carlo(simulate_decay, {"nr": fit_decay}, 12, rng=5, progress=False)  # warms the cache
    remote = monte_carlo(simulate_decay, {"nr": fit_decay}, 12, rng=5, client=client, chunk_size=2,
                         progress=False)
    pd.testing.assert_frame_equal(_rows(local), _rows(remote), check_exact=True)
    assert remote.frame["converged"].all()
    here = worker_environment()["cache_dir"]
    assert here == os.environ["ODEINFER_CACHE_DIR"]
    info = client.run(loaded_kernels)
    assert len(info) == 2
    for address, w in info.items():
        assert w["cache_dir"] == here, address
        assert w["files"] and all(os.path.dirname(f) == here for f in w["files"]), w
        assert w["compiled"] == 0, f"{address} recompiled the model kernel: {w}"
        assert w["loaded"] >= 1, w  # machine code loaded from disk once per kernel and signature
    # a second study reuses the kernels in memory: nothing compiled or loaded again
    again = monte_carlo(simulate_decay, {"nr": fit_decay}, 12, rng=6, client=client, chunk_size=2,
                        progress=False)
    assert again.frame["converged"].all()
    assert client.run(loaded_kernels) == info


def test_progress_bar_counts_replications(client, capsys):
    monte_carlo(simulate, {"mean": sample_mean}, 10, rng=0, client=client, chunk_size=3, progress=True)
    err = capsys.readouterr().err
    assert "monte_carlo" in err and "10/10" in err


def test_client_must_be_a_dask_client(client):
    with pytest.raises(StudyError, match=r"`client` must be a dask.distributed.Client; received str .*"
                                         r"Client\('tcp://scheduler:8786'\)"):
        monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, client="tcp://scheduler:8786", progress=False)
    with pytest.raises(StudyError, match=r"`client` must be a dask.distributed.Client; received LocalCluster"):
        monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, client=client.cluster, progress=False)


def test_n_jobs_and_client_exclude_each_other(client):
    with pytest.raises(StudyError, match=r"`n_jobs` and `client` exclude each other; received n_jobs=2"):
        monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, n_jobs=2, client=client, progress=False)


def test_unpicklable_estimator_is_named(client):
    lock = threading.Lock()

    def locked(x):
        with lock:
            return sample_mean(x)

    with pytest.raises(StudyError, match=r"`estimators\['locked'\]` cannot be sent to the Dask workers: "
                                         r"it cannot be pickled \(TypeError: .*lock"):
        monte_carlo(simulate, {"locked": locked}, 3, rng=0, client=client, progress=False)


def test_buffer_holding_solvers_are_refused(client):
    from odeinfer.solve.dde import DDESolver

    dde_solver = object.__new__(DDESolver)  # the check looks at the type only

    def uses_dde(x):
        return dde_solver

    with pytest.raises(StudyError, match=r"`estimators\['dde'\]` cannot be sent to the Dask workers: it cannot "
                                         r"be pickled \(TypeError: a DDESolver .* build the DDESolver inside"):
        monte_carlo(simulate, {"dde": uses_dde}, 2, rng=0, client=client, progress=False)


def test_asynchronous_client_is_rejected():
    # Client(asynchronous=True) can only be built inside a running event loop; its flag is what counts
    async_client = object.__new__(Client)
    async_client._asynchronous = True
    with pytest.raises(StudyError, match=r"`client` is asynchronous .* needs a synchronous Client"):
        monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, client=async_client, progress=False)


def test_closed_client_is_rejected(client):
    other = Client(client.scheduler.address)
    other.close()
    with pytest.raises(StudyError, match=r"`client` is not connected \(status 'closed'\)"):
        monte_carlo(simulate, {"mean": sample_mean}, 3, rng=0, client=other, progress=False)


def test_module_missing_on_workers_is_explained(client, tmp_path, monkeypatch):
    """A function from a module only the client can import (as on a real cluster without it)."""
    (tmp_path / "only_on_the_client.py").write_text(
        "def est(x):\n    raise AssertionError('never runs')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))  # the workers' sys.path was fixed when they started
    from only_on_the_client import est

    with pytest.raises(StudyError, match=r"a Dask task failed \(RuntimeError: the worker could not unpickle "
                                         r"simulate_fn/estimators \(ModuleNotFoundError: No module named "
                                         r"'only_on_the_client'.*install the module that defines them"):
        monte_carlo(simulate, {"est": est}, 2, rng=0, client=client, progress=False)


def test_worker_versions_are_checked():
    here = worker_environment()
    compare_environments(here, {"w1": dict(here)})  # same: silent
    with pytest.raises(StudyError, match=r"Dask worker w1 runs odeinfer 0\.0\.1, this process .* Install "
                                         r"odeinfer"):
        compare_environments(here, {"w1": {**here, "odeinfer": "0.0.1"}})
    with pytest.warns(OdeinferWarning, match=r"Dask workers run other versions .*numba 0\.1 on w2"):
        compare_environments(here, {"w1": dict(here), "w2": {**here, "numba": "0.1"}})


def test_dead_worker_is_a_study_error(client):
    """Last: kills a worker (the nanny restarts it)."""
    with pytest.raises(StudyError, match=r"a Dask worker died while running replications \(KilledWorker"):
        monte_carlo(simulate, {"crash": crash}, 2, rng=0, client=client, progress=False)
    client.wait_for_workers(2, timeout=60)
