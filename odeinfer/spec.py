"""Analysis specifications in TOML, for ``odeinfer report spec.toml`` (parsed safely, never evaluated).

A spec names a model by its equations, a CSV file of data and what to run. Every table accepts
only the keys listed below; anything else is an error naming the key and the allowed ones.

.. code-block:: toml

    title = "Lotka-Volterra on the Hudson's Bay company data"   # optional

    [model]
    name = "lotka_volterra"                  # optional
    params = ["alpha", "beta", "gamma", "delta"]
    noise = "log"                            # "additive" (default) or "log"
    observed = ["prey", "pred"]              # optional: default every state
    [model.equations]                        # one entry per state, in order
    prey = "alpha*prey - beta*prey*pred"
    pred = "delta*prey*pred - gamma*pred"

    [data]
    csv = "lynx_hare.csv"                    # in the spec's folder (or below it)
    time = "year"                            # the time column
    time_origin = 1900                       # optional: subtracted from the times
    [data.observed]                          # state = column (default: columns named as the states)
    prey = "hare"
    pred = "lynx"

    [fit]                                    # optional
    estimators = ["OrthogonalConditions", "GradientMatching", "Embedding"]
    start = { alpha = 0.5, beta = 0.03, gamma = 0.8, delta = 0.02 }
    fixed = {}                               # parameters held fixed
    x0 = {}                                  # known initial states (default: estimated)
    bounds = { alpha = [0.0, 5.0] }

    [bayes]                                  # optional
    enabled = true
    draws = 1000
    tune = 500
    chains = 2
    [bayes.priors]                           # optional; distribution calls with numeric arguments
    alpha = "TruncatedNormal(mu=1, sigma=0.5, lower=0)"

Equations use the whitelist of :meth:`odeinfer.Model.from_equations`; priors accept only the
distributions in :data:`PRIOR_DISTRIBUTIONS` with numeric arguments.
"""

from __future__ import annotations

import ast
import math
import os
import re
import tomllib
from dataclasses import dataclass, field

from odeinfer._lazy import pandas as pd
from odeinfer.errors import DataError, InputError

__all__ = ["Spec", "load_spec", "parse_spec", "parse_prior", "PRIOR_DISTRIBUTIONS", "ESTIMATORS"]

ESTIMATORS = ("OrthogonalConditions", "GradientMatching", "NewtonRaphson", "Embedding", "Simultaneous")
PRIOR_DISTRIBUTIONS = ("Normal", "TruncatedNormal", "HalfNormal", "LogNormal", "Uniform", "Exponential",
                       "Gamma", "InverseGamma", "HalfCauchy", "StudentT", "Beta")

_TOP = {"title", "model", "data", "fit", "bayes"}
_MODEL = {"name", "params", "equations", "noise", "observed"}
_DATA = {"csv", "time", "time_origin", "observed", "experiment"}
_FIT = {"estimators", "start", "fixed", "x0", "bounds"}
_BAYES = {"enabled", "draws", "tune", "chains", "priors", "likelihood"}


@dataclass(frozen=True)
class BayesSpec:
    """The ``[bayes]`` table: whether and how to sample (priors as ``name -> (distribution, kwargs)``)."""

    enabled: bool = True
    draws: int = 1000
    tune: int = 500
    chains: int = 2
    likelihood: str | None = None
    priors: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    """A parsed analysis specification (see the module docstring for the format).

    Attributes
    ----------
    title : str
    model : Model
    data : Data or Experiments
    estimators : tuple of str
    start, fixed, x0 : dict
        Name -> value; ``x0`` empty means the initial states are estimated.
    bounds : dict
        Parameter name -> (lower, upper).
    bayes : BayesSpec
    source : str
        Where the spec came from (file name or ``"<dict>"``).
    """

    title: str
    model: object
    data: object
    estimators: tuple
    start: dict
    fixed: dict
    x0: dict
    bounds: dict
    bayes: BayesSpec
    source: str = "<dict>"


