//! Training data: the handwritten digits set that ships in `data/`, a loader for other CSV
//! classification sets, seeded train/test splits and full-batch iteration.
//!
//! # The digits set
//!
//! Optical Recognition of Handwritten Digits (E. Alpaydin and C. Kaynak, UCI Machine Learning
//! Repository, 1998; CC BY 4.0), in the copy scikit-learn ships; attribution and format are in
//! `data/README.md`. 1797 rows of a gzip-compressed CSV without a header: columns 0..63 are an
//! 8x8 image, row-major, of integer pixel counts `0..=16`; column 64 is the class label `0..=9`.
//! [`DIGITS_GZ`] embeds the file in the binary, so [`digits`] needs no file system.
//!
//! Features are the pixel counts scaled by [`DIGITS_PIXEL_SCALE`] (`1/16`, a power of two, so
//! `count as f32 * 0.0625` is exact and every feature is one of the 17 values `k/16`): the same
//! bits on every platform, which the firmware relies on when it scales the raw [`Dataset::pixels`]
//! it embeds.
//!
//! # Row numbers
//!
//! Every [`DataError`] that points into a file carries `row`, the 1-based line of the CSV text
//! the problem is on (for a file without a header, the 1-based row number), and, where one
//! field is at fault, `column`, 1-based too: messages read "row 3, column 2: …", as a
//! spreadsheet numbers them.

use std::borrow::Cow;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::protocol::SplitMix64;

/// The digits set, gzip-compressed CSV, embedded at build time from `data/digits.csv.gz`
/// (`planner-host/data/` links to it, so the published crate carries the file).
pub const DIGITS_GZ: &[u8] =
    include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv.gz"));

/// Rows in the digits set.
pub const DIGITS_ROWS: usize = 1797;
/// Features per digits row: an 8x8 image.
pub const DIGITS_FEATURES: usize = 64;
/// Side of a digits image, in pixels.
pub const DIGITS_SIDE_PIXELS: usize = 8;
/// Classes in the digits set: the digits `0..=9`.
pub const DIGITS_CLASSES: usize = 10;
/// The largest pixel count in the digits set (each pixel counts set bits in a 4x4 block).
pub const DIGITS_PIXEL_MAX: u8 = 16;
/// Factor from a pixel count to a feature: `1/16`, exact in `f32`.
pub const DIGITS_PIXEL_SCALE: f32 = 0.0625;
/// Rows in the digits demo's training split.
pub const DIGITS_TRAIN_ROWS: usize = 1437;
/// Rows in the digits demo's test split (`DIGITS_ROWS - DIGITS_TRAIN_ROWS`).
pub const DIGITS_TEST_ROWS: usize = DIGITS_ROWS - DIGITS_TRAIN_ROWS;

/// The first two bytes of every gzip member (RFC 1952, section 2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Why a data set failed to load.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The bytes start with the gzip magic but do not decompress.
    #[error("bad gzip stream: {source}")]
    Gzip {
        /// What the decoder said.
        #[source]
        source: std::io::Error,
    },
    /// The CSV reader failed (for example on text that is not UTF-8). The message numbers the
    /// row and column as every other one does, not as the reader's own (0-based record, byte).
    #[error("row {row}{}", csv_reason(.error))]
    Csv {
        /// 1-based line of the CSV text.
        row: u64,
        /// What the CSV reader said.
        error: csv::Error,
    },
    /// A row has the wrong number of columns.
    #[error("row {row}: expected {expected} columns, found {found}")]
    RowLength {
        /// 1-based line of the CSV text.
        row: u64,
        /// Columns every row must have.
        expected: usize,
        /// Columns this row has.
        found: usize,
    },
    /// A field is not a number of the kind its column holds.
    #[error("row {row}, column {column}: {text:?} is not {expected}")]
    NotANumber {
        /// 1-based line of the CSV text.
        row: u64,
        /// 1-based column.
        column: usize,
        /// The field, trimmed.
        text: String,
        /// What the column holds ("an integer", "a number").
        expected: &'static str,
    },
    /// A digits pixel count outside `0..=16`.
    #[error("row {row}, column {column}: pixel count {found} is outside 0..={max}")]
    PixelOutOfRange {
        /// 1-based line of the CSV text.
        row: u64,
        /// 1-based column.
        column: usize,
        /// The count found.
        found: i64,
        /// The largest count allowed.
        max: u8,
    },
    /// A feature that is NaN or infinite.
    #[error("row {row}, column {column}: feature {text:?} is not finite")]
    NonFinite {
        /// 1-based line of the CSV text.
        row: u64,
        /// 1-based column.
        column: usize,
        /// The field, trimmed.
        text: String,
    },
    /// A class label outside the classes the set allows.
    #[error("row {row}: label {found} is outside 0..={max}")]
    LabelOutOfRange {
        /// 1-based line of the CSV text.
        row: u64,
        /// The label found.
        found: i64,
        /// The largest label allowed.
        max: u8,
    },
    /// The file holds no data rows.
    #[error("no data rows")]
    Empty,
    /// `n_features` of zero was asked for.
    #[error("a data set needs at least one feature")]
    NoFeatures,
    /// Parts handed to [`Dataset::from_parts`] disagree in length.
    #[error("{what}: expected {expected} elements, found {found}")]
    PartsLength {
        /// Which part.
        what: &'static str,
        /// Elements it must have.
        expected: usize,
        /// Elements it has.
        found: usize,
    },
}

