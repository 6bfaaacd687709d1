//! A CSV table for any plan: which columns are features and which are targets, class names as
//! labels, and feature standardization.
//!
//! [`load_table`] reads a CSV (optionally gzip) into a [`Dataset`]: for classification, one
//! target column holding integer labels or class names; for regression, `n_targets` float target
//! columns. The target columns are chosen by column number (counting from 1) or header name
//! ([`TableSpec::target_columns`]), by default the last ones; every other column is a feature,
//! in file order.
//!
//! # Class names
//!
//! A label column that is not made of integers holds class names. Class `k` is the `k`-th name
//! of the mapping ([`ClassNames`]): the names found in the data, sorted (byte order), unless the
//! caller gives a mapping (one saved by an earlier run: a checkpoint is only meaningful with the
//! mapping it was trained with), in which case a name outside it is an error.
//!
//! # Standardization
//!
//! [`Standardizer::fit`] computes each feature's mean and population standard deviation (the
//! divisor `n`, as scikit-learn's `StandardScaler`) in `f64` over the rows it is given (the
//! training split only), rounds both to `f32`, and [`Standardizer::apply`] maps a feature `x` to
//! `(x - mean) / std` in `f32`, the arithmetic a device repeats bit for bit. A feature whose
//! standard deviation is 0 keeps `std = 1`.

use std::path::Path;

use crate::io::data::{decompress_if_gzip, parse_feature, parse_label, DataError, Dataset};

/// What a table's target columns hold.
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    /// One column of class labels: integers `0..=255`, or class names (see the
    /// [module docs](self)); `classes` is the mapping to use for names, if one is already fixed.
    Classification {
        /// A fixed mapping from class index to name.
        classes: Option<Vec<String>>,
    },
    /// `n_targets` columns of float targets.
    Regression {
        /// Target columns per row.
        n_targets: usize,
    },
}

/// How to read a table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableSpec {
    /// Classification or regression.
    pub task: Task,
    /// The target columns, each a column number (counting from 1) or a header name; empty: the last column
    /// (classification) or the last `n_targets` columns (regression).
    pub target_columns: Vec<String>,
}

/// The class names of a classification table: class `k` is `names[k]`.
pub type ClassNames = Vec<String>;

/// A loaded table.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The rows: features and labels (classification) or targets (regression).
    pub dataset: Dataset,
    /// The class names when the label column held names; `None` for integer labels and for
    /// regression.
    pub class_names: Option<ClassNames>,
    /// The 0-based columns the features came from, in order.
    pub feature_columns: Vec<usize>,
    /// The 0-based target columns, in order.
    pub target_columns: Vec<usize>,
}

/// Why a table could not be read, beyond the CSV errors of [`DataError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The CSV itself, a field or a label.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A `--target-columns` selector names no column.
    #[error("target column {selector:?}: {why}")]
    UnknownColumn {
        /// The selector as given.
        selector: String,
        /// What is wrong.
        why: String,
    },
    /// The target columns do not fit the task.
    #[error("{0}")]
    Targets(String),
    /// A class name outside the fixed mapping.
    #[error("row {row}: class {name:?} is not one of the {count} classes the plan was trained with ({known})")]
    UnknownClass {
        /// 1-based line of the CSV text.
        row: u64,
        /// The name found.
        name: String,
        /// Classes in the mapping.
        count: usize,
        /// The mapping, comma-separated.
        known: String,
    },
}

/// Reads the table at `path`; see [`load_table_bytes`].
///
/// # Errors
/// [`DataError::Io`] when the file cannot be read, and those of [`load_table_bytes`].
pub fn load_table(path: &Path, spec: &TableSpec) -> Result<Table, TableError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_owned(),
        source,
    })?;
    load_table_bytes(&bytes, spec)
}

