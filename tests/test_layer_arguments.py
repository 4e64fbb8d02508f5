"""nn's window layers (conv2d, max_pool2d, avg_pool2d) take a kernel, stride and dilation as an
int or a (height, width) pair and nothing else (a TF-style (1, 1, 2, 2) kernel had pooled 1 x 1
windows, a stride of (1, 2, 3) had been (1, 2)); padding as an int, a pair, (top, left, bottom,
right), lax's ((top, bottom), (left, right)), or 'SAME' / 'VALID' in any case, as lax's (they
had been a ValueError from int('s')). A layer's mistakes (an argument of another form, an NHWC
input, a conv bias, norm params or an attention mask of the wrong shape) are errors naming the
layer, the argument, what it must be and what it got, at the user's line, eager and traced
(they had been errors from tape.reshape, multiply, where or matmul)."""

from __future__ import annotations

import numpy as np
import pytest
import reference  # tests/reference.py: direct loop implementations

import tapeml
from tapeml import nn

RNG = np.random.default_rng(7)
HERE = r"\n  at .*test_layer_arguments\.py:\d+"  # the error names the user's line


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def _same(size, kernel, stride, dilation=1):
    """lax's SAME padding of one dim, (low, high): ceil(size / stride) outputs, the extra pad on
    the high side."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def test_the_same_reference_is_lax():
    # jax.lax.padtype_to_pads((8, 7), (3, 4), (2, 3), "SAME") == [(0, 1), (1, 2)]
    assert (_same(8, 3, 2), _same(7, 4, 3)) == ((0, 1), (1, 2))
    assert _same(5, 3, 1, dilation=2) == (2, 2) and _same(4, 1, 3) == (0, 0)


# (H, W, kernel, stride, dilation): odd and even sizes, strides over and under the kernel
CASES = [(7, 6, (3, 3), (1, 1), (1, 1)),
         (9, 8, (3, 2), (2, 3), (1, 2)),
         (8, 7, (3, 4), (2, 3), (1, 1)),
         (5, 5, (2, 2), (2, 2), (2, 2)),
         (6, 9, (4, 1), (3, 1), (2, 1)),
         (1, 5, (3, 3), (2, 1), (1, 1))]


def _four(pairs):
    """((top, bottom), (left, right)) as (top, left, bottom, right)."""
    (top, bottom), (left, right) = pairs
    return top, left, bottom, right


@pytest.mark.parametrize(("h", "w", "kernel", "stride", "dilation"), CASES)
def test_same_and_valid_padding_match_explicit_padding(h, w, kernel, stride, dilation):
    x, weight = rand(2, 3, h, w), rand(4, 3, *kernel)
    same = _four([_same(*a) for a in zip((h, w), kernel, stride, dilation, strict=True)])
    pool_same = _four([_same(*a) for a in zip((h, w), kernel, stride, strict=True)])
    for padding in ("SAME", "same", "Same"):
        conv = nn.conv2d(x, weight, stride=stride, padding=padding, dilation=dilation)
        assert conv.shape[2:] == (-(-h // stride[0]), -(-w // stride[1]))
        np.testing.assert_allclose(conv, reference.conv2d(x, weight, stride, same, dilation, 1),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(conv, nn.conv2d(x, weight, stride=stride, padding=same,
                                                      dilation=dilation))
        # the pools (no dilation): SAME's windows over a -inf / zero padding
        np.testing.assert_array_equal(nn.max_pool2d(x, kernel, stride, padding),
                                      reference.maxpool2d(x, kernel, stride, pool_same))
        np.testing.assert_allclose(nn.avg_pool2d(x, kernel, stride, padding),
                                   reference.avgpool2d(x, kernel, stride, pool_same), rtol=1e-12)
    for padding in ("VALID", "valid"):
        if h >= (kernel[0] - 1) * dilation[0] + 1:  # (else no window fits: an error, below)
            np.testing.assert_array_equal(
                nn.conv2d(x, weight, stride=stride, padding=padding, dilation=dilation),
                nn.conv2d(x, weight, stride=stride, padding=0, dilation=dilation))
        if h >= kernel[0]:
            np.testing.assert_array_equal(nn.max_pool2d(x, kernel, stride, padding),
                                          reference.maxpool2d(x, kernel, stride, (0,) * 4))
            np.testing.assert_array_equal(nn.avg_pool2d(x, kernel, stride, padding),
                                          nn.avg_pool2d(x, kernel, stride))


@pytest.mark.parametrize(("h", "w", "kernel", "stride", "dilation"), CASES[1:4])
def test_same_padding_under_jit_matches_explicit_padding(h, w, kernel, stride, dilation):
    x, weight = rand(2, 3, h, w, dtype=np.float32), rand(4, 3, *kernel, dtype=np.float32)
    same = _four([_same(*a) for a in zip((h, w), kernel, stride, dilation, strict=True)])
    pool_same = _four([_same(*a) for a in zip((h, w), kernel, stride, strict=True)])

    def layers(x, weight, conv_pad, pool_pad):
        return (nn.conv2d(x, weight, stride=stride, padding=conv_pad, dilation=dilation),
                nn.max_pool2d(x, kernel, stride, pool_pad),
                nn.avg_pool2d(x, kernel, stride, pool_pad))

    got = tapeml.jit(lambda x, weight: layers(x, weight, "SAME", "same"))(x, weight)
    expected = layers(x, weight, same, pool_same)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape == (*e.shape[:2], -(-h // stride[0]), -(-w // stride[1]))
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_lax_padding_pairs_are_top_bottom_then_left_right():
    x, weight = rand(1, 2, 6, 7), rand(3, 2, 3, 2)
    for pairs, four in ((((1, 2), (0, 3)), (1, 0, 2, 3)), (((-1, 1), (2, -1)), (-1, 2, 1, -1))):
        np.testing.assert_array_equal(nn.conv2d(x, weight, padding=pairs),
                                      nn.conv2d(x, weight, padding=four))
        np.testing.assert_array_equal(nn.max_pool2d(x, 2, 1, pairs), nn.max_pool2d(x, 2, 1, four))
    traced = tapeml.jit(lambda x: nn.avg_pool2d(x, 3, 2, [(1, 0), (0, 2)]))(x)
    np.testing.assert_allclose(traced, nn.avg_pool2d(x, 3, 2, (1, 0, 0, 2)), rtol=1e-12)


X, W = rand(2, 3, 8, 8), rand(4, 3, 3, 3)
PAIR = r"must be an int or a \(height, width\) pair of positive ints; got "
PADDINGS = (r"padding must be an int, a \(height, width\) pair, \(top, left, bottom, right\), "
            r"lax's \(\(top, bottom\), \(left, right\)\), 'SAME' or 'VALID'; got ")
MISTAKES = [
    (lambda x: nn.conv2d(x, W, stride=(1, 2, 3)), ValueError, r"nn.conv2d: stride " + PAIR +
     r"\(1, 2, 3\)"),
    (lambda x: nn.conv2d(x, W, dilation=(1, 1, 5)), ValueError, r"nn.conv2d: dilation " + PAIR),
    (lambda x: nn.conv2d(x, W, stride=(2,)), ValueError, r"nn.conv2d: stride " + PAIR + r"\(2,\)"),
    (lambda x: nn.conv2d(x, W, stride=2.0), TypeError, r"nn.conv2d: stride " + PAIR + "2.0"),
    (lambda x: nn.conv2d(x, W, stride=0), ValueError, r"nn.conv2d: stride " + PAIR + "0"),
    (lambda x: nn.conv2d(x, W, stride=True), TypeError, r"nn.conv2d: stride " + PAIR + "True"),
    (lambda x: nn.conv2d(x, W, groups=1.0), TypeError, r"nn.conv2d: groups must be an int"),
    (lambda x: nn.conv2d(x, W, padding=(1, 1, 1)), ValueError, "nn.conv2d: " + PADDINGS +
     r"\(1, 1, 1\)"),
    (lambda x: nn.conv2d(x, W, padding=1.5), TypeError, "nn.conv2d: " + PADDINGS + "1.5"),
    (lambda x: nn.conv2d(x, W, padding="full"), ValueError, "nn.conv2d: " + PADDINGS + "'full'"),
    (lambda x: nn.conv2d(x, W, padding=((1, 1), (1,))), TypeError, "nn.conv2d: " + PADDINGS),
    (lambda x: nn.max_pool2d(x, (2, 2, 2)), ValueError, r"nn.max_pool2d: kernel " + PAIR),
    (lambda x: nn.max_pool2d(x, 2, (1, 1, 1, 1)), ValueError, r"nn.max_pool2d: stride " + PAIR),
    (lambda x: nn.max_pool2d(x, 2, padding="valid "), ValueError, "nn.max_pool2d: " + PADDINGS),
    (lambda x: nn.avg_pool2d(x, (1, 1, 2, 2)), ValueError, r"nn.avg_pool2d: kernel " + PAIR +
     r"\(1, 1, 2, 2\)"),
    (lambda x: nn.avg_pool2d(x, 2.0), TypeError, r"nn.avg_pool2d: kernel " + PAIR + "2.0"),
    (lambda x: nn.avg_pool2d(x, 2, padding=[1, "1"]), TypeError, "nn.avg_pool2d: " + PADDINGS),
]


@pytest.mark.parametrize(("call", "error", "message"), MISTAKES)
def test_an_argument_of_another_form_is_an_error_naming_the_layer_and_argument(call, error,
                                                                               message):
    for run in (call, tapeml.jit(lambda x: call(x))):
        with pytest.raises(error, match=message + ".*" + HERE):
            run(X)


def test_conv2d_init_takes_a_pair_for_its_kernel():
    with pytest.raises(ValueError, match=r"nn.conv2d_init: kernel " + PAIR + r"\(1, 3, 3\)"):
        nn.conv2d_init(RNG, 1, 8, (1, 3, 3))
    assert nn.conv2d_init(RNG, 2, 8, [3, 1])["W"].shape == (8, 2, 3, 1)


def test_window_layers_still_take_their_forms():
    x = rand(1, 2, 7, 6)
    weight = rand(4, 2, 3, 3)
    base = nn.conv2d(x, weight, stride=(2, 1), padding=(1, 1, 1, 1), dilation=1)
    for stride, padding in (([2, 1], 1), (np.array([2, 1]), (1, 1)), ((np.int64(2), 1), [1] * 4)):
        np.testing.assert_array_equal(nn.conv2d(x, weight, stride=stride, padding=padding), base)
    assert nn.max_pool2d(rand(3, 7, 6), 2, padding=1).shape == (3, 4, 4)  # any leading dims


LN, RMS = nn.layer_norm_init(17), nn.rms_norm_init(17)
Q = rand(2, 2, 8, 4)  # (B, H, T, D)
SHAPE_MISTAKES = [
    # an NHWC input: the message shows its shape and the layouts
    (lambda x: nn.conv2d(tapeml.transpose(x[:, :1], (0, 2, 3, 1)), rand(8, 1, 3, 3)),
     r"nn.conv2d: with groups=1, an input of 8 channels needs a weight of 8 input channels .*"
     r"got input \(2, 8, 8, 1\) and weight \(8, 1, 3, 3\) \(the input is NCHW, the weight "
     r"OIHW: \(O, C/groups, KH, KW\)"),
    (lambda x: nn.conv2d(x[:, :1], rand(8, 1, 3, 3), np.zeros(7)),
     r"nn.conv2d: bias must be \(8,\), one per output channel of weight \(8, 1, 3, 3\); "
     r"got \(7,\)"),
    (lambda x: nn.conv2d(x[:, :, :2], W),
     r"nn.conv2d: the input \(2, 3, 2, 8\) padded by \(0, 0, 0, 0\) .* is 2 x 8, smaller "
     r"than one 3 x 3 window"),
    (lambda x: nn.max_pool2d(x, 3, padding=(-3, 0)),
     r"nn.max_pool2d: the input \(2, 3, 8, 8\) padded by \(-3, 0, -3, 0\) .* is 2 x 8"),
    (lambda x: nn.layer_norm(LN, x[0, 0, :2]),
     r"nn.layer_norm: params\['scale'\] of shape \(17,\) does not fit the input \(2, 8\), "
     r"normalized over its last axis of 8: layer_norm_init\(8\) makes \(8,\)"),
    (lambda x: nn.rms_norm(RMS, x), r"nn.rms_norm: params\['scale'\] of shape \(17,\)"),
    (lambda x: nn.dot_product_attention(Q, Q, Q, mask=np.ones((8, 9), bool)),
     r"nn.dot_product_attention: mask \(8, 9\) must broadcast to the scores' \(..., Tq, Tk\) "
     r"= \(2, 2, 8, 8\)"),
    (lambda x: nn.dot_product_attention(Q, *[np.swapaxes(Q, 1, 2)] * 2),
     r"nn.dot_product_attention: .* must agree, their leading \(batch, head\) dims broadcast "
     r"\(heads before time: \(B, H, T, D\)\), got \(2, 2, 8, 4\), \(2, 8, 2, 4\)"),
]


@pytest.mark.parametrize(("call", "message"), SHAPE_MISTAKES)
def test_a_layer_checks_its_shapes_and_says_the_layout(call, message):
    for run in (call, tapeml.jit(lambda x: call(x))):
        with pytest.raises(tapeml.ShapeError, match=message + ".*" + HERE):
            run(X)


def test_norm_params_without_their_entries_say_so():
    with pytest.raises(ValueError, match=r"nn.layer_norm: params has no 'bias', as "
                       r"layer_norm_init makes; got keys \['scale'\]" + HERE):
        nn.layer_norm({"scale": np.ones(8)}, rand(2, 8))


def test_norm_params_and_masks_that_broadcast_are_taken():
    x = rand(2, 8)
    np.testing.assert_allclose(nn.layer_norm({"scale": np.ones(1), "bias": np.zeros(8)}, x),
                               nn.layer_norm(nn.layer_norm_init(8, np.float64), x), rtol=1e-12)
    for mask in (np.tril(np.ones((8, 8), bool)), np.ones((2, 1, 1, 8), bool)):
        assert nn.dot_product_attention(Q, Q, Q, mask=mask).shape == Q.shape


def test_integer_and_boolean_pools_and_convolutions_as_eagerly_under_jit():
    """After a review: a max pool pads an integer input with its least value and a boolean
    one with False (the -inf padding had become True: every border window of a padded
    boolean pool was True; an int32 one an OverflowError), and an integer convolution or
    pool under jit is the idiom's loops (tape-fuse raised it to tape.conv2d / maxpool2d,
    which take floats: a ShapeError under jit only). A bias of (O, 1, 1) or (1, O, 1, 1) is
    taken, as torch's and before."""
    mask = np.zeros((1, 1, 5, 5), bool)
    mask[0, 0, 2, 2] = True
    for run in (nn.max_pool2d, tapeml.jit(nn.max_pool2d, static_argnums=(1, 2, 3))):
        pooled = run(mask, 3, 1, 1)
        assert pooled.dtype == np.bool_ and pooled.sum() == 9 and pooled[0, 0, 1:4, 1:4].all()
    ids = np.arange(-8, 8, dtype=np.int32).reshape(1, 1, 4, 4)
    want = reference.maxpool2d(ids.astype(np.float64), (2, 2), (2, 2), (1, 1, 1, 1))
    for run in (nn.max_pool2d, tapeml.jit(nn.max_pool2d, static_argnums=(1, 2, 3))):
        got = run(ids, 2, 2, 1)
        assert got.dtype == np.int32 and np.array_equal(got, want)
    x = np.arange(2 * 2 * 5 * 5, dtype=np.int32).reshape(2, 2, 5, 5) % 7 - 3
    w = (np.arange(3 * 2 * 3 * 3, dtype=np.int32).reshape(3, 2, 3, 3) % 5) - 2
    eager = nn.conv2d(x, w, padding=1)
    assert eager.dtype == np.int32
    np.testing.assert_array_equal(tapeml.jit(lambda x, w: nn.conv2d(x, w, padding=1))(x, w),
                                  eager)
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    base = nn.conv2d(xf, wf, np.arange(3.0, dtype=np.float32))
    for bias in (np.arange(3.0).reshape(3, 1, 1), np.arange(3.0).reshape(1, 3, 1, 1)):
        np.testing.assert_array_equal(nn.conv2d(xf, wf, bias.astype(np.float32)), base)
