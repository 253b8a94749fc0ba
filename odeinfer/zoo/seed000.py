"""The three examples of Syafiie, Subiantoro, Andasari & Tadeo (seed 000).

"Systems of ODEs Parameters Estimation by Using Stochastic Newton-Raphson and
Gradient Descent Methods" (arXiv preprint), Section 3; corrected reading in
``specs/seed-000-stochastic-newton-gradient.md`` (§3.1-§3.4). The paper does not
state time spans, sampling steps, noise levels (except Lorenz) or the population
model's initial state: the values chosen here are marked ``[choice]``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from odeinfer.model import model
from odeinfer.zoo.registry import ZooEntry

__all__ = ["population", "lorenz", "activator_inhibitor"]

_PAPER = ("S. Syafiie, A. Subiantoro, V. Andasari, F. Tadeo, \"Systems of ODEs Parameters Estimation by "
          "Using Stochastic Newton-Raphson and Gradient Descent Methods\", arXiv preprint")


@cache
def _population_model():
    @model(states=["x1", "x2"], params=["a1", "a2", "a3", "a4", "a5"], name="population")
    def population(t, y, p):
        """Population system, paper eq. (45) (its ``dx2/dx`` read as ``dx2/dt``)."""
        return {"x1": p.a1 * y.x1 - p.a2 * y.x1 * y.x2,
                "x2": p.a3 * y.x2 + p.a4 * y.x1 * y.x2 - p.a5 * y.x2 ** 2}

    return population


def population() -> ZooEntry:
    """Population system (seed 000, §3.1): linear in the 5 parameters, stable focus at (3, 2).

    ``dx1/dt = a1 x1 - a2 x1 x2``, ``dx2/dt = a3 x2 + a4 x1 x2 - a5 x2^2`` with
    ``a = (10, 5, 3, 1, 3)``. The equilibrium (3, 2) has eigenvalues
    ``-3 +- i sqrt(21)``.

    Examples
    --------
    >>> from odeinfer import zoo
    >>> zoo.population().params_array()
    array([10.,  5.,  3.,  1.,  3.])
    """
    return ZooEntry(
        name="population",
        model=_population_model(),
        params={"a1": 10.0, "a2": 5.0, "a3": 3.0, "a4": 1.0, "a5": 3.0},
        x0={"x1": 1.0, "x2": 1.0},
        t0=0.0,
        t=np.linspace(0.0, 2.0, 101),
        sigma=0.03,
        source=(f"{_PAPER}, Section 3.1, eq. (45) (model), eq. (47) (Jacobian), true a = [10 5 3 1 3]^T; "
                "spec seed-000 §3.1 (equilibrium (3, 2), eigenvalues -3 +- i sqrt(21))."),
        notes=(
            "The paper states neither x0, nor the time span, sampling step, number of samples, "
            "nor the noise level (only 'normal distribution').\n"
            "[choice] x0 = (1, 1): away from the equilibrium (3, 2), positive, so the data show the "
            "damped oscillation into the focus.\n"
            "[choice] t = 0, 0.02, ..., 2 (101 points): the transient decays like exp(-3 t), so it has "
            "died out by t ~ 2 (spec §3.1); a longer record adds only equilibrium points.\n"
            "[choice] sigma = 0.03 on both states: inferred from the paper's Table 2, whose state RMSEs "
            "(0.0384, 0.0207) are about the noise sd if, as spec §2.9 suggests, they were computed "
            "against the noisy data."
        ),
    )


@cache
def _lorenz_model():
    @model(states=["x1", "x2", "x3"], params=["a1", "a2", "a3"], name="lorenz")
    def lorenz(t, y, p):
        """Lorenz system, paper eq. (54)."""
        return {"x1": p.a1 * (y.x2 - y.x1),
                "x2": y.x1 * (p.a2 - y.x3) - y.x2,
                "x3": y.x1 * y.x2 - p.a3 * y.x3}

    return lorenz


def lorenz() -> ZooEntry:
    """Lorenz system (seed 000, §3.2): chaotic, linear in the parameters.

    ``a = (10, 28, 8/3)``, ``x0 = (0.1, 1, 5)``, noise variance 2.

    Examples
    --------
    >>> from odeinfer import zoo
    >>> zoo.lorenz().t.size
    201
    """
    return ZooEntry(
        name="lorenz",
        model=_lorenz_model(),
        params={"a1": 10.0, "a2": 28.0, "a3": 8.0 / 3.0},
        x0={"x1": 0.1, "x2": 1.0, "x3": 5.0},
        t0=0.0,
        t=np.linspace(0.0, 10.0, 201),
        sigma=float(np.sqrt(2.0)),
        source=(f"{_PAPER}, Section 3.2, eq. (54); true a = [10 28 8/3]^T, x0 = [0.1 1 5]^T, "
                "noise 'normal distribution random variable ... with variance 2'; spec seed-000 §3.2."),
        notes=(
            "The paper states neither the time span nor the sampling step.\n"
            "[choice] t = 0, 0.05, ..., 10 (201 points): spec §3.2 finds that only dt ~ 0.05 reproduces "
            "the paper's Gauss-Newton estimate [9.47, 28.03, 2.87] (forward-difference truncation bias), "
            "and that finer grids give very different answers (spec §5.3); T = 10 is within the "
            "spec's suggested short record (T ~ 2-10).\n"
            "sigma = sqrt(2): the paper says variance 2; the reported state RMSEs (1.26-1.85) and the "
            "derivative RMSEs also point to sd sqrt(2), not 2 (spec §3.2, §2.9)."
        ),
    )


@cache
def _activator_inhibitor_model():
    @model(states=["x1", "x2"], params=["a1", "a2", "a3", "a4"], name="activator_inhibitor")
    def activator_inhibitor(t, y, p):
        """Activator-inhibitor system, paper eq. (59), with the basal term x0 = 0."""
        return {"x1": (1.0 + p.a1 * y.x1 ** 2) / (1.0 + y.x1 ** 2 + p.a2 * y.x2) - y.x1,
                "x2": p.a3 * (p.a4 * y.x1 - y.x2)}

    return activator_inhibitor


def activator_inhibitor() -> ZooEntry:
    """Activator-inhibitor system (seed 000, §3.3): nonlinear in the parameters.

    ``a = (2, 3, 0.1, 0.4)``, ``x(0) = (0.1, 2)``; the trajectory settles near (0.91, 0.36).

    Examples
    --------
    >>> from odeinfer import zoo
    >>> zoo.activator_inhibitor().x0_array()
    array([0.1, 2. ])
    """
    return ZooEntry(
        name="activator_inhibitor",
        model=_activator_inhibitor_model(),
        params={"a1": 2.0, "a2": 3.0, "a3": 0.1, "a4": 0.4},
        x0={"x1": 0.1, "x2": 2.0},
        t0=0.0,
        t=np.linspace(0.0, 50.0, 101),
        sigma=0.03,
        source=(f"{_PAPER}, Section 3.3, eq. (59) (model), eq. (61) (Jacobian); true a = [2 3 0.1 0.4]^T, "
                "x0 = [0.1 2]^T; spec seed-000 §3.3 (steady state ~ (0.91, 0.36), slow time scale 1/a3 = 10)."),
        notes=(
            "The model's 'x0 = 0' in dx2/dt = a3 (a4 x1 + x0 - x2) is a constant basal term, not the "
            "initial state; it is fixed at 0 here, so f2 = a3 (a4 x1 - x2) (spec §3.3). The paper's "
            "'a_l, l = 1..5' should read 1..4.\n"
            "The paper states neither the time span, the sampling step nor the noise level.\n"
            "[choice] t = 0, 0.5, ..., 50 (101 points): the slow time scale is 1/a3 = 10, so T >= 50 is "
            "needed to see the transient (spec §3.3); dt = 0.5 is one of the spec's checked steps.\n"
            "[choice] sigma = 0.03 on both states: the upper end of the spec's checked noise levels "
            "(0.01-0.03), and close to the paper's Table 9 state RMSEs (0.0307, 0.0357)."
        ),
    )
