//! `ai.onnx.ml` preprocessing: Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor,
//! FeatureVectorizer, OneHotEncoder and LabelEncoder (its string maps as a host kernel).

use onnx_ir::{Attribute, DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::step::{ReduceOp, UnaryOp as U};

/// Registers the preprocessing ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(ML, "Scaler", 1, ML_MAX, claim_scaler, lower_scaler)
        .notes("float32, int32, int64 input; `[N, C]` or `[C]` with per-feature offset/scale, any rank with one");
    r.op(ML, "Normalizer", 1, ML_MAX, claim_normalizer, lower_normalizer)
        .notes("MAX over float32/int32/int64, L1 and L2 over float32; row sums added in ORT's order");
    r.op(ML, "Binarizer", 1, ML_MAX, claim_binarizer, lower_binarizer)
        .notes("float32 (as ORT); a NaN input fails the run, as in ORT");
    r.op(ML, "Imputer", 1, ML_MAX, claim_imputer, lower_imputer)
        .notes("float32 and int64; NaN `replaced_value_float` replaces NaNs");
    r.op(ML, "ArrayFeatureExtractor", 1, ML_MAX, claim_afe, lower_afe)
        .notes("numeric X; out-of-range indices fail the run, as in ORT");
    r.op(ML, "FeatureVectorizer", 1, ML_MAX, claim_fv, lower_fv)
        .notes("inputs whose declared feature counts equal `inputdimensions`");
    r.op(ML, "OneHotEncoder", 1, ML_MAX, claim_ohe, lower_ohe)
        .notes("int64 and float32 input over `cats_int64s` (floats truncated, as ORT); strings declined");
    r.op(ML, "LabelEncoder", 1, 1, claim_label_encoder, lower_label_encoder)
        .dtypes(&[DataType::String, DataType::Int64])
        .notes("classes_strings: string to int64 and back, a host kernel (MLX has no strings)");
    r.op(ML, "LabelEncoder", 2, ML_MAX, claim_label_encoder, lower_label_encoder)
        .dtypes(&[DataType::String, DataType::Int64, DataType::Float, DataType::Double, DataType::Int32, DataType::Int16])
        .notes("int64/float32 maps on MLX; maps with strings on either side (any key/value type of the opset) as a host kernel");
    r.kernel(LABEL_ENCODER_KERNEL, label_encoder_kernel);
}

// ---------------------------------------------------------------------------------------------
// Scaler: y = (x - offset) * scale in float32.

fn scaler_attrs(node: &Node) -> Result<(Vec<f32>, Vec<f32>), String> {
    let offset = attr_floats(node, "offset")?.unwrap_or_default();
    let scale = attr_floats(node, "scale")?.unwrap_or_default();
    Ok((offset, scale))
}

fn claim_scaler(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(
        node,
        0,
        &[DataType::Float, DataType::Int32, DataType::Int64],
    )?;
    let (offset, scale) = scaler_attrs(node).or_decline()?;
    if scale.is_empty() || scale.len() != offset.len() {
        decline!(
            "Scaler: {} scale and {} offset values (ORT's kernel needs the same non-zero number)",
            scale.len(),
            offset.len()
        );
    }
    if scale.len() > 1 {
        let c = features(ctx, node, 0)?;
        if c != scale.len() as i64 {
            decline!(
                "Scaler: {} scale values for {c} features (ORT needs one or one per feature)",
                scale.len()
            );
        }
    }
    Ok(())
}

fn lower_scaler(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let (offset, scale) = scaler_attrs(node).or_invalid(node)?;
    let n = offset.len() as i64;
    let x = ctx.input(node, 0)?;
    // ORT subtracts a float from the (converted) integer: the same float32 rounding.
    let xf = ctx.cast(x, dt, DataType::Float);
    let off = f32_const(ctx, vec![n], &offset);
    let sc = f32_const(ctx, vec![n], &scale);
    let d = ctx.binary(BinaryOp::Subtract, xf, off, DataType::Float);
    let y = ctx.binary(BinaryOp::Multiply, d, sc, DataType::Float);
    ctx.finish(node, 0, y, DataType::Float)
}

// ---------------------------------------------------------------------------------------------
// Normalizer.

