//! Random steps: the per-step run counters of a program and the draws themselves.
//!
//! Each [`plan::Step::Random`] of a program has a base seed (from its ONNX `seed` attribute,
//! else from entropy chosen when the program is built) and an atomic count of its runs: run
//! `n` draws with the key of `random_draw_seed(base, n)`. So two sessions of a seeded model
//! produce the same sequence, and successive runs of one session differ, as with ORT's CPU EP
//! (whose generator advances on each run). Plans holding a random step are eager (see
//! `Step::is_random`), so every run traces the step anew with the next key.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use mlx::{Array, Dtype, Stream, ops, random};
use onnx_ir::DataType;
use plan::step::{RandomDist, random_base, random_draw_seed};
use plan::{Plan, Step};

use crate::RuntimeError;
use crate::dtype::to_mlx;

/// The run counters of a program's random steps, by step index.
#[derive(Debug, Default)]
pub(crate) struct RandomSteps {
    steps: HashMap<usize, (u64, AtomicU64)>,
}

impl RandomSteps {
    /// Counters (at 0) for the random steps of `plan`.
    pub(crate) fn new(plan: &Plan) -> RandomSteps {
        let mut steps = HashMap::new();
        let mut entropy = None;
        for (i, step) in plan.steps.iter().enumerate() {
            if let Step::Random { seed, .. } = step {
                let e = *entropy.get_or_insert_with(fresh_entropy);
                steps.insert(i, (random_base(*seed, e, i), AtomicU64::new(0)));
            }
        }
        RandomSteps { steps }
    }

    /// The key seed of the next run of step `i` (advancing its counter), or `None` when it is
    /// not a random step.
    pub(crate) fn next(&self, i: usize) -> Option<u64> {
        if self.steps.is_empty() {
            return None;
        }
        let (base, runs) = self.steps.get(&i)?;
        Some(random_draw_seed(
            *base,
            runs.fetch_add(1, Ordering::Relaxed),
        ))
    }
}

/// A seed no other program of this process shares: the standard library's per-process random
/// hash keys (advanced for each `RandomState`) mixed with the clock.
fn fresh_entropy() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(now);
    h.finish()
}

fn err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError(e.to_string())
}

/// One draw of a random step with the key of `draw_seed` (see [`plan::Step::Random`]).
pub(crate) fn draw(
    dist: &RandomDist,
    x: Option<&Array>,
    shape: &[i32],
    dtype: DataType,
    draw_seed: u64,
    s: &Stream,
) -> Result<Array, RuntimeError> {
    let key = random::key(draw_seed).map_err(err)?;
    let shape = match x {
        Some(x) => x.shape(),
        None => shape.to_vec(),
    };
    let need = |what: &str| RuntimeError(format!("random step: {what} needs its input"));
    let f32 = Dtype::Float32;
    let y = match *dist {
        RandomDist::Normal { mean, scale } => {
            random::normal(&shape, f32, mean, scale, &key, s).map_err(err)?
        }
        RandomDist::Uniform { low, high } => {
            let (lo, hi) = (Array::scalar_f32(low), Array::scalar_f32(high));
            random::uniform(&lo, &hi, &shape, f32, &key, s).map_err(err)?
        }
        RandomDist::Bernoulli => {
            let p = x.ok_or_else(|| need("Bernoulli"))?;
            let p = ops::astype(p, f32, s).map_err(err)?;
            random::bernoulli(&p, &shape, &key, s).map_err(err)?
        }
        RandomDist::Categorical { samples } => {
            let logits = x.ok_or_else(|| need("Categorical"))?;
            let dims = logits.shape();
            if dims.len() != 2 || dims[1] == 0 {
                return Err(RuntimeError(format!(
                    "categorical draw: input shape {dims:?} is not [batch_size, class_size] \
                     with class_size > 0"
                )));
            }
            let logits = ops::astype(logits, f32, s).map_err(err)?;
            random::categorical_samples(&logits, 1, samples, &key, s).map_err(err)?
        }
    };
    ops::astype(&y, to_mlx(dtype)?, s).map_err(err)
}
