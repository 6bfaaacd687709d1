#!/usr/bin/env python3
"""Write W3's data set (the online-learning benchmark workload) as a CSV for run descriptions.

Each row is x ~ U(-1, 1)^2 and the regression target sin(pi x0) * cos(pi x1) / 2 (W3's
function, docs/benchmarks.md), the inputs rounded to 6 decimals and the target computed from the
rounded inputs. The run protocol's split keeps round(0.8 * rows) rows for training, so 320 rows
give W3's 256 training samples. Standard library only, seeded, so the file is the same on every
machine.

Usage: python3 scripts/w3_csv.py ROWS OUT.csv
"""
import math
import random
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: w3_csv.py ROWS OUT.csv")
    rows, out = int(sys.argv[1]), sys.argv[2]
    rng = random.Random(2024)
    with open(out, "w", encoding="ascii") as f:
        f.write("x0,x1,y\n")
        for _ in range(rows):
            x0 = round(rng.uniform(-1.0, 1.0), 6)
            x1 = round(rng.uniform(-1.0, 1.0), 6)
            y = math.sin(math.pi * x0) * math.cos(math.pi * x1) / 2.0
            f.write(f"{x0:.6f},{x1:.6f},{y:.7f}\n")


if __name__ == "__main__":
    main()