fn claim_normalizer(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let norm = attr_str(node, "norm")
        .or_decline()?
        .unwrap_or_else(|| "MAX".into());
    let dt = ctx.expect_dtype(
        node,
        0,
        &[DataType::Float, DataType::Int32, DataType::Int64],
    )?;
    match norm.as_str() {
        "MAX" => {
            rank_1_or_2(ctx, node, 0)?;
        }
        "L1" | "L2" => {
            if dt != DataType::Float {
                decline!("Normalizer: {norm} over {dt} is not claimed (float32 only)");
            }
            let c = features(ctx, node, 0)?;
            sequential_ok(node, c)?;
        }
        other => decline!("Normalizer: norm '{other}' is not one of MAX, L1, L2"),
    }
    Ok(())
}

fn lower_normalizer(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let norm = attr_str(node, "norm")
        .or_invalid(node)?
        .unwrap_or_else(|| "MAX".into());
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let x = ctx.input(node, 0)?;
    let f = DataType::Float;
    let xf = ctx.cast(x, dt, f);
    let zero = ctx.scalar(f, 0.0)?;
    let y = match norm.as_str() {
        "MAX" => {
            // max in the input's type, then x / max where max != 0.
            let m = reduce_last(ctx, ReduceOp::Max, x, rank, dt);
            let mf = ctx.cast(m, dt, f);
            let nz = ctx.binary(BinaryOp::NotEqual, mf, zero, f);
            let q = ctx.binary(BinaryOp::Divide, xf, mf, f);
            select(ctx, nz, q, xf, f)
        }
        "L1" => {
            let c = lower_features(ctx, node, 0)?;
            let a = ctx.unary(U::Abs, xf, f);
            let s = sequential_sum(ctx, a, c, f)?;
            let nz = ctx.binary(BinaryOp::NotEqual, s, zero, f);
            let q = ctx.binary(BinaryOp::Divide, xf, s, f);
            select(ctx, nz, q, xf, f)
        }
        "L2" => {
            // sign(x) * sqrt(x * x / sum(x * x)), as ORT computes it.
            let c = lower_features(ctx, node, 0)?;
            let sq = ctx.binary(BinaryOp::Multiply, xf, xf, f);
            let s = sequential_sum(ctx, sq, c, f)?;
            let nz = ctx.binary(BinaryOp::NotEqual, s, zero, f);
            let q = ctx.binary(BinaryOp::Divide, sq, s, f);
            let r = ctx.unary(U::Sqrt, q, f);
            let neg = ctx.binary(BinaryOp::Less, xf, zero, f);
            let nr = ctx.unary(U::Negative, r, f);
            let signed = select(ctx, neg, nr, r, f);
            select(ctx, nz, signed, xf, f)
        }
        other => crate::plan::invalid!(node, "norm '{other}'"),
    };
    ctx.finish(node, 0, y, f)
}

// ---------------------------------------------------------------------------------------------
// Binarizer.

fn claim_binarizer(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // ORT registers the float32 kernel only.
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    attr_float(node, "threshold").or_decline()?;
    Ok(())
}

fn lower_binarizer(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let t = attr_float(node, "threshold")
        .or_invalid(node)?
        .unwrap_or(0.0);
    let x = ctx.input(node, 0)?;
    let nan = ctx.unary(U::IsNan, x, DataType::Bool);
    let ok = ctx.unary(U::LogicalNot, nan, DataType::Bool);
    ctx.require(ok, "Binarizer: input data is NaN");
    let t = ctx.scalar(f, t as f64)?;
    let gt = ctx.binary(BinaryOp::Greater, x, t, f);
    let y = ctx.cast(gt, DataType::Bool, f);
    ctx.finish(node, 0, y, f)
}

// ---------------------------------------------------------------------------------------------
// Imputer.

/// The imputed values (as f64) and the replaced value of an Imputer over `dt`.
fn imputer_attrs(node: &Node, dt: DataType) -> Result<(Vec<f64>, f64), String> {
    Ok(if dt == DataType::Float {
        let v = attr_floats(node, "imputed_value_floats")?.unwrap_or_default();
        let r = attr_float(node, "replaced_value_float")?.unwrap_or(0.0);
        (v.into_iter().map(f64::from).collect(), r as f64)
    } else {
        let v = attr_ints(node, "imputed_value_int64s")?.unwrap_or_default();
        let r = attr_int(node, "replaced_value_int64")?.unwrap_or(0);
        (v.into_iter().map(|x| x as f64).collect(), r as f64)
    })
}

