//! ONNX tensors (`TensorProto`) as values the translation can use: the element type, the
//! extents and the elements, read from whichever field holds them (`raw_data`, little-endian,
//! or the typed fields `float_data`, `int32_data`, `int64_data`, `double_data`).

use super::proto::{tensor_proto::DataType, TensorProto};
use super::OnnxError;

/// A tensor's elements, in the widest type of their family.
#[derive(Clone, Debug, PartialEq)]
pub enum Elements {
    /// `FLOAT`.
    F32(Vec<f32>),
    /// `DOUBLE` (read so that it can be named and compared; the vocabulary computes in `f32`).
    F64(Vec<f64>),
    /// The signed and unsigned integer types up to 64 bits (`INT8` … `INT64`, `UINT8` …
    /// `UINT32`).
    Int(Vec<i64>),
    /// `BOOL`.
    Bool(Vec<bool>),
}

/// A tensor read from a `TensorProto`: its element type (ONNX's `DataType` number), extents and
/// elements (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorData {
    /// ONNX's `DataType` code (`1` = `FLOAT`, `7` = `INT64`, `9` = `BOOL`, …).
    pub data_type: i32,
    /// The extents.
    pub dims: Vec<usize>,
    /// The elements.
    pub elements: Elements,
}

/// ONNX's name of a `DataType` code (`FLOAT`, `INT64`, …), or `type N` for an unknown one.
pub fn data_type_name(code: i32) -> String {
    match DataType::try_from(code) {
        Ok(t) => t.as_str_name().to_owned(),
        Err(_) => format!("type {code}"),
    }
}

impl TensorData {
    /// A `FLOAT` tensor.
    pub fn f32(dims: Vec<usize>, values: Vec<f32>) -> TensorData {
        TensorData {
            data_type: DataType::Float as i32,
            dims,
            elements: Elements::F32(values),
        }
    }

    /// An `INT64` tensor.
    pub fn i64(dims: Vec<usize>, values: Vec<i64>) -> TensorData {
        TensorData {
            data_type: DataType::Int64 as i32,
            dims,
            elements: Elements::Int(values),
        }
    }

    /// The same extents with other elements of type `data_type`.
    pub fn with_elements(&self, data_type: i32, elements: Elements) -> TensorData {
        TensorData {
            data_type,
            dims: self.dims.clone(),
            elements,
        }
    }

    /// The number of elements the extents give.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// True for a tensor with a zero extent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type's name.
    pub fn type_name(&self) -> String {
        data_type_name(self.data_type)
    }