/// Reads a table from CSV bytes (gzip detected by its magic bytes). The first row is a header,
/// and skipped, when none of its fields parses as a number; every row must have as many columns
/// as the first data row. Features must be finite numbers.
///
/// # Errors
/// [`TableError::UnknownColumn`] for a selector that is out of range, a name without a header
/// or not in it; [`TableError::Targets`] for a number of target columns the task does not take
/// or no feature column left; [`TableError::UnknownClass`]; and the CSV's [`DataError`]s
/// (malformed text, [`DataError::RowLength`], [`DataError::NotANumber`],
/// [`DataError::NonFinite`], [`DataError::LabelOutOfRange`], [`DataError::Empty`]).
pub fn load_table_bytes(bytes: &[u8], spec: &TableSpec) -> Result<Table, TableError> {
    let (header, rows) = records(bytes)?;
    let width = rows.first().map(|(_, r)| r.len()).ok_or(DataError::Empty)?;
    let n_targets = match spec.task {
        Task::Classification { .. } => 1,
        Task::Regression { n_targets } => n_targets,
    };
    let target_columns = resolve_targets(&spec.target_columns, header.as_ref(), width, n_targets)?;
    if target_columns.len() != n_targets {
        return Err(TableError::Targets(match spec.task {
            Task::Classification { .. } => format!(
                "a classification plan takes one label column; {} target columns were given",
                target_columns.len()
            ),
            Task::Regression { n_targets } => format!(
                "the plan's target y has {n_targets} columns per row; {} target columns were given",
                target_columns.len()
            ),
        }));
    }
    let feature_columns: Vec<usize> = (0..width).filter(|c| !target_columns.contains(c)).collect();
    if feature_columns.is_empty() {
        return Err(TableError::Targets(
            "every column is a target: no feature column is left".into(),
        ));
    }
    let mut features = Vec::with_capacity(rows.len() * feature_columns.len());
    let mut targets = Vec::new();
    for (row, rec) in &rows {
        if rec.len() != width {
            return Err(DataError::RowLength {
                row: *row,
                expected: width,
                found: rec.len(),
            }
            .into());
        }
        for &c in &feature_columns {
            features.push(parse_feature(*row, c + 1, &rec[c])?);
        }
        if let Task::Regression { .. } = spec.task {
            for &c in &target_columns {
                targets.push(parse_feature(*row, c + 1, &rec[c])?);
            }
        }
    }
    let nf = feature_columns.len();
    let (dataset, class_names) = match &spec.task {
        Task::Regression { n_targets } => (
            Dataset::regression(features, targets, nf, *n_targets)?,
            None,
        ),
        Task::Classification { classes } => {
            let column = target_columns[0];
            let field = |rec: &csv::StringRecord| rec[column].trim().to_owned();
            // An empty label is a missing value, never a class of its own.
            if let Some((row, _)) = rows.iter().find(|(_, rec)| field(rec).is_empty()) {
                return Err(TableError::Targets(format!(
                    "row {row}, column {}: the label is empty",
                    column + 1
                )));
            }
            let numeric = rows
                .iter()
                .all(|(_, rec)| field(rec).parse::<f64>().is_ok());
            if numeric {
                let mut labels = Vec::with_capacity(rows.len());
                for (row, rec) in &rows {
                    labels.push(parse_label(*row, column + 1, &field(rec), 256)?);
                }
                let n_classes = labels.iter().max().map_or(0, |&m| usize::from(m) + 1);
                let ds = Dataset::from_parts(features, labels, Vec::new(), nf, n_classes)?;
                (ds, None)
            } else {
                let names = match classes {
                    Some(names) => names.clone(),
                    None => {
                        let mut names: Vec<String> = rows.iter().map(|(_, r)| field(r)).collect();
                        names.sort();
                        names.dedup();
                        names
                    }
                };
                if names.len() > 256 {
                    return Err(TableError::Targets(format!(
                        "the label column holds {} class names; at most 256 classes are supported",
                        names.len()
                    )));
                }
                let mut labels = Vec::with_capacity(rows.len());
                for (row, rec) in &rows {
                    let name = field(rec);
                    let k = names.iter().position(|n| *n == name).ok_or_else(|| {
                        TableError::UnknownClass {
                            row: *row,
                            name: name.clone(),
                            count: names.len(),
                            known: names.join(", "),
                        }
                    })?;
                    labels.push(k as u8);
                }
                let ds = Dataset::from_parts(features, labels, Vec::new(), nf, names.len())?;
                (ds, Some(names))
            }
        }
    };
    Ok(Table {
        dataset,
        class_names,
        feature_columns,
        target_columns,
    })
}

/// The header (if the first record is one) and the data records with their 1-based lines.
type Records = (Option<csv::StringRecord>, Vec<(u64, csv::StringRecord)>);