fn claim_imputer(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // ORT registers float32 and int64 kernels.
    let dt = ctx.expect_dtype(node, 0, &[DataType::Float, DataType::Int64])?;
    let (values, _) = imputer_attrs(node, dt).or_decline()?;
    if dt == DataType::Int64 && node.attributes.contains_key("imputed_value_floats") {
        decline!("Imputer: int64 input with imputed_value_floats (ORT reads the int64 attributes)");
    }
    if dt == DataType::Int64 {
        // int64 attributes up to 2^53 pass through f64 exactly.
        let v = attr_ints(node, "imputed_value_int64s")
            .or_decline()?
            .unwrap_or_default();
        let r = attr_int(node, "replaced_value_int64")
            .or_decline()?
            .unwrap_or(0);
        if v.iter().chain([&r]).any(|x| x.unsigned_abs() > 1 << 53) {
            decline!("Imputer: int64 values beyond 2^53 are not claimed");
        }
    }
    match values.len() {
        0 => decline!("Imputer: no imputed values for {dt} input"),
        1 => Ok(()),
        n => {
            let c = features(ctx, node, 0)?;
            if c != n as i64 {
                decline!(
                    "Imputer: {n} imputed values for {c} features (ORT needs one or one per feature)"
                );
            }
            Ok(())
        }
    }
}

fn lower_imputer(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let (values, replaced) = imputer_attrs(node, dt).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    let n = values.len() as i64;
    let imputed = if dt == DataType::Float {
        let v: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        f32_const(ctx, vec![n], &v)
    } else {
        let v: Vec<i64> = values.iter().map(|&v| v as i64).collect();
        i64_const(ctx, vec![n], &v)
    };
    let hit = if replaced.is_nan() {
        ctx.unary(U::IsNan, x, DataType::Bool)
    } else {
        let r = ctx.scalar(dt, replaced)?;
        ctx.binary(BinaryOp::Equal, x, r, dt)
    };
    let y = select(ctx, hit, imputed, x, dt);
    ctx.finish(node, 0, y, dt)
}

// ---------------------------------------------------------------------------------------------
// ArrayFeatureExtractor: X[..., indices] (indices flattened); a 1-D X gives [1, k].

fn claim_afe(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(
        node,
        0,
        &[DataType::Float, DataType::Int32, DataType::Int64],
    )?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    let rank = ctx.expect_rank(node, 0)?;
    if rank == 0 {
        decline!("ArrayFeatureExtractor: X is a scalar (ORT rejects it)");
    }
    Ok(())
}

fn lower_afe(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let x = ctx.input(node, 0)?;
    let y = ctx.input(node, 1)?;
    let idx = crate::ops::microsoft::reshape_to(ctx, y, &[-1], DataType::Int64);
    // ORT rejects indices outside [0, C).
    let c = ctx.temp(DataType::Int64);
    ctx.push(Step::Shape {
        x,
        start: rank as i64 - 1,
        end: Some(rank as i64),
        out: c,
    });
    let one = ctx.scalar(DataType::Int64, 1.0)?;
    let hi = ctx.binary(BinaryOp::Subtract, c, one, DataType::Int64);
    ctx.require_between(
        idx,
        0,
        Some(hi),
        "ArrayFeatureExtractor: index is out of range",
    )?;
    let out = ctx.temp(dt);
    ctx.push(Step::Take {
        x,
        indices: idx,
        axis: rank as i32 - 1,
        out,
    });
    let out = if rank == 1 {
        crate::ops::microsoft::unsqueeze(ctx, out, 0, dt)
    } else {
        out
    };
    ctx.finish(node, 0, out, dt)
}

// ---------------------------------------------------------------------------------------------
// FeatureVectorizer: the inputs' features side by side, as float32 `[N, sum(dims)]`.

fn claim_fv(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = node.inputs.len();
    if n == 0 {
        decline!("FeatureVectorizer: no inputs");
    }
    same_dtypes(
        ctx,
        node,
        0..n,
        &[DataType::Float, DataType::Int32, DataType::Int64],
    )?;
    let dims = attr_ints(node, "inputdimensions")
        .or_decline()?
        .unwrap_or_default();
    if dims.len() != n {
        decline!(
            "FeatureVectorizer: {} inputdimensions for {n} inputs",
            dims.len()
        );
    }
    for (i, &d) in dims.iter().enumerate() {
        if node.input(i).is_none() {
            decline!("FeatureVectorizer: input {i} is missing");
        }
        let c = features(ctx, node, i)?;
        if c != d {
            decline!(
                "FeatureVectorizer: input {i} has {c} features but inputdimensions says {d} \
                 (ORT pads or truncates; not claimed)"
            );
        }
    }
    Ok(())
}

