"""etbuild.quantize.schemes: the pt2e specs of each int8 scheme."""

from __future__ import annotations

import pytest
import torch

from etbuild.quantize import schemes


def test_static_quantizes_inputs_and_outputs_with_the_same_calibrated_spec() -> None:
    specs = schemes.specs(schemes.STATIC, per_channel=True)
    assert specs.static and specs.inputs is specs.output
    assert not specs.inputs.is_dynamic
    assert (specs.inputs.quant_min, specs.inputs.quant_max) == schemes.ACT_RANGE == (-128, 127)


@pytest.mark.parametrize("scheme", [schemes.DYNAMIC, schemes.INT4])
def test_dynamic_schemes_quantize_inputs_at_run_time_and_leave_outputs_float(scheme: str) -> None:
    specs = schemes.specs(scheme, per_channel=False)
    assert not specs.static and specs.output is None
    assert specs.inputs.is_dynamic


def test_weight_only_quantizes_only_weights() -> None:
    specs = schemes.specs(schemes.WEIGHT_ONLY, per_channel=True)
    assert specs.inputs is None and specs.output is None and not specs.static


def test_weights_are_symmetric_per_channel_or_per_tensor_in_a_narrow_range() -> None:
    channel = schemes.specs(schemes.STATIC, per_channel=True).weight
    tensor = schemes.specs(schemes.STATIC, per_channel=False).weight
    assert (channel.qscheme, channel.ch_axis) == (torch.per_channel_symmetric, 0)
    assert tensor.qscheme == torch.per_tensor_symmetric
    assert (channel.quant_min, channel.quant_max) == (tensor.quant_min, tensor.quant_max) == (-127, 127)


def test_an_unknown_scheme_lists_the_schemes() -> None:
    with pytest.raises(ValueError) as err:
        schemes.specs("int3", per_channel=True)
    assert str(err.value) == ("no pt2e specs for scheme 'int3'; expected one of int8-static, int8-dynamic, "
                              "int8-weight-only, int8-dynamic-int4-weight")
