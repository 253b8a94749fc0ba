"""Tests of odeinfer.datasets against the CSV files read independently with the csv module.

Row counts and spot values come from data/SOURCES.md and the provenance notes.
"""

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from odeinfer import datasets
from odeinfer.data import Data
from odeinfer.errors import DataError

DATA_DIR = Path(__file__).resolve().parents[1] / "data"

# rows from data/SOURCES.md
ROWS = {
    "lynx_hare": 21,
    "blowfly_nicholson": 361,
    "blowfly_nicholson_bf1": 275,
    "blowfly_nicholson_bf2": 111,
    "blowfly_nicholson_bf3": 111,
    "influenza_boarding_school": 14,
    "influenza_boarding_school_pomp_bsflu": 14,
    "alpha_pinene": 8,
    "alpha_pinene_204C": 8,
}


def read_csv(name):
    """Header and rows of data/<name>.csv, numbers as float, empty fields as NaN."""
    with open(DATA_DIR / f"{name}.csv", newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    return header, rows


def column(name, col):
    header, rows = read_csv(name)
    j = header.index(col)
    return [float(r[j]) if r[j] != "" else math.nan for r in rows]


def same(a, b):
    return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float), equal_nan=True)


def test_available_names():
    assert set(datasets.available()) == set(ROWS)
    assert all((DATA_DIR / f"{n}.csv").is_file() for n in datasets.available())


@pytest.mark.parametrize("name", sorted(ROWS))
def test_load_frame_matches_csv(name):
    df = datasets.load_frame(name)
    header, rows = read_csv(name)
    assert list(df.columns) == header
    assert len(df) == len(rows) == ROWS[name]
    for j, col in enumerate(header):
        if col == "date":
            assert df[col].tolist() == [r[j] for r in rows]
        else:
            assert same(df[col].to_numpy(dtype=float), column(name, col)), col


def test_unknown_name_lists_available():
    with pytest.raises(DataError, match=r"unknown dataset `name` 'lynx'; the available datasets are "
                                        r"\['lynx_hare', .*'alpha_pinene_204C'\]\. Did you mean 'lynx_hare'"):
        datasets.load_frame("lynx")
    with pytest.raises(DataError, match=r"unknown dataset"):
        datasets.citation("nope")
    with pytest.raises(DataError, match=r"unknown dataset"):
        datasets.provenance("nope")


def test_lynx_hare():
    d = datasets.lynx_hare()
    assert isinstance(d, Data) and d.name == "lynx_hare"
    assert d.states == ("hare", "lynx")
    assert same(d.t, [y - 1900 for y in column("lynx_hare", "year")])
    assert d.t[0] == 0.0 and d.t[-1] == 20.0 and d.t0 == 0.0
    assert same(d.y[:, 0], column("lynx_hare", "hare"))
    assert same(d.y[:, 1], column("lynx_hare", "lynx"))
    assert d.y[20, 1] == 8.6  # 1920 lynx, SOURCES.md (PINTS has 8.1)
    assert d.nobs == 42


@pytest.mark.parametrize(
    "series, name, first_day, last_day",
    [
        ("1957", "blowfly_nicholson", 0, 720),
        ("bf1", "blowfly_nicholson_bf1", 40, 315),
        ("bf2", "blowfly_nicholson_bf2", 240, 460),
        ("bf3", "blowfly_nicholson_bf3", 240, 460),
    ],
)
def test_blowflies(series, name, first_day, last_day):
    d = datasets.blowflies(series)
    assert d.name == name and d.states == ("adults",)
    assert d.n_times == ROWS[name]
    assert (d.t[0], d.t[-1]) == (first_day, last_day)  # SOURCES.md
    assert same(d.t, column(name, "day"))
    assert same(d.y[:, 0], column(name, "adults"))


def test_blowflies_default_and_spacing():
    assert datasets.blowflies() == datasets.blowflies("1957")
    assert set(np.diff(datasets.blowflies("1957").t)) == {2.0}


