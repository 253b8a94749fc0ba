"""Validation of the arguments of :func:`odeinfer.solve` and :func:`odeinfer.bind` (values,
times, sensitivities): every check happens here, before a kernel runs."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

import numpy as np

from odeinfer.errors import DataError, InputError

def compiled_model(model):
    """The :class:`~odeinfer.model.CompiledModel` of a ``Model`` or ``CompiledModel``."""
    from odeinfer.model import CompiledModel, Model

    if isinstance(model, CompiledModel):
        return model
    if isinstance(model, Model):
        return model.compile()
    raise InputError(
        f"model: expected an odeinfer Model (from @oi.model or Model.from_equations) or its "
        f"CompiledModel, got {type(model).__name__}"
    )


def _suggest(name, names):
    close = difflib.get_close_matches(str(name), names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


_SHORT = 64  # named_values: up to this length, the finiteness test runs in Python
_FLOAT64 = np.dtype(np.float64)


def named_values(arg, values, names, what):
    """``values`` (array-like in the order of ``names``, or a mapping name -> value)
    as a new finite float64 array of shape ``(len(names),)``."""
    if type(values) is np.ndarray and values.dtype is _FLOAT64:
        arr = values.copy()  # what np.array(values, dtype=np.float64) makes, made faster
    else:
        arr = _as_array(arg, values, names, what)
    if arr.shape != (len(names),):
        raise InputError(
            f"{arg}: expected {len(names)} values in the order {list(names)}, got an array of shape "
            f"{arr.shape}; pass a 1-D sequence or a mapping name -> value"
        )
    # a short vector is tested faster element by element in Python than by a ufunc and a reduction
    if all(map(math.isfinite, arr.tolist())) if arr.size <= _SHORT else np.isfinite(arr).all():
        return arr
    bad = [n for n, v in zip(names, arr) if not math.isfinite(v)]
    raise InputError(f"{arg}: values must be finite; {bad} {'is' if len(bad) == 1 else 'are'} inf or NaN")


def _as_array(arg, values, names, what):
    """:func:`named_values`'s ``values`` as a new float64 array (any shape)."""
    if type(values) is not np.ndarray and isinstance(values, Mapping):  # an array: skip the slower ABC test
        unknown = [k for k in values if k not in names]
        if unknown:
            hint = _suggest(unknown[0], names)
            raise InputError(
                f"{arg}: {unknown} {'is not a' if len(unknown) == 1 else 'are not'} "
                f"{what}{'' if len(unknown) == 1 else 's'} of the model{hint}; "
                f"its {what}s are {list(names)}"
            )
        missing = [k for k in names if k not in values]
        if missing:
            raise InputError(f"{arg}: missing value for {what}{'s' if len(missing) > 1 else ''} {missing}; "
                             f"give one value for each of {list(names)}")
        values = [values[k] for k in names]
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{arg}: expected {len(names)} numbers (for {list(names)}) or a mapping name -> number, "
            f"got {type(values).__name__}: {exc}"
        ) from None
    return arr


