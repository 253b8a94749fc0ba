"""SBML (Level 2 and 3 core) to an odeinfer :class:`~odeinfer.model.Model`: :func:`load_sbml`.

What becomes what
-----------------
states
    The species that are neither constant nor boundary species without rules, and the species
    with a rate rule, in document order; then the compartments and the parameters with a rate rule.
    A species with ``hasOnlySubstanceUnits="false"`` is a concentration: its derivative is
    ``sum_r stoichiometry * rate_r / size(compartment)`` (kinetic laws give amount per time;
    the species' id in any math means its concentration); with ``hasOnlySubstanceUnits="true"``
    it is an amount (no division).
params
    Compartment sizes, boundary or constant species without rules (their initial value, in
    the species' units, as the default) and global parameters (constant or not) without rules,
    in the document's order (compartments, species, parameters), so that PEtab conditions can
    override any of them.
assignment rules
    Substituted, recursively, into the rates, rate rules and initial values; they are kept in
    :attr:`SBMLModel.expressions`. A compartment, species or parameter that has an initial
    assignment and no rule and is no state is a constant derived from the parameters: it is
    substituted the same way (with its initial value) and kept in ``expressions`` too.
local parameters
    Kinetic-law parameters are substituted as numbers (they are not estimable).
function definitions
    Inlined (the arguments substituted into the lambda's body).
initial values
    An initial assignment, else ``initialConcentration`` / ``initialAmount`` (converted with the
    compartment size when the species' units differ), else the value or size; an expression of
    the parameters in :attr:`SBMLModel.x0`. A state without any is an :class:`SBMLError`.
names
    SBML ids are the odeinfer names, unchanged, except ids with a leading ``_`` (valid in SBML, not
    as odeinfer names): they become ``"sbml" + id`` (:func:`odeinfer_name`: ``_rateLaw1`` ->
    ``sbml_rateLaw1``) everywhere in the model, listed in :attr:`SBMLModel.renamed`; a model that
    already has an id equal to such a name is refused. Other ids that are no valid odeinfer names
    (``t``, which is time; a Python keyword such as ``lambda``) are refused with an
    :class:`SBMLError` naming them: rename the id in the SBML file.
math
    The MathML trees are walked node by node (no ``eval``, no text parsing): arithmetic, powers,
    ``exp``, ``ln``, ``log`` (any base), ``root``, ``abs``, ``min``/``max``, trigonometric and
    hyperbolic functions, ``piecewise`` with comparisons and logical operators (without an
    ``otherwise`` it is NaN where no condition holds, SBML's "undefined": a solve that gets there
    fails; pieces whose conditions cover every case, such as ``x > 0`` and ``x <= 0``, leave no
    NaN), the ``time`` csymbol (``t``), ``pi``, ``exponentiale``, ``avogadro``, ``true``, ``false``
    and numbers (integer, real, e-notation, rational).

events
    Doses: an event whose trigger is ``time >= T`` (or ``time > T``), with neither delay nor
    priority, and whose assignments have the form ``s = s + amount`` (``s`` a state, ``amount``
    an expression of the parameters) becomes the doses ``(T, s, amount)``; an assignment
    ``s = value`` (``value`` an expression of the parameters, free of ``s``) a reset
    ``(T, s, value, mode="set")`` (:attr:`SBMLModel.doses`; a species that is a concentration
    gets the amount in concentration units, as SBML's math reads it). ``T`` is a number > 0 or
    an expression of the parameters (``time >= t_ins``), positive at the SBML values, whose
    text :attr:`SBMLModel.dose_times` keeps: :func:`odeinfer.petab.load` resolves it per
    condition and requires it fixed. As for :class:`~odeinfer.Dose`, a measurement at exactly
    ``T`` sees the state before the dose. A boundary species or a parameter that is not constant
    and that events assign is a state, of derivative 0 unless a rate rule gives one (a stimulus
    that events switch, such as Smith_BMCSystBiol2013's insulin).

    State events: an event whose trigger is one comparison (``<``, ``<=``, ``>``, ``>=``) of
    expressions of the states, the parameters and ``time`` that is not of the dose form (or whose
    assignments are not, such as ``s = 2 s`` at ``time >= T``), with
    neither delay nor priority, becomes an :class:`~odeinfer.Event` (:attr:`SBMLModel.state_events`:
    its assignments are expressions of the states, the parameters and ``time``; its trigger's
    ``initialValue`` is kept). :func:`odeinfer.petab.load` gives them to the fit problem, whose
    likelihood locates them along the trajectory (:mod:`odeinfer.likelihood.events`).

Not supported (an :class:`SBMLError` naming the element): other events (delays, priorities,
triggers combining comparisons, assignments to parameters), algebraic rules, fast
reactions, variable stoichiometry (``stoichiometryMath`` or a species reference changed by a
rule), conversion factors, concentrations in a compartment whose size changes, the ``delay``
and ``rateOf`` csymbols, ``floor``, ``ceiling``, ``factorial``, ``quotient``, ``rem``,
``implies``, required SBML packages and SBML Level 1.

Hostile files are refused before libsbml sees them: the file must lie inside ``root`` when one
is given (symbolic links resolved), be at most :data:`MAX_BYTES` long, be UTF-8 XML without a
document type declaration (no entities) and nest at most :data:`MAX_XML_DEPTH` elements deep.
Math is bounded in depth (:data:`MAX_MATH_DEPTH`, counting inlined function bodies) and in size
(:data:`MAX_MATH_NODES` per element and :data:`MAX_DOCUMENT_NODES` in all, after inlining), chains
of assignment rules in depth (:data:`MAX_CHAIN`), and the expressions that substitution builds in
size and depth (:data:`MAX_EXPR_NODES`, :data:`MAX_EXPR_DEPTH`, counted as trees). Error messages
name ids, counts, severities and line numbers, never the file's text.
"""

from __future__ import annotations

import keyword
import math
import os
import urllib.parse
import xml.parsers.expat
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import sympy as sp

from odeinfer.errors import InputError, ModelDefinitionError, SBMLError
from odeinfer.model.core import Model, not_finite
from odeinfer.model.trace import T_SYMBOL, symbols_for, validate_names
from odeinfer.petab._files import read_bounded, resolve

__all__ = ["MAX_BYTES", "MAX_CHAIN", "MAX_DOCUMENT_NODES", "MAX_EXPR_DEPTH", "MAX_EXPR_NODES", "MAX_EXTERNAL_FILES",
           "MAX_MATH_DEPTH", "MAX_MATH_NODES", "MAX_XML_DEPTH", "SBMLModel", "load_sbml", "odeinfer_name"]

MAX_BYTES = 20 * 2**20
MAX_XML_DEPTH = 1_000
MAX_MATH_DEPTH = 200
MAX_MATH_NODES = 100_000
MAX_DOCUMENT_NODES = 5_000_000
MAX_EXPR_NODES = 200_000
MAX_EXPR_DEPTH = 200
MAX_CHAIN = 100
MAX_EXTERNAL_FILES = 100  # files a hierarchical (comp) model may refer to, all told
_MAX_EXACT_EXPONENT = 1_000  # larger exact exponents become floats (2^(10^12) is not computed exactly)
_AVOGADRO = 6.02214179e23  # the value SBML Level 3 fixes for the avogadro csymbol


