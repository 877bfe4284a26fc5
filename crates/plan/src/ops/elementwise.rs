//! Elementwise ops: arithmetic, comparison, logic, unary math, activations, Cast, Clip, Where.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, UnaryOp as U};

/// Registers the elementwise family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    // Arithmetic (opset 7 introduced numpy broadcasting; older forms had a `broadcast` attr).
    r.op("", "Add", 7, MAX, claim_arith, lower_arith);
    r.op("", "Sub", 7, MAX, claim_arith, lower_arith);
    r.op("", "Mul", 7, MAX, claim_arith, lower_arith);
    r.op("", "Div", 7, MAX, claim_arith, lower_div);
    r.op("", "Pow", 7, MAX, claim_pow, lower_pow);
    r.op("", "Mod", 10, MAX, claim_mod, lower_mod);
    r.op("", "Max", 8, MAX, claim_variadic, lower_variadic);
    r.op("", "Min", 8, MAX, claim_variadic, lower_variadic);
    r.op("", "Sum", 8, MAX, claim_variadic, lower_variadic);
    r.op("", "Mean", 8, MAX, claim_variadic, lower_variadic);
    // Comparison and logic.
    r.op("", "Equal", 7, MAX, claim_compare, lower_compare);
    r.op("", "Less", 7, MAX, claim_compare, lower_compare);
    r.op("", "Greater", 7, MAX, claim_compare, lower_compare);
    r.op("", "LessOrEqual", 12, MAX, claim_compare, lower_compare);
    r.op("", "GreaterOrEqual", 12, MAX, claim_compare, lower_compare);
    r.op("", "And", 7, MAX, claim_logic, lower_logic);
    r.op("", "Or", 7, MAX, claim_logic, lower_logic);
    r.op("", "Xor", 7, MAX, claim_logic, lower_logic);
    r.op("", "Not", 1, MAX, claim_logic, lower_logic);
    r.op("", "BitwiseAnd", 18, MAX, claim_bitwise, lower_bitwise);
    r.op("", "BitwiseOr", 18, MAX, claim_bitwise, lower_bitwise);
    r.op("", "BitwiseXor", 18, MAX, claim_bitwise, lower_bitwise);
    r.op("", "BitwiseNot", 18, MAX, claim_bitwise, lower_bitwise);
    r.op("", "BitShift", 11, MAX, claim_bitshift, lower_bitshift);
    r.op("", "Where", 9, MAX, claim_where, lower_where);
    r.op("", "Shrink", 9, MAX, claim_float_unary, lower_shrink);
    // Unary math on floats.
    for (op, since) in [
        ("Exp", 6),
        ("Log", 6),
        ("Sqrt", 6),
        ("Reciprocal", 6),
        ("Tanh", 6),
        ("Sigmoid", 6),
        ("Floor", 6),
        ("Ceil", 6),
        ("Erf", 9),
        ("Sin", 7),
        ("Cos", 7),
        ("Tan", 7),
        ("Asin", 7),
        ("Acos", 7),
        ("Atan", 7),
        ("Sinh", 9),
        ("Cosh", 9),
        ("Asinh", 9),
        ("Acosh", 9),
        ("Atanh", 9),
        ("Round", 11),
        ("IsNaN", 9),
        ("IsInf", 10),
        ("Softplus", 1),
        ("Softsign", 1),
    ] {
        r.op("", op, since, MAX, claim_float_unary, lower_unary);
    }
    r.op("", "Neg", 6, MAX, claim_signed_unary, lower_unary);
    r.op("", "Abs", 6, MAX, claim_numeric_unary, lower_unary);
    r.op("", "Sign", 9, MAX, claim_numeric_unary, lower_unary);
    // Activations.
    r.op("", "Relu", 6, MAX, claim_relu, lower_relu);
    r.op("", "LeakyRelu", 6, MAX, claim_float_unary, lower_activation);
    r.op("", "Elu", 6, MAX, claim_float_unary, lower_activation);
    r.op("", "Selu", 6, MAX, claim_float_unary, lower_activation);
    r.op("", "Celu", 12, MAX, claim_float_unary, lower_activation);
    r.op("", "HardSigmoid", 6, MAX, claim_float_unary, lower_activation);
    r.op("", "HardSwish", 14, MAX, claim_float_unary, lower_activation);
    r.op("", "ThresholdedRelu", 10, MAX, claim_float_unary, lower_activation);
    r.op("", "Mish", 18, MAX, claim_float_unary, lower_activation);
    r.op("", "Swish", 24, MAX, claim_float_unary, lower_activation);
    r.op("", "PRelu", 7, MAX, claim_prelu, lower_prelu);
    r.op("", "Gelu", 20, MAX, claim_gelu, lower_gelu);
    // Type and range.
    r.op("", "Cast", 6, MAX, claim_cast, lower_cast);
    r.op("", "CastLike", 15, MAX, claim_cast, lower_cast);
    r.op("", "Clip", 6, MAX, claim_clip, lower_clip);
    r.op("", "Identity", 1, MAX, claim_identity, lower_identity);
    r.op("", "Dropout", 7, MAX, claim_dropout, lower_dropout)
        .notes("training mode (opset 12+): MLX's uniform draws, `u >= ratio`, `x / (1 - ratio)` (exact with a ratio of 0); float64 training declined");
}

