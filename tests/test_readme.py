"""The README's ten-line example runs and recovers the parameters it simulated from."""

import re
from pathlib import Path

import numpy as np


def test_readme_example_runs():
    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"## Ten lines.*?```python\n(.*?)```", text, re.S).group(1)
    ns = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - our own README
    fit = ns["fit"]
    assert fit.status == "converged"
    truth = [0.55, 0.028, 0.80, 0.024, 34.0, 5.9]  # the values the example simulates from
    assert np.all(np.abs(fit.values - truth) < 4 * fit.bse.to_numpy())
    prof = fit.conf_int(method="profile")
    assert np.all(prof["lower"] < fit.values) and np.all(fit.values < prof["upper"])
