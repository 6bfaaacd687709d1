"""The JAX worker of `cargo xtask bench --peers` (issue 15; docs/benchmarks.md, "Against JAX").

Usage: peers_bench.py DIR

Reads the workloads `DIR/W1.safetensors`, `W2`, `W3` that `peers export` (planner-host's
example) wrote: initial parameters, every step's batch in batch order, the definition in the
metadata. Compiles each workload two ways, warms them up, prints `ready jax-<version>`, then
answers each line `run W<n> jax-jit|jax-scan` read on standard input with one line, the same as
the tapeplan worker's:

    result W<n> <system> ns_per_step=... loss_last_epoch=... loss_final=... param_abs_sum=... accuracy=...

- `jax-jit`: one compiled call per training step (`jax.jit` of the step, parameters donated),
  called from a Python loop; the time ends when the last step's results are ready.
- `jax-scan`: every step in one compiled call (`jax.lax.scan` over the steps).

Both train from the file's initial parameters over every step of the file; the time covers the
steps only (the initial parameters are put on the device before the clock starts). Set
`XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1` (one thread) and
pin the process with `taskset`; the xtask does both.

The models, losses and optimizers follow issue 15's definitions and tapeplan's (PyTorch's
documented formulas): dense layers `y = x W + b` with `W` `[fan_in, fan_out]`; softmax
cross-entropy averaged over the batch; mean squared error over every element; SGD `p - lr g`;
Adam `p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`.
"""

import os
import sys
import time

os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

WORKLOADS = ["W1", "W2", "W3"]
SYSTEMS = ["jax-jit", "jax-scan"]


class Workload:
    """A workload read from its file, with its compiled step and loop."""

    def __init__(self, path, wid):
        self.id = wid
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        self.sizes = [int(s) for s in meta["sizes"].split(",")]
        self.activation = {"tanh": jnp.tanh, "relu": jax.nn.relu}[meta["activation"]]
        self.loss = meta["loss"]
        self.optimizer = meta["optimizer"]
        self.lr = np.float32(float(meta["lr"]))
        self.steps_per_epoch = int(meta["steps_per_epoch"])
        self.steps = self.steps_per_epoch * int(meta["epochs"])
        layers = len(self.sizes) - 1
        self.init = [
            tensors[f"init.{k}{i + 1}"] for i in range(layers) for k in ("w", "b")
        ]
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
        self.jit_step = jax.jit(self.step, donate_argnums=(0,))
        self.scan = jax.jit(
            lambda state, xs, ys: jax.lax.scan(self.scan_body, state, (xs, ys)),
            donate_argnums=(0,),
        )

    def logits(self, params, x):
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
        elif system == "jax-scan":
            start = time.perf_counter_ns()
            state, losses = self.scan(state, self.xs, self.ys)
            jax.block_until_ready((state, losses))
            elapsed = time.perf_counter_ns() - start
            losses = np.asarray(losses, dtype=np.float64)
        else:
            raise ValueError(f"unknown system {system!r} ({', '.join(SYSTEMS)})")
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
            pred = np.argmax(np.asarray(self.logits(params, jnp.asarray(tx))), axis=1)
            figures["accuracy"] = f"{(pred == labels).mean():.5f}"
        return " ".join(f"{k}={v}" for k, v in figures.items())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: peers_bench.py DIR")
    work = {w: Workload(os.path.join(sys.argv[1], f"{w}.safetensors"), w) for w in WORKLOADS}
    for w in work.values():
        for system in SYSTEMS:
            w.train(system)  # compile and warm up
    print(f"ready jax-{jax.__version__}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words == ["quit"]:
            break
        if len(words) != 3 or words[0] != "run" or words[1] not in work:
            sys.exit(f"unknown command {line.strip()!r} (run W<n> {'|'.join(SYSTEMS)}, quit)")
        print(f"result {words[1]} {words[2]} {work[words[1]].train(words[2])}", flush=True)


if __name__ == "__main__":
    main()
