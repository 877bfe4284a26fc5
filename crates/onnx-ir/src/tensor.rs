//! Constant tensor data (initializers, tensor attributes).

use std::sync::Arc;

use crate::DataType;

/// An immutable dense tensor: element type, dims and little-endian bytes.
///
/// The bytes are shared (`Arc`), so cloning is cheap. A string tensor
/// ([`DataType::String`]) holds its elements in row-major order, each as its byte length (a
/// little-endian `u64`) followed by its bytes (UTF-8 by ONNX's convention, not checked here):
/// make one with [`TensorData::from_strings`] and read it with [`TensorData::strings`].
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TensorData {
    /// Element type.
    pub dtype: DataType,
    /// Dimensions; empty for a scalar.
    pub dims: Vec<i64>,
    /// Raw little-endian element bytes, `numel * size_in_bytes` long for fixed-size types;
    /// length-prefixed elements for strings (see [`TensorData`]).
    pub bytes: Arc<[u8]>,
}

impl std::fmt::Debug for TensorData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorData")
            .field("dtype", &self.dtype)
            .field("dims", &self.dims)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl TensorData {
    /// A tensor from raw bytes; fails when the byte count disagrees with dtype and dims (for
    /// strings: when the bytes are not `numel` length-prefixed elements).
    pub fn new(
        dtype: DataType,
        dims: Vec<i64>,
        bytes: impl Into<Arc<[u8]>>,
    ) -> Result<Self, String> {
        let bytes = bytes.into();
        let t = TensorData { dtype, dims, bytes };
        if t.dims.iter().any(|&d| d < 0) {
            return Err(format!("tensor has a negative dim: {:?}", t.dims));
        }
        if let Some(size) = dtype.size_in_bytes() {
            let expected = t.numel().checked_mul(size as u64);
            if expected != Some(t.bytes.len() as u64) {
                return Err(format!(
                    "tensor of {dtype} {:?} needs {:?} bytes, has {}",
                    t.dims,
                    expected,
                    t.bytes.len()
                ));
            }
        }
        if dtype == DataType::String {
            let n = decode_strings(&t.bytes)?.len() as u64;
            if n != t.numel() {
                return Err(format!(
                    "string tensor {:?} needs {} elements, has {n}",
                    t.dims,
                    t.numel()
                ));
            }
        }
        Ok(t)
    }

    /// A string tensor of `values` (row-major; each element's bytes as they are); fails when
    /// the count disagrees with `dims`.
    pub fn from_strings<S: AsRef<[u8]>>(dims: Vec<i64>, values: &[S]) -> Result<Self, String> {
        let total: usize = values.iter().map(|v| v.as_ref().len() + 8).sum();
        let mut bytes = Vec::with_capacity(total);
        for v in values {
            let v = v.as_ref();
            bytes.extend_from_slice(&(v.len() as u64).to_le_bytes());
            bytes.extend_from_slice(v);
        }
        let t = TensorData {
            dtype: DataType::String,
            dims,
            bytes: bytes.into(),
        };
        if t.dims.iter().any(|&d| d < 0) {
            return Err(format!("tensor has a negative dim: {:?}", t.dims));
        }
        if values.len() as u64 != t.numel() {
            return Err(format!(
                "string tensor {:?} needs {} elements, has {}",
                t.dims,
                t.numel(),
                values.len()
            ));
        }
        Ok(t)
    }

    /// The elements of a string tensor, row-major; `None` for other types (and for bytes that
    /// are not length-prefixed elements, which [`TensorData::new`] refuses).
    pub fn strings(&self) -> Option<Vec<&[u8]>> {
        if self.dtype != DataType::String {
            return None;
        }
        decode_strings(&self.bytes).ok()
    }

    /// A tensor of little-endian `i64` values.
    pub fn from_i64(dims: Vec<i64>, values: &[i64]) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData {
            dtype: DataType::Int64,
            dims,
            bytes: bytes.into(),
        }
    }

    /// A tensor of little-endian `f32` values.
    pub fn from_f32(dims: Vec<i64>, values: &[f32]) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorData {
            dtype: DataType::Float,
            dims,
            bytes: bytes.into(),
        }
    }

    /// Number of elements (1 for a scalar), saturating on overflow.
    pub fn numel(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d.max(0) as u64))
            .unwrap_or(u64::MAX)
    }

    /// The values as `i64`, for integer (and bool) tensors; `None` for other types.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        let b = &self.bytes;
        Some(match self.dtype {
            DataType::Int64 => le_values(b, i64::from_le_bytes),
            DataType::Int32 => le_values(b, |c| i32::from_le_bytes(c) as i64),
            DataType::Uint32 => le_values(b, |c| u32::from_le_bytes(c) as i64),
            DataType::Int16 => le_values(b, |c| i16::from_le_bytes(c) as i64),
            DataType::Uint16 => le_values(b, |c| u16::from_le_bytes(c) as i64),
            DataType::Int8 => b.iter().map(|&v| v as i8 as i64).collect(),
            DataType::Uint8 | DataType::Bool => b.iter().map(|&v| v as i64).collect(),
            _ => return None,
        })
    }

    /// The values as `f64`, for float and integer tensors; `None` for other types.
    pub fn to_f64_vec(&self) -> Option<Vec<f64>> {
        let b = &self.bytes;
        Some(match self.dtype {
            DataType::Float => le_values(b, |c| f32::from_le_bytes(c) as f64),
            DataType::Double => le_values(b, f64::from_le_bytes),
            DataType::Float16 => le_values(b, |c| f16_to_f64(u16::from_le_bytes(c))),
            DataType::BFloat16 => le_values(b, |c| {
                f32::from_bits((u16::from_le_bytes(c) as u32) << 16) as f64
            }),
            _ => self.to_i64_vec()?.into_iter().map(|v| v as f64).collect(),
        })
    }
}

