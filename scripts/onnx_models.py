"""The five ONNX test models of issue 13, written the way `torch.onnx.export` writes models.

PyTorch does not install on these machines, so the graphs are built with the `onnx` helper API
in the shape torch's exporter gives them: initializers named by the module's `state_dict` keys
(`fc1.weight`, `bn1.running_mean`), nodes named by their module path (`/fc1/Gemm`), a named
(`dim_param`) batch dimension `batch`, `Constant` and `Identity` nodes, `x.view(x.size(0), -1)`
as Shape -> Gather -> Unsqueeze -> Concat -> Reshape, `nn.Linear` as Gemm with `transB=1`, Conv
with `auto_pad`, BatchNormalization with `training_mode=0` and its running statistics as
initializers. Initial values follow PyTorch's default initializations in distribution (uniform
in +-1/sqrt(fan_in) for Linear and Conv, N(0, 1) for Embedding), drawn from numpy with a fixed
seed, so the files are reproducible.

IR version 8 and opset 17 (torch's default export opset): what ONNX Runtime 1.19 accepts.

Usage: python scripts/onnx_models.py OUT_DIR   (writes OUT_DIR/<name>.onnx for each model)
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
OPSET = 17
BATCH = "batch"


class Graph:
    """A graph under construction: nodes, initializers, a counter for Constant names."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.consts = 0

    def node(self, op, inputs, name, outputs=None, **attrs):
        out = outputs or [f"{name}_output_0"]
        self.nodes.append(helper.make_node(op, inputs, out, name=name, **attrs))
        return out[0]

    def constant(self, value, scope):
        """A `Constant` node (torch writes shapes and indices as these)."""
        name = f"{scope}/Constant" + (f"_{self.consts}" if self.consts else "")
        self.consts += 1
        arr = np.array(value, dtype=np.int64)
        return self.node("Constant", [], name, value=numpy_helper.from_array(arr, name=""))

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name=name))
        return name

    def uniform(self, name, shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return self.init(name, self.rng.uniform(-bound, bound, size=shape))

    def linear(self, x, prefix, fan_in, fan_out):
        w = self.uniform(f"{prefix}.weight", (fan_out, fan_in), fan_in)
        b = self.uniform(f"{prefix}.bias", (fan_out,), fan_in)
        return self.node("Gemm", [x, w, b], f"/{prefix}/Gemm", alpha=1.0, beta=1.0, transB=1)

    def conv(self, x, prefix, c_in, c_out, kernel, groups=1, **attrs):
        fan_in = (c_in // groups) * int(np.prod(kernel))
        w = self.uniform(f"{prefix}.weight", (c_out, c_in // groups, *kernel), fan_in)
        b = self.uniform(f"{prefix}.bias", (c_out,), fan_in)
        return self.node(
            "Conv", [x, w, b], f"/{prefix}/Conv",
            kernel_shape=list(kernel), group=groups, **attrs,
        )

    def view_flat(self, x, scope):
        """`x.view(x.size(0), -1)` as torch exports it."""
        shape = self.node("Shape", [x], f"{scope}/Shape")
        zero = self.constant(0, scope)
        n = self.node("Gather", [shape, zero], f"{scope}/Gather", axis=0)
        axes = self.constant([0], scope)
        n1 = self.node("Unsqueeze", [n, axes], f"{scope}/Unsqueeze")
        minus1 = self.constant([-1], scope)
        cat = self.node("Concat", [n1, minus1], f"{scope}/Concat", axis=0)
        return self.node("Reshape", [x, cat], f"{scope}/Reshape")

    def model(self, inputs, output, out_width):
        out = helper.make_tensor_value_info("output", TensorProto.FLOAT, [BATCH, out_width])
        self.node("Identity", [output], "/Identity", outputs=["output"])
        graph = helper.make_graph(self.nodes, self.name, inputs, [out], initializer=self.inits)
        m = helper.make_model(
            graph,
            producer_name="pytorch",
            producer_version="2.5.0",
            opset_imports=[helper.make_opsetid("", OPSET)],
        )
        m.ir_version = IR_VERSION
        onnx.checker.check_model(m, full_check=True)
        return m


def mlp():
    """`nn.Sequential`-like MLP: Linear(16, 32) -> ReLU -> Linear(32, 4)."""
    g = Graph("mlp", 1)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH, 16])
    h = g.linear("input", "fc1", 16, 32)
    h = g.node("Relu", [h], "/relu/Relu")
    y = g.linear(h, "fc2", 32, 4)
    return g.model([x], y, 4)


def cnn1d():
    """Conv1d(2, 8, 5, padding='same') -> ReLU -> MaxPool1d(2) -> Conv1d(8, 8, 3) -> ReLU ->
    view(N, -1) -> Linear(8*14, 5)."""
    g = Graph("cnn1d", 2)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH, 2, 32])
    h = g.conv("input", "conv1", 2, 8, (5,), auto_pad="SAME_UPPER", strides=[1], dilations=[1])
    h = g.node("Relu", [h], "/relu1/Relu")
    h = g.node("MaxPool", [h], "/pool/MaxPool", kernel_shape=[2], strides=[2], pads=[0, 0])
    h = g.conv(h, "conv2", 8, 8, (3,), pads=[0, 0], strides=[1], dilations=[1])
    h = g.node("Relu", [h], "/relu2/Relu")
    h = g.view_flat(h, "/flatten")
    y = g.linear(h, "fc", 8 * 14, 5)
    return g.model([x], y, 5)


