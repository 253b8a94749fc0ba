"""Bundled real datasets as :class:`~odeinfer.data.Data`.

See ``citation(name)`` and ``provenance(name)`` for the full sources; the
CSV files are copied unchanged from the repositories named there.
"""

from __future__ import annotations

import numpy as np

from ..data import Data
from ..errors import DataError
from ._files import load_frame

__all__ = [
    "lynx_hare",
    "blowflies",
    "influenza_boarding_school",
    "alpha_pinene",
    "ALPHA_PINENE_STATES",
    "ALPHA_PINENE_X0",
]

ALPHA_PINENE_STATES = ("alpha_pinene", "dipentene", "alloocimene", "pyronene", "dimer")
"""tuple of str: state names of :func:`alpha_pinene` (the CSV's y1 ... y5)."""

# Known initial state of alpha_pinene() at t = 0, in the order of ALPHA_PINENE_STATES
# (percent): all alpha-pinene, no products. Read-only float64, shape (5,).
ALPHA_PINENE_X0 = np.array([100.0, 0.0, 0.0, 0.0, 0.0])
ALPHA_PINENE_X0.flags.writeable = False

_ALPHA_COLUMNS = ("y1_alpha_pinene", "y2_dipentene", "y3_alloocimene", "y4_pyronene", "y5_dimer")


def _choice(argument, value, choices):
    if value not in choices:
        raise DataError(
            f"`{argument}` must be one of {list(choices)}; received {value!r}. "
            f"Pass e.g. {argument}={next(iter(choices))!r}."
        )
    return choices[value]


def lynx_hare():
    """Hudson's Bay Company hare and lynx pelts, 1900-1920 (21 yearly values).

    Returns
    -------
    Data
        ``t`` = year - 1900 (0, 1, ..., 20), states ``("hare", "lynx")`` in
        thousands of pelts, ``name="lynx_hare"``, ``t0 = 0``.

    Notes
    -----
    Source: Hewitt (1921), *The Conservation of the Wild Life of Canada*, via
    Howard (2009), *Modeling basics*, Math 442 notes, Texas A&M; copied from
    stan-dev/example-models ``knitr/lotka-volterra/hudson-bay-lynx-hare.csv``
    (licence BSD-3). The 1920 lynx value is 8.6 here (Stan, posteriordb, PyMC,
    sunode); PINTS uses 8.1. See ``provenance("lynx_hare")``.
    """
    df = load_frame("lynx_hare")
    return Data(df["year"].to_numpy(dtype=float) - 1900.0, df[["hare", "lynx"]].to_numpy(dtype=float),
                ("hare", "lynx"), name="lynx_hare")


_BLOWFLY_SERIES = {
    "1957": "blowfly_nicholson",
    "bf1": "blowfly_nicholson_bf1",
    "bf2": "blowfly_nicholson_bf2",
    "bf3": "blowfly_nicholson_bf3",
}


def blowflies(series="1957"):
    """Nicholson's sheep-blowfly (*Lucilia cuprina*) adult counts.

    Parameters
    ----------
    series : {"1957", "bf1", "bf2", "bf3"}, default "1957"
        ``"1957"``: control culture, days 0-720 every 2 days (361 values;
        Nicholson 1957 via Brillinger et al. 1980; pomp ``blowflies`` set 4).
        ``"bf1"``: Nicholson (1954) Fig. 3, adult-food limited, daily on days
        40-315 with day 109 missing (275 values; partly interpolated to daily).
        ``"bf2"`` / ``"bf3"``: Nicholson (1954) Fig. 4 upper / lower series,
        days 240-460 every 2 days (111 values each; digitised).

    Returns
    -------
    Data
        ``t`` = day, one state ``"adults"``, ``name`` = the CSV name
        (e.g. ``"blowfly_nicholson_bf1"``), ``t0 = t[0]``.

    Notes
    -----
    Sources: kingaa/pomp ``data/blowflies.csv`` (GPL-3) and cran/synlik 0.1.7
    ``data/bf1.rda`` ... ``bf3.rda`` (GPL >= 2). These are published
    observations; see ``citation(name)`` and ``provenance(name)``.
    """
    name = _choice("series", series, _BLOWFLY_SERIES)
    df = load_frame(name)
    return Data(df["day"].to_numpy(dtype=float), df["adults"].to_numpy(dtype=float), "adults", name=name)