fn claim_arith(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..2, NUMERIC).map(|_| ())
}

fn lower_arith(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let op = match node.op_type.as_str() {
        "Add" => B::Add,
        "Sub" => B::Subtract,
        "Mul" => B::Multiply,
        other => invalid!(node, "not an arithmetic op: {other}"),
    };
    let dt = ctx.input_dtype(node, 0)?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let out = ctx.binary(op, a, b, dt);
    ctx.finish(node, 0, out, dt)
}

fn lower_div(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let out = if dt.is_float() {
        ctx.binary(B::Divide, a, b, dt)
    } else if !dt.is_signed_integer() {
        // Unsigned: floor and truncation agree.
        ctx.binary(B::FloorDivide, a, b, dt)
    } else {
        trunc_div(ctx, a, b, dt)?
    };
    ctx.finish(node, 0, out, dt)
}

/// Signed integer division truncating toward zero (C / ONNX), whichever rounding MLX's integer
/// `floor_divide` uses: `q = a // b; r = a - q*b; q += (r != 0 && (r < 0) != (a < 0))`.
fn trunc_div(ctx: &mut LowerCtx, a: Slot, b: Slot, dt: DataType) -> Result<Slot, PlanError> {
    let zero = ctx.scalar(dt, 0.0)?;
    let q = ctx.binary(B::FloorDivide, a, b, dt);
    let qb = ctx.binary(B::Multiply, q, b, dt);
    let r = ctx.binary(B::Subtract, a, qb, dt);
    let nz = ctx.binary(B::NotEqual, r, zero, dt);
    let rn = ctx.binary(B::Less, r, zero, dt);
    let an = ctx.binary(B::Less, a, zero, dt);
    let differ = ctx.binary(B::NotEqual, rn, an, DataType::Bool);
    let fix = ctx.binary(B::LogicalAnd, nz, differ, DataType::Bool);
    let fix = ctx.cast(fix, DataType::Bool, dt);
    Ok(ctx.binary(B::Add, q, fix, dt))
}

fn claim_pow(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, NUMERIC)?;
    ctx.expect_dtype(node, 1, NUMERIC)?;
    // An integer base runs in MLX's integer power when the exponent is a non-negative integer
    // constant, otherwise as ORT computes it: `T(pow(double(x), double(y)))` (float64, on
    // MLX's CPU backend).
    Ok(())
}

/// Whether `Pow`'s exponent is a constant of non-negative integers (MLX's integer power
/// loops over its bits).
fn int_exponent(ctx: &LowerCtx, node: &Node) -> bool {
    ctx.const_input(node, 1)
        .filter(|t| !t.dtype.is_float())
        .and_then(|t| t.to_i64_vec())
        .is_some_and(|v| v.iter().all(|&e| e >= 0))
}

fn lower_pow(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let edt = ctx.input_dtype(node, 1)?;
    let x = ctx.input(node, 0)?;
    let square = dt.is_float()
        && ctx
            .const_input(node, 1)
            .and_then(|t| t.to_f64_vec())
            .is_some_and(|v| v.len() == 1 && v[0] == 2.0);
    let out = if square {
        ctx.unary(U::Square, x, dt)
    } else if !dt.is_float() && !int_exponent(ctx, node) {
        let f = DataType::Double;
        let e = ctx.input(node, 1)?;
        let xf = ctx.cast(x, dt, f);
        let ef = ctx.cast(e, edt, f);
        let p = ctx.binary(B::Power, xf, ef, f);
        ctx.cast(p, f, dt)
    } else {
        let e = ctx.input(node, 1)?;
        let e = ctx.cast(e, edt, dt);
        ctx.binary(B::Power, x, e, dt)
    };
    ctx.finish(node, 0, out, dt)
}

fn claim_mod(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = same_dtypes(ctx, node, 0..2, NUMERIC)?;
    let fmod = attr_int(node, "fmod").or_decline()?.unwrap_or(0);
    if fmod != 0 && fmod != 1 {
        decline!("Mod: fmod={fmod} is invalid");
    }
    if dt.is_float() && fmod == 0 {
        decline!("Mod: float operands need fmod=1 (ONNX Runtime rejects fmod=0)");
    }
    Ok(())
}

