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

# The files that take longest on an empty cache (model kernels compiled per test, notebooks, NUTS),
# longest first: they start first, so that with ``--dist loadfile --no-loadscope-reorder``
# (pyproject.toml) no worker is left with one of them at the end while the others idle. The other
# files keep their collection order after these.
LONGEST_FIRST = ("test_notebooks.py", "test_tiered.py", "test_shared_tier.py", "test_bayes_many.py",
                 "test_bayes_problem.py", "test_oc_studies.py", "test_gradient_matching.py", "test_newton_family.py",
                 "test_dde_vjp.py", "test_bayes_op.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept
