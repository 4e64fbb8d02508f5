"""Print the tape of a small CNN's loss, differentiated: the program tape-fuse works on.

    python examples/cnn_step.py | tapeml-opt -p 'tape-fuse{report=true}'

The CNN: conv3x3 (4 ch, pad 1) + relu + maxpool2, conv3x3 (8 ch, pad 1) + relu + avgpool2, a
linear layer to 10 classes, softmax cross-entropy; batch 2 of 1x8x8 images. The gradient is
taken with respect to all six parameters.
"""

from __future__ import annotations

import tapeml
from tapeml import Spec, nn, ops
from tapeml.transforms.differentiate import differentiate


def loss(params, x, labels):
    h = nn.max_pool2d(ops.relu(nn.conv2d(x, params["c1"]["W"], params["c1"]["b"], padding=1)), 2)
    h = nn.avg_pool2d(ops.relu(nn.conv2d(h, params["c2"]["W"], params["c2"]["b"], padding=1)), 2)
    logits = nn.linear(params["out"], ops.reshape(h, (h.shape[0], -1)))
    return nn.softmax_cross_entropy(logits, labels)


PARAMS = {"c1": {"W": Spec((4, 1, 3, 3)), "b": Spec((4,))},
          "c2": {"W": Spec((8, 4, 3, 3)), "b": Spec((8,))},
          "out": {"W": Spec((32, 10)), "b": Spec((10,))}}


def step_program() -> tapeml.Program:
    program = tapeml.trace(loss, PARAMS, Spec((2, 1, 8, 8)), Spec((2, 10)))
    differentiate(program.function, wrt=tuple(range(6)))  # the parameters, not x or labels
    return program


if __name__ == "__main__":
    print(step_program())
