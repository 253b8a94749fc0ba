"""Warm wall time of one fit of the matching estimators (OrthogonalConditions, GradientMatching and the Newton
family with their defaults), median over 5 simulated data sets after one warm-up fit.

Each fit includes its trajectory check (one ODE solve from the smoothed first observation) and, for
the Newton family, the smoothing-spline derivatives (``derivative="auto"``). Compare two versions of the
package with ``PYTHONPATH`` (run from outside the repository, so the checkout is not imported instead):

    python benchmarks/bench_matching_fits.py
    PYTHONPATH=<unpacked git archive of another commit> python <repo>/benchmarks/bench_matching_fits.py
"""

import os
import time
import warnings

import numpy as np

os.environ.setdefault("ODEINFER_TIERED", "shared")  # the shared solver kernels: no per-model compile
warnings.simplefilter("ignore")  # the estimators' coverage and bias warnings

import odeinfer as oi  # noqa: E402

NEWTON = ("NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient")


def main():
    print(f"odeinfer from {os.path.dirname(oi.__file__)}")
    cases = {"alpha-pinene n = 200, sd 3": (oi.zoo.alpha_pinene(), np.linspace(0.0, 100.0, 201)[1:], 3.0),
             "Lorenz n = 201, sd 1.41": (oi.zoo.get("lorenz"), None, np.sqrt(2.0))}
    for label, (z, t, sd) in cases.items():
        t = z.t if t is None else t
        datas = [oi.simulate(z.model, z.params, z.x0, t, t0=0.0, noise=sd, rng=s).data for s in range(6)]
        for name in ("OrthogonalConditions", "GradientMatching", *NEWTON):
            est = getattr(oi, name)()
            kw = {"start": z.params} if name in NEWTON else {}
            est.fit(z.model, datas[0], **kw)
            times = []
            for d in datas[1:]:
                start = time.perf_counter()
                est.fit(z.model, d, **kw)
                times.append(time.perf_counter() - start)
            print(f"{label:28s} {name:22s} median {np.median(times) * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
