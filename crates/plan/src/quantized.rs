//! Rewrites [`Step::QuantizedMatmul`] steps over constant weights into float matmuls.
//!
//! MLX's CPU backend runs quantized matmuls with scalar loops (tens of times slower than a
//! float matmul through BLAS on x86), so on the CPU stream the runtime trades memory for
//! speed: each packed weight is dequantized once, exactly as MLX would (`scale * q + bias`
//! per group, in float32, then stored in the scales' dtype), transposed to `[K, N]`, and the
//! step becomes a [`Step::MatMul`].

use std::collections::HashMap;

use onnx_ir::{DataType, TensorData};

use crate::plan::Plan;
use crate::step::{Slot, Step};

/// The dequantized, transposed weight `[K, N]` of MLX's affine quantization: `w` holds
/// `[N, K * bits / 32]` little-endian uint32 words, `scales` and `biases` `[N, K / group]`.
pub fn dequantize_affine_t(
    w: &TensorData,
    scales: &TensorData,
    biases: &TensorData,
    group: usize,
    bits: usize,
) -> Option<TensorData> {
    if w.dtype != DataType::Uint32 || w.dims.len() != 2 || !(1..=8).contains(&bits) {
        return None;
    }
    let n = w.dims[0] as usize;
    let k = w.dims[1] as usize * 32 / bits;
    let s = scales.to_f64_vec()?;
    let b = biases.to_f64_vec()?;
    if group == 0 || !k.is_multiple_of(group) || s.len() != n * (k / group) || b.len() != s.len() {
        return None;
    }
    let row_bytes = k * bits / 8;
    let mask = (1u32 << bits) - 1;
    let mut out = vec![0f64; k * n];
    for r in 0..n {
        let row = &w.bytes[r * row_bytes..(r + 1) * row_bytes];
        for j in 0..k {
            let bit = j * bits;
            // Values never straddle a byte for 2, 4 and 8 bits; other widths read two bytes.
            let lo = row[bit / 8] as u32;
            let hi = row.get(bit / 8 + 1).copied().unwrap_or(0) as u32;
            let q = ((lo | (hi << 8)) >> (bit % 8)) & mask;
            let gi = r * (k / group) + j / group;
            let v = s[gi] as f32 * q as f32 + b[gi] as f32;
            out[j * n + r] = v as f64;
        }
    }
    crate::consts::tensor_from_f64(scales.dtype, vec![k as i64, n as i64], &out)
}

/// Replaces every quantized matmul whose weight, scales and biases are constants by a matmul
/// with the dequantized weight; drops the packed constants nothing reads any more. Returns how
/// many steps were rewritten.
pub fn dequantize_quantized_matmuls(plan: &mut Plan) -> usize {
    let consts = plan.constant_positions();
    let mut made: HashMap<(Slot, Slot, Slot), Slot> = HashMap::new();
    let mut rewritten = 0;
    for i in 0..plan.steps.len() {
        let Step::QuantizedMatmul {
            x,
            w,
            scales,
            biases,
            group_size,
            bits,
            out,
        } = plan.steps[i]
        else {
            continue;
        };
        let (Some(&wi), Some(&si), Some(&bi)) =
            (consts.get(&w), consts.get(&scales), consts.get(&biases))
        else {
            continue;
        };
        let key = (w, scales, biases);
        let wt = match made.get(&key) {
            Some(&s) => s,
            None => {
                let Some(t) = dequantize_affine_t(
                    &plan.constants[wi].1,
                    &plan.constants[si].1,
                    &plan.constants[bi].1,
                    group_size as usize,
                    bits as usize,
                ) else {
                    continue;
                };
                let name = format!("{}'dequantized", plan.slots[w.index()].name);
                let slot = plan.push_constant(name, t);
                made.insert(key, slot);
                slot
            }
        };
        plan.steps[i] = Step::MatMul { a: x, b: wt, out };
        rewritten += 1;
    }
    if rewritten > 0 {
        plan.drop_unread_constants();
    }
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(dims: Vec<i64>, v: &[f32]) -> TensorData {
        TensorData::from_f32(dims, v)
    }

    #[test]
    fn dequantizes_four_and_eight_bits() {
        // N = 2, K = 32 (one group), 4 bits: q[n, j] = (j + n) % 16.
        let mut bytes = Vec::new();
        for n in 0..2u32 {
            for j in (0..32u32).step_by(2) {
                let a = (j + n) % 16;
                let b = (j + 1 + n) % 16;
                bytes.push((a | (b << 4)) as u8);
            }
        }
        let w = TensorData::new(DataType::Uint32, vec![2, 4], bytes).unwrap();
        let s = f32s(vec![2, 1], &[0.5, 2.0]);
        let b = f32s(vec![2, 1], &[-1.0, 3.0]);
        let t = dequantize_affine_t(&w, &s, &b, 32, 4).unwrap();
        assert_eq!(t.dims, vec![32, 2]);
        let v = t.to_f64_vec().unwrap();
        for j in 0..32 {
            assert_eq!(v[j * 2], 0.5 * (j % 16) as f64 - 1.0);
            assert_eq!(v[j * 2 + 1], 2.0 * ((j + 1) % 16) as f64 + 3.0);
        }
        // 8 bits: one byte per value.
        let w =
            TensorData::new(DataType::Uint32, vec![1, 8], (0..32u8).collect::<Vec<_>>()).unwrap();
        let t = dequantize_affine_t(
            &w,
            &f32s(vec![1, 1], &[1.0]),
            &f32s(vec![1, 1], &[-128.0]),
            32,
            8,
        )
        .unwrap();
        assert_eq!(t.to_f64_vec().unwrap()[31], 31.0 - 128.0);
    }
}
