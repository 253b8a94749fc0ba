"""The kernels' calling convention is written twice (the kernel files cannot import Python
modules): the Python side's names (odeinfer.solve.status) must agree with every generated
module's constants."""

from odeinfer import zoo
from odeinfer.solve.status import DDE_INFO_SIZE, INFO_SIZE, Info, Status


def test_ode_kernels_agree_with_status_and_info():
    module = zoo.get("lotka_volterra").model.compile().module
    for status in Status:
        assert getattr(module, f"ST_{status.name}") == status.value
    for entry in (Info.T_REACHED, Info.N_STEPS, Info.N_REJECTED, Info.N_RHS, Info.H_NEXT, Info.N_LU):
        assert getattr(module, f"INFO_{entry.name}") == entry.value
    assert module.INFO_SIZE == INFO_SIZE


def test_delay_kernels_agree_with_status_and_info():
    module = zoo.get("logistic_delay").model.compile().module
    for status in Status:
        assert getattr(module, f"ST_{status.name}") == status.value
    for entry in (Info.T_REACHED, Info.N_STEPS, Info.N_REJECTED, Info.N_RHS):
        assert getattr(module, f"INFO_{entry.name}") == entry.value
    assert module.DDE_INFO_N_STORED == Info.N_STORED
    assert module.DDE_INFO_BUF_FULL == Info.BUF_FULL
    assert module.DDE_INFO_SIZE == DDE_INFO_SIZE
