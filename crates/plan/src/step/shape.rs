//! Shape arithmetic shared by the resolve functions, and the reshape, slice, split and reduction
//! axis specs.

use std::fmt;

use super::{DimRule, HostReader, ShapeSource, Slot, dims_target};

// ---------------------------------------------------------------------------------------------
// Small helpers shared by the resolve functions.

pub(super) fn to_i32(v: i64, what: &str) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("{what} {v} does not fit MLX's 32-bit shape type"))
}

/// Normalises an axis against `rank` (`-rank..rank` accepted).
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Normalises a list of distinct axes against `rank`.
pub fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(format!("axis {a} is repeated in {axes:?}"));
        }
        out.push(n);
    }
    Ok(out)
}

/// Numpy/ONNX multidirectional broadcast of two shapes.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Result<Vec<i64>, String> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!("shapes {a:?} and {b:?} do not broadcast"));
        };
    }
    Ok(out)
}

pub(super) fn shape_to_i32(shape: &[i64]) -> Result<Vec<i32>, String> {
    shape.iter().map(|&d| to_i32(d, "dimension")).collect()
}

// ---------------------------------------------------------------------------------------------
// Reshape family.

/// How a [`Step::Reshape`](super::Step::Reshape) computes its target shape from the input shape.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ReshapeTarget {
    /// A shape fully known at plan time.
    Fixed(Vec<i64>),
    /// ONNX `Reshape`: `0` copies the input dim (unless `allowzero`), one `-1` is inferred.
    Onnx {
        /// The shape tensor's values.
        shape: ShapeSource,
        /// ONNX `allowzero` (opset 14): a `0` means an empty dim rather than "copy".
        allowzero: bool,
    },
    /// ONNX `Flatten`: `[prod(dims[..axis]), prod(dims[axis..])]`; `axis` may be negative.
    Flatten {
        /// The split point, `-rank..=rank`.
        axis: i64,
    },
    /// ONNX `Squeeze`: remove the listed size-1 axes, or every size-1 axis when `None`.
    Squeeze {
        /// The axes (may be negative, relative to the input rank).
        axes: Option<ShapeSource>,
    },
    /// ONNX `Unsqueeze`: insert size-1 axes at the listed output positions.
    Unsqueeze {
        /// The axes (may be negative, relative to the output rank).
        axes: ShapeSource,
    },
    /// The shape of another slot's array (restores a shape after a temporary reshape).
    Like(Slot),
    /// Each output dim computed from the input dims ([`dims_target`]): splits and merges of
    /// dims whose sizes are known only at run time.
    Dims(Vec<DimRule>),
}

impl fmt::Debug for ReshapeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReshapeTarget::Fixed(s) => write!(f, "{s:?}"),
            ReshapeTarget::Onnx { shape, allowzero } => {
                write!(f, "onnx({shape:?}")?;
                if *allowzero {
                    f.write_str(", allowzero")?;
                }
                f.write_str(")")
            }
            ReshapeTarget::Flatten { axis } => write!(f, "flatten(axis={axis})"),
            ReshapeTarget::Squeeze { axes: None } => f.write_str("squeeze(all)"),
            ReshapeTarget::Squeeze { axes: Some(a) } => write!(f, "squeeze({a:?})"),
            ReshapeTarget::Unsqueeze { axes } => write!(f, "unsqueeze({axes:?})"),
            ReshapeTarget::Like(s) => write!(f, "like({s:?})"),
            ReshapeTarget::Dims(r) => write!(f, "dims({r:?})"),
        }
    }
}

impl ReshapeTarget {
    /// The target shape for an input of `input_shape`.
    ///
    /// `like_shape` supplies the shape of the slot named by [`ReshapeTarget::Like`] (the runtime
    /// passes that array's shape; other variants ignore it).
    pub fn resolve(
        &self,
        input_shape: &[i64],
        like_shape: Option<&[i64]>,
        host: &mut dyn HostReader,
    ) -> Result<Vec<i32>, String> {
        let shape = match self {
            ReshapeTarget::Fixed(s) => s.clone(),
            ReshapeTarget::Onnx { shape, allowzero } => {
                reshape_target(input_shape, &shape.get(host)?, *allowzero)?
            }
            ReshapeTarget::Flatten { axis } => flatten_shape(input_shape, *axis)?,
            ReshapeTarget::Squeeze { axes } => {
                let axes = match axes {
                    Some(a) => Some(a.get(host)?),
                    None => None,
                };
                squeeze_shape(input_shape, axes.as_deref())?
            }
            ReshapeTarget::Unsqueeze { axes } => unsqueeze_shape(input_shape, &axes.get(host)?)?,
            ReshapeTarget::Dims(r) => dims_target(input_shape, r)?,
            ReshapeTarget::Like(_) => like_shape
                .ok_or("reshape-like needs the other array's shape")?
                .to_vec(),
        };
        let n_in: i64 = input_shape.iter().product();
        let n_out: i64 = shape.iter().product();
        if n_in != n_out {
            return Err(format!(
                "cannot reshape {input_shape:?} ({n_in} elements) to {shape:?} ({n_out} elements)"
            ));
        }
        shape_to_i32(&shape)
    }