fn records(bytes: &[u8]) -> Result<Records, DataError> {
    let text = decompress_if_gzip(bytes)?;
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(&*text);
    let mut header = None;
    let mut rows = Vec::new();
    for (k, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|error| DataError::Csv {
            row: error.position().map_or(k as u64 + 1, |p| p.line().max(1)),
            error,
        })?;
        let row = rec.position().map_or(k as u64 + 1, |p| p.line());
        if k == 0 && rec.iter().all(|s| s.parse::<f64>().is_err()) {
            header = Some(rec);
            continue;
        }
        rows.push((row, rec));
    }
    if rows.is_empty() {
        return Err(DataError::Empty);
    }
    Ok((header, rows))
}

/// The 0-based target columns the selectors name (default: the last `n_targets`).
fn resolve_targets(
    selectors: &[String],
    header: Option<&csv::StringRecord>,
    width: usize,
    n_targets: usize,
) -> Result<Vec<usize>, TableError> {
    if selectors.is_empty() {
        if n_targets >= width {
            return Err(TableError::Targets(format!(
                "the rows have {width} columns: too few for {n_targets} target column(s) and a feature"
            )));
        }
        return Ok((width - n_targets..width).collect());
    }
    let mut out = Vec::new();
    for sel in selectors {
        // Column numbers count from 1, as the data errors number columns.
        let c = match sel.parse::<usize>() {
            Ok(c) if (1..=width).contains(&c) => c - 1,
            Ok(_) => {
                return Err(TableError::UnknownColumn {
                    selector: sel.clone(),
                    why: format!("the rows have {width} columns (1 to {width})"),
                })
            }
            Err(_) => match header {
                None => {
                    return Err(TableError::UnknownColumn {
                        selector: sel.clone(),
                        why: "the file has no header row; give column numbers, counting from 1"
                            .into(),
                    })
                }
                Some(h) => h.iter().position(|name| name == sel).ok_or_else(|| {
                    TableError::UnknownColumn {
                        selector: sel.clone(),
                        why: format!(
                            "the header's columns are {}",
                            h.iter().collect::<Vec<_>>().join(", ")
                        ),
                    }
                })?,
            },
        };
        if out.contains(&c) {
            return Err(TableError::UnknownColumn {
                selector: sel.clone(),
                why: "given twice".into(),
            });
        }
        out.push(c);
    }
    Ok(out)
}

/// Per-feature standardization, fitted on a training split: see the [module docs](self).
#[derive(Clone, Debug, PartialEq)]
pub struct Standardizer {
    /// Each feature's mean, `[n_features]`.
    pub mean: Vec<f32>,
    /// Each feature's population standard deviation (1 where it is 0), `[n_features]`.
    pub std: Vec<f32>,
}

impl Standardizer {
    /// Fits the mean and standard deviation of every feature of `train` (in `f64`, rounded to
    /// `f32`).
    ///
    /// # Shapes
    /// `train`'s features `[n, n_features]`; the result `[n_features]` each.
    pub fn fit(train: &Dataset) -> Standardizer {
        let nf = train.n_features();
        let (mut mean, mut std) = (vec![0.0f32; nf], vec![1.0f32; nf]);
        crate::protocol::standardizer_fit(&train.features, nf, &mut mean, &mut std);
        Standardizer { mean, std }
    }

    /// Standardizes `set`'s features in place: `x ← (x - mean) / std` in `f32`.
    ///
    /// # Shapes
    /// `set`'s features `[n, n_features]` with `n_features == self.mean.len()`.
    pub fn apply(&self, set: &mut Dataset) {
        crate::protocol::standardize_rows(&mut set.features, &self.mean, &self.std);
    }

    /// The JSON form saved beside a plan: `{"mean": [...], "std": [...]}` (each `f32` written
    /// in its shortest round-trip form, so [`Standardizer::from_json`] reads back the same
    /// bits).
    pub fn to_json(&self) -> String {
        serde_json::json!({ "mean": self.mean, "std": self.std }).to_string()
    }

