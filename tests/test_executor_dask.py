"""executor= on a Dask LocalCluster (one worker process, one thread): the same bits as a local run."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed", reason="dask.distributed is not installed; pip install 'odeinfer[dask]'")

from distributed import Client, LocalCluster  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.errors import InputError, StudyError  # noqa: E402
from odeinfer.studies import monte_carlo  # noqa: E402

DECAY = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
T = np.linspace(0.0, 4.0, 9)
BOUNDS = {"k": (0.1, 3.0)}


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as c:
            yield c


@pytest.fixture(scope="module")
def data():
    return oi.simulate(DECAY, {"k": 0.7}, {"x": 2.0}, T, noise=0.05, rng=3).data


def _same_starts(a, b):
    ta, tb = a.extras["starts"], b.extras["starts"]
    assert ta.keys() == tb.keys()
    for key in ta:
        np.testing.assert_array_equal(np.array(ta[key], dtype=object), np.array(tb[key], dtype=object), err_msg=key)


def test_multistart_on_a_dask_cluster_equals_the_local_run_bit_for_bit(client, data):
    local = oi.Embedding(starts=4, bounds=BOUNDS, rng=5).fit(DECAY, data)
    remote = oi.Embedding(starts=4, bounds=BOUNDS, rng=5, executor=client).fit(DECAY, data)
    via_executor = oi.Embedding(starts=4, bounds=BOUNDS, rng=5, executor=client.get_executor()).fit(DECAY, data)
    assert local.converged and abs(local.params["k"] - 0.7) < 0.1  # the truth, within a few standard errors
    for other in (remote, via_executor):
        np.testing.assert_array_equal(other.values, local.values)
        np.testing.assert_array_equal(other.cov, local.cov)
        assert other.cost == local.cost
        _same_starts(other, local)


def test_executor_and_n_jobs_exclude_each_other(client):
    with pytest.raises(InputError, match=r"n_jobs: n_jobs=2 and executor= exclude each other .* drop n_jobs"):
        oi.Embedding(starts=4, n_jobs=2, executor=client)
    with pytest.raises(InputError, match=r"executor: expected a concurrent.futures.Executor or a Dask Client, got "
                                         r"int"):
        oi.Embedding(starts=4, executor=4)


def test_a_closed_client_is_refused_before_any_work(data):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        c = Client(cluster)
        est = oi.Embedding(starts=3, bounds=BOUNDS, executor=c)
        c.close()
    with pytest.raises(InputError, match=r"executor: the ClientExecutor given cannot take work .*Client is closed"):
        est.fit(DECAY, data)


def simulate_mean(rng):
    return rng.normal(1.5, 2.0, size=16), {"mu": 1.5}


def sample_mean(x):
    return SimpleNamespace(params={"mu": float(np.mean(x))}, bse={"mu": 0.5}, converged=True)


def test_monte_carlo_on_an_executor_equals_the_local_run(client):
    local = monte_carlo(simulate_mean, {"mean": sample_mean}, 12, rng=7, progress=False).frame
    remote = monte_carlo(simulate_mean, {"mean": sample_mean}, 12, rng=7, progress=False,
                         executor=client.get_executor(), chunk_size=5).frame
    pd.testing.assert_frame_equal(remote.drop(columns="time"), local.drop(columns="time"))
    assert local["estimate"].nunique() == 12  # twelve different datasets


def test_monte_carlo_executor_excludes_n_jobs_and_client(client):
    with pytest.raises(StudyError, match=r"`executor` and `n_jobs` exclude each other; received executor= with "
                                         r"n_jobs=2\. .* drop n_jobs"):
        monte_carlo(simulate_mean, {"mean": sample_mean}, 2, rng=0, n_jobs=2, executor=client)
    with pytest.raises(StudyError, match=r"`executor` and `client` exclude each other"):
        monte_carlo(simulate_mean, {"mean": sample_mean}, 2, rng=0, client=client, executor=client)


def test_bootstrap_on_a_dask_cluster_equals_the_local_run_bit_for_bit(client, data):
    est = oi.Embedding().fit(DECAY, data, start={"k": 1.0})
    local = est.conf_int(method="bootstrap", n_boot=12, seed=8)
    fresh = oi.Embedding().fit(DECAY, data, start={"k": 1.0})  # nothing cached
    remote = fresh.conf_int(method="bootstrap", n_boot=12, seed=8, executor=client)
    np.testing.assert_array_equal(remote.to_numpy(), local.to_numpy())
    np.testing.assert_array_equal(fresh._bootstrapper.sample(12, 8)["values"],
                                  est._bootstrapper.sample(12, 8)["values"])
    assert remote.attrs["n_failed"] == 0 and remote.attrs["n_unconverged"] == 0


def test_profiles_on_a_dask_cluster_equal_the_local_ones_bit_for_bit(client, data):
    est = oi.Embedding(log_params=True).fit(DECAY, data, start={"k": 1.0})
    local = est.conf_int(method="profile")
    fresh = oi.Embedding(log_params=True).fit(DECAY, data, start={"k": 1.0})
    remote = fresh.conf_int(method="profile", executor=client)
    np.testing.assert_array_equal(remote.to_numpy(), local.to_numpy())
    assert fresh._profiler.traces == est._profiler.traces
    assert local.loc["k", "lower"] < est.params["k"] < local.loc["k", "upper"]
