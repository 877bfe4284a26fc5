//! `Step::Reduce` over an empty axis.
//!
//! MLX refuses to max/min-reduce over a zero-size axis ("Cannot max reduce over axis 1 with
//! size 0"); the value of a reduction over an empty set is the plan's
//! (`plan::ReduceOp::empty_value`), this module only fills the output with it.

use mlx::{Array, Dtype, Stream, ops};
use plan::ReduceOp;
use plan::step::EmptyValue;

/// Whether reducing `shape` over `axes` (negative axes count from the end) reduces over an
/// empty axis.
pub(crate) fn reduces_empty_axis(shape: &[i32], axes: &[i32]) -> bool {
    axes.iter().any(|&a| {
        let a = if a < 0 { a + shape.len() as i32 } else { a };
        usize::try_from(a)
            .ok()
            .and_then(|a| shape.get(a))
            .is_some_and(|&d| d == 0)
    })
}

/// The result of reducing `x` over `axes` when one of them is empty: the plan's
/// [`ReduceOp::empty_value`] (or MLX's mean, which gives NaN), in `x`'s dtype.
pub(crate) fn reduce(
    op: ReduceOp,
    x: &Array,
    axes: &[i32],
    keepdims: bool,
    s: &Stream,
) -> mlx::Result<Array> {
    let shape = x.shape();
    let rank = shape.len() as i32;
    let reduced: Vec<usize> = axes
        .iter()
        .map(|&a| (if a < 0 { a + rank } else { a }) as usize)
        .collect();
    let out_shape: Vec<i32> = shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| {
            if reduced.contains(&i) {
                keepdims.then_some(1)
            } else {
                Some(d)
            }
        })
        .collect();
    let dt = x.dtype();
    // float32/int32 scalars: `full` casts them to x's type on the stream, and MLX's GPU
    // backends have no float64 (0, 1 and the infinities are exact in every type)
    let Some(fill) = op.empty_value() else {
        return ops::mean_axes(x, axes, keepdims, s);
    };
    let value = match fill {
        EmptyValue::Zero => Array::scalar(0i32)?,
        EmptyValue::One => Array::scalar(1i32)?,
        EmptyValue::NegInfinity => Array::scalar(f32::NEG_INFINITY)?,
        EmptyValue::True => Array::scalar(true)?,
        EmptyValue::False => Array::scalar(false)?,
        EmptyValue::Lowest => extreme(dt, false)?,
        EmptyValue::Highest => extreme(dt, true)?,
    };
    ops::full(&out_shape, &value, dt, s)
}

/// The highest (`high`) or lowest value of `dt`, as a scalar of that type.
fn extreme(dt: Dtype, high: bool) -> mlx::Result<Array> {
    macro_rules! pick {
        ($t:ty) => {
            Array::scalar(if high { <$t>::MAX } else { <$t>::MIN })
        };
    }
    match dt {
        Dtype::Bool => Array::scalar(high),
        Dtype::Uint8 => pick!(u8),
        Dtype::Uint16 => pick!(u16),
        Dtype::Uint32 => pick!(u32),
        Dtype::Uint64 => pick!(u64),
        Dtype::Int8 => pick!(i8),
        Dtype::Int16 => pick!(i16),
        Dtype::Int32 => pick!(i32),
        Dtype::Int64 => pick!(i64),
        // floats (float32 infinity; `full` casts it to x's float type)
        _ => Array::scalar(if high {
            f32::INFINITY
        } else {
            f32::NEG_INFINITY
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> Stream {
        crate::init().unwrap();
        Stream::default_for(&mlx::Device::cpu()).unwrap()
    }

    #[test]
    fn detects_empty_axes() {
        assert!(reduces_empty_axis(&[2, 0, 4], &[1]));
        assert!(reduces_empty_axis(&[2, 0, 4], &[-2]));
        assert!(!reduces_empty_axis(&[2, 0, 4], &[0, 2]));
        assert!(!reduces_empty_axis(&[2, 3], &[5]));
    }

    #[test]
    fn identity_values() {
        let s = stream();
        let x = Array::from_slice::<f32>(&[], &[2, 0, 3]).unwrap();
        let max = reduce(ReduceOp::Max, &x, &[1], true, &s).unwrap();
        assert_eq!(max.shape(), vec![2, 1, 3]);
        assert_eq!(max.dtype(), Dtype::Float32);
        assert!(
            max.to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|v| *v == f32::NEG_INFINITY)
        );
        let min = reduce(ReduceOp::Min, &x, &[-2], false, &s).unwrap();
        assert_eq!(min.shape(), vec![2, 3]);
        assert!(
            min.to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|v| *v == f32::INFINITY)
        );
        let lse = reduce(ReduceOp::LogSumExp, &x, &[1], false, &s).unwrap();
        assert!(
            lse.to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|v| *v == f32::NEG_INFINITY)
        );
        let prod = reduce(ReduceOp::Prod, &x, &[1], false, &s).unwrap();
        assert_eq!(prod.to_vec::<f32>().unwrap(), vec![1.0; 6]);
        let x64 = Array::from_slice::<f64>(&[], &[0, 2]).unwrap();
        let max = reduce(ReduceOp::Max, &x64, &[0], false, &s).unwrap();
        assert_eq!(max.dtype(), Dtype::Float64);
        assert_eq!(max.to_vec::<f64>().unwrap(), vec![f64::NEG_INFINITY; 2]);
        let xi = Array::from_slice::<i64>(&[], &[2, 0]).unwrap();
        let sum = reduce(ReduceOp::Sum, &xi, &[1], true, &s).unwrap();
        assert_eq!(sum.dtype(), Dtype::Int64);
        assert_eq!(sum.to_vec::<i64>().unwrap(), vec![0; 2]);

        let x = Array::from_slice::<i8>(&[], &[0, 2]).unwrap();
        let max = reduce(ReduceOp::Max, &x, &[0], false, &s).unwrap();
        assert_eq!(max.dtype(), Dtype::Int8);
        assert_eq!(max.to_vec::<i8>().unwrap(), vec![i8::MIN; 2]);
        let min = reduce(ReduceOp::Min, &x, &[0], false, &s).unwrap();
        assert_eq!(min.to_vec::<i8>().unwrap(), vec![i8::MAX; 2]);
        let x = Array::from_slice::<u64>(&[], &[0]).unwrap();
        let min = reduce(ReduceOp::Min, &x, &[0], false, &s).unwrap();
        assert_eq!(min.to_vec::<u64>().unwrap(), vec![u64::MAX]);
        let x = Array::from_slice::<bool>(&[], &[3, 0]).unwrap();
        let all = reduce(ReduceOp::All, &x, &[1], false, &s).unwrap();
        assert_eq!(all.to_vec::<bool>().unwrap(), vec![true; 3]);
    }
}
