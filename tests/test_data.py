"""Tests of odeinfer.data: Data, Experiments, as_experiments, from_frame / from_csv.

Expected values are written by hand from the small inputs built in each test.
"""

import pickle

import numpy as np
import pandas as pd
import pytest

from odeinfer.data import Data, Experiments, as_experiments
from odeinfer.errors import DataError

NAN = np.nan


def make(**kw):
    t = [0.0, 1.0, 2.0, 3.0]
    y = [[1.0, 10.0], [2.0, NAN], [NAN, 30.0], [4.0, 40.0]]
    return Data(t, y, ["prey", "pred"], **kw)


# --------------------------------------------------------------------------- Data basics
def test_data_stores_float64_copies_and_mask():
    t = np.array([0, 1, 2, 3])  # int input
    y = np.array([[1.0, 10.0], [2.0, NAN], [NAN, 30.0], [4.0, 40.0]])
    d = Data(t, y, ["prey", "pred"])
    assert d.t.dtype == np.float64 and d.y.dtype == np.float64
    assert d.t.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert d.mask.tolist() == [[True, True], [True, False], [False, True], [True, True]]
    assert d.states == ("prey", "pred")
    assert (d.n_times, d.n_observed, d.nobs) == (4, 2, 6)
    assert d.t0 == 0.0 and d.name is None
    # the caller's arrays are copied, not mutated, and still writeable
    y[0, 0] = 99.0
    assert d.y[0, 0] == 1.0
    assert y.flags.writeable and t.flags.writeable


def test_data_arrays_are_read_only_and_object_immutable():
    d = make()
    with pytest.raises(ValueError, match="read-only"):
        d.y[0, 0] = 5.0
    with pytest.raises(ValueError, match="read-only"):
        d.t[0] = 5.0
    with pytest.raises(ValueError):
        d.mask.flags.writeable = True
    with pytest.raises(AttributeError, match="immutable"):
        d.t0 = -1.0


def test_one_dimensional_y_with_one_state():
    d = Data([0.0, 1.0, 2.0], [5.0, NAN, 7.0], "x", t0=-1.0, name="run")
    assert d.y.shape == (3, 1)
    assert d.states == ("x",)
    assert d.nobs == 2 and d.t0 == -1.0 and d.name == "run"


def test_replicates_allowed_when_requested():
    d = Data([0.0, 1.0, 1.0, 2.0], [1.0, 2.0, 2.5, 3.0], "x", replicates=True)
    assert d.t.tolist() == [0.0, 1.0, 1.0, 2.0]
    assert d.replicates is True


def test_missing_values_given_as_none_and_pandas_na():
    d = Data([0.0, 1.0, 2.0], np.array([1.0, None, 3.0], dtype=object), "x")
    assert d.mask[:, 0].tolist() == [True, False, True]
    s = pd.Series([4, pd.NA, 6], dtype="Int64")
    d2 = Data([0.0, 1.0, 2.0], s, "x")
    assert np.isnan(d2.y[1, 0]) and d2.y[2, 0] == 6.0


