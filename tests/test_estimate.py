"""The Estimate result: statsmodels vocabulary, immutability, display, JSON round trip."""

import dataclasses
import json
import os

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError, ResultFileError
from odeinfer.results import Estimate

MODEL = oi.Model.from_equations({"x": "-k*x + c"}, params=["k", "c"], name="decay <b>&")


def make(**kw):
    cov = np.array([[0.04, 0.01, 0.0], [0.01, 0.09, 0.0], [0.0, 0.0, 0.25]])
    base = dict(estimator="Test", model=MODEL, names=("k", "c", "x0[x]"), values=np.array([1.5, 0.2, 3.0]),
                cov=cov, status="converged", message="ok", n_iter=7, cost=0.5, nobs=20,
                fixed={}, sigma={"x": 0.1}, residuals=np.arange(4.0), history={"cost": [3.0, 1.0, 0.5]},
                extras={"L": [2, 3]}, warnings=("w <1>",), provenance={"version": "x"})
    base.update(kw)
    return Estimate(**base)


def test_params_bse_conf_int():
    e = make()
    assert list(e.params.index) == ["k", "c", "x0[x]"]
    np.testing.assert_allclose(e.bse.to_numpy(), [0.2, 0.3, 0.5])
    ci = e.conf_int(0.05)
    z = 1.959963984540054  # standard normal 0.975 quantile (tables)
    np.testing.assert_allclose(ci["lower"], [1.5 - z * 0.2, 0.2 - z * 0.3, 3.0 - z * 0.5], rtol=1e-12)
    np.testing.assert_allclose(ci["upper"], [1.5 + z * 0.2, 0.2 + z * 0.3, 3.0 + z * 0.5], rtol=1e-12)
    assert e.correlation().loc["k", "c"] == pytest.approx(0.01 / (0.2 * 0.3))
    assert e.converged and e.cov_params().loc["c", "k"] == 0.01


def test_wald_interval_on_the_estimation_scale_round_trips_json():
    """Quantities fitted on a log scale (extras["scales"]) get exp(u +- z se_u), u = log(value), with
    se_u from the log-scale covariance extras["cov_scaled"] when given, else se / value (delta method);
    "log10" likewise in base 10; linear ones are unchanged; all of it survives a JSON round trip."""
    z = 1.959963984540054  # standard normal 0.975 quantile (tables)
    v = np.array([0.002, 0.2, 3.0])
    se_u = np.array([0.9, 0.3, 0.5])  # k on log, c on log10, x0 linear
    d = np.array([v[0], v[1] * np.log(10.0), 1.0])  # d natural / d scaled
    cov_u = np.diag(se_u ** 2)
    e = make(values=v, cov=cov_u * np.outer(d, d),
             extras={"scales": {"k": "log", "c": "log10", "x0[x]": "lin"}, "cov_scaled": cov_u})
    old_lower = v - z * e.bse.to_numpy()
    assert old_lower[0] < 0  # the natural-scale interval crossed zero
    expect_lo = [np.exp(np.log(v[0]) - z * se_u[0]), 10 ** (np.log10(v[1]) - z * se_u[1]), v[2] - z * se_u[2]]
    expect_hi = [np.exp(np.log(v[0]) + z * se_u[0]), 10 ** (np.log10(v[1]) + z * se_u[1]), v[2] + z * se_u[2]]
    back = Estimate.from_json(e.to_json())
    without_cov_u = make(values=v, cov=cov_u * np.outer(d, d), extras={"scales": {"k": "log", "c": "log10"}})
    for est in (e, back, without_cov_u):
        ci = est.conf_int(0.05)
        np.testing.assert_allclose(ci["lower"], expect_lo, rtol=1e-12)
        np.testing.assert_allclose(ci["upper"], expect_hi, rtol=1e-12)
        assert ci["lower"]["k"] > 0


def test_missing_covariance_is_nan_not_missing():
    e = make(cov=None, status="max_iter")
    assert e.bse.isna().all() and e.conf_int().isna().all().all() and not e.converged


def test_immutable():
    e = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.values = np.zeros(3)
    with pytest.raises(ValueError):
        e.values[0] = 9.0
    with pytest.raises(TypeError):
        e.fixed["k"] = 1.0
    p = e.params
    p.iloc[0] = 100.0
    assert e.values[0] == 1.5


@pytest.mark.parametrize("kw, match", [
    ({"values": [1.0, 2.0]}, r"values: expected shape \(3,\)"),
    ({"cov": np.eye(2)}, r"cov: expected shape \(3, 3\)"),
    ({"status": "ok"}, r"status: expected one of"),
])
def test_bad_fields(kw, match):
    with pytest.raises(ValueError, match=match):
        make(**kw)


