// %1 is used by tape.add before tape.neg defines it, in the same block.
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tape.add %a, %1 : tensor<2xf32>
  %1 = tape.neg %a : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
