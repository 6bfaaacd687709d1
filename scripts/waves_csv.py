#!/usr/bin/env python3
"""Write a small synthetic CSV for the ONNX CNN walkthrough (docs/onnx-cnn-walkthrough.md).

Each row is a two-channel signal of 32 samples, flattened channel by channel (64 features, the
layout of a `[N, 2, 32]` input read row-major), then a class label: the class `k` (0..4) is the
frequency, `k + 1` periods over the 32 samples; channel 0 is a sine, channel 1 a cosine, each
with a random phase, a random amplitude in [0.5, 1.5] and Gaussian noise (sd 0.3). Standard
library only, seeded, so the file is the same on every machine.

Usage: python3 scripts/waves_csv.py ROWS OUT.csv
"""
import math
import random
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: waves_csv.py ROWS OUT.csv")
    rows, out = int(sys.argv[1]), sys.argv[2]
    rng = random.Random(7)
    header = [f"c{c}_t{t}" for c in range(2) for t in range(32)] + ["label"]
    with open(out, "w") as f:
        f.write(",".join(header) + "\n")
        for i in range(rows):
            k = i % 5
            phase = rng.uniform(0, 2 * math.pi)
            amp = rng.uniform(0.5, 1.5)
            values = []
            for wave in (math.sin, math.cos):
                for t in range(32):
                    v = amp * wave(2 * math.pi * (k + 1) * t / 32 + phase) + rng.gauss(0, 0.3)
                    values.append(f"{v:.4f}")
            f.write(",".join(values) + f",{k}\n")


if __name__ == "__main__":
    main()
