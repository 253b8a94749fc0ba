"""Locating and reading the bundled CSV files, their citations and provenance notes.

In an installed wheel the repository's ``data/`` folder is shipped as
``odeinfer/datasets/_data/``; in a source checkout the files are read from
``data/`` at the repository root.
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path

from odeinfer._lazy import pandas as pd

from ..data._validate import close_matches
from ..errors import DataError

__all__ = ["available", "load_frame", "citation", "provenance", "petab_problems", "petab_problem"]

# name -> (provenance file, reference keys found at the start of SOURCES.md's reference lines)
_DATASETS = {
    "lynx_hare": ("lynx_hare", ("Hewitt, C. G. (1921)", "Howard, P. (2009)")),
    "blowfly_nicholson": ("blowfly_nicholson", ("Nicholson, A. J. (1957)", "Brillinger, D. R. et al. (1980)")),
    "blowfly_nicholson_bf1": ("blowfly_nicholson", ("Nicholson, A. J. (1954)",)),
    "blowfly_nicholson_bf2": ("blowfly_nicholson", ("Nicholson, A. J. (1954)",)),
    "blowfly_nicholson_bf3": ("blowfly_nicholson", ("Nicholson, A. J. (1954)",)),
    "influenza_boarding_school": ("influenza_boarding_school", ("Anonymous (1978)", "De Vries, G. et al. (2006)")),
    "influenza_boarding_school_pomp_bsflu": (
        "influenza_boarding_school", ("Anonymous (1978)", "De Vries, G. et al. (2006)")),
    "alpha_pinene": ("alpha_pinene", ("Fuguitt, R. E.", "Box, G. E. P.", "Bates, D. M.")),
    "alpha_pinene_204C": ("alpha_pinene", ("Fuguitt, R. E.", "Box, G. E. P.", "Bates, D. M.")),
}


def available():
    """Names of the bundled datasets.

    Returns
    -------
    tuple of str
        Valid ``name`` arguments of :func:`load_frame`, :func:`citation` and
        :func:`provenance`.
    """
    return tuple(_DATASETS)


def _check_name(name):
    if name not in _DATASETS:
        raise DataError(
            f"unknown dataset `name` {name!r}; the available datasets are {list(_DATASETS)}."
            f"{close_matches(name, _DATASETS) if isinstance(name, str) else ''}"
        )


def _resource(filename):
    """The bundled file: installed package data first, then the repository's data/."""
    try:
        candidate = importlib.resources.files("odeinfer.datasets") / "_data" / filename
        if candidate.is_file():
            return candidate
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    path = Path(__file__).resolve().parents[2] / "data" / filename
    if path.is_file():
        return path
    raise FileNotFoundError(
        f"odeinfer's bundled data file {filename!r} was not found, neither in the installed "
        f"package (odeinfer/datasets/_data/) nor in the source checkout's data/ folder. "
        f"Reinstall odeinfer, or restore the data/ folder of the repository."
    )


def _petab_folder():
    """The folder of the bundled PEtab problems: the installed package's ``_data/petab/`` (the wheel ships the
    repository's ``tests/data/petab/`` there), else the source checkout's ``tests/data/petab/``."""
    try:
        candidate = importlib.resources.files("odeinfer.datasets") / "_data" / "petab"
        if isinstance(candidate, Path) and candidate.is_dir():
            return candidate
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    path = Path(__file__).resolve().parents[2] / "tests" / "data" / "petab"
    if path.is_dir():
        return path
    raise FileNotFoundError(
        "odeinfer's bundled PEtab problems were not found, neither in the installed package "
        "(odeinfer/datasets/_data/petab/) nor in the source checkout's tests/data/petab/ folder. Reinstall odeinfer."
    )


def petab_problems():
    """Names of the bundled PEtab problems: real models with real data and published best fits, from the
    public Benchmark-Models-PEtab collection (BSD-3-Clause; the folder's ``README.md`` and ``LICENSE`` say
    which commit and what each exercises).

    Returns
    -------
    tuple of str
        Valid ``name`` arguments of :func:`petab_problem`, sorted.
    """
    folder = _petab_folder()
    return tuple(sorted(d.name for d in folder.iterdir() if (d / f"{d.name}.yaml").is_file()))


def petab_problem(name):
    """The YAML file of a bundled PEtab problem, to pass to :func:`odeinfer.petab.load`.

    Parameters
    ----------
    name : str
        One of :func:`petab_problems`, e.g. ``"Boehm_JProteomeRes2014"``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    DataError
        If ``name`` is not a bundled problem (the message lists them).

    >>> import odeinfer as oi
    >>> pp = oi.petab.load(oi.datasets.petab_problem("Boehm_JProteomeRes2014"))  # doctest: +SKIP
    """
    names = petab_problems()
    if name not in names:
        raise DataError(
            f"unknown PEtab problem `name` {name!r}; the bundled problems are {list(names)}."
            f"{close_matches(name, names) if isinstance(name, str) else ''}"
        )
    return _petab_folder() / name / f"{name}.yaml"


def load_frame(name):
    """Read a bundled dataset exactly as stored in its CSV file.

    Parameters
    ----------
    name : str
        One of :func:`available`.

    Returns
    -------
    pandas.DataFrame
        The CSV as read by :func:`pandas.read_csv`; empty fields are NaN, the
        columns and their order are those of the file.

    Raises
    ------
    DataError
        If ``name`` is unknown (the message lists the available names).
    """
    _check_name(name)
    with _resource(f"{name}.csv").open("rb") as fh:
        return pd.read_csv(fh)


def provenance(name):
    """The provenance notes (markdown) of a bundled dataset.

    Parameters
    ----------
    name : str
        One of :func:`available`. Related files share one note.

    Returns
    -------
    str
    """
    _check_name(name)
    return _resource(f"{_DATASETS[name][0]}.provenance.md").read_text(encoding="utf-8")


def _plain(text):
    return re.sub(r"[`*]", "", text).strip()


def citation(name):
    """References and source of a bundled dataset, as plain text (from SOURCES.md).

    Parameters
    ----------
    name : str
        One of :func:`available`.

    Returns
    -------
    str
        One reference per line, then the source the file was copied from and its
        licence.
    """
    _check_name(name)
    sources = _resource("SOURCES.md").read_text(encoding="utf-8")
    refs_block = sources.split("## References", 1)[-1]
    ref_lines = [line[2:] for line in refs_block.splitlines() if line.startswith("- ")]
    lines = []
    for key in _DATASETS[name][1]:
        hits = [r for r in ref_lines if r.startswith(key)]
        if not hits:
            raise LookupError(f"reference {key!r} of dataset {name!r} is missing from SOURCES.md")
        lines.append(_plain(hits[0]))
    for row in sources.splitlines():
        if row.startswith(f"| `{name}.csv`"):
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            lines.append(f"Data file {name}.csv copied from {_plain(cells[3])}; licence: {_plain(cells[4])}.")
            break
    return "\n".join(lines)
