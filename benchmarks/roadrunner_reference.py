"""A PEtab problem's negative log-likelihood at its nominal parameters, simulated by libRoadRunner.

An oracle independent of odeinfer's SBML import and solvers: libRoadRunner reads the SBML itself and
integrates it with SUNDIALS' CVODE (BDF). Used where the published references disagree with odeinfer
(Chen_MSB2009, Crauste_CellSystems2017: see ``tests/reference/petab_collection.md``). Not a dependency of
odeinfer; install it beside it for this script only::

    pip install libroadrunner
    python benchmarks/roadrunner_reference.py <Benchmark-Models>/Chen_MSB2009 --rtol 1e-8 --atol 1e-10 \\
        --breaks 1799.99,1800,2659.99,2660

What it covers (and refuses, with the reason, otherwise): PEtab v1 problems with one SBML file, no
pre-equilibration and finite measurement times; condition-table columns that set SBML parameters or
species' initial values (numbers or parameter ids); the parameter table's nominal values set the SBML
parameters of the same id; normal and Laplace noise on the lin, log and log10 scales, PEtab's constants
included. ``observableFormula`` and ``noiseFormula`` are read with odeinfer's expression parser (a whitelist,
no ``eval``); that is the only part of odeinfer the script uses. ``--breaks`` names the times where the model's
inputs switch (CVODE is restarted there, as odeinfer's solvers restart at their switches); a switch between
two output times that is not named is integrated over as CVODE would.

Prints the NLL and, with ``--write FILE``, writes the observables per measurement (TSV) for comparison.
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def number_or(text, table, what):
    """``text`` as a float, or the nominal value of the parameter it names."""
    text = (text or "").strip()
    try:
        return float(text)
    except ValueError:
        if text not in table:
            raise SystemExit(f"{what}: {text!r} is neither a number nor a parameter of the table")
        return table[text]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="the problem's folder (with <name>.yaml or problem.yaml)")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--atol", type=float, default=1e-10)
    ap.add_argument("--breaks", default="", help="comma-separated times where the inputs switch")
    ap.add_argument("--write", type=Path, help="TSV of the observables per measurement")
    args = ap.parse_args(argv)

    import libsbml
    import roadrunner
    import sympy as sp
    import yaml

    from odeinfer.model.equations import parse_expression

    yml = next(p for p in sorted(args.folder.glob("*.yaml")) if "visualization" not in p.name)
    spec = yaml.safe_load(yml.read_text())
    prob = spec["problems"][0]
    keys = ("sbml_files", "measurement_files", "condition_files", "observable_files")
    if len(spec["problems"]) != 1 or any(len(prob[k]) != 1 for k in keys):
        raise SystemExit("one problem with one file of each kind only")
    root = args.folder.resolve()

    def inside(name):
        path = (root / name).resolve()
        if root not in path.parents:
            raise SystemExit(f"{yml.name}: a file outside the problem's folder is refused")
        return path

    f = lambda key: inside(prob[key][0])  # noqa: E731
    table = {r["parameterId"]: float(r["nominalValue"]) for r in rows(inside(spec["parameter_file"]))}
    measurements = rows(f("measurement_files"))
    conditions = {r["conditionId"]: r for r in rows(f("condition_files"))}
    observables = {r["observableId"]: r for r in rows(f("observable_files"))}
    if any((m.get("preequilibrationConditionId") or "").strip() for m in measurements):
        raise SystemExit("pre-equilibration is not covered")

    sbml = libsbml.readSBMLFromFile(str(f("sbml_files"))).getModel()
    species = {s.getId(): s.getHasOnlySubstanceUnits() for s in sbml.getListOfSpecies()}
    parameters = [p.getId() for p in sbml.getListOfParameters()]
    compartments = [c.getId() for c in sbml.getListOfCompartments()]
    # PEtab reads a species id as the SBML math does: its concentration, unless it has only substance units
    select = {s: (s if amount else f"[{s}]") for s, amount in species.items()}
    select.update({p: p for p in parameters + compartments})
    ids = list(select)

    rr = roadrunner.RoadRunner(str(f("sbml_files")))
    rr.integrator.relative_tolerance = args.rtol
    rr.integrator.absolute_tolerance = args.atol
    rr.integrator.maximum_num_steps = 10**6
    rr.integrator.initial_time_step = 1e-6  # CVODE's own first step after a switch can underflow (Chen's ramps)
    rr.timeCourseSelections = ["time"] + [select[i] for i in ids]
    settable = set(rr.model.getGlobalParameterIds()) - {r.getVariable() for r in sbml.getListOfRules()}
    breaks = [float(b) for b in args.breaks.split(",") if b.strip()]

    states = {}  # (condition, time) -> {id: value}
    for cond in sorted({m["simulationConditionId"] for m in measurements}):
        rr.resetAll()
        for pid in settable:
            if pid in table:
                rr[pid] = table[pid]
        for col, text in conditions[cond].items():
            if col in ("conditionId", "conditionName") or not (text or "").strip():
                continue
            value = number_or(text, table, f"condition {cond}, column {col}")
            if col in species:
                rr.setValue(f"init([{col}])" if not species[col] else f"init({col})", value)
            elif col in parameters or col in compartments:
                rr[col] = value
            else:
                raise SystemExit(f"condition column {col!r} is not a parameter, compartment or species")
        rr.reset()
        times = sorted({float(m["time"]) for m in measurements if m["simulationConditionId"] == cond})
        if not all(math.isfinite(t) for t in times):
            raise SystemExit("steady-state measurements (time = inf) are not covered")
        grid = sorted({0.0, *[b for b in breaks if b < times[-1]], *times})
        if len(grid) == 1:  # only the start is measured
            grid.append(1e-9)
        for a, b in zip(grid[:-1], grid[1:]):
            out = rr.simulate(a, b, 2)
            for t, row in ((a, out[0]), (b, out[-1])):
                if t in times:
                    states.setdefault((cond, t), dict(zip(ids, row[1:])))

    columns = (("observableParameters", "observableParameter"), ("noiseParameters", "noiseParameter"))
    n_placeholders = max((len((m.get(c) or "").split(";")) for m in measurements for c, _ in columns), default=0)
    base = set(ids) | set(table)

    def formulas(oid):
        """The observable's and its noise's sympy expressions, parsed once per observable."""
        names = base | {oid} | {f"{p}{n + 1}_{oid}" for _, p in columns for n in range(n_placeholders)}
        scope = {n: sp.Symbol(n) for n in names}
        o = observables[oid]
        return (parse_expression(o["observableFormula"], scope, f"observableFormula of {oid}"),
                parse_expression(o["noiseFormula"], scope, f"noiseFormula of {oid}"))

    parsed = {oid: formulas(oid) for oid in {m["observableId"] for m in measurements}}
    nll, written = 0.0, []
    for k, m in enumerate(measurements):
        o = observables[m["observableId"]]
        oid = o["observableId"]
        values = dict(table)
        values.update(states[m["simulationConditionId"], float(m["time"])])
        for column, prefix in columns:
            for n, text in enumerate(t for t in (m.get(column) or "").split(";") if t.strip()):
                values[f"{prefix}{n + 1}_{oid}"] = number_or(text, table, f"row {k + 2}, {column}")
        h_expr, sigma_expr = parsed[oid]
        h = float(h_expr.evalf(subs=values))
        values[oid] = h
        sigma = float(sigma_expr.evalf(subs=values))
        y = float(m["measurement"])
        scale = (o.get("observableTransformation") or "lin").strip() or "lin"
        dist = (o.get("noiseDistribution") or "normal").strip() or "normal"
        if scale == "lin":
            r, jac = y - h, 0.0
        elif scale == "log":
            r, jac = math.log(y) - math.log(h), math.log(y)
        elif scale == "log10":
            r, jac = math.log10(y) - math.log10(h), math.log(y * math.log(10))
        else:
            raise SystemExit(f"observableTransformation {scale!r} is not covered")
        if dist == "normal":
            nll += 0.5 * math.log(2 * math.pi * sigma**2) + 0.5 * (r / sigma) ** 2 + jac
        elif dist == "laplace":
            nll += math.log(2 * sigma) + abs(r) / sigma + jac
        else:
            raise SystemExit(f"noiseDistribution {dist!r} is not covered")
        written.append((m["simulationConditionId"], oid, m["time"], repr(h)))
    print(f"{args.folder.name}: NLL {nll!r} (libRoadRunner {roadrunner.__version__}, CVODE rtol {args.rtol:g}, "
          f"atol {args.atol:g}; {len(measurements)} measurements)")
    if args.write:
        with open(args.write, "w", newline="") as fh:
            w = csv.writer(fh, delimiter="\t")
            w.writerow(["simulationConditionId", "observableId", "time", "simulation"])
            w.writerows(written)
    return nll


if __name__ == "__main__":
    main()
