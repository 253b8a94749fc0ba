"""Each shared kernel is compiled once per machine: every path that calls it passes the same argument
types. numba compiles a kernel once per tuple of argument types, and a read-only array is another
type than a writable one: a path that passed the history's read-only values, read-only PyTensor
inputs or read-only target breaks compiled the kernel a second time (15-60 s of CPU each on an
empty cache, in the user's process).

Reference: the convention written in odeinfer.solve.abi (output times read-only, as Problem makes
them; every other array writable), checked on the kernels numba actually compiled."""

import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import numpy as np, odeinfer as oi
    from odeinfer.solve import shared
    from odeinfer.solve.dde_adjoint import dde_loss_gradient, dde_vjp
    from odeinfer.bayes.dde_problem import DDEProblem

    def frozen(a):
        a = np.array(a, dtype=float)
        a.flags.writeable = False  # as PyTensor may hand its inputs over
        return a

    # ODE: the one-shot call, the prebuilt path, Rodas, the adjoint
    e = oi.zoo.get("lotka_volterra")
    prob = oi.Problem(e.model, e.t, x0=e.x0_array(), t0=e.t0)
    for gradient in (None, oi.Forward()):
        oi.solve(prob, e.params_array(), gradient=gradient)
        oi.solve(prob, frozen(e.params_array()), solver=oi.Rodas(), gradient=gradient)
    bound = oi.bind(oi.Problem(e.model, e.t, t0=e.t0), gradient=oi.Forward())
    bound(e.params_array(), e.x0_array())
    bound = oi.bind(oi.Problem(e.model, e.t, t0=e.t0), gradient=oi.Adjoint())
    bound(e.params_array(), e.x0_array(), np.ones((len(e.t), 2)))

    # DDE: a family history and a data-driven one, with and without history parameters
    z = oi.zoo.get("logistic_delay")
    piecewise = oi.History.from_function(lambda s: [2.0 + 0.5 * np.sin(3.0 * s)], -3.0, 0.0, n_points=31)
    target = oi.History.from_function(lambda s: [1.0 + 0.1 * s], 0.0, 8.0, n_points=41)
    for history in (z.history, piecewise):
        p = oi.Problem(z.model, z.t, history=history, t0=z.t0)
        oi.solve(p, z.params_array(), gradient=oi.Forward())
        oi.bind(p, gradient=oi.Forward())(z.params_array())
        oi.bind(p)(z.params_array())
        dde_vjp(z.model, z.params_array(), history, z.t, np.ones((len(z.t), 1)), t0=z.t0)
        dde_loss_gradient(z.model, z.params_array(), history, target, 8.0, t0=z.t0)
    oi.bind(oi.Problem(z.model, z.t, history=z.history, t0=z.t0))(z.params_array(), z.history_params_array())
    problem = DDEProblem(z.model, z.t, z.history, z.t0)
    problem.python_solve(frozen(z.params_array()), frozen(z.history_params_array()))
    problem.python_vjp(frozen(z.params_array()), frozen(z.history_params_array()),
                       frozen(np.ones((len(z.t), 1))))

    module = shared.shared_module()
    for name in sorted(vars(module)):
        kernel = getattr(module, name)
        if name.startswith("ptr_") and hasattr(kernel, "signatures") and len(kernel.signatures) > 1:
            a, b = kernel.signatures[:2]
            print(name, [(i, str(x), str(y)) for i, (x, y) in enumerate(zip(a, b)) if x != y])
    print("done")
""")


def test_every_path_calls_each_shared_kernel_with_one_signature():
    env = dict(os.environ, ODEINFER_TIERED="shared")  # every solve answers from the shared kernels
    res = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines() == ["done"], res.stdout  # kernels compiled twice, and where they differ