@dataclass(frozen=True, eq=False)
class SBMLModel:
    """An SBML model as odeinfer objects.

    Attributes
    ----------
    model : Model
        The ODE: states, parameters and right-hand sides (sympy, in the symbols of
        :func:`odeinfer.model.trace.symbols_for` and ``t``).
    x0 : dict of str to sympy expression
        Every state's initial value, an expression of the parameter symbols (a number where
        it is constant).
    values : dict of str to float
        The default value of every parameter of ``model`` (SBML value, compartment size, or
        the initial value of a constant or boundary species).
    expressions : dict of str to sympy expression
        Assignment-rule targets and constants defined by initial assignments, fully
        substituted: expressions of the states, parameters and ``t`` (observables may name them).
    doses : tuple of Dose
        The events as :class:`~odeinfer.Dose` s (see the module's notes), in document order; each
        amount is a number or an expression of the parameters. A dose whose trigger time is an
        expression of the parameters has its value at :attr:`values` as its time.
    renamed : dict of str to str
        ``{SBML id: odeinfer name}`` of the ids that are no odeinfer names as they stand (a leading
        ``_``): each is :func:`odeinfer_name` of the id, everywhere in the model (see the module's notes).
    dose_times : tuple of (str or None)
        Per dose, its trigger time as the text of an expression of the parameters (``"t_ins"``),
        or None when the trigger time is a number.
    dose_events : tuple of str
        Per dose, the id of its event (``"#k"`` for the k-th event without an id).
    state_events : tuple of Event
        The events whose trigger depends on the states (:class:`~odeinfer.Event`, see the module's notes).
    """

    model: Model
    x0: dict
    values: dict
    expressions: dict
    doses: tuple = ()
    renamed: dict = field(default_factory=dict)
    dose_times: tuple = ()
    dose_events: tuple = ()
    state_events: tuple = ()

    def initial_state(self, values=None) -> dict:
        """The initial state as numbers, ``{state: float}``.

        Parameters
        ----------
        values : dict of str to float, optional
            Parameter values overriding :attr:`values` (the defaults) for this call.
        """
        merged = dict(self.values)
        if values is not None:
            unknown = sorted(set(values) - set(merged))
            if unknown:
                raise InputError(f"values: {unknown} are not parameters of model {self.model.name!r} "
                                 f"(parameters: {list(self.model.params)}); fix the names")
            merged.update(values)
        subs = {sym: float(merged[p]) for sym, p in zip(self.model.param_symbols, self.model.params)}
        return {s: float(e.xreplace(subs)) for s, e in self.x0.items()}


def load_sbml(path, *, root=None, name=None, overridden=()) -> SBMLModel:
    """Read an SBML file into an :class:`SBMLModel` (see the module's notes for the semantics).

    Parameters
    ----------
    path : str or os.PathLike
        The SBML file; a relative path is taken relative to ``root`` when ``root`` is given.
    root : str or os.PathLike, optional
        A folder the file must lie in (after resolving symbolic links); default: no restriction.
    name : str, optional
        The model's name; default the SBML model's id.
    overridden : set of str, optional
        Ids that a PEtab condition table sets: a constant among them that an initial assignment
        defines is a parameter (the assignment gives its default value) instead of being substituted.

    Returns
    -------
    SBMLModel

    Raises
    ------
    InputError
        ``path`` or ``root`` is not a path, ``root`` is no folder, the file is outside ``root``,
        missing or not a regular file.
    SBMLError
        The file is too large, not UTF-8 XML, holds a document type declaration, nests too deep,
        is not valid SBML (libsbml's errors are counted by severity with their line numbers),
        or uses an SBML feature that is not supported (named with the element's id).

    Examples
    --------
    >>> from odeinfer.petab.sbml import load_sbml
    >>> sbml = load_sbml("model_Perelson_Science1996.xml")  # doctest: +SKIP
    >>> sbml.model.states  # doctest: +SKIP
    ('Tstar', 'V', 'Vin', 'Vni')
    """
    if name is not None and not isinstance(name, str):
        raise InputError(f"name: expected a string (the model's name) or None, got {type(name).__name__}")
    file = _resolve(path, root)
    data = _read(file, path)
    doc = _parse(data, path, file)
    return _Import(doc.getModel(), name, os.path.basename(os.fspath(path)), overridden).build()


SBML_PREFIX = "sbml"


def odeinfer_name(sbml_id: str) -> str:
    """The odeinfer name of an SBML (or PEtab) id: the id itself, or ``"sbml" + id`` when it starts with
    ``_`` (``_rateLaw1`` -> ``sbml_rateLaw1``), which SBML allows and odeinfer names do not."""
    return SBML_PREFIX + sbml_id if sbml_id.startswith("_") else sbml_id


# -- the file ----------------------------------------------------------------------------------
def _resolve(path, root):
    """The file's real path, refused outside ``root`` (symbolic links resolved)."""
    return resolve(path, root, what="SBML file")


def _read(file, shown):
    """At most MAX_BYTES + 1 bytes of a regular file, from one open file descriptor."""
    return read_bounded(file, shown, MAX_BYTES, lambda size: _too_large(shown, size), what="SBML file")


def _too_large(shown, size):
    raise SBMLError(f"path: {str(shown)!r} has {size} bytes; SBML files of at most {MAX_BYTES} bytes "
                    f"({MAX_BYTES // 2**20} MB) are read. Pass a smaller model")


class _Refused(Exception):
    pass


def _check_xml(data, shown):
    """Well-formed UTF-8 XML, no document type declaration, elements nested at most MAX_XML_DEPTH deep.

    expat reads the text without recursion, so that libsbml only ever sees shallow documents.
    """
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SBMLError(f"path: {str(shown)!r} is not UTF-8 text (invalid byte at offset {exc.start}); "
                        "SBML files are UTF-8 XML. Pass an SBML file") from None
    parser = xml.parsers.expat.ParserCreate()
    depth = [0]

    def start(_name, _attrs):
        depth[0] += 1
        if depth[0] > MAX_XML_DEPTH:
            raise _Refused(f"its elements nest more than {MAX_XML_DEPTH} levels deep")

    def end(_name):
        depth[0] -= 1

    def doctype(*_args):
        raise _Refused("it holds a document type declaration (<!DOCTYPE ...>), which SBML does not use and "
                       "odeinfer refuses (entities); remove it")

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.StartDoctypeDeclHandler = doctype
    try:
        parser.Parse(data, True)
    except _Refused as exc:
        raise SBMLError(f"path: {str(shown)!r} is refused: {exc}") from None
    except xml.parsers.expat.ExpatError as exc:
        raise SBMLError(f"path: {str(shown)!r} is not well-formed XML (line {exc.lineno}: "
                        f"{xml.parsers.expat.ErrorString(exc.code)}); pass an SBML file") from None


