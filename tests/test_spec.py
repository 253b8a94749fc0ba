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


def test_parse_prior_reads_long_integer_literals_as_floats():
    dist, _, kwargs = parse_prior("Normal(mu=" + "9" * 120 + ", sigma=1)")
    assert kwargs["mu"] == float("9" * 120)


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
    # hostile input is bounded: a deep unary chain, a huge literal, an overlong text
    ("Normal(mu=" + "-" * 150 + "1, sigma=1)", None),
    ("Normal(mu=" + "9" * 400 + ", sigma=1)", "at most 200 are allowed"),
    ("Normal(mu=" + "-" * 9990 + "1)", "at most 200 are allowed"),
])
def test_bad_priors(text, match):
    if match is None:  # within the limits: parsed, never a crash
        dist, _, kwargs = parse_prior(text)
        assert dist == "Normal" and kwargs["mu"] == 1.0  # 150 minus signs: +1
        return
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
    ('time = "year"', 'time = ["year"]', InputError, r"column names must be strings, got \[\['year'\]\]"),
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


# -- data paths stay inside the spec's folder; file content is never echoed --------------------------------
SECRET = "TOKEN=hunter2-secret"


def _project(tmp_path):
    """tmp/outside.csv (a file the spec must not read) and tmp/proj/ holding the spec and its data."""
    (tmp_path / "outside.csv").write_text(f"{SECRET},year\n1,2\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    return proj


def _spec_with_csv(proj, csv):
    return write(proj, SPEC.replace('csv = "lh.csv"', f"csv = {csv!r}".replace("'", '"'), 1))


@pytest.mark.parametrize("csv", ["../outside.csv", "../../../../../../../../etc/passwd", "sub/../../outside.csv",
                                 "/etc/passwd", "/proc/self/environ", "OUTSIDE_ABS"])
def test_data_paths_outside_the_spec_folder_are_refused(tmp_path, csv):
    proj = _project(tmp_path)
    (proj / "sub").mkdir()
    csv = str(tmp_path / "outside.csv") if csv == "OUTSIDE_ABS" else csv
    with pytest.raises(InputError, match=r"\[data\] csv: .* is outside the folder of the spec") as info:
        load_spec(_spec_with_csv(proj, csv))
    assert SECRET not in str(info.value) and "root:" not in str(info.value)


@pytest.mark.skipif(not hasattr(__import__("os"), "symlink"), reason="needs symbolic links")
def test_symlinks_leaving_the_spec_folder_are_refused(tmp_path):
    proj = _project(tmp_path)
    (proj / "link.csv").symlink_to(tmp_path / "outside.csv")
    (proj / "dirlink").symlink_to(tmp_path)
    for csv in ("link.csv", "dirlink/outside.csv"):
        with pytest.raises(InputError, match="is outside the folder of the spec") as info:
            load_spec(_spec_with_csv(proj, csv))
        assert SECRET not in str(info.value)
    # links that stay inside the folder, and absolute paths inside it, are fine
    (proj / "data").mkdir()
    (proj / "data" / "real.csv").write_text(CSV)
    (proj / "inside.csv").symlink_to(proj / "data" / "real.csv")
    for csv in ("inside.csv", "data/real.csv", str(proj / "data" / "real.csv")):
        assert load_spec(_spec_with_csv(proj, csv)).data.y[1, 0] == 47.2


@pytest.mark.parametrize("csv", [3, "", ["a.csv"]])
def test_data_path_must_be_a_file_name(tmp_path, csv):
    spec = SPEC.replace('csv = "lh.csv"', f"csv = {csv!r}".replace("'", '"'), 1)
    with pytest.raises(InputError, match=r"\[data\] csv: expected the name of a CSV file"):
        load_spec(write(tmp_path, spec))


def test_missing_column_error_shows_only_plain_column_names(tmp_path):
    csv = f"year,hare,lynx,{SECRET},root:x:0:0:root:/root:/bin/bash\n1900,30,4,1,2\n1901,47.2,6.1,1,2\n"
    with pytest.raises(DataError, match=r"column\(s\) \['lynxes'\] not in 'lh.csv'; its columns are "
                                        r"\['year', 'hare', 'lynx'\] and 2 more whose names are not shown") as info:
        load_spec(write(tmp_path, SPEC.replace('pred = "lynx"', 'pred = "lynxes"'), csv))
    assert "hunter2" not in str(info.value) and "/bin/bash" not in str(info.value)


def test_bad_cells_and_unreadable_files_are_named_without_their_content(tmp_path):
    csv = CSV.replace("47.2", "hunter2")
    with pytest.raises(DataError, match=r"column 'hare' of 'lh.csv' has 1 non-numeric cell\(s\), the first in "
                                        r"data row 2; expected numbers") as info:
        load_spec(write(tmp_path, SPEC, csv))
    assert "hunter2" not in str(info.value)
    (tmp_path / "lh.csv").write_bytes(b"year,hare\n\xff\xfe" + SECRET.encode() + b"\n")
    with pytest.raises(DataError, match=r"\[data\] csv: 'lh.csv' is not a readable CSV file") as info:
        load_spec(tmp_path / "spec.toml")
    assert "hunter2" not in str(info.value)