    /// Slots read on the host by [`ReshapeTarget::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        match self {
            ReshapeTarget::Onnx { shape, .. } => shape.dynamic_slot().into_iter().collect(),
            ReshapeTarget::Squeeze { axes: Some(a) } => a.dynamic_slot().into_iter().collect(),
            ReshapeTarget::Unsqueeze { axes } => axes.dynamic_slot().into_iter().collect(),
            _ => Vec::new(),
        }
    }
}

/// ONNX `Reshape` target: `0` copies the input dim at that index (unless `allowzero`), one
/// `-1` is inferred from the element count.
pub fn reshape_target(
    input_shape: &[i64],
    shape: &[i64],
    allowzero: bool,
) -> Result<Vec<i64>, String> {
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 => {
                if infer.replace(i).is_some() {
                    return Err(format!("reshape target {shape:?} has more than one -1"));
                }
                out.push(1);
            }
            0 if !allowzero => {
                let copied = *input_shape.get(i).ok_or_else(|| {
                    format!(
                        "reshape target {shape:?} copies dim {i} of rank-{} input",
                        input_shape.len()
                    )
                })?;
                out.push(copied);
            }
            d if d < 0 => return Err(format!("reshape target {shape:?} has invalid dim {d}")),
            d => out.push(d),
        }
    }
    if allowzero && infer.is_some() && shape.contains(&0) {
        return Err(format!(
            "reshape target {shape:?} has both 0 and -1 with allowzero set"
        ));
    }
    let product = |dims: &[i64]| {
        dims.iter()
            .try_fold(1i64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("reshape of {input_shape:?} to {shape:?}: the size overflows"))
    };
    let total = product(input_shape)?;
    let known = product(&out)?;
    match infer {
        Some(i) => {
            if known == 0 || total % known != 0 {
                return Err(format!(
                    "cannot infer -1 in reshape of {input_shape:?} to {shape:?}"
                ));
            }
            out[i] = total / known;
        }
        None if known != total => {
            return Err(format!(
                "cannot reshape {input_shape:?} ({total} elements) to {out:?} ({known} elements)"
            ));
        }
        None => {}
    }
    Ok(out)
}

/// ONNX `Flatten` output shape.
pub fn flatten_shape(input_shape: &[i64], axis: i64) -> Result<Vec<i64>, String> {
    let r = input_shape.len() as i64;
    if axis < -r || axis > r {
        return Err(format!("Flatten axis {axis} is out of range for rank {r}"));
    }
    let a = if axis < 0 { axis + r } else { axis } as usize;
    Ok(vec![
        input_shape[..a].iter().product(),
        input_shape[a..].iter().product(),
    ])
}

/// ONNX `Squeeze` output shape (`axes = None` squeezes every size-1 dim).
pub fn squeeze_shape(input_shape: &[i64], axes: Option<&[i64]>) -> Result<Vec<i64>, String> {
    match axes {
        None => Ok(input_shape.iter().copied().filter(|&d| d != 1).collect()),
        Some(axes) => {
            let axes = normalize_axes(axes, input_shape.len())?;
            for &a in &axes {
                if input_shape[a] != 1 {
                    return Err(format!(
                        "cannot squeeze axis {a} of size {} in {input_shape:?}",
                        input_shape[a]
                    ));
                }
            }
            Ok(input_shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect())
        }
    }
}

/// ONNX `Unsqueeze` output shape (axes relative to the output rank).
pub fn unsqueeze_shape(input_shape: &[i64], axes: &[i64]) -> Result<Vec<i64>, String> {
    let out_rank = input_shape.len() + axes.len();
    let axes = normalize_axes(axes, out_rank)?;
    let mut rest = input_shape.iter();
    Ok((0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                *rest.next().expect("counted")
            }
        })
        .collect())
}

/// ONNX `Expand` target: the bidirectional broadcast of the input shape and `shape`.
pub fn expand_shape(input_shape: &[i64], shape: &[i64]) -> Result<Vec<i32>, String> {
    if shape.iter().any(|&d| d < 0) {
        return Err(format!("Expand shape {shape:?} has a negative dim"));
    }
    shape_to_i32(&broadcast_shapes(input_shape, shape)?)
}

/// A `ConstantOfShape`/`Full` shape, validated (non-negative, fits i32).
pub fn full_shape(shape: &[i64]) -> Result<Vec<i32>, String> {
    if shape.iter().any(|&d| d < 0) {
        return Err(format!("shape {shape:?} has a negative dim"));
    }
    shape_to_i32(shape)
}

