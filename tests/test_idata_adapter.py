"""bayes/_idata, the one adapter to ArviZ's data: the same answers for ArviZ 0.x's InferenceData and
for the xarray DataTree that ArviZ 1.x uses (built here from the same arrays), so that a move to
ArviZ 1.x changes this module only."""

import numpy as np
import pytest
import xarray as xr

from odeinfer.bayes import _idata

R = np.random.default_rng(0)
A = R.normal(1.0, 0.1, (2, 50))
X0 = R.normal(5.0, 0.2, (2, 50, 2))
DIV = np.zeros((2, 50), bool)
DIV[1, 3] = True


def _inference_data():
    import arviz as az

    return az.from_dict(posterior={"a": A, "x0": X0}, sample_stats={"diverging": DIV},
                        dims={"x0": ["state"]}, coords={"state": ["prey", "predator"]})


def _data_tree():
    post = xr.Dataset({"a": (("chain", "draw"), A), "x0": (("chain", "draw", "state"), X0)},
                      coords={"state": ["prey", "predator"]})
    stats = xr.Dataset({"diverging": (("chain", "draw"), DIV)})
    return xr.DataTree.from_dict({"posterior": post, "sample_stats": stats})


@pytest.mark.parametrize("make", [_inference_data, _data_tree])
def test_same_answers_for_both_structures(make):
    idata = make()
    assert {"posterior", "sample_stats"} <= set(_idata.groups(idata))
    post = _idata.posterior(idata)
    assert isinstance(post, xr.Dataset) and post.sizes["chain"] == 2 and post.sizes["draw"] == 50
    np.testing.assert_array_equal(_idata.draws_array(idata, "a"), A.reshape(-1))
    assert _idata.draws_array(idata, "x0").shape == (100, 2)
    assert _idata.sample_stat(idata, ("maxdepth_reached", "diverging")).sum() == 1
    assert _idata.sample_stat(idata, "energy") is None
    assert _idata.group(idata, "posterior_predictive") is None
    _idata.set_attrs(idata, sampling_time=1.5)
    assert _idata.attrs(idata)["sampling_time"] == 1.5
    assert float(_idata.rhat(post)["a"]) == pytest.approx(float(_idata.rhat(_inference_data().posterior)["a"]))


def test_not_inference_data():
    assert _idata.groups({"a": 1}) == [] and _idata.posterior(None) is None and _idata.attrs(object()) == {}


def test_hdi_and_summary():
    x = -np.log1p(-(np.arange(20000) + 0.5) / 20000)  # Exp(1) quantiles: the 50% HDI is [0, log 2]
    np.testing.assert_allclose(_idata.hdi(x, 0.5), [0.0, np.log(2.0)], atol=2e-3)
    table = _idata.summary(_inference_data(), var_names=["a"])
    assert table.loc["a", "mean"] == pytest.approx(A.mean(), abs=1e-3)  # ArviZ rounds to 3 decimals
