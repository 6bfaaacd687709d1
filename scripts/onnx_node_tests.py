#!/usr/bin/env python3
"""Write ONNX's backend node tests of some operators, as `onnx.backend.test.cmd_tools
generate-data` writes them, into OUT_DIR.

For each node test whose operator is one of OPS: OUT_DIR/<test name>/model.onnx and
OUT_DIR/<test name>/test_data_set_<k>/{input,output}_<j>.pb (serialized TensorProtos), then
OUT_DIR/manifest.tsv, one line per test: `<test name>\t<operator>` (the operator of the node the
test is about; a `..._expanded` test holds that node's function expansion). Tests whose inputs
or outputs are not plain tensors (sequences, maps, optionals) are left out and listed in
manifest.tsv with the operator `-`, so that they are counted, not lost.

`cargo xtask onnx-conformance` runs this (in a venv with the pinned `onnx`) into a cache keyed
by the onnx version and the operator list, then runs every test through tapeplan.

usage: onnx_node_tests.py OUT_DIR OP [OP ...]
requires: onnx (its wheel ships the generators)
"""

import os
import sys
import warnings


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, ops = sys.argv[1], set(sys.argv[2:])
    warnings.simplefilter("ignore")

    import numpy as np  # noqa: F401  (the generators need it)
    import onnx.backend.test.case.node as node
    from onnx import TensorProto, numpy_helper

    # Learn each test's operator: wrap `expect`, which every generator calls with its node,
    # before the generators' modules are imported (they import it by name).
    original = node.expect
    op_of = {}

    def expect(node_op, inputs, outputs, name, **kwargs):
        before = len(node._NodeTestCases)
        original(node_op, inputs, outputs, name, **kwargs)
        for case in node._NodeTestCases[before:]:
            op_of[case.name] = node_op.op_type

    node.expect = expect
    cases = node.collect_testcases(None)

    def tensor_bytes(value, info):
        if not info.type.HasField("tensor_type"):
            return None
        if isinstance(value, TensorProto):
            return value.SerializeToString()
        return numpy_helper.from_array(value, info.name).SerializeToString()

    manifest = []
    for case in cases:
        op = op_of.get(case.name)
        if op not in ops or case.model is None:
            continue
        graph = case.model.graph
        sets = []
        plain = True
        for inputs, outputs in case.data_sets:
            ins = [tensor_bytes(v, graph.input[j]) for j, v in enumerate(inputs)]
            outs = [tensor_bytes(v, graph.output[j]) for j, v in enumerate(outputs)]
            if any(b is None for b in ins + outs):
                plain = False
                break
            sets.append((ins, outs))
        if not plain:
            manifest.append((case.name, "-"))
            continue
        test_dir = os.path.join(out_dir, case.name)
        os.makedirs(test_dir, exist_ok=True)
        with open(os.path.join(test_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for k, (ins, outs) in enumerate(sets):
            set_dir = os.path.join(test_dir, f"test_data_set_{k}")
            os.makedirs(set_dir, exist_ok=True)
            for kind, blobs in (("input", ins), ("output", outs)):
                for j, blob in enumerate(blobs):
                    with open(os.path.join(set_dir, f"{kind}_{j}.pb"), "wb") as f:
                        f.write(blob)
        manifest.append((case.name, op))
    with open(os.path.join(out_dir, "manifest.tsv"), "w") as f:
        for name, op in sorted(manifest):
            f.write(f"{name}\t{op}\n")
    print(f"onnx_node_tests.py: {len(manifest)} tests of {len(ops)} operators in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