fn lower_mod(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let fmod = attr_int(node, "fmod").or_invalid(node)?.unwrap_or(0) == 1;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    if dt.is_float() {
        // C fmod(a, b) = sign(a) * fmod(|a|, |b|); on non-negative operands MLX's remainder is
        // fmod itself (no sign adjustment, so no rounding).
        let abs_a = ctx.unary(U::Abs, a, dt);
        let abs_b = ctx.unary(U::Abs, b, dt);
        let m = ctx.binary(B::Remainder, abs_a, abs_b, dt);
        let neg_m = ctx.unary(U::Negative, m, dt);
        let zero = ctx.scalar(dt, 0.0)?;
        let a_neg = ctx.binary(B::Less, a, zero, dt);
        let out = select(ctx, a_neg, neg_m, m, dt);
        return ctx.finish(node, 0, out, dt);
    }
    // MLX remainder takes the divisor's sign (Python), which is ONNX fmod=0.
    let r = ctx.binary(B::Remainder, a, b, dt);
    let out = if fmod && dt.is_signed_integer() {
        // C fmod takes the dividend's sign: subtract b where r != 0 and signs differ.
        let zero = ctx.scalar(dt, 0.0)?;
        let nz = ctx.binary(B::NotEqual, r, zero, dt);
        let rn = ctx.binary(B::Less, r, zero, dt);
        let an = ctx.binary(B::Less, a, zero, dt);
        let differ = ctx.binary(B::NotEqual, rn, an, DataType::Bool);
        let fix = ctx.binary(B::LogicalAnd, nz, differ, DataType::Bool);
        let rb = ctx.binary(B::Subtract, r, b, dt);
        let out = ctx.temp(dt);
        ctx.push(Step::Where {
            cond: fix,
            x: rb,
            y: r,
            out,
        });
        out
    } else {
        r
    };
    ctx.finish(node, 0, out, dt)
}

fn claim_variadic(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if node.inputs.iter().all(|s| s.is_empty()) {
        decline!("{}: no inputs", node.op_type);
    }
    let allowed = if node.op_type == "Mean" {
        FLOATS
    } else {
        NUMERIC
    };
    same_dtypes(ctx, node, 0..node.inputs.len(), allowed).map(|_| ())
}

fn lower_variadic(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let op = match node.op_type.as_str() {
        "Max" => B::Maximum,
        "Min" => B::Minimum,
        _ => B::Add,
    };
    let mut acc = ctx.input(node, 0)?;
    let mut n = 1;
    for i in 1..node.inputs.len() {
        if let Some(s) = ctx.opt_input(node, i)? {
            acc = ctx.binary(op, acc, s, dt);
            n += 1;
        }
    }
    if n == 1 {
        // A single input: the result is a copy.
        let out = ctx.temp(dt);
        ctx.push(Step::AsType {
            x: acc,
            dtype: dt,
            out,
        });
        acc = out;
    }
    if node.op_type == "Mean" && n > 1 {
        let c = ctx.scalar(dt, n as f64)?;
        acc = ctx.binary(B::Divide, acc, c, dt);
    }
    ctx.finish(node, 0, acc, dt)
}

/// `Equal`'s types: strings from opset 19 (a host kernel, see `text`).
const EQUAL_19: &[DataType] = &[
    DataType::Float,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
    DataType::Bool,
    DataType::String,
];

fn claim_compare(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let allowed = match node.op_type.as_str() {
        "Equal" if ctx.opset >= 19 => EQUAL_19,
        "Equal" => DATA,
        _ => NUMERIC,
    };
    same_dtypes(ctx, node, 0..2, allowed).map(|_| ())
}

fn lower_compare(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let op = match node.op_type.as_str() {
        "Equal" => B::Equal,
        "Less" => B::Less,
        "Greater" => B::Greater,
        "LessOrEqual" => B::LessEqual,
        "GreaterOrEqual" => B::GreaterEqual,
        other => invalid!(node, "not a comparison: {other}"),
    };
    let dt = ctx.input_dtype(node, 0)?;
    if dt == DataType::String {
        return crate::ops::text::lower_string_equal(ctx, node);
    }
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let out = ctx.binary(op, a, b, dt);
    ctx.finish(node, 0, out, DataType::Bool)
}

fn claim_logic(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = if node.op_type == "Not" { 1 } else { 2 };
    same_dtypes(ctx, node, 0..n, &[DataType::Bool]).map(|_| ())
}

