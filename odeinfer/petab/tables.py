"""PEtab v1 problems as odeinfer fit problems: :func:`load` and :class:`PetabProblem`.

A PEtab problem is a YAML file naming one SBML model and the condition, observable,
measurement and parameter tables (tab-separated). :func:`load` reads them into a
:class:`~odeinfer.FitProblem` whose negative log-likelihood is PEtab's (all constants kept).

What becomes what
-----------------
SBML model
    :func:`odeinfer.petab.sbml.load_sbml` (read its notes): states, parameters, assignment
    rules (kept as expressions), initial values (expressions of the parameters; they become
    the problem's default ``x0`` strings).
observables table
    ``observableFormula`` and ``noiseFormula`` are read with odeinfer's safe expression parser
    (no ``eval``; PEtab's ``^`` is a power). They may name states, SBML parameters, targets of
    assignment rules (their expression is substituted), the placeholders
    ``observableParameter<n>_<observableId>`` / ``noiseParameter<n>_<observableId>``, and ids of
    the parameter table that are no SBML parameters; the last two kinds become the model's
    observable parameters (:meth:`Model.observe` ``params=``). ``observableTransformation``
    (lin, log, log10; default lin) is the noise scale, ``noiseDistribution`` (normal, laplace;
    default normal) the noise model.
measurement table
    Rows are grouped into experiments by ``(preequilibrationConditionId,
    simulationConditionId)``; each is one :class:`~odeinfer.Data` (columns: observable ids,
    replicates allowed) starting at ``t0 = 0``, named after its simulation condition
    (``"<preeq>-><sim>"`` with a pre-equilibration). ``observableParameters`` /
    ``noiseParameters`` (``;``-separated numbers or parameter ids, one per placeholder) set the
    placeholders through the experiment's :class:`~odeinfer.Condition`. Where one observable's
    overrides differ between rows of one experiment (e.g. a noise sd per time point), the
    experiment is split into parts with one set of overrides per observable, named
    ``"<name>#1"``, ``"<name>#2"``, ... in the order of first appearance (each part is solved on
    its own). Placeholders of observables an experiment does not measure are set to 1 there
    (they enter no term). ``time = inf`` is a steady-state measurement (:class:`~odeinfer.Data`
    ``steady_state=True``): taken at the steady state the model reaches under the simulation
    condition from the end of the experiment's finite-time trajectory (its last finite
    measurement or event; without any, its start, after the pre-equilibration if it has one),
    with the steady state's sensitivities (:class:`~odeinfer.Objective`).
condition table
    Columns naming SBML parameters or compartments override them (a number or a parameter id;
    empty or NaN: no override); columns naming species set their initial value (empty or NaN:
    the SBML initial value, or after a pre-equilibration the pre-equilibrated value). An initial
    value that uses a parameter the condition overrides is evaluated with the override (as PEtab
    evaluates initial assignments with the condition's values).
SBML events
    The events :func:`~odeinfer.petab.sbml.load_sbml` reads as doses (boluses and resets) become
    the :class:`~odeinfer.Dose` s of every experiment up to its last measurement (later ones
    change no measurement), their amounts evaluated under the simulation condition's overrides.
    A trigger time that is a parameter (``time >= t_ins``) is evaluated per simulation condition
    too: each parameter in it must be fixed there (a number or a fixed parameter in the
    condition table, else ``estimate`` 0 in the parameter table, else its SBML value if the
    parameter table does not list it); an estimated one is refused (:class:`PetabError` naming
    the event, the parameter and the SBML file).
pre-equilibration
    ``Condition(..., preequilibrate=Condition(params=..., x0=...))``: the model runs to steady
    state under the pre-equilibration condition; the species the simulation condition sets
    start at their set values, the others at the steady state.
parameter table
    ``parameterScale`` (lin, log, log10), ``lowerBound`` / ``upperBound`` (natural units),
    ``nominalValue`` and ``estimate`` (0 or 1) give :class:`~odeinfer.Param` s. SBML parameters
    that are not in the table and not overridden in every experiment are held at their SBML
    value. ``objectivePriorType`` / ``initializationPriorType`` and their parameters (PEtab v1
    priors of estimated parameters, :mod:`odeinfer.petab.priors`) become
    :attr:`PetabProblem.objective_priors` / :attr:`PetabProblem.initialization_priors`: the
    problem stays a likelihood; ``objective(priors=True)`` adds them, :meth:`PetabProblem.bayes_priors`
    gives them to the Bayesian stage and :meth:`PetabProblem.sample_starts` draws starts from the
    initialization priors. The legacy ``priorType`` columns are ignored.

names
    Ids with a leading ``_`` (allowed in SBML and PEtab, not as odeinfer names) become ``"sbml" +
    id`` (:func:`odeinfer.petab.sbml.odeinfer_name`) wherever the tables use them: parameter ids,
    observable ids (the data's columns; their placeholders keep the PEtab names, e.g.
    ``noiseParameter1__obs``), condition-table columns and values, names in observable and noise
    formulas, measurement overrides; the SBML import renames them the same way. The problem and its
    results use these names (:attr:`PetabProblem.renamed` lists them). An id written ``sbml_k``
    anywhere (SBML model, parameter, condition or observable table, formula, override) where another
    id ``_k`` gets that name is refused, naming both: the two would be one name. So are ids that are
    ``t`` (odeinfer's time) or a Python keyword, and observable ids that are also ids of the model or
    the parameter table.

Not supported (a :class:`~odeinfer.errors.PetabError` naming the file, column and id): PEtab
format version 2, more than one SBML file or problem, mapping files, condition-table columns
that name assignment-rule targets or unknown ids, and the PEtab math functions outside
odeinfer's expression language (e.g. ``log10``, ``piecewise`` in formulas).

Files are read safely: each must lie in ``root`` (default: the YAML's folder; symbolic links
resolved); the YAML is at most :data:`MAX_YAML_BYTES` and each table at most
:data:`MAX_TABLE_BYTES` long; YAML is read with ``yaml.safe_load``. Error messages name files,
lines, columns and ids, never other text of the files.
"""

