"""An independent reference for the mnist1d example's accuracy: the same CNN, data, schedule
and optimizer (Greydanus 2020: three Conv1d with 25 channels, kernel 5/3/3, stride 2,
padding 1, ReLU, Linear(125, 10); cross-entropy; Adam lr 1e-2 with PyTorch's betas and eps,
weight decay 0; batch 100 taken in order from the 4000 training rows; 8001 steps, as the
paper repository's notebooks/train.py runs them: `total_steps: 8000` and
`for step in range(total_steps+1)`), written in JAX with PyTorch's default initialization
drawn from numpy, for a list of seeds. It prints each seed's test accuracy after the last step
(no selection on the test split), to show the spread that one fixed seed is drawn from.

Usage (a venv with jax[cpu] and numpy; safetensors for --init):
    python scripts/mnist1d_jax.py [SEED ...]
    python scripts/mnist1d_jax.py --init FILE.safetensors [...]

`--init` trains from initial parameters in a safetensors file under the model's `state_dict`
names (`0.weight`, `0.bias`, `2.*`, `4.*`, `7.*`), such as the `mnist1d` example writes with
`--write-init` from tapeplan's own initializer, instead of drawing them from numpy.
"""

import gzip
import os
import sys

import numpy as np

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

# The paper repository's schedule (greydanus/mnist1d, notebooks/train.py: `total_steps` 8000,
# stepped `range(total_steps+1)`).
STEPS = 8001

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "mnist1d.csv.gz")


def load():
    with gzip.open(DATA, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float64)
    x = rows[:, :40].astype(np.float32)[:, None, :]
    y = rows[:, 40].astype(np.int32)
    return x[:4000], y[:4000], x[4000:], y[4000:]


def init(seed):
    """PyTorch's reset_parameters: U(±1/sqrt(fan_in)) for weights and biases."""
    rng = np.random.default_rng(seed)

    def u(shape, fan_in):
        b = 1.0 / np.sqrt(fan_in)
        return jnp.asarray(rng.uniform(-b, b, size=shape).astype(np.float32))

    return {
        "c1w": u((25, 1, 5), 5), "c1b": u((25,), 5),
        "c2w": u((25, 25, 3), 75), "c2b": u((25,), 75),
        "c3w": u((25, 25, 3), 75), "c3b": u((25,), 75),
        "fw": u((10, 125), 125), "fb": u((10,), 125),
    }


def conv(x, w, b):
    y = jax.lax.conv_general_dilated(
        x, w, window_strides=(2,), padding=[(1, 1)], dimension_numbers=("NCH", "OIH", "NCH"))
    return y + b[None, :, None]


def logits(p, x):
    h = jax.nn.relu(conv(x, p["c1w"], p["c1b"]))
    h = jax.nn.relu(conv(h, p["c2w"], p["c2b"]))
    h = jax.nn.relu(conv(h, p["c3w"], p["c3b"]))
    h = h.reshape(h.shape[0], -1)
    return h @ p["fw"].T + p["fb"]


def loss(p, x, y):
    lp = jax.nn.log_softmax(logits(p, x))
    return -jnp.mean(jnp.take_along_axis(lp, y[:, None], axis=1))


@jax.jit
def step(p, m, v, t, x, y):
    """PyTorch's Adam (weight decay 0)."""
    g = jax.grad(loss)(p, x, y)
    b1, b2, eps, lr = 0.9, 0.999, 1e-8, 1e-2
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    p = jax.tree.map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), p, m, v)
    return p, m, v


def load_init(path):
    """Initial parameters from a safetensors file under the model's state_dict names."""
    from safetensors.numpy import load_file

    names = {"0.weight": "c1w", "0.bias": "c1b", "2.weight": "c2w", "2.bias": "c2b",
             "4.weight": "c3w", "4.bias": "c3b", "7.weight": "fw", "7.bias": "fb"}
    tensors = load_file(path)
    missing = sorted(set(names) - set(tensors))
    if missing:
        sys.exit(f"{path}: no tensor named {', '.join(missing)}")
    return {names[k]: jnp.asarray(v) for k, v in tensors.items() if k in names}


def main():
    args = sys.argv[1:]
    if args[:1] == ["--init"]:
        runs = [(path, lambda path=path: load_init(path)) for path in args[1:]]
    else:
        runs = [(f"seed {s}", lambda s=int(s): init(s)) for s in args or [0, 1, 2, 3, 4]]
    xtr, ytr, xte, yte = load()
    for label, draw in runs:
        p = draw()
        m = jax.tree.map(jnp.zeros_like, p)
        v = jax.tree.map(jnp.zeros_like, p)
        for k in range(STEPS):
            b = (k * 100) % 4000
            p, m, v = step(p, m, v, float(k + 1), xtr[b:b + 100], ytr[b:b + 100])
        acc = float(jnp.mean(jnp.argmax(logits(p, xte), axis=1) == yte))
        print(f"{label}: test accuracy {100 * acc:.1f} %", flush=True)


if __name__ == "__main__":
    main()