/// A classification data set held in memory: `n` rows of `n_features` `f32` features and a
/// class label each.
///
/// # Shapes
///
/// - `features`: `[n, n_features]`, row-major.
/// - `labels`: `[n]`, each in `0..n_classes`.
/// - `pixels`: `[n, n_features]` raw digits counts `0..=16` for firmware embedding, with
///   `features[i] == pixels[i] as f32 * DIGITS_PIXEL_SCALE`; **empty** for a set that is not
///   made of pixel counts (one from [`load_csv`]).
///
/// Subsets and splits keep `n_features` and `n_classes` of the set they come from, so a split
/// whose training half happens to miss a class still says how wide the model's output is.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Features, `[n, n_features]` row-major.
    pub features: Vec<f32>,
    /// Class labels, `[n]`.
    pub labels: Vec<u8>,
    /// Raw pixel counts, `[n, n_features]`, or empty (see the type's docs).
    pub pixels: Vec<u8>,
    n_features: usize,
    n_classes: usize,
    /// Float targets of a regression set, `[n, n_targets]` row-major; empty (and `n_targets`
    /// 0) for a classification set.
    targets: Vec<f32>,
    n_targets: usize,
}

impl Dataset {
    /// A data set from its parts.
    ///
    /// # Errors
    ///
    /// [`DataError::NoFeatures`] for `n_features == 0`; [`DataError::PartsLength`] when
    /// `features` is not `labels.len() * n_features` long or `pixels` is neither empty nor as
    /// long as `features`; [`DataError::LabelOutOfRange`] (with `row` the 1-based row) for a
    /// label `>= n_classes`.
    pub fn from_parts(
        features: Vec<f32>,
        labels: Vec<u8>,
        pixels: Vec<u8>,
        n_features: usize,
        n_classes: usize,
    ) -> Result<Dataset, DataError> {
        if n_features == 0 {
            return Err(DataError::NoFeatures);
        }
        let expected = labels.len().saturating_mul(n_features);
        if features.len() != expected {
            return Err(DataError::PartsLength {
                what: "features",
                expected,
                found: features.len(),
            });
        }
        if !pixels.is_empty() && pixels.len() != expected {
            return Err(DataError::PartsLength {
                what: "pixels",
                expected,
                found: pixels.len(),
            });
        }
        if let Some((i, &l)) = labels
            .iter()
            .enumerate()
            .find(|&(_, &l)| usize::from(l) >= n_classes)
        {
            return Err(DataError::LabelOutOfRange {
                row: i as u64 + 1,
                found: i64::from(l),
                max: n_classes.saturating_sub(1).min(255) as u8,
            });
        }
        Ok(Dataset {
            features,
            labels,
            pixels,
            n_features,
            n_classes,
            targets: Vec::new(),
            n_targets: 0,
        })
    }

    /// A regression set: `n` rows of `n_features` features and `n_targets` float targets
    /// each. Its `labels` are empty and [`Dataset::n_classes`] is 0; [`Dataset::batches`]
    /// yields the targets.
    ///
    /// # Shapes
    /// `features: [n, n_features]`, `targets: [n, n_targets]`, row-major.
    ///
    /// # Errors
    /// [`DataError::NoFeatures`] for `n_features == 0` or `n_targets == 0`;
    /// [`DataError::PartsLength`] when the lengths disagree.
    pub fn regression(
        features: Vec<f32>,
        targets: Vec<f32>,
        n_features: usize,
        n_targets: usize,
    ) -> Result<Dataset, DataError> {
        if n_features == 0 || n_targets == 0 {
            return Err(DataError::NoFeatures);
        }
        let rows = features.len() / n_features;
        if !features.len().is_multiple_of(n_features)
            || targets.len() != rows.saturating_mul(n_targets)
        {
            return Err(DataError::PartsLength {
                what: "targets",
                expected: rows.saturating_mul(n_targets),
                found: targets.len(),
            });
        }
        Ok(Dataset {
            features,
            labels: Vec::new(),
            pixels: Vec::new(),
            n_features,
            n_classes: 0,
            targets,
            n_targets,
        })
    }

    /// The float targets of a regression set, `[n, n_targets]` row-major; empty for a
    /// classification set.
    pub fn targets(&self) -> &[f32] {
        &self.targets
    }

    /// Targets per row of a regression set; 0 for a classification set.
    pub fn n_targets(&self) -> usize {
        self.n_targets
    }

    /// Rows in the set.
    pub fn len(&self) -> usize {
        self.features.len() / self.n_features.max(1)
    }

