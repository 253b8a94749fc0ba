"""NUTS over an ODE or DDE model, started from an estimate: :func:`sample`."""

from __future__ import annotations

import contextlib
import time
import warnings

import numpy as np

from odeinfer.bayes import _idata
from odeinfer.errors import InputError, OdeinferWarning

__all__ = ["sample", "SamplingInterruptedWarning", "SAMPLERS"]

SAMPLERS = ("pymc", "nutpie")


class SamplingInterruptedWarning(OdeinferWarning):
    """Sampling stopped early (Ctrl-C); the InferenceData holds the draws taken so far."""


def sample(model, data=None, *, init=None, draws=1000, tune=None, chains=4, cores=None, rng=None,
           sampler="pymc", seed_mass_matrix=True, jitter=0.1, target_accept=0.8, mass_matrix_weight=100,
           mode="NUMBA", posterior_predictive=True, n_trajectory_times=200, progressbar=False,
           callback=None, **build_kwargs):
    """Sample the posterior of an ODE model with NUTS, seeded by a frequentist estimate.

    Parameters
    ----------
    model : Model, pymc.Model, FitProblem or PetabProblem
        An odeinfer model (then ``data`` is required and the PyMC model is made
        by :func:`~odeinfer.bayes.build_model` with ``init`` and ``build_kwargs``), or a
        PyMC model made by :func:`~odeinfer.bayes.build_model` (possibly extended), or a
        FitProblem / PetabProblem (:func:`~odeinfer.bayes.sample_problem`; a PetabProblem's
        objective priors replace the default uniform priors of their parameters).
    data : Data or Experiments, optional
    init : Estimate, optional
        Start every chain at this estimate (jittered) and, with
        ``seed_mass_matrix``, set NUTS's dense mass matrix from its covariance
        mapped to the unconstrained space (see :mod:`odeinfer.bayes.seed`).
        Default: the ``init`` given to ``build_model``. An estimate that is not
        usable (values or covariance not finite, a parameter that ran away:
        :func:`~odeinfer.estimators._trajectory_check.unusable_reason`),
        or whose jittered start points leave the priors' support, is not used (a
        :class:`~odeinfer.bayes.SeedingWarning` says why; ``posterior.attrs
        ["odeinfer_init_refused"]`` records it): the chains start from the priors,
        which must then be given for every parameter.
    draws : int, default 1000
        Kept draws per chain.
    tune : int, optional
        Tuning steps per chain; default 500 when the mass matrix is seeded, else 1000.
    chains : int, default 4
    cores : int, optional
        Parallel chains; default ``min(chains, 2)``.
    rng : int or numpy.random.Generator, optional
        Seed of everything random here (jitter, sampler, posterior predictive).
    sampler : {"pymc", "nutpie"}, default "pymc"
        ``"nutpie"`` (optional dependency) compiles the model with the numba
        backend and samples without Python in the loop; it adapts its own
        (diagonal) mass matrix, so only the initial point comes from ``init``,
        and all chains start there (nutpie takes one initial point).
    seed_mass_matrix : bool, default True
        With ``init`` and ``sampler="pymc"``: dense mass matrix seeded from the
        estimate's covariance and adapted further
        (``QuadPotentialFullAdapt`` with ``mass_matrix_weight`` pseudo-draws).
        False: PyMC's default diagonal adaptation (still started at the
        estimate). A covariance that is not positive definite gives a
        :class:`~odeinfer.bayes.SeedingWarning` and the diagonal fallback.
    jitter : float, default 0.1
        Initial points: estimate + ``jitter`` x N(0, seeded covariance) in the unconstrained space.
    target_accept : float, default 0.8
    mass_matrix_weight : float, default 100
        How many draws the seeded covariance counts as when adaptation updates it.
    mode : str or None, default "NUMBA"
        PyTensor compile mode of the PyMC sampler's log density (``"FAST_RUN"`` for the C backend).
        PyMC's side functions (the trace's point function, the pointwise log-likelihood, the posterior
        predictive) run on Python thunks, with nothing compiled (:func:`side_mode`); with None, the
        log density, the trace and the log-likelihood take PyTensor's default mode.
    posterior_predictive : bool, default True
        Add the ``posterior_predictive`` group: simulated observations
        (``y_obs``) per draw, and noise-free trajectories ``trajectory`` on
        ``n_trajectory_times`` times spanning each experiment (dim ``t_fine``).
    progressbar : bool, default False
    callback : callable, optional
        ``sampler="pymc"``: passed to ``pm.sample`` (called after every draw;
        raising KeyboardInterrupt in it stops sampling like Ctrl-C).
    **build_kwargs
        Passed to :func:`~odeinfer.bayes.build_model` (``priors``, ``likelihood``, ``x0``, ``sigma``, ...).

    Returns
    -------
    arviz.InferenceData
        Groups ``posterior``, ``sample_stats``, ``log_likelihood``,
        ``observed_data``, ``constant_data``, ``posterior_predictive`` and, with
        ``init``, ``estimate`` (the estimate's values and covariance by name;
        estimator and status in its attrs). ``posterior.attrs`` records the
        sampler, whether the mass matrix was seeded, ``sampling_time`` (s,
        without compilation) and ``odeinfer_wall_time`` (s, with it).

    Warns
    -----
    SamplingInterruptedWarning
        Sampling was interrupted (KeyboardInterrupt): the result holds the draws taken so far.
    SeedingWarning
        The estimate's covariance could not seed the mass matrix (diagonal fallback), or the
        estimate could not start the chains at all (start from the priors).

    Examples
    --------
    >>> import odeinfer as oi
    >>> entry = oi.zoo.get("linear_decay")
    >>> data = oi.simulate(entry, rng=1).data                       # doctest: +SKIP
    >>> idata = oi.bayes.sample(entry.model, data, priors=..., draws=200)  # doctest: +SKIP
    """
    from odeinfer.bayes.build import build_info, build_model, check_init
    from odeinfer.likelihood import FitProblem
    from odeinfer.petab.tables import PetabProblem

    if isinstance(model, (FitProblem, PetabProblem)):
        from odeinfer.bayes.problem import sample_problem

        if data is not None:
            raise InputError("data: a FitProblem carries its data; call sample(problem, init=fit, ...)")
        return sample_problem(model, init=init, draws=draws, tune=tune, chains=chains, cores=cores, rng=rng,
                              target_accept=target_accept, jitter=jitter, mass_matrix_weight=mass_matrix_weight,
                              progressbar=progressbar, **build_kwargs)

    if sampler not in SAMPLERS:
        raise InputError(f"sampler: expected one of {list(SAMPLERS)}, got {sampler!r}")
    for name, value in (("draws", draws), ("chains", chains)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(f"{name}: expected a positive integer, got {value!r}")
    if tune is not None and (isinstance(tune, bool) or not isinstance(tune, (int, np.integer)) or tune < 0):
        raise InputError(f"tune: expected a non-negative integer or None, got {tune!r}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    refused = _refused(init)
    if refused is not None:
        init = None  # neither the start nor the centre of a prior
    pm_model = _pm_model(model)
    if pm_model is None:
        if data is None:
            raise InputError("data: required when model is an odeinfer Model (or pass a pymc.Model from build_model)")
        try:
            pm_model = build_model(model, data, init=init, **build_kwargs)
        except InputError as exc:
            if refused is None:
                raise
            raise InputError(f"{exc} (init= was not used: {refused})") from None
    elif build_kwargs or data is not None:
        raise InputError(f"model: a pymc.Model is already built; drop data= and {sorted(build_kwargs)} "
                         "(give them to build_model)")
    info = build_info(pm_model)
    if init is None and refused is None:
        init = info.init
        refused = _refused(init)
        if refused is not None:
            init = None
    elif init is not None and init is not info.init:
        check_init(init, info.model)
    if callback is not None and sampler != "pymc":
        raise InputError("callback: only sampler='pymc' takes a callback")
    cores = min(chains, 2) if cores is None else int(cores)

    seed = None
    if init is not None:
        from odeinfer.bayes.seed import seed_from_estimate

        nobs = {}
        for d in info.experiments:
            for j, s in enumerate(d.states):
                nobs[s] = nobs.get(s, 0) + int(np.asarray(d.mask)[:, j].sum())
        seed = seed_from_estimate(pm_model, init, nobs)
    seeds = [int(s) for s in gen.integers(0, 2**31 - 1, size=chains + 2)]
    initvals = None
    if seed is not None and sampler == "pymc":
        from odeinfer.bayes.seed import checked_points

        initvals = checked_points(seed, chains, gen, jitter)
        if initvals is None:
            seed = None
    seeded = bool(seed is not None and seed.cov is not None and seed_mass_matrix and sampler == "pymc")
    if tune is None:
        tune = 500 if seeded else 1000

    start = time.perf_counter()
    if sampler == "pymc":
        idata = _sample_pymc(pm_model, seed, seeded, draws, tune, chains, cores, seeds, initvals,
                             target_accept, mass_matrix_weight, mode, progressbar, callback)
    else:
        idata = _sample_nutpie(pm_model, seed, draws, tune, chains, cores, seeds[0], target_accept, progressbar)
    wall = time.perf_counter() - start
    n_kept = int(_idata.posterior(idata).sizes.get("draw", 0))
    interrupted = n_kept < draws
    if interrupted:
        warnings.warn(f"sampling was interrupted: kept {n_kept} of {draws} draws per chain (tuning draws are "
                      "discarded); the InferenceData holds the draws taken so far", SamplingInterruptedWarning,
                      stacklevel=2)
    _idata.set_attrs(idata, odeinfer_sampler=sampler, odeinfer_seeded_mass_matrix=int(seeded), odeinfer_tune=int(tune),
                     odeinfer_wall_time=wall, odeinfer_interrupted=int(interrupted))
    if n_kept and posterior_predictive:
        _add_posterior_predictive(idata, pm_model, info, seeds[-1], n_trajectory_times)
    if refused is not None:
        _idata.set_attrs(idata, odeinfer_init_refused=refused)
    if init is not None:
        _add_estimate(idata, init)
    return idata


def _refused(init):
    """Why the estimate ``init`` must not seed the sampler
    (:func:`odeinfer.estimators._trajectory_check.unusable_reason`),
    warned as a SeedingWarning; None when it may (or is None, or not an Estimate: checked later)."""
    from odeinfer.bayes.seed import SeedingWarning
    from odeinfer.estimators._trajectory_check import unusable_reason
    from odeinfer.results import Estimate

    if not isinstance(init, Estimate):
        return None
    why = unusable_reason(init)
    if why is not None:
        warnings.warn(f"init: not seeding NUTS from the {init.estimator} estimate: {why}; the chains start from the "
                      "priors (PyMC's default start and diagonal adaptation); fix the fit (see its warnings) or give "
                      "priors that describe what is known", SeedingWarning, stacklevel=3)
    return why


def _pm_model(model):
    import pymc as pm

    return model if isinstance(model, pm.Model) else None


def _sample_pymc(pm_model, seed, seeded, draws, tune, chains, cores, seeds, initvals, target_accept,
                 weight, mode, progressbar, callback, log_likelihood=True):
    """``pm.sample`` with the seeded dense mass matrix (``seeded``) or PyMC's diagonal adaptation, from
    ``initvals`` (the seed's checked start points, :func:`odeinfer.bayes.seed.checked_points`) or, without
    a seed, PyMC's default start."""
    import pymc as pm

    kwargs = dict(draws=draws, tune=tune, chains=chains, cores=cores, random_seed=seeds[0],
                  progressbar=progressbar, model=pm_model, compute_convergence_checks=False,
                  idata_kwargs={"log_likelihood": log_likelihood}, callback=callback)
    compile_kwargs = {"mode": mode} if mode is not None else {}
    if seed is not None:
        kwargs["initvals"] = initvals
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="QuadPotentialFullAdapt is an experimental feature")
        if seeded:
            from pymc.step_methods.hmc.quadpotential import QuadPotentialFullAdapt

            order = [pm_model[n] for n in seed.rv_names]
            potential = QuadPotentialFullAdapt(seed.mean.size, seed.mean.copy(), seed.cov.copy(),
                                               initial_weight=weight)
            with pm_model:
                step = pm.NUTS(vars=order, potential=potential, target_accept=target_accept,
                               compile_kwargs=compile_kwargs)
            _check_step_order(step, seed)
            kwargs["step"] = step
            _await_graph(mode)
            if chains > 1 and cores > 1:
                _compile_before_fork(step, seed.mean)
        else:
            kwargs["init"] = "jitter+adapt_diag" if seed is None else "adapt_diag"
            kwargs["target_accept"] = target_accept
            kwargs["compile_kwargs"] = compile_kwargs
            _await_graph(mode)
        if mode is None:  # PyTensor's default mode for everything, as asked
            return pm.sample(**kwargs)
        # the trace's point function and the pointwise log-likelihood; without a seeded step, PyMC
        # compiles the log density inside pm.sample, in the mode asked for (the C compiler kept)
        with side_mode(compiler=not seeded):
            return pm.sample(**kwargs)


def _await_graph(mode):
    """In NUMBA mode, wait for a warm-up process compiling the demo's graph (``nuts_graph``): its
    operations then load from PyTensor's cache. Called once the step is built (PyTensor's rewrites of
    the log density run meanwhile) and before its first call, which compiles it."""
    if mode == "NUMBA":
        from odeinfer.solve.warmup import await_kernel

        await_kernel("nuts_graph")


@contextlib.contextmanager
def side_mode(compiler=False):
    """Within the block, PyTensor functions compiled in the default mode (PyMC's side functions: the
    trace's point function, the pointwise log-likelihood, the posterior predictive's forward function)
    run PyTensor's ``fast_run`` rewrites, elemwise fusion left out, on Python thunks instead of C ones.
    The same graphs give the same values (NumPy's arithmetic in place of the C code's; equal to 1e-10
    in the tests); what changes is that nothing is compiled: on an empty PyTensor cache, compiling each
    operation of these small graphs with the C compiler cost about 5 s of the lynx-hare demo, more than
    evaluating them in Python over all the draws. Functions compiled with an explicit mode (the
    sampler's log density, ``mode="NUMBA"``) are not affected, but with ``compiler=False`` (no C
    compiler inside the block) a C-backend mode compiled in the block (``mode="FAST_RUN"``) would not
    get C thunks (and PyTensor resolves ``"FAST_RUN"`` to no mode at all): pass ``compiler=True`` when
    the sampler's own functions are compiled inside the block (PyMC's default initialisation)."""
    import pytensor
    from pytensor.compile.mode import Mode
    from pytensor.link.vm import VMLinker

    # cxx="": the rewrites' constant folding would compile C thunks too
    # without elemwise fusion: a fused op's Python thunk runs element by element, NumPy's ufuncs do not
    mode = Mode(VMLinker(use_cloop=False, c_thunks=False), "fast_run").excluding("fusion")
    flags = {"mode": mode} if compiler else {"mode": mode, "cxx": ""}
    with pytensor.config.change_flags(**flags):
        yield


def _compile_before_fork(step, q):
    """Evaluate the step's log density and gradient once at ``q`` (the seed's mean: the unconstrained
    values in the step's order, see :func:`_check_step_order`), so
    the PyTensor function is compiled (NUMBA mode compiles at the first call) in this process: chain
    processes forked by PyMC (the default start method on Linux) inherit it instead of each compiling
    it again (on an empty cache, about 9 s per chain process). Pickled chains (``spawn``,
    ``forkserver``) and steps with shared variables are left alone."""
    import multiprocessing

    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if method != "fork" or step.shared:
        return
    func = step._logp_dlogp_func
    func.set_extra_values({})
    func(np.ascontiguousarray(q, dtype=func.dtype))


def _check_step_order(step, seed):
    """The potential's coordinates must follow the step's variable order (PyMC ravels in that order)."""
    names = tuple(v.name for v in step.vars)
    if names != seed.value_names:
        raise RuntimeError(f"internal: NUTS variable order {names} differs from the seed's {seed.value_names}")


def _sample_nutpie(pm_model, seed, draws, tune, chains, cores, rng_seed, target_accept, progressbar):
    try:
        import nutpie
    except ImportError:
        raise InputError("sampler='nutpie': nutpie is not installed; pip install nutpie (optional dependency), "
                         "or use sampler='pymc'") from None
    import pymc as pm

    kwargs = {}
    if seed is not None:
        start = seed.points(1, np.random.default_rng(rng_seed), 0.0)[0]
        kwargs = {"initial_points": {pm_model[k]: v for k, v in start.items()}, "jitter_rvs": set()}
    compiled = nutpie.compile_pymc_model(pm_model, backend="numba", **kwargs)
    start = time.perf_counter()
    idata = nutpie.sample(compiled, draws=draws, tune=tune, chains=chains, cores=cores, seed=rng_seed,
                          save_warmup=False, progress_bar=progressbar, target_accept=target_accept)
    _idata.set_attrs(idata, sampling_time=time.perf_counter() - start)
    # nutpie returns posterior and sample_stats; add the groups PyMC's sampler would
    _add_model_groups(idata, pm_model)
    with side_mode():
        pm.compute_log_likelihood(idata, model=pm_model, progressbar=False, extend_inferencedata=True)
    return idata


def _add_model_groups(idata, pm_model):
    """observed_data and constant_data of ``pm_model`` (what pm.sample adds)."""
    import xarray as xr
    from pytensor.compile.sharedvalue import SharedVariable

    def dataset(pairs):
        out = {}
        for name, value in pairs:
            dims = pm_model.named_vars_to_dims.get(name)
            coords = {d: np.asarray(pm_model.coords[d]) for d in (dims or ())}
            out[name] = xr.DataArray(np.asarray(value), dims=dims, coords=coords) if dims else np.asarray(value)
        return xr.Dataset(out)

    obs = [(rv.name, pm_model.rvs_to_values[rv].data) for rv in pm_model.observed_RVs]
    const = [(name, var.get_value()) for name, var in pm_model.named_vars.items() if isinstance(var, SharedVariable)]
    groups = {}
    if "observed_data" not in idata.groups():
        groups["observed_data"] = dataset(obs)
    if "constant_data" not in idata.groups() and const:
        groups["constant_data"] = dataset(const)
    if groups:
        idata.add_groups(groups)


def _add_posterior_predictive(idata, pm_model, info, rng_seed, n_fine):
    import pymc as pm
    import xarray as xr

    obs_names = [rv.name for rv in pm_model.observed_RVs]
    with warnings.catch_warnings(), side_mode():
        warnings.filterwarnings("ignore", category=UserWarning)
        pm.sample_posterior_predictive(idata, model=pm_model, var_names=obs_names, random_seed=rng_seed,
                                       progressbar=False, extend_inferencedata=True)
    post = _idata.posterior(idata)
    theta = np.asarray(post["theta"].transpose("chain", "draw", "param"))
    chains, draws = theta.shape[:2]
    model = info.model
    data_vars = {}
    for e, (d, sfx, problem) in enumerate(zip(info.experiments, info.suffixes, info.problems)):
        t_fine = np.linspace(d.t0, float(d.t[-1]), int(n_fine))
        fine = problem.at_times(t_fine)
        out = np.empty((chains, draws, t_fine.size, model.n_states))
        x0e = _second_input(post, info, problem, e, sfx, chains, draws)
        for c in range(chains):
            for k in range(draws):
                out[c, k] = fine.python_solve(theta[c, k], x0e[c, k], sens=False)[0]
        data_vars[f"trajectory{sfx}"] = xr.DataArray(
            out, dims=("chain", "draw", f"t_fine{sfx}", "state"),
            coords={"chain": post["chain"].values, "draw": post["draw"].values, f"t_fine{sfx}": t_fine,
                    "state": list(model.states)})
    idata.posterior_predictive = idata.posterior_predictive.assign(data_vars)


def _second_input(post, info, problem, e, sfx, chains, draws):
    """The Op's second input per draw: initial states (ODE) or history parameters (DDE)."""
    if problem.init_name == "x0":
        x0_all = np.asarray(post["x0"])
        return x0_all if len(info.suffixes) == 1 else x0_all[:, :, e, :]
    name = f"{problem.init_name}{sfx}"
    if name in post:
        return np.asarray(post[name])
    # a known history: its fixed values
    return np.broadcast_to(np.asarray(info.histories[e].values), (chains, draws, problem.n_init))


def _add_estimate(idata, est):
    import xarray as xr

    names = list(est.names)
    cov = np.full((len(names), len(names)), np.nan) if est.cov is None else np.asarray(est.cov)
    ds = xr.Dataset(
        {"value": xr.DataArray(np.asarray(est.values), dims=("name",)),
         "std_err": xr.DataArray(est.bse.to_numpy(), dims=("name",)),
         "cov": xr.DataArray(cov, dims=("name", "name_"))},
        coords={"name": names, "name_": names},
        attrs={"estimator": est.estimator, "status": est.status, "model": est.model.name,
               "sigma": str(dict(est.sigma))})
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not defined in the InferenceData scheme.*")
        idata.add_groups({"estimate": ds})