/// Splits the bytes of a string tensor into its elements (each a little-endian `u64` length
/// followed by that many bytes; see [`TensorData`]); fails on bytes of another form.
pub fn decode_strings(mut bytes: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Some((len, rest)) = bytes.split_first_chunk::<8>() else {
            return Err("string tensor bytes end inside a length prefix".into());
        };
        let len = usize::try_from(u64::from_le_bytes(*len))
            .ok()
            .filter(|&l| l <= rest.len())
            .ok_or("a string element is longer than the tensor's bytes")?;
        let (s, rest) = rest.split_at(len);
        out.push(s);
        bytes = rest;
    }
    Ok(out)
}

fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f64;
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 if frac == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        _ => sign * (1.0 + frac / 1024.0) * 2f64.powi(exp - 15),
    }
}

/// The `N`-byte little-endian values of `bytes`, each decoded by `decode`.
fn le_values<const N: usize, T>(bytes: &[u8], decode: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| decode(c.try_into().expect("chunks_exact gives N bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_count_is_checked() {
        assert!(TensorData::new(DataType::Float, vec![2, 2], vec![0u8; 16]).is_ok());
        assert!(TensorData::new(DataType::Float, vec![2, 2], vec![0u8; 15]).is_err());
        assert!(TensorData::new(DataType::Float, vec![-1], vec![]).is_err());
    }

    #[test]
    fn strings_round_trip() {
        let t = TensorData::from_strings(vec![2, 2], &["a", "", "héllo", "x\0y"]).unwrap();
        assert_eq!(t.numel(), 4);
        let s = t.strings().unwrap();
        assert_eq!(s, vec![&b"a"[..], b"", "héllo".as_bytes(), b"x\0y"]);
        let again = TensorData::new(DataType::String, vec![4], t.bytes.to_vec()).unwrap();
        assert_eq!(again.strings().unwrap().len(), 4);
        assert!(TensorData::new(DataType::String, vec![3], t.bytes.to_vec()).is_err());
        assert!(TensorData::new(DataType::String, vec![1], vec![5u8, 0, 0]).is_err());
        assert!(TensorData::new(DataType::String, vec![1], vec![9, 0, 0, 0, 0, 0, 0, 0]).is_err());
        let empty = TensorData::from_strings::<&str>(vec![0, 3], &[]).unwrap();
        assert_eq!(empty.strings().unwrap().len(), 0);
        assert!(TensorData::from_strings(vec![2], &["a"]).is_err());
        assert_eq!(TensorData::from_f32(vec![1], &[1.0]).strings(), None);
    }

    #[test]
    fn value_views() {
        let t = TensorData::from_i64(vec![3], &[1, -2, 3]);
        assert_eq!(t.to_i64_vec().unwrap(), vec![1, -2, 3]);
        assert_eq!(t.to_f64_vec().unwrap(), vec![1.0, -2.0, 3.0]);
        let h = TensorData::new(DataType::Float16, vec![2], vec![0x00, 0x3c, 0x00, 0xc0]).unwrap();
        assert_eq!(h.to_f64_vec().unwrap(), vec![1.0, -2.0]);
        assert_eq!(TensorData::from_f32(vec![], &[1.5]).numel(), 1);
    }
}
