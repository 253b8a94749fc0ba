"""Shared test settings: a per-session numba cache directory unless one is set; tests/ on sys.path."""

import os
import sys
import tempfile

# shared test helpers (tests/dde_reference.py: the independent DDE reference solver) import by name
sys.path.insert(0, os.path.dirname(__file__))

# Keep generated modules and numba machine code out of the user's cache, but share them
# across the whole test run (and across runs in CI, where the variable can be set).
os.environ.setdefault("ODEINFER_CACHE_DIR", os.path.join(tempfile.gettempdir(), "odeinfer-test-cache"))

# Adaptive Dormand-Prince solves of models whose own kernel is not compiled use the shared
# kernel, without background compilation (odeinfer.solve.shared): the same bits, and the suite
# does not compile every model's solver kernels on top of everything else; tests/test_tiered.py
# checks the two kernels against each other and tests the default mode.
os.environ.setdefault("ODEINFER_TIERED", "shared")

# The files that take longest on an empty cache (model kernels compiled per test, numba wrappers of the
# shared kernels per PyTensor graph, notebooks, NUTS), longest first. With ``--dist loadfile
# --no-loadscope-reorder`` (pyproject.toml) xdist hands a worker the next file of this order whenever
# its current file is nearly done (greedy list scheduling), so the long files start first and the
# short ones fill in at the end: no worker is left with a long file while the other idles. Order by the
# summed durations of each file's tests among the 60 slowest of a full run on empty caches (2 workers,
# loaded machine): test_tiered 495 s, test_shared_tier 353 s, test_notebooks 347 s, test_solve_api
# 182 s, test_bayes_op 145 s, test_bayes_sbc 133 s, test_bayes_dde 77 s, ... The other files keep their
# collection order after these.
LONGEST_FIRST = ("test_tiered.py", "test_shared_tier.py", "test_notebooks.py", "test_solve_api.py", "test_bayes_op.py",
                 "test_bayes_sbc.py", "test_bayes_dde.py", "test_solve_dopri.py", "test_dde_vjp.py",
                 "test_bayes_problem.py", "test_bayes_many.py", "test_oc_studies.py", "test_newton_family.py",
                 "test_problem.py")


def pytest_sessionstart(session):
    """In the run's main process only (not in xdist's workers): start compiling the shared solver kernels
    and their C entries in background processes (``oi.warmup``; a no-op for those already compiled), so the
    workers' first tests load them instead of each compiling the same kernels at the same time."""
    if hasattr(session.config, "workerinput"):
        return
    from odeinfer.solve.warmup import warmup

    warmup(wait=False)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept
