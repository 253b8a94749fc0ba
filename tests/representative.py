"""Parametrized cases split between the default suite and ``-m slow``.

The bitwise tier tests (tests/test_tiered.py, tests/test_shared_tier.py) compile a model's own
kernel per case (40-100 s each on an empty cache), yet every model runs the same kernel code. The
default suite keeps the cases that reach each distinct path (each solver, with and without
sensitivities, each history kind, the models whose features differ); the others are marked
``slow`` and still run with ``python -m pytest -m slow``.
"""

import pytest


def split(cases, default):
    """``pytest.param`` of each tuple in ``cases``; those not in ``default`` are marked ``slow``.

    Each case's id is its values joined by ``-``, as stacked ``parametrize`` decorators name them.
    """
    default = set(default)
    unknown = default - set(cases)
    assert not unknown, f"default cases {sorted(unknown)} are not among the cases"
    return [pytest.param(*case, marks=() if case in default else pytest.mark.slow,
                         id="-".join(str(v) for v in case)) for case in cases]