/// ONNX `Shape` (opset 15 `start`/`end`): the range of dims reported for a rank-`rank` input.
pub fn shape_range(rank: usize, start: i64, end: Option<i64>) -> std::ops::Range<usize> {
    let r = rank as i64;
    let clamp = |v: i64| {
        let v = if v < 0 { v + r } else { v };
        v.clamp(0, r) as usize
    };
    let s = clamp(start);
    let e = end.map(clamp).unwrap_or(rank);
    s..e.max(s)
}

// ---------------------------------------------------------------------------------------------
// Slice.

/// ONNX `Slice` (opset 10+ inputs, or opset 1 attributes) over an input of runtime shape.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SliceSpec {
    /// `starts`.
    pub starts: ShapeSource,
    /// `ends` (may hold `i64::MAX`/`i64::MIN` sentinels).
    pub ends: ShapeSource,
    /// `axes`; `None` means `0..starts.len()`.
    pub axes: Option<ShapeSource>,
    /// `steps`; `None` means all ones.
    pub steps: Option<ShapeSource>,
}

impl fmt::Debug for SliceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "starts={:?} ends={:?}", self.starts, self.ends)?;
        if let Some(a) = &self.axes {
            write!(f, " axes={a:?}")?;
        }
        if let Some(s) = &self.steps {
            write!(f, " steps={s:?}")?;
        }
        Ok(())
    }
}

/// Per-axis arguments for `mlx_slice`, one entry per input dim.
///
/// Values are already in range, in the form MLX's slice normalisation leaves unchanged: for a
/// negative stride, "stop before index 0" is encoded as `-(dim + 1)` (MLX adds `dim` to
/// negative stops, giving `-1`, its "left of 0" position).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SliceBounds {
    /// `start` per axis.
    pub start: Vec<i32>,
    /// `stop` per axis.
    pub stop: Vec<i32>,
    /// `strides` per axis.
    pub strides: Vec<i32>,
    /// The output shape, for checking.
    pub out_shape: Vec<i64>,
}

impl SliceSpec {
    /// Resolves to `mlx_slice` arguments for an input of `input_shape`.
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<SliceBounds, String> {
        let starts = self.starts.get(host)?;
        let ends = self.ends.get(host)?;
        let axes = match &self.axes {
            Some(a) => Some(a.get(host)?),
            None => None,
        };
        let steps = match &self.steps {
            Some(s) => Some(s.get(host)?),
            None => None,
        };
        slice_bounds(
            input_shape,
            &starts,
            &ends,
            axes.as_deref(),
            steps.as_deref(),
        )
    }

    /// Slots read on the host by [`SliceSpec::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        [
            Some(&self.starts),
            Some(&self.ends),
            self.axes.as_ref(),
            self.steps.as_ref(),
        ]
        .into_iter()
        .flatten()
        .filter_map(ShapeSource::dynamic_slot)
        .collect()
    }
}

