//! Values computed on the host from small inputs: ONNX window functions (as ONNX Runtime
//! evaluates them, in double precision) and `Unique`.

use std::cmp::Ordering;

use onnx_ir::{DataType, TensorData};

/// A cosine-sum window (the `cosine_window` host kernel, and windows folded at plan time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WindowKind {
    /// `HannWindow`.
    Hann,
    /// `HammingWindow`.
    Hamming,
    /// `BlackmanWindow`.
    Blackman,
}

impl WindowKind {
    /// `(a0, a1, a2)` as ORT computes them in float32.
    fn coefficients(self) -> (f32, f32, f32) {
        match self {
            WindowKind::Hann => (0.5, 0.5, 0.0),
            WindowKind::Hamming => {
                let a0 = 25.0f32 / 46.0f32;
                (a0, 1.0 - a0, 0.0)
            }
            WindowKind::Blackman => {
                let a2 = 0.16f32 / 2.0;
                (0.5 - a2, 0.5, a2)
            }
        }
    }
}

/// The window of `size` samples as ONNX Runtime computes it: in double precision,
/// `w[n] = a0 - a1 cos(t n) + a2 cos(2 t n)`, `t = 2 pi / (periodic ? N : N - 1)` (float32
/// coefficients), then converted to `dtype` (truncating for integer types).
pub fn cosine_window(
    kind: WindowKind,
    size: i64,
    periodic: bool,
    dtype: DataType,
) -> Result<TensorData, String> {
    if size < 0 {
        return Err(format!("window size {size} is negative"));
    }
    // Computed on the host from a constant or a fed value: a hostile size must be an error,
    // not an allocation failure (which aborts the process).
    const MAX_WINDOW: i64 = 1 << 24;
    if size > MAX_WINDOW {
        return Err(format!(
            "window size {size} is larger than the {MAX_WINDOW} samples computed on the host"
        ));
    }
    let (a0, a1, a2) = kind.coefficients();
    let tau = 2.0 * std::f64::consts::PI;
    let denominator = if periodic { size } else { size - 1 };
    let step = tau / denominator as f64;
    let values: Vec<f64> = (0..size)
        .map(|i| {
            let a2_part = if a2 == 0.0 {
                0.0
            } else {
                a2 as f64 * (2.0 * step * i as f64).cos()
            };
            a0 as f64 - (a1 as f64 * (step * i as f64).cos()) + a2_part
        })
        .collect();
    let t = if dtype.is_float() {
        crate::consts::tensor_from_f64(dtype, vec![size], &values)
    } else {
        let ints: Vec<i64> = values.iter().map(|&v| v as i64).collect();
        crate::consts::tensor_from_i64(dtype, vec![size], &ints)
    };
    t.ok_or_else(|| format!("cannot build a {dtype} window"))
}

/// One element read on the host, compared as ORT's `std::map` would (`-0 == 0`).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HostValue {
    /// An integer (or bool) element.
    Int(i64),
    /// A float element.
    Float(f64),
}

fn cmp_values(a: &[HostValue], b: &[HostValue]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (HostValue::Int(x), HostValue::Int(y)) => x.cmp(y),
            (HostValue::Float(x), HostValue::Float(y)) => {
                // -0 and 0 are equal; NaNs sort last, equal to each other.
                let n = |v: f64| if v == 0.0 { 0.0 } else { v };
                n(*x).total_cmp(&n(*y))
            }
            _ => Ordering::Equal,
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// The four outputs of ONNX `Unique` (Y, indices, inverse_indices, counts).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UniqueResult {
    /// The unique elements or slices, of the input's dtype.
    pub y: TensorData,
    /// The first occurrence of each (int64).
    pub indices: TensorData,
    /// For each input element or slice, its position in `y` (int64).
    pub inverse: TensorData,
    /// How often each occurs (int64).
    pub counts: TensorData,
}

