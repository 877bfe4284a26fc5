//! ONNX element types as MLX dtypes.

use mlx::Dtype;
use onnx_ir::DataType;

use crate::RuntimeError;

/// The MLX dtype holding an ONNX element type, when MLX has one.
///
/// The float8 types have no MLX dtype: their one-byte codes are held as uint8 (only the plan's
/// float8 Cast lowering reads or writes them, with integer ops); float4 e2m1 codes are held
/// one per byte as uint8 (see `packed`).
pub fn to_mlx(t: DataType) -> Result<Dtype, RuntimeError> {
    Ok(match t {
        DataType::Float8E4M3FN
        | DataType::Float8E4M3FNUZ
        | DataType::Float8E5M2
        | DataType::Float8E5M2FNUZ
        | DataType::Float8E8M0
        | DataType::Float4E2M1 => Dtype::Uint8,
        // packed sub-byte integers, held one per byte (see `packed`)
        DataType::Int4 | DataType::Int2 => Dtype::Int8,
        DataType::Uint4 | DataType::Uint2 => Dtype::Uint8,
        DataType::Float => Dtype::Float32,
        DataType::Float16 => Dtype::Float16,
        DataType::BFloat16 => Dtype::Bfloat16,
        DataType::Double => Dtype::Float64,
        DataType::Bool => Dtype::Bool,
        DataType::Int8 => Dtype::Int8,
        DataType::Int16 => Dtype::Int16,
        DataType::Int32 => Dtype::Int32,
        DataType::Int64 => Dtype::Int64,
        DataType::Uint8 => Dtype::Uint8,
        DataType::Uint16 => Dtype::Uint16,
        DataType::Uint32 => Dtype::Uint32,
        DataType::Uint64 => Dtype::Uint64,
        DataType::Complex64 => Dtype::Complex64,
        other => return Err(RuntimeError(format!("MLX has no {other} dtype"))),
    })
}

/// The ONNX element type of an MLX dtype.
pub fn to_onnx(t: Dtype) -> Option<DataType> {
    Some(match t {
        Dtype::Float32 => DataType::Float,
        Dtype::Float16 => DataType::Float16,
        Dtype::Bfloat16 => DataType::BFloat16,
        Dtype::Float64 => DataType::Double,
        Dtype::Bool => DataType::Bool,
        Dtype::Int8 => DataType::Int8,
        Dtype::Int16 => DataType::Int16,
        Dtype::Int32 => DataType::Int32,
        Dtype::Int64 => DataType::Int64,
        Dtype::Uint8 => DataType::Uint8,
        Dtype::Uint16 => DataType::Uint16,
        Dtype::Uint32 => DataType::Uint32,
        Dtype::Uint64 => DataType::Uint64,
        Dtype::Complex64 => DataType::Complex64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_types_round_trip() {
        for t in DataType::ALL {
            if let Ok(d) = to_mlx(t) {
                if t.packed_bits().is_some() {
                    assert_eq!(d.size(), 1);
                    continue;
                }
                assert_eq!(Some(d.size()), t.size_in_bytes());
                if !matches!(
                    t,
                    DataType::Float8E4M3FN
                        | DataType::Float8E4M3FNUZ
                        | DataType::Float8E5M2
                        | DataType::Float8E5M2FNUZ
                        | DataType::Float8E8M0
                ) {
                    assert_eq!(to_onnx(d), Some(t));
                }
            }
        }
        // float8 codes are held as uint8
        assert_eq!(to_mlx(DataType::Float8E5M2), Ok(Dtype::Uint8));
        assert!(to_mlx(DataType::String).is_err());
    }
}