def load_spec(path) -> Spec:
    """Read and validate a TOML spec file; the CSV path inside is relative to the file's folder
    and must stay in it (no absolute paths elsewhere, no '..' or symbolic links leading out)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"spec: no file {path!r}; pass the path of a TOML spec (see odeinfer report --help)")
    with open(path, "rb") as fh:
        try:
            raw = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"spec {os.path.basename(path)!r}: not valid TOML ({exc})") from None
    return parse_spec(raw, base_dir=os.path.dirname(os.path.abspath(path)), source=os.path.basename(path))


def parse_spec(raw: dict, *, base_dir=".", source="<dict>") -> Spec:
    """Validate a spec given as a dict (the parsed TOML); see :func:`load_spec`.

    ``base_dir`` is the folder that ``[data] csv`` is relative to and confined to.
    """
    _keys(raw, _TOP, "the top level", source)
    title = raw.get("title", "odeinfer report")
    if not isinstance(title, str):
        raise InputError(f"{source}: title must be a string, got {title!r}")
    model = _model(_table(raw, "model", source, required=True), source)
    data = _data(_table(raw, "data", source, required=True), model, base_dir, source)
    fit = _table(raw, "fit", source)
    _keys(fit, _FIT, "[fit]", source)
    estimators = tuple(fit.get("estimators", ("OrthogonalConditions", "Embedding")))
    bad = [e for e in estimators if e not in ESTIMATORS]
    if bad or not estimators:
        raise InputError(f"{source} [fit] estimators: {bad or 'empty list'} not available; choose from {list(ESTIMATORS)}")
    start = _numbers(fit.get("start", {}), model.params, "[fit] start", source)
    fixed = _numbers(fit.get("fixed", {}), model.params, "[fit] fixed", source)
    x0 = _numbers(fit.get("x0", {}), model.states, "[fit] x0", source)
    bounds = {}
    for name, pair in _mapping(fit.get("bounds", {}), "[fit] bounds", source).items():
        if name not in model.params:
            raise InputError(f"{source} [fit] bounds: {name!r} is not a parameter; parameters are {list(model.params)}")
        if not (isinstance(pair, list) and len(pair) == 2 and all(_is_number(v) for v in pair) and pair[0] < pair[1]):
            raise InputError(f"{source} [fit] bounds.{name}: expected [lower, upper] with lower < upper, got {pair!r}")
        bounds[name] = (float(pair[0]), float(pair[1]))
    return Spec(title, model, data, estimators, start, fixed, x0, bounds,
                _bayes(_table(raw, "bayes", source), model, source), source)


#: Longest prior text parse_prior reads (bounds the parser's work on hostile input).
_PRIOR_MAX_CHARS = 200


def parse_prior(text: str, *, where="prior"):
    """``"Normal(mu=1, sigma=0.5)"`` -> ``("Normal", (), {"mu": 1.0, "sigma": 0.5})``, without eval.

    Only :data:`PRIOR_DISTRIBUTIONS` and numeric arguments (with unary minus) are accepted.
    """
    if not isinstance(text, str):
        raise InputError(f"{where}: expected a string such as 'Normal(mu=0, sigma=1)', got {type(text).__name__}")
    if len(text) > _PRIOR_MAX_CHARS:
        raise InputError(f"{where}: a prior of {len(text)} characters; at most {_PRIOR_MAX_CHARS} are allowed "
                         "(a distribution name and a few numbers, e.g. 'Normal(mu=0, sigma=1)')")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # ValueError: an integer literal too long
        raise InputError(f"{where}: {text!r} is not a distribution call such as 'Normal(mu=0, sigma=1)'") from None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise InputError(f"{where}: {text!r} is not a distribution call such as 'Normal(mu=0, sigma=1)'")
    dist = node.func.id
    if dist not in PRIOR_DISTRIBUTIONS:
        raise InputError(f"{where}: unknown distribution {dist!r}; choose from {list(PRIOR_DISTRIBUTIONS)}")
    if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
        raise InputError(f"{where}: {text!r}: '*' and '**' are not allowed")
    args = tuple(_number_node(a, text, where) for a in node.args)
    kwargs = {k.arg: _number_node(k.value, text, where) for k in node.keywords}
    return dist, args, kwargs


# -- helpers ------------------------------------------------------------------------------------
def _number_node(node, text, where):
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and _is_number(node.value):
        try:
            return sign * float(node.value)
        except OverflowError:
            raise InputError(f"{where}: {text!r}: an integer of {len(str(node.value))} digits is too large for a "
                             "float64; write it as a float (e.g. 1e300)") from None
    raise InputError(f"{where}: {text!r}: arguments must be plain numbers (got {ast.unparse(node)!r})")


def _is_number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, int) or math.isfinite(v)  # a huge int: refused by float() with its own message


def _keys(table, allowed, where, source):
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InputError(f"{source}: unknown key(s) {unknown} in {where}; allowed keys are {sorted(allowed)}")


def _table(raw, key, source, required=False):
    if key not in raw:
        if required:
            raise InputError(f"{source}: the [{key}] table is missing (see odeinfer.spec for the format)")
        return {}
    return _mapping(raw[key], f"[{key}]", source)


def _mapping(value, where, source):
    if not isinstance(value, dict):
        raise InputError(f"{source} {where}: expected a table, got {type(value).__name__}")
    return value


def _numbers(table, allowed, where, source):
    out = {}
    for name, v in _mapping(table, where, source).items():
        if name not in allowed:
            raise InputError(f"{source} {where}: {name!r} is not one of {list(allowed)}")
        if not _is_number(v):
            raise InputError(f"{source} {where}.{name}: expected a finite number, got {v!r}")
        out[name] = float(v)
    return out


def _strings(value, where, source):
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise InputError(f"{source} {where}: expected a non-empty list of names, got {value!r}")
    return value


def _model(table, source):
    from odeinfer.model import Model

    _keys(table, _MODEL, "[model]", source)
    for key in ("equations", "params"):
        if key not in table:
            raise InputError(f"{source} [model]: the key {key!r} is missing")
    equations = _mapping(table["equations"], "[model.equations]", source)
    params = _strings(table["params"], "[model] params", source)
    observed = table.get("observed")
    if observed is not None:
        observed = _strings(observed, "[model] observed", source)
    return Model.from_equations(equations, params, name=str(table.get("name", "model")), observed=observed,
                                noise=table.get("noise", "additive"))


def _data(table, model, base_dir, source):
    from odeinfer.data import Data

    _keys(table, _DATA, "[data]", source)
    for key in ("csv", "time"):
        if key not in table:
            raise InputError(f"{source} [data]: the key {key!r} is missing")
    csv = table["csv"]
    df = _read_csv(_data_path(csv, base_dir, source), csv, source)
    observed = table.get("observed", {s: s for s in model.observed})
    observed = _mapping(observed, "[data.observed]", source)
    time, experiment = table["time"], table.get("experiment")
    needed = [time, *observed.values()] + ([experiment] if experiment is not None else [])
    odd = [c for c in needed if not isinstance(c, str)]
    if odd:
        raise InputError(f"{source} [data]: column names must be strings, got {odd!r} in time / experiment / "
                         "[data.observed]; write them in quotes, e.g. time = \"year\"")
    missing = [c for c in needed if c not in df.columns]
    if missing:
        shown = [c for c in df.columns if isinstance(c, str) and _PLAIN_COLUMN.fullmatch(c)]
        hidden = len(df.columns) - len(shown)
        raise DataError(f"{source} [data]: column(s) {missing} not in {csv!r}; its columns are {shown}"
                        + (f" and {hidden} more whose names are not shown (not plain names)" if hidden else "")
                        + "; name existing columns in [data] time / [data.observed]")
    unknown = [s for s in observed if s not in model.states]
    if unknown:
        raise InputError(f"{source} [data.observed]: {unknown} are not states of the model {list(model.states)}")
    for column in [time, *observed.values()]:
        _numeric_column(df, column, csv, source)
    origin = table.get("time_origin", 0.0)
    if not _is_number(origin):
        raise InputError(f"{source} [data] time_origin: expected a number, got {origin!r}")
    if origin:
        df = df.assign(**{time: pd.to_numeric(df[time]) - origin})
    return Data.from_frame(df, time, observed, experiment=experiment,
                           name=None if experiment is not None else os.path.splitext(os.path.basename(csv))[0])


#: Column names that may appear in an error message: plain names, nothing that looks like
#: the content of an arbitrary file (no '=', ':', '/', quotes; at most 64 characters).
_PLAIN_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_ .()\[\]-]{0,63}")


def _data_path(csv, base_dir, source):
    """The real path of the data file named ``csv``, which must stay inside the spec's folder
    (after resolving '..' and symbolic links), so a spec cannot read other files of the machine."""
    if not isinstance(csv, str) or not csv.strip() or "\x00" in csv:
        raise InputError(f"{source} [data] csv: expected the name of a CSV file in the folder of the spec "
                         f"(e.g. 'data.csv'), got {csv!r}")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, csv))
    try:
        inside = os.path.commonpath([root, path]) == root
    except ValueError:  # another drive (Windows)
        inside = False
    if not inside:
        raise InputError(f"{source} [data] csv: {csv!r} is outside the folder of the spec (an absolute path, '..' "
                         "or a symbolic link leading elsewhere); a spec may only read files in its own folder "
                         "and below. Put the CSV file next to the spec and name it relative to it, e.g. 'data.csv'")
    if not os.path.isfile(path):
        raise InputError(f"{source} [data] csv: no file {csv!r} next to the spec")
    return path


def _read_csv(path, csv, source):
    """The data frame of the (already confined) file ``path``; opened without following a link
    swapped in since the check. Parser messages are not passed on: they may quote the file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise InputError(f"{source} [data] csv: cannot open {csv!r} ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        try:
            return pd.read_csv(fh)
        except (ValueError, UnicodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise DataError(f"{source} [data] csv: {csv!r} is not a readable CSV file ({type(exc).__name__}); "
                            "expected UTF-8 text with a header line of column names and one row per time") from None


def _numeric_column(df, column, csv, source):
    """Refuse non-numeric cells, naming the column and the row but not the cell (file content)."""
    values = df[column]
    bad = pd.to_numeric(values, errors="coerce").isna().to_numpy() & ~values.isna().to_numpy()
    if bad.any():
        first = int(bad.argmax()) + 1
        raise DataError(f"{source} [data]: column {column!r} of {csv!r} has {int(bad.sum())} non-numeric "
                        f"cell(s), the first in data row {first}; expected numbers (empty cells are missing "
                        "values). Fix those cells in the file")


def _bayes(table, model, source):
    _keys(table, _BAYES, "[bayes]", source)
    kw = {}
    for key in ("draws", "tune", "chains"):
        if key in table:
            v = table[key]
            if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                raise InputError(f"{source} [bayes] {key}: expected a positive integer, got {v!r}")
            kw[key] = v
    if "enabled" in table:
        if not isinstance(table["enabled"], bool):
            raise InputError(f"{source} [bayes] enabled: expected true or false, got {table['enabled']!r}")
        kw["enabled"] = table["enabled"]
    if "likelihood" in table:
        if table["likelihood"] not in ("normal", "lognormal"):
            raise InputError(f"{source} [bayes] likelihood: expected 'normal' or 'lognormal', got {table['likelihood']!r}")
        kw["likelihood"] = table["likelihood"]
    priors = {}
    for name, text in _mapping(table.get("priors", {}), "[bayes.priors]", source).items():
        allowed = (*model.params, *(f"x0[{s}]" for s in model.states), *(f"sigma[{s}]" for s in model.observed))
        if name not in allowed:
            raise InputError(f"{source} [bayes.priors]: {name!r} is not a parameter; allowed names are {list(allowed)}")
        priors[name] = parse_prior(text, where=f"{source} [bayes.priors] {name}")
    return BayesSpec(priors=priors, **kw)
