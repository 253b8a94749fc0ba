"""TOML analysis specs: the documented format parses, every bad input names its key."""

import textwrap

import numpy as np
import pytest

from odeinfer.errors import DataError, EquationParseError, InputError
from odeinfer.spec import load_spec, parse_prior

CSV = "year,hare,lynx\n1900,30,4\n1901,47.2,6.1\n1902,70.2,9.8\n1903,77.4,35.2\n"

SPEC = """
title = "LV <b>test</b>"

[model]
name = "lv"
params = ["alpha", "beta", "gamma", "delta"]
noise = "log"
[model.equations]
prey = "alpha*prey - beta*prey*pred"
pred = "delta*prey*pred - gamma*pred"

[data]
csv = "lh.csv"
time = "year"
time_origin = 1900
[data.observed]
prey = "hare"
pred = "lynx"

[fit]
estimators = ["OrthogonalConditions", "Embedding"]
start = { alpha = 0.5, beta = 0.03, gamma = 0.8, delta = 0.02 }
bounds = { alpha = [0.0, 5.0] }

[bayes]
draws = 200
chains = 2
[bayes.priors]
alpha = "TruncatedNormal(mu=1, sigma=0.5, lower=0)"
"x0[prey]" = "LogNormal(mu=2.3, sigma=1)"
"""


def write(tmp_path, spec=SPEC, csv=CSV):
    (tmp_path / "lh.csv").write_text(csv)
    p = tmp_path / "spec.toml"
    p.write_text(textwrap.dedent(spec))
    return p


def test_documented_spec_parses(tmp_path):
    s = load_spec(write(tmp_path))
    assert s.title == "LV <b>test</b>"  # kept as given; escaping is the report's job
    assert s.model.states == ("prey", "pred") and s.model.params == ("alpha", "beta", "gamma", "delta")
    assert s.model.observation.noise == "log"
    np.testing.assert_array_equal(s.data.t, [0.0, 1.0, 2.0, 3.0])  # time_origin subtracted
    np.testing.assert_array_equal(s.data.y[:, 1], [4.0, 6.1, 9.8, 35.2])
    assert s.estimators == ("OrthogonalConditions", "Embedding")
    assert s.start["beta"] == 0.03 and s.bounds == {"alpha": (0.0, 5.0)}
    assert s.bayes.draws == 200 and s.bayes.tune == 500
    assert s.bayes.priors["alpha"] == ("TruncatedNormal", (), {"mu": 1.0, "sigma": 0.5, "lower": 0.0})


def test_parse_prior_negative_and_positional():
    assert parse_prior("Normal(-1, 2.5)") == ("Normal", (-1.0, 2.5), {})


@pytest.mark.parametrize("text, match", [
    ("__import__('os')", "unknown distribution '__import__'"),
    ("os.system(1)", "distribution call"),
    ("Normal(mu=exp(1), sigma=1)", "plain numbers"),
    ("Foo(1)", "unknown distribution 'Foo'"),
    ("Normal(**{'mu': 1})", r"'\*\*' are not allowed"),
    ("Normal(mu=1", "distribution call"),
    (3, "expected a string"),
])
def test_bad_priors(text, match):
    with pytest.raises(InputError, match=match):
        parse_prior(text)


@pytest.mark.parametrize("old, new, err, match", [
    ('title = "LV', 'colour = "red"\ntitle = "LV', InputError, r"unknown key\(s\) \['colour'\] in the top level"),
    ('noise = "log"', 'noise = "log"\nsolver = "x"', InputError, r"unknown key\(s\) \['solver'\] in \[model\]"),
    ('pred = "delta*prey*pred - gamma*pred"', 'pred = "delta*prey*pred - gamma*pred + os.system(1)"',
     EquationParseError, "os"),
    ('pred = "lynx"', 'pred = "lynxes"', DataError, r"column\(s\) \['lynxes'\] not in 'lh.csv'"),
    ('csv = "lh.csv"', 'csv = "nope.csv"', InputError, "no file 'nope.csv'"),
    ('estimators = ["OrthogonalConditions", "Embedding"]', 'estimators = ["Magic"]', InputError,
     r"\['Magic'\] not available"),
    ('start = { alpha = 0.5,', 'start = { omega = 0.5,', InputError, "'omega' is not one of"),
    ('bounds = { alpha = [0.0, 5.0] }', 'bounds = { alpha = [5.0, 1.0] }', InputError, "lower < upper"),
    ('draws = 200', 'draws = -3', InputError, "draws: expected a positive integer"),
    ('alpha = "TruncatedNormal', 'zeta = "TruncatedNormal', InputError, "'zeta' is not a parameter"),
    ('time = "year"', 'time = "yr"', DataError, r"\['yr'\]"),
])
def test_bad_specs_name_the_key(tmp_path, old, new, err, match):
    assert old in SPEC
    with pytest.raises(err, match=match):
        load_spec(write(tmp_path, SPEC.replace(old, new, 1)))


def test_missing_tables_and_files(tmp_path):
    with pytest.raises(InputError, match="no file"):
        load_spec(tmp_path / "absent.toml")
    with pytest.raises(InputError, match=r"the \[data\] table is missing"):
        load_spec(write(tmp_path, SPEC.split("[data]")[0]))
    bad = tmp_path / "bad.toml"
    bad.write_text("title = \n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_spec(bad)
