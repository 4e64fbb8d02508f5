// A window op is not lowered yet, and tapeml-opt says so.
// RUN: not tapeml-opt %s -p tape-to-loops 2>&1 | filecheck %s --check-prefix=ERROR
// ERROR: tape-to-loops: tape.unfold is not lowered yet (@windows)
func.func @windows(%x: tensor<1x1x3x3xf32>) -> tensor<1x1x2x2x2x2xf32> {
  %u = tape.unfold %x kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<1x1x3x3xf32> -> tensor<1x1x2x2x2x2xf32>
  func.return %u : tensor<1x1x2x2x2x2xf32>
}
