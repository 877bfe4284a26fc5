//! MLX element types.

use mlx_sys as sys;

/// An MLX element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// bool (one byte).
    Bool,
    /// u8.
    Uint8,
    /// u16.
    Uint16,
    /// u32.
    Uint32,
    /// u64.
    Uint64,
    /// i8.
    Int8,
    /// i16.
    Int16,
    /// i32.
    Int32,
    /// i64.
    Int64,
    /// IEEE half.
    Float16,
    /// f32.
    Float32,
    /// f64 (CPU only on most devices).
    Float64,
    /// bfloat16.
    Bfloat16,
    /// Complex of two f32.
    Complex64,
}

impl Dtype {
    /// The mlx-c enum value.
    pub fn to_raw(self) -> sys::mlx_dtype {
        use Dtype::*;
        match self {
            Bool => sys::MLX_BOOL,
            Uint8 => sys::MLX_UINT8,
            Uint16 => sys::MLX_UINT16,
            Uint32 => sys::MLX_UINT32,
            Uint64 => sys::MLX_UINT64,
            Int8 => sys::MLX_INT8,
            Int16 => sys::MLX_INT16,
            Int32 => sys::MLX_INT32,
            Int64 => sys::MLX_INT64,
            Float16 => sys::MLX_FLOAT16,
            Float32 => sys::MLX_FLOAT32,
            Float64 => sys::MLX_FLOAT64,
            Bfloat16 => sys::MLX_BFLOAT16,
            Complex64 => sys::MLX_COMPLEX64,
        }
    }

    /// The type for an mlx-c enum value.
    pub fn from_raw(raw: sys::mlx_dtype) -> Option<Dtype> {
        use Dtype::*;
        [
            Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, Float16, Float32,
            Float64, Bfloat16, Complex64,
        ]
        .into_iter()
        .find(|d| d.to_raw() == raw)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use Dtype::*;
        match self {
            Bool | Uint8 | Int8 => 1,
            Uint16 | Int16 | Float16 | Bfloat16 => 2,
            Uint32 | Int32 | Float32 => 4,
            Uint64 | Int64 | Float64 | Complex64 => 8,
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::Float16 | Dtype::Float32 | Dtype::Float64 | Dtype::Bfloat16
        )
    }
}

/// A Rust type with an MLX element type, for typed host copies.
pub trait Element: Copy + Default + 'static {
    /// Its MLX type.
    const DTYPE: Dtype;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: Dtype = Dtype::$d; })*
    };
}
element!(bool => Bool, u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64, i8 => Int8,
    i16 => Int16, i32 => Int32, i64 => Int64, f32 => Float32, f64 => Float64);