fn lower_logic(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let a = ctx.input(node, 0)?;
    let out = match node.op_type.as_str() {
        "Not" => ctx.unary(U::LogicalNot, a, DataType::Bool),
        op => {
            let b = ctx.input(node, 1)?;
            let op = match op {
                "And" => B::LogicalAnd,
                "Or" => B::LogicalOr,
                _ => B::NotEqual, // Xor on bools
            };
            ctx.binary(op, a, b, DataType::Bool)
        }
    };
    ctx.finish(node, 0, out, DataType::Bool)
}

fn claim_bitwise(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = if node.op_type == "BitwiseNot" { 1 } else { 2 };
    same_dtypes(ctx, node, 0..n, INTEGERS).map(|_| ())
}

fn lower_bitwise(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let a = ctx.input(node, 0)?;
    let out = match node.op_type.as_str() {
        "BitwiseNot" => ctx.unary(U::BitwiseInvert, a, dt),
        op => {
            let b = ctx.input(node, 1)?;
            let op = match op {
                "BitwiseAnd" => B::BitwiseAnd,
                "BitwiseOr" => B::BitwiseOr,
                _ => B::BitwiseXor,
            };
            ctx.binary(op, a, b, dt)
        }
    };
    ctx.finish(node, 0, out, dt)
}

fn claim_bitshift(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(
        ctx,
        node,
        0..2,
        &[
            DataType::Uint8,
            DataType::Uint16,
            DataType::Uint32,
            DataType::Uint64,
        ],
    )?;
    match attr_str(node, "direction").or_decline()?.as_deref() {
        Some("LEFT") | Some("RIGHT") => Ok(()),
        other => decline!("BitShift: direction {other:?} is invalid"),
    }
}

fn lower_bitshift(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let a = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let op = if attr_str(node, "direction").or_invalid(node)?.as_deref() == Some("LEFT") {
        B::LeftShift
    } else {
        B::RightShift
    };
    let out = ctx.binary(op, a, b, dt);
    ctx.finish(node, 0, out, dt)
}

fn claim_where(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Bool])?;
    same_dtypes(ctx, node, 1..3, DATA).map(|_| ())
}

fn lower_where(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 1)?;
    let cond = ctx.input(node, 0)?;
    let x = ctx.input(node, 1)?;
    let y = ctx.input(node, 2)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Where { cond, x, y, out });
    ctx.finish(node, 0, out, dt)
}

fn claim_float_unary(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS).map(|_| ())
}

fn claim_signed_unary(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, SIGNED_NUMERIC).map(|_| ())
}

fn claim_numeric_unary(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, NUMERIC).map(|_| ())
}

fn lower_unary(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let simple = |op: &str| -> Option<U> {
        Some(match op {
            "Exp" => U::Exp,
            "Log" => U::Log,
            "Sqrt" => U::Sqrt,
            "Reciprocal" => U::Reciprocal,
            "Tanh" => U::Tanh,
            "Sigmoid" => U::Sigmoid,
            "Floor" => U::Floor,
            "Ceil" => U::Ceil,
            "Erf" => U::Erf,
            "Sin" => U::Sin,
            "Cos" => U::Cos,
            "Tan" => U::Tan,
            "Asin" => U::Asin,
            "Acos" => U::Acos,
            "Atan" => U::Atan,
            "Sinh" => U::Sinh,
            "Cosh" => U::Cosh,
            "Asinh" => U::Asinh,
            "Acosh" => U::Acosh,
            "Atanh" => U::Atanh,
            "Round" => U::Round,
            "Neg" => U::Negative,
            "Abs" => U::Abs,
            "Sign" => U::Sign,
            _ => return None,
        })
    };
    let (out, odt) = match node.op_type.as_str() {
        // MLX's float64 exp is float32-accurate: rebuilt from pow (see `float64`).
        "Exp" if dt == DataType::Double => (super::float64::exp(ctx, x)?, dt),
        "IsNaN" => (ctx.unary(U::IsNan, x, DataType::Bool), DataType::Bool),
        "IsInf" => {
            let pos = attr_int(node, "detect_positive")
                .or_invalid(node)?
                .unwrap_or(1)
                != 0;
            let neg = attr_int(node, "detect_negative")
                .or_invalid(node)?
                .unwrap_or(1)
                != 0;
            let out = match (pos, neg) {
                (true, true) => ctx.unary(U::IsInf, x, DataType::Bool),
                (true, false) => ctx.unary(U::IsPosInf, x, DataType::Bool),
                (false, true) => ctx.unary(U::IsNegInf, x, DataType::Bool),
                (false, false) => {
                    // Never infinite: x != x && false -> all false, shaped like x.
                    let f = ctx.scalar(DataType::Bool, 0.0)?;
                    let isnan = ctx.unary(U::IsNan, x, DataType::Bool);
                    ctx.binary(B::LogicalAnd, isnan, f, DataType::Bool)
                }
            };
            (out, DataType::Bool)
        }
        "Softplus" => {
            // log(1 + exp(x)) = logaddexp(x, 0), computed stably.
            let zero = ctx.scalar(dt, 0.0)?;
            (ctx.binary(B::LogAddExp, x, zero, dt), dt)
        }
        "Softsign" => {
            let one = ctx.scalar(dt, 1.0)?;
            let a = ctx.unary(U::Abs, x, dt);
            let d = ctx.binary(B::Add, a, one, dt);
            (ctx.binary(B::Divide, x, d, dt), dt)
        }
        "Abs" if !dt.is_signed_integer() && !dt.is_float() => {
            // Unsigned: identity (as a copy).
            let out = ctx.temp(dt);
            ctx.push(Step::AsType { x, dtype: dt, out });
            (out, dt)
        }
        op => match simple(op) {
            Some(u) => (ctx.unary(u, x, dt), dt),
            None => invalid!(node, "no unary lowering for {op}"),
        },
    };
    ctx.finish(node, 0, out, odt)
}

