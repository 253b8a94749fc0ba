"""Quiet dependencies: ArviZ 0.23's import banner (a FutureWarning about its refactor, printed at
most once a day, remembered in a stamp file under the user cache) is silenced by odeinfer, and
nothing else is.

Each case runs in a fresh Python process with its own empty cache directory, so the banner is
due; the control run (plain ``import arviz``) shows that it is.
"""

import os
import subprocess
import sys
import textwrap

BANNER = "ArviZ is undergoing a major refactor"


def _run(tmp_path, code):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONWARNINGS": "default"}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def test_control_plain_arviz_import_prints_the_banner(tmp_path):
    assert BANNER in _run(tmp_path, "import arviz").stderr


def test_odeinfer_silences_the_banner_and_nothing_else(tmp_path):
    """odeinfer.bayes installs the filter before PyMC (which imports ArviZ) is imported."""
    out = _run(tmp_path, """
        import sys, warnings
        import odeinfer.bayes
        import pymc
        assert "arviz" in sys.modules
        warnings.warn("another future change", FutureWarning)
        warnings.warn_explicit("another arviz warning", FutureWarning, "arviz/x.py", 1, module="arviz")
        warnings.warn_explicit("ArviZ is undergoing a major refactor", UserWarning, "arviz/x.py", 1, module="arviz")
        """)
    assert "FutureWarning: \nArviZ is undergoing" not in out.stderr
    assert "another future change" in out.stderr
    assert "another arviz warning" in out.stderr
    assert "UserWarning: ArviZ is undergoing" in out.stderr  # only the FutureWarning is filtered
