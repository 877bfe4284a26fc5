//! Random generators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike,
//! Bernoulli, Multinomial.
//!
//! Each becomes one [`Step::Random`]; a plan holding one runs eagerly (see
//! [`Step::is_random`]) and the runtime counts each step's runs, so a seeded node gives the
//! same sequence in every new session and a new sample on every run. The draws come from MLX's
//! generator, so values never match ORT's CPU EP element-wise: only their distribution does.
//! Samples are drawn in float32 and cast to the output type; float64 outputs and inputs are
//! declined (their samples would carry float32 precision).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::RandomDist;

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "RandomNormal", 1, MAX, claim_random, lower_random).dtypes(FLOATS).notes(NOTE);
    r.op("", "RandomUniform", 1, MAX, claim_random, lower_random).dtypes(FLOATS).notes(NOTE);
    r.op("", "RandomNormalLike", 1, MAX, claim_random, lower_random).dtypes(FLOATS).notes(NOTE);
    r.op("", "RandomUniformLike", 1, MAX, claim_random, lower_random).dtypes(FLOATS).notes(NOTE);
    r.op("", "Bernoulli", 15, MAX, claim_random, lower_random).dtypes(FLOATS).notes(NOTE);
    r.op("", "Multinomial", 7, MAX, claim_random, lower_random).dtypes(FLOATS).notes(NOTE);
}

const NOTE: &str = "MLX's generator (statistically equal to ORT's, never element-wise); \
                    float32 draws, no float64; bfloat16 from opset 22; seeded nodes repeat per \
                    session; runs eagerly";

/// The most elements one draw may make (MLX sizes are 32-bit).
const MAX_ELEMENTS: i64 = i32::MAX as i64;

/// The float types a random output (or Bernoulli / Multinomial input) may have at `opset`:
/// bfloat16 joined the type constraints in opset 22.
fn float_types(opset: i64) -> &'static [DataType] {
    if opset >= 22 { FLOATS } else { &FLOATS[..2] }
}

fn dtype_attr(node: &Node, default: DataType) -> Result<DataType, String> {
    match attr_int(node, "dtype")? {
        None => Ok(default),
        Some(v) => DataType::from_onnx(v as i32)
            .ok_or_else(|| format!("{}: unknown dtype {v}", node.op_type)),
    }
}

fn is_like(node: &Node) -> bool {
    node.op_type.ends_with("Like")
}

/// The step's fields for `node`: distribution, output dtype (given the input's dtype for the
/// ops with an input), static shape (ops without one) and seed.
struct Draw {
    dist: RandomDist,
    dtype: DataType,
    shape: Vec<i32>,
    seed: Option<f32>,
}

fn float_attr(node: &Node, name: &str, default: f32) -> Result<f32, String> {
    Ok(attr_float(node, name)?.unwrap_or(default))
}

fn draw_of(node: &Node, input: Option<DataType>) -> Result<Draw, String> {
    let op = node.op_type.as_str();
    let seed = attr_float(node, "seed")?;
    let mut shape = Vec::new();
    let (dist, dtype) = match op {
        "RandomNormal" | "RandomNormalLike" => (
            RandomDist::Normal {
                mean: float_attr(node, "mean", 0.0)?,
                scale: float_attr(node, "scale", 1.0)?,
            },
            dtype_attr(node, input.unwrap_or(DataType::Float))?,
        ),
        "RandomUniform" | "RandomUniformLike" => (
            RandomDist::Uniform {
                low: float_attr(node, "low", 0.0)?,
                high: float_attr(node, "high", 1.0)?,
            },
            dtype_attr(node, input.unwrap_or(DataType::Float))?,
        ),
        "Bernoulli" => (
            RandomDist::Bernoulli,
            dtype_attr(node, input.unwrap_or(DataType::Float))?,
        ),
        "Multinomial" => {
            let samples = attr_int(node, "sample_size")?.unwrap_or(1);
            if !(1..=i64::from(i32::MAX)).contains(&samples) {
                return Err(format!(
                    "Multinomial: sample_size {samples} is not positive"
                ));
            }
            (
                RandomDist::Categorical {
                    samples: samples as i32,
                },
                dtype_attr(node, DataType::Int32)?,
            )
        }
        _ => return Err(format!("{op} is not a random op")),
    };
    if matches!(op, "RandomNormal" | "RandomUniform") {
        let dims = attr_ints(node, "shape")?
            .ok_or_else(|| format!("{op}: the required attribute 'shape' is missing"))?;
        let mut n: i64 = 1;
        for &d in &dims {
            if d < 0 {
                return Err(format!("{op}: shape dim {d} is negative"));
            }
            n = n.saturating_mul(d);
        }
        if n > MAX_ELEMENTS {
            return Err(format!(
                "{op}: shape {dims:?} has more than 2^31 - 1 elements"
            ));
        }
        shape = dims.iter().map(|&d| d as i32).collect();
    }
    Ok(Draw {
        dist,
        dtype,
        shape,
        seed,
    })
}

fn claim_random(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let op = node.op_type.as_str();
    let floats = float_types(ctx.opset);
    let input = match op {
        "RandomNormal" | "RandomUniform" => None,
        _ if is_like(node) => Some(ctx.expect_dtype(node, 0, DATA)?),
        _ => Some(ctx.expect_dtype(node, 0, floats)?),
    };
    let d = draw_of(node, input).or_decline()?;
    let outputs: &[DataType] = match op {
        "Multinomial" => INDEX,
        "Bernoulli" => DATA,
        _ => floats,
    };
    if !outputs.contains(&d.dtype) {
        decline!(
            "{op}: output type {} is not claimed{}",
            d.dtype,
            if d.dtype == DataType::Double {
                " (MLX draws in float32: float64 samples would carry float32 precision)"
            } else {
                crate::registry::dtype_note(d.dtype)
            }
        );
    }
    // An input of unknown rank is checked when the plan runs (an error, as in ORT).
    if op == "Multinomial"
        && let Some(rank) = ctx.rank(node.input(0).unwrap_or(""))
        && rank != 2
    {
        decline!("Multinomial: input rank {rank} is not 2 ([batch_size, class_size])");
    }
    Ok(())
}

fn lower_random(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let reads_input = !matches!(node.op_type.as_str(), "RandomNormal" | "RandomUniform");
    let (x, input) = if reads_input {
        (Some(ctx.input(node, 0)?), Some(ctx.input_dtype(node, 0)?))
    } else {
        (None, None)
    };
    let d = draw_of(node, input).or_invalid(node)?;
    let out = ctx.temp(d.dtype);
    ctx.push(Step::Random {
        dist: d.dist,
        x,
        shape: d.shape,
        seed: d.seed,
        dtype: d.dtype,
        out,
    });
    ctx.finish(node, 0, out, d.dtype)
}
