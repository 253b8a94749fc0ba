"""Priors centred on a frequentist estimate: :func:`priors_from_estimate`."""

from __future__ import annotations

import math

from odeinfer.errors import InputError

__all__ = ["priors_from_estimate"]


def priors_from_estimate(est, inflate=10.0, positive="auto", names=None):
    """One PyMC prior per estimated quantity, centred on ``est`` and ``inflate`` times wider.

    Parameters
    ----------
    est : Estimate
    inflate : float, default 10.0
        Prior scale = ``inflate`` x the estimate's standard error, so that the
        prior is weak next to the likelihood (the data are used twice
        otherwise). Where the standard error is missing, zero or not finite, the
        scale is ``inflate x max(|value|, 1) / 10``.
    positive : "auto", bool or collection of str, default "auto"
        Which quantities get a positive (log-normal) prior. ``"auto"``: every
        quantity whose estimate is > 0; ``True``: all (estimates must be > 0);
        ``False``: none; or the names. A log-normal prior has median = the
        estimate and log-scale sd = scale / value (delta method); the others are
        ``Normal(value, scale)``.
    names : collection of str, optional
        Only these names of ``est.names`` (default all).

    Returns
    -------
    dict of str to TensorVariable
        Unnamed PyMC distributions (``pm.Normal.dist(...)`` /
        ``pm.LogNormal.dist(...)``) keyed by ``est.names`` (``"alpha"``,
        ``"x0[prey]"``, ...); pass them to :func:`odeinfer.bayes.build_model` as
        ``priors=`` (they are registered under those names).

    Raises
    ------
    InputError
        ``inflate`` not a positive number; unknown names; ``positive=True``
        with a non-positive estimate; an estimate value that is not finite.
    """
    import pymc as pm

    from odeinfer.results import Estimate

    if not isinstance(est, Estimate):
        raise InputError(f"est: expected an odeinfer Estimate, got {type(est).__name__}")
    try:
        inflate = float(inflate)
    except (TypeError, ValueError):
        raise InputError(f"inflate: expected a positive number, got {inflate!r}") from None
    if not (inflate > 0 and math.isfinite(inflate)):
        raise InputError(f"inflate: expected a positive finite number, got {inflate!r}")
    all_names = list(est.names)
    if names is None:
        names = all_names
    else:
        names = list(names)
        unknown = [n for n in names if n not in all_names]
        if unknown:
            raise InputError(f"names: {unknown} are not quantities of the estimate (it has {all_names})")
    se = dict(zip(all_names, est.bse.to_numpy()))
    values = dict(zip(all_names, est.values))
    if positive == "auto":
        pos = {n for n in names if values[n] > 0}
    elif positive is True:
        bad = [n for n in names if not values[n] > 0]
        if bad:
            raise InputError(f"positive=True: the estimates of {bad} are not > 0, so a log-normal prior "
                             "cannot be centred on them; pass positive='auto' or the names that are positive")
        pos = set(names)
    elif positive is False:
        pos = set()
    else:
        pos = set(positive)
        unknown = sorted(pos - set(names))
        if unknown:
            raise InputError(f"positive: {unknown} are not among the names {names}")
        bad = [n for n in pos if not values[n] > 0]
        if bad:
            raise InputError(f"positive: the estimates of {bad} are not > 0; a log-normal prior needs a positive centre")
    out = {}
    for n in names:
        v = float(values[n])
        if not math.isfinite(v):
            raise InputError(f"est: the estimate of {n!r} is {v}; cannot centre a prior on it (give its prior explicitly)")
        s = float(se[n])
        scale = inflate * s if (math.isfinite(s) and s > 0) else inflate * max(abs(v), 1.0) / 10.0
        if n in pos:
            out[n] = pm.LogNormal.dist(mu=math.log(v), sigma=scale / v)
        else:
            out[n] = pm.Normal.dist(mu=v, sigma=scale)
    return out