    /// The elements as `f32` when the vocabulary reads them as such: `FLOAT` as is, `BOOL` as
    /// `0`/`1` (the masks of `where` and the comparisons), integers (`gather`'s indices,
    /// `argmax`'s output) when every one is exact in `f32` (`|v| ≤ 2^24`). `None` otherwise.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        const EXACT: i64 = 1 << 24;
        match &self.elements {
            Elements::F32(v) => Some(v.clone()),
            Elements::Bool(v) => Some(v.iter().map(|&b| if b { 1.0 } else { 0.0 }).collect()),
            Elements::Int(v) if v.iter().all(|x| (-EXACT..=EXACT).contains(x)) => {
                Some(v.iter().map(|&x| x as f32).collect())
            }
            _ => None,
        }
    }

    /// The elements as integers (for shapes, axes, starts and ends): integer types as they are,
    /// `BOOL` as `0`/`1`; `None` for floating-point tensors.
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        match &self.elements {
            Elements::Int(v) => Some(v.clone()),
            Elements::Bool(v) => Some(v.iter().map(|&b| i64::from(b)).collect()),
            _ => None,
        }
    }

    /// Reads a `TensorProto`.
    ///
    /// # Errors
    /// [`OnnxError::Tensor`] for negative extents, external data, or an element count that does
    /// not match the extents; [`OnnxError::Unsupported`] for an element type that is not read
    /// (strings, 16-bit and 8-bit floats, complex).
    pub fn from_proto(t: &TensorProto) -> Result<TensorData, OnnxError> {
        let name = t.name().to_owned();
        let bad = |why: String| OnnxError::Tensor {
            name: name.clone(),
            why,
        };
        let dims = t
            .dims
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| bad(format!("negative extent {d}"))))
            .collect::<Result<Vec<usize>, OnnxError>>()?;
        let n = dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad(format!("extents {dims:?} overflow")))?;
        if !t.external_data.is_empty() || t.data_location == Some(1) {
            return Err(bad(
                "external data is not read (the tensor must be inside the file)".into(),
            ));
        }
        let code = t.data_type();
        let dt =
            DataType::try_from(code).map_err(|_| bad(format!("unknown element type {code}")))?;
        let raw = t.raw_data.as_deref();
        // `raw_data` holds `n` little-endian elements of `width` bytes.
        let chunks = |width: usize| -> Result<Option<std::slice::ChunksExact<'_, u8>>, OnnxError> {
            match raw {
                None => Ok(None),
                Some(r) if Some(r.len()) == n.checked_mul(width) => Ok(Some(r.chunks_exact(width))),
                Some(r) => Err(bad(format!(
                    "raw_data has {} bytes; {n} elements of {} take {width} bytes each",
                    r.len(),
                    dt.as_str_name()
                ))),
            }
        };
        let elements = match dt {
            DataType::Float => Elements::F32(match chunks(4)? {
                Some(c) => c
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                None => t.float_data.clone(),
            }),
            DataType::Double => Elements::F64(match chunks(8)? {
                Some(c) => c
                    .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect(),
                None => t.double_data.clone(),
            }),
            DataType::Int64 => Elements::Int(match chunks(8)? {
                Some(c) => c
                    .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect(),
                None => t.int64_data.clone(),
            }),
            DataType::Uint64 => Elements::Int(match chunks(8)? {
                Some(c) => c
                    .map(|b| {
                        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as i64
                    })
                    .collect(),
                None => t.uint64_data.iter().map(|&v| v as i64).collect(),
            }),
            DataType::Int32 => Elements::Int(match chunks(4)? {
                Some(c) => c
                    .map(|b| i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .collect(),
                None => t.int32_data.iter().map(|&v| i64::from(v)).collect(),
            }),
            DataType::Uint32 => Elements::Int(match chunks(4)? {
                Some(c) => c
                    .map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                    .collect(),
                // Stored in `uint64_data` by the schema's rule for UINT32.
                None => t.uint64_data.iter().map(|&v| v as i64).collect(),
            }),
            DataType::Int16 | DataType::Uint16 | DataType::Int8 | DataType::Uint8 => {
                let signed = matches!(dt, DataType::Int16 | DataType::Int8);
                let width = if matches!(dt, DataType::Int16 | DataType::Uint16) {
                    2
                } else {
                    1
                };
                Elements::Int(match chunks(width)? {
                    Some(c) => c
                        .map(|b| match (width, signed) {
                            (2, true) => i64::from(i16::from_le_bytes([b[0], b[1]])),
                            (2, false) => i64::from(u16::from_le_bytes([b[0], b[1]])),
                            (_, true) => i64::from(b[0] as i8),
                            (_, false) => i64::from(b[0]),
                        })
                        .collect(),
                    None => t.int32_data.iter().map(|&v| i64::from(v)).collect(),
                })
            }
            DataType::Bool => Elements::Bool(match chunks(1)? {
                Some(c) => c.map(|b| b[0] != 0).collect(),
                None => t.int32_data.iter().map(|&v| v != 0).collect(),
            }),
            other => {
                return Err(OnnxError::Unsupported {
                    node: format!("tensor {name:?}"),
                    op: "tensor".into(),
                    what: format!("element type {}", other.as_str_name()),
                    supported: "FLOAT, DOUBLE, the integer types and BOOL".into(),
                })
            }
        };
        let found = match &elements {
            Elements::F32(v) => v.len(),
            Elements::F64(v) => v.len(),
            Elements::Int(v) => v.len(),
            Elements::Bool(v) => v.len(),
        };
        if found != n {
            return Err(bad(format!(
                "{found} elements for extents {dims:?} ({n} elements)"
            )));
        }
        Ok(TensorData {
            data_type: code,
            dims,
            elements,
        })
    }

    /// Reads a serialized `TensorProto` (a backend test's `input_0.pb`, …).
    ///
    /// # Errors
    /// [`OnnxError::Decode`] for bytes that are not a `TensorProto`, then as
    /// [`TensorData::from_proto`].
    pub fn from_bytes(bytes: &[u8]) -> Result<TensorData, OnnxError> {
        let t = <TensorProto as prost::Message>::decode(bytes)
            .map_err(|e| OnnxError::Decode(e.to_string()))?;
        TensorData::from_proto(&t)
    }
}
