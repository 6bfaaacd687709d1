"""Times the parts of W2's training step (issue 15: MLP 784-128-10, batch 64, Adam) in JAX on
one core, each part repeated inside one compiled `lax.scan` as the `jax-scan` peer runs them:
the forward product `x·W1` (`[64, 784] x [784, 128]`), the weight gradient `xᵀ·ḡ`
(`[784, 64] x [64, 128]`) and Adam's update of `W1` (100 352 elements, PyTorch's formula as
scripts/peers_bench.py writes it). Each product's input takes a negligible data dependence on
the previous iteration's output, so XLA cannot hoist it out of the loop; the step that adds it
alone is timed too (subtract it).

Usage (the venv `cargo xtask bench --peers` installs):

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        taskset -c 1 target/py-venv/bin/python scripts/jax_w2_parts.py

Prints microseconds per iteration, the best of 9 calls of 300 iterations each.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

ITERS = 300


def best_of(run, state, n=9):
    jax.block_until_ready(run(state))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(run(state))
        times.append(time.perf_counter() - t)
    return min(times) / ITERS * 1e6


def product(name, f, a, b):
    def body(c, _):
        a, b, s = c
        a = a + s * 1e-30
        return (a, b, f(a, b)[0, 0]), None

    run = jax.jit(lambda c: jax.lax.scan(body, c, None, length=ITERS)[0])
    print(f"{name:<28} {best_of(run, (a, b, jnp.float32(0))):8.1f} us")


def adam(p, m, v, g):
    m = m * 0.9 + g * 0.1
    v = v * 0.999 + (g * g) * 0.001
    bc1, bc2 = 0.5, 0.3
    p = p - (1e-3 / bc1) * m / (jnp.sqrt(v) / jnp.sqrt(bc2) + 1e-8)
    # `g` moves a little, as a new gradient would.
    return p, m, v, g * 1.0000001


def main():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 784), dtype=np.float32))
    w1 = jnp.asarray(rng.standard_normal((784, 128), dtype=np.float32))
    dh = jnp.asarray(rng.standard_normal((64, 128), dtype=np.float32))
    print(f"jax {jax.__version__}")
    product("x·W1 (forward)", jnp.dot, x, w1)
    product("xᵀ·ḡ (weight gradient)", lambda a, b: jnp.dot(a.T, b), x, dh)
    product("the dependence alone", lambda a, b: a, x, dh)
    p, m, g = (jnp.asarray(rng.standard_normal((784, 128), dtype=np.float32)) for _ in range(3))
    v = jnp.abs(jnp.asarray(rng.standard_normal((784, 128), dtype=np.float32)))
    run = jax.jit(
        lambda c: jax.lax.scan(lambda c, _: (adam(*c), None), c, None, length=ITERS)[0]
    )
    print(f"{'Adam, W1 (100 352)':<28} {best_of(run, (p, m, v, g)):8.1f} us")


if __name__ == "__main__":
    main()
