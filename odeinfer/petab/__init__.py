"""PEtab problems (issue 15): SBML models, and later their conditions, observables and measurements.

:mod:`odeinfer.petab.sbml` turns an SBML file into an odeinfer :class:`~odeinfer.model.Model`
(:func:`~odeinfer.petab.sbml.load_sbml`). The public surface of this package is empty for now.
"""

__all__: list[str] = []
