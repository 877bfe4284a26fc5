//! Helpers of the gather / scatter / data-dependent steps: MLX scatter reductions, gather slice
//! sizes, nonzero coordinates, and reshape targets computed from the input dims.

use super::{shape_to_i32, to_i32};

/// The MLX scatter of a [`super::Step::Scatter`] (ONNX `reduction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ScatterOp {
    /// `mlx_scatter`: overwrite (`none`).
    Assign,
    /// `mlx_scatter_add`.
    Add,
    /// `mlx_scatter_prod` (`mul`).
    Prod,
    /// `mlx_scatter_max`.
    Max,
    /// `mlx_scatter_min`.
    Min,
}

impl ScatterOp {
    /// The mlx-c function this op calls.
    pub fn mlx_fn(self) -> &'static str {
        match self {
            ScatterOp::Assign => "mlx_scatter",
            ScatterOp::Add => "mlx_scatter_add",
            ScatterOp::Prod => "mlx_scatter_prod",
            ScatterOp::Max => "mlx_scatter_max",
            ScatterOp::Min => "mlx_scatter_min",
        }
    }

    /// The op of an ONNX `reduction` attribute value.
    pub fn from_onnx(reduction: &str) -> Option<ScatterOp> {
        Some(match reduction {
            "none" => ScatterOp::Assign,
            "add" => ScatterOp::Add,
            "mul" => ScatterOp::Prod,
            "max" => ScatterOp::Max,
            "min" => ScatterOp::Min,
            _ => return None,
        })
    }
}

/// `slice_sizes` of `mlx_gather` taking single elements along `axes` and whole dims elsewhere.
pub fn gather_slice_sizes(input_shape: &[i64], axes: &[i32]) -> Result<Vec<i32>, String> {
    let mut sizes = shape_to_i32(input_shape)?;
    for &a in axes {
        let a = usize::try_from(a)
            .ok()
            .filter(|&a| a < sizes.len())
            .ok_or_else(|| format!("gather axis {a} is out of range for {input_shape:?}"))?;
        sizes[a] = 1;
    }
    Ok(sizes)
}

/// ONNX `NonZero`: the coordinates (`[rank, count]`, row-major order of the elements) of the
/// non-zero entries of a tensor of `shape` whose flattened values are `nonzero`.
pub fn nonzero_coords(shape: &[i64], nonzero: &[bool]) -> Result<(Vec<i64>, Vec<i64>), String> {
    let total: i64 = shape.iter().product();
    if total as usize != nonzero.len() {
        return Err(format!(
            "NonZero read {} values for shape {shape:?}",
            nonzero.len()
        ));
    }
    let rank = shape.len();
    let positions: Vec<usize> = (0..nonzero.len()).filter(|&i| nonzero[i]).collect();
    let count = positions.len();
    let mut out = vec![0i64; rank * count];
    for (j, &p) in positions.iter().enumerate() {
        let mut rest = p as i64;
        for d in (0..rank).rev() {
            out[d * count + j] = rest % shape[d];
            rest /= shape[d];
        }
    }
    Ok((vec![rank as i64, count as i64], out))
}

/// One output dim of a [`super::ReshapeTarget::Dims`]: `product(input[dims]) * mul / div`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DimRule {
    /// Input dims multiplied together (empty: 1).
    pub dims: Vec<usize>,
    /// Constant factor.
    pub mul: i64,
    /// Exact divisor.
    pub div: i64,
}

impl DimRule {
    /// The input dim `d` unchanged.
    pub fn copy(d: usize) -> DimRule {
        DimRule {
            dims: vec![d],
            mul: 1,
            div: 1,
        }
    }

    /// A constant.
    pub fn fixed(v: i64) -> DimRule {
        DimRule {
            dims: vec![],
            mul: v,
            div: 1,
        }
    }

    /// The product of the input dims `dims`.
    pub fn product(dims: &[usize]) -> DimRule {
        DimRule {
            dims: dims.to_vec(),
            mul: 1,
            div: 1,
        }
    }

    /// The input dim `d` divided (exactly) by `div`.
    pub fn divided(d: usize, div: i64) -> DimRule {
        DimRule {
            dims: vec![d],
            mul: 1,
            div,
        }
    }
}

/// The shape a [`super::ReshapeTarget::Dims`] gives an input of `input_shape`.
pub fn dims_target(input_shape: &[i64], rules: &[DimRule]) -> Result<Vec<i64>, String> {
    rules
        .iter()
        .map(|r| {
            let mut v = r.mul;
            for &d in &r.dims {
                v *= *input_shape
                    .get(d)
                    .ok_or_else(|| format!("reshape rule reads dim {d} of {input_shape:?}"))?;
            }
            if r.div <= 0 || v % r.div != 0 {
                return Err(format!(
                    "dim {v} of {input_shape:?} is not divisible by {}",
                    r.div
                ));
            }
            Ok(v / r.div)
        })
        .collect()
}

/// `[0, 1, ..., n-1]` as `i32` (index constants of gathers).
pub fn iota_i32(n: i64) -> Result<Vec<i32>, String> {
    let n = to_i32(n, "length")?;
    Ok((0..n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_ops_and_slice_sizes() {
        assert_eq!(ScatterOp::from_onnx("mul"), Some(ScatterOp::Prod));
        assert_eq!(ScatterOp::from_onnx("xor"), None);
        assert_eq!(ScatterOp::Max.mlx_fn(), "mlx_scatter_max");
        assert_eq!(
            gather_slice_sizes(&[4, 5, 6], &[0, 1]).unwrap(),
            vec![1, 1, 6]
        );
        assert!(gather_slice_sizes(&[4], &[1]).is_err());
    }

    #[test]
    fn nonzero_coordinates_are_row_major() {
        let (shape, v) = nonzero_coords(&[2, 2], &[true, false, true, true]).unwrap();
        assert_eq!(shape, vec![2, 3]);
        assert_eq!(v, vec![0, 1, 1, 0, 0, 1]);
        let (shape, v) = nonzero_coords(&[], &[true]).unwrap();
        assert_eq!((shape, v), (vec![0, 1], vec![]));
        let (shape, _) = nonzero_coords(&[3], &[false; 3]).unwrap();
        assert_eq!(shape, vec![1, 0]);
        assert!(nonzero_coords(&[3], &[true]).is_err());
    }

    #[test]
    fn dim_rules() {
        let rules = [
            DimRule::copy(0),
            DimRule::fixed(2),
            DimRule::divided(1, 2),
            DimRule::product(&[2, 3]),
        ];
        assert_eq!(
            dims_target(&[5, 8, 3, 4], &rules).unwrap(),
            vec![5, 2, 4, 12]
        );
        assert!(dims_target(&[5, 7, 3, 4], &rules).is_err());
        assert!(dims_target(&[5], &rules).is_err());
        assert_eq!(iota_i32(3).unwrap(), vec![0, 1, 2]);
    }
}
