# The backward idioms: a differentiated two-conv CNN step, after tape-fuse, has conv/pool ops and
# their backward ops, and no unfold, fold or crop left.
# RUN: %python %s > %t.mlir
# RUN: tapeml-opt %t.mlir -p 'tape-fuse{report=true}' 2>%t.report | filecheck %s
# RUN: filecheck %s --check-prefix=REPORT --input-file=%t.report

import tapeml
from tapeml import Spec, nn, ops
from tapeml.transforms.differentiate import differentiate


def loss(params, x, labels):
    h = nn.max_pool2d(ops.relu(nn.conv2d(x, params["c1"]["W"], params["c1"]["b"], padding=1)), 2)
    h = nn.avg_pool2d(ops.relu(nn.conv2d(h, params["c2"]["W"], params["c2"]["b"], padding=1)), 2)
    logits = nn.linear(params["out"], ops.reshape(h, (2, 8 * 2 * 2)))
    return nn.softmax_cross_entropy(logits, labels)


params = {"c1": {"W": Spec((4, 1, 3, 3)), "b": Spec((4,))},
          "c2": {"W": Spec((8, 4, 3, 3)), "b": Spec((8,))},
          "out": {"W": Spec((32, 10)), "b": Spec((10,))}}
program = tapeml.trace(loss, params, Spec((2, 1, 8, 8)), Spec((2, 10)))
differentiate(program.function, wrt=tuple(range(6)))
print(program)

# CHECK:     tape.conv2d %x, %params.c1.W stride = [1, 1] padding = [1, 1, 1, 1] dilation = [1, 1] groups = 1
# CHECK:     tape.maxpool2d %{{[0-9]+}} kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0]
# CHECK:     tape.conv2d %{{[0-9]+}}, %params.c2.W stride = [1, 1] padding = [1, 1, 1, 1]
# CHECK:     tape.avgpool2d %{{[0-9]+}} kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0]
# CHECK:     tape.avgpool2d_backward %{{[0-9]+}} kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<2x8x2x2xf32> -> tensor<2x8x4x4xf32>
# CHECK-DAG: tape.conv2d_backward_weight %{{[0-9]+}}, %{{[0-9]+}} stride = [1, 1] padding = [1, 1, 1, 1] dilation = [1, 1] groups = 1 : tensor<2x4x4x4xf32>, tensor<2x8x4x4xf32> -> tensor<8x4x3x3xf32>
# CHECK-DAG: tape.conv2d_backward_input %{{[0-9]+}}, %params.c2.W stride = [1, 1] padding = [1, 1, 1, 1] dilation = [1, 1] groups = 1 : tensor<2x8x4x4xf32>, tensor<8x4x3x3xf32> -> tensor<2x4x4x4xf32>
# CHECK:     tape.maxpool2d_backward %{{[0-9]+}}, %{{[0-9]+}} kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32> -> tensor<2x4x8x8xf32>
# CHECK:     tape.conv2d_backward_weight %x, %{{[0-9]+}} stride = [1, 1] padding = [1, 1, 1, 1] dilation = [1, 1] groups = 1 : tensor<2x1x8x8xf32>, tensor<2x4x8x8xf32> -> tensor<4x1x3x3xf32>
# CHECK-NOT: tape.unfold
# CHECK-NOT: tape.fold
# CHECK-NOT: tape.pad
# CHECK:     func.return

# REPORT:      tape-fuse: 9 idioms raised, {{[0-9]+}} elementwise groups of {{[0-9]+}} ops
# REPORT-NEXT:   conv2d-backward-input          1
# REPORT-NEXT:   conv2d-backward-weight         2
# REPORT-NEXT:   maxpool2d-backward             1
# REPORT-NEXT:   avgpool2d-backward             1
# REPORT-NEXT:   conv2d-forward                 2
# REPORT-NEXT:   maxpool2d-forward              1
# REPORT-NEXT:   avgpool2d-forward              1
