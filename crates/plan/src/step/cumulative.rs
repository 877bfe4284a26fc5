//! Cumulative reductions ([`super::Step::Cumulative`]): ONNX `CumSum` with an axis known only
//! at run time, and `CumProd`.

/// The accumulation of a [`super::Step::Cumulative`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CumOp {
    /// `mlx_cumsum_axis`.
    Sum,
    /// `mlx_cumprod_axis`.
    Prod,
}

/// The axis of a cumulative step from the ONNX `axis` input's value (negative counts from
/// the end), checked against the rank.
pub fn cumulative_axis(values: &[i64], rank: usize) -> Result<i32, String> {
    let [axis] = values else {
        return Err(format!(
            "the axis must hold one value, it holds {}",
            values.len()
        ));
    };
    let r = rank as i64;
    let a = if *axis < 0 { axis + r } else { *axis };
    if !(0..r.max(1)).contains(&a) {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_normalise_and_check() {
        assert_eq!(cumulative_axis(&[1], 3), Ok(1));
        assert_eq!(cumulative_axis(&[-1], 3), Ok(2));
        assert_eq!(cumulative_axis(&[0], 0), Ok(0));
        assert!(cumulative_axis(&[3], 3).is_err());
        assert!(cumulative_axis(&[-4], 3).is_err());
        assert!(cumulative_axis(&[0, 1], 3).is_err());
    }
}
