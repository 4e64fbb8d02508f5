"""The 2-D window ops on NCHW tensors: `tape.conv2d`, `tape.maxpool2d` and `tape.avgpool2d`, and
their backward ops (the convolution's input and weight cotangents, the pools' input cotangents),
each stating its shape rule through its forward op's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure

from tapeml.dialects.base import Int, IntList, TapeOp
from tapeml.dialects.tape.types import (
    check,
    check_ints,
    float_tensor,
    same_element,
    tensor_type,
    window_count,
)

__all__ = [
    "AvgPool2dBackwardOp",
    "AvgPool2dOp",
    "Conv2dBackwardInputOp",
    "Conv2dBackwardWeightOp",
    "Conv2dOp",
    "MaxPool2dBackwardOp",
    "MaxPool2dOp",
]


def _rank4(op: str, t: Attribute, role: str, layout: str) -> tuple[int, ...]:
    t = float_tensor(op, t, role)
    check(t.get_num_dims() == 4, op, lambda: f"{role} must be rank 4 ({layout}), got {t}")
    return t.get_shape()


def _padded_windows(op: str, hw: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int], where: TensorType) -> list:
    check_ints(op, "stride", stride, 2, 1)
    check_ints(op, "padding", padding, 4, 0)
    check_ints(op, "dilation", dilation, 2, 1)
    padded = [hw[0] + padding[0] + padding[2], hw[1] + padding[1] + padding[3]]
    out = [window_count(*a) for a in zip(padded, kernel, stride, dilation, strict=True)]
    check(all(o >= 1 for o in out), op,
          lambda: f"window {list(kernel)} (dilation {list(dilation)}) does not fit in the padded "
          f"spatial dims {padded} of {where}")
    return out


@irdl_op_definition
class Conv2dOp(TapeOp):
    """2-D cross-correlation, NCHW input, OIHW weight -> NOHW. `padding` is
    [top, left, bottom, right] (zeros); each of `groups` groups of C/groups input channels feeds
    O/groups output channels."""

    name = "tape.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    stride = IntList.prop()
    padding = IntList.prop()
    dilation = IntList.prop()
    groups = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("stride"), IntList("padding"), IntList("dilation"), Int("groups"))

    @classmethod
    def infer(cls, input: Attribute, weight: Attribute, *, stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], groups: int) -> Attribute:
        n, c, h, w = _rank4(cls.name, input, "input", "N, C, H, W")
        o, cg, kh, kw = _rank4(cls.name, weight, "weight", "O, C/groups, KH, KW")
        same_element(cls.name, [input, weight])
        check(groups >= 1 and c % groups == 0 and o % groups == 0, cls.name,
              lambda: f"groups={groups} must divide the input channels of {input} and the output "
              f"channels of {weight}")
        check(cg == c // groups and kh >= 1 and kw >= 1, cls.name,
              lambda: f"weight {weight} must have C/groups = {c // groups} input channels "
              f"for {input}")
        oh, ow = _padded_windows(cls.name, (h, w), (kh, kw), stride, padding, dilation, input)
        return tensor_type([n, o, oh, ow], input.get_element_type())


class _Pool2d(TapeOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    padding = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("padding"))

    @classmethod
    def infer(cls, input: Attribute, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> Attribute:
        n, c, h, w = _rank4(cls.name, input, "input", "N, C, H, W")
        check_ints(cls.name, "kernel", kernel, 2, 1)
        oh, ow = _padded_windows(cls.name, (h, w), kernel, stride, padding, (1, 1), input)
        return tensor_type([n, c, oh, ow], input.get_element_type())


@irdl_op_definition
class MaxPool2dOp(_Pool2d):
    """Max over each window; padding counts as -inf. `padding` is [top, left, bottom, right]."""

    name = "tape.maxpool2d"


@irdl_op_definition
class AvgPool2dOp(_Pool2d):
    """Mean over each window, padding counted as zeros (the divisor is always kh * kw)."""

    name = "tape.avgpool2d"


# The backward ops of the convolution and the poolings: what their pullbacks produce, and what
# tape-fuse raises the pullbacks of their unfold idioms to. Each states its shape rule through
# the forward op's: its cotangent operand must have the forward result's type.


def _expect_forward(op: str, ct: Attribute, forward: Attribute, role: str) -> None:
    check(ct == forward, op,
          lambda: f"{role} {ct} must have the type of the forward result, {forward}")


@irdl_op_definition
class Conv2dBackwardInputOp(TapeOp):
    """The input cotangent of `tape.conv2d` (a transposed convolution): given the result's
    cotangent (N, O, OH, OW) and the weight (O, C/groups, KH, KW), the (N, C, H, W) cotangent of
    the input, H and W read off the result type."""

    name = "tape.conv2d_backward_input"
    cotangent = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    stride = IntList.prop()
    padding = IntList.prop()
    dilation = IntList.prop()
    groups = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("stride"), IntList("padding"), IntList("dilation"), Int("groups"))
    DERIVED: ClassVar = ("spatial",)

    @classmethod
    def infer(cls, cotangent: Attribute, weight: Attribute, *, stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], groups: int,
              spatial: Sequence[int]) -> Attribute:
        n, _, _, _ = _rank4(cls.name, cotangent, "cotangent", "N, O, OH, OW")
        _, cg, _, _ = _rank4(cls.name, weight, "weight", "O, C/groups, KH, KW")
        check(len(spatial) == 2, cls.name, lambda: f"spatial {list(spatial)} needs 2 dims")
        x = tensor_type([n, cg * groups, *spatial], weight.get_element_type())
        forward = Conv2dOp.infer(x, weight, stride=stride, padding=padding, dilation=dilation,
                                 groups=groups)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return x

    def derived_params(self) -> dict[str, Any]:
        return {"spatial": self.result.type.get_shape()[2:]}


@irdl_op_definition
class Conv2dBackwardWeightOp(TapeOp):
    """The weight cotangent of `tape.conv2d`: given the input (N, C, H, W) and the result's
    cotangent (N, O, OH, OW), the (O, C/groups, KH, KW) cotangent of the weight, the kernel size
    read off the result type."""

    name = "tape.conv2d_backward_weight"
    input = operand_def(TensorType)
    cotangent = operand_def(TensorType)
    result = result_def(TensorType)
    stride = IntList.prop()
    padding = IntList.prop()
    dilation = IntList.prop()
    groups = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("stride"), IntList("padding"), IntList("dilation"), Int("groups"))
    DERIVED: ClassVar = ("kernel",)

    @classmethod
    def infer(cls, input: Attribute, cotangent: Attribute, *, stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], groups: int,
              kernel: Sequence[int]) -> Attribute:
        _, c, _, _ = _rank4(cls.name, input, "input", "N, C, H, W")
        _, o, _, _ = _rank4(cls.name, cotangent, "cotangent", "N, O, OH, OW")
        check(len(kernel) == 2, cls.name, lambda: f"kernel {list(kernel)} needs 2 dims")
        check(groups >= 1 and c % groups == 0, cls.name,
              lambda: f"groups={groups} must divide the input channels of {input}")
        w = tensor_type([o, c // groups, *kernel], input.get_element_type())
        forward = Conv2dOp.infer(input, w, stride=stride, padding=padding, dilation=dilation,
                                 groups=groups)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return w

    def derived_params(self) -> dict[str, Any]:
        return {"kernel": self.result.type.get_shape()[2:]}


@irdl_op_definition
class MaxPool2dBackwardOp(TapeOp):
    """The input cotangent of `tape.maxpool2d`: each window's cotangent goes to the elements
    that attain its max, split evenly among ties."""

    name = "tape.maxpool2d_backward"
    input = operand_def(TensorType)
    cotangent = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    padding = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("padding"))

    @classmethod
    def infer(cls, input: Attribute, cotangent: Attribute, *, kernel: Sequence[int],
              stride: Sequence[int], padding: Sequence[int]) -> Attribute:
        forward = MaxPool2dOp.infer(input, kernel=kernel, stride=stride, padding=padding)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return input


@irdl_op_definition
class AvgPool2dBackwardOp(TapeOp):
    """The input cotangent of `tape.avgpool2d`: each window's cotangent, divided by kh * kw,
    added to every element of the window (H and W read off the result type)."""

    name = "tape.avgpool2d_backward"
    cotangent = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    padding = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("padding"))
    DERIVED: ClassVar = ("spatial",)

    @classmethod
    def infer(cls, cotangent: Attribute, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int], spatial: Sequence[int]) -> Attribute:
        n, c, _, _ = _rank4(cls.name, cotangent, "cotangent", "N, C, OH, OW")
        check(len(spatial) == 2, cls.name, lambda: f"spatial {list(spatial)} needs 2 dims")
        x = tensor_type([n, c, *spatial], cotangent.get_element_type())
        forward = AvgPool2dOp.infer(x, kernel=kernel, stride=stride, padding=padding)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return x

    def derived_params(self) -> dict[str, Any]:
        return {"spatial": self.result.type.get_shape()[2:]}
