// RUN: tapeml-opt %s --split-input-file -p 'tape-fuse{report=true}' 2>%t.report | filecheck %s
// RUN: filecheck %s --check-prefix=REPORT --input-file=%t.report

// conv2d-forward, groups = 1, as nn.conv2d records it (asymmetric padding).
// CHECK-LABEL: func.func @conv
// CHECK-NEXT:    %result = tape.conv2d %x, %w stride = [1, 1] padding = [1, 0, 0, 1] dilation = [1, 1] groups = 1 : tensor<1x2x4x4xf32>, tensor<3x2x2x2xf32> -> tensor<1x3x4x4xf32>
// CHECK-NEXT:    func.return %result
func.func @conv(%x: tensor<1x2x4x4xf32>, %w: tensor<3x2x2x2xf32>) -> tensor<1x3x4x4xf32> {
  %p = tape.pad %x low = [0, 0, 1, 0] high = [0, 0, 0, 1] value = 0.0 : tensor<1x2x4x4xf32> -> tensor<1x2x5x5xf32>
  %u = tape.unfold %p kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x2x5x5xf32> -> tensor<1x2x4x4x2x2xf32>
  %w2 = tape.reshape %w : tensor<3x2x2x2xf32> -> tensor<3x8xf32>
  %m = tape.permute %u perm = [0, 2, 3, 1, 4, 5] : tensor<1x2x4x4x2x2xf32> -> tensor<1x4x4x2x2x2xf32>
  %rows = tape.reshape %m : tensor<1x4x4x2x2x2xf32> -> tensor<16x8xf32>
  %wt = tape.permute %w2 perm = [1, 0] : tensor<3x8xf32> -> tensor<8x3xf32>
  %y = tape.matmul %rows, %wt : tensor<16x8xf32>, tensor<8x3xf32> -> tensor<16x3xf32>
  %y4 = tape.reshape %y : tensor<16x3xf32> -> tensor<1x4x4x3xf32>
  %result = tape.permute %y4 perm = [0, 3, 1, 2] : tensor<1x4x4x3xf32> -> tensor<1x3x4x4xf32>
  func.return %result : tensor<1x3x4x4xf32>
}

// -----

// conv2d-forward, groups = 2.
// CHECK-LABEL: func.func @grouped
// CHECK-NEXT:    %result = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 2 : tensor<1x4x3x3xf32>, tensor<2x2x2x2xf32> -> tensor<1x2x2x2xf32>
// CHECK-NEXT:    func.return %result
func.func @grouped(%x: tensor<1x4x3x3xf32>, %w: tensor<2x2x2x2xf32>) -> tensor<1x2x2x2xf32> {
  %u = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x4x3x3xf32> -> tensor<1x4x2x2x2x2xf32>
  %w2 = tape.reshape %w : tensor<2x2x2x2xf32> -> tensor<2x8xf32>
  %s = tape.reshape %u : tensor<1x4x2x2x2x2xf32> -> tensor<1x2x2x2x2x2x2xf32>
  %m = tape.permute %s perm = [1, 0, 3, 4, 2, 5, 6] : tensor<1x2x2x2x2x2x2xf32> -> tensor<2x1x2x2x2x2x2xf32>
  %rows = tape.reshape %m : tensor<2x1x2x2x2x2x2xf32> -> tensor<2x4x8xf32>
  %w3 = tape.reshape %w2 : tensor<2x8xf32> -> tensor<2x1x8xf32>
  %wt = tape.permute %w3 perm = [0, 2, 1] : tensor<2x1x8xf32> -> tensor<2x8x1xf32>
  %y = tape.matmul %rows, %wt : tensor<2x4x8xf32>, tensor<2x8x1xf32> -> tensor<2x4x1xf32>
  %y5 = tape.reshape %y : tensor<2x4x1xf32> -> tensor<2x1x2x2x1xf32>
  %t = tape.permute %y5 perm = [1, 0, 4, 2, 3] : tensor<2x1x2x2x1xf32> -> tensor<1x2x1x2x2xf32>
  %result = tape.reshape %t : tensor<1x2x1x2x2xf32> -> tensor<1x2x2x2xf32>
  func.return %result : tensor<1x2x2x2xf32>
}

// -----

