//! Tensor shapes: a rank of at most [`MAX_RANK`] and `u32` extents, `Copy` and allocation-free.

use core::fmt;

/// The largest rank a tensor may have, in the tape and in the plan format.
pub const MAX_RANK: usize = 4;

/// The largest element count of one tensor (2^28 elements, 1 GiB of `f32`).
pub const MAX_TENSOR_ELEMS: usize = 1 << 28;

/// A tensor shape, row-major. Rank 0 is a scalar with one element.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Shape {
    rank: u8,
    dims: [u32; MAX_RANK],
}

/// Why a shape could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeError {
    /// More than [`MAX_RANK`] dimensions were given.
    RankTooLarge {
        /// The rank that was asked for.
        rank: usize,
    },
    /// The element count exceeds [`MAX_TENSOR_ELEMS`] or overflows.
    TooManyElems,
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::RankTooLarge { rank } => {
                write!(f, "rank {rank} exceeds the maximum rank {MAX_RANK}")
            }
            ShapeError::TooManyElems => {
                write!(f, "element count exceeds {MAX_TENSOR_ELEMS}")
            }
        }
    }
}

impl core::error::Error for ShapeError {}

impl Shape {
    /// The scalar shape `[]`.
    pub const SCALAR: Shape = Shape {
        rank: 0,
        dims: [0; MAX_RANK],
    };

    /// Builds a shape from its extents.
    ///
    /// # Errors
    /// [`ShapeError::RankTooLarge`] past [`MAX_RANK`] dimensions, [`ShapeError::TooManyElems`] when
    /// the product exceeds [`MAX_TENSOR_ELEMS`].
    pub fn new(dims: &[usize]) -> Result<Shape, ShapeError> {
        if dims.len() > MAX_RANK {
            return Err(ShapeError::RankTooLarge { rank: dims.len() });
        }
        let mut out = Shape {
            rank: dims.len() as u8,
            dims: [0; MAX_RANK],
        };
        // The element count in u64, a zero extent making it zero whatever the others are, so the
        // answer is the same on 32- and 64-bit targets and in any extent order.
        let mut elems: u64 = 1;
        let zero = dims.contains(&0);
        for (slot, &d) in out.dims.iter_mut().zip(dims) {
            *slot = u32::try_from(d).map_err(|_| ShapeError::TooManyElems)?;
            if !zero {
                elems = elems.saturating_mul(u64::from(*slot));
            }
        }
        if !zero && elems > MAX_TENSOR_ELEMS as u64 {
            return Err(ShapeError::TooManyElems);
        }
        Ok(out)
    }

    /// Builds a shape from `u32` extents as stored in a plan (`rank` of them are used).
    ///
    /// # Errors
    /// As [`Shape::new`].
    pub fn from_u32(rank: usize, dims: [u32; MAX_RANK]) -> Result<Shape, ShapeError> {
        if rank > MAX_RANK {
            return Err(ShapeError::RankTooLarge { rank });
        }
        let mut d = [0usize; MAX_RANK];
        for (o, &i) in d.iter_mut().zip(dims.iter()).take(rank) {
            *o = i as usize;
        }
        // Unused extents must be zero so that equal shapes have equal bytes.
        if dims.iter().skip(rank).any(|&x| x != 0) {
            return Err(ShapeError::RankTooLarge { rank: MAX_RANK + 1 });
        }
        Shape::new(&d[..rank])
    }

    /// A vector shape `[n]`.
    ///
    /// # Panics
    /// When `n` exceeds [`MAX_TENSOR_ELEMS`] (a programming error in builder code).
    pub fn vector(n: usize) -> Shape {
        Shape::new(&[n]).expect("vector length exceeds MAX_TENSOR_ELEMS")
    }

