"""The public Benchmark-Models-PEtab collection as a test suite (issue 15): load every problem with
``oi.petab.load``, score it at its nominal parameters, and compare with the published references.

Per problem (each in its own process, so that one crash or hang is one row):

1. ``oi.petab.load``: loaded, or the typed error that names the unsupported feature (its class and
   message; odeinfer's messages never quote file contents);
2. the negative log-likelihood at the nominal parameters with a tight solver (Rodas, rtol 1e-10,
   atol 1e-12; ``Objective.value``: solves of the states alone), against the log-likelihood that AMICI's benchmark tests publish
   (``tests/benchmark_models/benchmark_models.yaml`` of the AMICI repository, commit 5c524dd; the
   values below are copied from it, with its notes on the collection's own sign and log10
   conventions): within 1e-3 absolute, or the difference;
3. the observables at the nominal parameters against the collection's own simulations
   (``simulatedData_<name>.tsv``, made by the collection's maintainers with AMICI): the largest
   relative difference ``|ours - theirs| / max(|theirs|, 1e-8 + 1e-6 max|theirs|)`` over the
   measurements, matched by (pre-equilibration and simulation condition, observable, time)
   (steady-state rows, ``time = inf``: the one value per group, however many rows each side has;
   groups that the simulations hold but no measurement does are left out, with a note);
4. times: load, first evaluation (of step 2, compilation included), a warm NLL + gradient (median of 5 calls,
   each at new parameters: the nominal ones moved by 1e-9 on the estimation scale) with the likelihood's default
   solver, by the adjoint (``gradient=oi.Adjoint()``) and by forward sensitivities (the default, with the Fisher
   information the trust-region fits use).

The child process prints its record after each stage, so a problem whose process hits ``--timeout`` keeps the
stages it finished (a timeout in step 4 leaves the warm time "over T s").

The collection is not part of the repository: clone it (BSD-3-Clause) and name its
``Benchmark-Models`` folder::

    git clone https://github.com/Benchmarking-Initiative/Benchmark-Models-PEtab
    python benchmarks/petab_collection.py Benchmark-Models-PEtab/Benchmark-Models \\
        --write tests/reference/petab_collection.md

``--only A,B`` runs some problems; ``--timeout`` bounds each problem's process (seconds).
Solver kernels run on the shared (compiled once per machine) tier unless ``ODEINFER_TIERED`` is set.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

# AMICI's published log-likelihoods at the nominal parameters (benchmark_models.yaml, see above)
AMICI_LLH = {
    "Bachmann_MSB2011": 418.40573341425295, "Beer_MolBioSystems2014": 58622.9145631413,
    "Boehm_JProteomeRes2014": -138.22199693517703, "Borghans_BiophysChem1997": 83.3237191357272,
    "Brannmark_JBC2010": -141.889113770537, "Bruno_JExpBot2016": 46.688176988431806,
    "Chen_MSB2009": -115700.1192629893, "Crauste_CellSystems2017": -190.96521897435176,
    "Elowitz_Nature2000": 63.20279991419332, "Fiedler_BMCSystBiol2016": 58.58390161681,
    "Fujita_SciSignal2010": 53.08377736998929, "Isensee_JCB2018": -3949.375966548649,
    "Lucarelli_CellSystems2018": -1681.6059879426584, "Schwen_PONE2014": -943.9992988598723,
    "Sneyd_PNAS2002": 319.79177818768756, "Smith_BMCSystBiol2013": -888198.436541014,
    "Weber_BMC2015": -296.2017922646865, "Zheng_PNAS2012": 278.33353271001477,
}
NLL_TOLERANCE = 1e-3  # issue 15's tolerance on the objective at the nominal parameters
# Where AMICI's value and odeinfer's differ: the NLL with the states simulated by libRoadRunner (CVODE), an SBML
# simulator independent of odeinfer, by `benchmarks/roadrunner_reference.py` (its docstring has the command) at
# rtol 1e-8, atol 1e-10 (Chen, with --breaks 1799.99,1800,2659.99,2660) and rtol 1e-10, atol 1e-12 (Crauste: at 1e-8
# CVODE is 2e-3 off; 1e-9: 190.96405, 1e-12: 190.9639776)
ROADRUNNER_NLL = {"Chen_MSB2009": 130591.7530178482, "Crauste_CellSystems2017": 190.96397838089447}
SIM_TOLERANCE = 1e-4  # relative, on the observables (AMICI's simulations ran at its default 1e-8 tolerances)


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _first_line(exc, folder=None):
    """The message's first line, with the collection's folder written as ``<collection>``."""
    text = str(exc).strip()
    if folder is not None:
        text = text.replace(str(folder.parent), "<collection>")
    lines = text.splitlines()
    return (lines[0] if lines else "")[:400]


def _yaml(folder):
    """The problem's YAML: ``<name>.yaml`` (PEtab v1's naming in the collection) or ``problem.yaml``."""
    for path in (folder / f"{folder.name}.yaml", folder / "problem.yaml"):
        if path.exists():
            return path
    return None


def _compare_simulations(obj, u, folder, name):
    """Largest relative difference to the collection's simulations (None and why, when they cannot be
    compared). Rows pair up per (pre-equilibration condition, simulation condition, observable) in time
    order; the paired times must agree to 1e-6 relative (the collection writes them with other digits)."""
    import numpy as np

    path = folder / f"simulatedData_{name}.tsv"
    if not path.exists():
        return None, "no simulatedData file"
    theirs = {}
    for r in _rows(path):
        # some files name the condition columns without "Id" (Raia_CancerResearch2011)
        pre = r.get("preequilibrationConditionId", r.get("preequilibrationCondition", "")) or ""
        sim = r.get("simulationConditionId", r.get("simulationCondition"))
        if sim is None or "observableId" not in r:
            return None, "the simulatedData file has no condition or observable column"
        key = (pre, sim, r["observableId"])
        theirs.setdefault(key, []).append((float(r["time"]), float(r["simulation"])))
    ours = {}
    for exp, (t, which, h) in obj.predictions(u).items():
        base = exp.split("#")[0]
        pre, sim = base.split("->") if "->" in base else ("", base)
        for tk, ok, hk in zip(t, which, h):
            ours.setdefault((pre, sim, str(ok)), []).append((float(tk), float(hk)))
    if not set(ours) <= set(theirs):
        return None, f"measurement groups differ ({len(set(ours) ^ set(theirs))} of {len(theirs)})"
    # groups the collection simulates but the measurement table no longer holds (Blasi_CellSystems2016's
    # simulatedData has an observable and steady-state rows more than its measurements) are left out
    unmeasured = len(set(theirs) - set(ours))
    scale = max(abs(v) for vs in theirs.values() for _, v in vs)
    floor = 1e-8 + 1e-6 * scale
    worst = 0.0
    for key in ours:
        a, b = np.array(sorted(ours[key])), np.array(sorted(theirs[key]))
        if a.shape != b.shape and np.all(np.isinf(a[:, 0])) and np.all(np.isinf(b[:, 0])):
            a, b = np.unique(a, axis=0), np.unique(b, axis=0)  # steady-state rows: one value per group each
        if a.shape != b.shape or np.any(np.abs(a[:, 0] - b[:, 0]) > 1e-6 * (1.0 + np.abs(b[:, 0]))):
            return None, f"rows differ in number or time for observable {key[2]!r}"
        worst = max(worst, float(np.max(np.abs(a[:, 1] - b[:, 1]) / np.maximum(np.abs(b[:, 1]), floor))))
    return worst, (f"{unmeasured} simulated group(s) without measurements left out" if unmeasured else "")


def one(folder: Path) -> dict:
    """Everything measured for one problem (run in a child process)."""
    import numpy as np

    import odeinfer as oi

    name = folder.name
    rec = {"problem": name}
    t = time.perf_counter()
    try:
        pp = oi.petab.load(_yaml(folder))
    except Exception as exc:  # noqa: BLE001 - the survey records every failure
        rec.update(stage="load", error=type(exc).__name__, message=_first_line(exc, folder),
                   load_s=time.perf_counter() - t)
        return rec
    rec["load_s"] = time.perf_counter() - t
    p = pp.problem
    rec.update(states=p.model.n_states, estimated=len(p.estimated), experiments=len(p.experiments),
               measurements=int(sum(pl.t_rows.size for pl in p.plans)))
    t = time.perf_counter()
    try:
        obj = pp.objective(oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=200_000))
        ev = obj.value(pp.u_nominal)
    except Exception as exc:  # noqa: BLE001
        rec.update(stage="evaluate", error=type(exc).__name__, message=_first_line(exc, folder))
        return rec
    rec["first_eval_s"] = time.perf_counter() - t
    if not ev.ok:
        rec.update(stage="evaluate", error="failure", message=ev.failure[:400])
        return rec
    rec["nll"] = float(ev.nll)
    if name in AMICI_LLH:
        rec["reference_nll"] = -AMICI_LLH[name]
    try:
        rec["sim_rel_diff"], rec["sim_note"] = _compare_simulations(obj, pp.u_nominal, folder, name)
    except Exception as exc:  # noqa: BLE001
        rec["sim_rel_diff"], rec["sim_note"] = None, f"{type(exc).__name__}: {_first_line(exc, folder)}"
    print(json.dumps(dict(rec, stage="warm")), flush=True)  # kept if a warm timing hits the timeout
    # the likelihood role's default solver, as the estimators use: by the adjoint, then by forward sensitivities
    for key, gradient in (("warm_adjoint_ms", oi.Adjoint()), ("warm_ms", None)):
        rec[key] = _warm(pp, gradient, folder, rec)
        print(json.dumps(dict(rec, stage="warm")), flush=True)
    rec["stage"] = "done"
    return rec


def _warm(pp, gradient, folder, rec):
    """Median ms of 5 warm NLL + gradient calls (after one at the nominal point), or None (a note in ``rec``)."""
    import numpy as np

    try:
        warm = pp.objective(gradient=gradient)
        warm(pp.u_nominal)
        times = []
        for k in range(5):  # new parameters each call, as in a fit (nothing reused from the last call)
            u = pp.u_nominal + 1e-9 * (k + 1)
            t = time.perf_counter()
            ok = warm(u).ok
            times.append(time.perf_counter() - t)
        return 1e3 * float(np.median(times)) if ok else None
    except Exception as exc:  # noqa: BLE001
        rec["warm_note"] = f"{'adjoint: ' if gradient else ''}{type(exc).__name__}: {_first_line(exc, folder)}"
        return None


def run(folder: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env.setdefault("ODEINFER_TIERED", "shared")
    t = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, __file__, "--one", str(folder)], capture_output=True, text=True,
                             timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            return {"problem": folder.name, "stage": "timeout", "error": "timeout", "message": f"over {timeout:.0f} s"}
        rec = json.loads(lines[-1])  # the nominal evaluation ended: a warm timing did not
        which = "adjoint " if "warm_adjoint_ms" not in rec else ""
        rec.update(stage="done", warm_note=f"warm {which}NLL+grad: over {timeout:.0f} s in all")
        return rec
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = res.stderr.strip().splitlines()[-1:] or [""]
        return {"problem": folder.name, "stage": "crash", "error": f"exit {res.returncode}", "message": tail[0][:400]}
    rec = json.loads(lines[-1])
    rec["wall_s"] = time.perf_counter() - t
    return rec


def verdict(rec):
    if rec["stage"] != "done":
        return f"{rec['stage']}: {rec['error']}"
    parts = []
    if "reference_nll" in rec:
        d = rec["nll"] - rec["reference_nll"]
        parts.append(("matches" if abs(d) <= NLL_TOLERANCE else "differs") + f" ({d:+.2e})")
    if rec["problem"] in ROADRUNNER_NLL:
        d = rec["nll"] - ROADRUNNER_NLL[rec["problem"]]
        parts.append(("matches" if abs(d) <= NLL_TOLERANCE else "differs from") + f" libRoadRunner ({d:+.2e})")
    s = rec.get("sim_rel_diff")
    if s is not None:
        parts.append(("simulations match" if s <= SIM_TOLERANCE else "simulations differ") + f" ({s:.1e})")
    return "; ".join(parts) or "no reference"


def table(records, command):
    out = [f"Command: `{command}`", "",
           "| problem | states | estimated | data | load s | first eval s | warm NLL+grad ms | warm adjoint ms | "
           "NLL at nominal | reference NLL (AMICI) | verdict | note | code |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(v, fmt):
        return "" if v is None else format(v, fmt)

    for r in records:
        note = r.get("message", "") or "; ".join(filter(None, (r.get("sim_note", ""), r.get("warm_note", ""))))
        out.append("| " + " | ".join([
            r["problem"], str(r.get("states", "")), str(r.get("estimated", "")), str(r.get("measurements", "")),
            f(r.get("load_s"), ".1f"), f(r.get("first_eval_s"), ".1f"), f(r.get("warm_ms"), ".2f"),
            f(r.get("warm_adjoint_ms"), ".2f"),
            f(r.get("nll"), ".4f"), f(r.get("reference_nll"), ".4f"), verdict(r), note.replace("|", "/"),
            r.get("commit", "")]) + " |")
    done = [r for r in records if r["stage"] == "done"]
    ref = [r for r in done if "reference_nll" in r]
    match = [r for r in ref if abs(r["nll"] - r["reference_nll"]) <= NLL_TOLERANCE]
    sims = [r for r in done if r.get("sim_rel_diff") is not None]
    rr = [r for r in done if r["problem"] in ROADRUNNER_NLL]
    rr_match = sum(abs(r["nll"] - ROADRUNNER_NLL[r["problem"]]) <= NLL_TOLERANCE for r in rr)
    out += ["", f"{len(done)} of {len(records)} problems load and evaluate; {len(match)} of {len(ref)} with a "
            f"published reference match it within {NLL_TOLERANCE:g} ({rr_match} of the {len(rr)} others with a "
            "libRoadRunner reference match that); "
            f"{sum(r['sim_rel_diff'] <= SIM_TOLERANCE for r in sims)} of {len(sims)} compared match the "
            f"collection's simulations within {SIM_TOLERANCE:g} (relative)."]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("collection", nargs="?", help="the collection's Benchmark-Models folder")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--only", default="", help="comma-separated problem names")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--records", help="a JSON-lines file of earlier records: the problems run now replace theirs, "
                                      "the table shows all")
    ap.add_argument("--write", help="write the markdown table to this file (between the markers)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one))))
        return
    root = Path(args.collection)
    names = sorted(d.name for d in root.iterdir() if d.is_dir() and _yaml(d) is not None)
    if args.only:
        names = [n for n in names if n in set(args.only.split(","))]
    records = {}
    if args.records and Path(args.records).exists():
        records = {r["problem"]: r for r in map(json.loads, Path(args.records).read_text().splitlines()) if r}
    commit = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip() or "?"
    for n in names:
        rec = run(root / n, args.timeout)
        rec["commit"] = commit
        records[n] = rec
        print(json.dumps(rec), flush=True)
        if args.records:
            _write_atomic(Path(args.records), "".join(json.dumps(r) + "\n" for r in records.values()))
    text = table([records[n] for n in sorted(records)],
                 "python benchmarks/petab_collection.py <Benchmark-Models folder>"
                 + (f" --records {args.records}" if args.records else ""))
    print(text)
    if args.write:
        _write_block(Path(args.write), text)


BEGIN, END = "<!-- collection:begin -->", "<!-- collection:end -->"


def _write_block(path, text):
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1]
    else:
        new = old + ("\n" if old else "") + BEGIN + "\n" + text + "\n" + END + "\n"
    _write_atomic(path, new)


def _write_atomic(path, text):
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
