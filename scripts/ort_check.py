"""ONNX Runtime's side of issue 13's gradient check: per test model (scripts/onnx_models.py), the
training artifacts (`generate_artifacts`: the model's graph, the loss, ORT's own gradient graph,
an SGD optimizer), then N steps over fixed batches from the initializers as initial parameters:
each step's loss and gradients (per parameter, by name) before the update, the parameters after
the N steps, and the forward outputs of the untouched model by `onnxruntime` inference.

The tapeplan side (planner-host/tests/onnx_ort.rs) reads MODELS_DIR/<name>.ort.json and
compares. `cargo xtask ort-check` runs both.

`onnxruntime-training-cpu` 1.19.2's package `onnxruntime.training` imports PyTorch in its
`__init__` (microsoft/onnxruntime issue 22070), and PyTorch does not install here: the package
is registered as an empty module whose path is the installed directory, so that its submodules
`artifacts` and `api` load from the installed, unmodified files without running that `__init__`.

Usage: python scripts/ort_check.py MODELS_DIR   (reads and writes there)
"""

import contextlib
import importlib
import json
import os
import sys
import tempfile
import types

import numpy as np
import onnx
import onnxruntime

STEPS = 5
LR = 0.1
BATCH = 4


def training_modules():
    """`onnxruntime.training.artifacts` and `.api` without the package's `__init__`."""
    pkg_dir = os.path.join(os.path.dirname(onnxruntime.__file__), "training")
    if "onnxruntime.training" not in sys.modules:
        pkg = types.ModuleType("onnxruntime.training")
        pkg.__path__ = [pkg_dir]
        sys.modules["onnxruntime.training"] = pkg
    artifacts = importlib.import_module("onnxruntime.training.artifacts")
    api = importlib.import_module("onnxruntime.training.api")
    return artifacts, api


def f32s(array):
    """An array's elements as JSON numbers: nine significant digits, which name every `f32`
    exactly (the Rust side reads them back as the same `f32`)."""
    return [float(f"{v:.9g}") for v in np.asarray(array, dtype=np.float32).ravel().tolist()]


def explicit_pads(model):
    """A copy of `model` whose Conv nodes spell `auto_pad` as the explicit pads it means.

    ONNX Runtime 1.19's training graph computes a wrong weight gradient for a Conv with
    `auto_pad=SAME_UPPER` (it differs from the same graph with the equivalent explicit pads,
    whose gradient tapeplan's matches to a few ulp; the forward and the bias gradient are
    right): the training artifacts are generated from this copy. The inference check runs the
    original. Stride 1 and dilation 1 only (the test models'): `SAME_*` pads `k - 1` in total,
    the extra one at the end (`SAME_UPPER`) or the start (`SAME_LOWER`); `VALID` pads nothing.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        attrs = {a.name: a for a in n.attribute}
        if "auto_pad" not in attrs:
            continue
        mode = attrs["auto_pad"].s.decode()
        kernel = list(attrs["kernel_shape"].ints)
        for a in ("strides", "dilations"):
            if a in attrs and any(v != 1 for v in attrs[a].ints):
                raise SystemExit(f"{n.name}: auto_pad with {a} != 1 is not spelled out here")
        begin, end = [], []
        for k in kernel:
            total = k - 1 if mode.startswith("SAME") else 0
            small, large = total // 2, total - total // 2
            begin.append(small if mode != "SAME_LOWER" else large)
            end.append(large if mode != "SAME_LOWER" else small)
        n.attribute.remove(attrs["auto_pad"])
        n.attribute.append(onnx.helper.make_attribute("pads", begin + end))
    return m


@contextlib.contextmanager
def quiet_info_logs():
    """Drops ONNX Runtime's informational log lines (`[I:onnxruntime…]`: one per graph
    transformer) that `generate_artifacts` prints on the process's stderr whatever the logger
    severity; every other line is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines():
                if "[I:onnxruntime" not in line:
                    print(line, file=sys.stderr)


def session_options():
    """One thread and deterministic kernels: the same numbers on every run; quiet."""
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.use_deterministic_compute = True
    so.log_severity_level = 3
    return so


def pin_versions(directory):
    """`generate_artifacts` builds the optimizer graph with the installed `onnx`'s defaults (IR
    14 for onnx 1.23), which ONNX Runtime 1.19 refuses (IR at most 10, default opset at most
    21): every artifact graph is pinned down to those, the graphs being unchanged otherwise."""
    for f in os.listdir(directory):
        if not f.endswith(".onnx"):
            continue
        path = os.path.join(directory, f)
        m = onnx.load(path)
        m.ir_version = min(m.ir_version, 10)
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = min(o.version, 21)
        onnx.save(m, path)