from __future__ import annotations

import functools
import io
import keyword
import math
import re
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from odeinfer.errors import EquationParseError, PetabError
from odeinfer.petab._files import as_path, read_bounded, resolve
from odeinfer.petab.sbml import odeinfer_name

__all__ = ["MAX_TABLE_BYTES", "MAX_YAML_BYTES", "PetabProblem", "load"]

MAX_YAML_BYTES = 2**20
MAX_TABLE_BYTES = 50 * 2**20
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")  # names, not the exponent of 1e5
_IDENT = re.compile(r"[A-Za-z_]\w*\Z")
_PLACEHOLDER = re.compile(r"(observable|noise)Parameter([1-9]\d*)_(\w+)\Z")
_SCALES = ("lin", "log", "log10")
_DISTRIBUTIONS = ("normal", "laplace")
_DUMMY = 1.0  # placeholders of observables an experiment does not measure


@dataclass(frozen=True, eq=False)
class PetabProblem:
    """A PEtab problem read by :func:`load`.

    Attributes
    ----------
    name : str
        The YAML file's name without its suffix.
    problem : FitProblem
        Model with observables, experiments with conditions, parameters.
    sbml : SBMLModel
        The imported SBML model (before its observables were added).
    nominal : dict of str to float
        The nominal value (natural units) of every parameter of the problem.
    objective_priors, initialization_priors : dict of str to Prior
        The priors of the parameter table's ``objectivePrior*`` / ``initializationPrior*``
        columns, by estimated parameter (:class:`odeinfer.petab.priors.Prior`; none where the
        columns are empty): the first enter :meth:`objective` ``(priors=True)`` and
        :meth:`bayes_priors`, the second :meth:`sample_starts`.
    renamed : dict of str to str
        ``{PEtab or SBML id: odeinfer name}`` of the ids with a leading ``_`` (valid in SBML and PEtab,
        not as odeinfer names), each ``"sbml" + id`` (``_rateLaw1`` -> ``sbml_rateLaw1``). The problem,
        :attr:`nominal`, the priors and every fit result use the odeinfer names; the files keep the ids.
    """

    name: str
    problem: object
    sbml: object
    nominal: dict
    objective_priors: dict = field(default_factory=dict)
    initialization_priors: dict = field(default_factory=dict)
    renamed: dict = field(default_factory=dict)

    @property
    def model(self):
        """The Model with its observables."""
        return self.problem.model

    @property
    def experiments(self):
        """The Experiments (with their conditions)."""
        return self.problem.experiments

    @property
    def parameters(self) -> dict:
        """``{name: Param}`` for every parameter of the problem (fixed ones with ``estimate=False``)."""
        return self.problem.params

    @property
    def u_nominal(self) -> np.ndarray:
        """The nominal values of the estimated parameters on their scales (``problem.estimated``'s order)."""
        from odeinfer.likelihood.parameters import to_scale

        names = self.problem.estimated
        return to_scale([self.nominal[n] for n in names], [self.parameters[n].scale for n in names])

    def sample_starts(self, n, *, rng=0) -> np.ndarray:
        """``n`` starts for a multistart fit: natural values of the estimated parameters, one row per
        start (``problem.estimated``'s order): drawn from the parameter's initialization prior where
        the table gives one, else uniform within the bounds on the parameter's scale (PEtab's default
        ``parameterScaleUniform``; a scrambled Sobol sequence); all clipped to the bounds and seeded
        by ``rng``. Pass them as ``oi.Embedding(starts=n).fit(pp.problem, start=...)``.

        Raises
        ------
        InputError
            ``n`` is not an int >= 1.
        """
        from odeinfer.errors import InputError
        from odeinfer.inference.multistart import sample_starts
        from odeinfer.likelihood.parameters import from_scale, to_scale

        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise InputError(f"n: expected an int >= 1 (the number of starts), got {n!r}")
        names = self.problem.estimated
        scales = [self.parameters[k].scale for k in names]
        lo = to_scale([self.parameters[k].lower for k in names], scales)
        hi = to_scale([self.parameters[k].upper for k in names], scales)
        u = sample_starts(lo, hi, int(n), rng=rng)
        x = np.array([from_scale(row, scales) for row in u])
        gen = np.random.default_rng(rng)
        for k, name in enumerate(names):
            if name in self.initialization_priors:
                x[:, k] = self.initialization_priors[name].draw(int(n), gen)
        return np.clip(x, [self.parameters[k].lower for k in names], [self.parameters[k].upper for k in names])

    def bayes_priors(self) -> dict:
        """The objective priors as ``{name: callable(variable name) -> RV}`` for
        :func:`odeinfer.bayes.build_problem_model` ``priors=``: each parameter on its estimation
        scale, uniform within its bounds there (PyMC's bounded transform) times the prior's density
        (a ``pm.Potential`` named ``"prior_<variable>"``), i.e. the prior truncated to the bounds."""
        out = {}
        for name, prior in self.objective_priors.items():
            p = self.parameters[name]
            out[name] = functools.partial(_bayes_prior, prior=prior, bounds=(p.lower, p.upper))
        return out

    def objective(self, solver=None, *, priors=False, gradient=None):
        """An :class:`~odeinfer.Objective` of the problem (``solver``, ``gradient``: as there); ``priors=True``
        adds the objective priors of the parameter table (:class:`~odeinfer.petab.priors.PriorObjective`)."""
        from odeinfer.likelihood import Objective

        if not isinstance(priors, bool):
            from odeinfer.errors import InputError

            raise InputError(f"priors: expected True (add the parameter table's objective priors) or False, got "
                             f"{priors!r}")
        if priors and self.objective_priors:
            from odeinfer.petab.priors import PriorObjective

            return PriorObjective(self.problem, self.objective_priors, solver=solver, gradient=gradient)
        return Objective(self.problem, solver=solver, gradient=gradient)

    def nll_nominal(self, solver=None, *, priors=False) -> float:
        """The negative log-likelihood at the nominal parameters (PEtab's, all constants kept; with
        ``priors=True`` plus the objective priors' negative log densities).

        Raises
        ------
        SolverError
            The model could not be solved at the nominal parameters (the message says where).
        """
        from odeinfer.errors import SolverError

        ev = self.objective(solver, priors=priors)(self.u_nominal, grad=False)
        if not ev.ok:
            raise SolverError(f"PEtab problem {self.name!r} at its nominal parameters: {ev.failure}")
        return float(ev.nll)

    def __repr__(self):
        p = self.problem
        return (f"PetabProblem({self.name!r}: {p.model.n_states} states, {len(p.estimated)} estimated parameters, "
                f"{len(p.experiments)} experiments, {sum(pl.t_rows.size for pl in p.plans)} measurements)")