def output_times(t, t0):
    """``(t, t0)`` as a read-only 1-D float64 array and a float; ``DataError`` if
    ``t`` is empty, not finite, not sorted, or starts before ``t0``."""
    try:
        arr = np.array(t, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"t: expected a 1-D array of output times, got {type(t).__name__}: {exc}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise DataError(f"t: expected a non-empty 1-D array of output times, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise DataError(f"t: output times must be finite; inf or NaN at index {int(np.flatnonzero(~np.isfinite(arr))[0])}")
    steps = np.diff(arr)
    if np.any(steps < 0):
        i = int(np.flatnonzero(steps < 0)[0])
        raise DataError(
            f"t: output times must be sorted (non-decreasing); t[{i}]={float(arr[i])!r} > "
            f"t[{i + 1}]={float(arr[i + 1])!r}; "
            "sort them (np.sort) and reorder the results if needed"
        )
    if t0 is None:
        t0 = float(arr[0])
    else:
        try:
            t0 = float(t0)
        except (TypeError, ValueError):
            raise DataError(f"t0: expected a number, got {type(t0).__name__}") from None
        if not math.isfinite(t0):
            raise DataError(f"t0: expected a finite number, got {t0!r}")
        if arr[0] < t0:
            raise DataError(
                f"t: the first output time t[0]={float(arr[0])!r} is before t0={t0!r}; the solver only "
                "integrates forward: choose t0 <= t[0]"
            )
    arr.flags.writeable = False
    return arr, t0


def check_sensitivities(cm, sensitivities, exclude=()):
    """Whether derivatives of the solution are wanted (``sensitivities``), validated for the model,
    given the parameters ``exclude`` whose sensitivity columns the caller does not need.

    Derivatives (forward or adjoint) are refused while a parameter that moves a jump of the
    right-hand side (``model.switching_params``) is not excluded, and whenever a jump depends on
    the states (then its time moves with every parameter and initial state, even with a constant
    threshold).
    """
    excluded = sens_exclude_indices(cm, exclude)
    if not sensitivities:
        return False
    switching = cm.model.switching_params
    names = set(cm.params[i] for i in excluded)
    needed = [q for q in switching if q not in names]
    if needed:
        raise InputError(
            f"gradient: parameters {needed} move a jump of the right-hand "
            "side, so sensitivities would miss the jump term and be wrong; replace the sharp "
            "step by a smooth one (om.heaviside(x, width=...)) or solve with gradient=None "
            f"(or, if {'it is' if len(needed) == 1 else 'they are'} held fixed, pass "
            f"gradient=oi.Forward(exclude={needed!r}))"
        )
    moving = _state_dependent_switches(cm.model)
    if moving:
        held = f", even with {sorted(names)} excluded" if switching else ""
        raise InputError(
            f"gradient: the jump of the right-hand side at {moving[0]} depends on the states, so its time "
            f"moves with every parameter and initial state and all sensitivities would miss the jump term{held}; "
            "replace the sharp step by a smooth one (om.heaviside(x, width=...)) or solve with gradient=None"
        )
    return True


def sens_exclude_indices(cm, exclude):
    """``exclude`` (parameter names, from ``Forward(exclude=...)``) as the sorted tuple of their
    indices in ``params``."""
    out = set()
    for name in exclude or ():
        if name not in cm.params:
            hint = _suggest(name, cm.params) if isinstance(name, str) else ""
            raise InputError(f"Forward(exclude=...): {name!r} is not a parameter of the model{hint}; "
                             f"its parameters are {list(cm.params)}")
        out.add(cm.params.index(name))
    return tuple(sorted(out))


def _switch_conditions(model):
    """``(condition as text, continuous)`` for each switching condition of ``model`` that involves a
    state; ``continuous`` for those of a piecewise that is continuous where its condition switches
    (:func:`_continuous_piecewise`, e.g. ``piecewise(x - c, x > c, 0)``, a kink): the right-hand side
    does not jump there, so neither do the sensitivities (their jump is ``(f(tau-) - f(tau+))
    dtau/dtheta = 0``)."""
    import sympy as sp

    states = set(model.state_symbols)
    found = []
    for e in model.exprs:
        for node in sp.preorder_traversal(e):
            if isinstance(node, (sp.Heaviside, sp.sign)):
                conds, smooth = [node.args[0]], False
            elif isinstance(node, sp.Piecewise):
                conds, smooth = [c for _, c in node.args], _continuous_piecewise(node, states)
            else:
                continue
            found += [(str(c), smooth) for c in conds if getattr(c, "free_symbols", set()) & states]
    return found


def _state_dependent_switches(model):
    """The conditions (as text) of ``model``'s jumps of the right-hand side that involve a state."""
    return [c for c, smooth in _switch_conditions(model) if not smooth]


def state_kinks(model):
    """The conditions (as text) of ``model``'s kinks at state thresholds: piecewise terms continuous where
    a state crosses their threshold (the solvers do not locate these switches; sensitivities need no jump)."""
    return [c for c, smooth in _switch_conditions(model) if smooth]


def _continuous_piecewise(node, states):
    """Whether ``node`` is ``Piecewise((a, lhs > rhs), (b, True))`` (any of > >= < <=) with ``a = b``
    where ``lhs = rhs``, shown by solving ``lhs = rhs`` for a state in which it is linear and
    substituting into ``a - b`` (sympy simplifies it to 0). Anything else counts as a jump."""
    import sympy as sp

    if len(node.args) != 2 or node.args[1][1] is not sp.true:
        return False
    (a, cond), (b, _) = node.args
    if not isinstance(cond, (sp.StrictGreaterThan, sp.GreaterThan, sp.StrictLessThan, sp.LessThan)):
        return False
    d = cond.lhs - cond.rhs
    for x in sorted(d.free_symbols & states, key=lambda x: x.name):
        poly = sp.Poly(d, x) if d.is_polynomial(x) else None
        if poly is None or poly.degree() != 1 or poly.coeffs()[0].has(x):
            continue
        coeff = poly.coeffs()[0]
        if not (coeff.is_number and coeff != 0):
            continue
        root = sp.solve(d, x)
        if len(root) == 1:
            return sp.simplify((a - b).xreplace({x: root[0]})) == 0
    return False
