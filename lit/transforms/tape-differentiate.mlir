// RUN: tapeml-opt %s --split-input-file -p tape-differentiate | filecheck %s
// RUN: tapeml-opt %s --split-input-file -p 'tape-differentiate{wrt=1}' | filecheck %s --check-prefix=WRT
// RUN: tapeml-opt %s --split-input-file -p 'tape-differentiate{seed=true}' | filecheck %s --check-prefix=SEED
// RUN: tapeml-opt %s --split-input-file -p tape-differentiate | tapeml-opt --split-input-file -p 'tape-differentiate{wrt=0 of=1 seed=true}' | filecheck %s --check-prefix=SECOND

// The forward ops stay as they were; the backward ops follow them, one pullback per forward op
// in reverse order; the function returns its result, then a gradient per argument.

// CHECK-LABEL: func.func @loss(%x: tensor<3xf32>, %w: tensor<3xf32>) -> (tensor<f32> {tapeml.name = "s"}, tensor<3xf32> {tapeml.name = "grad.x"}, tensor<3xf32> {tapeml.name = "grad.w"}) {
// CHECK-NEXT:    %m = tape.mul %x, %w : tensor<3xf32>
// CHECK-NEXT:    %t = tape.tanh %m : tensor<3xf32>
// CHECK-NEXT:    %s = tape.sum %t axes = [0] : tensor<3xf32> -> tensor<f32>
//                the seed, d s/d s = 1, broadcast back over the summed axis
// CHECK-NEXT:    %[[ONE:.*]] = tape.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[R:.*]] = tape.reshape %[[ONE]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT:    %[[DT:.*]] = tape.broadcast %[[R]] : tensor<1xf32> -> tensor<3xf32>
//                tanh: ct * (1 - t * t)
// CHECK-NEXT:    %[[TT:.*]] = tape.mul %t, %t : tensor<3xf32>
//                the 1 is a rank-0 constant, broadcast (not a constant of the operand's size)
// CHECK-NEXT:    %[[ONE1:.*]] = tape.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[C1:.*]] = tape.broadcast %[[ONE1]] : tensor<f32> -> tensor<3xf32>
// CHECK-NEXT:    %[[OMT:.*]] = tape.sub %[[C1]], %[[TT]] : tensor<3xf32>
// CHECK-NEXT:    %[[DM:.*]] = tape.mul %[[DT]], %[[OMT]] : tensor<3xf32>
//                mul: (ct * w, ct * x)
// CHECK-NEXT:    %[[DX:.*]] = tape.mul %[[DM]], %w : tensor<3xf32>
// CHECK-NEXT:    %[[DW:.*]] = tape.mul %[[DM]], %x : tensor<3xf32>
// CHECK-NEXT:    func.return %s, %[[DX]], %[[DW]] : tensor<f32>, tensor<3xf32>, tensor<3xf32>

// WRT-LABEL: func.func @loss(%x: tensor<3xf32>, %w: tensor<3xf32>) -> (tensor<f32> {tapeml.name = "s"}, tensor<3xf32> {tapeml.name = "grad.w"}) {
//              only w's cotangent (ct * x) is left: the one for x is dead and erased
// WRT:         %s = tape.sum
// WRT-NOT:     tape.mul %{{[0-9]+}}, %w
// WRT:         %[[DW:[0-9]+]] = tape.mul %{{[0-9]+}}, %x : tensor<3xf32>
// WRT-NEXT:    func.return %s, %[[DW]] : tensor<f32>, tensor<3xf32>

// SEED-LABEL: func.func @loss(%x: tensor<3xf32> {tapeml.name = "x"}, %w: tensor<3xf32> {tapeml.name = "w"}, %seed0: tensor<f32> {tapeml.name = "seed0"})
// SEED:         tape.reshape %seed0 : tensor<f32> -> tensor<1xf32>

// The gradient is more tape: a VJP of grad.x with respect to x is a Hessian-vector product.
// SECOND-LABEL: func.func @loss(%x: tensor<3xf32> {tapeml.name = "x"}, %w: tensor<3xf32> {tapeml.name = "w"}, %seed0: tensor<3xf32> {tapeml.name = "seed0"})
// SECOND-SAME:  -> (tensor<f32> {tapeml.name = "s"}, tensor<3xf32> {tapeml.name = "grad.x"}, tensor<3xf32> {tapeml.name = "grad.w"}, tensor<3xf32> {tapeml.name = "grad.x"})

func.func @loss(%x: tensor<3xf32>, %w: tensor<3xf32>) -> tensor<f32> {
  %m = tape.mul %x, %w : tensor<3xf32>
  %t = tape.tanh %m : tensor<3xf32>
  %s = tape.sum %t axes = [0] : tensor<3xf32> -> tensor<f32>
  func.return %s : tensor<f32>
}

// -----

// An argument the result does not depend on gets a zero gradient; a constant gets no
// cotangent (the one its pullback computed is dead and erased).

// CHECK-LABEL: func.func @unused(%x: tensor<2xf32>, %y: tensor<2xf32>)
// CHECK:         %s = tape.sum %p axes = [0] : tensor<2xf32> -> tensor<f32>
// CHECK:         %[[DX:[0-9]+]] = tape.mul %{{[0-9]+}}, %c : tensor<2xf32>
// CHECK-NEXT:    %[[Z:.*]] = tape.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK-NEXT:    func.return %s, %[[DX]], %[[Z]] : tensor<f32>, tensor<2xf32>, tensor<2xf32>
func.func @unused(%x: tensor<2xf32>, %y: tensor<2xf32>) -> tensor<f32> {
  %c = tape.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %p = tape.mul %x, %c : tensor<2xf32>
  %s = tape.sum %p axes = [0] : tensor<2xf32> -> tensor<f32>
  func.return %s : tensor<f32>
}
