"""The ``odeinfer`` command line."""

from __future__ import annotations

import argparse
import contextlib
import sys
import textwrap
import time
import warnings

__all__ = ["main"]


def _demo(args) -> int:
    """Lynx-hare (Hudson's Bay company, 1900-1920): the matching estimators, the embedding fit, its
    profile intervals and NUTS seeded by it (``oi.analyze``), on Stan's Lotka-Volterra case-study model;
    writes a standalone HTML report."""
    import odeinfer as oi
    from odeinfer.bayes.build import lynx_hare_stan
    from odeinfer.pipeline import analyze

    _check_out(args)
    say = _printer(args)
    t0 = time.perf_counter()
    # on a fresh machine, the plain solver kernel (the matching estimators' trajectory check), the
    # sensitivity kernel of the embedding fit with its C entry, and the NUTS graph that calls the entry
    # compile in three other processes while the matching estimators compile their own code (a no-op
    # once cached): the estimators need all of them at about the same time
    oi.warmup(["dopri5_solve", "dopri5_solve_sens", "entry_dopri5_solve_sens"]
              + ([] if args.no_bayes else ["nuts_graph"]), wait=False, jobs=3)
    say(f"odeinfer {oi.__version__} demo: Lotka-Volterra and the Hudson's Bay lynx-hare data")
    model, data, priors = lynx_hare_stan()
    say(f"data: {data.n_times} years from 1900 (t = 0) to 1920, {data.nobs} observations of {list(data.states)} "
        "(thousands of pelts); log-normal noise; initial state estimated")
    for s, e in model.equations().items():
        say(f"  d{s}/dt = {e}")
    with _shared_tier():
        result = analyze(model, data, estimators=("OrthogonalConditions", "GradientMatching", "Embedding"),
                         sample=not args.no_bayes, draws=args.draws, tune=args.tune, chains=args.chains,
                         likelihood="lognormal", priors=priors,
                         title="odeinfer demo: Lotka-Volterra on the lynx-hare data", progress=say, rng=args.seed)
        say(f"writing {args.out} ...")
        result.export_html(args.out)
    say(f"done in {time.perf_counter() - t0:.1f} s: open {args.out} in a browser")
    return 0


@contextlib.contextmanager
def _shared_tier():
    """The demo runs on the shared kernels (``ODEINFER_TIERED=shared``, unless the variable is set): on a
    fresh machine, its model's own kernels would compile in the background (about 20 s of CPU, beside
    the warm-ups it waits for) and be ready only after it ends; the results are the same bits."""
    import os

    if "ODEINFER_TIERED" in os.environ:
        yield
        return
    os.environ["ODEINFER_TIERED"] = "shared"
    try:
        yield
    finally:
        os.environ.pop("ODEINFER_TIERED", None)


