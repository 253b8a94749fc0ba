"""The papers' example models with default true values, each documenting its source.

>>> from odeinfer import zoo
>>> entry = zoo.get("lorenz")
>>> entry.model.states, entry.params_array()
(('x1', 'x2', 'x3'), array([10.        , 28.        ,  2.66666667]))

Delay models (``zoo.available("dde")``) are :class:`DDEZooEntry` objects with a
``history`` instead of ``x0``.

Every entry states what the source did not and what was chosen here
(``entry.notes``, choices marked ``[choice]``).
"""

from odeinfer.zoo.classic import fitzhugh_nagumo, linear_decay, lotka_volterra, sir
from odeinfer.zoo.dde import (DDEZooEntry, cheyne_stokes, delay_exponential_decay, enso, hiv, logistic_delay,
                              nicholson_blowflies)
from odeinfer.zoo.registry import ZooEntry, available, get
from odeinfer.zoo.seed000 import activator_inhibitor, lorenz, population
from odeinfer.zoo.seed001 import alpha_pinene, riccati

__all__ = [
    "ZooEntry", "available", "get",
    "lotka_volterra", "population", "lorenz", "activator_inhibitor", "alpha_pinene",
    "riccati", "fitzhugh_nagumo", "sir", "linear_decay",
    # delay models (zoo.available("dde"))
    "DDEZooEntry", "delay_exponential_decay", "logistic_delay", "enso", "cheyne_stokes", "hiv",
    "nicholson_blowflies",
]