    /// A matrix shape `[rows, cols]`.
    ///
    /// # Panics
    /// When `rows * cols` exceeds [`MAX_TENSOR_ELEMS`] (a programming error in builder code).
    pub fn matrix(rows: usize, cols: usize) -> Shape {
        Shape::new(&[rows, cols]).expect("matrix size exceeds MAX_TENSOR_ELEMS")
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// The extents as `u32`, padded with zeros to [`MAX_RANK`] (the plan format's layout).
    pub fn dims_u32(&self) -> [u32; MAX_RANK] {
        self.dims
    }

    /// The extent of dimension `axis`, or `None` past the rank.
    pub fn dim(&self, axis: usize) -> Option<usize> {
        if axis < self.rank() {
            Some(self.dims[axis] as usize)
        } else {
            None
        }
    }

    /// The extents as `usize`, in a fixed array; only the first [`Shape::rank`] are meaningful.
    pub fn dims(&self) -> [usize; MAX_RANK] {
        let mut d = [0usize; MAX_RANK];
        for (o, &i) in d.iter_mut().zip(self.dims.iter()) {
            *o = i as usize;
        }
        d
    }

    /// The element count (the product of the extents; 1 for a scalar).
    pub fn elems(&self) -> usize {
        if self.dims[..self.rank()].contains(&0) {
            return 0;
        }
        self.dims[..self.rank()]
            .iter()
            .fold(1usize, |a, &d| a.saturating_mul(d as usize))
    }

    /// The size in bytes of an `f32` tensor of this shape.
    pub fn bytes_f32(&self) -> usize {
        self.elems().saturating_mul(4)
    }

    /// True when `self` can be broadcast to `target` under NumPy's rules (trailing alignment,
    /// each extent equal or 1; see the NumPy broadcasting documentation).
    pub fn broadcasts_to(&self, target: &Shape) -> bool {
        if self.rank() > target.rank() {
            return false;
        }
        let off = target.rank() - self.rank();
        (0..self.rank()).all(|i| {
            let s = self.dims[i];
            s == target.dims[i + off] || s == 1
        })
    }

    /// Maps a row-major flat index of `target` to the flat index of `self` it reads when `self`
    /// is broadcast to `target` (see [`Shape::broadcasts_to`]). The caller guarantees
    /// `self.broadcasts_to(target)` and `flat < target.elems()`.
    pub fn broadcast_source_index(&self, target: &Shape, flat: usize) -> usize {
        let off = target.rank() - self.rank();
        let mut rem = flat;
        let mut src = 0usize;
        let mut src_stride = 1usize;
        let mut t = target.rank();
        while t > 0 {
            t -= 1;
            let extent = target.dims[t] as usize;
            let coord = rem.checked_rem(extent).unwrap_or(0);
            rem = rem.checked_div(extent).unwrap_or(0);
            if t >= off {
                let s = self.dims[t - off] as usize;
                if s != 1 {
                    src += coord * src_stride;
                }
                src_stride *= s;
            }
        }
        src
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for i in 0..self.rank() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", self.dims[i])?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_index_maps_rows_and_scalars() {
        let bias = Shape::new(&[3]).unwrap();
        let target = Shape::new(&[2, 3]).unwrap();
        assert!(bias.broadcasts_to(&target));
        let idx: [usize; 6] = core::array::from_fn(|i| bias.broadcast_source_index(&target, i));
        assert_eq!(idx, [0, 1, 2, 0, 1, 2]);
        let col = Shape::new(&[2, 1]).unwrap();
        let idx: [usize; 6] = core::array::from_fn(|i| col.broadcast_source_index(&target, i));
        assert_eq!(idx, [0, 0, 0, 1, 1, 1]);
        assert_eq!(Shape::SCALAR.broadcast_source_index(&target, 5), 0);
        assert!(!Shape::new(&[2]).unwrap().broadcasts_to(&target));
    }

    #[test]
    fn rejects_large_shapes() {
        assert_eq!(
            Shape::new(&[1, 1, 1, 1, 1]),
            Err(ShapeError::RankTooLarge { rank: 5 })
        );
        assert_eq!(
            Shape::new(&[1 << 20, 1 << 20]),
            Err(ShapeError::TooManyElems)
        );
        assert_eq!(Shape::SCALAR.elems(), 1);
        // A zero extent anywhere: zero elements, whatever the others (on every target).
        let big = u32::MAX as usize;
        for dims in [[big, big, big, 0], [0, big, big, big], [2, big, 0, big]] {
            assert_eq!(Shape::new(&dims).unwrap().elems(), 0);
        }
    }
}