    /// Reads [`Standardizer::to_json`]'s form.
    ///
    /// # Errors
    /// A message naming what is malformed.
    pub fn from_json(text: &str) -> Result<Standardizer, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let list = |key: &str| -> Result<Vec<f32>, String> {
            v.get(key)
                .and_then(|a| a.as_array())
                .ok_or_else(|| format!("no array {key:?}"))?
                .iter()
                .map(|x| {
                    x.as_f64()
                        .map(|x| x as f32)
                        .ok_or_else(|| format!("{key}: {x} is not a number"))
                })
                .collect()
        };
        let (mean, std) = (list("mean")?, list("std")?);
        if mean.len() != std.len() {
            return Err(format!(
                "{} means but {} standard deviations",
                mean.len(),
                std.len()
            ));
        }
        Ok(Standardizer { mean, std })
    }
}

/// The JSON form of class names saved beside a plan: an array, class `k` at index `k`.
pub fn class_names_to_json(names: &[String]) -> String {
    serde_json::json!(names).to_string()
}

/// Reads [`class_names_to_json`]'s form.
///
/// # Errors
/// A message naming what is malformed.
pub fn class_names_from_json(text: &str) -> Result<ClassNames, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    v.as_array()
        .ok_or("not a JSON array of class names")?
        .iter()
        .map(|n| {
            n.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{n} is not a string"))
        })
        .collect()
}

