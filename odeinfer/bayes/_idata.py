"""The one adapter between odeinfer and ArviZ / InferenceData.

odeinfer reads posterior draws, sampler statistics and ArviZ's statistics only through these
functions, so that a change of ArviZ's data structure (0.x ``InferenceData``; 1.x an xarray
``DataTree``) or of where its functions live is met here.

Importing this module also silences ArviZ 0.23's once-a-day ``FutureWarning`` banner about its
refactor (only that message, only from ``arviz``; every other warning is untouched). It is
imported by :mod:`odeinfer.bayes` before PyMC (which imports ArviZ).
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["ARVIZ_BANNER", "quiet_arviz", "arviz", "groups", "group", "posterior", "sample_stats", "sample_stat",
           "draws_array", "rhat", "ess", "bfmi", "hdi", "summary", "attrs", "set_attrs"]

#: Start of the banner ArviZ 0.23 prints at import (at most once a day) about its refactor.
ARVIZ_BANNER = r"\s*ArviZ is undergoing a major refactor"


def quiet_arviz() -> None:
    """Ignore ArviZ's refactor banner (a FutureWarning raised in module ``arviz``), nothing else.

    Idempotent: :func:`warnings.filterwarnings` drops an identical filter before inserting it.
    """
    warnings.filterwarnings("ignore", message=ARVIZ_BANNER, category=FutureWarning, module=r"arviz(\..*)?$")


quiet_arviz()


def arviz():
    """The ``arviz`` module (imported on first use, with the banner silenced)."""
    quiet_arviz()
    import arviz as az

    return az


def groups(idata) -> list:
    """Names of the groups of ``idata`` (``["posterior", "sample_stats", ...]``)."""
    g = getattr(idata, "groups", None)
    if g is None:
        return []
    if callable(g):  # ArviZ 0.x InferenceData.groups()
        return list(g())
    return [str(x).strip("/") for x in g if str(x).strip("/")]  # xarray DataTree.groups: ("/", "/posterior", ...)


def group(idata, name):
    """The group ``name`` of ``idata`` as an ``xarray.Dataset``, or None."""
    if name not in groups(idata):
        return None
    node = getattr(idata, name)
    return node.to_dataset() if type(node).__name__ == "DataTree" else node  # ArviZ 1.x: a DataTree node


def posterior(idata):
    """The ``posterior`` group (``xarray.Dataset`` with dims ``chain, draw, ...``), or None."""
    return group(idata, "posterior")


def sample_stats(idata):
    """The ``sample_stats`` group, or None."""
    return group(idata, "sample_stats")


def sample_stat(idata, names):
    """The first of ``names`` found in ``sample_stats`` as an array ``(chain, draw)``, or None."""
    ss = sample_stats(idata)
    for n in (names,) if isinstance(names, str) else names:
        if ss is not None and n in ss.data_vars:
            return np.asarray(ss[n])
    return None


def draws_array(idata, var) -> np.ndarray:
    """The posterior draws of variable ``var``, chains stacked: ``(n_chains * n_draws, ...)``."""
    a = np.asarray(posterior(idata)[var], dtype=float)
    return a.reshape((-1,) + a.shape[2:])


def set_attrs(idata, **values) -> None:
    """Record ``values`` in the attributes of the ``posterior`` group (in place)."""
    getattr(idata, "posterior").attrs.update(values)


def attrs(idata) -> dict:
    """The attributes of the ``posterior`` group (``sampling_time``, ``odeinfer_*``); {} without one."""
    post = posterior(idata)
    return dict(post.attrs) if post is not None else {}


def rhat(data):
    """ArviZ's rank-normalised split R-hat of a Dataset (or InferenceData)."""
    return arviz().rhat(data)


def ess(data, method="bulk"):
    """ArviZ's effective sample size (``method="bulk"`` or ``"tail"``)."""
    return arviz().ess(data, method=method)


def bfmi(idata) -> np.ndarray:
    """ArviZ's energy Bayesian fraction of missing information, per chain."""
    return np.atleast_1d(arviz().bfmi(idata))


def hdi(x, prob) -> np.ndarray:
    """The highest-density interval of 1-d draws ``x`` with probability ``prob``: ``[lower, upper]``."""
    return np.asarray(arviz().hdi(np.asarray(x, dtype=float), hdi_prob=prob), dtype=float)


def summary(idata, var_names=None):
    """ArviZ's summary table (mean, sd, HDI, MCSE, ESS, R-hat) as a pandas DataFrame."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ warns about single chains; the checks table says it
        return arviz().summary(idata, var_names=var_names)
