"""Classic benchmark models: Lotka-Volterra, FitzHugh-Nagumo, SIR, and a linear test system."""

from __future__ import annotations

from functools import cache

import numpy as np

from odeinfer.model import model
from odeinfer.zoo.registry import ZooEntry

__all__ = ["lotka_volterra", "fitzhugh_nagumo", "sir", "linear_decay", "BOARDING_SCHOOL_N"]

#: Boys at risk in the 1978 boarding-school influenza outbreak (BMJ 1978; Stan case study ``N = 763``).
BOARDING_SCHOOL_N = 763.0


@cache
def _lotka_volterra_model():
    @model(states=["prey", "predator"], params=["alpha", "beta", "gamma", "delta"], name="lotka_volterra")
    def lotka_volterra(t, y, p):
        """Lotka-Volterra predator-prey equations in the form of Carpenter (2018)."""
        return {"prey": (p.alpha - p.beta * y.predator) * y.prey,
                "predator": (-p.gamma + p.delta * y.prey) * y.predator}

    return lotka_volterra


def lotka_volterra() -> ZooEntry:
    """Lotka-Volterra predator-prey model on the lynx-hare scale (thousands of pelts, years since 1900).

    ``du/dt = (alpha - beta v) u``, ``dv/dt = (-gamma + delta u) v`` with the
    posterior means of Carpenter's Stan case study.

    Examples
    --------
    >>> from odeinfer import zoo
    >>> e = zoo.lotka_volterra()
    >>> e.model.with_observation(noise="log").observation.noise   # the case study's noise model
    'log'
    """
    return ZooEntry(
        name="lotka_volterra",
        model=_lotka_volterra_model(),
        params={"alpha": 0.55, "beta": 0.028, "gamma": 0.80, "delta": 0.024},
        x0={"prey": 33.96, "predator": 5.93},
        t0=0.0,
        t=np.arange(21, dtype=np.float64),
        sigma=0.25,
        source=("B. Carpenter (2018), \"Predator-Prey Population Dynamics: the Lotka-Volterra model in Stan\", "
                "Stan case study (stan-dev/example-models, knitr/lotka-volterra): model dz/dt, posterior means "
                "alpha = 0.55, beta = 0.028, gamma = 0.80, delta = 0.024, sigma_1 = sigma_2 = 0.25 "
                "(section 'Comparing the fitted model to data'), fitted to the Hudson's Bay Company "
                "lynx-hare pelts 1900-1920 (data/lynx_hare.csv)."),
        notes=(
            "NOISE SCALE: sigma = 0.25 is the case study's sd on the LOG scale (log y ~ Normal(log z, sigma), "
            "multiplicative noise). The entry's model is kept additive (the plain model); to use sigma as "
            "intended, take entry.model.with_observation(noise=\"log\").\n"
            "x0 = (33.96, 5.93) (thousands of hare, lynx pelts in 1900) is the case study's posterior mean "
            "of z_init (printed in its rendered output, not in the source text).\n"
            "[choice] t = 0, 1, ..., 20 (years since 1900, 21 points, t0 = 0), as in the data set; the "
            "case study observes t = 1..20 plus y_init at t = 0.\n"
            "Howard (2009) reports the different point estimates alpha = 0.55, beta = 0.028, gamma = 0.84, "
            "delta = 0.026, quoted in the case study."
        ),
    )


@cache
def _fitzhugh_nagumo_model():
    @model(states=["V", "R"], params=["a", "b", "c"], name="fitzhugh_nagumo")
    def fitzhugh_nagumo(t, y, p):
        """FitzHugh-Nagumo equations in the form of Ramsay et al. (2007)."""
        return {"V": p.c * (y.V - y.V ** 3 / 3.0 + y.R),
                "R": -(y.V - p.a + p.b * y.R) / p.c}

    return fitzhugh_nagumo


def fitzhugh_nagumo() -> ZooEntry:
    """FitzHugh-Nagumo neuron model (Ramsay, Hooker, Campbell & Cao 2007): nonlinear in states and parameters.

    ``dV/dt = c (V - V^3/3 + R)``, ``dR/dt = -(V - a + b R) / c``, ``(a, b, c) = (0.2, 0.2, 3)``,
    ``(V, R)(0) = (-1, 1)``.

    Examples
    --------
    >>> from odeinfer import zoo
    >>> zoo.fitzhugh_nagumo().x0_array()
    array([-1.,  1.])
    """
    return ZooEntry(
        name="fitzhugh_nagumo",
        model=_fitzhugh_nagumo_model(),
        params={"a": 0.2, "b": 0.2, "c": 3.0},
        x0={"V": -1.0, "R": 1.0},
        t0=0.0,
        t=np.linspace(0.0, 20.0, 401),
        sigma=0.5,
        source=("J. O. Ramsay, G. Hooker, D. Campbell, J. Cao (2007), \"Parameter estimation for differential "
                "equations: a generalized smoothing approach\", J. R. Stat. Soc. B 69, 741-796: the "
                "FitzHugh-Nagumo example with a = 0.2, b = 0.2, c = 3 and (V, R)(0) = (-1, 1) (the same values, on "
                "[0, 20], are in the authors' R package CollocInfer, data FhNdata). Also announced, "
                "without results, by the seed-001 paper (Brunel et al. 2013, Section 5.1)."),
        notes=(
            "[choice] t = 0, 0.05, ..., 20 (401 points) and sigma = 0.5 on both states: the sampling grid "
            "and noise level of the paper's simulation study as commonly quoted; the paper's text was not "
            "available to check them here. CollocInfer's bundled data use other settings (41 points, "
            "0.5 apart).\n"
            "The model is stiff-ish for large c (relaxation oscillations); c = 3 is mild."
        ),
    )


