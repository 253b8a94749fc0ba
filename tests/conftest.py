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