    /// Whether the set has no rows.
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }

    /// Features per row (64 for digits).
    pub fn n_features(&self) -> usize {
        self.n_features
    }

    /// Classes the labels range over (10 for digits): labels are `0..n_classes`.
    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    /// Row `i`: its features (`[n_features]`) and label.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`, or for a regression set (which has no labels: see
    /// [`Dataset::targets`]).
    pub fn row(&self, i: usize) -> (&[f32], u8) {
        let f = &self.features[i * self.n_features..(i + 1) * self.n_features];
        (f, self.labels[i])
    }

    /// How many rows carry each label, `[n_classes]`.
    pub fn label_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.n_classes];
        for &l in &self.labels {
            counts[usize::from(l)] += 1;
        }
        counts
    }

    /// Full batches of `batch` consecutive rows, in row order: each item is the batch's features
    /// (`[batch, n_features]`, borrowed) and its labels as `f32` class indices (`[batch]`,
    /// `label as f32`, exact). **The last `len() % batch` rows are dropped**, so every batch has
    /// the shape a plan was built for; shuffle between epochs (for example with
    /// [`Dataset::split_seeded`] or [`Dataset::subset`] of a shuffled index list) so different
    /// rows fall off the end.
    ///
    /// # Panics
    ///
    /// If `batch == 0`.
    ///
    /// For a regression set the second item is the batch's targets, `[batch, n_targets]`.
    pub fn batches(&self, batch: usize) -> impl ExactSizeIterator<Item = (&[f32], Vec<f32>)> + '_ {
        assert!(batch > 0, "batch size must be at least 1");
        let (nf, nt) = (self.n_features, self.n_targets);
        (0..self.len() / batch).map(move |k| {
            let rows = k * batch..(k + 1) * batch;
            let x = &self.features[rows.start * nf..rows.end * nf];
            let target = if nt > 0 {
                self.targets[rows.start * nt..rows.end * nt].to_vec()
            } else {
                self.labels[rows].iter().map(|&l| f32::from(l)).collect()
            };
            (x, target)
        })
    }

    /// [`Dataset::batches`] without the label conversion: labels borrowed as `u8`
    /// (`[batch]`). The same rows, and the last `len() % batch` dropped likewise.
    ///
    /// # Panics
    ///
    /// If `batch == 0`.
    pub fn batches_u8(&self, batch: usize) -> impl ExactSizeIterator<Item = (&[f32], &[u8])> + '_ {
        assert!(batch > 0, "batch size must be at least 1");
        self.features
            .chunks_exact(batch * self.n_features)
            .zip(self.labels.chunks_exact(batch))
    }

    /// The rows at `indices`, in that order (repeats allowed).
    ///
    /// # Panics
    ///
    /// If an index is `>= self.len()`.
    pub fn subset(&self, indices: &[usize]) -> Dataset {
        let (nf, nt) = (self.n_features, self.n_targets);
        let mut features = Vec::with_capacity(indices.len() * nf);
        let mut targets = Vec::with_capacity(indices.len() * nt);
        let mut labels = Vec::with_capacity(indices.len());
        let mut pixels = Vec::new();
        if !self.pixels.is_empty() {
            pixels.reserve(indices.len() * nf);
        }
        for &i in indices {
            assert!(
                i < self.len(),
                "subset index {i} out of range for {} rows",
                self.len()
            );
            features.extend_from_slice(&self.features[i * nf..(i + 1) * nf]);
            if nt > 0 {
                targets.extend_from_slice(&self.targets[i * nt..(i + 1) * nt]);
            } else {
                labels.push(self.labels[i]);
            }
            if !self.pixels.is_empty() {
                pixels.extend_from_slice(&self.pixels[i * nf..(i + 1) * nf]);
            }
        }
        Dataset {
            features,
            labels,
            pixels,
            n_features: nf,
            n_classes: self.n_classes,
            targets,
            n_targets: nt,
        }
    }

    /// The rows `0..n` and the rows `n..len()`, in order.
    ///
    /// # Panics
    /// If `n > self.len()`.
    pub fn split_at(&self, n: usize) -> (Dataset, Dataset) {
        let head: Vec<usize> = (0..n).collect();
        let tail: Vec<usize> = (n..self.len()).collect();
        (self.subset(&head), self.subset(&tail))
    }

    /// The row indices `0..len()` shuffled by `SplitMix64::new(seed).shuffle`: the permutation
    /// [`Dataset::split_seeded`] uses, exposed so a caller can reproduce or log it.
    pub fn shuffled_indices(&self, seed: u64) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.len()).collect();
        SplitMix64::new(seed).shuffle(&mut idx);
        idx
    }

    /// A seeded train/test split: the rows of [`Dataset::shuffled_indices`]`(seed)`, the first
    /// `n_train` of them the training set and the rest the test set, each in shuffled order.
    /// A pure function of the set, `seed` and `n_train`. The digits demo uses
    /// [`DIGITS_TRAIN_ROWS`] (1437) train and [`DIGITS_TEST_ROWS`] (360) test rows.
    ///
    /// # Panics
    ///
    /// If `n_train > self.len()`.
    pub fn split_seeded(&self, seed: u64, n_train: usize) -> (Dataset, Dataset) {
        assert!(
            n_train <= self.len(),
            "n_train {n_train} exceeds the {} rows of the set",
            self.len()
        );
        let idx = self.shuffled_indices(seed);
        let (train, test) = idx.split_at(n_train);
        (self.subset(train), self.subset(test))
    }
}