def batches(model, seed, loss):
    """STEPS fixed batches: inputs by name (float32 uniform in [-1, 1), or INT64 ids below the
    embedding's row count) and targets: INT64 labels below the output width for "ce", float32
    values uniform in [-1, 1) shaped as the output for "mse"."""
    rng = np.random.default_rng(seed)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    out_width = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    result = []
    for _ in range(STEPS):
        feeds = {}
        for inp in model.graph.input:
            if inp.name in inits:
                continue
            tt = inp.type.tensor_type
            dims = [BATCH if d.dim_param else d.dim_value for d in tt.shape.dim]
            if tt.elem_type == onnx.TensorProto.INT64:
                rows = inits["embedding.weight"].shape[0]
                feeds[inp.name] = rng.integers(0, rows, size=dims, dtype=np.int64)
            else:
                feeds[inp.name] = rng.uniform(-1.0, 1.0, size=dims).astype(np.float32)
        if loss == "ce":
            labels = rng.integers(0, out_width, size=[BATCH], dtype=np.int64)
        else:
            labels = rng.uniform(-1.0, 1.0, size=[BATCH, out_width]).astype(np.float32)
        result.append((feeds, labels))
    return result


def trainable(model):
    """The FLOAT initializers that are weights: every one but BatchNormalization's running
    statistics (inputs 3 and 4), which are buffers."""
    stats = set()
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            stats.update(n.input[3:5])
    return [
        i.name
        for i in model.graph.initializer
        if i.data_type == onnx.TensorProto.FLOAT and i.name not in stats
    ]


LOSSES = {"ce": "CrossEntropyLoss", "mse": "MSELoss"}

# The models checked with a regression head (MSE on float targets) too.
MSE_MODELS = {"mlp"}


def check(path, artifacts, api, kind="ce"):
    model = onnx.load(path)
    name = os.path.splitext(os.path.basename(path))[0]
    params = trainable(model)
    frozen = [i.name for i in model.graph.initializer if i.name not in params]
    data = batches(model, seed=100 + sum(map(ord, name)) + (0 if kind == "ce" else 1), loss=kind)
    record = {"model": name, "lr": LR, "batch": BATCH, "loss": kind}

    # The forward outputs by inference of the untouched model.
    sess = onnxruntime.InferenceSession(
        path, session_options(), providers=["CPUExecutionProvider"]
    )
    forward = sess.run(None, data[0][0])[0]

    with tempfile.TemporaryDirectory() as tmp:
        with quiet_info_logs():
            artifacts.generate_artifacts(
                explicit_pads(model),
                requires_grad=params,
                frozen_params=frozen,
                loss=getattr(artifacts.LossType, LOSSES[kind]),
                optimizer=artifacts.OptimType.SGD,
                artifact_directory=tmp,
            )
        pin_versions(tmp)
        state = api.CheckpointState.load_checkpoint(os.path.join(tmp, "checkpoint"))
        module = api.Module(
            os.path.join(tmp, "training_model.onnx"),
            state,
            os.path.join(tmp, "eval_model.onnx"),
            session_options=session_options(),
        )
        optimizer = api.Optimizer(os.path.join(tmp, "optimizer_model.onnx"), module)
        optimizer.set_learning_rate(LR)
        module.train()
        steps = []
        input_names = module.input_names()
        for feeds, labels in data:
            args = [feeds[n] for n in input_names[:-1]] + [labels]
            loss = module(*args)
            grads = {p: f32s(state.parameters[p].grad) for p in params}
            steps.append(
                {
                    "inputs": {k: f32s(v) for k, v in feeds.items()},
                    "labels": f32s(labels),
                    "loss": float(loss),
                    "grads": grads,
                }
            )
            optimizer.step()
            module.lazy_reset_grad()
        after = {p: f32s(state.parameters[p].data) for p in params}
    record.update(
        {
            "trainable": params,
            "frozen": frozen,
            "forward": f32s(forward),
            "steps": steps,
            "params_after": after,
        }
    )
    suffix = "" if kind == "ce" else f".{kind}"
    out = os.path.join(os.path.dirname(path), f"{name}{suffix}.ort.json")
    with open(out, "w") as f:
        json.dump(record, f)
    print(f"{name} ({kind}): losses {[round(s['loss'], 6) for s in steps]} -> {out}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    onnxruntime.set_default_logger_severity(3)
    artifacts, api = training_modules()
    d = sys.argv[1]
    for f in sorted(os.listdir(d)):
        if f.endswith(".onnx"):
            check(os.path.join(d, f), artifacts, api)
            if f[: -len(".onnx")] in MSE_MODELS:
                check(os.path.join(d, f), artifacts, api, kind="mse")


if __name__ == "__main__":
    main()
