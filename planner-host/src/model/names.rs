//! The names a plan gives its tensors, and the one rule that tells training state from model
//! tensors.
//!
//! The plan format holds names of 1 to [`NAME_BYTES`] (24) bytes of UTF-8 without NUL
//! (`docs/plan-format.md`). Two things can make a name too long, and each has one shortening
//! rule, deterministic and written here once:
//!
//! - **A model's tensor** whose PyTorch `state_dict` key is longer (`layer1.0.downsample.1.
//!   running_mean`, from an ONNX file or the layer API) takes [`plan_name`]: its first at most 15
//!   bytes, `~`, and the 8 hex digits of the whole key's 32-bit FNV-1a hash (24 bytes). The
//!   model keeps the mapping (`OnnxModel::names`, `Sequential::names`), and import matches a
//!   file's full key to its shortened plan name.
//! - **An optimizer's per-parameter state** is `<param>.<suffix>` (`fc.weight.m`, `fc.weight.v`,
//!   `fc.weight.b`) when that fits, which every name of at most 22 bytes does; for a longer
//!   parameter name it is [`optimizer_state_name`]: the parameter's first at most 13 bytes, `~`,
//!   the 8 hex digits of the parameter's name's FNV-1a hash, `.`, the suffix (24 bytes for a
//!   one-byte suffix: `features.10.b~1a2b3c4d.m`). So every parameter name the plan format holds
//!   can take every optimizer, and the names of existing plans (short names) do not change.
//!
//! The parameter of a piece of state is derivable, never stored: [`is_training_state`] applies
//! the same rule to every other persistent name of the plan. Two names that the rules map to
//! one (a probability of about 2^-32 per pair) are refused when the job is built, with an error
//! naming the name taken twice.

/// The plan format's longest name, in bytes.
pub const NAME_BYTES: usize = tapeplan_core::format::NAME_BYTES;

/// The suffixes of an optimizer's per-parameter state: Adam's first and second moments `m`, `v`
/// and the momentum buffer `b` (see `crate::model::optim::Optimizer::state`).
pub const STATE_SUFFIXES: [&str; 3] = ["m", "v", "b"];

/// Adam's running power `β1^t` (high part).
pub const OPT_BETA1_POW: &str = "opt.beta1_pow";
/// Adam's running power `β2^t` (high part).
pub const OPT_BETA2_POW: &str = "opt.beta2_pow";
/// The low part of `β1^t` (double-`f32`).
pub const OPT_BETA1_POW_LO: &str = "opt.beta1_pow_lo";
/// The low part of `β2^t` (double-`f32`).
pub const OPT_BETA2_POW_LO: &str = "opt.beta2_pow_lo";
/// The optimizer's step counter.
pub const OPT_STEP: &str = "opt.step";
/// The dropout generator's key.
pub const RNG_KEY: &str = "rng.key";
/// The dropout generator's step counter.
pub const RNG_COUNTER: &str = "rng.counter";

/// The training state's names that belong to no parameter: the optimizer's shared scalars and
/// the dropout generator's.
pub const SHARED_STATE_NAMES: [&str; 7] = [
    OPT_BETA1_POW,
    OPT_BETA2_POW,
    OPT_BETA1_POW_LO,
    OPT_BETA2_POW_LO,
    OPT_STEP,
    RNG_KEY,
    RNG_COUNTER,
];

/// How many bytes of a parameter's name a shortened model name keeps before the `~`.
const MODEL_PREFIX_BYTES: usize = 15;

/// The 32-bit FNV-1a hash of `bytes` (offset basis `0x811c9dc5`, prime `0x01000193`).
fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The longest prefix of `name` of at most `max_bytes` bytes that ends on a character boundary,
/// its NUL bytes replaced by `_`.
fn prefix(name: &str, max_bytes: usize) -> String {
    let mut end = name.len().min(max_bytes);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].replace('\0', "_")
}

/// Whether `name` is a valid plan name as it is: 1 to [`NAME_BYTES`] bytes, no NUL.
pub fn fits(name: &str) -> bool {
    !name.is_empty() && name.len() <= NAME_BYTES && !name.contains('\0')
}

/// The name a model tensor (or data input) whose full name is `full` takes in a plan: `full`
/// itself when it [`fits`]; else its longest prefix of at most 15 bytes that ends on a character
/// boundary, `~`, and the 8 lowercase hex digits of the 32-bit FNV-1a hash of the whole name
/// (`layer1.0.downsample.1.running_mean` becomes `layer1.0.downsa~` followed by its hash): at
/// most 24 bytes, distinct for distinct names but with a probability of about 2^-32 per pair
/// (a collision is an error when the model is loaded).
pub fn plan_name(full: &str) -> String {
    if fits(full) {
        return full.to_owned();
    }
    let h = fnv1a32(full.as_bytes());
    format!("{}~{h:08x}", prefix(full, MODEL_PREFIX_BYTES))
}