/// The digits set from the copy embedded in the binary ([`DIGITS_GZ`]).
///
/// # Errors
///
/// Only if the embedded file is corrupt, which the crate's tests rule out: see
/// [`load_digits_bytes`].
pub fn digits() -> Result<Dataset, DataError> {
    load_digits_bytes(DIGITS_GZ)
}

/// The digits set (or a file in its format) from `path`, gzip-compressed or plain.
///
/// # Errors
///
/// [`DataError::Io`] when the file cannot be read, and the errors of [`load_digits_bytes`].
pub fn load_digits(path: &Path) -> Result<Dataset, DataError> {
    load_digits_bytes(&read_file(path)?)
}

/// The digits set from the bytes of a file in its format: CSV without a header, 64 integer
/// pixel counts `0..=16` then an integer label `0..=9` per row. The bytes may be gzip-compressed
/// (detected by the gzip magic bytes) or plain CSV text. Fields may be padded with spaces.
///
/// # Errors
///
/// [`DataError::Gzip`], [`DataError::Csv`], [`DataError::RowLength`] (not 65 columns),
/// [`DataError::NotANumber`] (a field that is not an integer), [`DataError::PixelOutOfRange`],
/// [`DataError::LabelOutOfRange`], [`DataError::Empty`] (no rows).
pub fn load_digits_bytes(gz: &[u8]) -> Result<Dataset, DataError> {
    let text = decompress_if_gzip(gz)?;
    let mut features = Vec::with_capacity(DIGITS_ROWS * DIGITS_FEATURES);
    let mut pixels = Vec::with_capacity(DIGITS_ROWS * DIGITS_FEATURES);
    let mut labels = Vec::with_capacity(DIGITS_ROWS);
    for_each_record(&text, DIGITS_FEATURES + 1, false, |row, rec| {
        for column in 0..DIGITS_FEATURES {
            let count = parse_int(row, column + 1, &rec[column])?;
            if !(0..=i64::from(DIGITS_PIXEL_MAX)).contains(&count) {
                return Err(DataError::PixelOutOfRange {
                    row,
                    column: column + 1,
                    found: count,
                    max: DIGITS_PIXEL_MAX,
                });
            }
            let count = count as u8;
            pixels.push(count);
            features.push(f32::from(count) * DIGITS_PIXEL_SCALE);
        }
        labels.push(parse_label(
            row,
            DIGITS_FEATURES,
            &rec[DIGITS_FEATURES],
            DIGITS_CLASSES,
        )?);
        Ok(())
    })?;
    if labels.is_empty() {
        return Err(DataError::Empty);
    }
    Ok(Dataset {
        features,
        labels,
        pixels,
        n_features: DIGITS_FEATURES,
        n_classes: DIGITS_CLASSES,
        targets: Vec::new(),
        n_targets: 0,
    })
}

/// A classification set from a CSV file: `n_features` numeric feature columns, then the class
/// label, a non-negative integer `0..=255`, in the last column. See [`load_csv_bytes`].
///
/// # Errors
///
/// [`DataError::Io`] when the file cannot be read, and the errors of [`load_csv_bytes`].
pub fn load_csv(path: &Path, n_features: usize) -> Result<Dataset, DataError> {
    load_csv_bytes(&read_file(path)?, n_features)
}

