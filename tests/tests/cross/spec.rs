//! The plan format document and the code agree: the opcode table in `docs/plan-format.md` lists
//! exactly the rows of the opcode table in `core/src/opcode.rs`, the record sizes match, a
//! golden plan written out byte by byte from the spec is what the writer writes and what the
//! decoders read, and a version-2 plan is refused.

use tapeplan_core::format::{self, Instr};
use tapeplan_core::{Attr, AttrKind, MathProfile, OpClass, Opcode, Shape};
use tapeplan_planner::io::inspect::PlanInfo;
use tapeplan_planner::plan::{Instr as PlannedInstr, MemoryReport, PlannedEntry, TensorInfo};
use tapeplan_planner::Schedule;
use tapeplan_runtime::{DecodeError, ParseError, Plan as RuntimePlan, Session};

const SPEC: &str = include_str!("../../../docs/plan-format.md");

#[test]
fn the_spec_opcode_table_matches_the_enum() {
    let start = SPEC.find("<!-- opcode-table").expect("table start marker");
    let end = SPEC
        .find("<!-- end opcode-table -->")
        .expect("table end marker");
    let rows: Vec<Vec<String>> = SPEC[start..end]
        .lines()
        .filter(|l| l.starts_with("| 0x"))
        .map(|l| {
            l.split('|')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), Opcode::ALL.len(), "row count");
    for (row, &op) in rows.iter().zip(Opcode::ALL) {
        let class = match op.class() {
            OpClass::Leaf => "leaf",
            OpClass::Elementwise => "elementwise",
            OpClass::Structural => "structural",
        };
        let attr = match op.attr_kind() {
            AttrKind::None => "none",
            AttrKind::Target => "target",
            AttrKind::Fill => "fill",
            AttrKind::Pow => "pow",
            AttrKind::Lr => "lr",
            AttrKind::Window => "window",
            AttrKind::Axis => "axis",
            AttrKind::Conv => "conv",
            AttrKind::Pool => "pool",
            AttrKind::PoolTo => "pool_to",
            AttrKind::AxisTo => "axis_to",
            AttrKind::Scan => "scan",
        };
        let expected = [
            format!("{:#04x}", op.to_u8()),
            op.name().to_string(),
            op.arity().to_string(),
            class.to_string(),
            attr.to_string(),
        ];
        assert_eq!(row.as_slice(), expected.as_slice(), "{op}");
    }
}

#[test]
fn the_spec_states_the_record_sizes() {
    for (what, n) in [
        ("header", format::HEADER_BYTES),
        ("tensor record", format::TENSOR_RECORD_BYTES),
        ("instruction record", format::INSTR_RECORD_BYTES),
        ("entry record", format::ENTRY_RECORD_BYTES),
        ("binding record", format::BINDING_RECORD_BYTES),
    ] {
        let heading = format!("{} ({n} bytes)", what);
        assert!(
            SPEC.to_lowercase().contains(&heading.to_lowercase()),
            "spec lacks a heading `{heading}`"
        );
    }
    assert!(SPEC.contains(&format!("| 4 | u16 | version | `{}`", format::VERSION)));
}