/// ONNX `Unique` of a tensor of `shape` and `dtype` whose flattened values are `values`: over
/// the flattened tensor (`axis = None`) or the slices along `axis`; sorted ascending
/// (lexicographically for slices) or in order of first occurrence.
pub fn unique(
    dtype: DataType,
    shape: &[i64],
    values: &[HostValue],
    axis: Option<usize>,
    sorted: bool,
) -> Result<UniqueResult, String> {
    let total: i64 = shape.iter().product();
    if total as usize != values.len() {
        return Err(format!("Unique read {} values for {shape:?}", values.len()));
    }
    // Slices: `outer` groups of `n` slices of `inner` elements.
    let (outer, n, inner) = match axis {
        None => (1usize, values.len(), 1usize),
        Some(a) => {
            if a >= shape.len() {
                return Err(format!("Unique axis {a} is out of range for {shape:?}"));
            }
            let outer: i64 = shape[..a].iter().product();
            let inner: i64 = shape[a + 1..].iter().product();
            (outer as usize, shape[a] as usize, inner as usize)
        }
    };
    let slice = |k: usize| -> Vec<HostValue> {
        let mut v = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            let base = (o * n + k) * inner;
            v.extend_from_slice(&values[base..base + inner]);
        }
        v
    };
    let slices: Vec<Vec<HostValue>> = (0..n).map(slice).collect();
    // Unique slices in order of first occurrence, with counts.
    let mut firsts: Vec<usize> = Vec::new();
    let mut inverse_first: Vec<usize> = Vec::with_capacity(n);
    let mut counts: Vec<i64> = Vec::new();
    let mut order: Vec<usize> = Vec::new(); // indices into firsts, sorted by value
    for k in 0..n {
        let pos = order.binary_search_by(|&u| cmp_values(&slices[firsts[u]], &slices[k]));
        match pos {
            Ok(p) => {
                let u = order[p];
                counts[u] += 1;
                inverse_first.push(u);
            }
            Err(p) => {
                let u = firsts.len();
                firsts.push(k);
                counts.push(1);
                order.insert(p, u);
                inverse_first.push(u);
            }
        }
    }
    // Output order: sorted by value, or by first occurrence.
    let out_order: Vec<usize> = if sorted {
        order
    } else {
        (0..firsts.len()).collect()
    };
    let mut rank_of = vec![0i64; firsts.len()];
    for (r, &u) in out_order.iter().enumerate() {
        rank_of[u] = r as i64;
    }
    let m = out_order.len();
    let indices: Vec<i64> = out_order.iter().map(|&u| firsts[u] as i64).collect();
    let cnt: Vec<i64> = out_order.iter().map(|&u| counts[u]).collect();
    let inverse: Vec<i64> = inverse_first.iter().map(|&u| rank_of[u]).collect();
    // Y: the chosen slices put back along the axis.
    let mut y_vals: Vec<HostValue> = Vec::with_capacity(outer * m * inner);
    for o in 0..outer {
        for &u in &out_order {
            let k = firsts[u];
            y_vals.extend_from_slice(&slices[k][o * inner..(o + 1) * inner]);
        }
    }
    let y_shape: Vec<i64> = match axis {
        None => vec![m as i64],
        Some(a) => {
            let mut s = shape.to_vec();
            s[a] = m as i64;
            s
        }
    };
    let y = if dtype.is_float() {
        let f: Vec<f64> = y_vals
            .iter()
            .map(|v| match v {
                HostValue::Float(x) => *x,
                HostValue::Int(x) => *x as f64,
            })
            .collect();
        crate::consts::tensor_from_f64(dtype, y_shape, &f)
    } else {
        let i: Vec<i64> = y_vals
            .iter()
            .map(|v| match v {
                HostValue::Int(x) => *x,
                HostValue::Float(x) => *x as i64,
            })
            .collect();
        crate::consts::tensor_from_i64(dtype, y_shape, &i)
    }
    .ok_or_else(|| format!("cannot build a {dtype} Unique output"))?;
    let vec1 = |v: Vec<i64>| TensorData::from_i64(vec![v.len() as i64], &v);
    Ok(UniqueResult {
        y,
        indices: vec1(indices),
        inverse: vec1(inverse),
        counts: vec1(cnt),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Vec<HostValue> {
        v.iter().map(|&x| HostValue::Int(x)).collect()
    }

    #[test]
    fn unique_sorted_and_unsorted() {
        let x = ints(&[2, 1, 1, 3, 4, 3]);
        let r = unique(DataType::Int64, &[6], &x, None, true).unwrap();
        assert_eq!(r.y.to_i64_vec().unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(r.indices.to_i64_vec().unwrap(), vec![1, 0, 3, 4]);
        assert_eq!(r.inverse.to_i64_vec().unwrap(), vec![1, 0, 0, 2, 3, 2]);
        assert_eq!(r.counts.to_i64_vec().unwrap(), vec![2, 1, 2, 1]);
        let r = unique(DataType::Int64, &[6], &x, None, false).unwrap();
        assert_eq!(r.y.to_i64_vec().unwrap(), vec![2, 1, 3, 4]);
        assert_eq!(r.indices.to_i64_vec().unwrap(), vec![0, 1, 3, 4]);
        assert_eq!(r.inverse.to_i64_vec().unwrap(), vec![0, 1, 1, 2, 3, 2]);
    }

    #[test]
    fn unique_slices_along_an_axis() {
        // [[1, 0, 0], [1, 0, 0], [2, 3, 4]] along axis 0: rows [1,0,0] x2, [2,3,4].
        let x = ints(&[1, 0, 0, 1, 0, 0, 2, 3, 4]);
        let r = unique(DataType::Int32, &[3, 3], &x, Some(0), true).unwrap();
        assert_eq!(r.y.dims, vec![2, 3]);
        assert_eq!(r.y.to_i64_vec().unwrap(), vec![1, 0, 0, 2, 3, 4]);
        assert_eq!(r.counts.to_i64_vec().unwrap(), vec![2, 1]);
        // Along axis 1: columns [1,1,2], [0,0,3], [0,0,4]; sorted: [0,0,3] < [0,0,4] < [1,1,2].
        let r = unique(DataType::Int32, &[3, 3], &x, Some(1), true).unwrap();
        assert_eq!(r.y.to_i64_vec().unwrap(), vec![0, 0, 1, 0, 0, 1, 3, 4, 2]);
        assert_eq!(r.indices.to_i64_vec().unwrap(), vec![1, 2, 0]);
        assert_eq!(r.inverse.to_i64_vec().unwrap(), vec![2, 0, 1]);
    }

    #[test]
    fn unique_floats_treat_signed_zeros_as_equal() {
        let x: Vec<HostValue> = [0.0, -0.0, 1.5, -2.0]
            .iter()
            .map(|&v| HostValue::Float(v))
            .collect();
        let r = unique(DataType::Float, &[4], &x, None, true).unwrap();
        assert_eq!(r.y.to_f64_vec().unwrap(), vec![-2.0, 0.0, 1.5]);
        assert_eq!(r.counts.to_i64_vec().unwrap(), vec![1, 2, 1]);
    }

    #[test]
    fn windows_follow_ort() {
        let w = cosine_window(WindowKind::Hann, 4, true, DataType::Float).unwrap();
        let v = w.to_f64_vec().unwrap();
        assert_eq!(v.len(), 4);
        assert!(v[0].abs() < 1e-7 && (v[2] - 1.0).abs() < 1e-7);
        let w = cosine_window(WindowKind::Blackman, 5, false, DataType::Float).unwrap();
        let v = w.to_f64_vec().unwrap();
        assert!((v[2] - 1.0).abs() < 1e-6);
        let w = cosine_window(WindowKind::Hamming, 3, true, DataType::Int64).unwrap();
        assert_eq!(w.to_i64_vec().unwrap(), vec![0, 0, 0]);
        assert!(cosine_window(WindowKind::Hann, -1, true, DataType::Float).is_err());
        assert_eq!(
            cosine_window(WindowKind::Hann, 0, true, DataType::Float)
                .unwrap()
                .dims,
            vec![0]
        );
    }
}