@cache
def _sir_model():
    n = BOARDING_SCHOOL_N

    @model(states=["S", "I", "R"], params=["beta", "gamma"], name="sir", observed=["I"])
    def sir(t, y, p):
        """SIR model with the population size N = 763 fixed inside the right-hand side."""
        infection = p.beta * y.S * y.I / n
        return {"S": -infection, "I": infection - p.gamma * y.I, "R": p.gamma * y.I}

    return sir


def sir() -> ZooEntry:
    """SIR model of the 1978 boarding-school influenza outbreak (N = 763, one index case).

    ``dS/dt = -beta S I / N``, ``dI/dt = beta S I / N - gamma I``, ``dR/dt = gamma I``;
    only ``I`` is observed (boys in bed, ``data/influenza_boarding_school.csv``).

    Examples
    --------
    >>> from odeinfer import zoo
    >>> zoo.sir().model.observed
    ('I',)
    """
    return ZooEntry(
        name="sir",
        model=_sir_model(),
        params={"beta": 1.7, "gamma": 0.5},
        x0={"S": BOARDING_SCHOOL_N - 1.0, "I": 1.0, "R": 0.0},
        t0=0.0,
        t=np.arange(1.0, 15.0),
        sigma={"I": 20.0},
        source=("L. Grinsztajn, E. Semenova, C. C. Margossian, J. Riou (2021), \"Bayesian workflow for disease "
                "transmission modeling in Stan\", Stan case study (stan-dev/example-models, "
                "knitr/disease_transmission), section 1 'Simple SIR': model, N = 763, I(0) = 1, S(0) = N - 1, "
                "R(0) = 0, t0 = 0, ts = 1..14, cases = in_bed. Data: Anonymous (1978), \"Influenza in a "
                "boarding school\", BMJ 1, 587, via the R package outbreaks (data/influenza_boarding_school.csv)."),
        notes=(
            "N = 763 is a constant inside the right-hand side, not a parameter (BOARDING_SCHOOL_N).\n"
            "[choice] beta = 1.7, gamma = 0.5 per day (R0 = 3.4): round values APPROXIMATELY equal to the "
            "posterior means usually quoted for the case study's negative-binomial fit (beta ~ 1.7, gamma ~ 0.5); "
            "those printed values were not checked here. Our own least-squares fits of this model to the "
            "bundled in_bed series bracket them: additive (1.67, 0.44), log-scale (1.78, 0.60).\n"
            "[choice] sigma = {'I': 20} boys, additive: the case study uses a negative-binomial likelihood "
            "(overdispersion phi), which this sd only approximates; 20 lies between the RMS residual of the "
            "additive least-squares fit (17) and the RMS residual at these defaults (24).\n"
            "Observation: in_bed ~ I (model.observed = ('I',)). Several digitisations of the data exist; "
            "see data/influenza_boarding_school.provenance.md."
        ),
    )


@cache
def _linear_decay_model():
    @model(states=["x1", "x2"], params=["k1", "k2"], name="linear_decay")
    def linear_decay(t, y, p):
        """First-order chain x1 -> x2 -> (out): dx/dt = A(k) x, A = [[-k1, 0], [k1, -k2]]."""
        return {"x1": -p.k1 * y.x1, "x2": p.k1 * y.x1 - p.k2 * y.x2}

    return linear_decay


def linear_decay() -> ZooEntry:
    """Linear two-compartment chain with an analytic solution, for solver tests.

    ``dx/dt = A x`` with ``A = [[-k1, 0], [k1, -k2]]``, so ``x(t) = expm(A (t - t0)) x0``;
    for ``x0 = (1, 0)`` and ``k1 != k2``: ``x1 = exp(-k1 t)``,
    ``x2 = k1 / (k2 - k1) (exp(-k1 t) - exp(-k2 t))`` (Bateman).

    Examples
    --------
    >>> from odeinfer import zoo
    >>> zoo.linear_decay().params_array()
    array([0.5, 0.2])
    """
    return ZooEntry(
        name="linear_decay",
        model=_linear_decay_model(),
        params={"k1": 0.5, "k2": 0.2},
        x0={"x1": 1.0, "x2": 0.0},
        t0=0.0,
        t=np.linspace(0.0, 10.0, 21)[1:],
        sigma=0.02,
        source=("Linear first-order decay chain x1 -> x2 -> out (H. Bateman (1910), Proc. Camb. Phil. Soc. 15, "
                "423-427); solution x(t) = expm(A (t - t0)) x0. A synthetic test problem, not from the papers."),
        notes=(
            "[choice] k1 = 0.5, k2 = 0.2 (distinct, so the Bateman formula applies and A is diagonalizable), "
            "x0 = (1, 0), t = 0.5, 1.0, ..., 10 (20 points), sigma = 0.02."
        ),
    )
