"""oi.bayes.sample_many: one posterior per dataset, seeded per dataset, equal bit for bit in this
process and on an executor; each posterior is the one oi.bayes.sample gives that dataset with
the seed SeedSequence(rng).spawn(n)[i] (computed here independently)."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("pymc")

from test_bayes_sample import gn_estimate

import odeinfer as oi
from odeinfer.errors import InputError

KW = {"draws": 20, "tune": 20, "chains": 1, "cores": 1, "posterior_predictive": False}


@pytest.fixture(scope="module")
def two():
    entry = oi.zoo.get("lotka_volterra")
    p, x0 = np.array(list(entry.params.values())), np.array(list(entry.x0.values()))
    datasets = [oi.simulate(entry.model, p, x0, entry.t, noise=entry.sigma, rng=r).data for r in (1, 2)]
    return entry.model, datasets, [gn_estimate(entry.model, d, p, x0) for d in datasets]


def _draws(idata):
    return np.stack([idata.posterior[v].values for v in ("alpha", "beta", "gamma", "delta")])


def test_each_posterior_is_sample_with_its_own_seed_here_and_on_an_executor(two):
    model, datasets, inits = two
    local = oi.bayes.sample_many(model, datasets, inits=inits, rng=7, **KW)
    with ThreadPoolExecutor(1) as pool:
        remote = oi.bayes.sample_many(model, datasets, inits=inits, rng=7, executor=pool, **KW)
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(7).spawn(2)]
    for i in range(2):
        np.testing.assert_array_equal(_draws(local[i]), _draws(remote[i]))
        alone = oi.bayes.sample(model, datasets[i], init=inits[i], rng=seeds[i], **KW)
        np.testing.assert_array_equal(_draws(local[i]), _draws(alone))
    assert not np.array_equal(_draws(local[0]), _draws(local[1]))


def test_bad_arguments_are_refused_before_any_sampling(two):
    model, datasets, inits = two
    with pytest.raises(InputError, match="datasets: expected a non-empty sequence"):
        oi.bayes.sample_many(model, [])
    with pytest.raises(InputError, match=r"inits: expected one estimate per dataset \(2\), got 1"):
        oi.bayes.sample_many(model, datasets, inits=inits[:1])
    with pytest.raises(InputError, match="init: sample_many sets it per dataset"):
        oi.bayes.sample_many(model, datasets, inits=inits, draws=5, init=inits[0])
    with pytest.raises(InputError, match="rng: expected a non-negative integer seed"):
        oi.bayes.sample_many(model, datasets, inits=inits, rng=-1)
