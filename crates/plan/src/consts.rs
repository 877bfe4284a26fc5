//! Host-side constant tensors: scalars of any claimed dtype, value conversion, layout changes
//! of initializers done once at plan time.

use onnx_ir::{DataType, TensorData};

/// f32 -> IEEE half bits, round to nearest even.
pub fn f32_to_f16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let mant = x & 0x7f_ffff;
    if exp == 0xff {
        // Inf or NaN (keep a quiet NaN).
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal or zero.
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1 << shift) - 1);
        let mut r = m >> shift;
        if rem > half || (rem == half && (r & 1) == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && (r & 1) == 1) {
        r += 1; // may carry into the exponent, which is still correct (up to inf)
    }
    sign | r as u16
}

/// f32 -> bfloat16 bits, round to nearest even.
pub fn f32_to_bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    if v.is_nan() {
        return ((x >> 16) as u16) | 0x40;
    }
    let lsb = (x >> 16) & 1;
    ((x + 0x7fff + lsb) >> 16) as u16
}

/// A tensor of `dtype` holding `values` converted from `f64` (integers truncate toward zero
/// and saturate, bools are `v != 0`). `None` for dtypes without a host encoding here.
pub fn tensor_from_f64(dtype: DataType, dims: Vec<i64>, values: &[f64]) -> Option<TensorData> {
    let mut bytes: Vec<u8> = Vec::with_capacity(values.len() * dtype.size_in_bytes()?);
    for &v in values {
        match dtype {
            DataType::Float => bytes.extend((v as f32).to_le_bytes()),
            DataType::Double => bytes.extend(v.to_le_bytes()),
            DataType::Float16 => bytes.extend(f32_to_f16_bits(v as f32).to_le_bytes()),
            DataType::BFloat16 => bytes.extend(f32_to_bf16_bits(v as f32).to_le_bytes()),
            DataType::Bool => bytes.push((v != 0.0) as u8),
            DataType::Int8 => bytes.extend((v as i8).to_le_bytes()),
            DataType::Uint8 => bytes.extend((v as u8).to_le_bytes()),
            DataType::Int16 => bytes.extend((v as i16).to_le_bytes()),
            DataType::Uint16 => bytes.extend((v as u16).to_le_bytes()),
            DataType::Int32 => bytes.extend((v as i32).to_le_bytes()),
            DataType::Uint32 => bytes.extend((v as u32).to_le_bytes()),
            DataType::Int64 => bytes.extend((v as i64).to_le_bytes()),
            DataType::Uint64 => bytes.extend((v as u64).to_le_bytes()),
            _ => return None,
        }
    }
    TensorData::new(dtype, dims, bytes).ok()
}

/// A tensor of an integer or bool `dtype` holding `values` (wrapping like a C cast).
pub fn tensor_from_i64(dtype: DataType, dims: Vec<i64>, values: &[i64]) -> Option<TensorData> {
    let mut bytes: Vec<u8> = Vec::with_capacity(values.len() * dtype.size_in_bytes()?);
    for &v in values {
        match dtype {
            DataType::Bool => bytes.push((v != 0) as u8),
            DataType::Int8 => bytes.extend((v as i8).to_le_bytes()),
            DataType::Uint8 => bytes.extend((v as u8).to_le_bytes()),
            DataType::Int16 => bytes.extend((v as i16).to_le_bytes()),
            DataType::Uint16 => bytes.extend((v as u16).to_le_bytes()),
            DataType::Int32 => bytes.extend((v as i32).to_le_bytes()),
            DataType::Uint32 => bytes.extend((v as u32).to_le_bytes()),
            DataType::Int64 => bytes.extend(v.to_le_bytes()),
            DataType::Uint64 => bytes.extend((v as u64).to_le_bytes()),
            d if d.is_float() => {
                return tensor_from_f64(
                    dtype,
                    dims,
                    &values.iter().map(|&v| v as f64).collect::<Vec<_>>(),
                );
            }
            _ => return None,
        }
    }
    TensorData::new(dtype, dims, bytes).ok()
}

/// A scalar (rank-0) tensor of `dtype`.
pub fn scalar(dtype: DataType, v: f64) -> Option<TensorData> {
    tensor_from_f64(dtype, vec![], &[v])
}

/// Transposes a constant tensor (any fixed-size dtype) by `perm`.
pub fn transpose(t: &TensorData, perm: &[usize]) -> Option<TensorData> {
    let size = t.dtype.size_in_bytes()?;
    let rank = t.dims.len();
    if perm.len() != rank {
        return None;
    }
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let mut in_strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * dims[i + 1];
    }
    let numel: usize = dims.iter().product();
    let mut out = vec![0u8; numel * size];
    let mut idx = vec![0usize; rank];
    for o in 0..numel {
        let src: usize = (0..rank).map(|i| idx[i] * in_strides[perm[i]]).sum();
        out[o * size..(o + 1) * size].copy_from_slice(&t.bytes[src * size..(src + 1) * size]);
        for i in (0..rank).rev() {
            idx[i] += 1;
            if idx[i] < out_dims[i] {
                break;
            }
            idx[i] = 0;
        }
    }
    TensorData::new(t.dtype, out_dims.iter().map(|&d| d as i64).collect(), out).ok()
}

/// The same bytes under new dims (element count must match).
pub fn reshaped(t: &TensorData, dims: Vec<i64>) -> Option<TensorData> {
    TensorData::new(t.dtype, dims, t.bytes.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(1e6), 0x7c00);
        assert_eq!(f32_to_f16_bits(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f32_to_f16_bits(0.5f32.powi(24)), 0x0001);
        assert_eq!(f32_to_f16_bits(0.0), 0);
        assert!(f32_to_f16_bits(f32::NAN) & 0x3ff != 0);
        // 1 + 2^-11 is a tie between 1 and 1+2^-10: rounds to even (1.0).
        assert_eq!(f32_to_f16_bits(1.0 + 0.5f32.powi(11)), 0x3c00);
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        assert_eq!(f32_to_bf16_bits(-0.5), 0xbf00);
        let t = scalar(DataType::Float16, 0.5).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![0.5]);
        let t = scalar(DataType::BFloat16, 3.0).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![3.0]);
    }

    #[test]
    fn transposes_constants() {
        let t = TensorData::from_i64(vec![2, 3], &[1, 2, 3, 4, 5, 6]);
        let tt = transpose(&t, &[1, 0]).unwrap();
        assert_eq!(tt.dims, vec![3, 2]);
        assert_eq!(tt.to_i64_vec().unwrap(), vec![1, 4, 2, 5, 3, 6]);
        let t = TensorData::from_i64(vec![1, 2, 2, 1], &[1, 2, 3, 4]);
        let tt = transpose(&t, &[0, 2, 3, 1]).unwrap();
        assert_eq!(tt.dims, vec![1, 2, 1, 2]);
        assert_eq!(tt.to_i64_vec().unwrap(), vec![1, 3, 2, 4]);
    }
}
