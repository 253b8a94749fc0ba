"""Posteriors of a :class:`~odeinfer.likelihood.FitProblem` (models with observables, noise models
and conditions): the likelihood is the problem's (its :class:`~odeinfer.likelihood.Objective`,
exact gradient from forward sensitivities) wrapped in a PyTensor Op, the priors live on the
parameters' estimation scales.

* :func:`build_problem_model` -- a ``pm.Model``: one variable per estimated parameter on its
  scale (named ``"k"`` for linear, ``"log10_k"`` / ``"log_k"`` otherwise; default prior uniform
  within the bounds on that scale, PEtab's ``parameterScaleUniform``; a PEtab problem's objective
  priors where its parameter table gives them), a deterministic
  ``"<name>"`` in natural units for the others, and ``pm.Potential("loglik", -nll)``.
* :func:`sample_problem` -- NUTS started at a likelihood fit (its optimum on the estimation scale,
  the inverse Fisher information as the initial dense mass matrix).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from odeinfer.bayes import _idata
from odeinfer.errors import InputError

__all__ = ["build_problem_model", "sample_problem", "scaled_name", "NLLOp"]


def scaled_name(name, scale):
    """The PyMC variable of a parameter on its estimation scale."""
    return name if scale == "lin" else f"{scale}_{name}"


class _Cache:
    """One objective evaluation shared by the value and the gradient Ops (same point)."""

    def __init__(self, objective):
        self.objective = objective
        self.key, self.nll, self.grad = None, math.inf, None
        self.n_fail = 0

    def at(self, u):
        key = u.tobytes()
        if key != self.key:
            ev = self.objective(u)
            if ev.ok:
                self.nll, self.grad = ev.nll, ev.grad
            else:  # outside the model's domain: zero density, counted (never a crash)
                self.n_fail += 1
                self.nll, self.grad = math.inf, np.zeros(u.size)
            self.key = key
        return self.nll, self.grad


def _ops():
    import pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class NLLGradOp(Op):
        __props__ = ()

        def __init__(self, cache):
            self.cache = cache

        def make_node(self, u):
            u = pt.as_tensor_variable(u)
            return Apply(self, [u], [pt.dvector()])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = np.array(self.cache.at(np.asarray(inputs[0], float))[1])

    class NLLOp(Op):
        """``nll(u)`` of a FitProblem (u: estimated parameters on their scales), gradient exact."""

        __props__ = ()

        def __init__(self, cache):
            self.cache = cache
            self.grad_op = NLLGradOp(cache)

        def make_node(self, u):
            u = pt.as_tensor_variable(u)
            return Apply(self, [u], [pt.dscalar()])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = np.array(self.cache.at(np.asarray(inputs[0], float))[0])

        def grad(self, inputs, output_grads):
            return [output_grads[0] * self.grad_op(inputs[0])]

    return NLLOp


def NLLOp(objective):
    """A PyTensor Op computing the objective's NLL (and, for its gradient, the exact gradient)."""
    return _ops()(_Cache(objective))


def _unwrap(problem, priors):
    """``(FitProblem, priors)``: a PetabProblem gives its FitProblem and its objective priors
    (:meth:`~odeinfer.petab.PetabProblem.bayes_priors`; those in ``priors`` win)."""
    from odeinfer.petab.tables import PetabProblem

    if isinstance(problem, PetabProblem):
        return problem.problem, {**problem.bayes_priors(), **dict(priors or {})}
    return problem, priors


