"""map_chunks: order, retries, dead workers, shut-down executors and unpicklable callbacks
(odeinfer.inference.executor)."""

import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
import multiprocessing

import pytest

from odeinfer.errors import ExecutionError, InputError
from odeinfer.inference.executor import map_chunks, split


def scale(payload, chunk):
    return [payload * x for x in chunk]


def slow_first(payload, chunk):
    time.sleep(0.05 * (3 - chunk[0]))  # the first chunk finishes last
    return chunk[0]


def flaky(folder, chunk):
    """Fails the first time each chunk is run (a marker file remembers it across processes)."""
    marker = os.path.join(folder, f"seen-{chunk[0]}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"transient failure of {chunk[0]}")
    return chunk[0]


def always_fails(payload, chunk):
    if chunk[0] == 1:
        raise ValueError("bad value in chunk 1")
    return chunk[0]


def dies(payload, chunk):
    if chunk[0] == 1:
        os._exit(3)  # kills the worker process, as a segfault in compiled code would
    return chunk[0]


def dies_once(folder, chunk):
    marker = os.path.join(folder, f"died-{chunk[0]}")
    if chunk[0] == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(3)
    return chunk[0]


def test_results_keep_the_order_of_the_chunks():
    chunks = [[0], [1], [2]]
    with ThreadPoolExecutor(3) as pool:
        assert map_chunks(slow_first, None, chunks, executor=pool) == [0, 1, 2]
    assert map_chunks(scale, 3, [[1, 2], [3]]) == [[3, 6], [9]]


def test_split_is_consecutive_and_complete():
    tasks = list(range(10))
    chunks = split(tasks, slots=2)  # about four chunks per slot
    assert [t for c in chunks for t in c] == tasks
    assert len(chunks) == 5
    assert split(tasks, 2, chunk_size=4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_a_failing_task_is_retried_once(tmp_path):
    with ThreadPoolExecutor(2) as pool:
        assert map_chunks(flaky, str(tmp_path), [[0], [1], [2]], executor=pool) == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["seen-0", "seen-1", "seen-2"]


def test_a_task_failing_twice_is_reported_by_index():
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(ExecutionError, match=r"bootstrap: task 1 failed twice \(retried once\): ValueError: bad"):
            map_chunks(always_fails, None, [[0], [1], [2]], executor=pool, desc="bootstrap")
    with pytest.raises(ExecutionError, match="task 1 failed twice") as info:
        map_chunks(always_fails, None, [[0], [1]])  # in this process too
    assert info.value.task == 1


def test_a_dead_worker_of_a_given_pool_is_reported_not_a_hang():
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        with pytest.raises(ExecutionError, match=r"task 1 did not finish: a worker process of the executor died.*"
                                                 r"create a new executor"):
            map_chunks(dies, None, [[0], [1], [2]], executor=pool)


def test_the_local_pool_is_restarted_once_after_a_worker_died(tmp_path):
    assert map_chunks(dies_once, str(tmp_path), [[0], [1], [2]], n_jobs=2) == [0, 1, 2]
    # the task named is the first one unfinished when the pool broke: task 1 (the one that kills its
    # worker), or task 0 when a loaded machine had not finished it yet (a fresh-clone run)
    with pytest.raises(ExecutionError, match=r"task [01] did not finish: a local worker process died twice"):
        map_chunks(dies, None, [[0], [1], [2]], n_jobs=2)


def test_a_shut_down_executor_is_refused_before_any_work(tmp_path):
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(InputError, match=r"executor: the ThreadPoolExecutor given cannot take work "
                                         r"\(RuntimeError: cannot schedule new futures after shutdown\).*"
                                         r"Create a new executor"):
        map_chunks(flaky, str(tmp_path), [[0]], executor=pool)
    assert os.listdir(tmp_path) == []


def test_not_an_executor_is_refused():
    with pytest.raises(InputError, match=r"executor: expected a concurrent.futures.Executor or a Dask Client, got "
                                         r"str"):
        map_chunks(scale, 1, [[1]], executor="dask")


def test_an_unpicklable_callback_is_refused_before_any_work(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    callback = lambda x: x  # noqa: E731
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        with pytest.raises(InputError, match=r"simulate_fn: cannot be sent to the workers of the ProcessPoolExecutor: "
                                             r"it cannot be pickled .*received function\. Define functions at the top "
                                             r"level of an importable \.py module"):
            map_chunks(flaky, str(tmp_path), [[0]], executor=pool, check=[("simulate_fn", callback)])
        with pytest.raises(InputError, match=r"multistart payload: cannot be sent to the workers"):
            map_chunks(flaky, (str(tmp_path), callback), [[0]], executor=pool, desc="multistart")
    with pytest.raises(InputError, match=r"payload: cannot be sent to local worker processes"):
        map_chunks(scale, callback, [[0], [1]], n_jobs=2)
    assert os.listdir(tmp_path) == []
    with ThreadPoolExecutor(1) as pool:  # threads share the objects: nothing to pickle
        assert map_chunks(scale, 2, [[callback(1)]], executor=pool, check=[("f", callback)]) == [[2]]


def test_progress_bar(capsys):
    map_chunks(scale, 1, [[1, 2], [3]], progress=True, desc="multistart")
    err = capsys.readouterr().err
    assert "multistart" in err and "3/3" in err


def test_an_estimator_holding_an_executor_pickles_and_copies_without_it():
    import pickle

    import odeinfer as oi

    with ThreadPoolExecutor(1) as pool:
        est = oi.Embedding(starts=2, executor=pool)
        back = pickle.loads(pickle.dumps(est))
        assert back.executor is None and back.starts == 2
        assert est.config()["executor"] is pool and est.config()["starts"] == 2


def test_multistart_progress_bar_on_an_executor(capsys):
    import numpy as np

    import odeinfer as oi

    m = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
    data, _ = oi.simulate(m, {"k": 0.7}, {"x": 2.0}, np.linspace(0, 4, 9), noise=0.05, rng=3)
    with ThreadPoolExecutor(2) as pool:
        est = oi.Embedding(starts=3, bounds={"k": (0.1, 3.0)}, executor=pool, progress=True).fit(m, data)
    assert est.extras["n_failed_starts"] == 0
    assert "multistart" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"progress: expected True or False, got 'yes'"):
        oi.Embedding(progress="yes")
