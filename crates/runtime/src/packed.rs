//! The packed sub-byte element types (int4, uint4, int2, uint2) at the plan's boundary.
//!
//! ONNX packs them two or four to a byte, the first element in the lowest bits. MLX holds them
//! one per byte: int8 (signed, sign-extended) or uint8 arrays of the tensor's shape, which the
//! plan's Cast lowering reads and writes. Inputs and constants are unpacked on the way in,
//! outputs packed on the way out.

use mlx::Array;
use onnx_ir::DataType;

use crate::RuntimeError;
use crate::dtype::to_mlx;

/// An array of `shape` from an ONNX tensor's bytes (unpacking packed types).
pub(crate) fn array_from_bytes(
    bytes: &[u8],
    shape: &[i32],
    dtype: DataType,
) -> Result<Array, RuntimeError> {
    let Some(bits) = dtype.packed_bits() else {
        return Ok(Array::from_bytes(bytes, shape, to_mlx(dtype)?)?);
    };
    let n: usize = shape.iter().map(|&d| d.max(0) as usize).product();
    let values = unpack(dtype, bits, bytes, n)?;
    Ok(Array::from_bytes(&values, shape, to_mlx(dtype)?)?)
}

/// `n` values of `bits` each from `bytes`, one per byte (sign-extended for signed types).
pub(crate) fn unpack(
    dtype: DataType,
    bits: u32,
    bytes: &[u8],
    n: usize,
) -> Result<Vec<u8>, RuntimeError> {
    let per = (8 / bits) as usize;
    let need = n.div_ceil(per);
    if bytes.len() != need {
        return Err(RuntimeError(format!(
            "a {dtype} tensor of {n} elements needs {need} bytes, got {}",
            bytes.len()
        )));
    }
    let mask = (1u8 << bits) - 1;
    let sign = 1u8 << (bits - 1);
    let signed = matches!(dtype, DataType::Int4 | DataType::Int2);
    Ok((0..n)
        .map(|i| {
            let v = (bytes[i / per] >> ((i % per) as u32 * bits)) & mask;
            if signed {
                // sign-extend: (v ^ sign) - sign, in two's complement
                ((v ^ sign) as i8 - sign as i8) as u8
            } else {
                v
            }
        })
        .collect())
}

/// Packs one-per-byte values (the low `bits` of each) `8 / bits` to a byte.
pub(crate) fn pack(bits: u32, values: &[u8]) -> Vec<u8> {
    let per = (8 / bits) as usize;
    let mask = (1u8 << bits) - 1;
    let mut out = vec![0u8; values.len().div_ceil(per)];
    for (i, v) in values.iter().enumerate() {
        out[i / per] |= (v & mask) << ((i % per) as u32 * bits);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int4_round_trips() {
        // -8..=7 then one more: an odd count leaves the last high nibble zero
        let values: Vec<u8> = (-8i8..=7).chain([3]).map(|v| v as u8).collect();
        let packed = pack(4, &values);
        assert_eq!(packed.len(), 9);
        assert_eq!(packed[0], 0x98); // -8 low (0x8), -7 high (0x9)
        assert_eq!(packed[8], 0x03);
        assert_eq!(unpack(DataType::Int4, 4, &packed, 17).unwrap(), values);
        assert!(unpack(DataType::Int4, 4, &packed, 19).is_err());
    }

    #[test]
    fn two_bit_types() {
        let u: Vec<u8> = vec![0, 1, 2, 3, 3];
        let packed = pack(2, &u);
        assert_eq!(packed, vec![0b11_10_01_00, 0b11]);
        assert_eq!(unpack(DataType::Uint2, 2, &packed, 5).unwrap(), u);
        let s = unpack(DataType::Int2, 2, &packed, 5).unwrap();
        assert_eq!(
            s.iter().map(|&v| v as i8).collect::<Vec<_>>(),
            vec![0, 1, -2, -1, -1]
        );
        assert_eq!(pack(2, &s), packed);
    }

    #[test]
    fn plain_types_pass_through() {
        crate::init().unwrap();
        let a = array_from_bytes(&[1, 2, 3], &[3], DataType::Uint8).unwrap();
        assert_eq!(a.to_vec::<u8>().unwrap(), vec![1, 2, 3]);
        let a = array_from_bytes(&[0xF8], &[2], DataType::Int4).unwrap();
        assert_eq!(a.to_vec::<i8>().unwrap(), vec![-8, -1]);
    }
}