// Not a convolution: the unfolded windows are also returned, so fusing would repeat the im2col.
// CHECK-LABEL: func.func @windows_used_elsewhere
// CHECK:         tape.unfold
// CHECK-NOT:     tape.conv2d
func.func @windows_used_elsewhere(%x: tensor<1x1x3x3xf32>, %w: tensor<1x1x2x2xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2x2x2xf32>) {
  %u = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2x2x2xf32>
  %w2 = tape.reshape %w : tensor<1x1x2x2xf32> -> tensor<1x4xf32>
  %m = tape.permute %u perm = [0, 2, 3, 1, 4, 5] : tensor<1x1x2x2x2x2xf32> -> tensor<1x2x2x1x2x2xf32>
  %rows = tape.reshape %m : tensor<1x2x2x1x2x2xf32> -> tensor<4x4xf32>
  %wt = tape.permute %w2 perm = [1, 0] : tensor<1x4xf32> -> tensor<4x1xf32>
  %y = tape.matmul %rows, %wt : tensor<4x4xf32>, tensor<4x1xf32> -> tensor<4x1xf32>
  %y4 = tape.reshape %y : tensor<4x1xf32> -> tensor<1x2x2x1xf32>
  %result = tape.permute %y4 perm = [0, 3, 1, 2] : tensor<1x2x2x1xf32> -> tensor<1x1x2x2xf32>
  func.return %result, %u : tensor<1x1x2x2xf32>, tensor<1x1x2x2x2x2xf32>
}

// -----

// Not a convolution: the windows are permuted so that the channel mixes with a spatial axis.
// CHECK-LABEL: func.func @wrong_permutation
// CHECK:         tape.unfold
// CHECK-NOT:     tape.conv2d
func.func @wrong_permutation(%x: tensor<1x2x3x3xf32>, %w: tensor<1x2x2x2xf32>) -> tensor<1x1x2x2xf32> {
  %u = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x2x3x3xf32> -> tensor<1x2x2x2x2x2xf32>
  %w2 = tape.reshape %w : tensor<1x2x2x2xf32> -> tensor<1x8xf32>
  %m = tape.permute %u perm = [0, 3, 2, 1, 4, 5] : tensor<1x2x2x2x2x2xf32> -> tensor<1x2x2x2x2x2xf32>
  %rows = tape.reshape %m : tensor<1x2x2x2x2x2xf32> -> tensor<4x8xf32>
  %wt = tape.permute %w2 perm = [1, 0] : tensor<1x8xf32> -> tensor<8x1xf32>
  %y = tape.matmul %rows, %wt : tensor<4x8xf32>, tensor<8x1xf32> -> tensor<4x1xf32>
  %y4 = tape.reshape %y : tensor<4x1xf32> -> tensor<1x2x2x1xf32>
  %result = tape.permute %y4 perm = [0, 3, 1, 2] : tensor<1x2x2x1xf32> -> tensor<1x1x2x2xf32>
  func.return %result : tensor<1x1x2x2xf32>
}

// -----

// Not a convolution: the padding value is 1, not 0.
// CHECK-LABEL: func.func @nonzero_pad
// CHECK:         tape.pad
// CHECK-NOT:     tape.conv2d
func.func @nonzero_pad(%x: tensor<1x1x2x2xf32>, %w: tensor<1x1x2x2xf32>) -> tensor<1x1x3x3xf32> {
  %p = tape.pad %x low = [0, 0, 1, 1] high = [0, 0, 1, 1] value = 1.0 : tensor<1x1x2x2xf32> -> tensor<1x1x4x4xf32>
  %u = tape.unfold %p kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x1x4x4xf32> -> tensor<1x1x3x3x2x2xf32>
  %w2 = tape.reshape %w : tensor<1x1x2x2xf32> -> tensor<1x4xf32>
  %m = tape.permute %u perm = [0, 2, 3, 1, 4, 5] : tensor<1x1x3x3x2x2xf32> -> tensor<1x3x3x1x2x2xf32>
  %rows = tape.reshape %m : tensor<1x3x3x1x2x2xf32> -> tensor<9x4xf32>
  %wt = tape.permute %w2 perm = [1, 0] : tensor<1x4xf32> -> tensor<4x1xf32>
  %y = tape.matmul %rows, %wt : tensor<9x4xf32>, tensor<4x1xf32> -> tensor<9x1xf32>
  %y4 = tape.reshape %y : tensor<9x1xf32> -> tensor<1x3x3x1xf32>
  %result = tape.permute %y4 perm = [0, 3, 1, 2] : tensor<1x3x3x1xf32> -> tensor<1x1x3x3xf32>
  func.return %result : tensor<1x1x3x3xf32>
}

// -----

