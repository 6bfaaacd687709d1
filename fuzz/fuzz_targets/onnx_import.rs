//! Bytes as an ONNX model: `read_model` then `translate` (the importer's front half). Either
//! answers an error or a tape; never a panic, whatever the bytes (hostile extents, pads, axes,
//! indices, tensor lengths). Named dimensions get extent 2, so graphs with a symbolic batch
//! translate too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapeplan_planner::model::onnx::{read_model, translate, TranslateOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(model) = read_model(data) else {
        return;
    };
    let mut options = TranslateOptions::default();
    if let Some(g) = &model.graph {
        for i in &g.input {
            let dims = i
                .r#type
                .as_ref()
                .and_then(|t| match &t.value {
                    Some(tapeplan_planner::model::onnx::proto::type_proto::Value::TensorType(
                        tt,
                    )) => tt.shape.as_ref(),
                    _ => None,
                })
                .map(|s| s.dim.clone())
                .unwrap_or_default();
            for d in dims {
                if let Some(
                    tapeplan_planner::model::onnx::proto::tensor_shape_proto::dimension::Value::DimParam(
                        p,
                    ),
                ) = d.value
                {
                    options.dim_params.insert(p, 2);
                }
            }
        }
    }
    let _ = translate(&model, &options);
});