def test_bf1_day_109_missing():
    t = datasets.blowflies("bf1").t
    assert 108.0 in t and 110.0 in t and 109.0 not in t
    gaps = np.diff(t)
    assert gaps.max() == 2.0 and np.count_nonzero(gaps != 1.0) == 1
    # linear stretch quoted in the provenance notes: days 49-54
    y = datasets.blowflies("bf1").y[:, 0]
    assert y[np.isin(t, [49, 50, 51, 52, 53, 54])].tolist() == [270, 300, 330, 360, 390, 420]


def test_blowflies_bad_series():
    with pytest.raises(DataError, match=r"`series` must be one of \['1957', 'bf1', 'bf2', 'bf3'\]; received 1957"):
        datasets.blowflies(1957)


@pytest.mark.parametrize(
    "version, name, in_bed",
    [
        # series quoted in SOURCES.md
        ("outbreaks", "influenza_boarding_school", [3, 8, 26, 76, 225, 298, 258, 233, 189, 128, 68, 29, 14, 4]),
        ("pomp", "influenza_boarding_school_pomp_bsflu", [1, 6, 26, 73, 222, 293, 258, 236, 191, 124, 69, 26, 11, 4]),
    ],
)
def test_influenza(version, name, in_bed):
    d = datasets.influenza_boarding_school(version)
    assert d.name == name and d.states == ("in_bed", "convalescent")
    assert d.t.tolist() == list(range(1, 15)) and d.t0 == 0.0
    assert d.y[:, 0].tolist() == in_bed
    assert same(d.y[:, 1], column(name, "convalescent"))


def test_influenza_bad_version():
    with pytest.raises(DataError, match=r"`version` must be one of \['outbreaks', 'pomp'\]"):
        datasets.influenza_boarding_school("murray")


@pytest.mark.parametrize("temperature, name", [("189.5C", "alpha_pinene"), ("204.5C", "alpha_pinene_204C")])
def test_alpha_pinene(temperature, name):
    d = datasets.alpha_pinene(temperature)
    assert d.name == name and d.t0 == 0.0
    assert d.states == ("alpha_pinene", "dipentene", "alloocimene", "pyronene", "dimer")
    assert same(d.t, column(name, "time_min"))
    for j, col in enumerate(["y1_alpha_pinene", "y2_dipentene", "y3_alloocimene", "y4_pyronene", "y5_dimer"]):
        assert same(d.y[:, j], column(name, col)), col


def test_alpha_pinene_values_and_x0():
    d = datasets.alpha_pinene()
    assert d.t.tolist() == [1230, 3060, 4920, 7800, 10680, 15030, 22620, 36420]  # Bates & Watts table / scipy AlphaPineneDirect
    assert d.y[0].tolist() == [88.35, 7.3, 2.3, 0.4, 1.75]
    assert d.mask.all() and d.nobs == 40
    assert datasets.ALPHA_PINENE_X0.tolist() == [100.0, 0.0, 0.0, 0.0, 0.0]
    assert not datasets.ALPHA_PINENE_X0.flags.writeable


def test_alpha_pinene_204C_missing_value_is_masked():
    d = datasets.alpha_pinene("204.5C")
    assert d.t[-1] == 16020.0
    assert np.isnan(d.y[-1, 0]) and not d.mask[-1, 0]
    assert d.mask.sum() == 39 and d.nobs == 39
    assert d.y[-1, 1:].tolist() == [61.3, 5.0, 3.0, 27.8]