// Not a convolution: the 2x2 windows meet a weight of 1x4 taps (same size, other shape).
// CHECK-LABEL: func.func @window_weight_mismatch
// CHECK:         tape.unfold
// CHECK-NOT:     tape.conv2d
func.func @window_weight_mismatch(%x: tensor<1x1x3x3xf32>, %w: tensor<1x1x1x4xf32>) -> tensor<1x1x2x2xf32> {
  %u = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2x2x2xf32>
  %w2 = tape.reshape %w : tensor<1x1x1x4xf32> -> tensor<1x4xf32>
  %m = tape.permute %u perm = [0, 2, 3, 1, 4, 5] : tensor<1x1x2x2x2x2xf32> -> tensor<1x2x2x1x2x2xf32>
  %rows = tape.reshape %m : tensor<1x2x2x1x2x2xf32> -> tensor<4x4xf32>
  %wt = tape.permute %w2 perm = [1, 0] : tensor<1x4xf32> -> tensor<4x1xf32>
  %y = tape.matmul %rows, %wt : tensor<4x4xf32>, tensor<4x1xf32> -> tensor<4x1xf32>
  %y4 = tape.reshape %y : tensor<4x1xf32> -> tensor<1x2x2x1xf32>
  %result = tape.permute %y4 perm = [0, 3, 1, 2] : tensor<1x2x2x1xf32> -> tensor<1x1x2x2xf32>
  func.return %result : tensor<1x1x2x2xf32>
}

// -----

// maxpool2d-forward (padding -inf) and avgpool2d-forward (sum / (kh * kw)).
// CHECK-LABEL: func.func @pools
// CHECK-NEXT:    %max = tape.maxpool2d %x kernel = [2, 2] stride = [2, 2] padding = [0, 0, 1, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
// CHECK-NEXT:    %avg = tape.avgpool2d %x kernel = [2, 2] stride = [1, 1] padding = [0, 0, 0, 0] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
// CHECK-NEXT:    func.return %max, %avg
func.func @pools(%x: tensor<1x1x3x3xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) {
  %p = tape.pad %x low = [0, 0, 0, 0] high = [0, 0, 1, 1] value = -inf : tensor<1x1x3x3xf32> -> tensor<1x1x4x4xf32>
  %u = tape.unfold %p kernel = [2, 2] stride = [2, 2] dilation = [1, 1] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2x2x2xf32>
  %max = tape.max %u axes = [4, 5] : tensor<1x1x2x2x2x2xf32> -> tensor<1x1x2x2xf32>
  %v = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2x2x2xf32>
  %s = tape.sum %v axes = [4, 5] : tensor<1x1x2x2x2x2xf32> -> tensor<1x1x2x2xf32>
  %k = tape.constant dense<4.0> : tensor<1x1x2x2xf32>
  %avg = tape.div %s, %k : tensor<1x1x2x2xf32>
  func.return %max, %avg : tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>
}

// -----

// Not pools: a max padded with 0 (not -inf), a mean divided by 3 (not 4), a max over one axis,
// and a dilated window.
// CHECK-LABEL: func.func @not_pools
// CHECK-NOT:     tape.maxpool2d
// CHECK-NOT:     tape.avgpool2d
// CHECK:         func.return
func.func @not_pools(%x: tensor<1x1x3x3xf32>) -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2x2xf32>, tensor<1x1x1x1xf32>) {
  %p = tape.pad %x low = [0, 0, 0, 0] high = [0, 0, 1, 1] value = 0.0 : tensor<1x1x3x3xf32> -> tensor<1x1x4x4xf32>
  %u = tape.unfold %p kernel = [2, 2] stride = [2, 2] dilation = [1, 1] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2x2x2xf32>
  %max = tape.max %u axes = [4, 5] : tensor<1x1x2x2x2x2xf32> -> tensor<1x1x2x2xf32>
  %v = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2x2x2xf32>
  %s = tape.sum %v axes = [4, 5] : tensor<1x1x2x2x2x2xf32> -> tensor<1x1x2x2xf32>
  %k = tape.constant dense<3.0> : tensor<1x1x2x2xf32>
  %avg = tape.div %s, %k : tensor<1x1x2x2xf32>
  %w = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2x2x2xf32>
  %one = tape.max %w axes = [5] : tensor<1x1x2x2x2x2xf32> -> tensor<1x1x2x2x2xf32>
  %d = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [2, 2] : tensor<1x1x3x3xf32> -> tensor<1x1x1x1x2x2xf32>
  %dm = tape.max %d axes = [4, 5] : tensor<1x1x1x1x2x2xf32> -> tensor<1x1x1x1xf32>
  func.return %max, %avg, %one, %dm : tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2x2xf32>, tensor<1x1x1x1xf32>
}