fn lower_fv(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let mut parts = Vec::new();
    for i in 0..node.inputs.len() {
        let rank = ctx.need_rank(node, i)?;
        let x = ctx.input(node, i)?;
        let x = if rank == 1 {
            crate::ops::microsoft::unsqueeze(ctx, x, 0, dt)
        } else {
            x
        };
        parts.push(ctx.cast(x, dt, DataType::Float));
    }
    let y = if parts.len() == 1 {
        parts[0]
    } else {
        crate::ops::microsoft::concat(ctx, parts, 1, DataType::Float)
    };
    if node.inputs.len() == 1 && y == ctx.input(node, 0)? {
        ctx.alias(node, 0, y);
        return Ok(());
    }
    ctx.finish(node, 0, y, DataType::Float)
}

// ---------------------------------------------------------------------------------------------
// OneHotEncoder: `[..., K]` float32, 1 where x (truncated to int64) equals category k.

fn claim_ohe(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // ORT's kernels: int64, float, double, string.
    ctx.expect_dtype(node, 0, &[DataType::Int64, DataType::Float])?;
    no_strings(node, "cats_strings")?;
    let cats = attr_ints(node, "cats_int64s")
        .or_decline()?
        .unwrap_or_default();
    if cats.is_empty() {
        decline!("OneHotEncoder: no cats_int64s");
    }
    attr_int(node, "zeros").or_decline()?;
    ctx.expect_rank(node, 0)?;
    Ok(())
}

fn lower_ohe(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let cats = attr_ints(node, "cats_int64s")
        .or_invalid(node)?
        .unwrap_or_default();
    let zeros = attr_int(node, "zeros").or_invalid(node)?.unwrap_or(1);
    let x = ctx.input(node, 0)?;
    // ORT converts a float to int64 (truncation toward zero), as mlx_astype does.
    let xi = ctx.cast(x, dt, DataType::Int64);
    let xi = crate::ops::microsoft::unsqueeze(ctx, xi, rank as i64, DataType::Int64);
    let k = i64_const(ctx, vec![cats.len() as i64], &cats);
    let eq = ctx.binary(BinaryOp::Equal, xi, k, DataType::Int64);
    if zeros == 0 {
        let any = reduce_last(ctx, ReduceOp::Any, eq, rank + 1, DataType::Bool);
        ctx.require(any, "OneHotEncoder: unknown category and zeros = 0");
    }
    let y = ctx.cast(eq, DataType::Bool, DataType::Float);
    ctx.finish(node, 0, y, DataType::Float)
}

// ---------------------------------------------------------------------------------------------
// LabelEncoder. Numeric maps (int64/float32 keys and values) are MLX steps; maps with strings
// on either side (and opset 1's `classes_strings`) are the `label_encoder` host kernel.

/// The host kernel of LabelEncoder maps with strings.
const LABEL_ENCODER_KERNEL: &str = "label_encoder";

/// Keys, values and default of a LabelEncoder; `last_wins` where a repeated key maps to its
/// last value (opset 1's classes, as ORT), not its first.
struct LabelMap {
    keys: TensorData,
    values: TensorData,
    default: TensorData,
    last_wins: bool,
}

impl LabelMap {
    /// True when strings are on either side (the host kernel's case).
    fn has_strings(&self) -> bool {
        self.keys.dtype == DataType::String || self.values.dtype == DataType::String
    }
}

/// The key and value types of LabelEncoder at `opset` (ONNX's T1 and T2).
fn label_types(opset: i64) -> &'static [DataType] {
    if opset >= 4 {
        &[
            DataType::String,
            DataType::Int64,
            DataType::Float,
            DataType::Double,
            DataType::Int32,
            DataType::Int16,
        ]
    } else {
        &[DataType::String, DataType::Int64, DataType::Float]
    }
}

