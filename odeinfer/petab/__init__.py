"""PEtab problems (issue 15): :func:`load` reads a PEtab v1 problem (YAML, SBML model, condition,
observable, measurement and parameter tables) into a :class:`PetabProblem` holding an odeinfer
:class:`~odeinfer.FitProblem`.

:mod:`odeinfer.petab.sbml` turns an SBML file into an odeinfer :class:`~odeinfer.model.Model`
(:func:`~odeinfer.petab.sbml.load_sbml`); :mod:`odeinfer.petab.tables` maps the PEtab tables;
:mod:`odeinfer.petab.priors` holds the parameter table's priors.

>>> import odeinfer as oi
>>> pp = oi.petab.load("Boehm_JProteomeRes2014.yaml")  # doctest: +SKIP
"""

from odeinfer.petab.tables import PetabProblem, load

__all__ = ["PetabProblem", "load"]
