"""Study caches keyed on the code (``oi.studies.code_key``, ``cached_frame``) and failed
replications counted, never dropped (``oi.studies.replicates``, ``StudyResult.summary``'s
``n_failed``, the slow studies' metrics)."""

import importlib.util
import math
import os
import sys

import numpy as np
import pandas as pd
import pytest

import odeinfer as oi
from odeinfer.errors import StudyError
from odeinfer.studies import StudyResult, cached_frame, code_key, replicates


def _module(path, body, monkeypatch):
    path.write_text(body)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, mod)  # inspect.getsource finds classes through sys.modules
    spec.loader.exec_module(mod)
    return mod


# -- cache keys --------------------------------------------------------------------------------
def test_code_key_changes_with_the_source_and_with_the_version(tmp_path, monkeypatch):
    a = _module(tmp_path / "sim_a.py", "class Sim:\n    def __call__(self, rng):\n        return 1\n", monkeypatch)
    b = _module(tmp_path / "sim_b.py", "class Sim:\n    def __call__(self, rng):\n        return 2\n", monkeypatch)
    key = code_key(a.Sim)
    assert key.startswith(oi.__version__ + "-") and len(key) == len(oi.__version__) + 13
    assert code_key(a.Sim) == key  # deterministic
    assert code_key(b.Sim) != key  # one character of the simulator's code
    assert code_key(a) != code_key(b)  # a module: its file's bytes
    monkeypatch.setattr(oi, "__version__", "9.9.9")
    assert code_key(a.Sim) != key and code_key(a.Sim).startswith("9.9.9-")