def _parse(data, shown, file=None):
    """libsbml's document, refused with its errors counted (never quoted: they may hold file text);
    a hierarchical model (package comp) flattened to core SBML (``file``: its real path)."""
    import libsbml

    _check_xml(data, shown)
    doc = libsbml.readSBMLFromString(data.decode("utf-8"))
    _check_errors(doc, shown)
    if doc.getLevel() < 2:
        raise SBMLError(f"path: {str(shown)!r} is SBML Level {doc.getLevel()}; Levels 2 and 3 are supported. "
                        "Convert it (e.g. with libsbml's SBMLDocument.setLevelAndVersion)")
    _refuse_packages(doc, shown, allowed=("comp",))
    if doc.getLevel() >= 3 and doc.isPackageEnabled("comp"):
        doc = _flatten(doc, shown, file)
        _refuse_packages(doc, shown, allowed=())
    return doc


def _check_errors(doc, shown, what="a valid SBML document"):
    import libsbml

    errors = [doc.getError(i) for i in range(doc.getNumErrors())]
    bad = [e for e in errors if e.getSeverity() >= libsbml.LIBSBML_SEV_ERROR]
    if bad or doc.getModel() is None:
        lines = sorted({e.getLine() for e in bad})
        ids = sorted({e.getErrorId() for e in bad})
        fatal = sum(e.getSeverity() >= libsbml.LIBSBML_SEV_FATAL for e in bad)
        found = (f"libsbml reported {len(bad)} error(s) ({fatal} fatal; libsbml error ids {ids[:10]}) on "
                 f"line(s) {lines[:10]}" if bad else "it holds no <model>")
        raise SBMLError(f"path: {str(shown)!r} is not {what}: {found}. Check the file with an "
                        "SBML validator (e.g. libsbml's) and fix it")


def _refuse_packages(doc, shown, allowed):
    ns = doc.getNamespaces()
    for i in range(ns.getNumNamespaces()):  # the packages the file declares (Level 3)
        uri = ns.getURI(i)
        if uri.startswith("http://www.sbml.org/sbml/level3/") and not uri.endswith("/core") \
                and doc.getPackageRequired(uri) and ns.getPrefix(i) not in allowed:
            raise SBMLError(f"path: {str(shown)!r} requires the SBML package {ns.getPrefix(i)!r}; SBML core and "
                            "hierarchical models (package comp, flattened) are supported. Convert the model to core "
                            "SBML")


def _flatten(doc, shown, file):
    """A comp model flattened to core SBML by libsbml's CompFlatteningConverter, after checking that every
    external model definition (recursively) names a file in the SBML file's own folder that passes the
    checks of the file itself (size, UTF-8 XML, no document type declaration, depth)."""
    import libsbml

    if file is None:
        raise SBMLError(f"path: {str(shown)!r} is a hierarchical model (package comp); it is read from a file only")
    folder = Path(file).parent
    _check_external(doc, shown, folder, {Path(file)})
    doc.setLocationURI(Path(file).as_uri())  # libsbml resolves relative sources against it
    props = libsbml.ConversionProperties()
    props.addOption("flatten comp", True)
    status = doc.convert(props)
    if status != libsbml.LIBSBML_OPERATION_SUCCESS:
        errors = [doc.getError(i) for i in range(doc.getNumErrors())]
        ids = sorted({e.getErrorId() for e in errors if e.getSeverity() >= libsbml.LIBSBML_SEV_ERROR})
        raise SBMLError(f"path: {str(shown)!r} is a hierarchical model (package comp) that libsbml could not flatten "
                        f"to core SBML (status {status}; libsbml error ids {ids[:10]}). Check the file with an SBML "
                        "validator (e.g. libsbml's) and fix it")
    _check_errors(doc, shown, "a valid SBML document once flattened")
    return doc


def _check_external(doc, shown, folder, seen):
    """Every external model definition of ``doc`` (and of the files they name) names a file in ``folder``."""
    import libsbml

    plugin = doc.getPlugin("comp")
    if plugin is None:
        return
    for emd in plugin.getListOfExternalModelDefinitions():
        source = emd.getSource()
        where = f"path: {str(shown)!r}: the external model definition {emd.getId()!r}"
        if (not source or urllib.parse.urlsplit(source).scheme or os.path.isabs(source)
                or any(c in source for c in "%?#\\")):
            raise SBMLError(f"{where} has a source that is no relative file name; odeinfer reads external models "
                            "only from files in the SBML file's folder, named relative to it")
        try:
            real = resolve(source, folder, what="external SBML model")
        except InputError:
            raise SBMLError(f"{where} names a file outside the SBML file's folder (symbolic links resolved); "
                            "odeinfer reads external models only from that folder. Move the file there") from None
        if real in seen:
            continue
        if len(seen) >= MAX_EXTERNAL_FILES:
            raise SBMLError(f"{where}: the model refers to more than {MAX_EXTERNAL_FILES} external files; "
                            "flatten it first")
        seen.add(real)
        data = _read(real, source)
        _check_xml(data, source)
        sub = libsbml.readSBMLFromString(data.decode("utf-8"))
        _check_errors(sub, source)
        _check_external(sub, source, folder, seen)


# -- math --------------------------------------------------------------------------------------
def _ast_names():
    import libsbml

    out = {}
    for n in dir(libsbml):
        if n.startswith("AST_"):  # AST_FUNCTION_FACTORIAL -> 'factorial', AST_RELATIONAL_LT -> 'lt'
            word = n[4:].lower()
            for prefix in ("function_", "relational_", "logical_", "constant_", "name_"):
                word = word.removeprefix(prefix)
            out[getattr(libsbml, n)] = word
    return out


