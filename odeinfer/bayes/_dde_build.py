"""Delay models in :func:`~odeinfer.bayes.build_model`: histories per experiment, the names of
history parameters, and the checks that are specific to delays.

Conventions (as the DDE solver and the AdjointDDE estimator name things): delays are model
parameters (``"tau"``); the parameters of a history family are ``"<group>[<state>]"``
(``History.param_names``: ``"b[x]"`` for a constant history, ``"a[x]", "b[x]"`` affine,
``"A[x]", "omega[x]", "b[x]"`` periodic), with ``"@<experiment>"`` appended when there are
several experiments. A :class:`~odeinfer.model.History` family passed as ``history`` has
unknown parameters (priors needed, or ``fixed=``); plain numbers, a mapping state -> number
and a data-driven history (``History.from_data`` / ``from_function``) are a known history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from odeinfer.errors import DataError, InputError
from odeinfer.model.history import HISTORY_KINDS, History

__all__ = ["DDEHistories", "dde_histories", "split_fixed", "check_prior_names", "check_delay_priors",
           "check_fixed_delays", "x0_of_history"]


@dataclass(frozen=True, eq=False)
class DDEHistories:
    """The history of each experiment and the names of its parameters.

    Attributes
    ----------
    histories : tuple of History, one per experiment
    estimable : tuple of bool
        Whether the history family's parameters are unknowns (a History family
        was passed) or known values.
    names : tuple of tuple of str
        Per experiment, the history parameters' names with the experiment's suffix.
    suffixes : tuple of str
    states : tuple of str
    """

    histories: tuple
    estimable: tuple
    names: tuple
    suffixes: tuple
    states: tuple

    def all_names(self):
        return [n for names, est in zip(self.names, self.estimable) if est for n in names]

    def known_names(self):
        """Names that look like history parameters of a known history (for a clear prior error)."""
        out = []
        groups = sorted({g for _, gs in HISTORY_KINDS.values() for g in gs})
        for est, sfx in zip(self.estimable, self.suffixes):
            if not est:
                out += [f"{g}[{s}]{sfx}" for g in groups for s in self.states]
        return out


def _one(history, model, where):
    """(History, estimable) of one experiment."""
    from odeinfer.solve.dde import as_history

    if history is None:
        return History.constant(np.ones(model.n_states)), True
    if isinstance(history, History):
        if history.n_states != model.n_states:
            raise InputError(f"history{where}: has {history.n_states} state(s) but model {model.name!r} has "
                             f"{model.n_states} {list(model.states)}")
        return history, history.kind != "piecewise"
    if callable(history):
        raise InputError(f"history{where}: a function of time needs a window, and the delays are unknown here; "
                         "pass History.from_function(fn, start, end) covering [t0 - max(tau), t0]")
    return as_history(history, model), False


def dde_histories(model, exps, history, x0, suffixes) -> DDEHistories:
    """Resolve ``history=`` of :func:`build_model` for a model with delays.

    ``history`` is None (a constant history with unknown values ``b[state]``,
    as AdjointDDE's default), one history for every experiment, or with several
    experiments a mapping ``{experiment: history}``.
    """
    if x0 is not None:
        raise InputError(f"x0: model {model.name!r} has delays, so its initial state is the history's value at t0, "
                         "not a separate quantity; drop x0= and give history= (known values: history=[...]; "
                         "unknown: history=oi.History.constant/affine/periodic(...) with priors for its parameters)")
    names = [str(d.name) for d in exps]
    per_exp = (isinstance(history, Mapping) and len(exps) > 1 and len(history) > 0
               and all(k in names for k in history))
    if per_exp:
        missing = [n for n in names if n not in history]
        if missing:
            raise InputError(f"history: a mapping by experiment must give every experiment; missing {missing}")
    hs, est, hnames = [], [], []
    for d, sfx in zip(exps, suffixes):
        h, e = _one(history[str(d.name)] if per_exp else history, model, f"[{d.name}]" if per_exp else "")
        window = h.window()
        if window is not None and window[1] < float(d.t0) - 1e-9 * max(1.0, abs(float(d.t0))):
            raise DataError(f"history: the data-driven history of experiment {d.name!r} covers [{window[0]:g}, "
                            f"{window[1]:g}], which ends before t0 = {float(d.t0):g}; give history data up to t0")
        hs.append(h)
        est.append(e)
        hnames.append(tuple(f"{n}{sfx}" for n in h.param_names(model.states)))
    return DDEHistories(tuple(hs), tuple(est), tuple(hnames), tuple(suffixes), tuple(model.states))


def split_fixed(fixed, model, hist: DDEHistories):
    """``fixed`` -> ({param: value}, {history name with suffix: value}); plain history names apply to all experiments."""
    if fixed is None:
        return None, {}
    if not isinstance(fixed, Mapping):
        raise InputError(f"fixed: expected a mapping {{parameter: value}}, got {type(fixed).__name__}")
    params, hfixed = {}, {}
    free_h = hist.all_names()
    for k, v in fixed.items():
        if k in model.params:
            params[k] = v
            continue
        targets = [n for n in free_h if n == k or n.split("@", 1)[0] == k]
        if not targets:
            known = k in hist.known_names() or any(k == n.split("@", 1)[0] for n in hist.known_names())
            if known:
                raise InputError(f"fixed: {k!r} is a history parameter, but the history is known (not a "
                                 "parametric family); pass history=oi.History.constant/affine/periodic(...) to "
                                 "give it parameters, or drop it from fixed")
            raise InputError(f"fixed: {k!r} is not a parameter of model {model.name!r} nor a history parameter; "
                             f"parameters {list(model.params)}, history parameters {free_h}")
        v = float(v)
        if not np.isfinite(v):
            raise InputError(f"fixed: the value of {k!r} must be finite, got {v}")
        for n in targets:
            hfixed[n] = v
    return params, hfixed


def check_prior_names(priors, model, hist: DDEHistories):
    """Clear errors for priors that make no sense with delays (before the generic name check)."""
    if not isinstance(priors, Mapping):
        return
    known = set(hist.known_names())
    for key in priors:
        if key in known:
            raise InputError(
                f"priors: {key!r} is a history parameter, but the history is known (plain values or data), so it "
                "takes no prior; to estimate the history pass history=oi.History.constant/affine/periodic(...) "
                "(names: History.param_names), or drop the prior")
        if key == "x0" or str(key).startswith("x0["):
            raise InputError(
                f"priors: {key!r}: model {model.name!r} has delays, so its initial state is the history's value at "
                f"t0; give priors for the history parameters {hist.all_names() or '(history is known)'} instead")


def check_fixed_delays(model, fixed, hist: DDEHistories, exps):
    """Fixed delays must be > 0 and within a data-driven history's window."""
    for name in model.delays:
        if name not in fixed:
            continue
        v = fixed[name]
        if not v > 0:
            raise InputError(f"fixed: the delay {name!r} must be > 0, got {v!r}")
        for h, d in zip(hist.histories, exps):
            window = h.window()
            if window is not None and window[0] > float(d.t0) - v + 1e-9 * max(1.0, abs(float(d.t0))):
                raise DataError(f"history: the data-driven history of experiment {d.name!r} starts at {window[0]:g}, "
                                f"but the delay {name}={v:g} needs it from t0 - tau = {float(d.t0) - v:g}")


def check_delay_priors(model, rvs):
    """InputError unless every delay's prior puts no mass on values <= 0.

    Checked by the prior's log density at a few negative values (must be -inf);
    a prior that depends on other variables is not checked.
    """
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    probe = np.array([-1e-8, -1e-3, -0.5, -1.0, -10.0, -1e3])
    for name in model.delays:
        rv = rvs.get(name)
        if rv is None:
            continue
        v = pt.dvector(f"{name}_probe")
        try:
            lp = pm.logp(rv, v)
            f = pytensor.function([v], lp, mode="FAST_COMPILE", on_unused_input="ignore")
            vals = np.asarray(f(probe), dtype=float)
        except Exception:  # depends on other variables, or no logp: not checkable here
            continue
        bad = np.isfinite(vals)
        if bad.any():
            x = float(probe[np.argmax(bad)])
            raise InputError(
                f"priors[{name!r}]: {name!r} is a delay, so its prior must be on positive values, but its log density "
                f"at {name} = {x:g} is {float(vals[np.argmax(bad)]):.3g}; use e.g. pm.LogNormal.dist(mu=np.log(guess), "
                "sigma=0.5), pm.HalfNormal.dist(1), pm.TruncatedNormal.dist(mu, sigma, lower=0) or "
                "pm.Uniform.dist(lower, upper) with lower >= 0")


def x0_of_history(h: History, phi, t0, n_states):
    """y(t0) = X0(0): the last group (``b``) of a family's parameters, or the data-driven history at t0."""
    import pytensor.tensor as pt

    if h.kind == "piecewise":
        return pt.constant(np.asarray(h([t0])[0], dtype=float))
    return phi[-n_states:]
