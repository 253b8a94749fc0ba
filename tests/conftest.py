"""Shared test settings: a per-session numba cache directory unless one is set; tests/ on sys.path."""

import os
import sys
import tempfile

# shared test helpers (tests/dde_reference.py: the independent DDE reference solver) import by name
sys.path.insert(0, os.path.dirname(__file__))

# Keep generated modules and numba machine code out of the user's cache, but share them
# across the whole test run (and across runs in CI, where the variable can be set).
os.environ.setdefault("ODEINFER_CACHE_DIR", os.path.join(tempfile.gettempdir(), "odeinfer-test-cache"))

# Solvers compile each model's own kernel on first use (no background compilation processes,
# which would compete with the test workers for the two cores); tests/test_tiered.py turns the
# default tiered first solves back on where it tests them.
os.environ.setdefault("ODEINFER_TIERED", "0")
