// RUN: tapeml-opt %s --split-input-file -p merge-loop-nests | filecheck %s
// RUN: tapeml-opt %s --split-input-file -p 'merge-loop-nests{runs=false}' | filecheck %s --check-prefix=APART

// A run of eight ops repeated over other buffers (a layer, twice) becomes one function of the
// values each copy takes from outside, in order of first use; constants are cloned in. A
// third copy over one buffer where the others take two is another computation: it stays.
// The function's buffers may share bytes: it is marked tapeml.may_alias.
// CHECK-LABEL: func.func @layers
// CHECK-NEXT:    %c0 = arith.constant 0 : index
// CHECK-NEXT:    func.call @layers_run0(%x, %y, %s) : (memref<8xf32>, memref<8xf32>, memref<1xf32>) -> ()
// CHECK-NEXT:    func.call @layers_run0(%y, %z, %s) : (memref<8xf32>, memref<8xf32>, memref<1xf32>) -> ()
// CHECK-NEXT:    func.call @a(%w, %w)
// CHECK-COUNT-7: {{^    [^ ]}}
// CHECK-NEXT:    func.return
// CHECK:       func.func @layers_run0(%0: memref<8xf32>, %1: memref<8xf32>, %2: memref<1xf32>) attributes {tapeml.may_alias} {
// CHECK-NEXT:    %c0 = arith.constant 0 : index
// CHECK-NEXT:    func.call @a(%0, %1)
// CHECK-NEXT:    func.call @b(%1)
// CHECK-NEXT:    func.call @a(%1, %0)
// CHECK-NEXT:    func.call @b(%0)
// CHECK-NEXT:    %{{.*}} = memref.load %0[%c0]
// CHECK-NEXT:    %{{.*}} = arith.mulf
// CHECK-NEXT:    memref.store %{{.*}}, %2[%c0]
// CHECK-NEXT:    func.call @b(%1)
// CHECK-NEXT:    func.return
// APART-LABEL: func.func @layers
// APART-NOT:     _run
// APART-COUNT-8: func.call @a
func.func private @a(memref<8xf32>, memref<8xf32>) -> ()
func.func private @b(memref<8xf32>) -> ()

func.func @layers(%x: memref<8xf32>, %y: memref<8xf32>, %z: memref<8xf32>, %w: memref<8xf32>, %s: memref<1xf32>) {
  %c0 = arith.constant 0 : index
  func.call @a(%x, %y) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%y) : (memref<8xf32>) -> ()
  func.call @a(%y, %x) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  %l0 = memref.load %x[%c0] : memref<8xf32>
  %m0 = arith.mulf %l0, %l0 : f32
  memref.store %m0, %s[%c0] : memref<1xf32>
  func.call @b(%y) : (memref<8xf32>) -> ()
  func.call @a(%y, %z) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%z) : (memref<8xf32>) -> ()
  func.call @a(%z, %y) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%y) : (memref<8xf32>) -> ()
  %l1 = memref.load %y[%c0] : memref<8xf32>
  %m1 = arith.mulf %l1, %l1 : f32
  memref.store %m1, %s[%c0] : memref<1xf32>
  func.call @b(%z) : (memref<8xf32>) -> ()
  func.call @a(%w, %w) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%w) : (memref<8xf32>) -> ()
  func.call @a(%w, %w) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%w) : (memref<8xf32>) -> ()
  %l2 = memref.load %w[%c0] : memref<8xf32>
  %m2 = arith.mulf %l2, %l2 : f32
  memref.store %m2, %s[%c0] : memref<1xf32>
  func.call @b(%w) : (memref<8xf32>) -> ()
  func.return
}

// -----

// A copy whose value is read after it (%m1, stored by the function's last op) cannot be a
// call (a call makes no values): it stays, and one copy left alone is no function.
// CHECK-LABEL: func.func @read_after
// CHECK-NOT:     _run
// CHECK:         func.return
func.func private @a(memref<8xf32>, memref<8xf32>) -> ()
func.func private @b(memref<8xf32>) -> ()

func.func @read_after(%x: memref<8xf32>, %y: memref<8xf32>, %z: memref<8xf32>, %s: memref<1xf32>) {
  %c0 = arith.constant 0 : index
  func.call @a(%x, %y) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%y) : (memref<8xf32>) -> ()
  func.call @a(%y, %x) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  %l0 = memref.load %x[%c0] : memref<8xf32>
  %m0 = arith.mulf %l0, %l0 : f32
  memref.store %m0, %s[%c0] : memref<1xf32>
  func.call @b(%y) : (memref<8xf32>) -> ()
  func.call @a(%y, %z) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%z) : (memref<8xf32>) -> ()
  func.call @a(%z, %y) : (memref<8xf32>, memref<8xf32>) -> ()
  func.call @b(%y) : (memref<8xf32>) -> ()
  %l1 = memref.load %y[%c0] : memref<8xf32>
  %m1 = arith.mulf %l1, %l1 : f32
  memref.store %m1, %s[%c0] : memref<1xf32>
  func.call @b(%z) : (memref<8xf32>) -> ()
  memref.store %m1, %s[%c0] : memref<1xf32>
  func.return
}

// -----

// A dealloc is in no run: each layer below frees its buffer in its middle, and a call after
// the copy would read the buffer freed. The layers stay apart.
// CHECK-LABEL: func.func @freed
// CHECK-NOT:     _run
// CHECK:         func.return
func.func private @b(memref<8xf32>) -> ()

func.func @freed(%x: memref<8xf32>) {
  %t = memref.alloc() : memref<8xf32>
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%t) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%t) : (memref<8xf32>) -> ()
  memref.dealloc %t : memref<8xf32>
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  %u = memref.alloc() : memref<8xf32>
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%u) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%u) : (memref<8xf32>) -> ()
  memref.dealloc %u : memref<8xf32>
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.call @b(%x) : (memref<8xf32>) -> ()
  func.return
}