/// A classification set from CSV bytes, gzip-compressed (detected by the gzip magic bytes, not
/// the file name) or plain. Every row has `n_features + 1` columns: features parsed as `f32`
/// (which must be finite), then the label, an integer `0..=255` (`"3"` or `"3.0"`). The first row
/// is a header, and skipped, when none of its fields parses as a number. Features are taken as
/// they are, unscaled; `pixels` is left empty. `n_classes` is the largest label plus one.
///
/// # Errors
///
/// [`DataError::NoFeatures`] for `n_features == 0`, [`DataError::Gzip`], [`DataError::Csv`],
/// [`DataError::RowLength`], [`DataError::NotANumber`], [`DataError::NonFinite`],
/// [`DataError::LabelOutOfRange`], [`DataError::Empty`] (no data rows).
pub fn load_csv_bytes(bytes: &[u8], n_features: usize) -> Result<Dataset, DataError> {
    if n_features == 0 {
        return Err(DataError::NoFeatures);
    }
    let text = decompress_if_gzip(bytes)?;
    let mut features = Vec::new();
    let mut labels = Vec::new();
    for_each_record(&text, n_features + 1, true, |row, rec| {
        for column in 0..n_features {
            features.push(parse_feature(row, column + 1, &rec[column])?);
        }
        labels.push(parse_label(row, n_features + 1, &rec[n_features], 256)?);
        Ok(())
    })?;
    let Some(&max) = labels.iter().max() else {
        return Err(DataError::Empty);
    };
    Ok(Dataset {
        features,
        labels,
        pixels: Vec::new(),
        n_features,
        n_classes: usize::from(max) + 1,
        targets: Vec::new(),
        n_targets: 0,
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    fs::read(path).map_err(|source| DataError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The bytes, decompressed if they start with the gzip magic. Reads every gzip member
/// (RFC 1952 allows several, concatenated).
pub(crate) fn decompress_if_gzip(bytes: &[u8]) -> Result<Cow<'_, [u8]>, DataError> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(Cow::Borrowed(bytes));
    }
    decompress_capped(bytes, MAX_DECOMPRESSED_BYTES).map(Cow::Owned)
}

/// The most bytes a gzip CSV may decompress to (1 GiB): a few kilobytes of gzip can expand to
/// gigabytes (a "gzip bomb"), and the table is read whole.
pub(crate) const MAX_DECOMPRESSED_BYTES: u64 = 1 << 30;

/// Decompresses `bytes` (gzip, possibly several members), refusing output over `limit` bytes.
fn decompress_capped(bytes: &[u8], limit: u64) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|source| DataError::Gzip { source })?;
    if out.len() as u64 > limit {
        return Err(DataError::Gzip {
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "it decompresses to over {limit} bytes, more than a CSV read whole may take"
                ),
            ),
        });
    }
    Ok(out)
}

/// Calls `f(row, record)` for every CSV record of `text`, checking each has `width` columns;
/// `row` is the record's 1-based line. With `header_allowed`, a first record none of whose
/// fields parses as a number is skipped.
fn for_each_record(
    text: &[u8],
    width: usize,
    header_allowed: bool,
    mut f: impl FnMut(u64, &csv::StringRecord) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text);
    let mut rec = csv::StringRecord::new();
    let mut first = true;
    let mut last_row = 0;
    loop {
        match reader.read_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(source) => {
                let row = source.position().map_or(last_row + 1, |p| p.line().max(1));
                return Err(DataError::Csv { row, error: source });
            }
        }
        let row = rec.position().map_or(last_row + 1, |p| p.line());
        last_row = row;
        if first {
            first = false;
            if header_allowed && rec.iter().all(|s| s.trim().parse::<f64>().is_err()) {
                continue;
            }
        }
        if rec.len() != width {
            return Err(DataError::RowLength {
                row,
                expected: width,
                found: rec.len(),
            });
        }
        f(row, &rec)?;
    }
}

/// What went wrong in the CSV reader, after "row N": the field for text that is not UTF-8.
fn csv_reason(error: &csv::Error) -> String {
    match error.kind() {
        csv::ErrorKind::Utf8 { err, .. } => {
            format!(", column {}: the text is not UTF-8", err.field() + 1)
        }
        csv::ErrorKind::Io(e) => format!(": cannot read the text: {e}"),
        _ => ": malformed csv".to_string(),
    }
}

/// A feature: a finite `f32`; `column` is 1-based.
pub(crate) fn parse_feature(row: u64, column: usize, field: &str) -> Result<f32, DataError> {
    let field = field.trim();
    let x: f32 = field.parse().map_err(|_| DataError::NotANumber {
        row,
        column,
        text: field.to_owned(),
        expected: "a number",
    })?;
    if !x.is_finite() {
        return Err(DataError::NonFinite {
            row,
            column,
            text: field.to_owned(),
        });
    }
    Ok(x)
}

/// An integer field; `column` is 1-based.
fn parse_int(row: u64, column: usize, field: &str) -> Result<i64, DataError> {
    let field = field.trim();
    field.parse().map_err(|_| DataError::NotANumber {
        row,
        column,
        text: field.to_owned(),
        expected: "an integer",
    })
}

