// No dialect is called nodialect, so it has no types either.
func.func @f(%a: !nodialect.t) {
  func.return
}