/// ONNX `Slice` semantics: per-axis clamping of starts/ends (negative values count from the
/// end; `INT_MAX`-style ends clamp), negative steps walk backwards.
pub fn slice_bounds(
    input_shape: &[i64],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<SliceBounds, String> {
    let rank = input_shape.len();
    let n = starts.len();
    if ends.len() != n {
        return Err(format!(
            "Slice starts ({n}) and ends ({}) differ in length",
            ends.len()
        ));
    }
    let axes: Vec<i64> = match axes {
        Some(a) if a.len() != n => {
            return Err(format!(
                "Slice axes ({}) and starts ({n}) differ in length",
                a.len()
            ));
        }
        Some(a) => a.to_vec(),
        None => (0..n as i64).collect(),
    };
    let steps: Vec<i64> = match steps {
        Some(s) if s.len() != n => {
            return Err(format!(
                "Slice steps ({}) and starts ({n}) differ in length",
                s.len()
            ));
        }
        Some(s) => s.to_vec(),
        None => vec![1; n],
    };
    let axes = normalize_axes(&axes, rank)?;
    let mut start = vec![0i64; rank];
    let mut stop: Vec<i64> = input_shape.to_vec();
    let mut strides = vec![1i64; rank];
    let mut out_shape = input_shape.to_vec();
    for (i, &ax) in axes.iter().enumerate() {
        let dim = input_shape[ax];
        let step = steps[i];
        if step == 0 {
            return Err("Slice step must not be 0".into());
        }
        // A step longer than the axis takes one element, like a step of the axis' length;
        // clamping keeps the arithmetic below from overflowing (steps of +-i64::MAX).
        let step = step.clamp(-dim.max(1), dim.max(1));
        let norm = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        let (s, e) = if step > 0 {
            (norm(starts[i]).clamp(0, dim), norm(ends[i]).clamp(0, dim))
        } else {
            (
                norm(starts[i]).clamp(0, (dim - 1).max(0)),
                norm(ends[i]).clamp(-1, dim - 1),
            )
        };
        let len = if step > 0 {
            if e > s { (e - s + step - 1) / step } else { 0 }
        } else if s > e && dim > 0 {
            (s - e + (-step) - 1) / (-step)
        } else {
            0
        };
        out_shape[ax] = len;
        strides[ax] = step;
        if len == 0 {
            // An empty slice; express it the same way for both directions.
            start[ax] = 0;
            stop[ax] = 0;
            strides[ax] = 1;
        } else if step > 0 {
            start[ax] = s;
            stop[ax] = e;
        } else {
            start[ax] = s;
            stop[ax] = if e < 0 { -(dim + 1) } else { e };
        }
    }
    Ok(SliceBounds {
        start: shape_to_i32(&start)?,
        stop: stop
            .iter()
            .map(|&v| to_i32(v, "slice stop"))
            .collect::<Result<_, _>>()?,
        strides: strides
            .iter()
            .map(|&v| to_i32(v, "slice step"))
            .collect::<Result<_, _>>()?,
        out_shape,
    })
}

// ---------------------------------------------------------------------------------------------
// Reductions.

/// The axes of a [`Step::Reduce`](super::Step::Reduce).
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ReduceAxes {
    /// Every axis.
    All,
    /// Fixed axes (may be negative when the rank was unknown at plan time).
    Static(Vec<i64>),
    /// ONNX opset-13/18 `axes` input read at run time.
    Dynamic {
        /// The axes tensor.
        axes: Slot,
        /// `noop_with_empty_axes`: an empty list means identity rather than "all".
        noop_with_empty_axes: bool,
    },
}

impl fmt::Debug for ReduceAxes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceAxes::All => f.write_str("all"),
            ReduceAxes::Static(a) => write!(f, "{a:?}"),
            ReduceAxes::Dynamic {
                axes,
                noop_with_empty_axes,
            } => write!(f, "host({axes:?}, noop_with_empty={noop_with_empty_axes})"),
        }
    }
}

impl ReduceAxes {
    /// Normalised axes for a rank-`rank` input; `None` means "identity" (no reduction).
    pub fn resolve(
        &self,
        rank: usize,
        host: &mut dyn HostReader,
    ) -> Result<Option<Vec<i32>>, String> {
        let axes = match self {
            ReduceAxes::All => (0..rank as i64).collect(),
            ReduceAxes::Static(a) => a.clone(),
            ReduceAxes::Dynamic {
                axes,
                noop_with_empty_axes,
            } => {
                let a = host.ints(*axes)?;
                if a.is_empty() {
                    if *noop_with_empty_axes {
                        return Ok(None);
                    }
                    (0..rank as i64).collect()
                } else {
                    a
                }
            }
        };
        let mut axes = normalize_axes(&axes, rank)?;
        axes.sort_unstable();
        Ok(Some(axes.into_iter().map(|a| a as i32).collect()))
    }
}

/// Cumulative split points (for `mlx_split_sections`) of a dim of size `dim` into `parts`
/// parts of the given `sizes` (or equal parts, ceil-sized, when `sizes` is `None`).
pub fn split_points(dim: i64, parts: usize, sizes: Option<&[i64]>) -> Result<Vec<i32>, String> {
    if parts == 0 || dim < 0 {
        return Err(format!("cannot split {dim} into {parts} parts"));
    }
    let sizes: Vec<i64> = match sizes {
        Some(s) => {
            if s.len() != parts {
                return Err(format!("Split has {} sizes for {parts} outputs", s.len()));
            }
            let total = s.iter().try_fold(
                0i64,
                |acc, &v| if v < 0 { None } else { acc.checked_add(v) },
            );
            if total != Some(dim) {
                return Err(format!("Split sizes {s:?} do not sum to {dim}"));
            }
            s.to_vec()
        }
        None => {
            let chunk = dim
                .checked_add(parts as i64 - 1)
                .ok_or_else(|| format!("cannot split {dim} into {parts} parts"))?
                / parts as i64;
            let mut v = vec![chunk; parts];
            let last = dim - chunk * (parts as i64 - 1);
            if last < 0 {
                return Err(format!("cannot split {dim} into {parts} parts"));
            }
            v[parts - 1] = last;
            v
        }
    };
    let mut acc = 0;
    let mut pts = Vec::with_capacity(parts.saturating_sub(1));
    for s in &sizes[..sizes.len().saturating_sub(1)] {
        acc += s;
        pts.push(to_i32(acc, "split point")?);
    }
    Ok(pts)
}