class _Math:
    """libsbml ASTNode trees to sympy, walked node by node with a depth and a node budget."""

    def __init__(self, functions, symbols):
        import libsbml as L

        self.L = L
        self.functions = functions  # id -> (argument names, body ASTNode)
        self.symbols = symbols  # SBML id -> sympy symbol
        self.where, self.local, self.nodes, self.total = "", {}, 0, 0
        self.unary = {L.AST_FUNCTION_EXP: sp.exp, L.AST_FUNCTION_LN: sp.log, L.AST_FUNCTION_ABS: sp.Abs,
                      L.AST_FUNCTION_SIN: sp.sin, L.AST_FUNCTION_COS: sp.cos, L.AST_FUNCTION_TAN: sp.tan,
                      L.AST_FUNCTION_SINH: sp.sinh, L.AST_FUNCTION_COSH: sp.cosh, L.AST_FUNCTION_TANH: sp.tanh,
                      L.AST_FUNCTION_ARCSIN: sp.asin, L.AST_FUNCTION_ARCCOS: sp.acos,
                      L.AST_FUNCTION_ARCTAN: sp.atan, L.AST_FUNCTION_ARCSINH: sp.asinh,
                      L.AST_FUNCTION_ARCCOSH: sp.acosh, L.AST_FUNCTION_ARCTANH: sp.atanh}
        self.relations = {L.AST_RELATIONAL_EQ: sp.Eq, L.AST_RELATIONAL_NEQ: sp.Ne, L.AST_RELATIONAL_GT: sp.Gt,
                          L.AST_RELATIONAL_GEQ: sp.Ge, L.AST_RELATIONAL_LT: sp.Lt, L.AST_RELATIONAL_LEQ: sp.Le}
        self.logical = {L.AST_LOGICAL_AND: sp.And, L.AST_LOGICAL_OR: sp.Or, L.AST_LOGICAL_XOR: sp.Xor}
        self.constants = {L.AST_CONSTANT_PI: sp.pi, L.AST_CONSTANT_E: sp.E, L.AST_CONSTANT_TRUE: sp.true,
                          L.AST_CONSTANT_FALSE: sp.false, L.AST_NAME_TIME: T_SYMBOL,
                          L.AST_NAME_AVOGADRO: sp.Float(_AVOGADRO, 17)}
        self.refused = {L.AST_FUNCTION_DELAY: "the delay csymbol (delay differential equations)",
                        L.AST_FUNCTION_RATE_OF: "the rateOf csymbol",
                        L.AST_FUNCTION_FLOOR: "floor (not differentiable; sensitivities would be wrong)",
                        L.AST_FUNCTION_CEILING: "ceiling (not differentiable; sensitivities would be wrong)"}
        self.kind = _ast_names()
        self.supported = {L.AST_FUNCTION_PIECEWISE, L.AST_LOGICAL_NOT, L.AST_PLUS, L.AST_TIMES, L.AST_MINUS,
                          L.AST_DIVIDE, L.AST_POWER, L.AST_FUNCTION_POWER, L.AST_FUNCTION_ROOT, L.AST_FUNCTION_LOG,
                          L.AST_FUNCTION_MIN, L.AST_FUNCTION_MAX, *self.relations, *self.logical, *self.unary}

    def convert(self, node, where, local=None):
        """The sympy expression of ``node`` (``local``: kinetic-law parameters, id -> number)."""
        if node is None:
            raise SBMLError(f"{where} has no math; give it a <math> element")
        self.where, self.local, self.nodes = where, local or {}, 0
        out = self.node(node, None, 0, ())
        if not_finite(out):  # NaN only where a piecewise without otherwise is undefined
            self.fail("the math evaluates to a number that is not finite (a division by zero or an overflow, or a "
                      "piecewise without otherwise none of whose conditions can hold)", "fix the math")
        return out

    def fail(self, what, fix):
        raise SBMLError(f"{self.where}: {what}; {fix}")

    def node(self, node, env, depth, calls):
        """``env``: the arguments of the function definition being inlined (None outside one)."""
        L = self.L
        self.nodes += 1
        self.total += 1
        if depth > MAX_MATH_DEPTH:
            self.fail(f"the math nests more than {MAX_MATH_DEPTH} levels deep (counting inlined function "
                      "definitions)", "simplify it")
        if self.nodes > MAX_MATH_NODES:
            self.fail(f"the math has more than {MAX_MATH_NODES} nodes (counting inlined function definitions)",
                      "simplify it")
        if self.total > MAX_DOCUMENT_NODES:
            self.fail(f"the model's math has more than {MAX_DOCUMENT_NODES} nodes in all (counting inlined "
                      "function definitions)", "simplify it")
        ty = node.getType()
        if ty == L.AST_INTEGER:
            return sp.Integer(node.getInteger())
        if ty in (L.AST_REAL, L.AST_REAL_E):
            return self.number(node.getReal())
        if ty == L.AST_RATIONAL:
            if node.getDenominator() == 0:
                self.fail("a rational number has the denominator 0", "fix the number")
            return sp.Rational(node.getNumerator(), node.getDenominator())
        if ty == L.AST_NAME:
            return self.name(node.getName(), env)
        if ty in self.constants:
            return self.constants[ty]
        if ty in self.refused:
            self.fail(f"{self.refused[ty]} is not supported", "rewrite the model without it")
        if ty == L.AST_FUNCTION:
            return self.call(node, env, depth, calls)
        if ty not in self.supported:
            self.fail(f"the MathML element {self.kind.get(ty, f'of libsbml type {ty}')!r} is not supported",
                      "rewrite the math with arithmetic, exp, ln, log, root, abs, min, max, trigonometric "
                      "functions and piecewise")
        args = [self.node(node.getChild(i), env, depth + 1, calls) for i in range(node.getNumChildren())]
        if ty == L.AST_FUNCTION_PIECEWISE:
            return self.piecewise(args)
        if ty in self.relations:
            self.count(ty, args, 2, None)
            nums = [self.real(ty, a) for a in args]
            return sp.And(*(self.relations[ty](a, b) for a, b in pairwise(nums)))
        if ty in self.logical:
            return self.logical[ty](*(self.boolean(ty, a) for a in args))
        if ty == L.AST_LOGICAL_NOT:
            self.count(ty, args, 1, 1)
            return sp.Not(self.boolean(ty, args[0]))
        nums = [self.real(ty, a) for a in args]
        if ty == L.AST_PLUS:
            return sp.Add(*nums)
        if ty == L.AST_TIMES:
            return sp.Mul(*nums)
        if ty == L.AST_MINUS:
            self.count(ty, nums, 1, 2)
            return -nums[0] if len(nums) == 1 else nums[0] - nums[1]
        if ty == L.AST_DIVIDE:
            self.count(ty, nums, 2, 2)
            return nums[0] / nums[1]  # a division by zero is refused by convert
        if ty in (L.AST_POWER, L.AST_FUNCTION_POWER):
            self.count(ty, nums, 2, 2)
            return nums[0] ** self.exponent(nums[1])
        if ty == L.AST_FUNCTION_ROOT:  # libsbml gives (degree, x), the degree 2 when none is written
            self.count(ty, nums, 1, 2)
            return sp.sqrt(nums[0]) if len(nums) == 1 else nums[1] ** self.exponent(1 / nums[0])
        if ty == L.AST_FUNCTION_LOG:  # (base, x), the base 10 when none is written
            self.count(ty, nums, 1, 2)
            return sp.log(nums[0], 10) if len(nums) == 1 else sp.log(nums[1], nums[0])
        if ty in (L.AST_FUNCTION_MIN, L.AST_FUNCTION_MAX):
            self.count(ty, nums, 1, None)
            return (sp.Min if ty == L.AST_FUNCTION_MIN else sp.Max)(*nums)
        self.count(ty, nums, 1, 1)  # the functions of one argument are left
        return self.unary[ty](nums[0])

    @staticmethod
    def exponent(e):
        """An exact exponent with large terms as a float, so that sympy does not compute huge exact numbers."""
        if isinstance(e, sp.Rational) and max(abs(e.p), e.q) > _MAX_EXACT_EXPONENT:
            return sp.Float(float(e), 17)
        return e

    def number(self, value):
        if not math.isfinite(value):
            self.fail(f"the number {value} is not finite", "use a finite number")
        return sp.Float(float(value), 17)  # as odeinfer.model.traced.to_expr

    def name(self, ident, env):
        if env is not None:  # inside a function definition: its arguments only
            if ident in env:
                return env[ident]
            self.fail(f"a function definition uses {ident!r}, which is not one of its arguments",
                      "pass it as an argument (SBML function definitions see their arguments only)")
        if ident in self.local:
            return self.local[ident]
        if ident in self.symbols:
            return self.symbols[ident]
        self.fail(f"the math uses the id {ident!r}, which is no compartment, species, parameter or reaction "
                  "of the model", "define it or fix the id")

    def call(self, node, env, depth, calls):
        fid = node.getName()
        if fid not in self.functions:
            self.fail(f"the math calls {fid!r}, which is no function definition of the model",
                      "define it in listOfFunctionDefinitions or fix the id")
        if fid in calls:
            self.fail(f"the function definition {fid!r} calls itself (through {' -> '.join(calls + (fid,))})",
                      "SBML function definitions must not be recursive")
        params, body = self.functions[fid]
        args = [self.node(node.getChild(i), env, depth + 1, calls) for i in range(node.getNumChildren())]
        if len(args) != len(params):
            self.fail(f"the function {fid!r} takes {len(params)} argument(s), the math passes {len(args)}",
                      "pass one value per argument")
        return self.node(body, dict(zip(params, args)), depth + 1, calls + (fid,))

    def piecewise(self, args):
        """SBML's piecewise; without an otherwise it is undefined where no condition holds: NaN there
        (sympy drops that last piece when the conditions provably cover every case)."""
        pieces = [(self.real(None, v), self.boolean(None, c)) for v, c in zip(args[0::2], args[1::2])]
        otherwise = self.real(None, args[-1]) if len(args) % 2 else sp.nan
        return sp.Piecewise(*pieces, (otherwise, True))

    def count(self, ty, args, low, high):
        if len(args) < low or (high is not None and len(args) > high):
            want = f"{low}" if low == high else f"{low} to {high}" if high else f"at least {low}"
            self.fail(f"{self.kind.get(ty, ty)!r} has {len(args)} argument(s), expected {want}",
                      "fix the math")

    def real(self, ty, e):
        if not isinstance(e, sp.Expr):
            where = f"an argument of {self.kind.get(ty, ty)!r}" if ty is not None else "a value of a piecewise"
            self.fail(f"{where} is a condition (true/false), not a number", "use a number there")
        return e

    def boolean(self, ty, e):
        if not isinstance(e, sp.logic.boolalg.Boolean) or isinstance(e, sp.Expr):  # a Symbol is both
            where = f"an argument of {self.kind.get(ty, ty)!r}" if ty is not None else "a condition of a piecewise"
            self.fail(f"{where} is a number, not a condition", "use a comparison such as t > T there")
        return e


