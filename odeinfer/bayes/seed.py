"""Seeding NUTS with a frequentist estimate: initial points and a dense mass matrix.

An estimate gives a point ``x`` and an asymptotic covariance ``C`` in the
model's natural (constrained) space. NUTS moves in PyMC's unconstrained space
``u = f(x)`` (``f`` = the variables' transforms: log, interval, ...). To first
order the posterior covariance there is ``J C J^T`` with ``J = df/dx`` at the
estimate (the delta method); its inverse is the ideal mass matrix near a
Gaussian posterior. The transforms are elementwise, so ``J`` is diagonal and
each entry is the exact derivative of the transform (PyTensor's ``grad`` of the
transform's graph). Quantities the estimate lacks (e.g. the noise scales) get
``Var(log sigma) = 1 / (2 n)`` when the estimate has a sigma for that state
(the asymptotic variance of a log standard deviation from ``n`` residuals), and
unit variance otherwise.

**The prior caps the seed.** Where the data barely constrain a parameter (a weakly identified one,
or an estimate next to a bound, where the transform's derivative is large) ``J C J^T`` can be far
wider than the prior itself: e.g. an estimate 1% inside the bounds of a uniform prior gets an
unconstrained sd near 29 where the whole prior has ``pi / sqrt(3) = 1.81`` (the logit of a uniform
variable is standard logistic), and NUTS then tunes with tiny steps until the adaptation replaces
the matrix. So each coordinate's seed variance is capped at its prior's variance on the
unconstrained scale: ``C_u <- D C_u D`` with ``D = diag(min(1, sqrt(v_prior / C_u,ii)))``, which keeps
the correlations and positive definiteness. ``v_prior`` is computed for the prior actually in the
model (``Seed.prior_var``): in closed form for the common priors with constant parameters with
their default transforms (``pi^2 / 3`` for a uniform prior, ``sigma^2`` for a normal or log-normal
one, ``pi^2 / 8`` for a half-normal one, ...: :data:`_CLOSED_FORM`), else the sample variance of 4000
draws of the variable (``pymc.draw``, fixed seed 0, so the same every time; about 4% relative error
for a uniform prior) mapped through its transform. Coordinates whose prior variance is not finite
get no cap.

A covariance that is missing, not finite or not positive definite gives a
:class:`SeedingWarning` and ``Seed.cov = None``: the sampler then falls back to
PyMC's diagonal adaptation started at the estimate.

Some estimates must not start the sampler at all
(:func:`odeinfer.estimators._trajectory_check.unusable_reason`): values that are
not finite, a covariance with entries that are not finite, or a parameter that ran away along a
flat direction (``extras["runaway"]``, see :mod:`odeinfer.estimators._trajectory_check`). A fit
whose trajectory misses the data (its BiasWarning) still seeds: its optimum is the mode of the same
likelihood, misspecified or not. And the jittered start points must
lie inside the priors' support (:func:`checked_points`): a covariance as wide as a runaway fit's
(sd of log K ~ 1e8) sends them to K = 0 or infinity, and PyMC stops with "Bad initial energy". The
cap would hide such a covariance, so that check uses the estimate's own covariance
(``Seed.cov_estimate``, before the cap): the seed is refused when ``mean +- 3 jitter sd`` leaves the
support in some coordinate.
In both cases :func:`odeinfer.bayes.sample` warns (:class:`SeedingWarning`, with the reason) and
starts from the priors (PyMC's default start and diagonal adaptation).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import polygamma

from odeinfer.errors import OdeinferWarning

__all__ = ["SeedingWarning", "Seed", "seed_from_estimate", "checked_points", "cap_covariance"]


class SeedingWarning(OdeinferWarning):
    """The estimate could not seed the sampler fully (covariance not usable, values outside a prior's support)."""


@dataclass(frozen=True, eq=False)
class Seed:
    """Unconstrained initial point and covariance for NUTS, in the order of ``value_names``.

    Attributes
    ----------
    value_names : tuple of str
        PyMC value variables (``"alpha_log__"``, ...), in ``pm_model.value_vars`` order.
    rv_names : tuple of str
        The matching random variables (``"alpha"``).
    sizes : tuple of int
        Number of entries of each variable.
    mean : ndarray (n,)
        The estimate mapped to the unconstrained space (initial point of other variables where the estimate has none).
    cov : ndarray (n, n) or None
        ``J C J^T`` (plus defaults), each coordinate's variance capped at its prior's (see the
        module docstring); None when not usable (see the warnings).
    seeded : tuple of str
        Random variables the estimate gave a value for.
    prior_var : ndarray (n,) or None
        Each coordinate's prior variance on the unconstrained scale (NaN where not finite or not
        computable): the cap.
    cov_estimate : ndarray (n, n) or None
        ``cov`` before the cap (what the estimate itself says).
    capped : tuple of str
        Random variables whose seed variance the prior capped.
    """

    value_names: tuple
    rv_names: tuple
    sizes: tuple
    mean: np.ndarray
    cov: np.ndarray | None
    seeded: tuple
    shapes: tuple = ()
    _backward: object = None
    _forward: object = None
    prior_var: np.ndarray | None = None
    cov_estimate: np.ndarray | None = None
    capped: tuple = ()

    def points(self, n_points, rng, jitter=0.1):
        """``n_points`` initial values in the constrained space, keyed by random-variable name.

        Each is the seed mean plus ``jitter`` x a draw from ``N(0, cov)``
        (``N(0, I)`` without a covariance) in the unconstrained space, mapped back.
        """
        n = self.mean.size
        if self.cov is not None:
            chol = np.linalg.cholesky(self.cov)
        else:
            chol = np.eye(n)
        out = []
        for _ in range(n_points):
            u = self.mean + jitter * chol @ rng.standard_normal(n)
            parts = np.split(u, np.cumsum(self.sizes)[:-1])
            xs = self._backward(*[p.reshape(s) for p, s in zip(parts, self.shapes)])
            out.append({name: np.asarray(x).reshape(np.shape(x)) for name, x in zip(self.rv_names, xs)})
        return out


def seed_from_estimate(pm_model, est, nobs_per_state=None):
    """The :class:`Seed` of ``pm_model`` at estimate ``est``.

    Parameters
    ----------
    pm_model : pymc.Model
    est : Estimate
        Its names are matched to the model's random variables by name
        (``"alpha"``, ``"x0[prey]"``); ``est.sigma[state]`` seeds ``"sigma[state]"``.
    nobs_per_state : mapping of str to int, optional
        Observations per observed state (for the default variance of ``log sigma``).

    Returns
    -------
    Seed

    Warns
    -----
    SeedingWarning
        Covariance missing, not finite or not positive definite (``Seed.cov`` is
        then None); an estimated value outside its prior's support (the model's
        initial point is used for it).
    """
    import pytensor
    import pytensor.tensor as pt

    value_vars = list(pm_model.value_vars)
    rvs = [pm_model.values_to_rvs[v] for v in value_vars]
    ip = pm_model.initial_point()
    est_values = dict(zip(est.names, est.values))
    sigma_est = {f"sigma[{k}]": float(v) for k, v in dict(est.sigma).items()}
    idx = {n: i for i, n in enumerate(est.names)}
    cov_x = None if est.cov is None else np.asarray(est.cov, dtype=float)

    xs, us, jacs, backs, us_in = [], [], [], [], []
    for rv, v in zip(rvs, value_vars):
        x = pt.tensor(dtype="float64", shape=v.type.shape, name=f"{rv.name}_x")
        u_in = v.type(name=f"{v.name}_u")
        tr = pm_model.rvs_to_transforms.get(rv)
        if tr is None:
            u, back = x, u_in
        else:
            u = tr.forward(x, *rv.owner.inputs)
            back = tr.backward(u_in, *rv.owner.inputs)
        xs.append(x)
        us_in.append(u_in)
        us.append(u)
        jacs.append(pt.grad(pt.sum(u), x))  # elementwise transforms: the diagonal of du/dx
        backs.append(back)
    outs = pm_model.replace_rvs_by_values(us + jacs + backs)
    n_v = len(value_vars)
    fwd = pytensor.function(xs + value_vars, outs[:2 * n_v], on_unused_input="ignore", mode="FAST_COMPILE")
    bwd_fn = pytensor.function(us_in + value_vars, outs[2 * n_v:], on_unused_input="ignore", mode="FAST_COMPILE")
    ip_values = [ip[v.name] for v in value_vars]

    def backward(*u_parts):
        return bwd_fn(*u_parts, *ip_values)

    def forward(*x_parts):
        return fwd(*x_parts, *ip_values)

    x_ip = bwd_fn(*ip_values, *ip_values)
    x_vals, seeded, problems = [], [], []
    for rv, v in zip(rvs, value_vars):
        name = rv.name
        if name in est_values and np.size(ip[v.name]) == 1:
            x_vals.append(np.asarray(est_values[name], dtype=float).reshape(np.shape(ip[v.name])))
            seeded.append(name)
        elif name in sigma_est and np.isfinite(sigma_est[name]) and sigma_est[name] > 0:
            x_vals.append(np.asarray(sigma_est[name]).reshape(np.shape(ip[v.name])))
            seeded.append(name)
        else:
            x_vals.append(x_ip[value_vars.index(v)])
    res = fwd(*x_vals, *ip_values)
    u_vals, j_vals = res[:n_v], res[n_v:]
    # an estimate on the edge of its prior's support (a fit clipped to its bounds, which are the
    # prior's: log(0) in the transform) seeds from a point a hair inside, toward the prior's
    # initial point, instead of being dropped
    edge = [i for i, rv in enumerate(rvs) if rv.name in seeded
            and not (np.all(np.isfinite(np.asarray(u_vals[i], dtype=float)))
                     and np.all(np.isfinite(np.asarray(j_vals[i], dtype=float))))]
    if edge:
        for i in edge:
            x, inside = np.asarray(x_vals[i], dtype=float), np.asarray(x_ip[i], dtype=float)
            x_vals[i] = x + 1e-9 * (inside - x)
        res = fwd(*x_vals, *ip_values)
        u_vals, j_vals = res[:n_v], res[n_v:]
    sizes = [int(np.size(ip[v.name])) for v in value_vars]
    mean, var_default, jac = [], [], []
    for rv, v, u, j in zip(rvs, value_vars, u_vals, j_vals):
        u = np.atleast_1d(np.asarray(u, dtype=float)).ravel()
        j = np.atleast_1d(np.asarray(j, dtype=float)).ravel()
        if rv.name in seeded and not (np.all(np.isfinite(u)) and np.all(np.isfinite(j))):
            problems.append(f"{rv.name}={est_values.get(rv.name, sigma_est.get(rv.name))!r} is outside the support "
                            "of its prior")
            seeded.remove(rv.name)
            u = np.atleast_1d(np.asarray(ip[v.name], dtype=float)).ravel()
            j = np.full(u.size, np.nan)
        mean.append(u)
        jac.append(j)
        if rv.name in sigma_est and rv.name not in est_values and nobs_per_state:
            state = rv.name[len("sigma["):-1]
            var_default.append(np.full(u.size, 1.0 / (2.0 * max(int(nobs_per_state.get(state, 1)), 1))))
        else:
            var_default.append(np.ones(u.size))
    if problems:
        warnings.warn("seeding: " + "; ".join(problems) + "; those variables start at the model's initial point",
                      SeedingWarning, stacklevel=3)
    mean = np.concatenate(mean)
    jac = np.concatenate(jac)
    var_default = np.concatenate(var_default)
    names_flat = [rv.name for rv, s in zip(rvs, sizes) for _ in range(s)]
    in_cov = [i for i, n in enumerate(names_flat) if n in seeded and n in idx]
    cov = np.diag(var_default)
    reason = None
    if cov_x is None:
        reason = "the estimate has no covariance"
    else:
        sub = cov_x[np.ix_([idx[names_flat[i]] for i in in_cov], [idx[names_flat[i]] for i in in_cov])]
        cu = jac[in_cov][:, None] * sub * jac[in_cov][None, :]
        cov[np.ix_(in_cov, in_cov)] = cu
        if not np.all(np.isfinite(cov)):
            reason = "its covariance has entries that are not finite"
        else:
            cov = 0.5 * (cov + cov.T)
            try:
                np.linalg.cholesky(cov)
            except np.linalg.LinAlgError:
                w = np.linalg.eigvalsh(cov)
                reason = f"its covariance is not positive definite (smallest eigenvalue {w[0]:.3g})"
    prior_var, cov_estimate, capped = _prior_variances(pm_model, rvs, value_vars, ip_values, sizes), None, ()
    if reason is not None:
        warnings.warn(f"seeding the mass matrix: {reason}; falling back to PyMC's diagonal mass-matrix "
                      "adaptation (the chains still start at the estimate)", SeedingWarning, stacklevel=3)
        cov = None
    else:
        cov_estimate = cov
        cov, hit = cap_covariance(cov, prior_var)
        capped = tuple(dict.fromkeys(names_flat[i] for i in np.flatnonzero(hit)))
    return Seed(tuple(v.name for v in value_vars), tuple(rv.name for rv in rvs), tuple(sizes), mean, cov,
                tuple(seeded), tuple(np.shape(ip[v.name]) for v in value_vars), backward, forward, prior_var,
                cov_estimate, capped)


def cap_covariance(cov, var_max):
    """``(D cov D, capped)`` with ``D = diag(min(1, sqrt(var_max / diag(cov))))``: each variance at most
    ``var_max`` (no cap where ``var_max`` is NaN or infinite), the correlations unchanged and a
    positive definite ``cov`` kept positive definite (a congruence by a positive diagonal);
    ``capped`` marks the coordinates scaled down."""
    d = np.diag(cov)
    limit = np.where(np.isfinite(var_max) & (var_max > 0), var_max, np.inf)
    capped = d > limit
    scale = np.where(capped, np.sqrt(limit / np.where(capped, d, 1.0)), 1.0)
    out = scale[:, None] * cov * scale[None, :]
    return 0.5 * (out + out.T), capped


#: Prior draws behind the prior variance of a coordinate with no closed form, and their seed.
PRIOR_DRAWS, PRIOR_DRAW_SEED = 4000, 0

_PI2 = math.pi ** 2

#: (PyMC random variable, default transform) -> (indices of the distribution parameters the variance
#: needs, variance of the unconstrained coordinate from their values). References: Var(logit U) =
#: pi^2 / 3 (standard logistic); Var(log |Z|) = pi^2 / 8; Var(log E) = pi^2 / 6 (E exponential);
#: Var(log |C|) = pi^2 / 4 (C Cauchy); Var(log G) = psi'(a) (G gamma of shape a); Var(logit B) =
#: psi'(a) + psi'(b) (B beta); Var(log X) = sigma^2 (X log-normal). A half-normal prior with a nonzero
#: location has none of these forms (None: draws).
_CLOSED_FORM = {
    ("NormalRV", None): ((1,), lambda sigma: sigma ** 2),
    ("LogNormalRV", "LogTransform"): ((1,), lambda sigma: sigma ** 2),
    ("UniformRV", "Interval"): ((), lambda: _PI2 / 3),
    ("HalfNormalRV", "LogTransform"): ((0,), lambda loc: _PI2 / 8 if np.all(loc == 0) else None),
    ("ExponentialRV", "LogTransform"): ((), lambda: _PI2 / 6),
    ("HalfCauchyRV", "LogTransform"): ((), lambda: _PI2 / 4),
    ("GammaRV", "LogTransform"): ((0,), lambda shape: polygamma(1, shape)),
    ("BetaRV", "LogOddsTransform"): ((0, 1), lambda a, b: polygamma(1, a) + polygamma(1, b)),
}


def _constant_value(q):
    """The value of a distribution parameter computed from constants alone, else None."""
    from pytensor.graph.basic import Constant
    from pytensor.tensor.basic import NotScalarConstantError, get_underlying_scalar_constant_value

    if isinstance(q, Constant):
        return np.asarray(q.data, dtype=float)
    try:
        return np.asarray(get_underlying_scalar_constant_value(q), dtype=float)
    except NotScalarConstantError:
        return None


def _closed_form_variance(pm_model, rv, size):
    """The variance of ``rv``'s unconstrained coordinates (``size`` of them) under its prior when
    :data:`_CLOSED_FORM` has it and the prior's parameters are constants; else None."""
    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import ancestors

    tr = pm_model.rvs_to_transforms.get(rv)
    form = _CLOSED_FORM.get((type(rv.owner.op).__name__, None if tr is None else type(tr).__name__))
    if form is None:
        return None
    needed, fn = form
    params = rv.owner.op.dist_params(rv.owner)
    if not all(isinstance(a, Constant) for a in ancestors(params) if a.owner is None):
        return None  # a hierarchical prior: draws at the initial point
    values = [_constant_value(params[i]) for i in needed]
    if any(v is None for v in values):
        return None
    var = fn(*values)
    if var is None or np.size(var) not in (1, size):
        return None
    return np.broadcast_to(np.asarray(var, float).ravel(), (size,)).copy()


def _prior_variances(pm_model, rvs, value_vars, ip_values, sizes):
    """Each unconstrained coordinate's variance under its prior: the closed form of
    :data:`_CLOSED_FORM` for the common priors with constant parameters, else the sample variance
    of :data:`PRIOR_DRAWS` draws of the variable (``pymc.draw``, seed :data:`PRIOR_DRAW_SEED`) mapped
    through its transform (a prior whose parameters depend on other variables: its transform at the
    model's initial point). NaN where not finite or not computable (no cap there)."""
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    out = np.full(int(offsets[-1]), np.nan)
    drawn = []
    for i, (rv, size) in enumerate(zip(rvs, sizes)):
        var = _closed_form_variance(pm_model, rv, size)
        if var is None:
            drawn.append(i)
        else:
            out[offsets[i]:offsets[i + 1]] = var
    if drawn:
        for i, var in zip(drawn, _drawn_variances(pm_model, [rvs[i] for i in drawn],
                                                  [value_vars[i] for i in drawn], value_vars, ip_values,
                                                  [sizes[i] for i in drawn])):
            out[offsets[i]:offsets[i + 1]] = var
    out[~np.isfinite(out) | (out <= 0)] = np.nan
    return out


def _drawn_variances(pm_model, rvs, value_vars, all_value_vars, ip_values, sizes):
    """Per variable of ``rvs``: the sample variances of its unconstrained coordinates over
    :data:`PRIOR_DRAWS` prior draws (NaN where not computable)."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    n = PRIOR_DRAWS
    nan = [np.full(size, np.nan) for size in sizes]
    shapes = {v.name: np.shape(ip) for v, ip in zip(all_value_vars, ip_values)}
    try:
        xs, us = [], []
        for rv, v in zip(rvs, value_vars):
            x = pt.tensor(dtype="float64", shape=(None, *v.type.shape), name=f"{rv.name}_draws")
            tr = pm_model.rvs_to_transforms.get(rv)
            xs.append(x)
            us.append(x if tr is None else tr.forward(x, *rv.owner.inputs))
        fn = pytensor.function(xs + list(all_value_vars), pm_model.replace_rvs_by_values(us),
                               on_unused_input="ignore", mode="FAST_COMPILE")
        draws = _draw(pm, list(rvs), n)
        us = fn(*[np.asarray(d, dtype=float).reshape((n, *shapes[v.name])) for d, v in zip(draws, value_vars)],
                *ip_values)
    except Exception:  # an exotic prior: no cap (the estimate's covariance as it is)
        return nan
    out = []
    for u, size in zip(us, sizes):
        u = np.asarray(u, dtype=float).reshape(n, size)
        out.append(np.array([np.var(c[np.isfinite(c)]) if np.isfinite(c).sum() > n // 2 else np.nan
                             for c in u.T]))
    return out


def _draw(pm, rvs, n):
    """``n`` joint prior draws of ``rvs`` (seed :data:`PRIOR_DRAW_SEED`), one array per variable. When no
    variable's parameters depend on another random variable, in one call of a batched copy of each
    (``change_dist_size``: PyMC's rejection sampler of a truncated prior draws the whole batch at once
    instead of looping in Python per draw); else ``pm.draw(..., draws=n)``, which draws the parents anew
    each time (a batched child would share one draw of its parent)."""
    from pymc.distributions.shape_utils import change_dist_size
    from pymc.pytensorf import rvs_in_graph

    if not rvs_in_graph([i for rv in rvs for i in rv.owner.inputs]):
        try:
            batched = [change_dist_size(rv, (n,), expand=True) for rv in rvs]
        except Exception:  # a distribution PyMC cannot resize: the per-draw loop
            batched = None
        if batched is not None:
            draws = pm.draw(batched, random_seed=PRIOR_DRAW_SEED)
            draws = draws if isinstance(draws, list) else [draws]
            if all(np.shape(d)[:1] == (n,) for d in draws):
                return draws
    return pm.draw(rvs, draws=n, random_seed=PRIOR_DRAW_SEED)


def checked_points(seed, n_points, rng, jitter):
    """``seed.points(n_points, rng, jitter)``, or None with a :class:`SeedingWarning` when a point leaves
    the priors' support (its unconstrained value, mapped back and forth, is not finite)."""
    own = seed.cov_estimate if seed.cov_estimate is not None else seed.cov
    sd = np.sqrt(np.diag(own)) if own is not None else np.ones(seed.mean.size)
    # the estimate's own width (before the prior's cap): mean +- 3 jitter sd must stay inside the support
    probes = [seed.mean + 3.0 * jitter * sd, seed.mean - 3.0 * jitter * sd]
    pts = seed.points(n_points, rng, jitter)
    for what, pt in [("a start point jittered with the estimate's covariance (mean +- 3 jitter sd)", p)
                     for p in _constrained(seed, probes)] + [("a jittered start point", p) for p in pts]:
        back = seed._forward(*[np.asarray(pt[n], dtype=float) for n in seed.rv_names])
        bad = [n for n, u in zip(seed.rv_names, back) if not np.all(np.isfinite(np.asarray(u, dtype=float)))]
        if bad:
            warnings.warn(f"seeding: {what} leaves the priors' support for {bad} (the estimate's "
                          f"covariance is too wide: largest unconstrained standard deviation {np.max(sd):.3g}); not "
                          "seeding NUTS from the estimate: the chains start from the priors (PyMC's default start and "
                          "diagonal adaptation)", SeedingWarning, stacklevel=3)
            return None
    return pts


def _constrained(seed, us):
    """The unconstrained vectors ``us`` mapped back to the constrained space, keyed by random variable."""
    out = []
    for u in us:
        with np.errstate(all="ignore"):
            parts = np.split(np.asarray(u, dtype=float), np.cumsum(seed.sizes)[:-1])
            xs = seed._backward(*[p.reshape(s) for p, s in zip(parts, seed.shapes)])
        out.append({name: np.asarray(x) for name, x in zip(seed.rv_names, xs)})
    return out
