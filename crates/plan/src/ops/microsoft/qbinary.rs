//! `QLinearAdd` and `QLinearMul` as ORT's CPU EP computes them, through a table of all 65536
//! input pairs.
//!
//! MLAS' QLinearAdd kernel is CPU specific. Its AVX2 one (x86-64 with AVX2 and FMA, the kernel
//! ORT's Linux builds pick there) computes, in float32 with `ra = a_scale / c_scale`,
//! `rb = b_scale / c_scale` and `fixed = c_zp - fma(ra, a_zp, rb * b_zp)`:
//!
//! - both inputs spanning the output's innermost axis: `fma(a, ra, fma(b, rb, fixed))`;
//! - B one value per innermost span (a scalar, or broadcast along the innermost output axis):
//!   `fma(a, ra, fma(b, rb, fixed))` (the compiler fuses MLAS' `fixed + b * rb`);
//! - A so: ORT passes B to MLAS as its first input, so `fixed = c_zp - fma(rb, b_zp, ra * a_zp)`
//!   and `fma(b, rb, fma(a, ra, fixed))`;
//!
//! rounded half to even and saturated to the 8-bit type. The value depends only on the byte
//! pair, so the plan builds the 64Ki-entry table of the form the node's (fixed) shapes select
//! and gathers `table[256 * a' + b']` (`a'`, `b'` the bytes indexed from the type's lowest
//! value). Elsewhere (other CPUs, other compilers' builds) the node stays on ORT's CPU EP.
//!
//! MLAS' QLinearMul on x86-64 (its SSE2 kernel, built without FMA) computes the exact product
//! `p = (a - a_zp) * (b - b_zp)` and `float(p) * (a_scale * b_scale / c_scale) + c_zp` in
//! float32, rounded half to even and saturated, the same for every broadcast form.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the op.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "QLinearAdd", 1, 1, claim_binary, lower_binary)
        .notes("int8/uint8 with constant scales and zero points, fixed shapes, numpy broadcasting; Linux x86-64 with AVX2 and FMA only (MLAS' kernel reproduced by a 64Ki-entry table)");
    // the same table lowering; the op picks the kernel formula
    r.op(MS, "QLinearMul", 1, 1, claim_binary, lower_binary)
        .notes("int8/uint8 with constant scales and zero points, numpy broadcasting; Linux x86-64 only (MLAS' SSE2 kernel reproduced by a 64Ki-entry table)");
}

/// Which of MLAS' kernels ORT's broadcasting runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Both inputs span the innermost axis.
    General,
    /// A is one value per span.
    ScalarA,
    /// B is one value per span.
    ScalarB,
}

/// The form for fixed input shapes `a` and `b`.
fn form(a: &[i64], b: &[i64]) -> Form {
    if a.iter().product::<i64>() == 1 {
        return Form::ScalarA;
    }
    if b.iter().product::<i64>() == 1 {
        return Form::ScalarB;
    }
    let r = a.len().max(b.len());
    let at = |s: &[i64], i: usize| {
        if i + s.len() < r {
            1
        } else {
            s[i + s.len() - r]
        }
    };
    for i in (0..r).rev() {
        let (x, y) = (at(a, i), at(b, i));
        if x.max(y) == 1 {
            continue;
        }
        return if x == 1 {
            Form::ScalarA
        } else if y == 1 {
            Form::ScalarB
        } else {
            Form::General
        };
    }
    Form::General
}

/// Whether this machine's MLAS runs the kernel of `op` the table reproduces.
fn kernel_known(op: &str) -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        op == "QLinearMul"
            || (std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma"))
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        let _ = op;
        false
    }
}

