"""``python -m odeinfer.studies coverage``: run the coverage panel and write its report.

One invocation with the defaults runs the whole panel (every setting, applicable estimator and
interval method at 500 replicates, 200 bootstrap refits per replicate) and rewrites the block of
``--write``; blocks already in the cache are reused, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def _commit():
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _csv(choices):
    def parse(text):
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {sorted(choices)}")
        return items
    return parse


def main(argv=None):
    from . import coverage as cv

    ap = argparse.ArgumentParser(prog="python -m odeinfer.studies", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("coverage", help="run the coverage panel (resumable) and write its report")
    c.add_argument("--settings", type=_csv(cv.SETTINGS), default=list(cv.SETTINGS))
    c.add_argument("--estimators", type=_csv(cv.ESTIMATORS), default=list(cv.ESTIMATORS))
    c.add_argument("--groups", type=_csv(cv.GROUPS), default=list(cv.GROUPS),
                   help="interval methods to run: wald, profile, bootstrap (percentile and studentized)")
    c.add_argument("--reps", type=int, default=500, help="replicates per cell (rounded up to a multiple of %d)"
                   % cv.BLOCK)
    c.add_argument("--n-boot", type=int, default=200, help="bootstrap refits per replicate")
    c.add_argument("--n-jobs", type=int, default=1, help="local worker processes (-1: all cores)")
    c.add_argument("--scheduler", default=None, help="address of a Dask scheduler to run the blocks on")
    c.add_argument("--cache-dir", default=None, help="study cache (default $ODEINFER_CACHE_DIR/studies)")
    c.add_argument("--write", default=None, help="markdown file whose panel block is rewritten")
    c.add_argument("--report-only", action="store_true", help="write the report from the cache, run nothing")
    c.add_argument("--merge", action="store_true",
                   help="with --write: keep the rows of the file's block for the cells this cache has not run "
                        "(each row then names its code version); without it the block is rewritten from the cache")
    c.add_argument("--commit", default=None,
                   help="the commit the cells were computed at (default: the checkout's HEAD)")
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--resummarise", default=None, metavar="CODE",
                   help="with --report-only: rebuild the summaries of the cells finished under source hash CODE "
                        "from their cached frames with this code (frames are read, never recomputed) and report them")
    a = ap.parse_args(argv)

    import odeinfer

    from .cache import code_key

    cache = a.cache_dir or cv.default_cache()
    code = code_key(odeinfer)
    executor, pool, client = None, None, None
    if not a.report_only:
        if a.scheduler:
            from dask.distributed import Client

            client = Client(a.scheduler)
            executor = client.get_executor()
        elif a.n_jobs != 1:
            import multiprocessing
            import os
            from concurrent.futures import ProcessPoolExecutor

            n = (os.cpu_count() or 1) if a.n_jobs == -1 else a.n_jobs
            executor = pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
        try:
            for key in a.settings:
                for est in a.estimators:
                    if cv.applies(cv.SETTINGS[key], est) is not None:
                        continue
                    for group in a.groups:
                        print(f"{key} {est} {group} R={a.reps}", file=sys.stderr, flush=True)
                        frame, code = cv.run_cell(key, est, group, a.reps, n_boot=a.n_boot, cache_dir=cache,
                                                  executor=executor, progress=not a.no_progress)
                        summary = cv.summarise(frame, cv.GROUPS[group])
                        cv.record(cache, code, key, est, group, summary, a.n_boot)
        finally:
            if pool is not None:
                pool.shutdown()
            if client is not None:
                client.close()
    previous = None
    if a.merge:
        if not a.write:
            ap.error("--merge needs --write (the file whose block is merged)")
        previous = cv.read_block(a.write)
    if a.resummarise:
        if not a.report_only:
            ap.error("--resummarise needs --report-only")
        cv.resummarise(cache, a.resummarise)
        text = cv.report(cache, a.resummarise, a.commit or _commit(), summarised_by=code, previous=previous)
    else:
        text = cv.report(cache, code, a.commit or _commit(), previous=previous)
    if a.write:
        cv.write_report(text, a.write)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
