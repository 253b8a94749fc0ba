"""The ``odeinfer`` command line."""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["main"]


def _demo(args) -> int:
    """Lynx-hare: the zoo's Lotka-Volterra model against the Hudson's Bay data."""
    import numpy as np

    import odeinfer as oi

    def say(msg):
        print(msg, flush=True)

    say(f"odeinfer {oi.__version__} demo: Lotka-Volterra and the Hudson's Bay lynx-hare data")
    data = oi.datasets.lynx_hare()
    entry = oi.zoo.get("lotka_volterra")
    model = entry.model
    data = data.rename(dict(zip(("hare", "lynx"), model.states)))
    say(f"\nData: {data.n_times} years from 1900 (t = 0) to 1920, states {list(data.states)}, "
        f"{data.nobs} observations (thousands of pelts)")
    say(f"Source: {oi.datasets.citation('lynx_hare').splitlines()[0]}")
    say("\nModel:")
    for s, e in model.equations().items():
        say(f"  d{s}/dt = {e}")
    params, x0 = entry.params_array(), entry.x0_array()
    say("Parameters (zoo defaults: posterior means of B. Carpenter's Stan case study, 2018):")
    for n, v in zip(model.params, params):
        say(f"  {n:>8} = {v:.4g}")
    t0 = time.perf_counter()
    solver = oi.solve.make_solver(model, data.t, sensitivities=True)
    y, sens, status = solver(params, x0)
    t1 = time.perf_counter()
    reps = 2000
    for _ in range(reps):
        solver(params, x0)
    t2 = time.perf_counter()
    say(f"\nSolver: Dormand-Prince 5(4) with forward sensitivities for {model.n_params} parameters "
        f"+ {model.n_states} initial states")
    say(f"  first call (load or compile kernels): {t1 - t0:.2f} s; warm call: {(t2 - t1) / reps * 1e6:.1f} us")
    resid = np.log(data.y) - np.log(y)
    say("\nFit of the default parameters (log scale, as in the Stan case study):")
    for k, s in enumerate(data.states):
        say(f"  {s:>9}: RMS log residual {np.sqrt(np.mean(resid[:, k] ** 2)):.3f}")
    say("\nSensitivity of the 1920 states to each parameter (d y / d theta):")
    names = list(model.params) + [f"{s}(0)" for s in model.states]
    for k, s in enumerate(model.states):
        cells = ", ".join(f"{n}: {v:+.3g}" for n, v in zip(names, sens[-1, k]))
        say(f"  {s:>9}: {cells}")
    say("\nNext: fit it with oi.OrthogonalConditions, oi.GradientMatching or oi.NewtonRaphson (README);"
        " the embedding fit, seeded NUTS and the HTML report are coming.")
    return 0


def main(argv=None) -> int:
    """Entry point of the ``odeinfer`` command."""
    parser = argparse.ArgumentParser(
        prog="odeinfer", description="Parameter estimation for ODE and DDE models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="run the lynx-hare demo and print a summary",
                          description=_demo.__doc__)
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
