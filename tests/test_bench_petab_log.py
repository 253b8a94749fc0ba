"""benchmarks/bench_petab.py's per-start records (``--log``): written as each start ends, a rerun skips
the recorded starts, a line cut by an interrupted write is run again, and records from other starts
are refused. The fits are scipy's (Perelson: cheap); what is checked is the bookkeeping, against the
starts given (their indices and vectors), not against any fitted value."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_petab.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_petab", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def perelson(bench):
    from odeinfer.inference.multistart import sample_starts
    from odeinfer.likelihood import Objective

    problem = bench.load("Perelson_Science1996").problem
    obj = Objective(problem)
    return problem, sample_starts(obj.lower, obj.upper, 3, rng=0)


def lines(path):
    """The complete records of ``path`` (a cut line is not one)."""
    out = []
    for s in path.read_text().splitlines():
        try:
            out.append(json.loads(s))
        except ValueError:
            pass
    return out


def test_records_resume_and_refuse_other_starts(bench, perelson, tmp_path):
    problem, U = perelson
    log = tmp_path / "p.scipy.jsonl"
    recs, _ = bench.run_starts_logged("scipy", problem, U[:2], 1, log)  # an "interrupted" run: 2 of 3
    assert [r["index"] for r in lines(log)] == [0, 1]
    assert [r["start"] for r in lines(log)] == U[:2].tolist()
    assert [r["index"] for r in recs] == [0, 1]

    # report only: nothing runs, the recorded starts come back
    recs, _ = bench.run_starts_logged("scipy", problem, U, 1, log, run=False)
    assert [r["index"] for r in recs] == [0, 1] and len(lines(log)) == 2

    # the rerun adds start 2 only; a line cut mid-write (start 1's) is run again
    text = log.read_text().splitlines()
    log.write_text(text[0] + "\n" + text[1][:25] + "\n")
    recs, _ = bench.run_starts_logged("scipy", problem, U, 1, log)
    assert sorted(r["index"] for r in recs) == [0, 1, 2]
    assert [r["index"] for r in lines(log)] == [0, 1, 2] and len(log.read_text().splitlines()) == 4
    X, times, statuses, evals = bench._collect(recs, U.shape[1])
    assert X.shape == U.shape and times.shape == (3, 2) and len(statuses) == 3

    # records of other starts (another seed) are refused, not mixed in
    with pytest.raises(SystemExit, match="another start vector"):
        bench.run_starts_logged("scipy", problem, U + 0.5, 1, log, run=False)