def _report(args) -> int:
    """Run the standard analysis of a TOML spec (model equations + CSV data) and write an HTML report."""
    from odeinfer.pipeline import run_spec
    from odeinfer.spec import load_spec

    _check_out(args)
    say = _printer(args)
    t0 = time.perf_counter()
    spec = load_spec(args.spec)
    say(f"{spec.source}: model {spec.model.name!r} ({', '.join(spec.model.states)}), estimators {list(spec.estimators)}")
    result = run_spec(spec, progress=say)
    result.export_html(args.out)
    say(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def _fit(args) -> int:
    """Fit a PEtab v1 problem (its YAML file; every file it names must lie in the YAML's folder) by
    maximum likelihood from several starts (Embedding: trust region with the exact gradient and the
    Fisher information; starts from the parameter table's initialization priors, else uniform within
    the bounds on the parameters' scales) and write an HTML report of the best fit: observables with
    the data, estimates, the table of all starts and the negative log-likelihood (PEtab's, all
    constants kept). With --priors, a maximum a posteriori fit: the negative log-likelihood plus the
    parameter table's objective priors (objectivePriorType) is minimised, and both parts are reported.
    With --adjoint, the gradient comes from the adjoint and the curvature from BFGS updates (for models
    with many parameters, whose forward sensitivities cost too much; the Fisher information of the
    covariance is computed once, at the best optimum)."""
    import odeinfer as oi
    from odeinfer._lazy import pandas as pd
    from odeinfer.errors import SolverError
    from odeinfer.estimators.base import IdentifiabilityWarning

    _check_out(args)
    _check_count("--starts", args.starts, "the number of starts", lowest=1)
    _check_count("--jobs", args.jobs, "worker processes (-1: all cores)", lowest=-1, zero=False)
    say = _printer(args)
    t0 = time.perf_counter()
    oi.warmup("trust_step", wait=False, jobs=1)  # on a fresh installation: compiles while the model does
    pp = oi.petab.load(args.problem)
    say(f"{args.problem}: {pp!r}")
    starts = pp.sample_starts(args.starts, rng=args.seed)
    say(f"fitting from {args.starts} start(s) with {args.jobs} process(es) ...")
    with warnings.catch_warnings():  # the fit's warnings are in the report and printed below
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        est = oi.Embedding(starts=args.starts, n_jobs=args.jobs, rng=args.seed,
                           gradient=oi.Adjoint() if args.adjoint else None)
        fit = est.fit(pp, start=starts, priors=args.priors or None)
    for w in fit.warnings:
        say(f"warning: {w}")
    try:
        nominal = f"{pp.nll_nominal():.6f}"
    except SolverError as exc:
        nominal = f"not computable ({exc})"
    ok = sum(s == "converged" for s in fit.extras["starts"]["status"])
    posterior = (f"; negative log-posterior {fit.extras['objective']:.6f} (NLL + the priors' "
                 f"{fit.extras['prior_nll']:.6f})") if args.priors else ""
    say(f"best NLL {fit.nll:.6f}{posterior} ({fit.status}); {ok}/{args.starts} starts converged, "
        f"{fit.extras['n_within_0.1_of_best']} within 0.1 of the best; NLL at the nominal parameters {nominal}")
    key = "objective" if args.priors else "nll"
    table = pd.DataFrame(fit.extras["starts"]).sort_values(key, na_position="last")
    table.attrs["title"] = (f"All starts (sorted by {'negative log-posterior' if args.priors else 'NLL'}; parameters "
                            "in natural units at each local optimum)")
    kind = ("Maximum a posteriori fit (the parameter table's objective priors)" if args.priors
            else "Maximum-likelihood fit")
    how = " (gradient by the adjoint, BFGS curvature)" if args.adjoint else ""
    notes = (f"PEtab problem {pp.name!r} ({args.problem}): {pp!r}. {kind} by Embedding{how} from "
             f"{args.starts} start(s) (seed {args.seed}), drawn from the initialization priors of the parameter "
             "table where given, else uniform within the bounds on the parameters' scales. "
             f"Best negative log-likelihood (NLL, PEtab's convention with all constants): {fit.nll:.6f}"
             f"{posterior} (status {fit.status}); {ok} of {args.starts} starts converged, "
             f"{fit.extras['n_within_0.1_of_best']} within 0.1 of the best. NLL at the nominal parameters of the "
             f"parameter table: {nominal}.")
    oi.report.export_html([notes, fit, table], args.out, title=f"odeinfer fit: PEtab problem {pp.name}")
    say(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def _warmup(args) -> int:
    """Compile odeinfer's shared solver kernels (Dormand-Prince and Rodas, with and without forward
    sensitivities, the ODE adjoint and the delay solver) and the demo's NUTS log density (PyTensor's
    NUMBA mode) into the disk caches, in parallel processes: a fresh machine's first solves, fits and
    samplers then answer without compiling them. What is compiled already is skipped."""
    from odeinfer.solve.warmup import warmup

    _check_count("--jobs", args.jobs, "processes (0: one per core)", lowest=0)
    say = _printer(args)
    t0 = time.perf_counter()
    done = warmup(jobs=args.jobs or None)
    say(f"compiled {', '.join(done) if done else 'nothing (all cached)'} in {time.perf_counter() - t0:.1f} s")
    return 0


def _check_count(flag, value, what, *, lowest, zero=True):
    """Refuse an integer option below ``lowest`` (or 0 when ``zero`` is False) before any work."""
    from odeinfer.errors import InputError

    if value < lowest or (value == 0 and not zero):
        allowed = f"an integer >= {lowest}" + ("" if zero else ", not 0")
        raise InputError(f"{flag}: expected {allowed} ({what}), got {value}; pass e.g. {flag} {max(lowest, 1)}")


def _check_out(args):
    """Refuse an unusable report path (missing or read-only directory, a directory) before any work."""
    from odeinfer._io import check_target

    check_target(args.out, argument="-o/--out")


def _printer(args):
    def say(msg):
        if not args.quiet:
            print(msg, flush=True)
    return say


@contextlib.contextmanager
def _plain_warnings(width=100):
    """Show warnings as a terminal user reads them: ``Category: message``, wrapped, on stderr, without
    the library file, line and source line that Python's default display adds."""
    def show(message, category, filename, lineno, file=None, line=None):
        text = textwrap.fill(f"{category.__name__}: {message}", width=width, subsequent_indent="    ",
                             break_long_words=False, break_on_hyphens=False)
        print(text, file=sys.stderr if file is None else file, flush=True)

    saved = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved


def main(argv=None) -> int:
    """Entry point of the ``odeinfer`` command."""
    from odeinfer.errors import OdeinferError

    parser = argparse.ArgumentParser(
        prog="odeinfer", description="Parameter estimation for ODE and DDE models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="fit the lynx-hare data end to end and write odeinfer-demo.html",
                          description=_demo.__doc__)
    demo.add_argument("-o", "--out", default="odeinfer-demo.html", help="report path (default: %(default)s)")
    demo.add_argument("--draws", type=int, default=1000, help="NUTS draws per chain (default: %(default)s)")
    demo.add_argument("--tune", type=int, default=500, help="NUTS tuning steps per chain (default: %(default)s)")
    demo.add_argument("--chains", type=int, default=2, help="NUTS chains (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    demo.add_argument("--no-bayes", action="store_true", help="skip the Bayesian stage")
    demo.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    demo.set_defaults(func=_demo)
    report = sub.add_parser("report", help="analyse a model given in a TOML spec and write an HTML report",
                            description=_report.__doc__ + "\n\nSpec format: see the odeinfer.spec module docstring "
                            "(python -c 'import odeinfer.spec; help(odeinfer.spec)').",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("spec", help="the TOML spec file")
    report.add_argument("-o", "--out", default="odeinfer-report.html", help="report path (default: %(default)s)")
    report.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    report.set_defaults(func=_report)
    fit = sub.add_parser("fit", help="fit a PEtab problem from several starts and write an HTML report",
                         description=_fit.__doc__)
    fit.add_argument("problem", help="the PEtab v1 YAML file")
    fit.add_argument("-o", "--out", default="odeinfer-fit.html", help="report path (default: %(default)s)")
    fit.add_argument("--starts", type=int, default=20, help="number of starts (default: %(default)s)")
    fit.add_argument("--jobs", type=int, default=1, help="worker processes, -1 for all cores (default: %(default)s)")
    fit.add_argument("--seed", type=int, default=0, help="seed of the starts (default: %(default)s)")
    fit.add_argument("--priors", action="store_true",
                     help="maximum a posteriori: add the parameter table's objective priors to the NLL")
    fit.add_argument("--adjoint", action="store_true",
                     help="the gradient by the adjoint, the curvature by BFGS (for models with many parameters)")
    fit.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    fit.set_defaults(func=_fit)
    warm = sub.add_parser("warmup", help="compile the shared solver kernels and a NUTS graph once for this machine",
                          description=_warmup.__doc__)
    warm.add_argument("--jobs", type=int, default=0, help="processes, 0 for one per core (default: %(default)s)")
    warm.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    warm.set_defaults(func=_warmup)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        with _plain_warnings():
            return args.func(args)
    except OdeinferError as exc:
        print(f"odeinfer {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