/// A tiny plan, byte by byte as `docs/plan-format.md` lays it out (field names as in the spec):
/// entry `forward` computes `y = slice(x, axis 1, start 1, len 2) * fill(0.5)` for an input
/// `x: [2, 4]`. It has an inline attribute (the fill value) and a block (the window).
#[rustfmt::skip]
const GOLDEN: &[u8] = &[
    // header (52 bytes)
    0x54, 0x50, 0x4c, 0x4e, // magic
    0x03, 0x00, // version 3
    0x34, 0x00, // header_bytes 52
    0x54, 0x01, 0x00, 0x00, // total_bytes 340
    0xa4, 0x1f, 0x7b, 0x88, // crc32 over every byte but 12..16
    0x14, 0x00, 0x00, 0x00, // arena_elems 20
    0x00, 0x00, 0x00, 0x00, // persistent_elems 0
    0x04, 0x00, 0x00, 0x00, // n_tensors 4
    0x03, 0x00, 0x00, 0x00, // n_instrs 3
    0x01, 0x00, 0x00, 0x00, // n_entries 1
    0x02, 0x00, 0x00, 0x00, // n_bindings 2
    0x00, 0x00, 0x00, 0x00, // flags 0 (precise)
    0xb5, 0x75, 0x6a, 0x9e, // plan_id: CRC-32 of the bytes after the header
    0x04, 0x00, 0x00, 0x00, // attr_words 4
    // tensor record 0 (x: [2, 4], scratch @0)
    0x00, 0x00, 0x00, 0x00, // offset_elems
    0x02, // rank
    0x00, // kind (0 scratch)
    0x00, 0x00, // reserved
    0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, // dims
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    // tensor record 1 (s: [2, 2], scratch @8)
    0x08, 0x00, 0x00, 0x00, // offset_elems
    0x02, // rank
    0x00, // kind (0 scratch)
    0x00, 0x00, // reserved
    0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, // dims
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    // tensor record 2 (half: [2, 2], scratch @12)
    0x0c, 0x00, 0x00, 0x00, // offset_elems
    0x02, // rank
    0x00, // kind (0 scratch)
    0x00, 0x00, // reserved
    0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, // dims
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    // tensor record 3 (y: [2, 2], scratch @16)
    0x10, 0x00, 0x00, 0x00, // offset_elems
    0x02, // rank
    0x00, // kind (0 scratch)
    0x00, 0x00, // reserved
    0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, // dims
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    // instruction record 0 (slice: s = slice(x), window block at word 0)
    0x27, // opcode
    0x01, // n_args
    0x00, 0x00, // flags
    0x01, 0x00, 0x00, 0x00, // out
    0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, // args
    0xff, 0xff, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x00, // attr
    // instruction record 1 (fill: half = 0.5 (inline f32 bits))
    0x02, // opcode
    0x00, // n_args
    0x00, 0x00, // flags
    0x02, 0x00, 0x00, 0x00, // out
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // args
    0xff, 0xff, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x3f, // attr
    // instruction record 2 (mul: y = s * half)
    0x12, // opcode
    0x02, // n_args
    0x00, 0x00, // flags
    0x03, 0x00, 0x00, 0x00, // out
    0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, // args
    0xff, 0xff, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x00, // attr
    // entry record 0
    0x66, 0x6f, 0x72, 0x77, 0x61, 0x72, 0x64, 0x00, // name "forward"
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, // first_instr
    0x03, 0x00, 0x00, 0x00, // n_instrs
    // binding record (x)
    0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // name "x"
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, // kind
    0x00, 0x00, 0x00, // reserved
    0x00, 0x00, 0x00, 0x00, // entry
    0x00, 0x00, 0x00, 0x00, // tensor
    // binding record (y)
    0x79, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // name "y"
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, // kind
    0x00, 0x00, 0x00, // reserved
    0x00, 0x00, 0x00, 0x00, // entry
    0x03, 0x00, 0x00, 0x00, // tensor
    // attribute section (4 words)
    0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, // block at word 0: length 3; axis 1, start 1, len 2
    0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
];

/// The same plan as the planner holds it, for its writer.
fn golden_plan() -> Schedule {
    let t = |offset_elems: usize, d: &[usize]| TensorInfo {
        offset_elems,
        shape: Shape::new(d).unwrap(),
        kind: format::TensorKind::Scratch,
    };
    let s22 = Shape::matrix(2, 2);
    let no = format::NO_ARG;
    let instr = |op, out, args, attr, node| PlannedInstr {
        op,
        out,
        args,
        attr,
        node,
        fuse_next: false,
    };
    let window = Attr::Window {
        axis: 1,
        start: 1,
        len: 2,
    };
    let zero = MemoryReport {
        arena_bytes: 0,
        persistent_bytes: 0,
        entry_bytes: 0,
        lower_bound_bytes: 0,
        retain_everything_bytes: 0,
        tape_order_bytes: 0,
    };
    Schedule {
        tensors: vec![t(0, &[2, 4]), t(8, &[2, 2]), t(12, &[2, 2]), t(16, &[2, 2])],
        parameters: vec![],
        entries: vec![PlannedEntry {
            name: "forward".into(),
            instrs: vec![
                instr(Opcode::Slice, 1, [0, no, no], window, 1),
                instr(Opcode::Fill, 2, [no, no, no], Attr::fill(0.5, s22), 2),
                instr(Opcode::Mul, 3, [1, 2, no], Attr::None, 3),
            ],
            inputs: vec![("x".into(), 0)],
            outputs: vec![("y".into(), 3)],
            updates: vec![],
            report: zero,
        }],
        arena_elems: 20,
        persistent_elems: 0,
        math: MathProfile::Precise,
        arith: tapeplan_core::ArithProfile::Separate,
    }
}