/// `(scale, zero_point)` of inputs `s` and `z` (absent zero point: 0), constant scalars.
fn scale_zp<'t>(
    dt: DataType,
    s: usize,
    z: usize,
    node: &Node,
    get: &impl Fn(usize) -> Option<&'t TensorData>,
) -> Result<(f32, i32), String> {
    let read = |i: usize, want: DataType| -> Result<f64, String> {
        let op = &node.op_type;
        let t = get(i)
            .ok_or_else(|| format!("{op}: scales and zero points must be constant initializers"))?;
        if t.dtype != want || t.dims.len() > 1 || t.numel() != 1 {
            return Err(format!("{op}: input {i} must be a {want} scalar"));
        }
        Ok(t.to_f64_vec()
            .and_then(|v| v.first().copied())
            .unwrap_or(f64::NAN))
    };
    let scale = read(s, DataType::Float)? as f32;
    let zp = if node.input(z).is_some() {
        read(z, dt)? as i32
    } else {
        0
    };
    if !(scale.is_finite() && scale > 0.0) {
        return Err(format!(
            "{}: scales must be positive and finite",
            node.op_type
        ));
    }
    Ok((scale, zp))
}

/// The 65536 outputs for every byte pair, entry `256 * a' + b'`.
fn add_table(dt: DataType, f: Form, a: (f32, i32), b: (f32, i32), c: (f32, i32)) -> Vec<u8> {
    let signed = dt == DataType::Int8;
    let (lo, hi) = if signed {
        (-128.0, 127.0)
    } else {
        (0.0, 255.0)
    };
    let off = if signed { -128 } else { 0 };
    let ra = a.0 / c.0;
    let rb = b.0 / c.0;
    // ORT hands MLAS the spanning input first: B when A is the scalar one
    let fixed = if f == Form::ScalarA {
        c.1 as f32 - rb.mul_add(b.1 as f32, ra * a.1 as f32)
    } else {
        c.1 as f32 - ra.mul_add(a.1 as f32, rb * b.1 as f32)
    };
    let mut t = Vec::with_capacity(65536);
    for i in 0..256 {
        let x = (i + off) as f32;
        for j in 0..256 {
            let y = (j + off) as f32;
            let v = match f {
                Form::General => x.mul_add(ra, y.mul_add(rb, fixed)),
                Form::ScalarB => x.mul_add(ra, y.mul_add(rb, fixed)),
                Form::ScalarA => y.mul_add(rb, x.mul_add(ra, fixed)),
            };
            t.push(v.round_ties_even().clamp(lo, hi) as i32 as u8);
        }
    }
    t
}

/// QLinearMul's 65536 outputs, entry `256 * a' + b'`.
fn mul_table(dt: DataType, a: (f32, i32), b: (f32, i32), c: (f32, i32)) -> Vec<u8> {
    let (lo, hi, off) = if dt == DataType::Int8 {
        (-128.0, 127.0, -128)
    } else {
        (0.0, 255.0, 0)
    };
    let ratio = a.0 * b.0 / c.0;
    let mut t = Vec::with_capacity(65536);
    for i in 0..256 {
        for j in 0..256 {
            let p = (i + off - a.1) * (j + off - b.1);
            let v = p as f32 * ratio + c.1 as f32;
            t.push(v.round_ties_even().clamp(lo, hi) as i32 as u8);
        }
    }
    t
}

/// Everything the lowering needs, from the node and its input shapes.
fn table_of<'t>(
    node: &Node,
    dt: DataType,
    shapes: (Option<Vec<i64>>, Option<Vec<i64>>),
    get: impl Fn(usize) -> Option<&'t TensorData>,
) -> Result<Vec<u8>, String> {
    let op = &node.op_type;
    if !kernel_known(op) {
        return Err(format!(
            "{op}: MLAS' kernel on this CPU is not the one the table reproduces"
        ));
    }
    let pa = scale_zp(dt, 1, 2, node, &get)?;
    let pb = scale_zp(dt, 4, 5, node, &get)?;
    let pc = scale_zp(dt, 6, 7, node, &get)?;
    // MLAS converts to int32 unchecked (an overflow would read as the lowest value)
    let reach = if op == "QLinearMul" {
        pa.0 as f64 * pb.0 as f64 / pc.0 as f64 * 65536.0
    } else {
        (pa.0 as f64 + pb.0 as f64) / pc.0 as f64 * 512.0
    };
    if reach >= 2f64.powi(30) {
        return Err(format!("{op}: the scales overflow MLAS' int32 conversion"));
    }
    if op == "QLinearMul" {
        return Ok(mul_table(dt, pa, pb, pc));
    }
    let (Some(a), Some(b)) = shapes else {
        return Err(format!("{op}: the input shapes must be fixed"));
    };
    Ok(add_table(dt, form(&a, &b), pa, pb, pc))
}