def _bayes_prior(var, *, prior, bounds):
    """The PyMC variable ``var`` of one parameter on its scale: uniform in its bounds times ``prior``."""
    import pymc as pm

    from odeinfer.likelihood.parameters import to_scale

    lo, hi = to_scale(list(bounds), [prior.scale, prior.scale])
    rv = pm.Uniform(var, lower=lo, upper=hi) if math.isfinite(lo) and math.isfinite(hi) else pm.Flat(var)
    pm.Potential(f"prior_{var}", -prior.tensor_nll(rv))
    return rv


def load(yaml_path, *, root=None) -> PetabProblem:
    """Read a PEtab v1 problem (see the module's notes for the semantics).

    Parameters
    ----------
    yaml_path : str or os.PathLike
        The problem's YAML file (a relative path is relative to the working directory).
    root : str or os.PathLike, optional
        The folder every file must lie in (symbolic links resolved); default the YAML's folder.
        The files the YAML names are relative to the YAML's folder.

    Returns
    -------
    PetabProblem

    Raises
    ------
    InputError
        A path is not a path, lies outside ``root``, is missing or no regular file.
    PetabError
        A file is too large or malformed, names unknown ids, or uses an unsupported feature.
    SBMLError
        The SBML model cannot be imported.

    Examples
    --------
    >>> import odeinfer as oi
    >>> pp = oi.petab.load("Boehm_JProteomeRes2014/Boehm_JProteomeRes2014.yaml")  # doctest: +SKIP
    >>> pp.nll_nominal(solver=oi.Rodas(rtol=1e-10, atol=1e-12))  # doctest: +SKIP
    138.22199...
    """
    yaml_file = as_path("yaml_path", yaml_path).absolute()
    if root is None:
        yaml_real = resolve(yaml_file, None, argument="yaml_path", what="PEtab YAML file")
        root = yaml_real.parent
    else:
        yaml_real = resolve(yaml_file, root, argument="yaml_path", what="PEtab YAML file")
    spec = _read_yaml(yaml_real, yaml_path)
    return _Loader(yaml_real, root, spec).build()


# -- files --------------------------------------------------------------------------------------
def _too_large(shown, size, limit, what):
    mb = f" ({limit / 2**20:g} MB)" if limit >= 2**20 else ""
    raise PetabError(f"{shown} has {size} bytes; {what} of at most {limit} bytes{mb} are read. Pass a smaller file")


def _read_yaml(file, shown):
    import yaml

    label = repr(str(shown))
    data = read_bounded(file, shown, MAX_YAML_BYTES, lambda n: _too_large(f"yaml_path: {label}", n, MAX_YAML_BYTES,
                                                                           "PEtab YAML files"),
                        argument="yaml_path", what="PEtab YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PetabError(f"yaml_path: {label} is not UTF-8 text (invalid byte at offset {exc.start}); pass a PEtab "
                         "YAML file") from None
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise PetabError(f"yaml_path: {label} is not valid YAML{where}; pass a PEtab YAML file") from None
    except RecursionError:
        raise PetabError(f"yaml_path: {label} nests too deeply; pass a PEtab YAML file") from None
    if not isinstance(spec, dict):
        raise PetabError(f"yaml_path: {label} holds a {type(spec).__name__}, not a mapping; a PEtab YAML file maps "
                         "format_version, parameter_file and problems")
    return spec


