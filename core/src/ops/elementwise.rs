//! Elementwise application: each output element is the op's scalar function of the same-index
//! argument elements, so the order of traversal cannot change a bit, and in-place application
//! (an output buffer that is also an argument buffer) gives the same bits as out-of-place.

/// `out[i] = f(x[i])`. Stops at the shortest buffer.
pub fn unary<E: Copy>(f: fn(E) -> E, x: &[E], out: &mut [E]) {
    for (o, &a) in out.iter_mut().zip(x) {
        *o = f(a);
    }
}

/// `out[i] = f(a[i], b[i])`. Stops at the shortest buffer.
pub fn binary<E: Copy>(f: fn(E, E) -> E, a: &[E], b: &[E], out: &mut [E]) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = f(x, y);
    }
}

/// `buf[i] = f(buf[i])`: a unary op in place.
pub fn unary_in_place<E: Copy>(f: fn(E) -> E, buf: &mut [E]) {
    for o in buf.iter_mut() {
        *o = f(*o);
    }
}

/// Which argument positions of a binary op share the output buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    /// The output overwrites the first argument.
    Lhs,
    /// The output overwrites the second argument.
    Rhs,
    /// Both arguments are the output buffer (`x * x` in place).
    Both,
}

/// A binary op in place: `buf` is the output and the argument(s) named by `which`; `other` is
/// the remaining argument (ignored for [`InPlace::Both`]). Stops at the shortest buffer.
pub fn binary_in_place<E: Copy>(f: fn(E, E) -> E, buf: &mut [E], other: &[E], which: InPlace) {
    match which {
        InPlace::Lhs => {
            for (o, &y) in buf.iter_mut().zip(other) {
                *o = f(*o, y);
            }
        }
        InPlace::Rhs => {
            for (o, &x) in buf.iter_mut().zip(other) {
                *o = f(x, *o);
            }
        }
        InPlace::Both => {
            for o in buf.iter_mut() {
                *o = f(*o, *o);
            }
        }
    }
}