fn claim_relu(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, SIGNED_NUMERIC).map(|_| ())
}

fn lower_relu(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let zero = ctx.scalar(dt, 0.0)?;
    let out = ctx.binary(B::Maximum, x, zero, dt);
    ctx.finish(node, 0, out, dt)
}

fn lower_activation(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let f = |name: &str, default: f32| -> Result<f64, PlanError> {
        Ok(attr_float(node, name).or_invalid(node)?.unwrap_or(default) as f64)
    };
    let out = match node.op_type.as_str() {
        "LeakyRelu" => {
            let alpha = ctx.scalar(dt, f("alpha", 0.01)?)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let neg = ctx.binary(B::Less, x, zero, dt);
            let ax = ctx.binary(B::Multiply, x, alpha, dt);
            select(ctx, neg, ax, x, dt)
        }
        "Elu" => {
            let alpha = ctx.scalar(dt, f("alpha", 1.0)?)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let neg = ctx.binary(B::Less, x, zero, dt);
            let em1 = ctx.unary(U::Expm1, x, dt);
            let a = ctx.binary(B::Multiply, em1, alpha, dt);
            select(ctx, neg, a, x, dt)
        }
        "Selu" => {
            let alpha = ctx.scalar(dt, f("alpha", 1.673_263_2)?)?;
            let gamma = ctx.scalar(dt, f("gamma", 1.050_701)?)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let neg = ctx.binary(B::LessEqual, x, zero, dt);
            let e = ctx.unary(U::Exp, x, dt);
            let ae = ctx.binary(B::Multiply, e, alpha, dt);
            let a = ctx.binary(B::Subtract, ae, alpha, dt);
            let s = select(ctx, neg, a, x, dt);
            ctx.binary(B::Multiply, s, gamma, dt)
        }
        "Celu" => {
            // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
            let alpha_v = f("alpha", 1.0)?;
            let alpha = ctx.scalar(dt, alpha_v)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let xa = ctx.binary(B::Divide, x, alpha, dt);
            let em1 = ctx.unary(U::Expm1, xa, dt);
            let a = ctx.binary(B::Multiply, em1, alpha, dt);
            let lo = ctx.binary(B::Minimum, a, zero, dt);
            let hi = ctx.binary(B::Maximum, x, zero, dt);
            ctx.binary(B::Add, hi, lo, dt)
        }
        "HardSigmoid" | "HardSwish" => {
            let (a, b) = if node.op_type == "HardSwish" {
                (1.0 / 6.0, 0.5)
            } else {
                (f("alpha", 0.2)?, f("beta", 0.5)?)
            };
            let alpha = ctx.scalar(dt, a)?;
            let beta = ctx.scalar(dt, b)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let one = ctx.scalar(dt, 1.0)?;
            let ax = ctx.binary(B::Multiply, x, alpha, dt);
            let axb = ctx.binary(B::Add, ax, beta, dt);
            let lo = ctx.binary(B::Minimum, axb, one, dt);
            let hs = ctx.binary(B::Maximum, lo, zero, dt);
            if node.op_type == "HardSwish" {
                ctx.binary(B::Multiply, x, hs, dt)
            } else {
                hs
            }
        }
        "ThresholdedRelu" => {
            let alpha = ctx.scalar(dt, f("alpha", 1.0)?)?;
            let zero = ctx.scalar(dt, 0.0)?;
            let gt = ctx.binary(B::Greater, x, alpha, dt);
            select(ctx, gt, x, zero, dt)
        }
        "Mish" => {
            // x * tanh(softplus(x))
            let zero = ctx.scalar(dt, 0.0)?;
            let sp = ctx.binary(B::LogAddExp, x, zero, dt);
            let t = ctx.unary(U::Tanh, sp, dt);
            ctx.binary(B::Multiply, x, t, dt)
        }
        "Swish" => {
            // x * sigmoid(alpha * x); float64 as x / (1 + exp(-alpha * x)) with the
            // float64-accurate exp (MLX's float64 sigmoid is float32-accurate).
            let alpha = ctx.scalar(dt, f("alpha", 1.0)?)?;
            let ax = ctx.binary(B::Multiply, x, alpha, dt);
            if dt == DataType::Double {
                let one = ctx.scalar(dt, 1.0)?;
                let nax = ctx.unary(U::Negative, ax, dt);
                let e = super::float64::exp(ctx, nax)?;
                let d = ctx.binary(B::Add, e, one, dt);
                ctx.binary(B::Divide, x, d, dt)
            } else {
                let s = ctx.unary(U::Sigmoid, ax, dt);
                ctx.binary(B::Multiply, x, s, dt)
            }
        }
        other => invalid!(node, "no activation lowering for {other}"),
    };
    ctx.finish(node, 0, out, dt)
}