class _Table:
    """A tab-separated table as rows of stripped strings, each with its file and line for messages."""

    def __init__(self, key, files):
        self.key, self.rows, self.columns = key, [], None
        self.files = files  # [(argument, shown, real path)]

    @classmethod
    def read(cls, key, files, required):
        from odeinfer._lazy import pandas as pd

        table = cls(key, files)
        for argument, shown, real in files:
            label = f"{key}: {shown!r}"
            data = read_bounded(real, shown, MAX_TABLE_BYTES,
                                lambda n, lab=f"{argument}: {shown!r}": _too_large(lab, n, MAX_TABLE_BYTES,
                                                                                  "PEtab tables"),
                                argument=argument, what="PEtab table")
            try:
                # utf-8-sig: a byte-order mark (spreadsheet exports write one) is not part of the first column's name
                header = data.split(b"\n", 1)[0].decode("utf-8-sig").rstrip("\r").split("\t")
                frame = pd.read_csv(io.BytesIO(data), sep="\t", dtype=str, keep_default_na=False, na_filter=False,
                                    encoding="utf-8-sig")
            except UnicodeDecodeError as exc:
                raise PetabError(f"{label} is not UTF-8 text (invalid byte at offset {exc.start}); pass a "
                                 "tab-separated PEtab table") from None
            except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
                raise PetabError(f"{label} is not a tab-separated table (it could not be parsed); pass a PEtab "
                                 "table") from None
            header = [h.strip() for h in header]
            dups = sorted({h for h in header if header.count(h) > 1})
            if dups:
                raise PetabError(f"{label} has the columns {dups} more than once; give each column once")
            missing = [c for c in required if c not in header]
            if missing:
                raise PetabError(f"{label} has no column {missing} (its columns: {header}); PEtab needs them")
            frame.columns = header
            for k, row in enumerate(frame.to_dict("records")):
                row = {c: (v.strip() if isinstance(v, str) else "") for c, v in row.items()}
                row["_where"] = f"{key}: {shown!r} line {k + 2}"
                table.rows.append(row)
            table.columns = header if table.columns is None else table.columns + [
                h for h in header if h not in table.columns]
        return table


def _number(text):
    """A float from a table cell, or None when the cell is not a number (empty is NaN)."""
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        return None


