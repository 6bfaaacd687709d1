//! The plan format document and the code agree: the opcode table in `docs/plan-format.md` lists
//! exactly the rows of the opcode table in `core/src/opcode.rs`, and the record sizes match.

use tapeplan_core::format;
use tapeplan_core::{OpClass, Opcode};

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
        let expected = [
            format!("{:#04x}", op.to_u8()),
            op.name().to_string(),
            op.arity().to_string(),
            class.to_string(),
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