def test_alpha_pinene_bad_temperature():
    with pytest.raises(DataError, match=r"`temperature` must be one of \['189.5C', '204.5C'\]; received 189.5"):
        datasets.alpha_pinene(189.5)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("lynx_hare", ["Hewitt, C. G. (1921)", "Howard, P. (2009)", "stan-dev/example-models", "BSD-3"]),
        ("blowfly_nicholson", ["Nicholson, A. J. (1957)", "Brillinger", "kingaa/pomp", "GPL-3"]),
        ("blowfly_nicholson_bf2", ["Nicholson, A. J. (1954)", "cran/synlik", "GPL"]),
        ("influenza_boarding_school", ["BMJ", "De Vries", "reconhub/outbreaks"]),
        ("alpha_pinene_204C", ["Fuguitt", "Box, G. E. P.", "Bates, D. M.", "Pinene2"]),
    ],
)
def test_citation(name, expected):
    text = datasets.citation(name)
    for piece in expected:
        assert piece in text
    assert "`" not in text and "*" not in text  # plain text, no markdown


def test_provenance():
    assert datasets.provenance("lynx_hare").startswith("# lynx_hare.csv: provenance")
    assert "Pinene2" in datasets.provenance("alpha_pinene_204C")
    assert datasets.provenance("blowfly_nicholson_bf3") == (DATA_DIR / "blowfly_nicholson.provenance.md").read_text(
        encoding="utf-8")


def test_installed_package_data_is_preferred(tmp_path, monkeypatch):
    """In a wheel the CSVs live in odeinfer/datasets/_data/; they are read before data/."""
    (tmp_path / "_data").mkdir()
    (tmp_path / "_data" / "lynx_hare.csv").write_text("year,hare,lynx\n1900,1.5,2.5\n")
    import odeinfer.datasets._files as files

    monkeypatch.setattr(files.importlib.resources, "files", lambda package: tmp_path)
    df = datasets.load_frame("lynx_hare")
    assert df.shape == (1, 3) and df["hare"].tolist() == [1.5]
    # a file absent from _data falls back to the repository's data/ folder
    assert len(datasets.load_frame("alpha_pinene")) == 8


PETAB_DIR = Path(__file__).resolve().parent / "data" / "petab"


def test_petab_problems_are_the_test_copies():
    """The bundled PEtab problems are the folders of tests/data/petab (the wheel ships that folder); each name
    gives its YAML file, which odeinfer.petab.load reads."""
    import odeinfer as oi

    folders = sorted(d.name for d in PETAB_DIR.iterdir() if d.is_dir())
    assert datasets.petab_problems() == tuple(folders) and len(folders) == 11
    path = datasets.petab_problem("Perelson_Science1996")
    assert path == PETAB_DIR / "Perelson_Science1996" / "Perelson_Science1996.yaml"
    pp = oi.petab.load(path)
    assert pp.name == "Perelson_Science1996" and len(pp.problem.estimated) == 3


def test_unknown_petab_problem():
    with pytest.raises(DataError, match=r"unknown PEtab problem `name` 'Boehm_JProteomeRes'; the bundled problems "
                                        r"are \['Boehm_JProteomeRes2014', .*\]\. Did you mean 'Boehm_JProteomeRes2014'"):
        datasets.petab_problem("Boehm_JProteomeRes")
    with pytest.raises(DataError, match=r"unknown PEtab problem `name` 3"):
        datasets.petab_problem(3)


def test_installed_petab_problems_are_preferred(tmp_path, monkeypatch):
    """In a wheel the problems live in odeinfer/datasets/_data/petab/; a folder without its YAML is no problem."""
    (tmp_path / "_data" / "petab" / "Mine").mkdir(parents=True)
    (tmp_path / "_data" / "petab" / "Mine" / "Mine.yaml").write_text("format_version: 1\n")
    (tmp_path / "_data" / "petab" / "Empty").mkdir()
    import odeinfer.datasets._files as files

    monkeypatch.setattr(files.importlib.resources, "files", lambda package: tmp_path)
    assert datasets.petab_problems() == ("Mine",)
    assert datasets.petab_problem("Mine") == tmp_path / "_data" / "petab" / "Mine" / "Mine.yaml"