/// A tensor attribute of LabelEncoder opset 4.
fn tensor_attr(node: &Node, name: &str) -> Result<Option<TensorData>, String> {
    match node.attributes.get(name) {
        None => Ok(None),
        Some(Attribute::Tensor(t)) => Ok(Some(t.clone())),
        Some(a) => Err(format!(
            "LabelEncoder: attribute '{name}' is {}, expected TENSOR",
            a.kind()
        )),
    }
}

/// Reads the map of a LabelEncoder node whose input is `x` (needed at opset 1, where the
/// input's type says the direction): its `keys_*`/`values_*`/`default_*` attributes (tensors
/// too at opset 4) or opset 1's `classes_strings`; types ONNX does not allow are refused.
fn label_map(node: &Node, opset: i64, x: DataType) -> Result<LabelMap, String> {
    if opset < 2 {
        let classes = attr_bytes_list(node, "classes_strings")?
            .ok_or("LabelEncoder (opset 1): classes_strings is required")?;
        let n = classes.len() as i64;
        let ids: Vec<i64> = (0..n).collect();
        let names = TensorData::from_strings(vec![n], &classes)?;
        let ids = TensorData::from_i64(vec![n], &ids);
        return match x {
            DataType::String => {
                let d = attr_int(node, "default_int64")?.unwrap_or(-1);
                Ok(LabelMap {
                    keys: names,
                    values: ids,
                    default: TensorData::from_i64(vec![], &[d]),
                    last_wins: true,
                })
            }
            DataType::Int64 => {
                let d = attr_bytes(node, "default_string")?.unwrap_or(b"_Unused".to_vec());
                Ok(LabelMap {
                    keys: ids,
                    values: names,
                    default: TensorData::from_strings(vec![], &[d])?,
                    last_wins: false,
                })
            }
            d => Err(format!(
                "LabelEncoder (opset 1): input of type {d} is neither string nor int64"
            )),
        };
    }
    let types = label_types(opset);
    let list = |ints: &str,
                floats: &str,
                strings: &str,
                tensor: &str|
     -> Result<Option<TensorData>, String> {
        let i = attr_ints(node, ints)?;
        let f = attr_floats(node, floats)?;
        let s = attr_bytes_list(node, strings)?;
        let t = if opset >= 4 {
            tensor_attr(node, tensor)?
        } else {
            None
        };
        if [i.is_some(), f.is_some(), s.is_some(), t.is_some()]
            .iter()
            .filter(|&&b| b)
            .count()
            > 1
        {
            return Err(format!(
                "LabelEncoder: more than one of {ints}, {floats}, {strings}, {tensor}"
            ));
        }
        Ok(if let Some(v) = i {
            Some(TensorData::from_i64(vec![v.len() as i64], &v))
        } else if let Some(v) = f {
            Some(TensorData::from_f32(vec![v.len() as i64], &v))
        } else if let Some(v) = s {
            Some(TensorData::from_strings(vec![v.len() as i64], &v)?)
        } else if let Some(t) = t {
            if !types.contains(&t.dtype) {
                return Err(format!(
                    "LabelEncoder: {tensor} of type {} is not a key or value type",
                    t.dtype
                ));
            }
            Some(t)
        } else {
            None
        })
    };
    let keys = list("keys_int64s", "keys_floats", "keys_strings", "keys_tensor")?
        .ok_or("LabelEncoder: no keys (keys_int64s, keys_floats, keys_strings, keys_tensor)")?;
    let values = list(
        "values_int64s",
        "values_floats",
        "values_strings",
        "values_tensor",
    )?
    .ok_or(
        "LabelEncoder: no values (values_int64s, values_floats, values_strings, values_tensor)",
    )?;
    if keys.numel() != values.numel() || keys.numel() == 0 {
        return Err(format!(
            "LabelEncoder: {} keys and {} values",
            keys.numel(),
            values.numel()
        ));
    }
    let default = match (opset >= 4).then(|| tensor_attr(node, "default_tensor")) {
        Some(Ok(Some(t))) => {
            if t.dtype != values.dtype || t.numel() != 1 {
                return Err(
                    "LabelEncoder: default_tensor must be one value of the values' type".into(),
                );
            }
            TensorData {
                dtype: values.dtype,
                dims: vec![],
                bytes: t.bytes.clone(),
            }
        }
        Some(Err(e)) => return Err(e),
        _ => match values.dtype {
            DataType::String => {
                let d = attr_bytes(node, "default_string")?.unwrap_or(b"_Unused".to_vec());
                TensorData::from_strings(vec![], &[d])?
            }
            DataType::Int64 => {
                TensorData::from_i64(vec![], &[attr_int(node, "default_int64")?.unwrap_or(-1)])
            }
            DataType::Float => TensorData::from_f32(
                vec![],
                &[attr_float(node, "default_float")?.unwrap_or(-0.0)],
            ),
            DataType::Double => {
                let d = attr_float(node, "default_float")?.map_or(-0.0, f64::from);
                TensorData::new(DataType::Double, vec![], d.to_le_bytes().to_vec())?
            }
            // int32 / int16 values come in tensors only: ORT's default is -1
            dt => crate::consts::scalar(dt, -1.0)
                .ok_or_else(|| format!("LabelEncoder: no default for values of type {dt}"))?,
        },
    };
    Ok(LabelMap {
        keys,
        values,
        default,
        last_wins: false,
    })
}

