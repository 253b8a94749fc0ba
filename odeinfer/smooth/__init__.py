"""Nonparametric proxies (regression B-splines with GCV) and test functions for matching estimators."""

from odeinfer.smooth.splines import SplineFit, SplineProxy, SplineSmoother, basis_matrix, uniform_knots
from odeinfer.smooth.testfunctions import TestFunctions, boundary_function

__all__ = ["SplineSmoother", "SplineProxy", "SplineFit", "TestFunctions", "boundary_function",
           "basis_matrix", "uniform_knots"]
