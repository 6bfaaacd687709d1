"""Regenerates MNIST-1D (Greydanus, "Scaling Down Deep Learning", 2020) as data/mnist1d.csv.gz.

The `mnist1d` package (PyPI, Apache-2.0) rebuilds the data set locally from its ten templates
with `mnist1d.data.make_dataset()` and its default arguments (5000 samples of length 40,
seed 42, an 80/20 train/test split); nothing is downloaded. Each value is written as the
shortest decimal that reads back as the same float32 (the element tapeplan trains in), the
label last, the 4000 training rows first and the 1000 test rows after them, in the package's
order.

Usage (the venv xtask makes, with mnist1d installed):
    target/py-venv/bin/pip install 'mnist1d==0.0.2.post1'
    target/py-venv/bin/python scripts/mnist1d_data.py [OUT]
"""

import gzip
import hashlib
import sys

import numpy as np
from mnist1d.data import make_dataset

MNIST1D_VERSION = "0.0.2.post1"


def main() -> None:
    import importlib.metadata

    version = importlib.metadata.version("mnist1d")
    if version != MNIST1D_VERSION:
        sys.exit(f"mnist1d {version} installed; this script pins {MNIST1D_VERSION}")
    out = sys.argv[1] if len(sys.argv) > 1 else "data/mnist1d.csv.gz"
    d = make_dataset()
    xs = np.concatenate([d["x"], d["x_test"]]).astype(np.float32)
    ys = np.concatenate([d["y"], d["y_test"]]).astype(np.int64)
    assert xs.shape == (5000, 40) and ys.shape == (5000,), (xs.shape, ys.shape)
    lines = []
    for row, label in zip(xs, ys):
        cells = [np.format_float_positional(v, unique=True, trim="-") for v in row]
        lines.append(",".join(cells + [str(int(label))]))
    text = ("\n".join(lines) + "\n").encode()
    # mtime=0: the same bytes on every run.
    with open(out, "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as g:
            g.write(text)
    print(f"{out}: 5000 rows (4000 train, 1000 test), sha256 of the CSV "
          f"{hashlib.sha256(text).hexdigest()}")


if __name__ == "__main__":
    main()
