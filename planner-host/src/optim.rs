//! Optimizers as recorded spec: the update is written against [`Recordable`], so recording it
//! appends update nodes to the training tape (the compiled path) and computing it is the
//! oracle's update. One body, two readings, the same bits.

use tapeplan_core::Recordable;

/// Plain stochastic gradient descent, PyTorch's `torch.optim.SGD` without momentum, dampening or
/// weight decay: `p ← p - lr · g`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// The learning rate.
    pub lr: f32,
}

impl Sgd {
    /// `Parameters::step`: the new value of each parameter. A parameter whose gradient was never
    /// reached (`None`) keeps its value (no node is recorded for it).
    ///
    /// Arithmetic: `sub(p, mul(g, fill(lr)))`.
    ///
    /// # Errors
    /// The payload's.
    pub fn step<R: Recordable>(
        &self,
        r: &mut R,
        params: &[R::Value],
        grads: &[Option<R::Value>],
    ) -> Result<Vec<Option<R::Value>>, R::Error> {
        params
            .iter()
            .zip(grads)
            .map(|(p, g)| match g {
                Some(g) => {
                    let scaled = r.scale(g, self.lr)?;
                    r.sub(p, &scaled).map(Some)
                }
                None => Ok(None),
            })
            .collect()
    }
}