fn claim_label_encoder(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let x = ctx.input_dtype(node, 0)?;
    let map = label_map(node, ctx.opset, x).or_decline()?;
    if x != map.keys.dtype {
        decline!(
            "LabelEncoder: input is {x} but the keys are {}",
            map.keys.dtype
        );
    }
    if map.has_strings() {
        return Ok(());
    }
    let numeric = [DataType::Int64, DataType::Float];
    ctx.expect_dtype(node, 0, &numeric)?;
    if !numeric.contains(&map.values.dtype) {
        decline!(
            "LabelEncoder: values of type {} are not claimed (int64 and float32 numeric maps; \
             strings on either side)",
            map.values.dtype
        );
    }
    ctx.expect_rank(node, 0)?;
    Ok(())
}

/// A map with strings: the `label_encoder` host kernel.
fn lower_label_kernel(ctx: &mut LowerCtx, node: &Node, map: LabelMap) -> Result<(), PlanError> {
    let vdt = map.values.dtype;
    let x = crate::ops::text::host_input(ctx, node, 0)?;
    let out = ctx.host_kernel(
        node,
        LABEL_ENCODER_KERNEL,
        vec![
            x,
            HostArg::Const(map.keys),
            HostArg::Const(map.values),
            HostArg::Const(map.default),
        ],
        KernelAttrs::new()
            .bool("nan_matches", ctx.opset() >= 4)
            .bool("last_wins", map.last_wins),
        &[vdt],
    )?;
    ctx.finish(node, 0, out[0], vdt)
}

/// A key of the kernel's map: string bytes, an integer, or a float's bits (+0 for -0, one NaN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LabelKey<'a> {
    Bytes(&'a [u8]),
    Int(i64),
    Float(u64),
}

/// The keys of `t` (`None` for a NaN that matches nothing).
fn label_keys(t: &TensorData, nan_matches: bool) -> Result<Vec<Option<LabelKey<'_>>>, String> {
    Ok(match t.dtype {
        DataType::String => crate::ops::text::strings_of(t)?
            .into_iter()
            .map(|s| Some(LabelKey::Bytes(s)))
            .collect(),
        DataType::Float | DataType::Double => kernel::f64s(t)?
            .into_iter()
            .map(|v| {
                if v.is_nan() {
                    nan_matches.then_some(LabelKey::Float(f64::NAN.to_bits()))
                } else {
                    Some(LabelKey::Float((v + 0.0).to_bits()))
                }
            })
            .collect(),
        _ => kernel::i64s(t)?
            .into_iter()
            .map(|v| Some(LabelKey::Int(v)))
            .collect(),
    })
}