# -- the model ------------------------------------------------------------------------------------
class _TreeSize:
    """Size and depth of sympy expressions as trees, computed once per distinct subexpression (memoized,
    without recursion): substitution shares subexpressions, so that a tree may be exponentially larger
    than the objects it is made of, and so would any later walk of it be."""

    def __init__(self, label):
        self.memo, self.label = {}, label

    def check(self, e, what):
        size, depth = self(e)
        if size > MAX_EXPR_NODES or depth > MAX_EXPR_DEPTH:
            raise SBMLError(f"{self.label}: {what} has {size} nodes nested {depth} levels deep after substituting "
                            f"the assignment rules and function definitions; at most {MAX_EXPR_NODES} nodes and "
                            f"{MAX_EXPR_DEPTH} levels are allowed. Simplify the model")

    def __call__(self, e):
        memo, stack = self.memo, [(e, False)]
        while stack:
            node, ready = stack.pop()
            if node in memo:
                continue
            if not node.args:
                memo[node] = (1, 0)
            elif ready:
                memo[node] = (1 + sum(memo[a][0] for a in node.args), 1 + max(memo[a][1] for a in node.args))
            else:
                stack.append((node, True))
                stack.extend((a, False) for a in node.args if a not in memo)
        return memo[e]


class _Substitution:
    """Definitions (id -> expression) substituted recursively, with a cycle check and bounds on the chain's
    depth and on the size of the results."""

    def __init__(self, defs, what, size):
        self.defs, self.what, self.done, self.size = defs, what, {}, size

    def expr(self, e, chain=()):
        subs = {s: self.value(s.name, chain) for s in e.free_symbols if s.name in self.defs}
        return e.xreplace(subs) if subs else e

    def value(self, ident, chain=()):
        if ident in self.done:
            return self.done[ident]
        if ident in chain:
            loop = " -> ".join(chain[chain.index(ident):] + (ident,))
            raise SBMLError(f"{self.size.label}: the {self.what} are circular ({loop}); SBML forbids cycles, "
                            "break this one")
        if len(chain) >= MAX_CHAIN:
            raise SBMLError(f"{self.size.label}: the {self.what} nest more than {MAX_CHAIN} levels deep "
                            f"(at {ident!r}); simplify them")
        out = self.done[ident] = self.expr(self.defs[ident], chain + (ident,))
        self.size.check(out, f"the value of {ident!r}")
        return out


