"""Posteriors of several datasets under one model: :func:`sample_many`, on any executor.

Each dataset is sampled by :func:`~odeinfer.bayes.sample` in one task (the tasks run where
:func:`~odeinfer.inference.executor.map_chunks` sends them: this process, local processes, a
Dask client's workers, ...). Dataset ``i`` is sampled with the ``i``-th child of
``numpy.random.SeedSequence(rng)``, so the draws are the same, bit for bit, wherever it ran.
"""

from __future__ import annotations

import numpy as np

from odeinfer.errors import InputError

__all__ = ["sample_many"]


def sample_many(model, datasets, *, inits=None, rng=0, executor=None, n_jobs=1, progress=False, **sample_kwargs):
    """Sample the posterior of ``model`` for each of ``datasets``.

    Parameters
    ----------
    model : Model
        An odeinfer model (the PyMC model of each dataset is built in its task).
    datasets : sequence of Data or Experiments
        One posterior per dataset (a simulation study, replicate experiments, bootstrap data).
    inits : sequence of Estimate, optional
        One estimate per dataset (the ``init`` of :func:`~odeinfer.bayes.sample`: start, seeded
        mass matrix, default priors); default none.
    rng : int, default 0
        Seed: dataset ``i`` uses the ``i``-th child of ``numpy.random.SeedSequence(rng)``.
    executor : concurrent.futures.Executor or Dask Client, optional
        Where the datasets are sampled (one task each); default this process (``n_jobs == 1``) or
        ``n_jobs`` local processes. See :func:`odeinfer.inference.executor.map_chunks`.
    n_jobs : int, default 1
    progress : bool, default False
        A progress bar over the datasets (tqdm, when installed).
    **sample_kwargs
        Passed to :func:`~odeinfer.bayes.sample` (``draws``, ``tune``, ``chains``, ``cores``, ...;
        not ``rng`` nor ``init``).

    Returns
    -------
    list of arviz.InferenceData
        In the order of ``datasets``.

    Examples
    --------
    >>> idatas = oi.bayes.sample_many(model, [data_a, data_b], inits=[fit_a, fit_b], draws=500)  # doctest: +SKIP
    """
    from odeinfer.inference.executor import map_chunks

    if isinstance(datasets, (str, bytes)) or not hasattr(datasets, "__len__") or len(datasets) == 0:
        raise InputError(f"datasets: expected a non-empty sequence of Data or Experiments, got "
                         f"{type(datasets).__name__}; pass a list, e.g. [data_a, data_b]")
    n = len(datasets)
    inits = [None] * n if inits is None else list(inits)
    if len(inits) != n:
        raise InputError(f"inits: expected one estimate per dataset ({n}), got {len(inits)}; pass a list "
                         "as long as datasets, or leave inits out")
    taken = sorted({"rng", "init"} & set(sample_kwargs))
    if taken:
        raise InputError(f"{taken[0]}: sample_many sets it per dataset (rng= seeds them all, inits= gives one "
                         f"estimate each); drop {taken[0]}=")
    if not isinstance(rng, (int, np.integer)) or isinstance(rng, bool) or rng < 0:
        raise InputError(f"rng: expected a non-negative integer seed, got {rng!r}")
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(int(rng)).spawn(n)]
    tasks = [[(i, datasets[i], inits[i], seeds[i])] for i in range(n)]
    out = map_chunks(_sample_chunk, (model, sample_kwargs), tasks, executor=executor, n_jobs=n_jobs,
                     progress=progress, desc="sample_many", check=(("model", model),))
    return [idata for chunk in out for idata in chunk]


def _sample_chunk(payload, chunk):
    from odeinfer.bayes.sample import sample

    model, kwargs = payload
    return [sample(model, data, init=init, rng=seed, **kwargs) for _, data, init, seed in chunk]
