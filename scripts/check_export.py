#!/usr/bin/env python3
"""Check a tapeplan safetensors export against PyTorch's conventions, without torch.

Loads MODEL (from `tapeplan train --save-params` or `tapeplan export`): tensors named as in a
PyTorch `nn.Sequential(nn.Linear, act, nn.Linear, ...)` state_dict, `N.weight` of shape
`[out, in]` and `N.bias` of shape `[out]`. Rebuilds that forward pass with numpy exactly as
`nn.Linear` defines it (`y = x @ weight.T + bias`), the activation named in the file's
metadata between layers, and runs it on REFERENCE (from `tapeplan train --save-test-logits`:
`x [rows, in]`, `labels [rows]`, `logits [rows, out]` as the runtime computed them).

Passes when every logit agrees with the runtime's within float tolerance and the predicted
classes agree (a row whose top two logits are closer than the tolerance may go either way).
Prints a summary; exits 1 on a mismatch, 2 on a malformed file.

usage: check_export.py MODEL.safetensors REFERENCE.safetensors [--activation tanh|relu|none]
requires: numpy, safetensors (pip install numpy safetensors)
"""

import argparse
import re
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda z: np.maximum(z, 0.0),
    "none": lambda z: z,
}


def layers(tensors):
    """The Linear layers in Sequential order: [(index, weight, bias)]."""
    found = {}
    for name, t in tensors.items():
        m = re.fullmatch(r"(\d+)\.(weight|bias)", name)
        if not m:
            raise SystemExit(f"error: tensor {name!r} is not an nn.Sequential Linear parameter")
        found.setdefault(int(m.group(1)), {})[m.group(2)] = t
    out = []
    for i, k in enumerate(sorted(found)):
        if k != 2 * i:
            raise SystemExit(f"error: Linear layers at {sorted(found)}, expected 0, 2, 4, ...")
        w, b = found[k].get("weight"), found[k].get("bias")
        if w is None or b is None or w.ndim != 2 or b.shape != (w.shape[0],):
            raise SystemExit(f"error: layer {k}: weight [out, in] and bias [out] expected")
        if out and out[-1][1].shape[0] != w.shape[1]:
            raise SystemExit(f"error: layer {k} takes {w.shape[1]} inputs, previous gives {out[-1][1].shape[0]}")
        if w.dtype != np.float32 or b.dtype != np.float32:
            raise SystemExit(f"error: layer {k}: dtype {w.dtype}/{b.dtype}, expected float32")
        out.append((k, w, b))
    if not out:
        raise SystemExit("error: no Linear layers in the file")
    return out


def forward(x, linears, act):
    """nn.Sequential(Linear, act, ..., Linear) in float64 (the reference the f32 runs approximate)."""
    h = x.astype(np.float64)
    for i, (_, w, b) in enumerate(linears):
        h = h @ w.astype(np.float64).T + b.astype(np.float64)
        if i + 1 < len(linears):
            h = act(h)
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("reference")
    ap.add_argument("--activation", choices=sorted(ACTIVATIONS))
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-5)
    args = ap.parse_args()

    with safe_open(args.model, framework="numpy") as f:
        meta = f.metadata() or {}
    act_name = args.activation or meta.get("tapeplan.activation", "tanh")
    if act_name not in ACTIVATIONS:
        print(f"error: activation {act_name!r} unknown; pass --activation", file=sys.stderr)
        return 2
    linears = layers(load_file(args.model))
    ref = load_file(args.reference)
    x, labels, want = ref["x"], ref["labels"], ref["logits"]

    widths = [linears[0][1].shape[1]] + [w.shape[0] for _, w, _ in linears]
    declared = meta.get("tapeplan.layers")
    if declared and declared != ",".join(map(str, widths)):
        print(f"error: metadata says layers {declared}, tensors say {widths}", file=sys.stderr)
        return 2
    if x.shape[1] != widths[0] or want.shape != (x.shape[0], widths[-1]):
        print(f"error: reference shapes x {x.shape}, logits {want.shape} do not fit layers {widths}", file=sys.stderr)
        return 2

    got = forward(x, linears, ACTIVATIONS[act_name])
    err = np.abs(got - want.astype(np.float64))
    tol = args.atol + args.rtol * np.abs(got)
    bad = err > tol
    top2 = np.sort(got, axis=1)[:, -2:]
    near_tie = (top2[:, 1] - top2[:, 0]) <= 2 * tol.max(axis=1)
    pred, want_pred = got.argmax(axis=1), want.argmax(axis=1)
    disagree = (pred != want_pred) & ~near_tie
    acc_numpy = float((pred == labels).mean())
    acc_runtime = float((want_pred == labels).mean())

    print(f"model: {args.model}: nn.Sequential of {len(linears)} Linear layers {widths}, activation {act_name}")
    print(f"metadata: {', '.join(f'{k}={v}' for k, v in sorted(meta.items()))}")
    print(f"reference: {args.reference}: {x.shape[0]} rows")
    print(f"logits: max |numpy - runtime| = {err.max():.3e} (max relative {float((err / np.maximum(np.abs(got), 1e-30)).max()):.3e}); "
          f"{int(bad.sum())} of {bad.size} outside atol {args.atol:g} + rtol {args.rtol:g}")
    print(f"argmax: {int((pred == want_pred).sum())}/{len(pred)} rows agree ({int(near_tie.sum())} near ties)")
    print(f"test accuracy: numpy {acc_numpy:.4f}, runtime {acc_runtime:.4f}")
    if bad.any() or disagree.any():
        print("FAILED: the exported model does not reproduce the runtime's forward pass")
        return 1
    print("OK: the exported model reproduces the runtime's forward pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