class _Import:
    def __init__(self, m, name, file_name, overridden=()):
        self.m = m
        self.overridden = frozenset(overridden)
        self.label = f"{file_name!r}: " + (f"SBML model {m.getId()!r}" if m.getId() else "the SBML model")
        self.name = name if name is not None else (m.getId() or "sbml")

    def fail(self, what, fix):
        raise SBMLError(f"{self.label}: {what}; {fix}")

    def build(self) -> SBMLModel:
        import libsbml as L

        m = self.m
        self.refuse_unsupported()
        renamed = self.rename_ids()
        comps, species, pars = (list(m.getListOfCompartments()), list(m.getListOfSpecies()),
                                list(m.getListOfParameters()))
        reactions = list(m.getListOfReactions())
        for kind, items in (("compartment", comps), ("species", species), ("parameter", pars),
                            ("reaction", reactions)):
            for item in items:
                self.check_id(kind, item.getId())
        ids = [x.getId() for x in comps + species + pars + reactions]
        symbols = dict(zip(ids, symbols_for(ids)))
        conv = _Math(self.functions(), symbols)
        rules = {kind: {r.getVariable(): conv.convert(r.getMath(), f"{self.label}: the {word} of {r.getVariable()!r}")
                        for r in m.getListOfRules() if r.getTypeCode() == kind}
                 for kind, word in ((L.SBML_RATE_RULE, "rate rule"), (L.SBML_ASSIGNMENT_RULE, "assignment rule"))}
        rate, assign = rules[L.SBML_RATE_RULE], rules[L.SBML_ASSIGNMENT_RULE]
        initial = {a.getSymbol(): conv.convert(a.getMath(), f"{self.label}: the initial assignment of "
                                                             f"{a.getSymbol()!r}")
                   for a in m.getListOfInitialAssignments()}
        unknown = sorted((set(rate) | set(assign) | set(initial)) - set(ids))
        if unknown:
            self.fail(f"rules or initial assignments set {unknown}, which are no compartment, species or "
                      "parameter (a species reference's stoichiometry?)",
                      "variable stoichiometry is not supported: use constant stoichiometries")
        evented = {a.getVariable() for e in m.getListOfEvents() for a in e.getListOfEventAssignments()}
        states, params, derived = self.classify(species + comps + pars, rate, assign, initial, evented)
        fluxes = self.fluxes(species, reactions, set(rate) | set(assign))
        laws = {r.getId(): self.kinetic_law(conv, r) for r in reactions}  # local parameters as numbers

        # initial values: everything at t = 0 in terms of the parameters
        raw = {i: self.raw_initial(item, symbols) for item in species + comps + pars
               if (i := item.getId()) in states or i in params or i in derived}
        raw.update({i: initial[i] for i in params if i in initial})  # a constant a PEtab condition sets
        lacking = [i for i in states + derived if i not in initial and raw.get(i) is None]
        if lacking:
            self.fail(f"{lacking[0]!r} has no initial value (no initialAssignment, initialConcentration, "
                      "initialAmount, value or size)", "give it one")
        at0 = {T_SYMBOL: sp.Integer(0)}
        size = _TreeSize(self.label)
        init = _Substitution({**{i: e.xreplace(at0) for i, e in {**laws, **assign}.items()},
                              **{i: initial.get(i, raw.get(i)) for i in states + derived}},
                             "initial assignments and assignment rules", size)
        x0 = {s: init.value(s).xreplace(at0) for s in states}
        psyms = {symbols[p] for p in params}
        for s, e in x0.items():
            self.only(e, psyms, f"the initial value of {s!r}")
            self.defined(e, f"the initial value of {s!r}", " at t = 0")
        values = self.defaults(params, raw, init, symbols)

        # the derivatives, with the assignment rules and the constants substituted
        dyn = _Substitution({**laws, **assign, **{d: init.value(d).xreplace(at0) for d in derived}},
                            "assignment rules", size)
        allowed = psyms | {symbols[x] for x in states} | {T_SYMBOL}
        exprs = []
        for s in states:
            if s in rate:
                rhs = dyn.expr(rate[s])
            elif s in evented and (m.getSpecies(s) is None or m.getSpecies(s).getBoundaryCondition()):
                rhs = sp.Integer(0)  # a boundary species or parameter that only events change
            else:
                rhs = sp.Add(*(n * dyn.value(rid) for n, rid in fluxes.get(s, ())))
                sp_ = m.getSpecies(s)
                if not sp_.getHasOnlySubstanceUnits():
                    rhs = rhs / dyn.expr(symbols[sp_.getCompartment()])
            size.check(rhs, f"the derivative of {s!r}")
            self.defined(rhs, f"the derivative of {s!r}", "")
            self.only(rhs, allowed, f"the derivative of {s!r}")
            exprs.append(rhs)
        expressions = {i: dyn.value(i) for i in list(assign) + derived}
        doses, times, events = self.events(conv, dyn, {s: symbols[s] for s in states}, psyms, size, values)
        model = Model(self.name, tuple(states), tuple(params), tuple(exprs))
        return SBMLModel(model, x0, values, expressions, doses, renamed, times, events, self.state_events)

    def events(self, conv, dyn, states, psyms, size, values):
        """``(doses, dose_times, dose_events)``: the events as Doses, one per assignment of an event
        triggered by ``time >= T`` (or ``time > T``), no delay and no priority; ``s = s + amount`` is
        a bolus, ``s = value`` (``value`` free of ``s``) a reset (``mode="set"``), ``amount`` and
        ``value`` expressions of the parameters. ``T`` is a number > 0 or an expression of the
        parameters: then the Dose's time is its value at the SBML values and ``dose_times`` holds its
        text (else None); ``dose_events`` the event ids."""
        from odeinfer.data import Dose
        from odeinfer.model.equations import format_expr

        out, times, ids = [], [], []
        self.state_events = []
        for k, e in enumerate(self.m.getListOfEvents()):
            eid = e.getId() or f"#{k + 1}"
            where = f"event {eid!r}"
            if e.isSetDelay():
                self.fail(f"{where} has a delay; delayed events are not supported",
                          "events are read as doses at a fixed time: remove the delay and trigger at the dose time")
            if e.getLevel() >= 3 and e.isSetPriority():
                self.fail(f"{where} has a priority; event priorities are not supported", "remove the priority")
            trigger = e.getTrigger()
            if trigger is None or trigger.getMath() is None:
                self.fail(f"{where} has no trigger", "give it a trigger 'time >= T'")
            cond = conv.convert(trigger.getMath(), f"{self.label}: the trigger of {where}")
            relations = (sp.GreaterThan, sp.StrictGreaterThan, sp.LessThan, sp.StrictLessThan)
            if not isinstance(cond, relations):
                self.fail(f"{where} has a trigger that is not one comparison (a < b, a <= b, a > b or a >= b); "
                          "events are supported with such triggers only", "split it into one event per comparison")
            time_form = (isinstance(cond, (sp.GreaterThan, sp.StrictGreaterThan)) and cond.lhs == T_SYMBOL
                         and not dyn.expr(cond.rhs).free_symbols - psyms) or (
                isinstance(cond, (sp.LessThan, sp.StrictLessThan)) and cond.rhs == T_SYMBOL
                and not dyn.expr(cond.lhs).free_symbols - psyms)
            if not (time_form and self.dose_assignments(e, eid, conv, dyn, states, psyms)):
                self.state_events.append(self.state_event(e, eid, cond, conv, dyn, states, psyms, size))
                continue
            when = dyn.expr(cond.rhs if cond.lhs == T_SYMBOL else cond.lhs)
            text = None
            if when.free_symbols:
                if not when.free_symbols <= psyms:
                    self.fail(f"the trigger time of {where} depends on "
                              f"{sorted(x.name for x in when.free_symbols - psyms)}, which are no parameters; "
                              "events are supported at fixed times only",
                              "give the trigger a number or a parameter (time >= T)")
                size.check(when, f"the trigger time of {where}")
                text = format_expr(when)
                when = when.xreplace({x: sp.Float(values[x.name], 17) for x in when.free_symbols})
            if not (when.is_number and when.is_real and math.isfinite(float(when)) and float(when) > 0):
                self.fail(f"the trigger time of {where} is not a positive number"
                          + (" at the SBML values of its parameters" if text else "")
                          + "; events are supported as doses at fixed times > 0 only",
                          "give the trigger a number or a parameter T > 0 (time >= T)")
            for a in e.getListOfEventAssignments():
                var = a.getVariable()
                if var not in states:
                    self.fail(f"{where} assigns {var!r}, which is no state; events are supported as doses of "
                              "states only", "remove the assignment or make it a dose of a state")
                if a.getMath() is None:
                    self.fail(f"the assignment of {var!r} in {where} has no math", "give it one")
                value = dyn.expr(conv.convert(a.getMath(), f"{self.label}: the assignment of {var!r} in {where}"))
                mode = "add" if states[var] in value.free_symbols else "set"
                amount = value - states[var] if mode == "add" else value
                size.check(amount, f"the amount of {var!r} in {where}")
                out.append(Dose(float(when), var, float(amount) if amount.is_number else format_expr(amount), mode))
                times.append(text)
                ids.append(eid)
        return tuple(out), tuple(times), tuple(ids)

    def dose_assignments(self, e, eid, conv, dyn, states, psyms):
        """Are all assignments of event ``e`` doses (``s = s + amount`` or ``s = value``, ``amount`` and
        ``value`` expressions of the parameters)? Else (a state-dependent change such as ``s = 2 s``) the
        event runs as a state event at its trigger time. An assignment that is wrong either way says True,
        so that the dose path reports it."""
        for a in e.getListOfEventAssignments():
            var = a.getVariable()
            if var not in states or a.getMath() is None:
                return True
            value = dyn.expr(conv.convert(a.getMath(), f"{self.label}: the assignment of {var!r} in event {eid!r}"))
            amount = value - states[var] if states[var] in value.free_symbols else value
            if not amount.free_symbols <= psyms:
                return False
        return True

    def state_event(self, e, eid, cond, conv, dyn, states, psyms, size):
        """The :class:`~odeinfer.Event` of SBML event ``e`` whose trigger ``cond`` (sympy) depends on the states."""
        from odeinfer.likelihood.events import Event
        from odeinfer.model.equations import format_expr

        where = f"event {eid!r}"
        allowed = set(states.values()) | psyms | {T_SYMBOL}
        rel = type(cond)(dyn.expr(cond.lhs), dyn.expr(cond.rhs))
        if not isinstance(rel, (sp.GreaterThan, sp.StrictGreaterThan, sp.LessThan, sp.StrictLessThan)):
            self.fail(f"the trigger of {where} is constant ({rel}) once the assignment rules are substituted",
                      "give it a comparison that changes along the trajectory")
        if rel.free_symbols - allowed:
            self.fail(f"the trigger of {where} uses {sorted(x.name for x in rel.free_symbols - allowed)}, which are "
                      "no states or parameters", "write it in the states, the parameters and time")
        size.check(rel.lhs - rel.rhs, f"the trigger of {where}")
        assign = {}
        for a in e.getListOfEventAssignments():
            var = a.getVariable()
            if var not in states:
                self.fail(f"{where} assigns {var!r}, which is no state; events are supported on states only",
                          "remove the assignment or make the target a state")
            if a.getMath() is None:
                self.fail(f"the assignment of {var!r} in {where} has no math", "give it one")
            value = dyn.expr(conv.convert(a.getMath(), f"{self.label}: the assignment of {var!r} in {where}"))
            if value.free_symbols - allowed:
                self.fail(f"the assignment of {var!r} in {where} uses "
                          f"{sorted(x.name for x in value.free_symbols - allowed)}, which are no states or parameters",
                          "write it in the states, the parameters and time")
            size.check(value, f"the assignment of {var!r} in {where}")
            assign[states[var].name] = float(value) if value.is_number else format_expr(value)
        if not assign:
            self.fail(f"{where} assigns nothing", "remove it or give it an assignment")
        trigger = e.getTrigger()
        initial = trigger.getInitialValue() if e.getLevel() >= 3 and trigger.isSetInitialValue() else True
        return Event(format_expr(rel), assign, bool(initial), eid)

    def classify(self, items, rate, assign, initial, evented):
        """(states, params, derived constants) in document order; the rest are assignment-rule targets.
        A boundary species or a parameter that is not constant and that events assign (``evented``) is a
        state (without a rate rule its derivative is 0)."""
        import libsbml as L

        states, params, derived = [], [], []
        for item in items:  # species, compartments, parameters
            i = item.getId()
            if i in rate:
                states.append(i)
            elif i in assign:
                continue
            elif item.getTypeCode() == L.SBML_SPECIES and not (item.getConstant() or item.getBoundaryCondition()):
                states.append(i)
            elif i in evented and item.getTypeCode() in (L.SBML_SPECIES, L.SBML_PARAMETER) and not item.getConstant():
                states.append(i)
            elif i in initial and i not in self.overridden:
                derived.append(i)
            else:
                params.append(i)
        if not states:
            self.fail("it has no state (no species or rate rule changes in time)", "odeinfer needs an ODE")
        order = {i: k for k, i in enumerate(x.getId() for x in self.m.getListOfCompartments())}
        order.update({i: len(order) + k for k, i in enumerate(x.getId() for x in self.m.getListOfSpecies())})
        params.sort(key=lambda i: order.get(i, len(order)))  # compartments, species, parameters (stable)
        return states, params, derived

    def fluxes(self, species, reactions, varying):
        """{species: [(signed stoichiometry, reaction id), ...]} over the reactants and products."""
        for s in species:
            if not s.getHasOnlySubstanceUnits() and s.getCompartment() in varying:
                self.fail(f"species {s.getId()!r} is a concentration in compartment {s.getCompartment()!r}, "
                          "whose size changes in time (a rule sets it); this is not supported",
                          "give the compartment a constant size or set hasOnlySubstanceUnits=\"true\"")
        known = {s.getId() for s in species}
        out = {}
        for r in reactions:
            for sign, refs in ((-1, r.getListOfReactants()), (1, r.getListOfProducts())):
                for ref in refs:
                    if ref.getSpecies() not in known:
                        self.fail(f"reaction {r.getId()!r} refers to the species {ref.getSpecies()!r}, which the "
                                  "model does not define", "define it or fix the id")
                    out.setdefault(ref.getSpecies(), []).append((sign * self.stoichiometry(ref, r.getId()),
                                                                 r.getId()))
        return out

    def rename_ids(self):
        """Give the ids with a leading ``_`` (valid SBML, no odeinfer names) the name :func:`odeinfer_name`
        everywhere in the model (libsbml renames every reference: math, rules, species references, ...);
        ``{SBML id: name}``. A name that is already an id of the model is refused."""
        import libsbml as L

        m = self.m
        units = (L.SBML_UNIT_DEFINITION, L.SBML_UNIT)  # unit ids are another namespace, unused here
        elements = [m, *(e for e in m.getListOfAllElements() if e.getTypeCode() not in units)]
        taken = {e.getIdAttribute() for e in elements if e.isSetIdAttribute()}
        renamed = {}
        for i in sorted(taken):
            if i.startswith("_"):
                new = odeinfer_name(i)
                if new in taken:
                    self.fail(f"the id {i!r} is no odeinfer name (it starts with '_') and its odeinfer name {new!r} "
                              "is already an id of the model", f"rename {i!r} or {new!r} in the SBML file")
                renamed[i] = new
        if renamed:
            for e in elements:
                if e.isSetIdAttribute() and e.getIdAttribute() in renamed:
                    e.setIdAttribute(renamed[e.getIdAttribute()])
            for e in elements:
                for old, new in renamed.items():
                    e.renameSIdRefs(old, new)
        return renamed

    # -- checks ---------------------------------------------------------------------------------
    def check_id(self, kind, ident):
        try:
            valid = validate_names("id", [ident]) == (ident,)
        except ModelDefinitionError:
            valid = False
        if not valid:
            why = ("it is reserved for time" if ident == "t" else "it is a Python keyword" if keyword.iskeyword(ident)
                   else "it starts with '_'" if ident.startswith("_") else "it is not an ASCII identifier")
            self.fail(f"the {kind} id {ident!r} cannot be an odeinfer name: {why}",
                      "rename the id in the SBML file (odeinfer uses the SBML ids as names, unchanged)")

    def refuse_unsupported(self):
        import libsbml as L

        m = self.m
        for r in m.getListOfRules():
            if r.getTypeCode() == L.SBML_ALGEBRAIC_RULE:
                rid = r.getIdAttribute()
                self.fail(f"it has an algebraic rule{f' ({rid!r})' if rid else ''}; algebraic rules "
                          "(differential-algebraic equations) are not supported",
                          "replace it by an assignment rule solved for one variable")
        if m.getLevel() >= 3 and m.isSetConversionFactor():
            self.fail(f"it sets the conversion factor {m.getConversionFactor()!r}; conversion factors are not "
                      "supported", "fold the factor into the kinetic laws")
        for s in m.getListOfSpecies():
            if m.getLevel() >= 3 and s.isSetConversionFactor():
                self.fail(f"species {s.getId()!r} has the conversion factor {s.getConversionFactor()!r}; "
                          "conversion factors are not supported", "fold the factor into the kinetic laws")
        for r in m.getListOfReactions():
            if r.isSetFast() and r.getFast():
                self.fail(f"reaction {r.getId()!r} is fast (fast=\"true\"); fast reactions are not supported",
                          "set fast=\"false\" or replace the fast equilibrium by an assignment rule")

    def defined(self, e, what, when):
        """Refuse ``e`` when a piecewise without otherwise has made it NaN outright (no condition can hold)."""
        if not_finite(e):
            self.fail(f"{what} is undefined{when}: a piecewise without otherwise none of whose conditions can hold "
                      "(or a division by zero)", "add an <otherwise> to the piecewise or fix its conditions")

    def only(self, e, allowed, what):
        extra = sorted(s.name for s in e.free_symbols - allowed)
        if extra:
            self.fail(f"{what} depends on {extra}, which are no parameters at that point",
                      "initial values may use parameters, constants and other initial values only")

    # -- pieces ---------------------------------------------------------------------------------------
    def functions(self):
        out = {}
        for fd in self.m.getListOfFunctionDefinitions():
            self.check_id("function definition", fd.getId())
            if fd.getMath() is None or not fd.getMath().isLambda() or fd.getBody() is None:
                self.fail(f"the function definition {fd.getId()!r} is not a lambda with a body", "fix its math")
            out[fd.getId()] = (tuple(fd.getArgument(k).getName() for k in range(fd.getNumArguments())),
                               fd.getBody())
        return out

    def kinetic_law(self, conv, r):
        rid = r.getId()
        law = r.getKineticLaw()
        if law is None:
            self.fail(f"reaction {rid!r} has no kinetic law", "give it one")
        local = {}
        for p in list(law.getListOfParameters()) + list(getattr(law, "getListOfLocalParameters", list)()):
            if not p.isSetValue():
                self.fail(f"the local parameter {p.getId()!r} of reaction {rid!r} has no value", "give it one")
            local[p.getId()] = self.finite(p.getValue(), f"the local parameter {p.getId()!r} of reaction {rid!r}")
        return conv.convert(law.getMath(), f"{self.label}: the kinetic law of reaction {rid!r}", local)

    def stoichiometry(self, ref, rid):
        sid = ref.getSpecies()
        if ref.getLevel() < 3 and ref.isSetStoichiometryMath():
            self.fail(f"species {sid!r} in reaction {rid!r} has a stoichiometryMath; variable stoichiometry "
                      "is not supported", "use a constant stoichiometry")
        if ref.getLevel() >= 3 and ref.isSetConstant() and not ref.getConstant():
            self.fail(f"species {sid!r} in reaction {rid!r} has a non-constant stoichiometry; variable "
                      "stoichiometry is not supported", "use a constant stoichiometry (constant=\"true\")")
        if ref.getLevel() >= 3 and not ref.isSetStoichiometry():
            return sp.Integer(1)
        return self.finite(ref.getStoichiometry(), f"the stoichiometry of species {sid!r} in reaction {rid!r}")

    def raw_initial(self, item, symbols):
        """The initial value an element declares itself (None if it declares none)."""
        import libsbml as L

        i = item.getId()
        if item.getTypeCode() == L.SBML_SPECIES:
            size = symbols.get(item.getCompartment())
            if size is None:
                self.fail(f"species {i!r} lies in {item.getCompartment()!r}, which is no compartment", "fix it")
            amounts = item.getHasOnlySubstanceUnits()
            if item.isSetInitialConcentration():
                c = self.finite(item.getInitialConcentration(), f"the initial concentration of species {i!r}")
                return c * size if amounts else c
            if item.isSetInitialAmount():
                a = self.finite(item.getInitialAmount(), f"the initial amount of species {i!r}")
                return a if amounts else a / size
            return None
        set_ = item.isSetSize() if item.getTypeCode() == L.SBML_COMPARTMENT else item.isSetValue()
        if not set_:
            return None
        value = item.getSize() if item.getTypeCode() == L.SBML_COMPARTMENT else item.getValue()
        return self.finite(value, f"the value of {i!r}")

    def finite(self, v, what):
        """A number of the file as sympy: an integer when it is one (exactly representable), else a float."""
        if not math.isfinite(v):
            self.fail(f"{what} is {v}", "give a finite number")
        return sp.Integer(int(v)) if float(v).is_integer() and abs(v) < 2**53 else sp.Float(v, 17)

    def defaults(self, params, raw, init, symbols):
        """Numbers for the parameters (a species' default may use a compartment's size)."""
        missing = [p for p in params if raw.get(p) is None]
        if missing:
            self.fail(f"{missing} have no value (no value, size, initial amount/concentration or initial "
                      "assignment)", "give each one")
        values, pending = {}, {p: init.expr(raw[p]) for p in params}
        for _ in range(10):  # a species' default uses a size, which may use another default, ...
            known = {symbols[p]: v for p, v in values.items()}
            pending = {p: e.xreplace(known) for p, e in pending.items()}
            for p, e in pending.items():
                if not e.free_symbols:
                    values[p] = float(e)
                    if not math.isfinite(values[p]):
                        self.defined(sp.nan, f"the value of {p!r}", "")
            pending = {p: e for p, e in pending.items() if e.free_symbols}
            if not pending:
                return {p: values[p] for p in params}
        self.fail(f"the default values of {sorted(pending)[:10]} depend on each other", "give them numbers")
