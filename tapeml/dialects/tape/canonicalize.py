"""Canonicalization patterns of the tape layout ops (xDSL's `canonicalize` runs them, and so does
tape-fuse): chains of permutes and of reshapes become one op, and identities disappear, so the
idioms tape-fuse matches have one spelling."""

from __future__ import annotations

from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from tapeml.dialects.tape.layout import BroadcastOp, PadOp, PermuteOp, ReshapeOp


class RemoveIdentityLayout(RewritePattern):
    """permute by the identity, reshape or broadcast to the same type, pad by nothing (the
    pullback of a slice of a whole dim): the operand itself."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: PermuteOp | ReshapeOp | BroadcastOp | PadOp,
                          rewriter: PatternRewriter) -> None:
        if isinstance(op, PadOp) and (any(op.params["low"]) or any(op.params["high"])):
            return
        if op.input.type == op.result.type and (
            not isinstance(op, PermuteOp) or op.params["perm"] == tuple(range(len(
                op.params["perm"])))):
            rewriter.replace(op, [], [op.input])


class ComposePermutes(RewritePattern):
    """permute(permute(x, inner), outer) = permute(x, inner[outer[i]] for each i)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: PermuteOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if not isinstance(inner, PermuteOp):
            return
        first, then = inner.params["perm"], op.params["perm"]
        rewriter.replace(op, PermuteOp.build(inner.input, perm=tuple(first[i] for i in then)))


class ComposeReshapes(RewritePattern):
    """reshape(reshape(x)) = reshape(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReshapeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if isinstance(inner, ReshapeOp):
            rewriter.replace(op, ReshapeOp.build(inner.input, shape=op.params["shape"]))


LAYOUT_PATTERNS: tuple[RewritePattern, ...] = (
    RemoveIdentityLayout(), ComposePermutes(), ComposeReshapes())
