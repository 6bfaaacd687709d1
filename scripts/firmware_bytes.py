#!/usr/bin/env python3
"""Where a firmware's runtime code goes: the `.text` bytes of FULL less those of BASELINE, by kind.

FULL and BASELINE are two ELF builds of `firmware-demo` (`cargo xtask firmware` builds both
and reports their `.text + .rodata` difference as the runtime's code; the baseline is the
`size-baseline` twin, which does everything but decode, validate and run the plan). Each
instruction's bytes go to the innermost frame of its inline chain that is not the standard
library (`arm-none-eabi-addr2line -i` on the DWARF of the release build, `debug = 2`), so a
helper LTO inlined into a caller counts where its source is. That frame's file and function
name the kind: validation, plan decoding, shape rules, the convolution kernels, the other
kernels, the run loop, the trainer, libm, compiler builtins. `--by function` lists the
functions instead; `--min BYTES` hides the small rows.

The `.rodata` difference (tables, panic locations, strings) is printed as one line: this
script attributes code only.

usage: firmware_bytes.py FULL.elf BASELINE.elf [--by kind|function|file] [--min BYTES]
requires: arm-none-eabi-objdump, arm-none-eabi-addr2line, arm-none-eabi-size (binutils)
"""

import argparse
import collections
import re
import subprocess


def run(*args, stdin=None):
    return subprocess.run(
        args, input=stdin, capture_output=True, text=True, check=True
    ).stdout


def norm(path):
    path = path.rsplit(":", 1)[0]
    path = re.sub(r".*/rustc/[0-9a-f]+/library/", "std:", path)
    return re.sub(r".*registry/src/[^/]+/", "dep:", path)


def frames_by_instruction(elf):
    """(bytes, [(function, file), ...] innermost first) for every instruction of `.text`."""
    dis = run("arm-none-eabi-objdump", "-d", "--no-show-raw-insn", "-j", ".text", elf)
    addrs = [int(m.group(1), 16) for m in re.finditer(r"^\s+([0-9a-f]+):\s", dis, re.M)]
    # An instruction's size is the distance to the next one, at most 4 (Thumb-2): larger gaps
    # are padding or literal pools.
    sizes = [min(b - a, 4) for a, b in zip(addrs, addrs[1:])] + [2]
    chains = run(
        "arm-none-eabi-addr2line", "-i", "-f", "-C", "-a", "-e", elf,
        stdin="".join(f"{a:#x}\n" for a in addrs),
    )
    for size, chunk in zip(sizes, re.split(r"^0x[0-9a-f]+\n", chains, flags=re.M)[1:]):
        lines = chunk.strip().split("\n")
        yield size, [(lines[i], norm(lines[i + 1])) for i in range(0, len(lines) - 1, 2)]


def owner(frames):
    for function, path in frames:
        if not path.startswith("std:") and path != "??":
            return function, path
    return frames[-1]


KINDS = [
    ("libm (expf, logf, sqrtf)", lambda fn, f: "libm" in f),
    (
        "compiler builtins (memcpy, memset, 64-bit division)",
        lambda fn, f: "compiler-builtins" in f
        or "compiler_builtins" in fn
        or fn.startswith("__aeabi")
        or fn in ("memcmp", "memset", "memcpy"),
    ),
    (
        "trainer (the firmware library's train, the transcript)",
        lambda fn, f: "firmware/src" in f or "protocol.rs" in f,
    ),
    ("firmware-demo glue", lambda fn, f: "firmware-demo" in f),
    ("validation (validate.rs)", lambda fn, f: "validate.rs" in f or "parse" in fn),
    (
        "plan decoding (records, names, attributes, opcode tables, CRC)",
        lambda fn, f: any(
            s in f for s in ("plan.rs", "format.rs", "attr.rs", "opcode.rs", "opset.rs", "crc")
        ),
    ),
    (
        "shape rules (infer, convolution geometry, Shape)",
        lambda fn, f: any(
            s in fn
            for s in ("::infer", "geometry", "Axis", "same_shapes", "nth", "target_of", "target_shape", "with_target")
        )
        or "shape.rs" in f,
    ),
    ("convolution kernels (conv, conv_transpose, conv_weight_grad)", lambda fn, f: "conv" in f),
    (
        "other kernels and their dispatch (eval_*)",
        lambda fn, f: "core/src/ops" in f or "math.rs" in f or "element" in f,
    ),
    ("run loop (Session::run, steps, in-place paths, commit)", lambda fn, f: "exec.rs" in f or "session.rs" in f),
]


def key(by, function, path):
    if by == "function":
        return function
    if by == "file":
        return path
    for name, test in KINDS:
        if test(function, path):
            return name
    return "other: " + path


def tally(elf, by):
    counts = collections.Counter()
    for size, frames in frames_by_instruction(elf):
        counts[key(by, *owner(frames))] += size
    return counts


def section(elf, name):
    for line in run("arm-none-eabi-size", "-A", elf).splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return int(fields[1])
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("full")
    p.add_argument("baseline")
    p.add_argument("--by", choices=["kind", "function", "file"], default="kind")
    p.add_argument("--min", type=int, default=40)
    a = p.parse_args()
    full, base = tally(a.full, a.by), tally(a.baseline, a.by)
    rows = sorted(((full[k] - base[k], k) for k in set(full) | set(base)), reverse=True)
    code = sum(d for d, _ in rows)
    rodata = section(a.full, ".rodata") - section(a.baseline, ".rodata")
    print(f"runtime .text {code} B, .rodata {rodata} B, together {code + rodata} B")
    for d, k in rows:
        if abs(d) >= a.min:
            print(f"{d:7} {k}")


if __name__ == "__main__":
    main()