# -- the loader ---------------------------------------------------------------------------------
class _Loader:
    def __init__(self, yaml_real, root, spec):
        self.yaml, self.folder, self.root, self.spec = yaml_real, yaml_real.parent, root, spec
        self.label = repr(yaml_real.name)

    def fail(self, text):
        raise PetabError(text)

    # -- the YAML ----------------------------------------------------------------------------
    def files(self, mapping, key, *, single=False, where=""):
        """The (argument, shown, real path) triples of the files the YAML lists under ``key``."""
        v = mapping.get(key)
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
            self.fail(f"yaml_path: {self.label}{where} needs {key!r}: a list of file names (at least one), got "
                      f"{type(v).__name__ if v is not None else 'nothing'}")
        if single and len(v) != 1:
            self.fail(f"yaml_path: {self.label}{where} lists {len(v)} files under {key!r}; odeinfer reads exactly one "
                      "(merge them into one file)")
        out = []
        for k, name in enumerate(v):
            real = resolve(self.folder / as_path(f"{key}[{k}]", name), self.root, argument=f"{key}[{k}]",
                           what="PEtab file", shown=name)
            out.append((f"{key}[{k}]", name, real))
        return out

    def read_spec(self):
        spec = self.spec
        version = spec.get("format_version")
        text = str(version).strip() if isinstance(version, (int, float, str)) and not isinstance(version, bool) else ""
        major = text.split(".")[0]
        if major != "1":
            shown = repr(version) if isinstance(version, (int, float)) and not isinstance(version, bool) else (
                "a value" if version is not None else "nothing")
            why = "PEtab v2 is not supported yet" if major == "2" else "odeinfer reads PEtab format version 1"
            self.fail(f"yaml_path: {self.label} has format_version {shown}; {why}. Convert the problem to PEtab v1")
        problems = spec.get("problems")
        if not isinstance(problems, list) or len(problems) != 1 or not isinstance(problems[0], dict):
            n = len(problems) if isinstance(problems, list) else 0
            self.fail(f"yaml_path: {self.label} needs 'problems': a list of exactly one mapping, got "
                      f"{n if isinstance(problems, list) else type(problems).__name__}; split the problems into "
                      "one YAML file each")
        prob = problems[0]
        where = " problems[0]"
        if prob.get("mapping_files"):
            self.fail(f"yaml_path: {self.label}{where} lists mapping_files; PEtab mapping tables are not supported")
        return {
            "parameter": self.files(spec, "parameter_file", single=True),
            "sbml": self.files(prob, "sbml_files", single=True, where=where),
            "condition": self.files(prob, "condition_files", where=where),
            "measurement": self.files(prob, "measurement_files", where=where),
            "observable": self.files(prob, "observable_files", where=where),
        }

    # -- the whole problem ---------------------------------------------------------------------
    def build(self):
        from odeinfer.data import Condition, Data, Experiments
        from odeinfer.likelihood import FitProblem
        from odeinfer.model.equations import format_expr
        from odeinfer.petab.sbml import load_sbml

        files = self.read_spec()
        self.params = self.parameter_table(_Table.read("parameter_file", files["parameter"], (
            "parameterId", "parameterScale", "lowerBound", "upperBound", "nominalValue", "estimate")))
        cond_table = _Table.read("condition_files", files["condition"], ("conditionId",))
        # a constant the SBML model defines by an initial assignment and a condition sets is a parameter
        # (PEtab: the condition table's value takes precedence over the initial assignment)
        self.sbml = load_sbml(files["sbml"][0][2], root=self.root, overridden=set(cond_table.columns))
        self.sbml_file = repr(files["sbml"][0][1])
        m = self.sbml.model
        obs_table = _Table.read("observable_files", files["observable"], ("observableId", "observableFormula",
                                                                           "noiseFormula"))
        self.check_generated_names(m, obs_table)
        self.symbols = {n: sp.Symbol(n, real=True) for n in m.states + m.params}
        observables, noise, obs_params, counts = self.observable_table(obs_table)
        try:
            model = m.observe(observables, noise, params=obs_params)
        except EquationParseError:
            self.fail(f"observable_files: an observable or noise formula of model {m.name!r} is too long or too "
                      "deep once assignment rules are substituted; simplify it")
        conditions = self.condition_table(cond_table)
        groups = self.measurement_table(_Table.read("measurement_files", files["measurement"], (
            "observableId", "simulationConditionId", "measurement", "time")), conditions, counts)
        obs_order = list(counts)  # the PEtab ids; observables and noise are keyed by their odeinfer names
        x0 = {s: (float(e) if e.is_number else format_expr(e)) for s, e in self.sbml.x0.items()}
        datas, names, conds = [], [], {}
        for name, (pre, sim), rows, overrides in groups:
            params = dict(overrides)
            measured = {r["observableId"] for r in rows}
            for o in obs_order:
                if o not in measured:
                    params.update({q: _DUMMY for q in counts[o][2]})
            t_end = max(r["time"] for r in rows)
            if pre:
                p_sim, x_sim = self.condition(conditions[sim], initial=False)
                p_pre, x_pre = self.condition(conditions[pre], initial=True)
                cond = Condition(params={**p_sim, **params}, x0=x_sim, t0=0.0, doses=self.doses(p_sim, t_end, sim),
                                 preequilibrate=Condition(params=p_pre, x0=x_pre))
            else:
                p_sim, x_sim = self.condition(conditions[sim], initial=True)
                cond = Condition(params={**p_sim, **params}, x0=x_sim, t0=0.0, doses=self.doses(p_sim, t_end, sim))
            datas.append(_data(rows, [o for o in obs_order if o in measured], name, Data))
            names.append(name)
            conds[name] = cond
        experiments = Experiments(datas, names, conds)
        events = self.sbml.state_events
        probe = FitProblem(model, experiments, x0=x0, events=events)
        parameters = self.problem_parameters(probe.names, model, conditions, groups)
        problem = FitProblem(model, experiments, parameters, x0=x0, events=events)
        nominal = {n: self.table_nominal.get(n, p.value) for n, p in problem.params.items()}
        return PetabProblem(self.yaml.stem, problem, self.sbml, nominal, self.objective_priors,
                            self.initialization_priors, {**self.sbml.renamed, **self.renamed, **self.obs_renamed})

    # -- parameter table ------------------------------------------------------------------------
    def parameter_table(self, table):
        from odeinfer.errors import InputError
        from odeinfer.likelihood import Param
        from odeinfer.petab.priors import read_prior

        out, self.objective_priors, self.initialization_priors, self.table_nominal = {}, {}, {}, {}
        ids, self.renamed = set(), {}
        for r in table.rows:
            pid, where = r["parameterId"], r["_where"]
            if not _IDENT.match(pid):
                self.fail(f"{where}: column 'parameterId' holds no identifier; give each parameter an id (letters, "
                          "digits, '_')")
            name = odeinfer_name(pid)  # '_k' -> 'sbml_k', as the SBML import names it
            if pid in ids:
                self.fail(f"{where}: the parameter {pid!r} is listed twice; list each parameter once")
            if name in out:
                other = next(i for i in ids if odeinfer_name(i) == name)
                self.fail(f"{where}: the parameter {pid!r} has the odeinfer name {name!r}, as has {other!r} (ids with "
                          "a leading '_' get the prefix 'sbml'); rename one of them")
            ids.add(pid)
            if name != pid:
                self.renamed[pid] = name
            scale = r["parameterScale"] or "lin"
            if scale not in _SCALES:
                self.fail(f"{where}: parameter {pid!r} has a parameterScale that is not one of {list(_SCALES)}")
            values = {}
            for col in ("lowerBound", "upperBound", "nominalValue", "estimate"):
                v = _number(r[col])
                if v is None:
                    self.fail(f"{where}: column {col!r} of parameter {pid!r} is not a number")
                values[col] = v
            est = values["estimate"]
            if est not in (0.0, 1.0):
                self.fail(f"{where}: column 'estimate' of parameter {pid!r} is neither 0 nor 1")
            lo = -math.inf if math.isnan(values["lowerBound"]) else values["lowerBound"]
            hi = math.inf if math.isnan(values["upperBound"]) else values["upperBound"]
            value = self.table_nominal[name] = values["nominalValue"]
            if est and lo <= hi and not lo <= value <= hi:
                # PEtab: an estimated parameter's nominal value is only a reference point (the problem's
                # NLL at it is still PEtab's nominal objective): it may lie outside the bounds, or be 0 on
                # a log scale (u = -inf), as in Lang_PLOSComputBiol2024's published fit; the Param's
                # value, a start, is then the nearest bound
                value = min(max(value, lo), hi)
            try:  # a fixed parameter's bounds and scale do not matter (its bounds may not even hold it)
                out[name] = Param(value, lo, hi, scale) if est else Param(value, estimate=False)
            except InputError as exc:
                raise PetabError(f"{where}: parameter {pid!r} is invalid: {exc}") from None
            if est:  # a fixed parameter's priors do not enter
                for column, priors in (("objectivePrior", self.objective_priors),
                                       ("initializationPrior", self.initialization_priors)):
                    prior = read_prior(r, column, pid, scale, lo, hi, self.fail)
                    if prior is not None:
                        priors[name] = prior
        return out

    # -- observable table -----------------------------------------------------------------------
    def observable_table(self, table):
        """``(observables, noise, obs_params, counts)``; counts: ``{obs: (n_obs, n_noise, placeholders)}``."""
        from odeinfer.model import Laplace, Normal
        from odeinfer.model.equations import format_expr

        observables, noise, obs_params, counts = {}, {}, [], {}
        for r in table.rows:
            oid, where = r["observableId"], r["_where"]
            if not _IDENT.match(oid):
                self.fail(f"{where}: column 'observableId' holds no identifier; give each observable an id")
            name = self.own(oid, f"{where}: column 'observableId'")
            kind = ("an id of the SBML model" if name in self.symbols or name in self.sbml.expressions else
                    "a parameter of the parameter table" if name in self.params else None)
            if kind:
                self.fail(f"{where}: column 'observableId' names {oid!r}, " + (
                    f"whose odeinfer name {name!r} (ids with a leading '_' get the prefix 'sbml') is" if name != oid
                    else "which is") + f" also {kind}; give the observable an id of its own")
            if oid in counts:
                self.fail(f"{where}: the observable {oid!r} is listed twice; list each observable once")
            scale = r.get("observableTransformation", "") or "lin"
            if scale not in _SCALES:
                self.fail(f"{where}: observable {oid!r} has an observableTransformation that is not one of "
                          f"{list(_SCALES)}")
            dist = r.get("noiseDistribution", "") or "normal"
            if dist not in _DISTRIBUTIONS:
                self.fail(f"{where}: observable {oid!r} has a noiseDistribution that is not one of "
                          f"{list(_DISTRIBUTIONS)}")
            used = []
            h = self.formula(r["observableFormula"], oid, "observableFormula", where, used)
            s = self.formula(r["noiseFormula"], oid, "noiseFormula", where, used)
            places = [n for n in used if (m := _PLACEHOLDER.match(n)) and m[3] == oid]  # not table parameters
            n_obs = max([int(_PLACEHOLDER.match(n)[2]) for n in places if n.startswith("observable")], default=0)
            n_noise = max([int(_PLACEHOLDER.match(n)[2]) for n in places if n.startswith("noise")], default=0)
            counts[oid] = (n_obs, n_noise, places)
            obs_params += [n for n in used if n not in obs_params]
            observables[name] = format_expr(h)
            sigma = float(s) if s.is_number else format_expr(s)
            noise[name] = (Normal if dist == "normal" else Laplace)(sigma=sigma, scale=scale)
        if not observables:
            self.fail(f"observable_files: {[f for _, f, _ in table.files]} define no observable; add rows")
        self.observable_ids = set(counts)
        return observables, noise, obs_params, counts

    def formula(self, text, oid, column, where, used):
        """A formula of the observable table as sympy; ``used`` collects its observable parameters."""
        from odeinfer.model.equations import CONSTANTS, FUNCTIONS, parse_expression

        if text == "":
            self.fail(f"{where}: column {column!r} of observable {oid!r} is empty; give a formula or a number")
        text = text.replace("^", "**")
        exprs = self.sbml.expressions
        names = {}
        for n in _NAME.findall(text):
            if n in names or (n in FUNCTIONS or n in CONSTANTS or n == "t") and n not in self.symbols:
                continue
            ph = _PLACEHOLDER.match(n)
            # the text keeps the PEtab id; it stands for the odeinfer name's symbol
            own = self.own(n, f"{where}: the {column} of observable {oid!r}")
            if own in self.symbols:
                names[n] = self.symbols[own]
            elif own in exprs:
                names[n] = exprs[own]
            elif column == "noiseFormula" and n == oid:
                names[n] = sp.Symbol(own, real=True)
            elif (ph and ph[3] == oid and (ph[1] == "observable" or column == "noiseFormula")) or (
                    own in self.params and not (ph and ph[3] == oid)):
                # a parameter of the table may look like another observable's placeholder (Lang_PLOSComputBiol2024
                # shares noiseParameter2_cycA_nuc between observables): the table says it is a parameter
                names[n] = sp.Symbol(own, real=True)
                if own not in used:
                    used.append(own)
            elif re.search(rf"(?<![\w.]){n}\s*\(", text):
                self.fail(f"{where}: the {column} of observable {oid!r} calls {n!r}, which is no function of "
                          f"odeinfer's expression language ({', '.join(sorted(FUNCTIONS))}); rewrite it")
            else:
                what = ("a noise placeholder, which only the noiseFormula may use" if ph and ph[3] == oid else
                        "a placeholder of another observable" if ph else
                        "no state, SBML parameter, assignment-rule target, placeholder of this observable or id of "
                        "the parameter table")
                self.fail(f"{where}: the {column} of observable {oid!r} uses {n!r}, which is {what}; fix the formula "
                          "or add the parameter to the parameter table")
        try:
            return parse_expression(text, names, f"{column} of {oid!r}")
        except EquationParseError:
            self.fail(f"{where}: the {column} of observable {oid!r} is not an expression odeinfer reads (its "
                      "language: numbers, names, + - * / ** ^, exp, log, sqrt, sin, cos, tan, tanh, abs, pow, min, "
                      "max); rewrite it")

    # -- condition table ------------------------------------------------------------------------
    def condition_table(self, table):
        """``{condition id: ({param: value}, {species: value})}``, values a float or an id."""
        m = self.sbml.model
        kinds = {}
        for col in table.columns:
            if col in ("conditionId", "conditionName"):
                continue
            self.own(col, "condition_files: a column")
            if odeinfer_name(col) in m.params:
                kinds[col] = "param"
            elif odeinfer_name(col) in m.states:
                kinds[col] = "state"
            elif odeinfer_name(col) in self.sbml.expressions:
                self.fail(f"condition_files: the column {col!r} names an assignment-rule target or a constant "
                          "defined by an initial assignment of the SBML model; conditions may set parameters, "
                          "compartments and species only")
            else:
                self.fail(f"condition_files: the column {col!r} is no parameter, compartment or species of the SBML "
                          f"model {m.name!r}; fix the column name")
        out = {}
        for r in table.rows:
            cid, where = r["conditionId"], r["_where"]
            if not _IDENT.match(cid):
                self.fail(f"{where}: column 'conditionId' holds no identifier; give each condition an id")
            if cid in out:
                self.fail(f"{where}: the condition {cid!r} is listed twice; list each condition once")
            params, x0 = {}, {}
            for col, kind in kinds.items():
                v = self.value(r.get(col, ""), f"{where}: column {col!r} of condition {cid!r}")
                if v is not None:
                    (params if kind == "param" else x0)[odeinfer_name(col)] = v
            out[cid] = (params, x0)
        return out

    def value(self, text, where):
        """A number, a parameter id, or None (no override) from a condition-table cell."""
        v = _number(text)
        if v is not None:
            if math.isnan(v):
                return None
            if not math.isfinite(v):
                self.fail(f"{where} is not finite; give a finite number, a parameter id, or leave it empty")
            return v
        return self.parameter_id(text, where)

    def check_generated_names(self, m, observables):
        """Refuse an id that the SBML model or the parameter table holds as it stands and that another
        id's odeinfer name (``_k`` -> ``sbml_k``) equals: the two would be one name. The observable ids
        of the table ``observables`` get their names here, so that every table is checked against them."""
        ids = dict.fromkeys(r["observableId"] for r in observables.rows)
        self.obs_renamed = {o: odeinfer_name(o) for o in ids if _IDENT.match(o) and odeinfer_name(o) != o}
        self.generated = {new: old for old, new in {**self.sbml.renamed, **self.renamed, **self.obs_renamed}.items()}
        for name in self.params:
            if name not in self.renamed.values():
                self.own(name, "parameter_file: column 'parameterId'")
        kept = set(m.states) | set(m.params) | set(self.sbml.expressions)
        for new, old in self.generated.items():
            if old in self.renamed and new in kept and new not in self.sbml.renamed.values():
                self.fail(f"parameter_file: the parameter {old!r} has the odeinfer name {new!r}, which is also an id "
                          "of the SBML model (ids with a leading '_' get the prefix 'sbml'); rename one of them")

    def own(self, text, where):
        """The odeinfer name of the PEtab id ``text``; refused when ``text`` is written as it stands and
        another id (``_k``) gets it as its odeinfer name (``sbml_k``): they would be one name; refused too
        when the name is ``t`` or a Python keyword, which odeinfer names cannot be."""
        name = odeinfer_name(text)
        if name == "t" or keyword.iskeyword(name):
            why = "it is odeinfer's time" if name == "t" else "it is a Python keyword"
            self.fail(f"{where} names {text!r}, which cannot be an odeinfer name ({why}); rename it in the files")
        if name == text and text in self.generated:
            self.fail(f"{where} names {text!r}, which is also the odeinfer name of the id {self.generated[text]!r} "
                      "(ids with a leading '_' get the prefix 'sbml'); rename one of them")
        return name

    def parameter_id(self, text, where):
        """The odeinfer name of the parameter id ``text`` (a leading '_' gets the prefix 'sbml')."""
        if not _IDENT.match(text):
            self.fail(f"{where} is neither a number nor a parameter id")
        name = self.own(text, where)
        if name not in self.params and name not in self.sbml.model.params:
            self.fail(f"{where} names {text!r}, which is neither in the parameter table nor an SBML parameter; add "
                      "it to the parameter table")
        return name

    def condition(self, entry, *, initial):
        """``(params, x0)`` of a Condition; ``initial``: add the initial values that use overridden parameters."""
        from odeinfer.model.equations import format_expr

        params, x0 = dict(entry[0]), dict(entry[1])
        if initial:
            subs = self.overrides(params)
            for s, e in self.sbml.x0.items():
                if s not in x0 and e.free_symbols & set(subs):
                    e = e.xreplace(subs)
                    x0[s] = float(e) if e.is_number else format_expr(e)
        return params, x0

    def overrides(self, params):
        """``{SBML parameter symbol: value}`` of a condition's parameter overrides (numbers or ids)."""
        return {self.symbols[p]: (sp.Symbol(v, real=True) if isinstance(v, str) else sp.Float(v, 17))
                for p, v in params.items()}

    def doses(self, params, t_end, condition):
        """The SBML events as Doses up to ``t_end`` (later ones change no measurement), their times and
        amounts evaluated under the parameter overrides ``params`` of the simulation condition
        ``condition``."""
        from odeinfer.data import Dose
        from odeinfer.model.equations import format_expr, parse_expression

        subs, out = self.overrides(params), []
        s = self.sbml
        for d, text, eid in zip(s.doses, s.dose_times, s.dose_events, strict=True):
            time = d.time if text is None else self.dose_time(text, subs, eid, condition)
            if time > t_end:
                continue
            amount = d.amount
            if isinstance(amount, str) and subs:
                e = parse_expression(amount, self.symbols, f"the amount of a dose of {d.state!r}").xreplace(subs)
                amount = float(e) if e.is_number else format_expr(e)
            out.append(Dose(time, d.state, amount, d.mode))
        return tuple(out)

    def dose_time(self, text, subs, event, condition):
        """The trigger time ``text`` (an expression of the parameters) of SBML event ``event`` under
        condition ``condition`` (overrides ``subs``): a number, each parameter fixed by the condition,
        by the parameter table (``estimate`` 0) or by the SBML model (in neither table)."""
        from odeinfer.model.equations import parse_expression

        e = parse_expression(text, self.symbols, f"the trigger time of event {event!r}").xreplace(subs)
        values = {}
        for x in sorted(e.free_symbols, key=lambda x: x.name):
            par = self.params.get(x.name)
            if par is not None and par.estimate:
                self.fail(f"{self.sbml_file}: event {event!r} triggers at time >= {text}, and in condition "
                          f"{condition!r} the parameter {x.name!r} is estimated (parameter table, estimate = 1); an "
                          "estimated event time is not supported yet: fix it (estimate = 0) or set it to a number "
                          "in the condition table")
            values[x] = sp.Float(par.value if par is not None else self.sbml.values[x.name], 17)
        time = float(e.xreplace(values))
        if not (math.isfinite(time) and time > 0):
            self.fail(f"{self.sbml_file}: event {event!r} triggers at time >= {text}, which is {time!r} in condition "
                      f"{condition!r}; events are supported at fixed times > 0 only: give the trigger time a "
                      "positive value in the condition or parameter table")
        return time

    # -- measurement table ----------------------------------------------------------------------
    def measurement_table(self, table, conditions, counts):
        """``[(name, (preeq, sim), rows, {placeholder: override})]``, one per experiment (or part)."""
        groups = {}
        has_pre = "preequilibrationConditionId" in table.columns
        for r in table.rows:
            where = r["_where"]
            oid = r["observableId"]
            if oid not in self.observable_ids:
                self.fail(f"{where}: column 'observableId' names {oid!r}, which is not in the observable table"
                          if _IDENT.match(oid) else f"{where}: column 'observableId' holds no observable id")
            sim, pre = r["simulationConditionId"], r.get("preequilibrationConditionId", "") if has_pre else ""
            for col, cid in (("simulationConditionId", sim), ("preequilibrationConditionId", pre)):
                if (cid or col == "simulationConditionId") and cid not in conditions:
                    self.fail(f"{where}: column {col!r} names {cid!r}, which is not in the condition table"
                              if _IDENT.match(cid) else f"{where}: column {col!r} holds no condition id")
            for col in ("time", "measurement"):
                v = _number(r[col])
                if v is None or math.isnan(v):
                    self.fail(f"{where}: column {col!r} is not a number")
                if not math.isfinite(v) and not (col == "time" and v == math.inf):  # inf: the steady state
                    self.fail(f"{where}: column {col!r} is not finite; give a finite number"
                              + (" or inf (a measurement at the steady state)" if col == "time" else ""))
                r[col] = v
            n_obs, n_noise, _ = counts[oid]
            over = {}
            for col, kind, n in (("observableParameters", "observable", n_obs), ("noiseParameters", "noise", n_noise)):
                text = r.get(col, "")
                items = [x.strip() for x in text.split(";")] if text else []
                if len(items) != n:
                    self.fail(f"{where}: column {col!r} holds {len(items)} value(s) but observable {oid!r} has {n} "
                              f"{kind} placeholder(s) ({kind}Parameter<n>_{oid}); give one value per placeholder, "
                              "separated by ';'")
                for k, item in enumerate(items):
                    v = _number(item)
                    if v is None:
                        v = self.parameter_id(item, f"{where}: entry {k + 1} of column {col!r}")
                    elif not math.isfinite(v):
                        self.fail(f"{where}: entry {k + 1} of column {col!r} is not a finite number")
                    over[f"{kind}Parameter{k + 1}_{oid}"] = v
            key = (pre, sim)
            per_obs = groups.setdefault(key, {}).setdefault(oid, {})
            per_obs.setdefault(tuple(over.items()), []).append(r)
        if not groups:
            self.fail(f"measurement_files: {[f for _, f, _ in table.files]} hold no measurement; add rows")
        out = []
        for (pre, sim), per_obs in groups.items():
            base = f"{pre}->{sim}" if pre else sim
            parts = max(len(v) for v in per_obs.values())
            for k in range(parts):
                rows, over = [], {}
                for tuples in per_obs.values():
                    if k < len(tuples):
                        items, rs = list(tuples.items())[k]
                        rows += rs
                        over.update(items)
                out.append((base if parts == 1 else f"{base}#{k + 1}", (pre, sim), rows, over))
        return out

    # -- the problem's parameters -------------------------------------------------------------
    def problem_parameters(self, needed, model, conditions, groups):
        """``{name: Param | number}`` for the FitProblem's parameter names ``needed``."""
        known = set(model.full_params)
        for params, x0 in conditions.values():
            known |= {v for v in list(params.values()) + list(x0.values()) if isinstance(v, str)}
        for *_, over in groups:
            known |= {v for v in over.values() if isinstance(v, str)}
        unknown = [p for p in self.params if p not in known]
        if unknown:
            self.fail(f"parameter_file: the parameters {unknown[:10]} are used nowhere (no SBML parameter, observable "
                      "parameter, override or condition value); remove them from the parameter table")
        out = {}
        for n in needed:
            if n in self.params:
                out[n] = self.params[n]
            elif n in self.sbml.values:
                out[n] = self.sbml.values[n]
            else:
                self.fail(f"parameter_file: the parameter {n!r} is used by the problem but is neither in the "
                          "parameter table nor an SBML parameter; add it to the parameter table")
        return out


def _data(rows, columns, name, Data):
    """One Data of measurement rows: one row per time and replicate, NaN where not measured."""
    t, y = [], []
    start, seen = 0, {}  # first row of the current time; replicates of each observable at it
    for r in sorted(rows, key=lambda r: r["time"]):  # stable: replicates keep their order
        if not t or t[-1] != r["time"]:
            start, seen = len(t), {}
        k = seen.get(r["observableId"], 0)
        seen[r["observableId"]] = k + 1
        if start + k == len(t):  # the k-th replicate goes to the k-th row of its time
            t.append(r["time"])
            y.append([math.nan] * len(columns))
        y[start + k][columns.index(r["observableId"])] = r["measurement"]
    return Data(np.array(t), np.array(y), [odeinfer_name(c) for c in columns], t0=0.0, name=name, replicates=True,
                steady_state=math.inf in t)
