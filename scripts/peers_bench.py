"""The JAX and ONNX Runtime worker of `cargo xtask bench --peers` (issue 15; docs/benchmarks.md,
"Against JAX and ONNX Runtime").

Usage: peers_bench.py DIR

Reads the workloads `DIR/W1.safetensors`, `W2`, `W3`, `C1`, `C2` that `peers export` (planner-host's
example) wrote: initial parameters, every step's batch in batch order, the definition in the
metadata. Compiles each workload three ways, warms them up, prints `ready jax-<version>
ort-<version>`, then answers each line `run W<n> jax-jit|jax-scan|ort` read on standard input
with one line, the same as the tapeplan worker's:

    result W<n> <system> ns_per_step=... loss_last_epoch=... loss_final=... param_abs_sum=... accuracy=...

- `jax-jit`: one compiled call per training step (`jax.jit` of the step, parameters donated),
  called from a Python loop; the time ends when the last step's results are ready.
- `jax-scan`: every step in one compiled call (`jax.lax.scan` over the steps).
- `ort`: ONNX Runtime's on-device training (`onnxruntime-training-cpu`): the model as ONNX
  (MatMul, Add, Tanh/Relu; for C1 Conv, Relu, Reshape and Gemm; for C2 MaxPool too), its
  training artifacts made by `generate_artifacts` (the loss
  `CrossEntropyLoss`/`MSELoss`, the optimizer SGD or AdamW with `adam_mode = 0`, weight decay 0
  and `eps = 1e-8`: PyTorch's Adam), one `Module` call, `Optimizer.step` and `lazy_reset_grad`
  per step, one intra-op thread.

Both train from the file's initial parameters over every step of the file; the time covers the
steps only (the initial parameters are put on the device before the clock starts). Set
`XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1` (one thread) and
pin the process with `taskset`; the xtask does both.

onnxruntime-training's package `__init__` imports PyTorch, which does not install here
(microsoft/onnxruntime issue 22070); its `artifacts` and `api` modules do not need it, so they
are imported from the installed, unmodified package under a bare `onnxruntime.training`
package object that skips that `__init__`.

The models, losses and optimizers follow issue 15's definitions and tapeplan's (PyTorch's
documented formulas): dense layers `y = x W + b` with `W` `[fan_in, fan_out]`; C1, MNIST-1D's
CNN (three `Conv1d(·, 25, k, stride 2, padding 1)` with k = 5, 3, 3, ReLU after each, flattened
channel-major, `Linear(125, 10)` with PyTorch's `[out, in]` weight), its parameters under
PyTorch's names (`0.weight`, `0.bias`, `2.*`, `4.*`, `7.*`); C2, the digits' 2-D CNN
(`Conv2d(1, 16, 3, padding 1)`, ReLU, `MaxPool2d(2)`, `Conv2d(16, 32, 3, padding 1)`, ReLU,
`MaxPool2d(2)`, flattened channel-major, `Linear(128, 10)`; `0.*`, `3.*`, `7.*`); softmax
cross-entropy averaged over the batch; mean squared error over every element; SGD `p - lr g`;
Adam `p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`.
"""

import contextlib
import os
import sys
import tempfile
import time
import types

os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

_training = types.ModuleType("onnxruntime.training")
_training.__path__ = [os.path.join(os.path.dirname(onnxruntime.__file__), "training")]
sys.modules.setdefault("onnxruntime.training", _training)
from onnxruntime.training import artifacts, onnxblock  # noqa: E402
from onnxruntime.training.api import CheckpointState, Module, Optimizer  # noqa: E402

onnxruntime.set_default_logger_severity(3)

WORKLOADS = ["W1", "W2", "W3", "C1", "C2"]

# The CNNs' parameters, in the order of their `logits`: C1 (`mnist1d_cnn`), C2 (`digits_cnn`).
CNN_PARAMS = {
    "mnist1d_cnn": ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias",
                    "7.weight", "7.bias"],
    "digits_cnn": ["0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias"],
}
SYSTEMS = ["jax-jit", "jax-scan", "ort"]