# --------------------------------------------------------------------------- Data validation
@pytest.mark.parametrize(
    "t, y, states, kw, match",
    [
        ([[0.0, 1.0]], [1.0, 2.0], "x", {}, r"`t` must be 1-D .*shape \(1, 2\)"),
        ([], [], "x", {}, r"`t` is empty"),
        ([0.0, NAN, 2.0], [1.0, 2.0, 3.0], "x", {}, r"`t` must be finite; received nan at index 1"),
        ([0.0, np.inf], [1.0, 2.0], "x", {}, r"`t` must be finite; received inf at index 1"),
        ([0.0, 2.0, 1.0, 3.0], [1.0, 2.0, 3.0, 4.0], "x", {},
         r"decreases first at index 2 \(t\[1\] = 2, t\[2\] = 1\)\. Sort the frame"),
        ([0.0, 1.0, 1.0, 2.0, 2.0], [1, 2, 3, 4, 5], "x", {},
         r"duplicated times 1, 2;.*pass replicates=True"),
        ([0.0, 1.0, 2.0, 3.0], np.ones((3, 2)), ["a", "b"], {},
         r"`y` has shape \(3, 2\); expected \(n_times, n_observed\) = \(4, 2\)"),
        ([0.0, 1.0, 2.0], np.ones((2, 3)), ["a", "b"], {}, r"looks state-first: pass y\.T"),
        ([0.0, 1.0, 2.0], np.ones((3, 2, 1)), ["a", "b"], {}, r"`y` has shape \(3, 2, 1\)"),
        ([0.0, 1.0], [[1.0, 2.0], [3.0, -np.inf]], ["a", "b"], {},
         r"infinite values; received \+-inf at \(t index 1, state 'b'\)"),
        ([0.0, 1.0], [[1.0, NAN], [3.0, NAN]], ["a", "b"], {},
         r"no observed \(non-NaN\) value for state\(s\) \['b'\]"),
        ([0.0, 1.0], np.ones((2, 2)), ["a", "b", "c"], {},
         r"`states` has 3 names \['a', 'b', 'c'\] but `y` has 2 columns"),
        ([0.0, 1.0], [1.0, 2.0], ["a", "b"], {}, r"`y` is 1-D .* but 2 states were named"),
        ([0.0, 1.0], np.ones((2, 2)), ["a", "a"], {}, r"duplicated names \['a'\]"),
        ([0.0, 1.0], np.ones((2, 0)), [], {}, r"`states` is empty"),
        ([0.0, 1.0], np.ones((2, 1)), [3], {}, r"`states` must hold non-empty strings; received 3"),
        ([0.0, 1.0], np.ones((2, 1)), 7, {}, r"`states` must be a sequence"),
        ([0.0, 1.0], [["1.0"], ["2.0"]], "x", {}, r"`y` must hold real numbers; received strings"),
        ([0.0, 1.0], np.array([[1.0], ["abc"]], dtype=object), "x", {},
         r"received 'abc' \(str\) at y\[1, 0\]"),
        ([0.0, 1.0], [True, False], "x", {}, r"received booleans"),
        ([0.0, 1.0], [1 + 2j, 3.0], "x", {}, r"received complex numbers"),
        (["a", "b"], [1.0, 2.0], "x", {}, r"`t` must hold real numbers; received strings"),
        ("0 1", [1.0, 2.0], "x", {}, r"`t` must be an array of numbers; received the string"),
        (np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[D]"), [1.0, 2.0], "x", {},
         r"`t` holds dates .*Data\.from_frame"),
        ([1.0, 2.0], [1.0, 2.0], "x", {"t0": 5.0}, r"`t0` = 5 is after the first observation time t\[0\] = 1"),
        ([1.0, 2.0], [1.0, 2.0], "x", {"t0": "0"}, r"`t0` must be a real number"),
        ([1.0, 2.0], [1.0, 2.0], "x", {"t0": NAN}, r"`t0` must be finite"),
        ([1.0, 2.0], [1.0, 2.0], "x", {"replicates": "yes"}, r"`replicates` must be True or False"),
        ([1.0, 2.0], [1.0, 2.0], "x", {"name": 3}, r"`name` must be a str or None; received 3"),
    ],
)
def test_data_rejects_bad_input(t, y, states, kw, match):
    with pytest.raises(DataError, match=match):
        Data(t, y, states, **kw)


def test_ragged_y_is_a_data_error():
    with pytest.raises(DataError, match=r"`y` could not be read as an array of numbers"):
        Data([0.0, 1.0], [[1.0, 2.0], [3.0]], ["a", "b"])


