"""The PyMC model of an ODE or DDE, its data and priors: :func:`build_model`.

Naming follows :class:`~odeinfer.results.Estimate`, so posterior variables and
estimates line up by name: model parameters by their own names (``"alpha"``),
unknown initial states ``"x0[state]"`` (``"x0[state]@experiment"`` with several
experiments), noise scales ``"sigma[state]"`` (shared by the experiments),
Student-t degrees of freedom ``"nu"``. Deterministics: ``"theta"`` (dim
``param``), ``"x0"`` (dim ``state``; ``experiment, state`` with several
experiments) and the trajectory at the observation times ``"y_hat"`` (dims
``time, state``). Observations: ``"y_obs"`` (dims ``time, observed_state``; with
missing values a flat vector over dim ``obs`` of the observed entries). With
several experiments, per-experiment names and dims carry ``"@<experiment>"``.

Models with delays (DDEs): the delays are parameters (``"tau"``, positive
priors); the parameters of a history family are ``"<group>[<state>]"``
(``"b[x]"``, ``"A[x]"``, ``"omega[x]"``: :meth:`History.param_names`, as the
DDE solver and the AdjointDDE estimator name them; ``"@<experiment>"``
appended with several experiments), in the deterministic ``"history_params"``
(dim ``history_param``); ``"x0"`` is then the state at ``t0`` (the history's value there).
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import DataError, InputError
from odeinfer.solve.config import Adjoint, Forward, Rodas, as_gradient, as_solver

__all__ = ["build_model", "lynx_hare_stan", "BuildInfo", "LIKELIHOODS"]

#: Likelihoods of :func:`build_model`. ``"normal"``: y ~ Normal(x, sigma); ``"lognormal"``:
#: log y ~ Normal(log x, sigma); ``"student_t"``: y ~ StudentT(nu, x, sigma); ``"poisson"``: y ~ Poisson(x).
LIKELIHOODS = ("normal", "lognormal", "student_t", "poisson")

_INFO_ATTR = "odeinfer_info"


@dataclass(frozen=True, eq=False)
class BuildInfo:
    """What :func:`build_model` built (stored on the PyMC model as ``pm_model.odeinfer_info``).

    Attributes
    ----------
    model : Model
    experiments : Experiments
    likelihood : str
    problems : tuple of ODEProblem or DDEProblem, one per experiment
    suffixes : tuple of str
        ``""`` for a single experiment, else ``"@<name>"`` per experiment.
    free : tuple of str
        Names of the free random variables the builder created (priors).
    init : Estimate or None
    histories : tuple of History or None
        The history of each experiment (models with delays), else None.
    """

    model: object
    experiments: object
    likelihood: str
    problems: tuple
    suffixes: tuple
    free: tuple
    init: object
    histories: tuple | None = None


def build_model(model, data, *, priors=None, likelihood=None, init=None, x0=None, history=None, sigma=None,
                fixed=None, inflate=10.0, solver=None, gradient=None):
    """A ``pm.Model`` of ``model`` observed through ``data``, ready to sample or to extend.

    Parameters
    ----------
    model : Model
        From ``@oi.model``; compiled on first use (cached on disk).
    data : Data, Experiments or list of Data
        Observed states are the data's columns; NaN entries are left out of the likelihood.
    priors : mapping of str to prior, optional
        Keys: parameter names (delays included), ``"x0[state]"``
        (``"x0[state]@exp"``), history parameters ``"b[state]"`` etc.
        (models with delays), ``"sigma[state]"``, ``"nu"``, or a group key ``"x0"`` / ``"sigma"`` for
        all members of the group. Values: an unnamed PyMC distribution
        (``pm.TruncatedNormal.dist(1, 0.5, lower=0)``), registered under the
        name, or a callable ``name -> variable`` that creates the named variable
        in the model context (``lambda n: pm.HalfNormal(n, 1)``).
    likelihood : {"normal", "lognormal", "student_t", "poisson"}, optional
        Default: ``"lognormal"`` if the model's noise is ``"log"``, else ``"normal"``.
    init : Estimate, optional
        Priors for every estimated quantity without an explicit prior come
        from :func:`~odeinfer.bayes.priors_from_estimate` ``(init, inflate)``;
        :func:`~odeinfer.bayes.sample` also starts there. Must be an estimate of
        the same model.
    x0 : array-like (n_states,) or mapping, optional
        Known initial states (at each experiment's ``t0``): an array, a mapping
        ``{state: value}`` (the other states are unknown), or with several
        experiments ``{experiment: array or mapping}``. Default: all unknown.
        Not for models with delays (their initial state is the history's value at ``t0``).
    history : History, number(s), mapping or None, optional
        Models with delays only: the states on ``[t0 - max(tau), t0]`` of each
        experiment. A :class:`~odeinfer.model.History` family
        (``History.constant/affine/periodic``) has unknown parameters
        (``"b[x]"``, ...; priors from ``priors=`` or ``init``, or held by
        ``fixed=``); numbers, ``{state: value}`` or a data-driven history
        (``History.from_data`` / ``from_function``) are known. With several
        experiments: one history for all or ``{experiment: history}``.
        Default: ``History.constant`` with unknown values (as AdjointDDE). With
        a data-driven history, a delay longer than its window gives a NaN log
        density (the sampler rejects it).
    sigma : float or mapping, optional
        Known noise scales: one number for all observed states or
        ``{state: value}``. Default: unknown, one per observed state, prior
        ``HalfNormal(2.5 * s)`` with ``s`` the estimate's sigma (if ``init`` has
        one on the same scale) or the data's standard deviation (``1`` for
        ``"lognormal"``).
    fixed : mapping, optional
        Parameters held at known values, ``{name: value}``; with delays also
        history parameters (``"b[x]"`` for every experiment, ``"b[x]@exp"`` for one).
    inflate : float, default 10.0
        Width factor of the priors taken from ``init``.
    solver : Dopri5, Rodas or MethodOfSteps, optional
        The Op's solver (see :class:`~odeinfer.bayes.ODEProblem`; models with delays:
        :class:`~odeinfer.bayes.DDEProblem`); default ``oi.Dopri5(max_steps=20_000)`` (the
        ``sample`` role's), in ``oi.MethodOfSteps`` for a delay model.
    gradient : None, Forward or Adjoint
        How the Op differentiates the solution (see :class:`~odeinfer.bayes.ODEOp`):
        ``oi.Forward(error_control=...)``, forward sensitivities (one solve serves the log
        density and its gradient), or ``oi.Adjoint()``, the continuous adjoint (its cost does
        not grow with the number of parameters; for delay models the DDE-Find adjoint).
        None (default) chooses: the adjoint for ODEs solved by ``Dopri5`` with at least
        ``ADJOINT_FROM`` (12) parameters plus initial states, else
        ``oi.Forward(error_control=False)`` (the sensitivities then ride on the states' steps:
        the exact derivative of the computed solution).

    Returns
    -------
    pymc.Model
        With coords ``param``, ``state``, ``experiment``, ``time`` (and
        ``observed_state``, ``obs``); ``pm_model.odeinfer_info`` holds a :class:`BuildInfo`.

    Raises
    ------
    InputError
        Unknown prior names, priors for known quantities (e.g. a history
        parameter when the history is known), missing priors, a delay prior
        with mass on values <= 0, ``history`` for a model without delays or
        ``x0`` for one with delays, unknown likelihood, an ``init`` estimate of another model.
    DataError
        Data states that are not model states; observations unsuited to the
        likelihood (e.g. non-positive values for ``"lognormal"``, naming the rows).

    Examples
    --------
    Stan's lynx-hare case study (Carpenter 2018), exactly:

    >>> import odeinfer as oi
    >>> lv, data, priors = oi.bayes.build.lynx_hare_stan()
    >>> m = oi.bayes.build_model(lv, data, priors=priors, likelihood="lognormal")
    >>> sorted(v.name for v in m.free_RVs)
    ['alpha', 'beta', 'delta', 'gamma', 'sigma[hare]', 'sigma[lynx]', 'x0[hare]', 'x0[lynx]']
    """
    import pymc as pm
    import pytensor.tensor as pt

    from odeinfer.bayes import _dde_build as ddeb
    from odeinfer.bayes.dde_problem import DDEProblem
    from odeinfer.bayes.op import ODEOp, ODEProblem
    from odeinfer.data import as_experiments
    from odeinfer.data.experiments import refuse_steady_state
    from odeinfer.model import CompiledModel, Model

    if isinstance(model, CompiledModel):
        model = model.model
    if not isinstance(model, Model):
        raise InputError(f"model: expected an odeinfer Model (from @oi.model), got {type(model).__name__}")
    exps = as_experiments(data)
    refuse_steady_state(exps, "oi.bayes (the ODE Op)")
    solver = as_solver(solver, delays=bool(model.delays), role="sample")
    gradient = as_gradient(gradient)
    if isinstance(gradient, Adjoint) and isinstance(solver, Rodas):
        raise InputError(f"gradient: oi.Adjoint() runs on the Dormand-Prince steps, but solver={solver!r}; "
                         "use solver=oi.Dopri5(...) or gradient=oi.Forward()")
    sens_err = gradient.error_control if isinstance(gradient, Forward) else False
    likelihood = _likelihood(model, likelihood)
    _check_states(model, exps)
    _check_observations(exps, likelihood)
    if init is not None:
        check_init(init, model)
    multi = len(exps) > 1
    suffixes = tuple(f"@{d.name}" for d in exps) if multi else ("",)
    dde = bool(model.delays)
    hist, hfixed = None, {}
    if dde:
        hist = ddeb.dde_histories(model, exps, history, x0, suffixes)
        fixed, hfixed = ddeb.split_fixed(fixed, model, hist)
        ddeb.check_prior_names(priors, model, hist)
    elif history is not None:
        raise InputError(f"history: model {model.name!r} has no delays, so it takes no history; give its initial "
                         "states with x0= (or leave them unknown)")
    fixed = _fixed(model, fixed)
    if dde:
        ddeb.check_fixed_delays(model, fixed, hist, exps)
    known_x0 = _known_x0(model, exps, x0, suffixes)
    obs_states = tuple(dict.fromkeys(s for d in exps for s in d.states))
    known_sigma = _known_sigma(sigma, obs_states, likelihood)

    # the free quantities, in order
    free_params = [p for p in model.params if p not in fixed]
    free_x0 = [] if dde else [f"x0[{s}]{sfx}" for sfx in suffixes for s in model.states if (s, sfx) not in known_x0]
    free_hist = [] if not dde else [n for n in hist.all_names() if n not in hfixed]
    free_sigma = [] if likelihood == "poisson" else [f"sigma[{s}]" for s in obs_states if s not in known_sigma]
    free_other = ["nu"] if likelihood == "student_t" else []
    free = free_params + free_x0 + free_hist + free_sigma + free_other
    known = ([p for p in model.params if p in fixed] + [f"x0[{s}]{sfx}" for (s, sfx) in known_x0]
             + list(hfixed) + [f"sigma[{s}]" for s in known_sigma])
    groups = {"sigma": free_sigma} if dde else {"x0": free_x0, "sigma": free_sigma}
    specs = _expand_priors(priors, free, known, groups)
    missing = [n for n in free if n not in specs]
    if init is not None:
        from odeinfer.bayes.priors import priors_from_estimate

        have = [n for n in missing if n in init.names]
        specs.update(priors_from_estimate(init, inflate=inflate, names=have))
    defaults = _default_priors(exps, likelihood, init, model, free_sigma, free_other)
    for n in missing:
        if n not in specs and n in defaults:
            specs[n] = defaults[n]
    missing = [n for n in free if n not in specs]
    if missing:
        raise InputError(
            f"priors: no prior for {missing}; give one in priors={{name: pm.<Dist>.dist(...)}}, pass "
            f"init=<Estimate of this model> to centre priors on it"
            + (", or give known initial states with x0=" if any(n.startswith("x0[") for n in missing) else ""))

    coords = {"param": list(model.params), "state": list(model.states),
              "experiment": [str(d.name) for d in exps]}
    problems = []
    with pm.Model(coords=coords) as pm_model:
        rvs = {n: _register(pm_model, n, specs[n]) for n in free}
        if dde:
            ddeb.check_delay_priors(model, rvs)
        theta = pt.stack([rvs[p] if p in rvs else pt.constant(fixed[p], dtype="float64") for p in model.params])
        pm.Deterministic("theta", theta, dims="param")
        x0_vectors, inputs = [], []
        for e, (d, sfx) in enumerate(zip(exps, suffixes)):
            if dde:
                h = hist.histories[e]
                if hist.estimable[e]:
                    pm_model.add_coord(f"history_param{sfx}", list(h.param_names(model.states)))
                    phi = pt.stack([rvs[n] if n in rvs else pt.constant(hfixed[n], dtype="float64")
                                    for n in hist.names[e]])
                    pm.Deterministic(f"history_params{sfx}", phi, dims=f"history_param{sfx}")
                else:
                    phi = pt.constant(np.array(h.values, dtype=float))
                inputs.append(phi)
                x0_vectors.append(ddeb.x0_of_history(h, phi, float(d.t0), model.n_states))
            else:
                x0_vectors.append(pt.stack([
                    pt.constant(known_x0[(s, sfx)], dtype="float64") if (s, sfx) in known_x0 else rvs[f"x0[{s}]{sfx}"]
                    for s in model.states]))
                inputs.append(x0_vectors[-1])
        if multi:
            pm.Deterministic("x0", pt.stack(x0_vectors), dims=("experiment", "state"))
        else:
            pm.Deterministic("x0", x0_vectors[0], dims="state")
        sig = {s: (pt.constant(known_sigma[s], dtype="float64") if s in known_sigma else rvs.get(f"sigma[{s}]"))
               for s in obs_states}
        for e, (d, sfx, op_in) in enumerate(zip(exps, suffixes, inputs)):
            if dde:
                problem = DDEProblem(model, d.t, hist.histories[e], d.t0, solver=solver, sens_error_control=sens_err)
            else:
                problem = ODEProblem(model, d.t, d.t0, solver=solver, sens_error_control=sens_err)
            problems.append(problem)
            op_gradient = _op_gradient(gradient, problem)
            tdim, odim = f"time{sfx}", f"observed_state{sfx}"
            pm_model.add_coord(tdim, np.asarray(d.t, dtype=float))
            pm_model.add_coord(odim, list(d.states))
            pm.Data(f"t{sfx}", np.asarray(d.t, dtype=float), dims=tdim)
            y_all, _ = ODEOp(problem, gradient=op_gradient)(theta, op_in)
            y_hat = pm.Deterministic(f"y_hat{sfx}", y_all, dims=(tdim, "state"))
            cols = [model.states.index(s) for s in d.states]
            mask = np.asarray(d.mask)
            if mask.all():
                mu = _columns(y_hat, cols)
                observed, dims = np.asarray(d.y, dtype=float), (tdim, odim)
                scale = pt.stack([sig[s] for s in d.states]) if sig and None not in sig.values() else None
            else:
                rows, cj = np.nonzero(mask)
                labels = [f"{d.t[i]:g}|{d.states[j]}" for i, j in zip(rows, cj)]
                pm_model.add_coord(f"obs{sfx}", labels)
                mu = y_hat[rows, np.asarray(cols)[cj]]
                observed, dims = np.asarray(d.y, dtype=float)[rows, cj], (f"obs{sfx}",)
                scale = (pt.stack([sig[s] for s in d.states])[cj]
                         if sig and None not in sig.values() else None)
            _likelihood_rv(f"y_obs{sfx}", likelihood, mu, scale, rvs.get("nu"), observed, dims)
    object.__setattr__(pm_model, _INFO_ATTR, BuildInfo(model, exps, likelihood, tuple(problems), suffixes,
                                                       tuple(free), init, hist.histories if dde else None))
    return pm_model


#: Op inputs (parameters + initial states) from which ``gradient=None`` takes the adjoint
#: for ODEs (benchmarks/bench_adjoint.py: it overtakes forward sensitivities between
#: Lotka-Volterra's 6 and the 15 of a 5-state Michaelis-Menten chain). For DDEs None keeps
#: the sensitivities: the DDE adjoint (RK4 on the forward mesh refined at the observation
#: times and their delay images) was 2-6x slower on the zoo models, HIV's 20 inputs included.
ADJOINT_FROM = 12


def _op_gradient(gradient, problem):
    """The Op's ``gradient`` for ``build_model(gradient=...)`` (validated by build_model)."""
    if gradient is not None:
        return gradient
    many = problem.kind == "ode" and problem.method == "dopri5" and problem.n_params + problem.n_init >= ADJOINT_FROM
    return Adjoint() if many else Forward(error_control=False)


def build_info(pm_model) -> BuildInfo:
    """The :class:`BuildInfo` of a model made by :func:`build_model` (InputError otherwise)."""
    info = getattr(pm_model, _INFO_ATTR, None)
    if not isinstance(info, BuildInfo):
        raise InputError("model: this pymc.Model was not made by odeinfer.bayes.build_model; pass the odeinfer "
                         "Model and the data instead, or build it with build_model")
    return info


def check_init(init, model):
    """InputError unless ``init`` is an :class:`Estimate` of ``model`` (same equations and names)."""
    from odeinfer.results import Estimate

    if not isinstance(init, Estimate):
        raise InputError(f"init: expected an odeinfer Estimate (from an estimator's fit), got {type(init).__name__}")
    other = init.model
    if (other.fingerprint != model.fingerprint or other.states != model.states or other.params != model.params):
        raise InputError(
            f"init: the estimate is of model {other.name!r} (states {list(other.states)}, params "
            f"{list(other.params)}), not of model {model.name!r} (states {list(model.states)}, params "
            f"{list(model.params)}) with the same equations; fit this model first, or drop init")


# ---- pieces ------------------------------------------------------------------------------------

def _likelihood(model, likelihood):
    if likelihood is None:
        return "lognormal" if model.observation.noise == "log" else "normal"
    if likelihood not in LIKELIHOODS:
        close = difflib.get_close_matches(str(likelihood), LIKELIHOODS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"likelihood: expected one of {list(LIKELIHOODS)}, got {likelihood!r}{hint}")
    return likelihood


def _check_states(model, exps):
    for d in exps:
        bad = [s for s in d.states if s not in model.states]
        if bad:
            raise DataError(f"data: columns {bad} of experiment {d.name!r} are not states of model "
                            f"{model.name!r} (states {list(model.states)}); rename them (data.rename(...))")


def _check_observations(exps, likelihood):
    for d in exps:
        y, mask = np.asarray(d.y), np.asarray(d.mask)
        if likelihood == "lognormal":
            bad = mask & ~(np.where(mask, y, 1.0) > 0)
            what = "positive observations (log y is modelled)"
        elif likelihood == "poisson":
            v = np.where(mask, y, 0.0)
            bad = mask & ~((v >= 0) & (v == np.round(v)))
            what = "non-negative integer counts"
        else:
            continue
        if bad.any():
            rows = np.nonzero(bad.any(axis=1))[0]
            items = [f"t={d.t[i]:g} ({', '.join(f'{d.states[j]}={y[i, j]:g}' for j in np.nonzero(bad[i])[0])})"
                     for i in rows[:10]]
            more = f" and {rows.size - 10} more" if rows.size > 10 else ""
            raise DataError(
                f"likelihood={likelihood!r} needs {what}, but experiment {d.name!r} has rows "
                f"{rows.tolist()[:10]}{more}: {'; '.join(items)}; drop or mask those values (NaN), or use "
                f"likelihood='normal'")


def _fixed(model, fixed):
    if fixed is None:
        return {}
    if not isinstance(fixed, Mapping):
        raise InputError(f"fixed: expected a mapping {{parameter: value}}, got {type(fixed).__name__}")
    out = {}
    for k, v in fixed.items():
        if k not in model.params:
            raise InputError(f"fixed: {k!r} is not a parameter of model {model.name!r}{_hint(k, model.params)}; "
                             f"its parameters are {list(model.params)}")
        v = float(v)
        if not np.isfinite(v):
            raise InputError(f"fixed: the value of {k!r} must be finite, got {v}")
        out[k] = v
    return out


def _state_values(model, value, where):
    if isinstance(value, Mapping):
        bad = [k for k in value if k not in model.states]
        if bad:
            raise InputError(f"x0{where}: {bad} are not states of model {model.name!r}{_hint(bad[0], model.states)}; "
                             f"its states are {list(model.states)}")
        out = {k: float(v) for k, v in value.items()}
    else:
        arr = np.asarray(value, dtype=float).ravel()
        if arr.size != model.n_states:
            raise InputError(f"x0{where}: expected {model.n_states} values (for {list(model.states)}), got {arr.size}")
        out = dict(zip(model.states, arr.tolist()))
    bad = [k for k, v in out.items() if not np.isfinite(v)]
    if bad:
        raise InputError(f"x0{where}: the values of {bad} must be finite")
    return out


def _known_x0(model, exps, x0, suffixes):
    """{(state, suffix): value} of the known initial states."""
    if x0 is None:
        return {}
    names = [str(d.name) for d in exps]
    per_exp = (isinstance(x0, Mapping) and len(exps) > 1 and x0 and all(k in names for k in x0))
    out = {}
    for d, sfx in zip(exps, suffixes):
        value = x0.get(str(d.name)) if per_exp else x0
        if value is None:
            continue
        for s, v in _state_values(model, value, f"[{d.name}]" if per_exp else "").items():
            out[(s, sfx)] = v
    return out


def _known_sigma(sigma, obs_states, likelihood):
    if sigma is None:
        return {}
    if likelihood == "poisson":
        raise InputError("sigma: the 'poisson' likelihood has no noise scale; drop sigma=")
    if isinstance(sigma, Mapping):
        bad = [k for k in sigma if k not in obs_states]
        if bad:
            raise InputError(f"sigma: {bad} are not observed states (observed: {list(obs_states)})")
        out = {k: float(v) for k, v in sigma.items()}
    else:
        out = dict.fromkeys(obs_states, float(sigma))
    bad = [k for k, v in out.items() if not (v > 0 and np.isfinite(v))]
    if bad:
        raise InputError(f"sigma: the noise scale of {bad} must be a positive finite number, got "
                         f"{[out[k] for k in bad]}")
    return out


def _hint(name, names):
    close = difflib.get_close_matches(str(name), [str(n) for n in names], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _expand_priors(priors, free, known, groups):
    if priors is None:
        return {}
    if not isinstance(priors, Mapping):
        raise InputError(f"priors: expected a mapping {{name: distribution}}, got {type(priors).__name__}")
    out = {}
    for key, spec in priors.items():
        if key in groups and key not in free:
            for n in groups[key]:
                out.setdefault(n, spec)
            continue
        if key in known:
            raise InputError(f"priors: {key!r} is known (given by x0=, sigma= or fixed=), so it takes no prior; "
                             "drop one of the two")
        if key not in free:
            raise InputError(f"priors: {key!r} is not a parameter of the model{_hint(key, free)}; the names that take "
                             f"priors are {free} (and the group keys 'x0', 'sigma')")
    for key, spec in priors.items():
        if key in free:
            out[key] = spec
    for key, spec in out.items():
        if not (callable(spec) or _is_dist(spec)):
            raise InputError(f"priors[{key!r}]: expected an unnamed PyMC distribution (pm.Normal.dist(0, 1)) or a "
                             f"callable name -> variable, got {type(spec).__name__}")
    return out


def _is_dist(spec):
    from pytensor.graph.basic import Variable

    return isinstance(spec, Variable) and spec.owner is not None


def _register(pm_model, name, spec):
    if _is_dist(spec):
        # a copy, so that a group prior or a dict reused across models registers fresh variables
        return pm_model.register_rv(copy.deepcopy(spec), name)
    rv = spec(name)
    if getattr(rv, "name", None) != name or rv not in pm_model.free_RVs:
        raise InputError(f"priors[{name!r}]: the callable must create a free variable named {name!r} in the "
                         f"model (e.g. lambda name: pm.HalfNormal(name, 1.0)); it returned {rv!r}")
    return rv


def _default_priors(exps, likelihood, init, model, free_sigma, free_other):
    import pymc as pm

    out = {}
    est_scale = None
    if init is not None and init.sigma:
        same = (init.model.observation.noise == "log") == (likelihood == "lognormal")
        est_scale = dict(init.sigma) if same else None
    for n in free_sigma:
        s = n[len("sigma["):-1]
        scale = None
        if est_scale is not None and s in est_scale and np.isfinite(est_scale[s]) and est_scale[s] > 0:
            scale = float(est_scale[s])
        elif likelihood == "lognormal":
            scale = 1.0
        else:
            vals = np.concatenate([np.asarray(d.y)[:, d.states.index(s)] for d in exps if s in d.states])
            vals = vals[np.isfinite(vals)]
            scale = float(np.std(vals)) if vals.size > 1 and np.std(vals) > 0 else 1.0
        out[n] = pm.HalfNormal.dist(sigma=2.5 * scale)
    if "nu" in free_other:
        out["nu"] = pm.Gamma.dist(alpha=2.0, beta=0.1)
    return out


def _columns(y_hat, cols):
    """``y_hat[:, cols]``, as a basic slice when ``cols`` are consecutive (all states observed, in the
    model's order, in the common case): the same values, but the log density's gradient graph then has no
    advanced-indexing update, whose numba code costs about 2 s to compile on an empty cache."""
    if cols == list(range(cols[0], cols[0] + len(cols))):
        return y_hat[:, cols[0]:cols[0] + len(cols)]
    return y_hat[:, cols]


def _likelihood_rv(name, likelihood, mu, scale, nu, observed, dims):
    import pymc as pm
    import pytensor.tensor as pt

    if likelihood == "normal":
        return pm.Normal(name, mu=mu, sigma=scale, observed=observed, dims=dims)
    if likelihood == "lognormal":
        return pm.LogNormal(name, mu=pt.log(mu), sigma=scale, observed=observed, dims=dims)
    if likelihood == "student_t":
        return pm.StudentT(name, nu=nu, mu=mu, sigma=scale, observed=observed, dims=dims)
    return pm.Poisson(name, mu=mu, observed=observed, dims=dims)


# ---- the reference case study ------------------------------------------------------------------

def lynx_hare_stan():
    """Stan's Lotka-Volterra case study on the lynx-hare data: ``(model, data, priors)``.

    Carpenter, B. (2018), "Predator-Prey Population Dynamics: the Lotka-Volterra
    model in Stan", https://mc-stan.org/users/documentation/case-studies/lotka-volterra-predator-prey.html.
    States hare ``u`` and lynx ``v``: du/dt = (alpha - beta v) u, dv/dt = (-gamma
    + delta u) v; alpha, gamma ~ Normal(1, 0.5) and beta, delta ~ Normal(0.05,
    0.05), truncated at 0; z0_k ~ LogNormal(log 10, 1); sigma_k ~ LogNormal(-1, 1).
    With ``likelihood="lognormal"`` the 1900 row (t = t0 = 0, where the solution
    is z0) is LogNormal(log z0_k, sigma_k) and the 1901-1920 rows
    LogNormal(log z_k(t), sigma_k), as in the case study.

    Returns
    -------
    model : Model
        States ``("hare", "lynx")``, params ``("alpha", "beta", "gamma", "delta")``, log noise.
    data : Data
        :func:`odeinfer.datasets.lynx_hare` (t = year - 1900).
    priors : dict
        For :func:`build_model` ``(model, data, priors=priors, likelihood="lognormal")``.
    """
    import pymc as pm

    from odeinfer.datasets import lynx_hare
    from odeinfer.model import model as ode_model

    @ode_model(states=["hare", "lynx"], params=["alpha", "beta", "gamma", "delta"], noise="log")
    def lotka_volterra(t, y, p):
        return {"hare": (p.alpha - p.beta * y.lynx) * y.hare,
                "lynx": (-p.gamma + p.delta * y.hare) * y.lynx}

    priors = {
        "alpha": pm.TruncatedNormal.dist(mu=1.0, sigma=0.5, lower=0.0),
        "gamma": pm.TruncatedNormal.dist(mu=1.0, sigma=0.5, lower=0.0),
        "beta": pm.TruncatedNormal.dist(mu=0.05, sigma=0.05, lower=0.0),
        "delta": pm.TruncatedNormal.dist(mu=0.05, sigma=0.05, lower=0.0),
        "x0": pm.LogNormal.dist(mu=float(np.log(10.0)), sigma=1.0),
        "sigma": pm.LogNormal.dist(mu=-1.0, sigma=1.0),
    }
    return lotka_volterra, lynx_hare(), priors
