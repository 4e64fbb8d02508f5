# A traced two-layer MLP prints as readable tape IR: named arguments, one op per primitive,
# the bias broadcasts explicit, the returned value named after its path.
# RUN: %python %s | filecheck %s

import numpy as np

import tapeml
from tapeml import nn

rng = np.random.default_rng(0)
params = nn.mlp_init(rng, [3, 5, 2])


def mlp(params, x):
    return nn.mlp(params, x, activation=tapeml.relu)


print(tapeml.trace(mlp, params, tapeml.Spec((4, 3))))

# CHECK:      func.func @mlp(%params.lin1.W: tensor<3x5xf32> {tapeml.name = "params.lin1.W"}, %params.lin1.b: tensor<5xf32> {tapeml.name = "params.lin1.b"}, %params.lin2.W: tensor<5x2xf32> {tapeml.name = "params.lin2.W"}, %params.lin2.b: tensor<2xf32> {tapeml.name = "params.lin2.b"}, %x: tensor<4x3xf32> {tapeml.name = "x"}) -> (tensor<4x2xf32> {tapeml.name = "result"})
# CHECK-SAME: attributes {tapeml.in_tree = "(({'lin1': {'W': ..., 'b': ...}, 'lin2': {'W': ..., 'b': ...}}, ...), {})", tapeml.out_tree = "..."} {
# CHECK-NEXT:   %0 = tape.matmul %x, %params.lin1.W : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
# CHECK-NEXT:   %1 = tape.broadcast %params.lin1.b : tensor<5xf32> -> tensor<4x5xf32>
# CHECK-NEXT:   %2 = tape.add %0, %1 : tensor<4x5xf32>
# CHECK-NEXT:   %3 = tape.relu %2 : tensor<4x5xf32>
# CHECK-NEXT:   %4 = tape.matmul %3, %params.lin2.W : tensor<4x5xf32>, tensor<5x2xf32> -> tensor<4x2xf32>
# CHECK-NEXT:   %5 = tape.broadcast %params.lin2.b : tensor<2xf32> -> tensor<4x2xf32>
# CHECK-NEXT:   %result = tape.add %4, %5 : tensor<4x2xf32>
# CHECK-NEXT:   func.return %result : tensor<4x2xf32>
# CHECK-NEXT: }