def test_code_key_of_a_package_covers_every_source_file(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg_k"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "deep.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import pkg_k

    first = code_key(pkg_k)
    (pkg / "sub" / "deep.py").write_text("X = 2\n")  # a file two levels down
    assert code_key(pkg_k) != first


def test_code_key_bad_input():
    with pytest.raises(StudyError, match=r"`sources`: give at least one module, class or function"):
        code_key()
    with pytest.raises(StudyError, match=r"`sources`: expected modules, classes or functions; received int"):
        code_key(42)


def _frame(value):
    return pd.DataFrame({"rep": [0], "estimator": ["e"], "param": ["p"], "truth": [1.0], "estimate": [value],
                         "stderr": [0.1], "converged": [True], "time": [0.0], "error": [None]})


def test_cached_frame_is_reused_only_by_the_same_code(tmp_path):
    calls = []

    def compute(value):
        def run():
            calls.append(value)
            return _frame(value)
        return run

    first = cached_frame(tmp_path, "study_seed1_rep1", "0.1.0-aaaaaaaaaaaa", compute(1.5))
    again = cached_frame(tmp_path, "study_seed1_rep1", "0.1.0-aaaaaaaaaaaa", compute(99.0))
    assert calls == [1.5] and again["estimate"].tolist() == [1.5] == first["estimate"].tolist()
    # new code (a source edit or a new version): the stale file is not read, the study reruns
    fresh = cached_frame(tmp_path, "study_seed1_rep1", "0.1.0-bbbbbbbbbbbb", compute(2.5))
    assert calls == [1.5, 2.5] and fresh["estimate"].tolist() == [2.5]
    names = sorted(os.listdir(tmp_path))
    assert names == ["study_seed1_rep1_0.1.0-aaaaaaaaaaaa.csv", "study_seed1_rep1_0.1.0-bbbbbbbbbbbb.csv"]
    # no cache directory: no file, computed every time
    assert cached_frame(None, "x", "y", compute(3.0))["estimate"].tolist() == [3.0] and calls[-1] == 3.0


def test_cached_frame_keeps_the_file_name_inside_the_directory(tmp_path):
    cached_frame(tmp_path, "../../escape/x", "1-2", lambda: _frame(1.0))
    assert os.listdir(tmp_path) == [".._.._escape_x_1-2.csv"]


def test_cached_frame_bad_input(tmp_path):
    with pytest.raises(StudyError, match=r"`name` and `code` must be non-empty str; received name='', code='k'"):
        cached_frame(tmp_path, "", "k", lambda: _frame(1.0))


# -- failed replications counted ---------------------------------------------------------------
def _study_with_failures():
    """6 replications of estimator "e" with parameters a, b (truth 1, 2): rep 1 raised, rep 3
    returned a non-finite b, rep 4 did not converge (kept, flagged)."""
    rows = []
    est = {0: (1.1, 2.1), 1: (np.nan, np.nan), 2: (0.9, 1.8), 3: (1.0, np.inf), 4: (1.4, 2.5), 5: (1.0, 2.0)}
    for rep, vals in est.items():
        for p, truth, v in zip("ab", (1.0, 2.0), vals):
            rows.append({"rep": rep, "estimator": "e", "param": p, "truth": truth, "estimate": v,
                         "stderr": np.nan if rep == 1 else 0.1, "converged": rep not in (1, 4), "time": 0.0,
                         "error": "FloatingPointError: diverged" if rep == 1 else None})
    return pd.DataFrame(rows)


def test_replicates_counts_failures_and_keeps_the_rest():
    r = replicates(_study_with_failures(), "e", ["a", "b"])
    assert (r.n, r.n_failed, r.n_ok) == (6, 2, 4)
    assert r.reps.tolist() == [0, 2, 4, 5]
    np.testing.assert_array_equal(r.estimate, [[1.1, 2.1], [0.9, 1.8], [1.4, 2.5], [1.0, 2.0]])
    assert r.truth.tolist() == [1.0, 2.0] and r.converged.tolist() == [True, True, False, True]
    assert r.label() == "4 of 6 (2 failed)"


def test_replicates_bad_input():
    f = _study_with_failures()
    with pytest.raises(StudyError, match=r"`estimator`: 'x' is not in the study; it has \['e'\]"):
        replicates(f, "x", ["a"])
    with pytest.raises(StudyError, match=r"`params`: \['c'\] not reported by 'e'; it reports \['a', 'b'\]"):
        replicates(f, "e", ["a", "c"])


def test_summary_reports_failed_replications_next_to_coverage():
    s = StudyResult(_study_with_failures()).summary().set_index("param")
    # summary works per parameter on converged fits with a finite estimate: a in reps 0, 2, 3, 5
    # (1 raised, 4 did not converge); b in 0, 2, 5 (rep 3's b is inf)
    assert s.loc["a", "n_failed"] == 2 and s.loc["b", "n_failed"] == 3
    assert s.loc["a", "n_coverage"] == 4 and s.loc["b", "n_coverage"] == 3 and s.loc["a", "n"] == 6


def test_oc_study_metrics_count_failures_and_label_coverage():
    """The slow Tables 5.1-5.4 metrics (tests/test_oc_studies.py) on the synthetic study: MSE over
    the 4 successes, n_failed 2, coverage over successes and over all 6 replications."""
    import test_oc_studies as T

    m = T._metrics(_study_with_failures(), ["a", "b"])["e"]
    assert (m["n"], m["n_rep"], m["n_failed"]) == (4, 6, 2)
    # squared errors of reps 0, 2, 4, 5: .02, .05, .41, 0
    assert m["mse"] == pytest.approx((0.02 + 0.05 + 0.41 + 0.0) / 4)
    # |err| <= 1.96 * 0.1 for a: reps 0, 2, 5 (not 4: 0.4); for b: 0, 5 (not 2: 0.2, not 4: 0.5)
    assert m["coverage"] == pytest.approx([3 / 4, 2 / 4])
    assert m["coverage_all"] == pytest.approx([3 / 6, 2 / 6])
    assert math.isnan(m["ellipse"])  # no _d2 rows in this frame


def _sim(rng):
    return rng.normal(3.0, 1.0, 10), {"mu": 3.0}


def _mean(x):
    from types import SimpleNamespace

    return SimpleNamespace(params={"mu": float(np.mean(x))}, bse={"mu": 1 / math.sqrt(10)}, converged=True)


def test_oc_study_cache_never_rereads_results_of_other_code(tmp_path, monkeypatch):
    """tests/test_oc_studies.py's cache: a file of the old naming (no code key) and a file of other
    code are both ignored; the study is recomputed and stored under the running code's key."""
    import test_oc_studies as T

    monkeypatch.setenv("ODEINFER_OC_CACHE", str(tmp_path))
    stale = StudyResult(_frame(999.0).assign(param="mu", estimator="m"))
    stale.to_csv(tmp_path / "k_seed1_rep3.csv")  # how results were cached before (key without the code)
    f = T._study("k", _sim, {"m": _mean}, 3, 1)
    assert len(f) == 3 and not np.any(f["estimate"] == 999.0)
    own = tmp_path / f"k_seed1_rep3_{T._code()}.csv"
    assert own.is_file()
    pd.DataFrame(f).assign(estimate=-1.0).to_csv(own, index=False)  # pretend the cache holds this code's result
    assert np.all(T._study("k", _sim, {"m": _mean}, 3, 1)["estimate"] == -1.0)  # read back
    monkeypatch.setattr(T, "_code", lambda: "0.1.0-000000000000")  # the code changed
    assert not np.any(T._study("k", _sim, {"m": _mean}, 3, 1)["estimate"] == -1.0)
