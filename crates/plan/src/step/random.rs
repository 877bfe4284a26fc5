//! Random draws ([`Step::Random`](super::Step::Random)): the distribution and the seed rule.

/// What a [`Step::Random`](super::Step::Random) draws.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RandomDist {
    /// `mean + scale * N(0, 1)` (ONNX `RandomNormal`, `RandomNormalLike`).
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        scale: f32,
    },
    /// Uniform in `[low, high)` (ONNX `RandomUniform`, `RandomUniformLike`).
    Uniform {
        /// Lower bound.
        low: f32,
        /// Upper bound.
        high: f32,
    },
    /// 1 with probability `x`, else 0 (ONNX `Bernoulli`); `x` is float32 of the output's shape.
    Bernoulli,
    /// `samples` category indices per row of the float32 logits `x` `[batch, classes]` (ONNX
    /// `Multinomial`): output `[batch, samples]`.
    Categorical {
        /// Samples per row.
        samples: i32,
    },
}

/// The `u64` seed of the key of draw number `run` (0 for a session's first run) of a random
/// step whose base seed is `base` (see [`random_base`]): a SplitMix64 mix of both, so that
/// every run of a step draws from a different key and the same (base, run) always from the
/// same one.
pub fn random_draw_seed(base: u64, run: u64) -> u64 {
    let mut z = base ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for _ in 0..2 {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
    }
    z
}

/// The base seed of a random step: from the ONNX `seed` attribute's bits when it has one (two
/// sessions of one model then draw the same sequence), else `entropy` (chosen by the runtime
/// per program, mixed with the step's index `step` so that unseeded steps differ).
pub fn random_base(seed: Option<f32>, entropy: u64, step: usize) -> u64 {
    match seed {
        Some(s) => random_draw_seed(u64::from(s.to_bits()), u64::MAX),
        None => random_draw_seed(entropy, step as u64),
    }
}

impl super::Step {
    /// True for a step that draws random values ([`Step::Random`](super::Step::Random)): its
    /// results change from run to run without any input changing, so its plan runs eagerly
    /// (never in a compiled closure, which would replay the key it was traced with).
    pub fn is_random(&self) -> bool {
        matches!(self, super::Step::Random { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draw_seeds_differ_per_run_and_repeat_per_base() {
        let b = random_base(Some(3.0), 0, 0);
        assert_eq!(b, random_base(Some(3.0), 99, 5));
        assert_ne!(b, random_base(Some(4.0), 0, 0));
        assert_ne!(random_draw_seed(b, 0), random_draw_seed(b, 1));
        assert_eq!(random_draw_seed(b, 1), random_draw_seed(b, 1));
        assert_ne!(random_base(None, 1, 0), random_base(None, 1, 1));
    }
}