/// A label in `0..n_classes` (`n_classes <= 256`): an integer, or a number with an integral
/// value such as `"3.0"`; `column` is 1-based.
pub(crate) fn parse_label(
    row: u64,
    column: usize,
    field: &str,
    n_classes: usize,
) -> Result<u8, DataError> {
    let field = field.trim();
    let value = match field.parse::<i64>() {
        Ok(v) => v,
        Err(_) => match field.parse::<f64>() {
            Ok(x) if x.fract() == 0.0 && x.abs() < 1e15 => x as i64,
            _ => {
                return Err(DataError::NotANumber {
                    row,
                    column,
                    text: field.to_owned(),
                    expected: "an integer label",
                })
            }
        },
    };
    let max = n_classes - 1;
    if !(0..=max as i64).contains(&value) {
        return Err(DataError::LabelOutOfRange {
            row,
            found: value,
            max: max as u8,
        });
    }
    Ok(value as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row_text(pixels: &[&str], label: &str) -> String {
        let mut fields: Vec<&str> = pixels.to_vec();
        fields.push(label);
        fields.join(",")
    }

    fn zeros_row(label: &str) -> String {
        row_text(&["0"; 64], label)
    }

    fn gzip(text: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(text).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn digits_has_1797_rows_of_64_features() {
        let d = digits().unwrap();
        assert_eq!(d.len(), DIGITS_ROWS);
        assert_eq!(d.n_features(), 64);
        assert_eq!(d.n_classes(), 10);
        assert_eq!(d.features.len(), 1797 * 64);
        assert_eq!(d.pixels.len(), 1797 * 64);
        assert_eq!(d.labels.len(), 1797);
    }

    #[test]
    fn digits_label_counts() {
        let d = digits().unwrap();
        let counts = d.label_counts();
        assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
        assert_eq!(counts.iter().sum::<usize>(), DIGITS_ROWS);
    }

    #[test]
    fn digits_first_and_last_rows() {
        let d = digits().unwrap();
        #[rustfmt::skip]
        let first: [u8; 64] = [
            0, 0, 5, 13, 9, 1, 0, 0,
            0, 0, 13, 15, 10, 15, 5, 0,
            0, 3, 15, 2, 0, 11, 8, 0,
            0, 4, 12, 0, 0, 8, 8, 0,
            0, 5, 8, 0, 0, 9, 8, 0,
            0, 4, 11, 0, 1, 12, 7, 0,
            0, 2, 14, 5, 10, 12, 0, 0,
            0, 0, 6, 13, 10, 0, 0, 0,
        ];
        assert_eq!(&d.pixels[..64], &first);
        assert_eq!(d.labels[0], 0);
        let (f, l) = d.row(0);
        assert_eq!(l, 0);
        assert_eq!(f[2], 0.3125);
        assert_eq!(f[3], 0.8125);
        assert_eq!(d.labels[1], 1);
        assert_eq!(d.labels[DIGITS_ROWS - 1], 8);
        assert_eq!(&d.pixels[(DIGITS_ROWS - 1) * 64..][..4], &[0, 0, 10, 14]);
    }

    #[test]
    fn pixel_scaling_is_exact() {
        let d = digits().unwrap();
        for (&f, &p) in d.features.iter().zip(&d.pixels) {
            assert!(p <= DIGITS_PIXEL_MAX);
            assert_eq!(f.to_bits(), (f32::from(p) * 0.0625).to_bits());
            assert_eq!(f.to_bits(), (f32::from(p) / 16.0).to_bits());
            assert_eq!(f64::from(f), f64::from(p) / 16.0);
        }
        assert_eq!(d.features.iter().copied().fold(0.0f32, f32::max), 1.0);
    }

    #[test]
    fn load_digits_from_file_matches_embedded() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/digits.csv.gz");
        assert_eq!(load_digits(&path).unwrap(), digits().unwrap());
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let err = load_digits(Path::new("/nonexistent/digits.csv.gz")).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/digits.csv.gz"));
    }

    #[test]
    fn split_sizes_and_partition() {
        let d = digits().unwrap();
        let (train, test) = d.split_seeded(42, DIGITS_TRAIN_ROWS);
        assert_eq!(train.len(), 1437);
        assert_eq!(test.len(), 360);
        assert_eq!(train.n_features(), 64);
        assert_eq!(test.n_classes(), 10);
        assert_eq!(train.pixels.len(), 1437 * 64);
        // Together the halves are the shuffled set, row for row.
        let idx = d.shuffled_indices(42);
        let mut sorted = idx.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..DIGITS_ROWS).collect::<Vec<_>>());
        assert_eq!(train, d.subset(&idx[..1437]));
        assert_eq!(test, d.subset(&idx[1437..]));
        let mut counts = train.label_counts();
        for (c, t) in counts.iter_mut().zip(test.label_counts()) {
            *c += t;
        }
        assert_eq!(counts, d.label_counts());
    }

    #[test]
    fn split_is_deterministic_per_seed() {
        let d = digits().unwrap();
        let a = d.split_seeded(7, DIGITS_TRAIN_ROWS);
        let b = d.split_seeded(7, DIGITS_TRAIN_ROWS);
        assert_eq!(a, b);
        let c = d.split_seeded(8, DIGITS_TRAIN_ROWS);
        assert_ne!(a.0, c.0);
        assert_ne!(a.1, c.1);
        // The permutation is the rng's shuffle, nothing else.
        let mut idx: Vec<usize> = (0..DIGITS_ROWS).collect();
        SplitMix64::new(7).shuffle(&mut idx);
        assert_eq!(d.shuffled_indices(7), idx);
    }

    #[test]
    fn split_edges() {
        let d = digits().unwrap();
        let (all, none) = d.split_seeded(1, DIGITS_ROWS);
        assert_eq!((all.len(), none.len()), (DIGITS_ROWS, 0));
        assert!(none.is_empty());
        assert_eq!(none.n_features(), 64);
        let (none, all) = d.split_seeded(1, 0);
        assert_eq!((none.len(), all.len()), (0, DIGITS_ROWS));
    }

    #[test]
    #[should_panic(expected = "exceeds")]
    fn split_larger_than_set_panics() {
        digits().unwrap().split_seeded(1, DIGITS_ROWS + 1);
    }

    #[test]
    fn batches_drop_the_partial_tail() {
        let d = digits().unwrap();
        let batches: Vec<_> = d.batches(32).collect();
        assert_eq!(batches.len(), 1797 / 32);
        assert_eq!(d.batches(32).len(), 56);
        for (i, (f, l)) in batches.iter().enumerate() {
            assert_eq!(f.len(), 32 * 64);
            assert_eq!(l.len(), 32);
            assert_eq!(*f, &d.features[i * 32 * 64..(i + 1) * 32 * 64]);
            for (j, &x) in l.iter().enumerate() {
                assert_eq!(x, f32::from(d.labels[i * 32 + j]));
            }
        }
        assert_eq!(d.batches(1797).len(), 1);
        assert_eq!(d.batches(1798).len(), 0);
        assert_eq!(d.batches_u8(1).len(), 1797);
        let (_, l) = d.batches_u8(10).nth(2).unwrap();
        assert_eq!(l, &d.labels[20..30]);
    }

    #[test]
    #[should_panic(expected = "batch size")]
    fn zero_batch_panics() {
        let _ = digits().unwrap().batches(0);
    }

    #[test]
    fn subset_picks_rows_in_order() {
        let d = digits().unwrap();
        let s = d.subset(&[5, 0, 5]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.row(0), d.row(5));
        assert_eq!(s.row(1), d.row(0));
        assert_eq!(s.row(2), d.row(5));
        assert_eq!(&s.pixels[64..128], &d.pixels[..64]);
        assert_eq!(s.n_classes(), 10);
    }

    #[test]
    fn plain_and_gzip_digits_text_agree() {
        let text = format!("{}\n{}\n", zeros_row("3"), row_text(&["16"; 64], "9"));
        let plain = load_digits_bytes(text.as_bytes()).unwrap();
        let gz = load_digits_bytes(&gzip(text.as_bytes())).unwrap();
        assert_eq!(plain, gz);
        assert_eq!(plain.labels, [3, 9]);
        assert!(plain.features[64..].iter().all(|&f| f == 1.0));
    }

    #[test]
    fn short_row_is_a_row_length_error() {
        let text = format!("{}\n{}\n", zeros_row("1"), row_text(&["0"; 63], "1"));
        let err = load_digits_bytes(text.as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::RowLength {
                    row: 2,
                    expected: 65,
                    found: 64
                }
            ),
            "{err}"
        );
        assert_eq!(err.to_string(), "row 2: expected 65 columns, found 64");
    }

    #[test]
    fn pixel_17_is_out_of_range() {
        let mut px = ["0"; 64];
        px[10] = "17";
        let text = format!(
            "{}\n{}\n{}\n",
            zeros_row("0"),
            zeros_row("0"),
            row_text(&px, "4")
        );
        let err = load_digits_bytes(text.as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::PixelOutOfRange {
                    row: 3,
                    column: 11,
                    found: 17,
                    max: 16
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "row 3, column 11: pixel count 17 is outside 0..=16"
        );
        px[10] = "-1";
        let err = load_digits_bytes(row_text(&px, "4").as_bytes()).unwrap_err();
        assert!(
            matches!(err, DataError::PixelOutOfRange { found: -1, .. }),
            "{err}"
        );
    }

    #[test]
    fn label_10_is_out_of_range() {
        let err = load_digits_bytes(zeros_row("10").as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::LabelOutOfRange {
                    row: 1,
                    found: 10,
                    max: 9
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn non_integer_pixel_is_not_a_number() {
        let mut px = ["0"; 64];
        px[0] = "x";
        let err = load_digits_bytes(row_text(&px, "0").as_bytes()).unwrap_err();
        assert!(
            matches!(&err, DataError::NotANumber { row: 1, column: 1, text, .. } if text == "x"),
            "{err}"
        );
        px[0] = "1.5";
        let err = load_digits_bytes(row_text(&px, "0").as_bytes()).unwrap_err();
        assert!(matches!(err, DataError::NotANumber { .. }), "{err}");
    }

    #[test]
    fn a_gzip_stream_that_expands_past_the_cap_is_refused() {
        // 64 KiB of one byte compresses to a few hundred: over a 4 KiB cap, an error naming
        // the cap; at the cap's size exactly, the bytes.
        let big = vec![b'1'; 64 << 10];
        let gz = gzip(&big);
        assert!(gz.len() < 1024);
        match decompress_capped(&gz, 4096) {
            Err(DataError::Gzip { source }) => {
                assert!(source.to_string().contains("over 4096 bytes"), "{source}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(decompress_capped(&gz, 64 << 10).unwrap(), big);
    }

    #[test]
    fn empty_and_corrupt_inputs() {
        assert!(matches!(load_digits_bytes(b""), Err(DataError::Empty)));
        let mut gz = gzip(zeros_row("1").as_bytes());
        gz.truncate(gz.len() / 2);
        assert!(matches!(
            load_digits_bytes(&gz),
            Err(DataError::Gzip { .. })
        ));
        let mut bad = zeros_row("1").into_bytes();
        bad[0] = 0xff;
        let err = load_digits_bytes(&bad).unwrap_err();
        assert!(matches!(err, DataError::Csv { row: 1, .. }), "{err}");
        assert_eq!(err.to_string(), "row 1, column 1: the text is not UTF-8");
        // The third field of the second line: numbered like every other error.
        let mut bad = format!("{}\n{}", zeros_row("1"), zeros_row("1")).into_bytes();
        let at = zeros_row("1").len() + 1 + "0,0,".len();
        bad[at] = 0xff;
        let err = load_digits_bytes(&bad).unwrap_err();
        assert_eq!(err.to_string(), "row 2, column 3: the text is not UTF-8");
    }

    #[test]
    fn generic_csv_with_header_plain_and_gzip() {
        let text = "a,b,class\n0.5,-1e-3,2\n 3 , 4 , 0.0 \n";
        let d = load_csv_bytes(text.as_bytes(), 2).unwrap();
        assert_eq!(d.features, [0.5, -1e-3, 3.0, 4.0]);
        assert_eq!(d.labels, [2, 0]);
        assert_eq!(d.n_features(), 2);
        assert_eq!(d.n_classes(), 3);
        assert!(d.pixels.is_empty());
        assert_eq!(load_csv_bytes(&gzip(text.as_bytes()), 2).unwrap(), d);
        let subset = d.subset(&[1]);
        assert_eq!(subset.features, [3.0, 4.0]);
        assert!(subset.pixels.is_empty());
    }

    #[test]
    fn generic_csv_from_file_detects_gzip_by_magic() {
        let dir = std::env::temp_dir().join(format!("tapeplan-data-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // A gzip file without a .gz name still loads, and the digits file loads generically.
        let path = dir.join("digits-no-extension");
        fs::write(&path, DIGITS_GZ).unwrap();
        let d = load_csv(&path, 64).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let digits = digits().unwrap();
        assert_eq!(d.labels, digits.labels);
        assert_eq!(d.n_classes(), 10);
        for (&raw, &scaled) in d.features.iter().zip(&digits.features) {
            assert_eq!(raw * DIGITS_PIXEL_SCALE, scaled);
        }
    }

    #[test]
    fn generic_csv_errors() {
        let err = load_csv_bytes(b"1,2,0\n1,2\n", 2).unwrap_err();
        assert!(matches!(err, DataError::RowLength { row: 2, .. }), "{err}");
        let err = load_csv_bytes(b"1,2,0\n1,nan,0\n", 2).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::NonFinite {
                    row: 2,
                    column: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "row 2, column 2: feature \"nan\" is not finite"
        );
        let err = load_csv_bytes(b"1,2,0\n1,z,0\n", 2).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::NotANumber {
                    row: 2,
                    column: 2,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.to_string(), "row 2, column 2: \"z\" is not a number");
        let err = load_csv_bytes(b"1,2,0\n1,2,256\n", 2).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::LabelOutOfRange {
                    row: 2,
                    found: 256,
                    ..
                }
            ),
            "{err}"
        );
        let err = load_csv_bytes(b"1,2,0.5\n", 2).unwrap_err();
        assert!(matches!(err, DataError::NotANumber { .. }), "{err}");
        assert!(matches!(
            load_csv_bytes(b"x,y,label\n", 2),
            Err(DataError::Empty)
        ));
        assert!(matches!(
            load_csv_bytes(b"1,0\n", 0),
            Err(DataError::NoFeatures)
        ));
    }

    #[test]
    fn from_parts_checks_lengths_and_labels() {
        let d = Dataset::from_parts(vec![0.0; 6], vec![0, 1, 2], Vec::new(), 2, 3).unwrap();
        assert_eq!((d.len(), d.n_features(), d.n_classes()), (3, 2, 3));
        assert!(matches!(
            Dataset::from_parts(vec![0.0; 5], vec![0, 1, 2], Vec::new(), 2, 3),
            Err(DataError::PartsLength {
                what: "features",
                ..
            })
        ));
        assert!(matches!(
            Dataset::from_parts(vec![0.0; 6], vec![0, 1, 2], vec![0; 5], 2, 3),
            Err(DataError::PartsLength { what: "pixels", .. })
        ));
        assert!(matches!(
            Dataset::from_parts(vec![0.0; 6], vec![0, 1, 3], Vec::new(), 2, 3),
            Err(DataError::LabelOutOfRange {
                row: 3,
                found: 3,
                ..
            })
        ));
    }
}