fn claim_binary(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, &[DataType::Int8, DataType::Uint8])?;
    ctx.expect_dtype(node, 3, &[dt])?;
    if let Some(a) = node.attributes.keys().next() {
        decline!("{}: the attribute {a} is not claimed", node.op_type);
    }
    let fixed = |i: usize| {
        let n = node.input(i)?;
        ctx.constant(n)
            .map(|t| t.dims.clone())
            .or_else(|| ctx.graph.value(n).and_then(|v| v.fixed_shape()))
    };
    let get = |i: usize| node.input(i).and_then(|n| ctx.constant(n));
    table_of(node, dt, (fixed(0), fixed(3)), get).or_decline()?;
    Ok(())
}

fn lower_binary(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let shapes = (
        ctx.input_fixed_shape(node, 0),
        ctx.input_fixed_shape(node, 3),
    );
    let table = {
        let get = |i: usize| ctx.const_input(node, i);
        table_of(node, dt, shapes, get).or_invalid(node)?
    };
    let table = TensorData::new(dt, vec![65536], table).or_invalid(node)?;
    let table = ctx.constant(table);
    let i32t = DataType::Int32;
    let byte = |ctx: &mut LowerCtx, i: usize| -> Result<Slot, PlanError> {
        let x = ctx.input(node, i)?;
        let x = ctx.cast(x, dt, i32t);
        Ok(if dt == DataType::Int8 {
            let off = ctx.scalar(i32t, 128.0)?;
            ctx.binary(B::Add, x, off, i32t)
        } else {
            x
        })
    };
    let a = byte(ctx, 0)?;
    let b = byte(ctx, 3)?;
    let w = ctx.scalar(i32t, 256.0)?;
    let hi = ctx.binary(B::Multiply, a, w, i32t);
    let idx = ctx.binary(B::Add, hi, b, i32t);
    let y = take(ctx, table, idx, 0, dt);
    ctx.finish(node, 0, y, dt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_follow_the_innermost_output_axis() {
        assert_eq!(form(&[2, 3], &[2, 3]), Form::General);
        assert_eq!(form(&[2, 3], &[1, 3]), Form::General);
        assert_eq!(form(&[2, 3], &[2, 1]), Form::ScalarB);
        assert_eq!(form(&[3, 1], &[1, 4]), Form::ScalarA);
        assert_eq!(form(&[1], &[5]), Form::ScalarA);
        assert_eq!(form(&[5, 1], &[1, 1]), Form::ScalarB);
        assert_eq!(form(&[4, 1], &[4, 1]), Form::General);
    }

    #[test]
    fn mul_table_multiplies_dequantized_values() {
        let t = mul_table(DataType::Uint8, (0.5, 1), (0.5, 0), (0.25, 2));
        // (3 - 1) * 0.5 * (4 * 0.5) / 0.25 + 2 = 10
        assert_eq!(t[3 * 256 + 4], 10);
        assert_eq!(t[255 * 256 + 255], 255);
    }

    #[test]
    fn table_adds_dequantized_values() {
        // equal scales and zero points 0: plain saturating addition
        let p = (0.5, 0);
        let t = add_table(DataType::Uint8, Form::General, p, p, p);
        assert_eq!(t[3 * 256 + 4], 7);
        assert_eq!(t[200 * 256 + 100], 255);
        let t = add_table(DataType::Int8, Form::ScalarB, p, p, p);
        // a = -128 + 10, b = -128 + 120
        assert_eq!(t[10 * 256 + 120] as i8, -126);
    }
}