/// `LabelEncoder` with strings: input 0 the keys to map, inputs 1-3 the map's keys, values and
/// default (one value); attributes `nan_matches` (a NaN key matches NaN inputs, opset 4) and
/// `last_wins` (a repeated key keeps its last value). The result has input 0's dims and the
/// values' type.
fn label_encoder_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = kernel::input(inputs, 0)?;
    let (keys, values, default) = (
        kernel::input(inputs, 1)?,
        kernel::input(inputs, 2)?,
        kernel::input(inputs, 3)?,
    );
    if x.dtype != keys.dtype || values.dtype != default.dtype || default.numel() != 1 {
        return Err("LabelEncoder: mismatched keys, values or default".into());
    }
    let nan_matches = attrs.get_bool("nan_matches")?;
    let mut map = std::collections::HashMap::new();
    for (i, k) in label_keys(keys, nan_matches)?.into_iter().enumerate() {
        let Some(k) = k else { continue };
        if attrs.get_bool("last_wins")? {
            map.insert(k, i);
        } else {
            map.entry(k).or_insert(i);
        }
    }
    let picks: Vec<Option<usize>> = label_keys(x, nan_matches)?
        .into_iter()
        .map(|k| k.and_then(|k| map.get(&k).copied()))
        .collect();
    if values.dtype == DataType::String {
        let vs = crate::ops::text::strings_of(values)?;
        let d = crate::ops::text::strings_of(default)?[0];
        let out: Vec<&[u8]> = picks.iter().map(|p| p.map_or(d, |i| vs[i])).collect();
        return Ok(vec![crate::ops::text::string_tensor(x.dims.clone(), &out)?]);
    }
    let size = values
        .dtype
        .size_in_bytes()
        .ok_or("LabelEncoder: values of a packed type")?;
    if values.bytes.len() != size * values.numel() as usize {
        return Err("LabelEncoder: values of the wrong size".into());
    }
    let mut bytes = Vec::with_capacity(picks.len() * size);
    for p in picks {
        bytes.extend_from_slice(match p {
            Some(i) => &values.bytes[i * size..(i + 1) * size],
            None => &default.bytes[..size],
        });
    }
    Ok(vec![TensorData::new(values.dtype, x.dims.clone(), bytes)?])
}

fn lower_label_encoder(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let map = label_map(node, ctx.opset(), dt).or_invalid(node)?;
    if map.has_strings() {
        return lower_label_kernel(ctx, node, map);
    }
    let rank = ctx.need_rank(node, 0)?;
    let vdt = map.values.dtype;
    let n = map.keys.numel() as i64;
    let keys = reshape_const(map.keys, n);
    let values = reshape_const(map.values, n);
    // ORT's opset-4 kernel matches a NaN key to NaN inputs; earlier ones never match NaN.
    let nan_keys: Vec<bool> = if dt == DataType::Float && ctx.opset() >= 4 {
        keys.to_f64_vec()
            .unwrap_or_default()
            .iter()
            .map(|v| v.is_nan())
            .collect()
    } else {
        Vec::new()
    };
    let x = ctx.input(node, 0)?;
    let xe = crate::ops::microsoft::unsqueeze(ctx, x, rank as i64, dt);
    let k = ctx.constant(keys);
    let mut eq = ctx.binary(BinaryOp::Equal, xe, k, dt);
    if nan_keys.iter().any(|&b| b) {
        let kn = ctx.constant(bool_tensor(&nan_keys));
        let xn = ctx.unary(U::IsNan, xe, DataType::Bool);
        let both = ctx.binary(BinaryOp::LogicalAnd, xn, kn, DataType::Bool);
        eq = ctx.binary(BinaryOp::LogicalOr, eq, both, DataType::Bool);
    }
    // The first matching key wins (ORT keeps the first of duplicate keys).
    let found = reduce_last(ctx, ReduceOp::Any, eq, rank + 1, DataType::Bool);
    let at = ctx.temp(DataType::Uint32);
    ctx.push(Step::ArgReduce {
        op: crate::step::ArgReduceOp::ArgMax,
        x: eq,
        axis: rank as i32,
        keepdims: true,
        out: at,
    });
    let v = ctx.constant(values);
    let picked = ctx.temp(vdt);
    ctx.push(Step::Take {
        x: v,
        indices: at,
        axis: 0,
        out: picked,
    });
    let d = ctx.constant(map.default);
    let y = select(ctx, found, picked, d, vdt);
    let y = crate::ops::microsoft::reshape(
        ctx,
        y,
        crate::step::ReshapeTarget::Squeeze {
            axes: Some(crate::step::ShapeSource::Static(vec![rank as i64])),
        },
        vdt,
    );
    ctx.finish(node, 0, y, vdt)
}

/// `t` as a 1-D tensor of `n` elements.
fn reshape_const(t: TensorData, n: i64) -> TensorData {
    crate::consts::reshaped(&t, vec![n]).unwrap_or(t)
}

/// A 1-D bool tensor.
fn bool_tensor(v: &[bool]) -> TensorData {
    let bytes: Vec<u8> = v.iter().map(|&b| b as u8).collect();
    TensorData {
        dtype: DataType::Bool,
        dims: vec![v.len() as i64],
        bytes: bytes.into(),
    }
}
