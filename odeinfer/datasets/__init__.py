"""Bundled real datasets for ODE/DDE parameter estimation.

``load_frame(name)`` returns a CSV as stored; the loaders return
:class:`~odeinfer.data.Data` ready for fitting. ``citation(name)`` and
``provenance(name)`` give the sources and licences (see also SOURCES.md).

>>> from odeinfer import datasets
>>> datasets.lynx_hare().n_times
21
"""

from ._files import available, citation, load_frame, provenance
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
    "lynx_hare",
    "blowflies",
    "influenza_boarding_school",
    "alpha_pinene",
    "ALPHA_PINENE_STATES",
    "ALPHA_PINENE_X0",
]
