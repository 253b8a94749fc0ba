"""Mapping between :class:`~odeinfer.Estimate` names and posterior variables.

Posterior naming convention of :mod:`odeinfer.bayes` (shared by diagnostics, plots,
widgets and reports):

- a model parameter is a scalar posterior variable named as in ``model.params``
  (Estimate name ``"alpha"``);
- initial states are one variable ``x0`` with dim ``state`` (Estimate name
  ``"x0[prey]"``), plus dim ``experiment`` with several experiments
  (``"x0[prey]@exp1"``);
- noise is ``sigma`` with dim ``state`` (``"sigma[prey]"``).

A variable literally named like the Estimate name (e.g. a scalar ``"x0[prey]"``) is
accepted as well. Variables with a ``time`` dim (trajectories) or more than two
non-sample dims are not parameters and are not listed.

:func:`odeinfer.bayes.build_model` samples unknown initial states as such scalars and keeps
the vector ``x0`` as a deterministic made of them (and of the known states); that vector
is then a copy, not a parameter, and :func:`parameter_vars` leaves it out, so that every
label (``"x0[prey]"``) is listed once.
"""

from __future__ import annotations

import re

import numpy as np

from odeinfer.errors import InputError

__all__ = ["posterior_of", "parameter_vars", "parameter_names", "draws", "draws_matrix", "flat_labels", "parse_name"]

_SAMPLE_DIMS = ("chain", "draw")
_NAME = re.compile(r"^(?P<var>[^\[\]@]+)\[(?P<coord>[^\[\]]+)\](?:@(?P<exp>.+))?$")


def posterior_of(idata, argument="idata"):
    """The ``posterior`` group of ``idata`` (an ``arviz.InferenceData``), or a clear error."""
    post = getattr(idata, "posterior", None) if idata is not None else None
    if post is None or not hasattr(post, "data_vars"):
        raise InputError(
            f"{argument}: expected an arviz.InferenceData with a 'posterior' group, got {type(idata).__name__}; "
            "pass the result of oi.bayes.sample(...) (or arviz.from_dict(posterior=...))"
        )
    return post


def _extra_dims(da):
    return [d for d in da.dims if d not in _SAMPLE_DIMS]


def _is_parameter_like(da):
    """Scalar or per-state/per-experiment variables; not trajectories (``time``) and not the
    stacked ``param`` vector that :func:`odeinfer.bayes.build_model` keeps as a deterministic."""
    extra = _extra_dims(da)
    return "time" not in extra and "param" not in extra and len(extra) <= 2 and (len(extra) < 2 or "experiment" in extra)


def parameter_vars(post):
    """Names of the parameter-like variables of a posterior group, without a vector that only
    repeats scalar variables: a variable with dims none of whose element labels (``x0[prey]``)
    is also the name of a scalar variable of the posterior (as build_model's deterministic
    ``x0`` next to the sampled ``x0[prey]``, ``x0[pred]``)."""
    candidates = [v for v in post.data_vars if _is_parameter_like(post[v])]
    scalars = {str(v) for v in candidates if not _extra_dims(post[v])}
    return [v for v in candidates
            if not _extra_dims(post[v]) or not any(label in scalars for label, _ in flat_labels(v, post[v]))]


def flat_labels(var, da):
    """Estimate-style labels of the non-sample elements of ``da``, in C order of its
    non-sample dims, paired with the index tuples: list of (label, {dim: position})."""
    extra = _extra_dims(da)
    if not extra:
        return [(str(var), {})]
    if len(extra) == 1:
        d = extra[0]
        vals = [str(v) for v in da[d].values]
        if d == "experiment":
            return [(f"{var}@{v}", {d: i}) for i, v in enumerate(vals)]
        return [(f"{var}[{v}]", {d: i}) for i, v in enumerate(vals)]
    exp_dim = "experiment"
    other = extra[0] if extra[1] == exp_dim else extra[1]
    out = []
    for i, v in enumerate(da[other].values):
        for j, e in enumerate(da[exp_dim].values):
            out.append((f"{var}[{v}]@{e}", {other: i, exp_dim: j}))
    return out


def parameter_names(idata, var_names=None):
    """Estimate-style names of every parameter-like element of the posterior.

    Parameters
    ----------
    idata : arviz.InferenceData
    var_names : sequence of str, optional
        Restrict to these posterior variables (default: every parameter-like one).

    Returns
    -------
    list of str
    """
    post = posterior_of(idata)
    names = []
    for var in (parameter_vars(post) if var_names is None else var_names):
        if var not in post.data_vars:
            raise InputError(f"var_names: {var!r} is not a posterior variable; available: {sorted(post.data_vars)}")
        names.extend(label for label, _ in flat_labels(var, post[var]))
    return names


def parse_name(name):
    """Split ``"x0[prey]@exp1"`` into ``("x0", "prey", "exp1")``; a plain name gives ``(name, None, None)``."""
    m = _NAME.match(name)
    if m is None:
        return name, None, None
    return m.group("var"), m.group("coord"), m.group("exp")


def _flatten(da):
    arr = np.asarray(da.transpose("chain", "draw", ...).values, dtype=float)
    return arr.reshape(-1)


def draws(idata, name):
    """Draws of one Estimate-named quantity, flattened over chains: ndarray (n_chains * n_draws,).

    Raises
    ------
    InputError
        The name matches no posterior variable element; the message lists the
        available names.
    """
    post = posterior_of(idata)
    name = str(name)
    if name in post.data_vars and not _extra_dims(post[name]):
        return _flatten(post[name])
    var, coord, exp = parse_name(name)
    if var in post.data_vars:
        da = post[var]
        extra = _extra_dims(da)
        sel = {}
        ok = True
        exp_dim = "experiment" if "experiment" in extra else None
        coord_dims = [d for d in extra if d != exp_dim]
        if coord is not None and len(coord_dims) == 1:
            d = coord_dims[0]
            labels = [str(v) for v in da[d].values]
            ok &= coord in labels
            if ok:
                sel[d] = labels.index(coord)
        elif coord is not None or coord_dims:
            ok = False
        if exp is not None and exp_dim is not None:
            labels = [str(v) for v in da[exp_dim].values]
            ok &= exp in labels
            if ok:
                sel[exp_dim] = labels.index(exp)
        elif exp is not None or exp_dim is not None:
            ok = False
        if ok:
            return _flatten(da.isel(sel))
    available = parameter_names(idata)
    raise InputError(
        f"name {name!r} matches no posterior variable; available: {available}. Parameters are scalar "
        "variables named as in model.params, initial states 'x0[state]' (or 'x0[state]@experiment'), "
        "noise 'sigma[state]'"
    )


def draws_matrix(idata, names):
    """Draws of several quantities side by side: ndarray (n_chains * n_draws, len(names))."""
    return np.column_stack([draws(idata, n) for n in names]) if names else np.empty((0, 0))


def has_name(idata, name):
    """Whether :func:`draws` resolves ``name``."""
    try:
        draws(idata, name)
    except InputError:
        return False
    return True