def cnn2d_bn():
    """Conv2d(1, 4, 3, padding='same') -> BatchNorm2d(4) (eval) -> ReLU -> MaxPool2d(2) ->
    view(N, -1) -> Linear(4*4*4, 3)."""
    g = Graph("cnn2d_bn", 3)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH, 1, 8, 8])
    h = g.conv("input", "conv", 1, 4, (3, 3), auto_pad="SAME_UPPER")
    scale = g.init("bn.weight", g.rng.uniform(0.5, 1.5, size=4))
    bias = g.init("bn.bias", g.rng.uniform(-0.5, 0.5, size=4))
    mean = g.init("bn.running_mean", g.rng.uniform(-0.2, 0.2, size=4))
    var = g.init("bn.running_var", g.rng.uniform(0.5, 1.5, size=4))
    h = g.node(
        "BatchNormalization", [h, scale, bias, mean, var], "/bn/BatchNormalization",
        epsilon=1e-5, momentum=0.9, training_mode=0,
    )
    h = g.node("Relu", [h], "/relu/Relu")
    h = g.node("MaxPool", [h], "/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    h = g.view_flat(h, "/flatten")
    y = g.linear(h, "fc", 4 * 4 * 4, 3)
    return g.model([x], y, 3)


def dwsep():
    """A depthwise-separable block: Conv2d(4, 4, 3, groups=4, padding=1) -> ReLU ->
    Conv2d(4, 8, 1) -> ReLU -> AdaptiveAvgPool2d(1) -> Flatten -> Linear(8, 3)."""
    g = Graph("dwsep", 4)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH, 4, 6, 6])
    h = g.conv("input", "dw", 4, 4, (3, 3), groups=4, pads=[1, 1, 1, 1])
    h = g.node("Relu", [h], "/relu1/Relu")
    h = g.conv(h, "pw", 4, 8, (1, 1), auto_pad="VALID")
    h = g.node("Relu", [h], "/relu2/Relu")
    h = g.node("GlobalAveragePool", [h], "/pool/GlobalAveragePool")
    h = g.node("Flatten", [h], "/flatten/Flatten", axis=1)
    y = g.linear(h, "fc", 8, 3)
    return g.model([x], y, 3)


def text():
    """Embedding(20, 8) on INT64 token ids -> mean over the sequence -> Linear(8, 3); the
    embedding table reaches Gather through an `Identity` (as torch writes a tied weight)."""
    g = Graph("text", 5)
    x = helper.make_tensor_value_info("tokens", TensorProto.INT64, [BATCH, 6])
    table = g.init("embedding.weight", g.rng.standard_normal(size=(20, 8)))
    t = g.node("Identity", [table], "/embedding/Identity")
    h = g.node("Gather", [t, "tokens"], "/embedding/Gather", axis=0)
    h = g.node("ReduceMean", [h], "/ReduceMean", axes=[1], keepdims=0)
    y = g.linear(h, "fc", 8, 3)
    return g.model([x], y, 3)


MODELS = {"mlp": mlp, "cnn1d": cnn1d, "cnn2d_bn": cnn2d_bn, "dwsep": dwsep, "text": text}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, make in MODELS.items():
        onnx.save(make(), os.path.join(out, f"{name}.onnx"))
        print(f"wrote {out}/{name}.onnx")


if __name__ == "__main__":
    main()