def build_problem_model(problem, *, priors=None, solver=None, gradient=None):
    """A ``pm.Model`` of ``problem``'s posterior (see the module docstring).

    Parameters
    ----------
    problem : FitProblem or PetabProblem
        A PetabProblem (:func:`odeinfer.petab.load`) brings the objective priors of its parameter
        table (the other parameters keep the default).
    priors : dict, optional
        ``{parameter name: callable(name) -> RV}`` on the estimation scale (the callable gets
        the variable's name, e.g. ``lambda name: pm.Normal(name, -2, 1)`` for a log10 parameter).
        Default: uniform within the bounds on the estimation scale (finite bounds needed).
    solver : Dopri5, Rodas or Auto, optional
        Of the objective (default the ``likelihood`` role's, see :class:`~odeinfer.likelihood.Objective`).
    gradient : Forward or Adjoint, optional
        How the objective's gradient is computed (see :class:`~odeinfer.likelihood.Objective`): forward
        sensitivities (default) or ``oi.Adjoint()``, one reverse pass whatever the number of estimated parameters
        (NUTS needs no Fisher information).
    """
    import pymc as pm
    import pytensor.tensor as pt

    from odeinfer.likelihood import FitProblem, Objective

    problem, priors = _unwrap(problem, priors)
    if not isinstance(problem, FitProblem):
        raise InputError(f"problem: expected an oi.FitProblem, got {type(problem).__name__}")
    priors = dict(priors or {})
    unknown = [k for k in priors if k not in problem.estimated]
    if unknown:
        raise InputError(f"priors: {unknown} are not estimated parameters {list(problem.estimated)}")
    obj = Objective(problem, solver=solver, gradient=gradient)
    op = NLLOp(obj)
    with pm.Model() as pm_model:
        us = []
        for k, name in enumerate(problem.estimated):
            scale = obj.scales[k]
            var = scaled_name(name, scale)
            if name in priors:
                rv = priors[name](var)
                if getattr(rv, "name", None) != var:
                    raise InputError(f"priors[{name!r}]: the callable must create a variable named {var!r} (the "
                                     f"parameter on its {scale} scale), e.g. lambda name: pm.Normal(name, 0, 1)")
            else:
                lo, hi = obj.lower[k], obj.upper[k]
                if not (math.isfinite(lo) and math.isfinite(hi)):
                    raise InputError(
                        f"priors: {name!r} has no finite bounds on its {scale} scale, so it has no default (uniform) "
                        f"prior; give it bounds (oi.Param(value, lower, upper)) or priors={{{name!r}: lambda name: "
                        "pm.Normal(name, mu, sd)}")
                rv = pm.Uniform(var, lower=lo, upper=hi)
            us.append(rv)
            if scale != "lin":
                pm.Deterministic(name, (pt.exp(rv) if scale == "log" else 10.0 ** rv))
        u = pt.stack(us)
        pm.Potential("loglik", -op(u))
    pm_model.odeinfer_problem = (problem, obj, op)
    return pm_model


def _proxy_estimate(problem, obj, init):
    """``init`` (a likelihood fit of ``problem``) on the estimation scale, named after the PyMC variables."""
    from odeinfer.results import Estimate

    if not isinstance(init, Estimate) or "u" not in init.extras or init.extras.get("u") is None:
        raise InputError("init: expected an Estimate from a likelihood fit of this problem "
                         "(oi.Embedding().fit(problem)), got " + type(init).__name__)
    if tuple(init.names) != tuple(problem.estimated):
        raise InputError(f"init: it estimates {list(init.names)}, the problem {list(problem.estimated)}; fit this "
                         "problem first")
    names = [scaled_name(n, s) for n, s in zip(problem.estimated, obj.scales)]
    u = np.asarray(init.extras["u"], float)
    # a point on or next to a bound (a parameter the data push there) maps to a far-away, badly scaled
    # unconstrained value whose jitter lands on the bound (zero density): start 1% of the range inside
    width = np.where(np.isfinite(obj.upper - obj.lower), obj.upper - obj.lower, 1.0)
    u = np.clip(u, obj.lower + 0.01 * width, obj.upper - 0.01 * width)
    cov = _mass_matrix(obj, u)
    return Estimate(init.estimator, problem.model, names, u, cov, "converged")


def _mass_matrix(obj, u):
    """``(F + P)^-1``: the Fisher information at ``u`` plus the precision ``12 / width^2`` of each
    parameter's uniform range on its scale (finite bounds), so that directions the data do not
    identify get the prior's width instead of an infinite variance. None if not computable."""
    ev = obj(u)
    if not ev.ok:
        return None
    width = obj.upper - obj.lower
    prec = np.where(np.isfinite(width), 12.0 / np.where(np.isfinite(width), width, 1.0) ** 2, 0.0)
    try:
        cov = np.linalg.inv(ev.fim + np.diag(prec))
    except np.linalg.LinAlgError:
        return None
    return cov if np.all(np.isfinite(cov)) and np.all(np.linalg.eigvalsh(cov) > 0) else None


