"""Real problems (issues 14, 15): a PEtab problem whose right-hand side switches at estimated times
(Beer_MolBioSystems2014: ``lag = piecewise(0, time - tau < 0, 1)``, one ``tau`` per experiment).

Prints, for the problem's YAML file (``--yaml``; e.g. the Benchmark-Models-PEtab collection's
``Beer_MolBioSystems2014/Beer_MolBioSystems2014.yaml``):

1. the NLL at the nominal parameters (Rodas, rtol 1e-10, atol 1e-12) against ``--reference``
   (default AMICI's published log-likelihood for Beer, 58622.9145631413, with the sign of an NLL);
2. the warm NLL + gradient: at a fixed point (the segments, cut at the switch times, cached), with
   ``grad=False``, and at new points whose switch times all moved (segments cut and bound anew), and
   the time of cutting and binding every run's segments alone;
3. the exact gradient at a perturbed point (nominal + 0.05 N(0, 1) on the estimation scale, seed 7)
   against central differences of the NLL (step ``--step``) along each switch-time parameter
   (``--switch-prefix``) and 4 random unit directions (seeds 100..103).

    python benchmarks/bench_switches.py --yaml <collection>/Beer_MolBioSystems2014/Beer_MolBioSystems2014.yaml
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import odeinfer as oi


def _times(fn, n=3):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--yaml", required=True)
    ap.add_argument("--reference", type=float, default=-58622.9145631413, help="the NLL at the nominal parameters")
    ap.add_argument("--step", type=float, default=1e-4, help="central differences' step on the estimation scale")
    ap.add_argument("--switch-prefix", default="tau", help="the switch-time parameters' names start with this")
    ap.add_argument("--no-check", action="store_true", help="skip the central differences")
    a = ap.parse_args()
    pp = oi.petab.load(a.yaml)
    print(pp)
    t = time.perf_counter()
    obj = pp.objective(oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=200_000))
    print(f"objective built in {time.perf_counter() - t:.2f} s; time switches per run: "
          f"{sorted({len(r.switch_ids) for r in obj.runs})}")
    u0, est = pp.u_nominal, pp.problem.estimated
    t = time.perf_counter()
    ev = obj(u0)
    print(f"first NLL + gradient {time.perf_counter() - t:.2f} s")
    assert ev.ok, ev.failure
    print(f"NLL at nominal {ev.nll:.10f}; reference {a.reference:.10f}; difference {ev.nll - a.reference:.3e}")
    fixed = _times(lambda: obj(u0))
    nll_only = _times(lambda: obj(u0, grad=False))
    rng = np.random.default_rng(1)
    isw = [i for i, n in enumerate(est) if n.startswith(a.switch_prefix)]
    moved = []
    for _ in range(3):
        u = u0.copy()
        u[isw] += 1e-3 * rng.standard_normal(len(isw))
        moved.append(u)
    fresh = [_times(lambda u=u: obj(u), 1)[0] for u in moved]
    leaders = [r for r in obj.runs if r.share is None]
    t = time.perf_counter()
    for r in leaders:
        v, _ = r.mapping(obj.natural(moved[-1]))
        p = v[:r.n_p].copy()
        r._cut([s for s in r.obj_switches.at(p, r.switch_ids) if s[1] > r.t0 and s[2] < r.t_end])
    recut = time.perf_counter() - t
    fmt = (lambda xs: ", ".join(f"{x:.3f}" for x in xs))
    print(f"warm NLL + gradient, fixed point (segments cached): {fmt(fixed)} s")
    print(f"warm NLL only (grad=False, same solves): {fmt(nll_only)} s")
    print(f"warm NLL + gradient, every switch time moved (segments cut anew): {fmt(fresh)} s")
    print(f"cutting and binding the segments of all {len(leaders)} runs alone: {recut * 1e3:.1f} ms "
          f"({sum(len(r.segments) for r in leaders)} segments)")
    if a.no_check:
        return
    up = u0 + 0.05 * np.random.default_rng(7).standard_normal(u0.size)
    ev = obj(up)
    assert ev.ok, ev.failure
    print(f"perturbed point: NLL {ev.nll:.8f}, |grad| {np.linalg.norm(ev.grad):.4g}; central step {a.step:g}")
    dirs = [(est[i], np.eye(u0.size)[i]) for i in isw]
    for k in range(4):
        d = np.random.default_rng(100 + k).standard_normal(u0.size)
        dirs.append((f"random direction {k}", d / np.linalg.norm(d)))
    worst_rel, worst_abs = 0.0, 0.0
    for name, d in dirs:
        fd = (obj(up + a.step * d, grad=False).nll - obj(up - a.step * d, grad=False).nll) / (2 * a.step)
        exact = float(ev.grad @ d)
        worst_rel = max(worst_rel, abs(fd - exact) / abs(exact))
        worst_abs = max(worst_abs, abs(fd - exact))
        print(f"{name:28s} exact {exact: .10e}  central {fd: .10e}  difference {fd - exact: .2e}")
    print(f"worst relative difference {worst_rel:.2e}, worst absolute {worst_abs:.2e}")


if __name__ == "__main__":
    main()
