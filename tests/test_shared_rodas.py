"""The shared Rodas kernels (odeinfer.solve.shared, kernels/pointer.py): a new stiff model's first
solves are answered by Rodas4 compiled once per machine, the model called through C callbacks
(kernels/cfuncs_rodas.py). They must give the bits of the model's own Rodas kernel.

References: the model's own kernel (equality), and Robertson's conservation law
y1 + y2 + y3 = 1 (accuracy, independent of any solver)."""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.solve import _inputs, shared
from odeinfer.solve.status import Info, Status

ZOO = ["lotka_volterra", "alpha_pinene", "fitzhugh_nagumo", "sir"]


def _run_both(cm, entry, sens):
    n, m = cm.n_states, cm.n_params
    k = n + m if sens else 0
    t = np.asarray(entry.t, float)
    p, x0 = entry.params_array(), entry.x0_array()
    out = []
    for kernel, lead in ((getattr(cm.module, "rodas_solve_sens" if sens else "rodas_solve"), ()),
                         (getattr(shared.shared_module(), "ptr_rodas_solve_sens" if sens else "ptr_rodas_solve"),
                          (shared.model_handle(cm, full=True),))):
        z = np.empty((t.size, n * (1 + k)))
        work = np.empty(cm.module.rodas_work_size(sens))
        info = np.zeros(6)
        flags = (True,) if sens else ()
        status = kernel(*lead, float(entry.t0), t, x0, p, *flags, 1e-8, 1e-10, 0.0, 100_000, z, work, info)
        out.append((status, z, info))
    return out


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.parametrize("sens", [False, True])
def test_shared_rodas_is_bitwise_equal_to_the_model_kernel(name, sens):
    entry = oi.zoo.get(name)
    cm = _inputs.compiled_model(entry.model)
    (s1, z1, i1), (s2, z2, i2) = _run_both(cm, entry, sens)
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(z1, z2)  # same arithmetic in the same order: not merely close
    assert np.array_equal(i1, i2)  # same steps, rejections, evaluations and LU decompositions


def test_a_rodas_solver_answers_from_the_shared_tier_and_conserves_mass():
    # ODEINFER_TIERED=shared (tests/conftest.py): a model nobody compiled answers from the shared kernel
    m = oi.Model.from_equations({"a": "-k1*a + k3*b*c", "b": "k1*a - k2*b*b - k3*b*c", "c": "k2*b*b"},
                                params=["k1", "k2", "k3"], name="robertson_shared_tier_test")
    t = np.geomspace(1e-4, 1e4, 30)
    prob = oi.Problem(m, t, x0=[1.0, 0.0, 0.0], t0=0.0)
    bound = oi.bind(prob, solver=oi.Rodas(rtol=1e-8, atol=1e-12), gradient=oi.Forward())
    sol = oi.solve(prob, [0.04, 3e7, 1e4], solver=oi.Rodas(rtol=1e-8, atol=1e-12), gradient=oi.Forward())
    assert bound.tier == "shared"
    assert sol.success
    assert np.max(np.abs(sol.y.sum(axis=1) - 1.0)) < 1e-7
    # d/dp of a conserved sum is zero: the sensitivities of the three states cancel
    assert np.max(np.abs(sol.sens.sum(axis=1)[:, :3])) < 1e-5
    assert int(bound.info[Info.N_LU]) > 0