def sample_problem(problem, *, init=None, draws=1000, tune=None, chains=4, cores=None, rng=None, priors=None,
                   solver=None, gradient=None, target_accept=0.8, jitter=0.1, mass_matrix_weight=100,
                   progressbar=False):
    """NUTS on ``problem``'s posterior (see :func:`build_problem_model`).

    Parameters
    ----------
    problem : FitProblem or PetabProblem
        As :func:`build_problem_model`.
    init : Estimate, optional
        A likelihood fit of ``problem``: the chains start near its optimum and the dense mass
        matrix starts from ``(F + P)^-1`` (mapped to PyMC's unconstrained space): ``F`` the Fisher
        information there, ``P`` the precision of the uniform prior's range (so that parameters
        the data do not identify start with the prior's width).
    draws, tune, chains, cores, rng, target_accept, jitter, mass_matrix_weight, progressbar
        As :func:`odeinfer.bayes.sample` (``tune`` default 500 when seeded, else 1000).
    priors, solver, gradient
        As :func:`build_problem_model`.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (the variables on their scales and the parameters in natural units),
        ``sample_stats``; ``posterior.attrs["odeinfer_failed_evaluations"]`` counts the points
        where the objective could not be computed (zero density). With ``init``, the attributes
        ``odeinfer_fisher_rank``, ``odeinfer_n_estimated``, ``odeinfer_unidentified`` and
        ``odeinfer_unidentified_with_prior`` (comma-separated names) record what the data identify
        at the fit (its Fisher information); :func:`odeinfer.diagnostics.check` reads them.
    """
    from odeinfer.bayes.sample import _sample_pymc
    from odeinfer.bayes.seed import checked_points, seed_from_estimate

    for name, value in (("draws", draws), ("chains", chains)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InputError(f"{name}: expected a positive integer, got {value!r}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    problem, priors = _unwrap(problem, priors)
    pm_model = build_problem_model(problem, priors=priors, solver=solver, gradient=gradient)
    _, obj, op = pm_model.odeinfer_problem
    seed = None
    if init is not None:
        seed = seed_from_estimate(pm_model, _proxy_estimate(problem, obj, init))
    cores = min(chains, 2) if cores is None else int(cores)
    seeds = [int(s) for s in gen.integers(0, 2**31 - 1, size=chains + 2)]
    initvals = None if seed is None else checked_points(seed, chains, gen, jitter)
    if initvals is None:
        seed = None
    seeded = bool(seed is not None and seed.cov is not None)
    tune = (500 if seeded else 1000) if tune is None else int(tune)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*object mode.*")
        idata = _sample_pymc(pm_model, seed, seeded, draws, tune, chains, cores, seeds, initvals, target_accept,
                             mass_matrix_weight, None, progressbar, None, log_likelihood=False)
    _idata.set_attrs(idata, odeinfer_sampler="pymc", odeinfer_seeded_mass_matrix=int(seeded), odeinfer_tune=int(tune),
                     odeinfer_wall_time=time.perf_counter() - start, odeinfer_failed_evaluations=int(op.cache.n_fail))
    if init is not None:
        _idata.set_attrs(idata, **_identifiability(obj, init, problem, priors))
    return idata


def _identifiability(obj, init, problem, priors):
    """What the data identify at the fit the chains started from, for :func:`odeinfer.diagnostics.check`:
    the rank of the Fisher information there and the parameters of its null space (the fit's rule:
    NaN standard errors), split into those with a prior of their own and those without (uniform in
    their bounds, so the posterior along them is the bounds')."""
    from odeinfer.estimators._likelihood_fit import _inverse

    ev = obj(np.asarray(init.extras["u"], float))
    if not ev.ok:
        return {}
    cov, rank = _inverse(ev.fim)
    names = [n for n, v in zip(problem.estimated, np.diag(cov)) if not np.isfinite(v)]
    own = set(priors or ())
    return {"odeinfer_fisher_rank": int(rank), "odeinfer_n_estimated": len(problem.estimated),
            "odeinfer_unidentified": ",".join(n for n in names if n not in own),
            "odeinfer_unidentified_with_prior": ",".join(n for n in names if n in own)}