def test_conf_int_bad_arguments():
    with pytest.raises(ValueError, match=r"alpha: expected a number in \(0, 1\)"):
        make().conf_int(1.5)
    with pytest.raises(ValueError, match=r"method: 'profile' is not available"):
        make().conf_int(method="profile")


def test_summary_and_html_escape():
    e = make()
    text = e.summary()
    assert "Test estimate of 'decay <b>&'" in text and "x0[x]" in text and "warning: w <1>" in text
    html = e._repr_html_()
    assert "decay &lt;b&gt;&amp;" in html and "w &lt;1&gt;" in html and "<b>&" not in html


def test_json_round_trip(tmp_path):
    e = make(values=np.array([1.5, np.nan, 3.0]))
    path = tmp_path / "e.json"
    e.to_json(path)
    back = Estimate.from_json(path)
    np.testing.assert_array_equal(back.values, e.values)
    np.testing.assert_array_equal(back.cov, e.cov)
    assert back.names == e.names and back.status == e.status and back.n_iter == 7
    assert back.model.equations() == MODEL.equations() and back.model.name == MODEL.name
    np.testing.assert_array_equal(back.history["cost"], [3.0, 1.0, 0.5])
    assert dict(back.extras) == {"L": [2, 3]} and back.warnings == ("w <1>",)
    with pytest.raises(ValueError, match="not an odeinfer Estimate JSON"):
        Estimate.from_json('{"format": "other"}')