_FLU_VERSIONS = {
    "outbreaks": "influenza_boarding_school",
    "pomp": "influenza_boarding_school_pomp_bsflu",
}


def influenza_boarding_school(version="outbreaks"):
    """Influenza outbreak in an English boys' boarding school, 22 Jan - 4 Feb 1978.

    763 boys at risk; the outbreak started from one index case.

    Parameters
    ----------
    version : {"outbreaks", "pomp"}, default "outbreaks"
        Digitisation: R package outbreaks ``influenza_england_1978_school``
        (the series of Stan's disease-transmission case study), or pomp
        ``bsflu`` (a different digitisation of the same figure).

    Returns
    -------
    Data
        ``t`` = day (1, ..., 14; day 1 = 1978-01-22), states
        ``("in_bed", "convalescent")`` (numbers of boys), ``t0 = 0`` (the
        initial state, e.g. one infected boy, applies the day before the first
        count, as in the Stan case study), ``name`` = the CSV name.

    Notes
    -----
    Source: Anonymous (1978), Influenza in a boarding school, *BMJ* 1, 587, as
    digitised in De Vries et al. (2006), *A Course in Mathematical Biology*;
    copied from reconhub/outbreaks v1.9.0 (GPL >= 2) or kingaa/pomp (GPL-3).
    See ``citation(name)`` and ``provenance(name)``.
    """
    name = _choice("version", version, _FLU_VERSIONS)
    df = load_frame(name)
    states = ("in_bed", "convalescent")
    return Data(df["day"].to_numpy(dtype=float), df[list(states)].to_numpy(dtype=float), states,
                t0=0.0, name=name)


_PINENE_RUNS = {"189.5C": "alpha_pinene", "204.5C": "alpha_pinene_204C"}


def alpha_pinene(temperature="189.5C"):
    """Thermal isomerisation of alpha-pinene (Fuguitt & Hawkins 1947), 8 times.

    Parameters
    ----------
    temperature : {"189.5C", "204.5C"}, default "189.5C"
        ``"189.5C"``: the standard benchmark run (t = 1230 ... 36420 min).
        ``"204.5C"``: the second run (t = 440 ... 16020 min; inferred from
        Bates & Watts to be the 204.5 C run); its alpha-pinene value at
        t = 16020 is missing (NaN, masked).

    Returns
    -------
    Data
        ``t`` in minutes, states :data:`ALPHA_PINENE_STATES` =
        ``("alpha_pinene", "dipentene", "alloocimene", "pyronene", "dimer")``
        (the CSV's y1 ... y5, relative concentrations in percent), ``t0 = 0.0``.

    Notes
    -----
    The initial state is not a row of the data: it is known,
    ``ALPHA_PINENE_X0 = (100, 0, 0, 0, 0)`` at ``t = 0``. In the original
    experiment y4 (pyronene) was not measured but imputed from the others, which
    creates exact linear dependencies among the responses (Box et al. 1973;
    Bates & Watts 1988); a naive determinant fit of all five responses converges
    to a spurious optimum.

    Sources: Fuguitt, R. E. & Hawkins, J. E. (1947), *J. Am. Chem. Soc.* 69,
    319-322; Box, Hunter, MacGregor & Erjavec (1973), *Technometrics* 15, 33-51;
    Bates & Watts (1988), *Nonlinear Regression Analysis and Its Applications*.
    Copied from r-forge/nraia ``Pinene`` / ``Pinene2`` (GPL >= 2); the 189.5 C
    numbers are identical to scipy's benchmark ``AlphaPineneDirect`` (BSD-3).
    See ``citation(name)`` and ``provenance(name)``.
    """
    name = _choice("temperature", temperature, _PINENE_RUNS)
    df = load_frame(name)
    return Data(df["time_min"].to_numpy(dtype=float), df[list(_ALPHA_COLUMNS)].to_numpy(dtype=float),
                ALPHA_PINENE_STATES, t0=0.0, name=name)
