"""Streaming benchmark: StochasticGradient / StochasticNewton on 10^7 Lorenz time points.

The series is generated with odeinfer's solver (Dormand-Prince, rtol 1e-8, output every
``dt``), plus Gaussian noise, and written to a temporary ``.npy`` file (columns t, x1, x2, x3).
Each estimator then runs in a fresh subprocess that opens the file with
``np.load(..., mmap_mode="r")`` and calls ``fit_stream`` on it; the subprocess reports the
fit's wall time and its peak resident memory (``VmHWM`` of ``/proc/self/status``, the high-water
mark of this process's own address space, which counts the pages of the memory map it touched;
``ru_maxrss`` is not used because Linux carries the parent's peak into it across fork/exec).
The data are generated in another subprocess, so no process inherits a large footprint. A warm-up fit on a short series
first loads the cached numba kernels, so the timing excludes compilation.

The fit's time includes its final pass at the estimate, which computes the delta-method covariance
through the observations (``odeinfer.estimators._noise_cov``). After the fit, the child also times
that pass alone and a plain normal-equations pass (``J^T J``, ``J^T E``) at the estimate, so the
covariance's extra cost is printed as their difference.

Usage::

    python benchmarks/bench_streaming.py [--n 10000000] [--dt 0.001] [--sigma 0.01]
                                         [--batch 100000] [--epochs 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

_ESTIMATORS = {
    "sgd": "StochasticGradient(derivative='forward', batch_size={batch}, max_epochs={epochs})",
    "snr": "StochasticNewton(derivative='forward', batch_size={batch}, max_epochs={epochs})",
    "nr": "NewtonRaphson(derivative='forward', damping='none')",
}


def generate(path, n, dt, sigma, seed=0, block=1_000_000):
    """Write an (n, 4) float64 .npy (t, x1, x2, x3) of the seed-000 Lorenz system plus noise."""
    import odeinfer as oi

    z = oi.zoo.lorenz()
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, 4))
    rng = np.random.default_rng(seed)
    x0 = z.x0_array()
    t0 = 0.0
    for s in range(0, n, block):  # solve block by block (restarting at the last state) to bound memory
        m = min(block, n - s)
        t = t0 + dt * np.arange(m + 1)
        sol = oi.solve(oi.Problem(z.model, t, x0=x0), z.params_array(),
                       solver=oi.Dopri5(rtol=1e-8, atol=1e-10, max_steps=10**8))
        out[s:s + m, 0] = (s + np.arange(m)) * dt
        out[s:s + m, 1:] = sol.y[:m] + sigma * rng.standard_normal((m, 3))
        x0, t0 = sol.y[m], t[m]
    out.flush()
    del out


def _peak_kb():
    """Peak resident set size of this process in kB (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def child(path, which, batch, epochs, chunk):
    """Run one streamed fit and print a JSON line (time, memory, estimate)."""
    import odeinfer as oi
    from odeinfer.estimators.newton import NewtonRaphson, StochasticGradient, StochasticNewton  # noqa: F401

    z = oi.zoo.lorenz()
    est = eval(_ESTIMATORS[which].format(batch=batch, epochs=epochs))  # our own fixed strings only
    warm = np.load(path, mmap_mode="r")[:5000]
    type(est)(**{**est.config(), **({"batch_size": 1000} if which != "nr" else {})}).fit_stream(
        z.model, np.array(warm), start=[1.0, 1.0, 1.0], **({"rng": 0} if which != "nr" else {}))
    rss0 = _peak_kb()
    t0 = time.perf_counter()
    kw = {"rng": 0} if which != "nr" else {}
    e = est.fit_stream(z.model, np.load(path, mmap_mode="r"), start=[1.0, 1.0, 1.0], chunk_size=chunk, **kw)
    elapsed = time.perf_counter() - t0
    rss = _peak_kb()
    passes = _time_passes(est, z.model, path, chunk, e.values)
    print(json.dumps({"estimator": type(est).__name__, "seconds": elapsed, "maxrss_mb": rss / 1024,
                      "maxrss_before_fit_mb": rss0 / 1024, "values": e.values.tolist(),
                      "bse": e.bse.tolist(), "status": e.status, "message": e.message, "n_iter": e.n_iter,
                      "nobs": e.nobs, "cov_type": e.extras["cov_type"], **passes}))


def _time_passes(est, model, path, chunk, theta):
    """Seconds of one plain normal-equations pass and of the delta-method pass at ``theta``."""
    from odeinfer.estimators import newton as nw
    from odeinfer.estimators.streaming import as_row_source

    problem = nw._problem_stream(est, model, None, None)
    acc = nw._accumulator(problem)
    src = as_row_source(np.load(path, mmap_mode="r"), nw._scheme(est), model.states, None, chunk)
    t0 = time.perf_counter()
    acc.evaluate(src.blocks(), np.asarray(theta))
    t1 = time.perf_counter()
    nw._delta_method_pass(est, problem, src, acc, np.asarray(theta), False)
    return {"plain_pass_s": t1 - t0, "cov_pass_s": time.perf_counter() - t1}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--dt", type=float, default=0.001)
    ap.add_argument("--sigma", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=100_000)
    ap.add_argument("--keep", default=None, help="directory for the .npy (default: a temporary one, deleted)")
    ap.add_argument("--estimators", default="sgd,snr,nr")
    ap.add_argument("--child", nargs=2, metavar=("PATH", "WHICH"), help=argparse.SUPPRESS)
    ap.add_argument("--generate", metavar="PATH", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.generate:
        generate(a.generate, a.n, a.dt, a.sigma)
        return
    if a.child:
        child(a.child[0], a.child[1], a.batch, a.epochs, a.chunk)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = a.keep or tmp
        path = os.path.join(directory, f"lorenz_{a.n}_{a.dt}_{a.sigma}.npy")
        if not os.path.exists(path):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--generate", path, "--n", str(a.n), "--dt", str(a.dt),
                            "--sigma", str(a.sigma)], check=True)
            print(f"generated {a.n} points (dt {a.dt}, sigma {a.sigma}) in {time.perf_counter() - t0:.1f} s: "
                  f"{os.path.getsize(path) / 2**20:.0f} MB")
        for which in a.estimators.split(","):
            cmd = [sys.executable, __file__, "--child", path, which, "--batch", str(a.batch),
                   "--epochs", str(a.epochs), "--chunk", str(a.chunk)]
            res = subprocess.run(cmd, capture_output=True, text=True, check=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"{r['estimator']:>20}: {r['seconds']:6.2f} s, peak RSS {r['maxrss_mb']:6.0f} MB "
                  f"(before fit {r['maxrss_before_fit_mb']:.0f} MB), {r['n_iter']} steps, {r['status']} "
                  f"({r['message']}); a = {np.round(r['values'], 4).tolist()}, bse = "
                  f"{[float(f'{b:.3g}') for b in r['bse']]}, nobs = {r['nobs']}")
            print(f"{'':>22}covariance: {r['cov_type'].split(' (')[0]}; final pass {r['cov_pass_s']:.2f} s "
                  f"vs plain normal-equations pass {r['plain_pass_s']:.2f} s "
                  f"(+{r['cov_pass_s'] - r['plain_pass_s']:.2f} s)")


if __name__ == "__main__":
    main()