_FSIZE_CHILD = """
import resource, signal, sys
import numpy as np
from odeinfer.results import Estimate
import odeinfer as oi

m = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
big = Estimate("Test", m, ("k",), np.array([1.0]), None, "converged", residuals=np.arange(20000.0))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    big.to_json(sys.argv[1])
except OSError as err:
    print("failed:", err.errno)
"""


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGXFSZ"), reason="needs POSIX file-size limits")
def test_to_json_failing_part_way_keeps_the_old_file(tmp_path):
    """A real write failure (the file-size limit hit after 4 KiB): the previous file stays whole."""
    import subprocess
    import sys

    path = tmp_path / "e.json"
    make().to_json(path)
    old = path.read_bytes()
    assert len(old) < 4096
    r = subprocess.run([sys.executable, "-c", _FSIZE_CHILD, str(path)], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0 and "failed: 27" in r.stdout, r.stderr  # EFBIG
    assert path.read_bytes() == old and Estimate.from_json(path).n_iter == 7
    assert os.listdir(tmp_path) == ["e.json"]  # no temporary file left behind


def test_to_json_error_while_writing_leaves_old_file_and_no_temporary(tmp_path, monkeypatch):
    from odeinfer import _io

    path = tmp_path / "e.json"
    path.write_text("previous")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_io.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        make().to_json(path)
    assert path.read_text() == "previous" and os.listdir(tmp_path) == ["e.json"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_to_json_keeps_the_files_permission_bits(tmp_path):
    path = tmp_path / "e.json"
    path.write_text("{}")
    path.chmod(0o600)
    make().to_json(path)
    assert (path.stat().st_mode & 0o777) == 0o600 and Estimate.from_json(path).n_iter == 7


def test_to_json_into_a_missing_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"path: the directory .*nope.* does not exist"):
        make().to_json(tmp_path / "nope" / "e.json")


# -- from_json: one typed error for every broken file, explicit size and depth limits ---------------------
def assert_broken(text_or_path, match):
    with pytest.raises(ResultFileError, match=match) as info:
        Estimate.from_json(text_or_path)
    assert isinstance(info.value, oi.errors.OdeinferError) and isinstance(info.value, ValueError)
    return str(info.value)


def test_from_json_text_that_is_neither_json_nor_a_file():
    assert_broken("not json", r"text_or_path: 'not json' is neither JSON text .* nor the path of an existing file")


def test_from_json_missing_file_and_directory(tmp_path):
    assert_broken(tmp_path / "absent.json", r"text_or_path: no file '.*absent.json'")
    assert_broken(tmp_path, r"text_or_path: '.*' is not a regular file")


def test_from_json_missing_keys():
    d = make().to_dict()
    del d["cov"], d["status"]
    assert_broken(json.dumps(d), r"the JSON text lacks the key\(s\) \['cov', 'status'\]")
    d = make().to_dict()
    del d["model"]["equations"]
    assert_broken(json.dumps(d), r"lacks the key\(s\) \['equations'\] in 'model'")


def test_from_json_truncated_and_wrong_types(tmp_path):
    text = make().to_json()
    path = tmp_path / "e.json"
    path.write_text(text[: len(text) // 2])
    assert_broken(path, r"text_or_path: '.*e.json' is not valid JSON \(.* at line 1, column \d+\); it may be truncated")
    assert_broken("[1, 2]", "expected a JSON object written by Estimate.to_json")
    d = make().to_dict()
    d["values"] = ["a", "b", "c"]
    msg = assert_broken(json.dumps(d), r"the JSON text: the field 'values' must be a list of numbers; the file holds")
    assert "'a'" not in msg and "do not fit together" not in msg
    d = make().to_dict()
    d["history"] = {"cost": "abc" * 10_000}
    assert len(assert_broken(json.dumps(d), r"the stored fields do not fit together")) < 500
    d = make().to_dict()
    d["values"] = [1.0]
    assert_broken(json.dumps(d), r"the stored fields do not fit together \(values: expected shape \(3,\)")
    d = make().to_dict()
    d["model"]["equations"] = {"x": "__import__('os')"}
    assert_broken(json.dumps(d), r"its model cannot be rebuilt from the stored equations")


def test_from_json_deep_nesting_is_refused_before_parsing(tmp_path):
    deep = '{"format": "odeinfer.Estimate/1", "extras": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001
    assert_broken(deep, r"the JSON text is nested 100001 levels deep; an estimate file is at most 64")
    assert_broken("[" * 100_000 + "]" * 100_000, "nested 100000 levels deep")
    # brackets inside strings do not count
    d = make(extras={"s": "[[[[" * 100, "q": 'x\\"{{{' * 100})
    back = Estimate.from_json(json.dumps(d.to_dict()))
    assert back.extras["s"] == "[[[[" * 100 and back.extras["q"] == 'x\\"{{{' * 100


def test_from_json_oversize_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as fh:
        fh.truncate(65 * 2**20)  # sparse: 65 MiB without writing them
    assert_broken(path, r"'.*huge.json' is 65.0 MiB; an estimate file is at most 64 MiB")
    assert_broken("{" + " " * (64 * 2**20) + "}", r"the JSON text is 64.0 MiB; an estimate file is at most 64 MiB")


def test_from_json_with_another_model_is_refused():
    decay = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
    lv = oi.zoo.get("lotka_volterra").model
    text = Estimate("Test", decay, ("k",), [0.5], None, "converged").to_json()
    with pytest.raises(InputError, match=r"model: the estimate was fitted with model 'decay' \(states \['x'\], "
                                         r"parameters \['k'\]\), but the given model 'lotka_volterra' has states "
                                         r"\['prey', 'predator'\] and parameters"):
        Estimate.from_json(text, model=lv)
    other = oi.Model.from_equations({"x": "-k*x**2"}, params=["k"], name="decay")
    with pytest.raises(InputError, match=r"model: the given model 'decay' has the names of the estimate's model "
                                         r"'decay' but other equations \(fingerprint [0-9a-f]{16}, the estimate's "
                                         r"[0-9a-f]{16}\)"):
        Estimate.from_json(text, model=other)
    with pytest.raises(InputError, match=r"model: expected an odeinfer Model \(or None to rebuild it from the file\), got str"):
        Estimate.from_json(text, model="decay")
    same = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
    assert Estimate.from_json(text, model=same).model is same


def test_predict_bands_match_analytic_delta_method():
    """x(t) = x0 exp(-k t): dx/dk = -t x, dx/dx0 = exp(-k t); var = g' C g (delta method, by hand)."""
    m = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="decay")
    cov = np.array([[0.01, 0.002], [0.002, 0.04]])
    e = Estimate("Test", m, ("k", "x0[x]"), np.array([0.5, 2.0]), cov, "converged")
    t = np.linspace(0, 4, 9)
    pred = e.predict(t, alpha=0.1)
    x = 2.0 * np.exp(-0.5 * t)
    g = np.stack([-t * x, np.exp(-0.5 * t)], axis=1)
    se = np.sqrt(np.einsum("ti,ij,tj->t", g, cov, g))
    np.testing.assert_allclose(pred.y[:, 0], x, rtol=1e-7)
    np.testing.assert_allclose(pred.se[:, 0], se, rtol=1e-6)
    z = 1.6448536269514722  # standard normal 0.95 quantile (tables)
    np.testing.assert_allclose(pred.upper[:, 0] - pred.lower[:, 0], 2 * z * se, rtol=1e-6)
    assert list(pred.to_frame().columns) == ["t", "state", "y", "se", "lower", "upper"]
    # a known x0 given by the user carries no uncertainty
    known = e.predict(t, x0={"x": 2.0})
    np.testing.assert_allclose(known.se[:, 0], t * x * 0.1, rtol=1e-6)


def test_predict_needs_an_initial_state():
    m = oi.Model.from_equations({"x": "-k*x"}, params=["k"])
    e = Estimate("Test", m, ("k",), np.array([0.5]), np.array([[0.01]]), "converged")
    with pytest.raises(oi.errors.InputError, match=r"initial state of 'x' is neither estimated nor given"):
        e.predict([0.0, 1.0])
    with pytest.raises(oi.errors.InputError, match=r"x0: expected 1 values"):
        e.predict([0.0, 1.0], x0=[1.0, 2.0])
