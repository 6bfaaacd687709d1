//! `input` and `parameter`: leaves. Their values come from outside the computation (the caller
//! sets inputs; parameters live in the persistent region). They have no kernel and no rule: a
//! leaf's cotangent is the answer, not something to pass on.