@contextlib.contextmanager
def quiet_stderr():
    """File descriptor 2 to /dev/null: the gradient-graph builder of `generate_artifacts` logs
    every graph transformer at the info level from native code, whatever the Python settings.
    An exception still reaches the caller (and is printed) once the descriptor is restored."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class Workload:
    """A workload read from its file, with its compiled step and loop."""

    def __init__(self, path, wid):
        self.id = wid
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        self.model = meta.get("model", "mlp")
        self.sizes = [int(s) for s in meta["sizes"].split(",")]
        self.activation = {"tanh": jnp.tanh, "relu": jax.nn.relu}[meta["activation"]]
        self.loss = meta["loss"]
        self.optimizer = meta["optimizer"]
        self.lr = np.float32(float(meta["lr"]))
        self.steps_per_epoch = int(meta["steps_per_epoch"])
        self.steps = self.steps_per_epoch * int(meta["epochs"])
        if self.model in CNN_PARAMS:
            self.names = CNN_PARAMS[self.model]
        else:
            layers = len(self.sizes) - 1
            self.names = [f"{k}{i + 1}" for i in range(layers) for k in ("w", "b")]
        self.init = [tensors[f"init.{n}"] for n in self.names]
        x = tensors["x"][: self.steps]
        y = tensors["y"][: self.steps]
        if self.loss == "ce":
            y = y.astype(np.int32)
        self.xs, self.ys = jnp.asarray(x), jnp.asarray(y)
        # One device array per step, made before any clock starts.
        self.x_steps = [self.xs[i] for i in range(self.steps)]
        self.y_steps = [self.ys[i] for i in range(self.steps)]
        self.test = None
        if "test.x" in tensors:
            self.test = (tensors["test.x"], tensors["test.labels"].astype(np.int64))
        self.ort_dir = tempfile.mkdtemp(prefix=f"peers-ort-{wid}-")
        self.ort_artifacts()
        self.jit_step = jax.jit(self.step, donate_argnums=(0,))
        self.scan = jax.jit(
            lambda state, xs, ys: jax.lax.scan(self.scan_body, state, (xs, ys)),
            donate_argnums=(0,),
        )

    def ort_cnn_graph(self, batch):
        """C1 as an ONNX graph: Conv, Relu three times, Reshape, Gemm (`transB`)."""
        nodes = [helper.make_node("Reshape", ["x", "shape_in"], ["h0"])]
        h = "h0"
        for i, conv in enumerate(["0", "2", "4"]):
            nodes.append(helper.make_node(
                "Conv", [h, f"{conv}.weight", f"{conv}.bias"], [f"c{i}"],
                strides=[2], pads=[1, 1]))
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"h{i + 1}"]))
            h = f"h{i + 1}"
        nodes.append(helper.make_node("Reshape", [h, "shape_flat"], ["flat"]))
        nodes.append(helper.make_node("Gemm", ["flat", "7.weight", "7.bias"], ["logits"],
                                      transB=1))
        consts = [
            numpy_helper.from_array(np.array([batch, 1, self.sizes[0]], np.int64), "shape_in"),
            numpy_helper.from_array(np.array([batch, -1], np.int64), "shape_flat"),
        ]
        return nodes, consts

    def ort_digits_cnn_graph(self, batch):
        """C2 as an ONNX graph: (Conv, Relu, MaxPool) twice, Reshape, Gemm (`transB`)."""
        side = int(round(self.sizes[0] ** 0.5))
        nodes = [helper.make_node("Reshape", ["x", "shape_in"], ["h0"])]
        h = "h0"
        for i, conv in enumerate(["0", "3"]):
            nodes.append(helper.make_node(
                "Conv", [h, f"{conv}.weight", f"{conv}.bias"], [f"c{i}"], pads=[1, 1, 1, 1]))
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
            nodes.append(helper.make_node("MaxPool", [f"r{i}"], [f"h{i + 1}"],
                                          kernel_shape=[2, 2], strides=[2, 2]))
            h = f"h{i + 1}"
        nodes.append(helper.make_node("Reshape", [h, "shape_flat"], ["flat"]))
        nodes.append(helper.make_node("Gemm", ["flat", "7.weight", "7.bias"], ["logits"],
                                      transB=1))
        consts = [
            numpy_helper.from_array(np.array([batch, 1, side, side], np.int64), "shape_in"),
            numpy_helper.from_array(np.array([batch, -1], np.int64), "shape_flat"),
        ]
        return nodes, consts

    def ort_artifacts(self):
        """The ONNX model (logits of `x`) and ONNX Runtime's training artifacts for it."""
        layers = len(self.sizes) - 1
        batch = self.xs.shape[1]
        if self.model in CNN_PARAMS:
            graph = {"mnist1d_cnn": self.ort_cnn_graph, "digits_cnn": self.ort_digits_cnn_graph}
            nodes, consts = graph[self.model](batch)
            self.ort_model(nodes, consts, batch)
            return
        consts = []
        act = {jnp.tanh: "Tanh", jax.nn.relu: "Relu"}[self.activation]
        nodes, h = [], "x"
        for i in range(layers):
            nodes.append(helper.make_node("MatMul", [h, f"w{i + 1}"], [f"mm{i + 1}"]))
            out = "logits" if i == layers - 1 else f"z{i + 1}"
            nodes.append(helper.make_node("Add", [f"mm{i + 1}", f"b{i + 1}"], [out]))
            if i < layers - 1:
                nodes.append(helper.make_node(act, [out], [f"h{i + 1}"]))
                out = f"h{i + 1}"
            h = out
        self.ort_model(nodes, consts, batch)

    def ort_model(self, nodes, consts, batch):
        """Training artifacts for the graph of `nodes` (parameters: `self.names`)."""
        names = self.names
        graph = helper.make_graph(
            nodes,
            self.model,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, self.sizes[0]])],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, self.sizes[-1]])],
            [numpy_helper.from_array(v, n) for n, v in zip(names, self.init)] + consts,
        )
        # IR version 10: the newest this ONNX Runtime reads.
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
        if self.optimizer == "adam":
            optim = onnxblock.optim.AdamW(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        else:
            optim = artifacts.OptimType.SGD
        loss = {"ce": artifacts.LossType.CrossEntropyLoss, "mse": artifacts.LossType.MSELoss}
        with quiet_stderr():
            artifacts.generate_artifacts(
                model,
                requires_grad=names,
                loss=loss[self.loss],
                optimizer=optim,
                artifact_directory=self.ort_dir,
            )
        # The optimizer model is written with onnx's newest IR version: set the newest this
        # ONNX Runtime reads. The AdamW block writes HF's AdamW (`adam_mode = 1`); PyTorch's
        # Adam is `adam_mode = 0`.
        path = os.path.join(self.ort_dir, "optimizer_model.onnx")
        m = onnx.load(path)
        m.ir_version = 10
        for node in m.graph.node:
            if node.op_type == "AdamWOptimizer":
                for a in node.attribute:
                    if a.name == "adam_mode":
                        a.i = 0
        onnx.save(m, path)
        self.ort_y = [np.asarray(y).astype(np.int64) if self.loss == "ce" else np.asarray(y)
                      for y in self.y_steps]
        self.ort_x = [np.asarray(x) for x in self.x_steps]

    def train_ort(self):
        """One training run through ONNX Runtime; the losses, the time and the parameters."""
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        state = CheckpointState.load_checkpoint(os.path.join(self.ort_dir, "checkpoint"))
        module = Module(
            os.path.join(self.ort_dir, "training_model.onnx"),
            state,
            os.path.join(self.ort_dir, "eval_model.onnx"),
            session_options=opts,
        )
        optimizer = Optimizer(os.path.join(self.ort_dir, "optimizer_model.onnx"), module)
        optimizer.set_learning_rate(float(self.lr))
        module.train()
        losses = np.empty(self.steps)
        start = time.perf_counter_ns()
        for i, (x, y) in enumerate(zip(self.ort_x, self.ort_y)):
            losses[i] = module(x, y)
            optimizer.step()
            module.lazy_reset_grad()
        elapsed = time.perf_counter_ns() - start
        params = [
            np.asarray(state.parameters[n].data).reshape(v.shape)
            for n, v in zip(self.names, self.init)
        ]
        return losses, elapsed, params

    def logits(self, params, x):
        if self.model == "mnist1d_cnn":
            h = x.reshape(x.shape[0], 1, -1)
            for i in range(3):
                h = jax.lax.conv_general_dilated(
                    h, params[2 * i], window_strides=(2,), padding=[(1, 1)],
                    dimension_numbers=("NCH", "OIH", "NCH"))
                h = jax.nn.relu(h + params[2 * i + 1][None, :, None])
            h = h.reshape(h.shape[0], -1)
            return h @ params[6].T + params[7]
        if self.model == "digits_cnn":
            side = int(round(self.sizes[0] ** 0.5))
            h = x.reshape(x.shape[0], 1, side, side)
            for i in range(2):
                h = jax.lax.conv_general_dilated(
                    h, params[2 * i], window_strides=(1, 1), padding=[(1, 1), (1, 1)],
                    dimension_numbers=("NCHW", "OIHW", "NCHW"))
                h = jax.nn.relu(h + params[2 * i + 1][None, :, None, None])
                h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                          "VALID")
            h = h.reshape(h.shape[0], -1)
            return h @ params[4].T + params[5]
        h = x
        layers = len(params) // 2
        for i in range(layers):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < layers - 1:
                h = self.activation(h)
        return h

    def loss_of(self, params, x, y):
        out = self.logits(params, x)
        if self.loss == "ce":
            logp = jax.nn.log_softmax(out, axis=-1)
            picked = jnp.take_along_axis(logp, y[:, None], axis=-1)
            return -jnp.mean(picked)
        return jnp.mean((out - y) ** 2)

    def state0(self):
        params = [jnp.asarray(p) for p in self.init]
        if self.optimizer == "adam":
            zeros = [jnp.zeros_like(p) for p in params]
            return (params, zeros, [jnp.zeros_like(p) for p in params], jnp.float32(0))
        return (params,)

    def step(self, state, x, y):
        params = state[0]
        loss, grads = jax.value_and_grad(self.loss_of)(params, x, y)
        if self.optimizer == "sgd":
            return ([p - self.lr * g for p, g in zip(params, grads)],), loss
        _, m, v, t = state
        b1, b2, eps = np.float32(0.9), np.float32(0.999), np.float32(1e-8)
        t = t + 1
        bc1 = 1 - b1**t
        bc2 = 1 - b2**t
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(m, grads)]
        v = [b2 * vi + (1 - b2) * g * g for vi, g in zip(v, grads)]
        params = [
            p - (self.lr / bc1) * mi / (jnp.sqrt(vi) / jnp.sqrt(bc2) + eps)
            for p, mi, vi in zip(params, m, v)
        ]
        return (params, m, v, t), loss

    def scan_body(self, state, xy):
        return self.step(state, *xy)

    def train(self, system):
        state = jax.block_until_ready(self.state0())
        if system == "jax-jit":
            losses = []
            start = time.perf_counter_ns()
            for x, y in zip(self.x_steps, self.y_steps):
                state, loss = self.jit_step(state, x, y)
                losses.append(loss)
            jax.block_until_ready((state, losses))
            elapsed = time.perf_counter_ns() - start
            losses = np.array([float(v) for v in losses])
        elif system == "ort":
            losses, elapsed, params = self.train_ort()
        elif system == "jax-scan":
            start = time.perf_counter_ns()
            state, losses = self.scan(state, self.xs, self.ys)
            jax.block_until_ready((state, losses))
            elapsed = time.perf_counter_ns() - start
            losses = np.asarray(losses, dtype=np.float64)
        else:
            raise ValueError(f"unknown system {system!r} ({', '.join(SYSTEMS)})")
        if system != "ort":
            params = [np.asarray(p) for p in state[0]]
        figures = {
            "ns_per_step": f"{elapsed / self.steps:.1f}",
            "loss_last_epoch": f"{losses[-self.steps_per_epoch:].mean():.7f}",
            "loss_final": f"{losses[-1]:.7f}",
            "param_abs_sum": f"{sum(np.abs(p).astype(np.float64).sum() for p in params):.5f}",
            "accuracy": "-",
        }
        if self.test is not None:
            tx, labels = self.test
            pred = np.argmax(np.asarray(self.logits(params, tx)), axis=1)
            figures["accuracy"] = f"{(pred == labels).mean():.5f}"
        return " ".join(f"{k}={v}" for k, v in figures.items())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: peers_bench.py DIR")
    work = {w: Workload(os.path.join(sys.argv[1], f"{w}.safetensors"), w) for w in WORKLOADS}
    for w in work.values():
        for system in SYSTEMS:
            w.train(system)  # compile and warm up
    print(f"ready jax-{jax.__version__} ort-{onnxruntime.__version__}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words == ["quit"]:
            break
        if len(words) != 3 or words[0] != "run" or words[1] not in work:
            sys.exit(f"unknown command {line.strip()!r} (run W<n> {'|'.join(SYSTEMS)}, quit)")
        print(f"result {words[1]} {words[2]} {work[words[1]].train(words[2])}", flush=True)


if __name__ == "__main__":
    main()
