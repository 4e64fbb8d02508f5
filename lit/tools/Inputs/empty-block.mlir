// @f's body is a block with no terminator.
func.func @f() {
^bb0:
}