pub(crate) fn select(ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Where { cond, x, y, out });
    out
}

fn claim_prelu(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..2, SIGNED_NUMERIC).map(|_| ())
}

fn lower_prelu(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let slope = ctx.input(node, 1)?;
    let zero = ctx.scalar(dt, 0.0)?;
    let neg = ctx.binary(B::Less, x, zero, dt);
    let sx = ctx.binary(B::Multiply, x, slope, dt);
    let out = select(ctx, neg, sx, x, dt);
    ctx.finish(node, 0, out, dt)
}

fn claim_gelu(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    match attr_str(node, "approximate").or_decline()?.as_deref() {
        None | Some("none") | Some("tanh") => Ok(()),
        Some(other) => decline!("Gelu: approximate='{other}' is invalid"),
    }
}

/// Gelu in float32 (half inputs are widened, then narrowed once at the end, as ORT does).
fn lower_gelu(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let half = ctx.scalar(cdt, 0.5)?;
    let one = ctx.scalar(cdt, 1.0)?;
    let inner = if attr_str(node, "approximate").or_invalid(node)?.as_deref() == Some("tanh") {
        // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
        let c = ctx.scalar(cdt, (2.0 / std::f64::consts::PI).sqrt())?;
        let k = ctx.scalar(cdt, 0.044715)?;
        let x2 = ctx.unary(U::Square, x, cdt);
        let x3 = ctx.binary(B::Multiply, x2, x, cdt);
        let kx3 = ctx.binary(B::Multiply, x3, k, cdt);
        let s = ctx.binary(B::Add, x, kx3, cdt);
        let cs = ctx.binary(B::Multiply, s, c, cdt);
        ctx.unary(U::Tanh, cs, cdt)
    } else {
        // erf(x / sqrt(2))
        let c = ctx.scalar(cdt, std::f64::consts::FRAC_1_SQRT_2)?;
        let xs = ctx.binary(B::Multiply, x, c, cdt);
        ctx.unary(U::Erf, xs, cdt)
    };
    let p = ctx.binary(B::Add, inner, one, cdt);
    let hx = ctx.binary(B::Multiply, x, half, cdt);
    let y = ctx.binary(B::Multiply, hx, p, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

fn cast_target(ctx: &ClaimCtx, node: &Node) -> Result<DataType, Decline> {
    if node.op_type == "CastLike" {
        return ctx.input_dtype(node, 1);
    }
    let to = attr_int(node, "to")
        .or_decline()?
        .ok_or_else(|| Decline::new("Cast: the 'to' attribute is missing"))?;
    DataType::from_onnx(to as i32)
        .ok_or_else(|| Decline::new(format!("Cast: unknown target type {to}")))
}

fn claim_cast(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if let (Ok(from), Ok(to)) = (ctx.input_dtype(node, 0), cast_target(ctx, node))
        && let Some(form) =
            super::bits::float8_cast(from, to).or_else(|| super::bits::packed_cast(from, to))
    {
        if to == DataType::Float8E8M0 {
            super::bits::round_mode(node)
                .map_err(|e| Decline::new(format!("{}: {e}", node.op_type)))?;
        }
        return form.map_err(|e| Decline::new(format!("{}: {e}", node.op_type)));
    }
    ctx.expect_dtype(node, 0, DATA)?;
    let to = cast_target(ctx, node)?;
    let f64_ok = to == DataType::Double && crate::registry::float64_claimed(node);
    if !DATA.contains(&to) && !f64_ok {
        decline!(
            "{}: casting to {to} is not claimed{}",
            node.op_type,
            crate::registry::dtype_note(to)
        );
    }
    Ok(())
}

fn lower_cast(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let from = ctx.input_dtype(node, 0)?;
    let to = if node.op_type == "CastLike" {
        ctx.input_dtype(node, 1)?
    } else {
        let v = attr_int(node, "to").or_invalid(node)?.unwrap_or(0);
        match DataType::from_onnx(v as i32) {
            Some(d) => d,
            None => invalid!(node, "unknown target type {v}"),
        }
    };
    let x = ctx.input(node, 0)?;
    if from == to {
        ctx.alias(node, 0, x);
        return Ok(());
    }
    if super::bits::float8_cast(from, to).is_some() {
        let out = super::bits::lower_float8_cast(ctx, node, x, from, to)?;
        return ctx.finish(node, 0, out, to);
    }
    if super::bits::packed_cast(from, to).is_some() {
        let out = super::bits::lower_packed_cast(ctx, x, from, to)?;
        return ctx.finish(node, 0, out, to);
    }
    let out = ctx.cast(x, from, to);
    ctx.finish(node, 0, out, to)
}

fn claim_clip(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if ctx.opset < 11 {
        ctx.expect_dtype(node, 0, FLOATS)?;
        return Ok(());
    }
    same_dtypes(ctx, node, 0..3, NUMERIC).map(|_| ())
}

fn lower_clip(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let (lo, hi) = if ctx.opset() < 11 {
        let lo = attr_float(node, "min").or_invalid(node)?;
        let hi = attr_float(node, "max").or_invalid(node)?;
        (
            match lo {
                Some(v) => Some(ctx.scalar(dt, v as f64)?),
                None => None,
            },
            match hi {
                Some(v) => Some(ctx.scalar(dt, v as f64)?),
                None => None,
            },
        )
    } else {
        (ctx.opt_input(node, 1)?, ctx.opt_input(node, 2)?)
    };
    let mut y = x;
    if let Some(lo) = lo {
        y = ctx.binary(B::Maximum, y, lo, dt);
    }
    if let Some(hi) = hi {
        y = ctx.binary(B::Minimum, y, hi, dt);
    }
    if y == x {
        ctx.alias(node, 0, x);
        return Ok(());
    }
    ctx.finish(node, 0, y, dt)
}

fn claim_identity(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if node
        .input(0)
        .and_then(|x| super::sequence::container_source(ctx.graph, x))
        .is_some()
    {
        return super::sequence::container_output_stays_inside(ctx, node);
    }
    ctx.expect_dtype(node, 0, DATA).map(|_| ())
}

fn claim_dropout(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if ctx.opset < 10 {
        // opset 7's mask has x's type
        no_output(node, 1, "mask")?;
    }
    if node.input(2).is_none()
        || inference_dropout(
            ctx.constant_of(node, 2),
            zero_ratio(ctx.constant_of(node, 1)),
        )
    {
        ctx.expect_dtype(node, 0, DATA)?;
        return Ok(());
    }
    // Training (or a run-time training_mode): drops at random with the run's ratio.
    let dt = ctx.expect_dtype(node, 0, FLOATS)?;
    if let Some(r) = node.input(1) {
        ctx.expect_dtype(node, 1, FLOATS)?;
        if let Some(rank) = ctx.rank(r)
            && rank != 0
        {
            decline!("Dropout: the ratio has rank {rank}, not a scalar");
        }
    }
    if dt == DataType::Double {
        decline!("Dropout: float64 training (its random draws are float32)");
    }
    attr_int(node, "seed").or_decline()?;
    Ok(())
}

impl ClaimCtx<'_> {
    /// The constant value of input `i` of `node`, when it has one.
    fn constant_of(&self, node: &Node, i: usize) -> Option<&onnx_ir::TensorData> {
        self.constant(node.input(i)?)
    }
}

/// True, for a Dropout with a training_mode input, when it passes its input through: the
/// training_mode is a constant false, or the ratio a constant 0 (drops nothing; the mask all
/// true). Without the input (opset < 12 has none) Dropout always passes through.
fn inference_dropout(training: Option<&onnx_ir::TensorData>, zero_ratio: bool) -> bool {
    zero_ratio
        || match training {
            Some(t) => t.to_i64_vec().is_some_and(|v| v.iter().all(|&b| b == 0)),
            None => false,
        }
}

/// Opset 12+ Dropout's ratio input is a constant 0 (every element).
fn zero_ratio(ratio: Option<&onnx_ir::TensorData>) -> bool {
    ratio
        .and_then(|t| t.to_f64_vec())
        .is_some_and(|v| !v.is_empty() && v.iter().all(|&r| r == 0.0))
}

/// Dropout. Inference (and training with a constant ratio of 0): the input unchanged, and a
/// mask of all true when asked for. Training otherwise (opset 12+, a training_mode that is
/// true or known only at run time, any ratio): `u = uniform[0, 1)` shaped like `x`,
/// `mask = u >= ratio` (all true when not training), `y = mask ? x / (1 - ratio) : 0` in
/// float32 for half inputs; exact for a ratio of 0 and when not training.
fn lower_dropout(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let x = ctx.input(node, 0)?;
    let training_input = node.input(2).is_some();
    let passes = !training_input
        || inference_dropout(
            ctx.const_input(node, 2),
            zero_ratio(ctx.const_input(node, 1)),
        );
    if passes {
        ctx.alias(node, 0, x);
        if node.output(1).is_some() {
            // isnan(x) | !isnan(x): true everywhere, shaped like x
            let b = ctx.unary(U::IsNan, x, DataType::Bool);
            let nb = ctx.unary(U::LogicalNot, b, DataType::Bool);
            let mask = ctx.binary(B::LogicalOr, b, nb, DataType::Bool);
            ctx.finish(node, 1, mask, DataType::Bool)?;
        }
        return Ok(());
    }
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let ratio = match ctx.opt_input(node, 1)? {
        Some(r) => {
            let rdt = ctx.input_dtype(node, 1)?;
            ctx.cast(r, rdt, cdt)
        }
        None => ctx.scalar(cdt, 0.5)?,
    };
    let seed = attr_int(node, "seed").or_invalid(node)?.map(|s| s as f32);
    let u = ctx.temp(DataType::Float);
    ctx.push(Step::Random {
        dist: crate::step::RandomDist::Uniform {
            low: 0.0,
            high: 1.0,
        },
        x: Some(x),
        shape: Vec::new(),
        seed,
        dtype: DataType::Float,
        out: u,
    });
    let u = ctx.cast(u, DataType::Float, cdt);
    let mut keep = ctx.binary(B::GreaterEqual, u, ratio, cdt);
    let one = ctx.scalar(cdt, 1.0)?;
    let kept = ctx.binary(B::Subtract, one, ratio, cdt);
    let mut scale = ctx.binary(B::Divide, one, kept, cdt);
    let constant_true = ctx
        .const_input(node, 2)
        .and_then(|t| t.to_i64_vec())
        .is_some_and(|v| v.iter().all(|&b| b != 0));
    if !constant_true {
        // a run-time training_mode: when false, keep everything unscaled
        let t = ctx.input(node, 2)?;
        let not_t = ctx.unary(U::LogicalNot, t, DataType::Bool);
        keep = ctx.binary(B::LogicalOr, keep, not_t, DataType::Bool);
        scale = select(ctx, t, scale, one, cdt);
    }
    let xc = ctx.cast(x, dt, cdt);
    let scaled = ctx.binary(B::Multiply, xc, scale, cdt);
    let zero = ctx.scalar(cdt, 0.0)?;
    let y = select(ctx, keep, scaled, zero, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)?;
    if node.output(1).is_some() {
        ctx.finish(node, 1, keep, DataType::Bool)?;
    }
    Ok(())
}

fn lower_identity(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    if super::sequence::forward_container(ctx, node)? {
        return Ok(());
    }
    let x = ctx.input(node, 0)?;
    ctx.alias(node, 0, x);
    Ok(())
}

/// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`, in float32 for half inputs.
fn lower_shrink(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let lambd = attr_float(node, "lambd").or_invalid(node)?.unwrap_or(0.5) as f64;
    let bias = attr_float(node, "bias").or_invalid(node)?.unwrap_or(0.0) as f64;
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let lo = ctx.scalar(cdt, -lambd)?;
    let hi = ctx.scalar(cdt, lambd)?;
    let b = ctx.scalar(cdt, bias)?;
    let zero = ctx.scalar(cdt, 0.0)?;
    let below = ctx.binary(B::Less, x, lo, cdt);
    let above = ctx.binary(B::Greater, x, hi, cdt);
    let plus = ctx.binary(B::Add, x, b, cdt);
    let minus = ctx.binary(B::Subtract, x, b, cdt);
    let upper = select(ctx, above, minus, zero, cdt);
    let y = select(ctx, below, plus, upper, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}
