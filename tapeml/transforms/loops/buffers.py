"""The buffer plan of tape-to-loops: intermediates freed after their last use, and the report of
the bytes they hold."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import Block, SSAValue

from tapeml.transforms.loops.emitter import dealloc


@dataclass
class PlanReport:
    """Bytes of the intermediates: held at once at the peak, against all of them."""

    peak_bytes: int = 0
    total_bytes: int = 0
    scratch_bytes: int = 0
    """The largest scratch buffer one op holds while it runs (a convolution's im2col matrix)."""

    def __str__(self) -> str:
        scratch = f", plus {self.scratch_bytes:,} of scratch" if self.scratch_bytes else ""
        return (f"buffers: peak {self.peak_bytes:,} bytes of intermediates live at once"
                f"{scratch}, {self.total_bytes:,} if all were kept")


def free_after_last_use(block: Block, allocated: list[SSAValue], report: PlanReport) -> None:
    """memref.dealloc each buffer after the last top-level op that reads or writes it."""
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    live_ranges = []
    for buffer in allocated:
        last = position[buffer.owner]
        for use in buffer.uses:
            top = use.operation
            while top.parent_block() is not block:
                top = top.parent_op()
            last = max(last, position[top])
        live_ranges.append((position[buffer.owner], last, buffer))
    for _, last, buffer in live_ranges:
        block.insert_op_after(dealloc(buffer), ops[last])
    sizes = {b: b.type.get_shape()[0] * max(1, (b.type.element_type.bitwidth + 7) // 8)
             for _, _, b in live_ranges}
    events = sorted([(start, 1, b) for start, _, b in live_ranges]
                    + [(last, 2, b) for _, last, b in live_ranges], key=lambda x: (x[0], x[1]))
    live = peak = 0
    for _, kind, b in events:
        live += sizes[b] if kind == 1 else -sizes[b]
        peak = max(peak, live)
    report.peak_bytes = max(report.peak_bytes, peak)
    report.total_bytes += sum(sizes.values())