#[test]
fn the_writer_writes_the_golden_plan_and_the_decoders_read_it_back() {
    assert_eq!(GOLDEN.len(), 340);
    assert_eq!(
        golden_plan().to_bytes(),
        GOLDEN,
        "writer output differs from the spec's bytes"
    );

    // The runtime accepts it and runs it.
    let plan = RuntimePlan::parse(GOLDEN).expect("the golden plan is valid");
    assert_eq!(plan.plan_id(), 0x9e6a_75b5);
    let mut arena = vec![0.0f32; plan.arena_elems()];
    let mut session = Session::bind(&plan, &mut arena).unwrap();
    let e = plan.entry("forward").unwrap();
    session
        .set_input(e, "x", &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
        .unwrap();
    session.run(e).unwrap();
    assert_eq!(session.output(e, "y").unwrap(), [1.0, 1.5, 3.0, 3.5]);

    // The host's view decodes the same typed instructions with the same decoder.
    let info = PlanInfo::decode(GOLDEN);
    let instrs: Vec<Instr> = info.entries[0].instrs.clone();
    let s22 = Shape::matrix(2, 2);
    assert_eq!(
        instrs.iter().map(|i| (i.op, i.attr)).collect::<Vec<_>>(),
        [
            (
                Opcode::Slice,
                Attr::Window {
                    axis: 1,
                    start: 1,
                    len: 2
                }
            ),
            (Opcode::Fill, Attr::fill(0.5, s22)),
            (Opcode::Mul, Attr::None),
        ]
    );
    assert_eq!(instrs[2].arg_indices(), [1, 2]);
}

#[test]
fn a_version_2_plan_is_refused() {
    let mut old = GOLDEN.to_vec();
    old[4..6].copy_from_slice(&2u16.to_le_bytes());
    let crc = format::plan_crc(&old).unwrap();
    old[format::CRC_OFFSET..format::CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    let err = RuntimePlan::parse(&old).unwrap_err();
    assert_eq!(
        err,
        ParseError::Decode(DecodeError::UnknownVersion { found: 2 })
    );
    let message = err.to_string();
    assert!(
        message.contains("version 2") && message.contains("version 3"),
        "{message}"
    );
}

#[test]
fn malformed_attribute_blocks_are_refused() {
    let with = |at: usize, word: u32| {
        let mut b = GOLDEN.to_vec();
        b[at..at + 4].copy_from_slice(&word.to_le_bytes());
        let crc = format::plan_crc(&b).unwrap();
        b[format::CRC_OFFSET..format::CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        RuntimePlan::parse(&b).unwrap_err()
    };
    let slice_attr = 52 + 4 * 24 + 20; // instruction 0's `attr`: the block index
    let block_len = 340 - 16; // the block's length word
    assert!(matches!(
        with(slice_attr, 1),
        ParseError::Decode(DecodeError::Attr {
            op: Opcode::Slice,
            ..
        })
    ));
    assert!(matches!(
        with(block_len, 2),
        ParseError::Decode(DecodeError::Attr {
            op: Opcode::Slice,
            ..
        })
    ));
    // `mul` takes no attribute.
    assert!(matches!(
        with(52 + 4 * 24 + 2 * 24 + 20, 7),
        ParseError::Decode(DecodeError::NonzeroAttr {
            op: Opcode::Mul,
            ..
        })
    ));
}
