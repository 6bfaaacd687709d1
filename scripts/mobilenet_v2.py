"""MobileNetV2 (Sandler et al., 2018) as `torch.onnx.export` writes torchvision's
`mobilenet_v2(width_mult=W, num_classes=C)` in eval mode: every convolution followed by
BatchNormalization (`training_mode=0`, running statistics as initializers), ReLU6 as `Clip` with
its bounds as initializers, inverted residual blocks with their residual `Add`, then
GlobalAveragePool, Flatten and the classifier `Gemm` (torchvision's `classifier.1`). Parameter
names are torchvision's `state_dict` keys (`features.3.conv.1.0.weight`), so most are longer than
the plan format's 24 bytes. Values: PyTorch's default init in distribution (uniform in
+-1/sqrt(fan_in)), BN at its initial state; weights do not matter for planning.

A model to measure planning on a real network, not a test fixture (its initializers are MBs):

    python scripts/mobilenet_v2.py OUT.onnx [RESOLUTION [WIDTH]]   # defaults 96, 0.35
    tapeplan plan --onnx OUT.onnx --batch 8 --optimizer adam --lr 0.001 -o mbv2.plan
    tapeplan plan --onnx OUT.onnx --batch 8 --trainable 'classifier.*' -o head.plan
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from onnx_models import BATCH, Graph  # noqa: E402

# torchvision's inverted residual settings: expansion t, channels c, repeats n, stride s.
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1)]


def make_divisible(v, divisor=8):
    """torchvision's `_make_divisible`."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def batch_norm(g, h, prefix, c):
    s = g.init(f"{prefix}.weight", np.ones(c))
    b = g.init(f"{prefix}.bias", np.zeros(c))
    m = g.init(f"{prefix}.running_mean", np.zeros(c))
    v = g.init(f"{prefix}.running_var", np.ones(c))
    return g.node("BatchNormalization", [h, s, b, m, v], f"/{prefix}/BatchNormalization",
                  epsilon=1e-5, momentum=0.9, training_mode=0)


def conv_bn(g, h, prefix, c_in, c_out, k, stride, groups=1, relu6=True):
    """torchvision's `Conv2dNormActivation`: `prefix.0` conv (no bias), `prefix.1` BN, ReLU6."""
    fan_in = (c_in // groups) * k * k
    w = g.uniform(f"{prefix}.0.weight", (c_out, c_in // groups, k, k), fan_in)
    h = g.node("Conv", [h, w], f"/{prefix}/0/Conv", kernel_shape=[k, k],
               strides=[stride, stride], pads=[k // 2] * 4, group=groups)
    h = batch_norm(g, h, f"{prefix}.1", c_out)
    if relu6:
        lo = g.init(f"{prefix}.2.min", np.array(0.0))
        hi = g.init(f"{prefix}.2.max", np.array(6.0))
        h = g.node("Clip", [h, lo, hi], f"/{prefix}/2/Clip")
    return h


def mobilenet_v2(resolution, width, classes=10):
    g = Graph("mobilenet_v2", 7)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH, 3, resolution, resolution])
    c_in = make_divisible(32 * width)
    h = conv_bn(g, "input", "features.0", 3, c_in, 3, 2)
    i = 1
    for t, c, n, s in SETTINGS:
        c_out = make_divisible(c * width)
        for j in range(n):
            stride = s if j == 0 else 1
            hidden = c_in * t
            block_in = h
            p = f"features.{i}.conv"
            k = 0
            if t != 1:
                h = conv_bn(g, h, f"{p}.{k}", c_in, hidden, 1, 1)
                k += 1
            h = conv_bn(g, h, f"{p}.{k}", hidden, hidden, 3, stride, groups=hidden)
            w = g.uniform(f"{p}.{k + 1}.weight", (c_out, hidden, 1, 1), hidden)
            h = g.node("Conv", [h, w], f"/{p}/{k + 1}/Conv", kernel_shape=[1, 1])
            h = batch_norm(g, h, f"{p}.{k + 2}", c_out)
            if stride == 1 and c_in == c_out:
                h = g.node("Add", [block_in, h], f"/features.{i}/Add")
            c_in = c_out
            i += 1
    last = make_divisible(1280 * max(1.0, width))
    h = conv_bn(g, h, f"features.{i}", c_in, last, 1, 1)
    h = g.node("GlobalAveragePool", [h], "/GlobalAveragePool")
    h = g.node("Flatten", [h], "/Flatten", axis=1)
    y = g.linear(h, "classifier.1", last, classes)
    return g.model([x], y, classes)


def main():
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__)
    resolution = int(sys.argv[2]) if len(sys.argv) > 2 else 96
    width = float(sys.argv[3]) if len(sys.argv) > 3 else 0.35
    onnx.save(mobilenet_v2(resolution, width), sys.argv[1])
    print(f"wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
