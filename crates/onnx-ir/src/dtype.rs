//! ONNX tensor element types.

/// An ONNX tensor element type; the discriminant is ONNX's `TensorProto.DataType` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(i32)]
pub enum DataType {
    /// 32-bit IEEE float.
    Float = 1,
    /// Unsigned 8-bit integer.
    Uint8 = 2,
    /// Signed 8-bit integer.
    Int8 = 3,
    /// Unsigned 16-bit integer.
    Uint16 = 4,
    /// Signed 16-bit integer.
    Int16 = 5,
    /// Signed 32-bit integer.
    Int32 = 6,
    /// Signed 64-bit integer.
    Int64 = 7,
    /// Variable-length UTF-8 string.
    String = 8,
    /// Boolean, one byte per element.
    Bool = 9,
    /// 16-bit IEEE float.
    Float16 = 10,
    /// 64-bit IEEE float.
    Double = 11,
    /// Unsigned 32-bit integer.
    Uint32 = 12,
    /// Unsigned 64-bit integer.
    Uint64 = 13,
    /// Complex with two 32-bit floats.
    Complex64 = 14,
    /// Complex with two 64-bit floats.
    Complex128 = 15,
    /// bfloat16.
    BFloat16 = 16,
    /// float8 e4m3fn.
    Float8E4M3FN = 17,
    /// float8 e4m3fnuz.
    Float8E4M3FNUZ = 18,
    /// float8 e5m2.
    Float8E5M2 = 19,
    /// float8 e5m2fnuz.
    Float8E5M2FNUZ = 20,
    /// Unsigned 4-bit integer, packed two per byte.
    Uint4 = 21,
    /// Signed 4-bit integer, packed two per byte.
    Int4 = 22,
    /// float4 e2m1, packed two per byte.
    Float4E2M1 = 23,
    /// float8 e8m0 (a power of two: exponent bits only, no sign).
    Float8E8M0 = 24,
    /// Unsigned 2-bit integer, packed four per byte.
    Uint2 = 25,
    /// Signed 2-bit integer, packed four per byte.
    Int2 = 26,
}

impl DataType {
    /// Every element type, in discriminant order.
    pub const ALL: [DataType; 26] = [
        DataType::Float,
        DataType::Uint8,
        DataType::Int8,
        DataType::Uint16,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::String,
        DataType::Bool,
        DataType::Float16,
        DataType::Double,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Complex64,
        DataType::Complex128,
        DataType::BFloat16,
        DataType::Float8E4M3FN,
        DataType::Float8E4M3FNUZ,
        DataType::Float8E5M2,
        DataType::Float8E5M2FNUZ,
        DataType::Uint4,
        DataType::Int4,
        DataType::Float4E2M1,
        DataType::Float8E8M0,
        DataType::Uint2,
        DataType::Int2,
    ];

    /// The type for an ONNX `TensorProto.DataType` value, if known.
    pub fn from_onnx(value: i32) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| *t as i32 == value)
    }

    /// The ONNX `TensorProto.DataType` value.
    pub fn to_onnx(self) -> i32 {
        self as i32
    }

    /// Bytes per element for fixed-size types; `None` for strings and sub-byte types.
    pub fn size_in_bytes(self) -> Option<usize> {
        use DataType::*;
        match self {
            Bool | Uint8 | Int8 | Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2 | Float8E5M2FNUZ
            | Float8E8M0 => Some(1),
            Uint16 | Int16 | Float16 | BFloat16 => Some(2),
            Float | Int32 | Uint32 => Some(4),
            Double | Int64 | Uint64 | Complex64 => Some(8),
            Complex128 => Some(16),
            String | Uint4 | Int4 | Float4E2M1 | Uint2 | Int2 => None,
        }
    }

    /// Bits per element of the packed sub-byte types (several elements per byte, the first in
    /// the lowest bits); `None` for the others.
    pub fn packed_bits(self) -> Option<u32> {
        use DataType::*;
        match self {
            Uint4 | Int4 | Float4E2M1 => Some(4),
            Uint2 | Int2 => Some(2),
            _ => None,
        }
    }

    /// True for the floating-point types (not float8/float4).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float | DataType::Float16 | DataType::BFloat16 | DataType::Double
        )
    }

    /// True for signed and unsigned integer types of 8 to 64 bits.
    pub fn is_integer(self) -> bool {
        use DataType::*;
        matches!(
            self,
            Uint8 | Int8 | Uint16 | Int16 | Int32 | Int64 | Uint32 | Uint64
        )
    }

    /// True for signed integer types.
    pub fn is_signed_integer(self) -> bool {
        matches!(
            self,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
        )
    }

    /// ONNX's lower-case name of the type (`float`, `int64`, ...).
    pub fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Float => "float",
            Uint8 => "uint8",
            Int8 => "int8",
            Uint16 => "uint16",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            String => "string",
            Bool => "bool",
            Float16 => "float16",
            Double => "double",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Complex64 => "complex64",
            Complex128 => "complex128",
            BFloat16 => "bfloat16",
            Float8E4M3FN => "float8e4m3fn",
            Float8E4M3FNUZ => "float8e4m3fnuz",
            Float8E5M2 => "float8e5m2",
            Float8E5M2FNUZ => "float8e5m2fnuz",
            Uint4 => "uint4",
            Int4 => "int4",
            Float4E2M1 => "float4e2m1",
            Float8E8M0 => "float8e8m0",
            Uint2 => "uint2",
            Int2 => "int2",
        }
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onnx_values_round_trip() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_onnx(t.to_onnx()), Some(t));
        }
        assert_eq!(DataType::from_onnx(0), None);
        assert_eq!(DataType::from_onnx(99), None);
        assert_eq!(DataType::Float.to_onnx(), 1);
        assert_eq!(DataType::BFloat16.to_onnx(), 16);
        assert_eq!(DataType::from_onnx(26), Some(DataType::Int2));
    }

    #[test]
    fn sizes() {
        assert_eq!(DataType::Float.size_in_bytes(), Some(4));
        assert_eq!(DataType::Bool.size_in_bytes(), Some(1));
        assert_eq!(DataType::Int64.size_in_bytes(), Some(8));
        assert_eq!(DataType::String.size_in_bytes(), None);
    }
}