# --------------------------------------------------------------------------- Data methods
def test_to_frame_has_time_column_and_states():
    df = make().to_frame()
    assert list(df.columns) == ["t", "prey", "pred"]
    assert df["t"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert df["prey"].iloc[0] == 1.0 and np.isnan(df["prey"].iloc[2])
    df.loc[0, "prey"] = -5.0  # the frame is a copy
    assert make().y[0, 0] == 1.0


def test_to_frame_rejects_state_named_t():
    d = Data([0.0, 1.0], [1.0, 2.0], "t")
    with pytest.raises(DataError, match=r"a state is also named 't'.*rename"):
        d.to_frame()


def test_rename_returns_new_data():
    d = make(name="lv")
    r = d.rename({"prey": "hare"})
    assert r.states == ("hare", "pred") and d.states == ("prey", "pred")
    assert r.name == "lv"
    assert np.array_equal(r.y, d.y, equal_nan=True)


def test_rename_errors():
    d = make()
    with pytest.raises(DataError, match=r"unknown state\(s\) \['prye'\].*Did you mean 'prey'"):
        d.rename({"prye": "hare"})
    with pytest.raises(DataError, match=r"`mapping` must be a dict"):
        d.rename([("prey", "hare")])
    with pytest.raises(DataError, match=r"duplicated names \['pred'\]"):
        d.rename({"prey": "pred"})


def test_select_subset_in_given_order():
    d = make()
    s = d.select(["pred", "prey"])
    assert s.states == ("pred", "prey")
    assert s.y[:, 0].tolist()[0] == 10.0 and s.y[0, 1] == 1.0
    one = d.select("prey")
    assert one.states == ("prey",) and one.nobs == 3


def test_select_unknown_state():
    with pytest.raises(DataError, match=r"asks for \['pray'\].*Did you mean 'prey'"):
        make().select(["pray"])


def test_check_states():
    d = make()
    assert d.check_states(["prey", "pred", "other"]) is None
    with pytest.raises(DataError, match=r"`model_states` must be a sequence .* received int"):
        d.check_states(5)
    with pytest.raises(DataError, match=r"\['pred'\] that the model does not have; the model's states "
                                        r"are \['prey', 'predator'\]\. Did you mean 'predator'"):
        d.check_states(["prey", "predator"])


def test_repr_and_html_escape_names():
    d = Data([0.0, 1.0], [[1.5, 2.0], [3.0, NAN]], ["<b>x", "y&z"], name="run<1>")
    text = repr(d)
    assert "run<1>" in text and "1.5" in text and "NaN" in text
    page = d._repr_html_()
    assert "&lt;b&gt;x" in page and "y&amp;z" in page and "run&lt;1&gt;" in page
    assert "<b>x" not in page


def test_long_repr_is_truncated():
    d = Data(np.arange(30.0), np.arange(30.0) * 2, "x")
    lines = repr(d).split("\n")
    assert len(lines) == 13  # header, column names, 5 rows, gap, 5 rows
    assert lines[1].split() == ["t", "x"]
    assert lines[2].split() == ["0", "0"] and lines[7].split() == ["...", "..."]
    assert lines[8].split() == ["25", "50"] and lines[12].split() == ["29", "58"]


def test_equality_and_hash():
    a, b = make(), make()
    assert a == b and hash(a) == hash(b)  # NaN in the same places compare equal
    assert a != make(name="other")
    assert a != make(t0=-1.0)
    assert a != a.rename({"prey": "hare"})
    assert a != "not data"


def test_pickle_round_trip():
    d = make(name="lv", t0=-0.5)
    back = pickle.loads(pickle.dumps(d))
    assert back == d and back.t0 == -0.5 and not back.y.flags.writeable


# --------------------------------------------------------------------------- from_frame
def frame():
    return pd.DataFrame({"year": [1900, 1901, 1902], "hare": [30.0, 47.2, NAN], "lynx": [4.0, 6.1, 9.8]})


def test_from_frame_mapping_and_list():
    d = Data.from_frame(frame(), "year", {"prey": "hare", "pred": "lynx"}, name="hl")
    assert d.states == ("prey", "pred") and d.name == "hl"
    assert d.t.tolist() == [1900.0, 1901.0, 1902.0]
    assert d.y[:, 1].tolist() == [4.0, 6.1, 9.8] and d.nobs == 5
    d2 = Data.from_frame(frame(), "year", ["lynx"], t0=1899.0)
    assert d2.states == ("lynx",) and d2.t0 == 1899.0


def test_from_frame_does_not_modify_frame():
    df = frame()
    before = df.copy()
    Data.from_frame(df, "year", ["hare", "lynx"])
    pd.testing.assert_frame_equal(df, before)


def test_from_frame_missing_columns_listed():
    with pytest.raises(DataError, match=r"observed\['lynx'\]='lynxes' Did you mean 'lynx'.*"
                                        r"The frame's columns are \['year', 'hare', 'lynx'\]"):
        Data.from_frame(frame(), "year", {"lynx": "lynxes"})
    with pytest.raises(DataError, match=r"time='Year'"):
        Data.from_frame(frame(), "Year", ["hare"])


def test_from_frame_non_numeric_cell_named():
    df = frame()
    df["lynx"] = ["4.0", "abc", "9.8"]
    with pytest.raises(DataError, match=r"column 'lynx' \(observed state 'lynx'\) has a non-numeric "
                                        r"value 'abc' at row 1"):
        Data.from_frame(df, "year", ["lynx"])


def test_from_frame_boolean_column_rejected():
    df = pd.DataFrame({"t": [0.0, 1.0], "x": [True, False]})
    with pytest.raises(DataError, match=r"column 'x' .* holds booleans"):
        Data.from_frame(df, "t", ["x"])


def test_from_frame_datetime_time_in_days():
    df = pd.DataFrame({"date": pd.to_datetime(["2020-01-01", "2020-01-03", "2020-01-10 12:00"], format="ISO8601"),
                       "x": [1.0, 2.0, 3.0]})
    d = Data.from_frame(df, "date", ["x"], t0=pd.Timestamp("2019-12-31"))
    assert d.t.tolist() == [0.0, 2.0, 9.5]
    assert d.t0 == -1.0


def test_from_frame_timezone_aware_dates():
    stamps = pd.to_datetime(["2020-01-01 00:00", "2020-01-01 06:00"]).tz_localize("UTC")
    df = pd.DataFrame({"when": stamps, "x": [1.0, 2.0]})
    d = Data.from_frame(df, "when", ["x"], t0=pd.Timestamp("2019-12-31 12:00", tz="UTC"))
    assert d.t.tolist() == [0.0, 0.25] and d.t0 == -0.5
    with pytest.raises(DataError, match=r"cannot be compared with the time column.*same time zone"):
        Data.from_frame(df, "when", ["x"], t0=pd.Timestamp("2019-12-31"))


def test_from_frame_timedelta_time_in_days():
    df = pd.DataFrame({"elapsed": pd.to_timedelta(["0h", "12h", "36h"]), "x": [1.0, 2.0, 3.0]})
    assert Data.from_frame(df, "elapsed", ["x"]).t.tolist() == [0.0, 0.5, 1.5]


def test_from_frame_string_dates_explained():
    df = pd.DataFrame({"date": ["2020-01-01", "2020-01-02"], "x": [1.0, 2.0]})
    with pytest.raises(DataError, match=r"column 'date' \(time\) has a non-numeric value '2020-01-01' "
                                        r"at row 0.*pd\.to_datetime"):
        Data.from_frame(df, "date", ["x"])


def test_from_frame_datetime_t0_needs_datetime_column():
    with pytest.raises(DataError, match=r"`t0` is a date .* but the time column is numeric"):
        Data.from_frame(frame(), "year", ["hare"], t0=pd.Timestamp("1899-01-01"))


def test_from_frame_missing_time_rows():
    df = pd.DataFrame({"t": [0.0, NAN, 2.0], "x": [1.0, 2.0, 3.0]}, index=[10, 11, 12])
    with pytest.raises(DataError, match=r"time column 't' has 1 missing value\(s\), at row\(s\) \[11\]"):
        Data.from_frame(df, "t", ["x"])


@pytest.mark.parametrize(
    "df, observed, kw, match",
    [
        ("not a frame", ["x"], {}, r"`df` must be a pandas DataFrame; received str"),
        (None, 5, {}, r"`observed` must be a dict"),
        (None, {}, {}, r"`observed` is empty"),
        (None, ["x", "x"], {}, r"`observed` names state 'x' twice"),
        (None, {3: "x"}, {}, r"`observed` keys must be model state names"),
        (None, ["x"], {"t0": {"a": 0.0}}, r"`t0` is a mapping, which is only meaningful with `experiment`"),
    ],
)
def test_from_frame_bad_arguments(df, observed, kw, match):
    if df is None:
        df = pd.DataFrame({"t": [0.0, 1.0], "x": [1.0, 2.0]})
    with pytest.raises(DataError, match=match):
        Data.from_frame(df, "t", observed, **kw)


def test_from_frame_duplicated_times_message():
    df = pd.DataFrame({"t": [0.0, 1.0, 1.0], "x": [1.0, 2.0, 3.0]})
    with pytest.raises(DataError, match=r"duplicated times 1;.*replicate measurements, pass replicates=True"):
        Data.from_frame(df, "t", ["x"])
    assert Data.from_frame(df, "t", ["x"], replicates=True).n_times == 3


# --------------------------------------------------------------------------- experiments from frames
def long_frame():
    return pd.DataFrame({
        "run": ["b", "b", "a", "a", "a"],
        "t": [0.0, 1.0, 0.0, 2.0, 4.0],
        "x": [1.0, 2.0, NAN, NAN, NAN],
        "y": [5.0, NAN, 7.0, 8.0, 9.0],
    })


def test_from_frame_with_experiment_column():
    exps = Data.from_frame(long_frame(), "t", ["x", "y"], experiment="run", t0={"a": -1.0})
    assert isinstance(exps, Experiments)
    assert exps.names == ("b", "a")  # order of first appearance
    assert exps["b"].states == ("x", "y") and exps["b"].t.tolist() == [0.0, 1.0]
    assert exps["a"].states == ("y",)  # x entirely missing in run a: partial observation
    assert exps["a"].y[:, 0].tolist() == [7.0, 8.0, 9.0]
    assert exps["a"].t0 == -1.0 and exps["b"].t0 == 0.0
    assert exps.states == ("x", "y") and exps.nobs == 6


def test_from_frame_numeric_experiment_values_named_as_str():
    df = long_frame().assign(run=[2, 2, 1, 1, 1])
    exps = Data.from_frame(df, "t", ["y"], experiment="run", t0={1: -2.0})
    assert exps.names == ("2", "1") and exps["1"].t0 == -2.0


def test_from_frame_experiment_errors():
    df = long_frame()
    with pytest.raises(DataError, match=r"experiment='Run' Did you mean 'run'"):
        Data.from_frame(df, "t", ["x"], experiment="Run")
    with pytest.raises(DataError, match=r"experiment 'a' has no observed value in any of the columns \['x'\]"):
        Data.from_frame(df, "t", ["x"], experiment="run")
    with pytest.raises(DataError, match=r"`name` = 'z' cannot be used with `experiment`"):
        Data.from_frame(df, "t", ["y"], experiment="run", name="z")
    with pytest.raises(DataError, match=r"unknown experiment\(s\) \['c'\]"):
        Data.from_frame(df, "t", ["y"], experiment="run", t0={"c": 0.0})
    bad = df.assign(run=["b", None, "a", "a", "a"])
    with pytest.raises(DataError, match=r"experiment column 'run' has missing values at row\(s\) \[1\]"):
        Data.from_frame(bad, "t", ["y"], experiment="run")
    dup = df.assign(t=[0.0, 1.0, 0.0, 0.0, 4.0])
    with pytest.raises(DataError, match=r"^experiment 'a': `t` has duplicated times 0"):
        Data.from_frame(dup, "t", ["y"], experiment="run")


def test_from_csv_reads_empty_fields_as_missing(tmp_path):
    path = tmp_path / "obs.csv"
    path.write_text("day,count,group\n1,10,A\n2,,A\n3,12,A\n1,5,B\n")
    exps = Data.from_csv(path, "day", {"n": "count"}, experiment="group")
    assert exps.names == ("A", "B")
    assert exps["A"].mask[:, 0].tolist() == [True, False, True]
    assert exps["A"].y[2, 0] == 12.0 and exps["B"].y[0, 0] == 5.0
    semi = tmp_path / "semi.csv"
    semi.write_text("day;count\n0;1.5\n2;\n")
    d = Data.from_csv(semi, "day", {"n": "count"}, sep=";", t0=-1.0)
    assert d.t.tolist() == [0.0, 2.0] and d.nobs == 1 and d.t0 == -1.0


def test_from_csv_parse_dates(tmp_path):
    path = tmp_path / "dated.csv"
    path.write_text("date,x\n2021-03-01,1\n2021-03-04,2\n")
    d = Data.from_csv(path, "date", ["x"], parse_dates=["date"])
    assert d.t.tolist() == [0.0, 3.0]


# --------------------------------------------------------------------------- Experiments
def two():
    a = Data([0.0, 1.0, 2.0], [[1.0, NAN], [2.0, 5.0], [3.0, 6.0]], ["x", "y"], name="a")
    b = Data([0.0, 5.0], [7.0, 8.0], "z", t0=-1.0, name="b")
    return a, b


def test_experiments_sequence_behaviour():
    a, b = two()
    exps = Experiments([a, b])
    assert len(exps) == 2 and exps.n_experiments == 2
    assert list(exps) == [a, b]
    assert exps[0] is a and exps[-1] is b and exps["b"] is b
    assert exps.names == ("a", "b")
    assert "b" in exps and "c" not in exps and a in exps
    assert exps.states == ("x", "y", "z")
    assert exps.nobs == 5 + 2
    sub = exps[1:]
    assert isinstance(sub, Experiments) and sub.names == ("b",)
    with pytest.raises(IndexError):
        exps[2]


def test_experiments_names_argument_renames_data():
    a, b = two()
    exps = Experiments([a, b], names=["first", "second"])
    assert exps["second"].name == "second" and exps["second"].t0 == -1.0
    assert b.name == "b"  # the caller's Data are unchanged
    unnamed = Experiments([Data([0.0], [1.0], "x"), Data([0.0], [2.0], "x")])
    assert unnamed.names == ("experiment_0", "experiment_1")
    from_map = Experiments({"u": a, "v": b})
    assert from_map.names == ("u", "v") and from_map["u"].name == "u"


@pytest.mark.parametrize(
    "datasets, names, match",
    [
        ([], None, r"`datasets` is empty"),
        ("single", None, r"received a single Data\. Pass \[data\], or use as_experiments"),
        ("bad_item", None, r"`datasets\[1\]` must be a Data; received int"),
        (5, None, r"`datasets` must be a sequence of Data; received int"),
        ("pair", ["a"], r"`names` has 1 entries but there are 2 datasets"),
        ("pair", ["a", "a"], r"experiment names must be unique; received duplicates \['a'\]"),
        ("pair", ["a", ""], r"`names` must hold non-empty strings"),
        ("map", ["a", "b"], r"`names` cannot be given when `datasets` is a mapping"),
    ],
)
def test_experiments_rejects_bad_input(datasets, names, match):
    a, b = two()
    resolved = {"single": a, "pair": [a, b], "map": {"a": a, "b": b}, "bad_item": [a, 3]}
    if isinstance(datasets, str):
        datasets = resolved[datasets]
    with pytest.raises(DataError, match=match):
        Experiments(datasets, names=names)


def test_experiments_duplicate_data_names():
    a, _ = two()
    with pytest.raises(DataError, match=r"duplicates \['a'\]"):
        Experiments([a, a])


def test_experiments_bad_lookup():
    exps = Experiments(list(two()))
    with pytest.raises(DataError, match=r"no experiment named 'c'; the experiments are \['a', 'b'\]"):
        exps["c"]
    with pytest.raises(DataError, match=r"indexed by position \(int\), name \(str\) or slice; received float"):
        exps[1.0]


def test_experiments_to_frame_fills_unobserved_with_nan():
    df = Experiments(list(two())).to_frame()
    assert list(df.columns) == ["experiment", "t", "x", "y", "z"]
    assert df["experiment"].tolist() == ["a", "a", "a", "b", "b"]
    assert df["t"].tolist() == [0.0, 1.0, 2.0, 0.0, 5.0]
    assert df["z"].iloc[3] == 7.0 and np.isnan(df["z"].iloc[0]) and np.isnan(df["x"].iloc[4])


def test_experiments_to_frame_name_clash():
    exps = Experiments([Data([0.0], [1.0], "experiment")])
    with pytest.raises(DataError, match=r"state\(s\) \['experiment'\] have the same name"):
        exps.to_frame()


def test_experiments_immutable_equal_and_picklable():
    a, b = two()
    exps = Experiments([a, b])
    with pytest.raises(AttributeError, match="immutable"):
        exps.names = ("p", "q")
    assert exps == Experiments([a, b]) and hash(exps) == hash(Experiments([a, b]))
    assert exps != Experiments([b, a])
    assert pickle.loads(pickle.dumps(exps)) == exps


def test_experiments_repr_and_html():
    a = Data([0.0, 1.0], [1.0, 2.0], "x<y", name="<run>")
    exps = Experiments([a])
    assert "<run>" in repr(exps) and "nobs = 2" in repr(exps)
    page = exps._repr_html_()
    assert "&lt;run&gt;" in page and "x&lt;y" in page and "<run>" not in page


def test_as_experiments():
    a, b = two()
    one = as_experiments(a)
    assert isinstance(one, Experiments) and one.names == ("a",) and one[0] is a
    exps = Experiments([a, b])
    assert as_experiments(exps) is exps
    assert as_experiments([a, b]) == exps
    assert as_experiments(Data([0.0], [1.0], "x")).names == ("experiment_0",)
    with pytest.raises(DataError, match=r"`data` must be a Data, an Experiments or a list of Data; received DataFrame"):
        as_experiments(pd.DataFrame({"t": [0.0]}))