/// The name of the optimizer state `suffix` (one of [`STATE_SUFFIXES`]) of the parameter named
/// `param` (a plan name): `<param>.<suffix>` when that [`fits`]; else the longest prefix of
/// `param` that leaves room (13 bytes for a one-byte suffix, cut on a character boundary), `~`,
/// the 8 lowercase hex digits of the 32-bit FNV-1a hash of `param`, `.`, `suffix`: at most 24
/// bytes. The moments of one parameter share the stem (`features.10.b~1a2b3c4d.m` and `….v`).
pub fn optimizer_state_name(param: &str, suffix: &str) -> String {
    let full = format!("{param}.{suffix}");
    if fits(&full) {
        return full;
    }
    // `~`, 8 hex digits, `.`, the suffix.
    let room = NAME_BYTES.saturating_sub(1 + 8 + 1 + suffix.len());
    let h = fnv1a32(param.as_bytes());
    format!("{}~{h:08x}.{suffix}", prefix(param, room))
}

/// Whether the plan's persistent binding `name` is training state rather than a model tensor
/// (a parameter or buffer), given the names of all of the plan's persistent bindings `all`: one
/// of [`SHARED_STATE_NAMES`] (the optimizer's shared scalars, the dropout generator's), or the
/// [`optimizer_state_name`] of another binding of `all` for one of [`STATE_SUFFIXES`]. A name
/// with a `.` is not state for that alone: `features.0.weight` is a model tensor.
pub fn is_training_state(name: &str, all: &[&str]) -> bool {
    if SHARED_STATE_NAMES.contains(&name) {
        return true;
    }
    let Some((stem, suffix)) = name.rsplit_once('.') else {
        return false;
    };
    if !STATE_SUFFIXES.contains(&suffix) {
        return false;
    }
    // `<param>.<suffix>` as it is, or shortened (a stem with `~`): only then can another
    // binding's state name be `name`.
    if all.contains(&stem) && optimizer_state_name(stem, suffix) == name {
        return true;
    }
    stem.contains('~')
        && all
            .iter()
            .any(|p| *p != name && optimizer_state_name(p, suffix) == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a's published test vectors (Fowler, Noll, Vo; the IETF draft's table).
    #[test]
    fn fnv1a_matches_its_test_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn short_names_keep_their_state_names() {
        assert_eq!(optimizer_state_name("w1", "m"), "w1.m");
        assert_eq!(optimizer_state_name("fc.weight", "v"), "fc.weight.v");
        // 22 bytes + ".m" = 24: still as it is.
        let p22 = "features.10.block.bias";
        assert_eq!(p22.len(), 22);
        assert_eq!(optimizer_state_name(p22, "m"), format!("{p22}.m"));
    }

    #[test]
    fn long_names_take_a_hashed_state_name_that_fits() {
        let p = "features.10.block.weight"; // 24 bytes
        let h = fnv1a32(p.as_bytes());
        let m = optimizer_state_name(p, "m");
        assert_eq!(m, format!("features.10.b~{h:08x}.m"));
        assert_eq!(m.len(), 24);
        assert_eq!(
            optimizer_state_name(p, "v"),
            format!("features.10.b~{h:08x}.v")
        );
        // A 23-byte name and one that differs only past the prefix: distinct state names.
        let q = "features.10.block.wxyz0";
        assert_ne!(optimizer_state_name(q, "m"), m);
        // A multi-byte character is not cut: é is 2 bytes, six of them are 12, a seventh
        // would pass 13.
        let e = "éééééééééééé";
        assert!(optimizer_state_name(e, "b").starts_with("éééééé~"));
        assert!(fits(&optimizer_state_name(e, "b")));
    }

    #[test]
    fn plan_names_shorten_past_24_bytes() {
        assert_eq!(plan_name("fc.weight"), "fc.weight");
        let long = "layer1.0.downsample.1.running_mean";
        let h = fnv1a32(long.as_bytes());
        assert_eq!(plan_name(long), format!("layer1.0.downsa~{h:08x}"));
        assert_eq!(plan_name("a\0b"), format!("a_b~{:08x}", fnv1a32(b"a\0b")));
    }

    #[test]
    fn training_state_is_what_the_rules_give_for_another_binding() {
        let long = "features.10.block.weight";
        let m = optimizer_state_name(long, "m");
        let all = [
            "fc.weight",
            "fc.weight.m",
            "bn.running_mean",
            long,
            m.as_str(),
            "opt.step",
            "rng.key",
            "features.0.b",
        ];
        let state: Vec<&str> = all
            .iter()
            .copied()
            .filter(|n| is_training_state(n, &all))
            .collect();
        assert_eq!(state, ["fc.weight.m", m.as_str(), "opt.step", "rng.key"]);
        // `features.0.b` is state only when `features.0` is a binding.
        assert!(is_training_state(
            "features.0.b",
            &["features.0", "features.0.b"]
        ));
        // A module named `opt` holds model tensors.
        assert!(!is_training_state("opt.weight", &["opt.weight"]));
        // A hashed name of a binding that is not there is not state.
        assert!(!is_training_state(&m, &["fc.weight", m.as_str()]));
    }
}
