"""The odeinfer command line."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

from odeinfer.cli import main


def test_demo_prints_fit_summary(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Lotka-Volterra" in out and "42 observations" in out
    # independent check of the printed RMS log residuals: scipy DOP853 + the CSV read with numpy
    raw = np.genfromtxt(Path(__file__).parents[1] / "data" / "lynx_hare.csv", delimiter=",", names=True)
    a, b, g, d = 0.55, 0.028, 0.80, 0.024
    sol = solve_ivp(lambda t, z: [(a - b * z[1]) * z[0], (-g + d * z[0]) * z[1]], (0, 20), [33.96, 5.93],
                    t_eval=np.arange(21.0), method="DOP853", rtol=1e-10, atol=1e-10)
    for k, (state, col) in enumerate([("prey", "hare"), ("predator", "lynx")]):
        rms = np.sqrt(np.mean((np.log(raw[col]) - np.log(sol.y[k])) ** 2))
        printed = float(re.search(rf"{state}: RMS log residual ([0-9.]+)", out).group(1))
        assert abs(printed - rms) < 1e-3


def test_help_and_no_command():
    r = subprocess.run([sys.executable, "-m", "odeinfer.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "demo" in r.stdout
    r = subprocess.run([sys.executable, "-m", "odeinfer.cli"], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stdout