// REPORT: tape-fuse: 1 idiom raised, 0 elementwise groups of 0 ops
// REPORT: conv2d-forward                 1
// REPORT: tape-fuse: 1 idiom raised, 0 elementwise groups of 0 ops
// REPORT: conv2d-forward                 1
// REPORT: tape-fuse: 0 idioms raised

// -----

// concat-of-pads: the cotangents of three slices side by side (q, k, v), each padded back by
// zeros and summed, are their concatenation, each plus zero (exact: -0.0 + 0.0 is +0.0).
// CHECK-LABEL: func.func @slices_back
// CHECK-NEXT:    %[[A:.*]] = tape.fused %q : tensor<2x3xf32> -> tensor<2x3xf32> {
// CHECK:           tape.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:      tape.add
// CHECK:         %[[B:.*]] = tape.fused %k
// CHECK:         %[[C:.*]] = tape.fused %v
// CHECK:         %{{.*}} = tape.concat %[[A]], %[[B]], %[[C]] axis = 1 : tensor<2x3xf32> -> tensor<2x9xf32>
// CHECK-NEXT:    func.return
func.func @slices_back(%q: tensor<2x3xf32>, %k: tensor<2x3xf32>, %v: tensor<2x3xf32>) -> tensor<2x9xf32> {
  %pv = tape.pad %v low = [0, 6] high = [0, 0] value = 0.0 : tensor<2x3xf32> -> tensor<2x9xf32>
  %pk = tape.pad %k low = [0, 3] high = [0, 3] value = 0.0 : tensor<2x3xf32> -> tensor<2x9xf32>
  %s = tape.add %pv, %pk : tensor<2x9xf32>
  %pq = tape.pad %q low = [0, 0] high = [0, 6] value = 0.0 : tensor<2x3xf32> -> tensor<2x9xf32>
  %t = tape.add %s, %pq : tensor<2x9xf32>
  func.return %t : tensor<2x9xf32>
}

// -----

// Not the idiom: pieces that leave a gap, a pad by -0.0 (-0.0 + -0.0 is -0.0, not +0.0), pads
// along two axes. The pads stay.
// CHECK-LABEL: func.func @not_slices
// CHECK-NOT:     tape.concat
// CHECK:         func.return
func.func @not_slices(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> (tensor<2x7xf32>, tensor<2x6xf32>, tensor<3x6xf32>) {
  %ga = tape.pad %a low = [0, 0] high = [0, 4] value = 0.0 : tensor<2x3xf32> -> tensor<2x7xf32>
  %gb = tape.pad %b low = [0, 4] high = [0, 0] value = 0.0 : tensor<2x3xf32> -> tensor<2x7xf32>
  %gap = tape.add %ga, %gb : tensor<2x7xf32>
  %na = tape.pad %a low = [0, 0] high = [0, 3] value = -0.0 : tensor<2x3xf32> -> tensor<2x6xf32>
  %nb = tape.pad %b low = [0, 3] high = [0, 0] value = -0.0 : tensor<2x3xf32> -> tensor<2x6xf32>
  %neg = tape.add %na, %nb : tensor<2x6xf32>
  %ta = tape.pad %a low = [0, 0] high = [1, 3] value = 0.0 : tensor<2x3xf32> -> tensor<3x6xf32>
  %tb = tape.pad %b low = [1, 3] high = [0, 0] value = 0.0 : tensor<2x3xf32> -> tensor<3x6xf32>
  %two = tape.add %ta, %tb : tensor<3x6xf32>
  func.return %gap, %neg, %two : tensor<2x7xf32>, tensor<2x6xf32>, tensor<3x6xf32>
}

// -----

// A pad by nothing (the pullback of a slice of a whole dim) is its operand.
// CHECK-LABEL: func.func @pad_by_nothing
// CHECK-NEXT:    %{{.*}} = tape.exp %x
// CHECK-NEXT:    func.return
func.func @pad_by_nothing(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %p = tape.pad %x low = [0, 0] high = [0, 0] value = 0.0 : tensor<2x3xf32> -> tensor<2x3xf32>
  %e = tape.exp %p : tensor<2x3xf32>
  func.return %e : tensor<2x3xf32>
}
