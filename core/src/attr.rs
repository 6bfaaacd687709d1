//! An instruction's attribute, typed: what an opcode needs besides its arguments (a fill value,
//! an exponent, a window, an axis, a target shape). Each opcode has one [`AttrKind`] (a column
//! of the opcode table); [`crate::ops::infer`] rejects an attribute of another kind.
//!
//! This is the in-memory form. Its bytes in a plan are written only by
//! [`crate::format::encode_attr`] and read only by [`crate::format::decode_attr`]; the layout is
//! stated once, in `docs/plan-format.md` ("Attributes").

use core::hash::{Hash, Hasher};

use crate::Shape;

/// Which attribute an opcode takes (the opcode table's `attr` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttrKind {
    /// None: the output shape follows from the arguments.
    None,
    /// A target shape, which is also the output shape.
    Target,
    /// A fill value and the output shape.
    Fill,
    /// A constant exponent.
    Pow,
    /// A window along one axis.
    Window,
    /// One axis.
    Axis,
}

impl AttrKind {
    /// The kind's name, as the plan format's opcode table spells it.
    pub const fn name(self) -> &'static str {
        match self {
            AttrKind::None => "none",
            AttrKind::Target => "target",
            AttrKind::Fill => "fill",
            AttrKind::Pow => "pow",
            AttrKind::Window => "window",
            AttrKind::Axis => "axis",
        }
    }
}

/// An instruction's attribute.
///
/// New kinds (a convolution's strides, padding per side, dilation, groups and kernel shape; a
/// pooling window) are new variants here, a new [`AttrKind`] and a new row of the plan format's
/// attribute table; the format's framing (an inline word or a length-prefixed block) does not
/// change.
#[derive(Clone, Copy, Debug, Default)]
pub enum Attr {
    /// No attribute.
    #[default]
    None,
    /// The output shape, given rather than inferred (leaves, `reshape`, `broadcast`, `sum_to`,
    /// `max_to`, `one_hot`, `uniform`).
    Target(Shape),
    /// `fill`: every element of `shape` equal to `value`.
    Fill {
        /// The value (its bit pattern is kept: `-0.0` and NaN payloads included).
        value: f32,
        /// The output shape.
        shape: Shape,
    },
    /// `pow`: the constant exponent.
    Pow(f32),
    /// `slice` and `pad`: the window `[start, start + len)` along `axis` of the larger tensor
    /// (`slice`'s argument, `pad`'s output) — for `slice`, `len` is the output's extent along
    /// `axis`; for `pad`, the output's extent along `axis` (the argument sits at `start`).
    Window {
        /// The axis.
        axis: usize,
        /// The window's first index along `axis`.
        start: usize,
        /// For `slice`: the window's length; for `pad`: the padded extent.
        len: usize,
    },
    /// `concat`: the axis.
    Axis(usize),
}

impl Attr {
    /// No attribute.
    pub const NONE: Attr = Attr::None;

    /// A target shape.
    pub fn target(shape: Shape) -> Attr {
        Attr::Target(shape)
    }

    /// A fill value and its shape.
    pub fn fill(value: f32, shape: Shape) -> Attr {
        Attr::Fill { value, shape }
    }

    /// The attribute's kind.
    pub fn kind(&self) -> AttrKind {
        match self {
            Attr::None => AttrKind::None,
            Attr::Target(_) => AttrKind::Target,
            Attr::Fill { .. } => AttrKind::Fill,
            Attr::Pow(_) => AttrKind::Pow,
            Attr::Window { .. } => AttrKind::Window,
            Attr::Axis(_) => AttrKind::Axis,
        }
    }

    /// The shape the attribute gives as the output shape (targets and fills), if any.
    pub fn target_shape(&self) -> Option<Shape> {
        match self {
            Attr::Target(s) | Attr::Fill { shape: s, .. } => Some(*s),
            _ => None,
        }
    }

    /// The scalar a `fill` writes or a `pow` raises to (`0.0` for every other attribute).
    pub fn scalar(&self) -> f32 {
        match self {
            Attr::Fill { value, .. } => *value,
            Attr::Pow(p) => *p,
            _ => 0.0,
        }
    }

    /// The same attribute with its target shape (if it has one) replaced by `shape`.
    pub fn with_target(self, shape: Shape) -> Attr {
        match self {
            Attr::Target(_) => Attr::Target(shape),
            Attr::Fill { value, .. } => Attr::Fill { value, shape },
            other => other,
        }
    }

    /// A value that compares and hashes as the attribute does (floats by their bits).
    fn key(&self) -> (AttrKind, [u32; 4], Option<Shape>) {
        let u = |x: usize| x as u32;
        match *self {
            Attr::None => (AttrKind::None, [0; 4], None),
            Attr::Target(s) => (AttrKind::Target, [0; 4], Some(s)),
            Attr::Fill { value, shape } => {
                (AttrKind::Fill, [value.to_bits(), 0, 0, 0], Some(shape))
            }
            Attr::Pow(p) => (AttrKind::Pow, [p.to_bits(), 0, 0, 0], None),
            Attr::Window { axis, start, len } => {
                (AttrKind::Window, [u(axis), u(start), u(len), 0], None)
            }
            Attr::Axis(a) => (AttrKind::Axis, [u(a), 0, 0, 0], None),
        }
    }
}

/// Floats compare by their bit patterns (so `-0.0 != 0.0` and a NaN equals itself): two equal
/// attributes give the same bits.
impl PartialEq for Attr {
    fn eq(&self, other: &Attr) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Attr {}

impl Hash for Attr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}
