"""Tracing a plain Python right-hand side ``rhs(t, y, p)`` into sympy expressions."""

from __future__ import annotations

import difflib
import keyword
import linecache
import re
import traceback
import unicodedata
from collections.abc import Mapping, Sequence

import sympy as sp

from odeinfer.errors import ModelDefinitionError, TracingError
from odeinfer.model.traced import Traced, to_expr

__all__ = ["validate_names", "symbols_for", "trace_function", "Namespace", "T_SYMBOL"]

T_SYMBOL = sp.Symbol("t", real=True)
_RESERVED = {"t"}


def symbols_for(names):
    """Real sympy symbols, one per name."""
    return tuple(sp.Symbol(n, real=True) for n in names)


def validate_names(argument: str, names) -> tuple[str, ...]:
    """Check a list of state/parameter names: identifiers, unique, not reserved.

    Names are returned in Unicode NFKC form, the form Python itself gives identifiers
    (it reads ``y.\ufb01sh`` as ``y.fish``), so that a name and its uses agree.
    """
    if isinstance(names, str):
        raise ModelDefinitionError(
            f"{argument}: expected a list of names, got the single string {names!r}; "
            f"write {argument}=[{names!r}]"
        )
    try:
        names = tuple(names)
    except TypeError:
        raise ModelDefinitionError(f"{argument}: expected a list of names, got {type(names).__name__}") from None
    out = []
    for n in names:
        if isinstance(n, str):
            n = unicodedata.normalize("NFKC", n)
        if not isinstance(n, str) or not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_"):
            raise ModelDefinitionError(
                f"{argument}: {n!r} is not a valid name; names must be Python identifiers that do not start "
                "with '_' and are not keywords (e.g. 'prey', 'alpha', 'k_1')"
            )
        if n in _RESERVED:
            raise ModelDefinitionError(f"{argument}: the name {n!r} is reserved for time; rename it (e.g. 't_r')")
        out.append(n)
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        changed = [n for n in names if isinstance(n, str) and unicodedata.normalize("NFKC", n) != n]
        how = (f" (after Unicode NFKC normalisation, which Python applies to identifiers: {changed} read as "
               f"{[unicodedata.normalize('NFKC', n) for n in changed]})" if changed else "")
        raise ModelDefinitionError(f"{argument}: duplicated names {dup}{how}; every name must appear once")
    return tuple(out)


class Namespace:
    """Attribute access to traced symbols (``y.prey``, ``p.alpha``) or numbers."""

    __slots__ = ("_kind", "_values")

    def __init__(self, kind: str, values: Mapping):
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        try:
            return values[name]
        except KeyError:
            kind = object.__getattribute__(self, "_kind")
            close = difflib.get_close_matches(name, list(values), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ModelDefinitionError(
                f"the right-hand side used {kind}.{name}, but the model declares no {kind_word(kind)} "
                f"named {name!r} (declared: {list(values)}).{hint} Add it to the model's "
                f"{kind_word(kind)}s or fix the spelling"
            ) from None

    def __getitem__(self, key):
        values = object.__getattribute__(self, "_values")
        if isinstance(key, int):
            return list(values.values())[key]
        return self.__getattr__(key)

    def __setattr__(self, name, value):
        raise ModelDefinitionError("the right-hand side must not assign to y or p; use local variables")

    def __len__(self):
        return len(object.__getattribute__(self, "_values"))

    def __iter__(self):
        return iter(object.__getattribute__(self, "_values").values())

    def __dir__(self):
        return list(object.__getattribute__(self, "_values"))


def kind_word(kind):
    return {"y": "state", "p": "parameter"}.get(kind, kind)


def _user_line(exc, fn):
    """(lineno, source line) of the deepest frame of ``fn`` in the traceback."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == fn.__code__.co_filename and frame.name == fn.__code__.co_name:
            found = frame
    if found is None:
        return None, ""
    line = found.line or linecache.getline(found.filename, found.lineno).strip()
    return found.lineno, line


def _hint_from_line(line):
    m = re.search(r"\b(np|numpy|math)\.(\w+)", line or "")
    if m:
        return f" Replace {m.group(0)} by odeinfer.math.{m.group(2)} (from odeinfer import math as om)."
    return ""


def trace_function(fn, states, params, delays=()):
    """Call ``fn(t, y, p)`` on symbols and return one sympy expression per state.

    ``delays`` names the parameters that :func:`odeinfer.math.lag` may use as
    delays (empty for an ODE: then ``lag`` raises).
    """
    from odeinfer.model.lags import tracing_context

    name = getattr(fn, "__qualname__", repr(fn))
    y = Namespace("y", {s: Traced(sym) for s, sym in zip(states, symbols_for(states))})
    p = Namespace("p", {s: Traced(sym) for s, sym in zip(params, symbols_for(params))})
    try:
        with tracing_context(states, params, delays):
            result = fn(Traced(T_SYMBOL), y, p)
    except ModelDefinitionError as exc:
        lineno, line = _user_line(exc, fn)
        where = f" (line {lineno}: `{line}`)" if lineno else ""
        hint = _hint_from_line(line) if isinstance(exc, TracingError) else ""
        raise type(exc)(f"in the right-hand side {name}{where}: {exc}{hint}") from None
    except Exception as exc:  # the user's code failed on symbols
        lineno, line = _user_line(exc, fn)
        where = f" (line {lineno}: `{line}`)" if lineno else ""
        raise TracingError(
            f"tracing the right-hand side {name} failed{where}: {type(exc).__name__}: {exc}. "
            "The function is called once with symbols: use arithmetic, y.<state>, p.<param>, t and "
            "odeinfer.math functions only" + _hint_from_line(line)
        ) from exc
    return _collect(result, states, name)


def _collect(result, states, name):
    if isinstance(result, Mapping):
        keys = list(result)
        missing = [s for s in states if s not in result]
        extra = [k for k in keys if k not in states]
        if missing or extra:
            raise ModelDefinitionError(
                f"the right-hand side {name} returned derivatives for {keys}, but the model's states are "
                f"{list(states)} (missing: {missing}, unknown: {extra}); return one entry per state"
            )
        values = [result[s] for s in states]
    elif isinstance(result, Sequence) and not isinstance(result, (str, bytes)):
        if len(result) != len(states):
            raise ModelDefinitionError(
                f"the right-hand side {name} returned {len(result)} derivatives, but the model has "
                f"{len(states)} states {list(states)}; return one per state, in this order, or a dict"
            )
        values = list(result)
    else:
        raise ModelDefinitionError(
            f"the right-hand side {name} returned {type(result).__name__}; expected a dict "
            "{state: derivative} or a list of derivatives in the order of the states"
        )
    exprs = []
    for s, v in zip(states, values):
        try:
            e = to_expr(v)
        except TracingError as exc:
            raise ModelDefinitionError(f"the derivative of state {s!r} returned by {name}: {exc}") from None
        if isinstance(e, (sp.core.relational.Relational, sp.logic.boolalg.BooleanFunction,
                          sp.logic.boolalg.BooleanAtom)):
            raise ModelDefinitionError(
                f"the derivative of state {s!r} returned by {name} is a comparison ({e}); "
                "use odeinfer.math.where(cond, a, b) to switch between expressions"
            )
        exprs.append(e)
    return tuple(exprs)
