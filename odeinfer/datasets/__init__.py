"""Bundled real datasets for ODE/DDE parameter estimation.

``load_frame(name)`` returns a CSV as stored; the loaders return
:class:`~odeinfer.data.Data` ready for fitting. ``citation(name)`` and
``provenance(name)`` give the sources and licences (see also SOURCES.md).
``petab_problem(name)`` is the YAML file of a bundled PEtab problem (``petab_problems()`` lists
them) for :func:`odeinfer.petab.load`.

>>> from odeinfer import datasets
>>> datasets.lynx_hare().n_times
21
"""

from ._files import available, citation, load_frame, petab_problem, petab_problems, provenance
from .loaders import (
    ALPHA_PINENE_STATES,
    ALPHA_PINENE_X0,
    alpha_pinene,
    blowflies,
    influenza_boarding_school,
    lynx_hare,
)

__all__ = [
    "available",
    "load_frame",
    "citation",
    "provenance",
    "petab_problems",
    "petab_problem",
    "lynx_hare",
    "blowflies",
    "influenza_boarding_school",
    "alpha_pinene",
    "ALPHA_PINENE_STATES",
    "ALPHA_PINENE_X0",
]