/// The mean squared error and the mean absolute error of `pred` against `target` over every
/// element (PyTorch's `nn.MSELoss` and `nn.L1Loss` with `reduction="mean"`), summed in `f64`.
///
/// # Shapes
/// `pred` and `target` of one length (`[rows, d_out]` flattened); `(0, 0)` when empty.
pub fn mse_mae(pred: &[f32], target: &[f32]) -> (f64, f64) {
    let n = pred.len().min(target.len());
    let (mut sq, mut abs) = (0.0f64, 0.0f64);
    for (&p, &t) in pred.iter().zip(target) {
        let d = f64::from(p) - f64::from(t);
        sq += d * d;
        abs += d.abs();
    }
    let n = n.max(1) as f64;
    (sq / n, abs / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classification() -> TableSpec {
        TableSpec {
            task: Task::Classification { classes: None },
            target_columns: Vec::new(),
        }
    }

    #[test]
    fn mse_and_mae_by_hand() {
        // Differences 0.5, -1, 2: squares 0.25 + 1 + 4 = 5.25; absolutes 3.5; over 3.
        let (mse, mae) = mse_mae(&[1.5, 0.0, 4.0], &[1.0, 1.0, 2.0]);
        assert_eq!(mse, 1.75);
        assert_eq!(mae, 3.5 / 3.0);
        assert_eq!(mse_mae(&[], &[]), (0.0, 0.0));
    }

    #[test]
    fn an_empty_label_is_an_error_naming_its_cell_not_a_class() {
        // With a header, data rows count from 2 (the file's line numbers).
        let e = load_table_bytes(b"a,b,y\n1,2,0\n3,4,\n5,6,1\n", &classification()).unwrap_err();
        assert!(
            e.to_string()
                .contains("row 3, column 3: the label is empty"),
            "{e}"
        );
        let e = load_table_bytes(b"1,2,cat\n3,4, \n", &classification()).unwrap_err();
        assert!(
            e.to_string()
                .contains("row 2, column 3: the label is empty"),
            "{e}"
        );
    }

    #[test]
    fn class_names_map_to_their_sorted_order_and_round_trip() {
        let csv = b"a,b,kind\n1,2,setosa\n3,4,virginica\n5,6,setosa\n7,8,versicolor\n";
        let t = load_table_bytes(csv, &classification()).unwrap();
        assert_eq!(
            t.class_names.as_deref().unwrap(),
            ["setosa", "versicolor", "virginica"]
        );
        assert_eq!(t.dataset.labels, [0, 2, 0, 1]);
        assert_eq!(t.dataset.features, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!(t.dataset.n_classes(), 3);
        let json = class_names_to_json(t.class_names.as_ref().unwrap());
        assert_eq!(json, r#"["setosa","versicolor","virginica"]"#);
        assert_eq!(
            class_names_from_json(&json).unwrap(),
            t.class_names.unwrap()
        );
        // A fixed mapping (an earlier run's) wins over the data's sorted order, and a name
        // outside it is an error naming the row and the name.
        let fixed = TableSpec {
            task: Task::Classification {
                classes: Some(vec![
                    "virginica".into(),
                    "setosa".into(),
                    "versicolor".into(),
                ]),
            },
            target_columns: Vec::new(),
        };
        let t = load_table_bytes(csv, &fixed).unwrap();
        assert_eq!(t.dataset.labels, [1, 0, 1, 2]);
        let e = load_table_bytes(b"1,2,setosa\n3,4,daisy\n", &fixed).unwrap_err();
        assert!(e.to_string().contains("row 2: class \"daisy\""), "{e}");
    }

    #[test]
    fn target_columns_by_index_or_name_and_regression_targets() {
        let csv = b"y1,x1,x2,y2\n0.5,1,2,-1\n1.5,3,4,-2\n";
        let spec = TableSpec {
            task: Task::Regression { n_targets: 2 },
            target_columns: vec!["y1".into(), "4".into()],
        };
        let t = load_table_bytes(csv, &spec).unwrap();
        assert_eq!(t.feature_columns, [1, 2]);
        assert_eq!(t.target_columns, [0, 3]);
        assert_eq!(t.dataset.features, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.dataset.targets(), [0.5, -1.0, 1.5, -2.0]);
        assert_eq!(t.dataset.len(), 2);
        // Default: the last n_targets columns.
        let spec = TableSpec {
            task: Task::Regression { n_targets: 1 },
            target_columns: Vec::new(),
        };
        let t = load_table_bytes(csv, &spec).unwrap();
        assert_eq!(t.dataset.targets(), [-1.0, -2.0]);
        assert_eq!(t.dataset.features, [0.5, 1.0, 2.0, 1.5, 3.0, 4.0]);
        for (cols, what) in [
            (
                vec!["y3".to_string()],
                "header's columns are y1, x1, x2, y2",
            ),
            (vec!["9".to_string()], "4 columns"),
            (vec!["0".to_string()], "1 to 4"),
            (vec!["1".to_string(), "1".to_string()], "twice"),
        ] {
            let spec = TableSpec {
                task: Task::Regression {
                    n_targets: cols.len(),
                },
                target_columns: cols,
            };
            let e = load_table_bytes(csv, &spec).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
        let spec = TableSpec {
            task: Task::Regression { n_targets: 2 },
            target_columns: vec!["1".into()],
        };
        let e = load_table_bytes(csv, &spec).unwrap_err().to_string();
        assert!(e.contains("y has 2 columns per row; 1 target"), "{e}");
        let spec = TableSpec {
            task: Task::Regression { n_targets: 1 },
            target_columns: vec!["x1".into()],
        };
        let e = load_table_bytes(b"1,2\n", &spec).unwrap_err().to_string();
        assert!(e.contains("no header row"), "{e}");
    }

    #[test]
    fn standardization_matches_numpy_and_round_trips_its_bits() {
        // numpy: x = [[1, 10], [2, 10], [4, 10]]; x.mean(0) = [7/3, 10];
        // x.std(0) = [sqrt(14/9), 0] = [1.2472191289246473, 0].
        let train =
            Dataset::regression(vec![1.0, 10.0, 2.0, 10.0, 4.0, 10.0], vec![0.0; 3], 2, 1).unwrap();
        let s = Standardizer::fit(&train);
        assert_eq!(s.mean, [(7.0f64 / 3.0) as f32, 10.0]);
        assert_eq!(s.std, [1.247_219_128_924_647_3f64 as f32, 1.0]);
        let mut t = train.clone();
        s.apply(&mut t);
        assert_eq!(t.features[0], (1.0 - s.mean[0]) / s.std[0]);
        assert_eq!(t.features[1], 0.0);
        // Standardized features of the training split have mean ~0 and std ~1.
        let col: Vec<f64> = t
            .features
            .iter()
            .step_by(2)
            .map(|&x| f64::from(x))
            .collect();
        let m = col.iter().sum::<f64>() / 3.0;
        let v = col.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 3.0;
        assert!(m.abs() < 1e-6 && (v - 1.0).abs() < 1e-6, "{m} {v}");
        let back = Standardizer::from_json(&s.to_json()).unwrap();
        assert_eq!(back, s);
        assert!(Standardizer::from_json(r#"{"mean":[1],"std":[]}"#).is_err());
    }
}
