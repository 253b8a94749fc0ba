"""Exception and warning hierarchy of odeinfer.

Every error raised at the public boundary derives from :class:`OdeinferError`
and says which argument was wrong, what was received, what was expected and
how to fix it.
"""

__all__ = [
    "OdeinferError",
    "ModelDefinitionError",
    "TracingError",
    "EquationParseError",
    "SBMLError",
    "DataError",
    "InputError",
    "ResultFileError",
    "PetabError",
    "SolverError",
    "StiffnessError",
    "StudyError",
    "ExecutionError",
    "OdeinferWarning",
    "BiasWarning",
]


class OdeinferError(Exception):
    """Base class of every error odeinfer raises on purpose."""


class ModelDefinitionError(OdeinferError, ValueError):
    """The model specification is invalid (names, sizes, returned derivatives)."""


class TracingError(ModelDefinitionError):
    """The right-hand side used an operation that cannot be traced symbolically
    (``np.exp``, ``math.exp``, ``if`` on a traced value, ...)."""


class EquationParseError(ModelDefinitionError):
    """An equation string uses a name, function or syntax outside the whitelist."""


class SBMLError(ModelDefinitionError):
    """An SBML file cannot be imported (:func:`odeinfer.petab.sbml.load_sbml`): too large, not
    well-formed SBML, or using a feature odeinfer does not support (events, algebraic rules,
    variable stoichiometry, delays, fast reactions, ...). Messages name the element's id, never
    the file's contents."""


class DataError(OdeinferError, ValueError):
    """Times, observations or their names are invalid."""


class InputError(OdeinferError, ValueError):
    """An argument of a public call is invalid (parameter or initial-state
    values and names, tolerances, method names, step limits)."""


class ResultFileError(InputError):
    """A saved result (``Estimate.from_json``) cannot be read: not JSON, not a file, truncated,
    missing or mistyped fields, nested too deep or too large."""


class PetabError(InputError):
    """A PEtab problem cannot be imported (:func:`odeinfer.petab.load`): its YAML or one of its
    tables is malformed, too large, names an unknown id, or uses a feature odeinfer does not
    support. Messages name the file, the column and the id, never the file's text."""


class SolverError(OdeinferError, RuntimeError):
    """The ODE solver failed; ``t_reached`` says how far it got, ``status`` why."""

    def __init__(self, message, *, status=None, t_reached=None):
        super().__init__(message)
        self.status = status
        self.t_reached = t_reached


class StiffnessError(SolverError):
    """The explicit solver detected stiffness or ran out of steps; use ``solver=oi.Rodas()``."""


class StudyError(OdeinferError, ValueError):
    """A Monte Carlo study was set up wrongly (replications, estimators, seeds,
    functions that cannot be sent to worker processes) or its simulator failed."""


class ExecutionError(OdeinferError, RuntimeError):
    """A task sent to an executor (:mod:`odeinfer.inference.executor`) failed after its one retry,
    or the executor broke (a worker process died); ``task`` is the index of the failed task."""

    def __init__(self, message, *, task=None):
        super().__init__(message)
        self.task = task


class OdeinferWarning(UserWarning):
    """Base class of odeinfer's warnings."""


class BiasWarning(OdeinferWarning):
    """The data make the estimate's bias large relative to its signal, as measured from the data
    (e.g. difference quotients that are mostly noise, or an integrated trajectory far from the
    data); the message gives the measured numbers and the fix."""


class ResolutionWarning(OdeinferWarning):
    """The solver's tolerances do not resolve the data: propagated to the observables, its absolute
    tolerance is a sizeable fraction of the noise sd, so the likelihood there is partly solver noise;
    the message gives the measured numbers and the tolerance that would resolve them."""
