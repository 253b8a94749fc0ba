"""Starting values of a trajectory fit called without ``start``.

The matching estimators give the start when they apply: :class:`OrthogonalConditions` first,
then :class:`GradientMatching` (both need every state observed and no delays). A parameter
entering the model nonlinearly needs a seed; the first round seeds it at the (geometric) midpoint
of its bounds, else 1.0. An estimate whose own trajectory check misses the data (a quick
integration at the estimate, :mod:`odeinfer.estimators._trajectory_check`) is not used while
another round can do better: the second round seeds the unbounded nonlinear parameters at the
data's scale (the largest observed magnitude; e.g. a carrying capacity seeded at 1.0 below data
that saturate near 10 sends both matching estimators to K ~ -2.5e4, and the trajectory fit from
there to the exponential-growth asymptote K ~ 1e9). When every round misses, the estimate with the
smallest misfit is used and the miss is recorded. When no matching estimator applies, or their
estimates fail or are not finite, the fit falls back to a multistart inside the bounds. What was
tried and what was used goes into ``provenance["start"]``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np

from odeinfer.errors import InputError, OdeinferError
from odeinfer.estimators._trajectory_check import missed

__all__ = ["FALLBACK_STARTS", "MATCHING", "has_param_start", "matching_start", "multistart_fallback", "start_info"]

#: Multistart points of the fallback when no matching estimator applies.
FALLBACK_STARTS = 16
#: The matching estimators tried, in order.
MATCHING = ("OrthogonalConditions", "GradientMatching")
#: Seed of a parameter entering the model nonlinearly (the matching estimators need one) without bounds.
_SEED = 1.0


def has_param_start(start) -> bool:
    """Whether ``start`` gives a value for at least one parameter (not only initial states)."""
    from odeinfer.results import Estimate

    if start is None:
        return False
    names = start.names if isinstance(start, Estimate) else start.keys() if isinstance(start, Mapping) else None
    return True if names is None else any(not str(n).startswith("x0[") for n in names)


def _seeds(model, problem, bounds_of, default=_SEED):
    """Seeds of the free parameters entering ``f`` nonlinearly: the (geometric) midpoint of finite
    (positive) bounds, else ``default``."""
    from odeinfer.estimators._quadrature import node_model

    free, fixed = problem.free, problem.fixed
    linear = set(node_model(model).linear_params(free, fixed))
    switching = set(model.switching_params)  # the matching estimators search these on a grid
    out = {}
    for n in free:
        if n in linear or n in switching:
            continue
        lo, hi = bounds_of(n)
        if 0 < lo and math.isfinite(hi):
            out[n] = math.sqrt(lo * hi)
        elif math.isfinite(lo) and math.isfinite(hi):
            out[n] = 0.5 * (lo + hi)
        else:
            out[n] = default
    return out


def _data_scale(problem):
    """The largest finite observed magnitude over all experiments (NaN when there is none)."""
    tops = [float(np.max(np.abs(d.y[m]))) for d in problem.experiments
            for m in [np.asarray(d.mask, bool) & np.isfinite(d.y)] if m.any()]
    return max(tops) if tops else math.nan


def _seed_rounds(model, problem, bounds_of):
    """The seed sets to try, in order: the default seeds, then (when some seed is the unbounded
    default and the data's scale differs from it) those seeds at the data's scale."""
    first = _seeds(model, problem, bounds_of)
    scale = _data_scale(problem)
    if not (math.isfinite(scale) and scale > 0) or math.isclose(scale, _SEED, rel_tol=0.5):
        return [first]
    second = _seeds(model, problem, bounds_of, default=scale)
    return [first] if second == first else [first, second]


def _unusable(fit, free, log_mask):
    """Why the matching estimate ``fit`` cannot start the fit (None when it can)."""
    vals = dict(zip(fit.names, fit.values.tolist()))
    if fit.status == "failed":
        return f"failed ({fit.message or 'no message'})"
    bad = [n for n in free if not math.isfinite(vals.get(n, math.nan))]
    if bad:
        return f"not finite for {bad}"
    neg = [n for n, m in zip(free, log_mask) if m and vals[n] <= 0]
    if neg:
        return f"values <= 0 for the log-parametrised {neg}"
    return None


def _inside(v, lo, hi):
    """``v`` moved strictly inside ``[lo, hi]`` (by 1e-3 of the width) when it lies outside or on a bound."""
    if math.isfinite(lo) and math.isfinite(hi):
        pad = 1e-3 * (hi - lo)
        return min(max(v, lo + pad), hi - pad)
    if math.isfinite(lo) and v <= lo:
        return lo + 1e-3 * max(abs(lo), 1.0)
    if math.isfinite(hi) and v >= hi:
        return hi - 1e-3 * max(abs(hi), 1.0)
    return v


def matching_start(model, data, problem, *, bounds_of, log_mask, x0=None):
    """The first usable matching estimate whose trajectory does not miss the data, over the seed rounds
    (:func:`_seed_rounds`); when every usable one misses, the one with the smallest misfit; as a start.

    Parameters
    ----------
    model : Model
    data : Data or Experiments
    problem : Problem
        The validated inputs of the trajectory fit (free and fixed parameters).
    bounds_of : callable
        ``name -> (lower, upper)`` (natural units) of the trajectory estimator.
    log_mask : sequence of bool
        Per free parameter: estimated on the log scale (needs a positive start).
    x0 : dict, optional
        Known initial states ``{state: value}`` (for every experiment), passed to the matching
        estimator; other forms (per experiment, arrays) are not passed.

    Returns
    -------
    (dict or None, dict)
        ``{param: value}`` (inside the bounds) or None when no matching estimator gave a usable
        estimate, and the provenance record: ``source``, ``values``, ``status``, ``seeds``,
        ``tried`` (``[{"estimator", "outcome"}]``), ``warnings``.
    """
    import odeinfer as oi

    free = problem.free
    tried, best = [], None
    if not isinstance(x0, Mapping) or any(isinstance(v, Mapping) for v in x0.values()):
        x0 = None  # per-experiment or positional initial states: the matching estimators do without
    try:
        rounds = _seed_rounds(model, problem, bounds_of)
    except (OdeinferError, ArithmeticError, np.linalg.LinAlgError) as exc:
        return None, {"source": None, "tried": [{"estimator": name, "outcome": f"{type(exc).__name__}: {exc}"}
                                                for name in MATCHING]}
    for seeds in rounds:
        for name in MATCHING:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    fit = getattr(oi, name)().fit(model, data, start=seeds or None, fixed=problem.fixed or None,
                                                  x0=x0)
                except (OdeinferError, ArithmeticError, np.linalg.LinAlgError) as exc:
                    tried.append({"estimator": name, "outcome": f"{type(exc).__name__}: {exc}"})
                    continue
            why = _unusable(fit, free, log_mask)
            if why is not None:
                tried.append({"estimator": name, "outcome": why})
                continue
            found = (fit, seeds, [str(w.message) for w in caught])
            miss = missed(fit)
            if miss is None:
                tried.append({"estimator": name, "outcome": "used"})
                return _used(found, name, free, bounds_of, tried)
            tried.append({"estimator": name, "outcome": f"its trajectory misses the data (RMS misfit {miss[0]:.3g} "
                          f"noise standard deviations, threshold {miss[1]:.3g}) from the seeds {seeds}"})
            if best is None or miss[0] < best[0]:
                best = (miss[0], name, found)
    if best is not None:
        tried.append({"estimator": best[1], "outcome": "used (the smallest trajectory misfit; every estimate missed)"})
        return _used(best[2], best[1], free, bounds_of, tried)
    return None, {"source": None, "tried": tried}


def _used(found, name, free, bounds_of, tried):
    """The start and provenance record of the matching estimate ``found = (fit, seeds, warnings)``."""
    fit, seeds, caught = found
    vals = dict(zip(fit.names, fit.values.tolist()))
    start = {n: _inside(vals[n], *bounds_of(n)) for n in free}
    return start, {"source": name, "values": start, "status": fit.status, "seeds": seeds, "tried": tried,
                   "warnings": caught}


def multistart_fallback(names, lo, hi, tried):
    """The provenance record of the multistart fallback; raises when a free parameter has no finite bounds.

    Parameters
    ----------
    names : sequence of str
        The free parameters (internal order).
    lo, hi : numpy.ndarray
        Their internal bounds (log scale for log-parametrised ones).
    tried : list of dict
        The matching estimators tried and why each could not give the start.

    Raises
    ------
    InputError
        Naming the parameters, why each matching estimator did not apply, and the fix.
    """
    unbounded = [n for n, a, b in zip(names, lo, hi) if not (math.isfinite(a) and math.isfinite(b))]
    if unbounded:
        why = "; ".join(f"{t['estimator']}: {t['outcome']}" for t in tried)
        raise InputError(
            f"start: no starting value for {list(names)}, and the matching estimators could not give one ({why}); "
            f"the fallback multistart ({FALLBACK_STARTS} starts) needs finite bounds for {unbounded} (positive "
            "lower bounds for log-parametrised ones). Pass start={name: value}, or bounds={name: (lower, upper)}")
    return {"source": "multistart", "starts": FALLBACK_STARTS, "tried": tried}


def start_info(start, starts):
    """The provenance record of a fit whose start the user chose (a start and/or ``starts > 1``);
    a start given as an Estimate is named (``"estimate": "OrthogonalConditions"``)."""
    from odeinfer.results import Estimate

    out = {"source": "multistart", "starts": int(starts), "user_start": start is not None} if starts > 1 \
        else {"source": "user"}
    if isinstance(start, Estimate):
        out["estimate"] = start.estimator
    return out
