//! ONNX `Resize` / `Upsample` in linear and cubic modes, with ONNX Runtime's CPU rules: which
//! axes are interpolated, output sizes, source coordinates and weights, all in float32 in the
//! same order of operations, so that the MLX computation rounds as ORT's does.

use std::fmt;

use super::{CoordinateTransform, FloatSource, HostReader, ShapeSource, normalize_axes};

/// Interpolation of a linear / cubic `Resize`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum InterpMode {
    /// `linear`: 2 taps per axis, the corner products summed (bilinear / trilinear).
    Linear,
    /// `cubic`: 4 taps per axis (Keys, coefficient `a`), separable passes.
    Cubic {
        /// `cubic_coeff_a`.
        a: f32,
        /// `exclude_outside`: taps outside the input get weight 0, the rest renormalised.
        exclude_outside: bool,
    },
}

/// How output positions map to input coordinates.
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum InterpCoordinates {
    /// One of the `coordinate_transformation_mode`s (not `tf_crop_and_resize`).
    Transform(CoordinateTransform),
    /// `tf_crop_and_resize`: `roi` (`[starts..., ends...]` over every axis, or over `axes`),
    /// and the value of outputs whose source lies outside the input.
    CropAndResize {
        /// The `roi` input.
        roi: FloatSource,
        /// `extrapolation_value`.
        extrapolation: f32,
    },
}

impl fmt::Debug for InterpCoordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterpCoordinates::Transform(t) => write!(f, "{t:?}"),
            InterpCoordinates::CropAndResize { roi, extrapolation } => {
                write!(f, "crop(roi={roi:?}, extrapolation={extrapolation})")
            }
        }
    }
}

/// Opset 18 `keep_aspect_ratio_policy`: how `sizes` are honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AspectPolicy {
    /// Each listed axis gets its size.
    Stretch,
    /// One scale for the listed axes, the smallest `size / dim`.
    NotLarger,
    /// One scale for the listed axes, the largest `size / dim`.
    NotSmaller,
}

/// ONNX `Resize` (opset 10+) or `Upsample` in linear / cubic mode.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct InterpSpec {
    /// Linear or cubic.
    pub mode: InterpMode,
    /// Coordinate mapping.
    pub coordinates: InterpCoordinates,
    /// Scales (one per axis, or per listed axis), when given.
    pub scales: Option<FloatSource>,
    /// Output sizes (take precedence when both are given), when given.
    pub sizes: Option<ShapeSource>,
    /// Opset 18 `axes` (scales / sizes / roi list these axes only).
    pub axes: Option<Vec<i64>>,
    /// Opset 18 `keep_aspect_ratio_policy`.
    pub policy: AspectPolicy,
    /// Opset 18 `antialias`: a filter widened by `1 / scale` when shrinking, weights normalised
    /// per output (see [`antialias_taps`]).
    pub antialias: bool,
}

/// One interpolated axis: the input positions and weights of each tap for every output
/// position.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct InterpAxis {
    /// The axis.
    pub axis: i32,
    /// `(indices, weights)` per tap; both have one entry per output position.
    pub taps: Vec<(Vec<i32>, Vec<f32>)>,
    /// Cubic only: the per-output divisor applied to each weighted tap (ORT renormalises the
    /// outer pass this way under `exclude_outside`).
    pub divisor: Option<Vec<f32>>,
    /// With `tf_crop_and_resize`: whether each output's source lies inside the input.
    pub inside: Option<Vec<bool>>,
}

/// Resolved interpolation for one input shape.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct InterpArgs {
    /// The interpolated axes, in increasing order; empty when the output equals the input (ORT
    /// then copies).
    pub axes: Vec<InterpAxis>,
    /// The output shape.
    pub out_shape: Vec<i64>,
    /// `true`: cubic (one weighted pass per axis, innermost axis first); `false`: linear (the
    /// sum over all corners of the weight products times the gathered value).
    pub separable: bool,
    /// With `tf_crop_and_resize`: the value of outputs whose source is outside the input.
    pub extrapolation: Option<f32>,
}

/// The `length_resized` that the `align_corners` formula of linear and cubic resize divides by:
/// with an output size that came from `scales`, the fractional `length_original * scale`, as
/// the ONNX reference implementation computes it (intended, onnx/onnx#2462: a downsample by 0.6
/// of 4 samples maps output 1 to `3 / 1.4`); else the integer output length. ORT's CPU EP always
/// takes the integer length, so it fails the ONNX backend tests
/// `test_resize_downsample_scales_{linear,cubic}_align_corners`. Other transforms, antialiased
/// and nearest resize (no backend case; kept as ORT computes them) take the integer length.
pub fn resized_length(
    coordinates: Option<CoordinateTransform>,
    by_scales: bool,
    in_len: i64,
    out_len: i64,
    scale: f32,
) -> f32 {
    if by_scales && coordinates == Some(CoordinateTransform::AlignCorners) {
        in_len as f32 * scale
    } else {
        out_len as f32
    }
}

/// The source coordinate of output position `o` under ORT's float32 formulas.
#[allow(clippy::too_many_arguments)]
pub fn source_coordinate(
    coordinates: Option<CoordinateTransform>,
    o: f32,
    scale: f32,
    out_len: f32,
    in_len: f32,
    roi_start: f32,
    roi_end: f32,
) -> f32 {
    use CoordinateTransform::*;
    match coordinates {
        Some(Asymmetric) => o / scale,
        Some(PytorchHalfPixel) => {
            if out_len > 1.0 {
                (o + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        Some(TfHalfPixelForNearest) => (o + 0.5) / scale,
        Some(AlignCorners) => {
            if out_len == 1.0 {
                0.0
            } else {
                o * (in_len - 1.0) / (out_len - 1.0)
            }
        }
        Some(HalfPixelSymmetric) => {
            // Partly in double precision, as ORT writes it.
            let output_width = scale * in_len;
            let adjustment = out_len / output_width;
            let center = in_len / 2.0;
            let offset = center * (1.0 - adjustment);
            (offset as f64 + (o as f64 + 0.5) / scale as f64 - 0.5) as f32
        }
        Some(HalfPixel) => ((o + 0.5) / scale) - 0.5,
        None => {
            // tf_crop_and_resize
            if out_len > 1.0 {
                roi_start * (in_len - 1.0)
                    + (o * (roi_end - roi_start) * (in_len - 1.0)) / (out_len - 1.0)
            } else {
                (0.5 * (roi_start + roi_end) as f64 * (in_len - 1.0) as f64) as f32
            }
        }
    }
}

/// Keys cubic coefficients for the fractional offset `s` (ORT's `GetCubicCoeffs`).
pub fn cubic_coeffs(s: f32, a: f32) -> [f32; 4] {
    let s = s.abs();
    [
        ((a * (s + 1.0) - 5.0 * a) * (s + 1.0) + 8.0 * a) * (s + 1.0) - 4.0 * a,
        ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
        ((a + 2.0) * (1.0 - s) - (a + 3.0)) * (1.0 - s) * (1.0 - s) + 1.0,
        ((a * (2.0 - s) - 5.0 * a) * (2.0 - s) + 8.0 * a) * (2.0 - s) - 4.0 * a,
    ]
}

/// The listed axes, output shape and per-axis scales of a Resize (see [`resize_target`]).
pub type ResizeTarget = (Vec<usize>, Vec<i64>, Vec<f32>);

/// Reads a Resize's `axes`, `sizes` and `scales` (`sizes` wins when both are given; an empty
/// tensor counts as absent) for an input of `input_shape` and applies [`resize_output`]: the
/// listed axes, the output shape and the per-axis scales.
pub fn resize_target(
    input_shape: &[i64],
    axes: Option<&[i64]>,
    sizes: Option<&ShapeSource>,
    scales: Option<&FloatSource>,
    policy: AspectPolicy,
    host: &mut dyn HostReader,
) -> Result<ResizeTarget, String> {
    let listed: Vec<usize> = match axes {
        Some(a) => normalize_axes(a, input_shape.len())?,
        None => (0..input_shape.len()).collect(),
    };
    let sizes = match sizes {
        Some(s) => Some(s.get(host)?).filter(|v| !v.is_empty()),
        None => None,
    };
    let scales = match (&sizes, scales) {
        (None, Some(s)) => Some(s.get(host)?).filter(|v| !v.is_empty()),
        _ => None,
    };
    let (out_shape, scales) = resize_output(
        input_shape,
        &listed,
        scales.as_deref(),
        sizes.as_deref(),
        policy,
    )?;
    Ok((listed, out_shape, scales))
}

/// Output dims and full-rank float32 scales of ONNX Runtime's `Resize`/`Upsample` for an input
/// of `input_shape`: with sizes, `scale = out / in` (1 for empty dims), then under a
/// `not_larger` / `not_smaller` policy one scale (the min / max) for the listed axes and
/// `out = trunc(scale * in + 0.5)`; with scales, `out = trunc(scale * in)`; all in float32.
pub fn resize_output(
    input_shape: &[i64],
    axes: &[usize],
    scales: Option<&[f64]>,
    sizes: Option<&[i64]>,
    policy: AspectPolicy,
) -> Result<(Vec<i64>, Vec<f32>), String> {
    let rank = input_shape.len();
    let mut out = input_shape.to_vec();
    let mut sc = vec![1.0f32; rank];
    match (sizes, scales) {
        (Some(sz), _) => {
            if sz.len() != axes.len() {
                return Err(format!(
                    "Resize sizes has {} entries for {} axes",
                    sz.len(),
                    axes.len()
                ));
            }
            for (j, &ax) in axes.iter().enumerate() {
                if sz[j] < 0 {
                    return Err(format!("Resize size {} is negative", sz[j]));
                }
                out[ax] = sz[j];
                sc[ax] = if input_shape[ax] == 0 {
                    if sz[j] != 0 {
                        return Err("Resize cannot scale an empty dim to a non-empty one".into());
                    }
                    1.0
                } else {
                    sz[j] as f32 / input_shape[ax] as f32
                };
            }
            if policy != AspectPolicy::Stretch {
                let listed = axes.iter().map(|&a| sc[a]);
                let s = if policy == AspectPolicy::NotLarger {
                    listed.fold(f32::MAX, f32::min)
                } else {
                    listed.fold(f32::MIN_POSITIVE, f32::max)
                };
                for &ax in axes {
                    sc[ax] = s;
                    out[ax] = (s * input_shape[ax] as f32 + 0.5) as i64;
                }
            }
        }
        (None, Some(s)) => {
            if s.len() != axes.len() {
                return Err(format!(
                    "Resize scales has {} entries for {} axes",
                    s.len(),
                    axes.len()
                ));
            }
            for (j, &ax) in axes.iter().enumerate() {
                let v = s[j] as f32;
                if v.is_nan() || v <= 0.0 {
                    return Err(format!("Resize scale {v} must be positive"));
                }
                sc[ax] = v;
                out[ax] = (v * input_shape[ax] as f32) as i64;
            }
        }
        (None, None) => return Err("Resize needs scales or sizes".into()),
    }
    Ok((out, sc))
}

/// The axes ORT's linear / cubic kernels interpolate for a rank and its scales.
pub fn interpolated_axes(mode: InterpMode, scales: &[f32]) -> Result<Vec<usize>, String> {
    interpolated_axes_for(mode, scales, false)
}

/// [`interpolated_axes`], where `antialias` also admits cubic on 4-D NHWC-like inputs (outer and
/// inner scales 1), as ORT does.
pub fn interpolated_axes_for(
    mode: InterpMode,
    scales: &[f32],
    antialias: bool,
) -> Result<Vec<usize>, String> {
    let one = |i: usize| scales[i] == 1.0;
    let axes = match (mode, scales.len()) {
        (_, 2) => vec![0, 1],
        (InterpMode::Cubic { .. }, 4) if antialias && !(one(0) && one(1)) && one(0) && one(3) => {
            vec![1, 2]
        }
        (InterpMode::Linear, 3) => vec![0, 1, 2],
        (_, 4) if one(0) && one(1) => vec![2, 3],
        (InterpMode::Linear, 4) if one(0) && one(3) => vec![1, 2],
        (InterpMode::Linear, 5) if one(0) && one(1) => vec![2, 3, 4],
        (InterpMode::Linear, _) => {
            return Err(format!(
                "Resize linear supports 2-D and 3-D inputs and 4-D / 5-D inputs whose outer \
                 scales are 1 (scales {scales:?})"
            ));
        }
        (InterpMode::Cubic { .. }, _) => {
            return Err(format!(
                "Resize cubic supports 2-D inputs and 4-D inputs whose outer scales are 1 \
                 (scales {scales:?})"
            ));
        }
    };
    Ok(axes)
}

impl InterpSpec {
    /// Taps, weights and output shape for an input of `input_shape`.
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<InterpArgs, String> {
        let rank = input_shape.len();
        let (listed, out_shape, scales) = resize_target(
            input_shape,
            self.axes.as_deref(),
            self.sizes.as_ref(),
            self.scales.as_ref(),
            self.policy,
            host,
        )?;
        let (transform, roi, extrapolation) = match &self.coordinates {
            InterpCoordinates::Transform(t) => (Some(*t), None, None),
            InterpCoordinates::CropAndResize { roi, extrapolation } => {
                let r = roi.get(host)?;
                // Full-rank [starts..., ends...], defaulting to the whole axis.
                let mut full = vec![0.0f32; 2 * rank];
                full[rank..].iter_mut().for_each(|v| *v = 1.0);
                if r.len() == 2 * listed.len() {
                    for (j, &ax) in listed.iter().enumerate() {
                        full[ax] = r[j] as f32;
                        full[rank + ax] = r[listed.len() + j] as f32;
                    }
                } else if !r.is_empty() {
                    return Err(format!(
                        "Resize roi has {} entries for {} axes",
                        r.len(),
                        listed.len()
                    ));
                }
                (None, Some(full), Some(*extrapolation))
            }
        };
        let by_scales = match &self.sizes {
            None => true,
            Some(s) => s.get(host)?.is_empty(),
        };
        let separable = matches!(self.mode, InterpMode::Cubic { .. });
        if out_shape == input_shape {
            return Ok(InterpArgs {
                axes: Vec::new(),
                out_shape,
                separable,
                extrapolation: None,
            });
        }
        let axes = interpolated_axes_for(self.mode, &scales, self.antialias)?;
        for (i, s) in scales.iter().enumerate() {
            if !axes.contains(&i) && *s != 1.0 {
                return Err(format!(
                    "Resize: axis {i} has scale {s} but only axes {axes:?} are interpolated"
                ));
            }
        }
        if self.antialias {
            if roi.is_some() {
                return Err("Resize: antialias with tf_crop_and_resize is not supported".into());
            }
            let (support, a, exclude) = match self.mode {
                InterpMode::Linear => (2.0, 0.0, false),
                InterpMode::Cubic { a, exclude_outside } => (4.0, a, exclude_outside),
            };
            let mut result = Vec::new();
            for &ax in &axes {
                let (n, m, scale) = (input_shape[ax], out_shape[ax], scales[ax]);
                // ORT copies an axis whose length is unchanged.
                if n == m {
                    continue;
                }
                let coord =
                    |o: f32| source_coordinate(transform, o, scale, m as f32, n as f32, 0.0, 1.0);
                result.push(InterpAxis {
                    axis: ax as i32,
                    taps: antialias_taps(n, m, scale, support, a, exclude, coord),
                    divisor: None,
                    inside: None,
                });
            }
            return Ok(InterpArgs {
                axes: result,
                out_shape,
                separable: true,
                extrapolation: None,
            });
        }
        let n_axes = axes.len();
        let mut result = Vec::with_capacity(n_axes);
        for (pos, &ax) in axes.iter().enumerate() {
            let (n, m, scale) = (input_shape[ax], out_shape[ax], scales[ax]);
            let (rs, re) = match &roi {
                Some(r) => (r[ax], r[rank + ax]),
                None => (0.0, 1.0),
            };
            let len = resized_length(transform, by_scales, n, m, scale);
            let coords: Vec<f32> = (0..m)
                .map(|o| {
                    if scale == 1.0 {
                        o as f32
                    } else {
                        source_coordinate(transform, o as f32, scale, len, n as f32, rs, re)
                    }
                })
                .collect();
            let inside = roi.as_ref().map(|_| {
                coords
                    .iter()
                    .map(|&c| !(c < 0.0 || c > (n - 1) as f32))
                    .collect::<Vec<bool>>()
            });
            let (taps, divisor) = match self.mode {
                InterpMode::Linear => (linear_taps(&coords, n), None),
                InterpMode::Cubic { a, exclude_outside } => {
                    // The innermost axis is the first pass (weights pre-divided); the outer one
                    // divides each weighted tap.
                    cubic_taps(&coords, n, a, exclude_outside, pos + 1 == n_axes)
                }
            };
            result.push(InterpAxis {
                axis: ax as i32,
                taps,
                divisor,
                inside,
            });
        }
        Ok(InterpArgs {
            axes: result,
            out_shape,
            separable,
            extrapolation,
        })
    }
}

/// The most taps per axis a resize whose tap count is only bounded at plan time is laid out
/// with (antialias with a run-time scale).
pub const MAX_LAYOUT_TAPS: usize = 64;

/// The fixed structure of the steps a linear / cubic resize lowers to, decided at plan time:
/// which axes are gathered and weighted, with how many taps, divisors and inside masks. The
/// tables filling it ([`InterpArgs::fit`]) may be computed at run time.
#[derive(Debug, Clone, PartialEq)]
pub struct InterpLayout {
    /// Input rank.
    pub rank: usize,
    /// One weighted pass per axis, innermost first (cubic, antialias); else the linear corners.
    pub separable: bool,
    /// The axes, in increasing order; empty: a copy.
    pub axes: Vec<LayoutAxis>,
    /// With `tf_crop_and_resize`: the value of outputs whose source is outside the input.
    pub extrapolation: Option<f32>,
}

/// One axis of an [`InterpLayout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutAxis {
    /// The axis.
    pub axis: usize,
    /// Taps (index and weight tables).
    pub taps: usize,
    /// A per-output divisor table.
    pub divisor: bool,
    /// A per-output inside mask.
    pub inside: bool,
}

/// The tables of one [`LayoutAxis`], each with one entry per output position.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisTables {
    /// `(indices, weights)` per tap.
    pub taps: Vec<(Vec<i32>, Vec<f32>)>,
    /// The divisor, when the layout has one.
    pub divisor: Option<Vec<f32>>,
    /// The inside mask, when the layout has one.
    pub inside: Option<Vec<bool>>,
}

impl InterpLayout {
    /// The exact layout of resolved arguments.
    pub fn of(args: &InterpArgs, rank: usize) -> InterpLayout {
        InterpLayout {
            rank,
            separable: args.separable,
            axes: args
                .axes
                .iter()
                .map(|a| LayoutAxis {
                    axis: a.axis as usize,
                    taps: a.taps.len(),
                    divisor: a.divisor.is_some(),
                    inside: a.inside.is_some(),
                })
                .collect(),
            extrapolation: args.extrapolation,
        }
    }
}

impl InterpSpec {
    /// The per-axis scales known at plan time for an input whose dims are `known` (`None`:
    /// not known): unlisted axes have scale 1; `sizes` give `size / dim` where the dim is
    /// known (all listed ones under a `not_larger` / `not_smaller` policy); static `scales`
    /// give theirs.
    pub fn known_scales(&self, known: &[Option<i64>]) -> Result<Vec<Option<f32>>, String> {
        let rank = known.len();
        let listed: Vec<usize> = match &self.axes {
            Some(a) => normalize_axes(a, rank)?,
            None => (0..rank).collect(),
        };
        let mut out = vec![Some(1.0f32); rank];
        for &ax in &listed {
            out[ax] = None;
        }
        match (&self.sizes, &self.scales) {
            (Some(ShapeSource::Static(sz)), _) if !sz.is_empty() => {
                let all_known = listed.iter().all(|&ax| known[ax].is_some());
                if self.policy == AspectPolicy::Stretch || all_known {
                    let dims: Vec<i64> = known.iter().map(|d| d.unwrap_or(1)).collect();
                    if let Ok((_, sc)) = resize_output(&dims, &listed, None, Some(sz), self.policy)
                    {
                        for &ax in &listed {
                            if known[ax].is_some() {
                                out[ax] = Some(sc[ax]);
                            }
                        }
                    }
                }
            }
            (None, Some(FloatSource::Static(v))) if v.len() == listed.len() => {
                for (j, &ax) in listed.iter().enumerate() {
                    out[ax] = Some(v[j] as f32);
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// The fixed layout of the steps that serve every run of an input whose dims are `known`:
    /// the union of the axes that some run may interpolate (an axis a run does not interpolate
    /// gets identity taps), with 2 (linear) or 4 (cubic) taps, or with antialias as many as the
    /// widest filter can have (its scale or the axis length must be known, at most
    /// [`MAX_LAYOUT_TAPS`]). `Err` when no run can succeed or the taps are unbounded.
    pub fn layout(&self, known: &[Option<i64>]) -> Result<InterpLayout, String> {
        let rank = known.len();
        let scales = self.known_scales(known)?;
        let unknown: Vec<usize> = (0..rank).filter(|&i| scales[i].is_none()).collect();
        let mut axes: Vec<usize> = Vec::new();
        let mut last_err = None;
        // Every axis whose scale is unknown is either 1 or not: the union of the outcomes.
        for pick in 0..(1u32 << unknown.len()) {
            let mut full: Vec<f32> = scales.iter().map(|s| s.unwrap_or(1.0)).collect();
            for (bit, &ax) in unknown.iter().enumerate() {
                if pick & (1 << bit) != 0 {
                    full[ax] = 2.0;
                }
            }
            match interpolated_axes_for(self.mode, &full, self.antialias) {
                Ok(a) => axes.extend(a),
                Err(e) => last_err = Some(e),
            }
        }
        axes.sort_unstable();
        axes.dedup();
        if axes.is_empty() {
            return Err(last_err.unwrap_or_else(|| "Resize: no axis to interpolate".into()));
        }
        let crop = matches!(self.coordinates, InterpCoordinates::CropAndResize { .. });
        let last = axes.len() - 1;
        let mut layout = Vec::with_capacity(axes.len());
        for (pos, &ax) in axes.iter().enumerate() {
            let taps = match (self.mode, self.antialias) {
                (InterpMode::Linear, false) => 2,
                (InterpMode::Cubic { .. }, false) => 4,
                (mode, true) => {
                    let support = if matches!(mode, InterpMode::Linear) {
                        2.0
                    } else {
                        4.0
                    };
                    let window = scales[ax].map(|s| antialias_window(s, support));
                    let bound = match (window, known[ax]) {
                        (Some(w), Some(n)) => w.min(n.max(1) as usize),
                        (Some(w), None) => w,
                        (None, Some(n)) => n.max(1) as usize,
                        (None, None) => {
                            return Err(format!(
                                "Resize: antialias on axis {ax} needs its scale or its length \
                                 known at plan time"
                            ));
                        }
                    };
                    if bound > MAX_LAYOUT_TAPS {
                        return Err(format!(
                            "Resize: antialias on axis {ax} may need {bound} taps (more than \
                             {MAX_LAYOUT_TAPS})"
                        ));
                    }
                    bound
                }
            };
            let divisor = matches!(
                self.mode,
                InterpMode::Cubic {
                    exclude_outside: true,
                    ..
                }
            ) && !self.antialias
                && pos != last;
            layout.push(LayoutAxis {
                axis: ax,
                taps,
                divisor,
                inside: crop,
            });
        }
        let extrapolation = match &self.coordinates {
            InterpCoordinates::CropAndResize { extrapolation, .. } => Some(*extrapolation),
            InterpCoordinates::Transform(_) => None,
        };
        Ok(InterpLayout {
            rank,
            separable: !matches!(self.mode, InterpMode::Linear) || self.antialias,
            axes: layout,
            extrapolation,
        })
    }
}

/// The widest antialias filter, in taps, at `scale` (outputs per input) for a filter of
/// `support` (see [`antialias_taps`]).
fn antialias_window(scale: f32, support: f32) -> usize {
    let inv = 1.0f32 / scale;
    let half = if inv >= 1.0 {
        support * 0.5 * inv
    } else {
        support * 0.5
    };
    if !half.is_finite() || half > 1e6 {
        return usize::MAX;
    }
    half.ceil() as usize * 2 + 1
}

impl InterpArgs {
    /// These arguments as the tables of `layout` for an input of `input_shape`: axes the run
    /// does not interpolate get identity taps (tap 0 the position itself with weight 1, the
    /// others weight 0), short taps are padded with weight 0, missing divisors are 1 and
    /// missing inside masks true. `Err` when the run needs more than the layout holds.
    pub fn fit(
        &self,
        layout: &InterpLayout,
        input_shape: &[i64],
    ) -> Result<Vec<AxisTables>, String> {
        let mismatch = || {
            format!(
                "Resize: this run interpolates {:?}, which the plan's layout {:?} does not hold",
                self.axes
                    .iter()
                    .map(|a| (a.axis, a.taps.len()))
                    .collect::<Vec<_>>(),
                layout.axes
            )
        };
        if !self.axes.is_empty()
            && (self.separable != layout.separable || self.extrapolation != layout.extrapolation)
        {
            return Err(mismatch());
        }
        if self
            .axes
            .iter()
            .any(|a| !layout.axes.iter().any(|l| l.axis == a.axis as usize))
        {
            return Err(mismatch());
        }
        layout
            .axes
            .iter()
            .map(|l| {
                let found = self.axes.iter().find(|a| a.axis as usize == l.axis);
                let (taps, divisor, inside) = match found {
                    Some(a) => {
                        if a.taps.len() > l.taps
                            || (a.divisor.is_some() && !l.divisor)
                            || (a.inside.is_some() && !l.inside)
                        {
                            return Err(mismatch());
                        }
                        (a.taps.clone(), a.divisor.clone(), a.inside.clone())
                    }
                    None => {
                        let n = *input_shape.get(l.axis).ok_or_else(|| {
                            format!("Resize: no axis {} in {input_shape:?}", l.axis)
                        })?;
                        let n =
                            i32::try_from(n).map_err(|_| "Resize: dim too large".to_string())?;
                        let iota: Vec<i32> = (0..n).collect();
                        let taps = (0..l.taps)
                            .map(|t| {
                                (
                                    iota.clone(),
                                    vec![if t == 0 { 1.0 } else { 0.0 }; iota.len()],
                                )
                            })
                            .collect();
                        (taps, None, None)
                    }
                };
                let m = taps.first().map_or(0, |t| t.0.len());
                let mut taps = taps;
                while taps.len() < l.taps {
                    taps.push((vec![0; m], vec![0.0; m]));
                }
                Ok(AxisTables {
                    taps,
                    divisor: l.divisor.then(|| divisor.unwrap_or_else(|| vec![1.0; m])),
                    inside: l.inside.then(|| inside.unwrap_or_else(|| vec![true; m])),
                })
            })
            .collect()
    }
}

/// ORT's antialiased taps along one axis of `n` inputs and `m` outputs at `scale` (outputs per
/// input): a triangle (`support` 2) or Keys cubic (`support` 4, coefficient `a`) filter whose
/// support is widened by `1 / scale` when shrinking, centred on `coord(o) + 0.5`. Without
/// `exclude`, the weights of taps outside the input are folded into the edge taps. Weights are
/// normalised by their float32 sum; outputs with fewer taps are padded with weight 0.
pub fn antialias_taps(
    n: i64,
    m: i64,
    scale: f32,
    support: f32,
    a: f32,
    exclude: bool,
    coord: impl Fn(f32) -> f32,
) -> Vec<(Vec<i32>, Vec<f32>)> {
    let filter = |x: f32| -> f32 {
        let x = x.abs();
        if support == 2.0 {
            if x < 1.0 { 1.0 - x } else { 0.0 }
        } else if x < 1.0 {
            ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        } else if x < 2.0 {
            (((x - 5.0) * x + 8.0) * x - 4.0) * a
        } else {
            0.0
        }
    };
    // ORT's `scale` is inputs per output.
    let inv = 1.0f32 / scale;
    let half = if inv >= 1.0 {
        support * 0.5 * inv
    } else {
        support * 0.5
    };
    let window = half.ceil() as i64 * 2 + 1;
    let filter_scale = if inv >= 1.0 { 1.0 / inv } else { 1.0 };
    let mut rows: Vec<(i64, Vec<f32>)> = Vec::with_capacity(m as usize);
    for i in 0..m {
        let center = 0.5
            + if inv == 1.0 {
                i as f32
            } else {
                coord(i as f32)
            };
        let xmin_real = (center - half + 0.5).floor() as i64;
        let xmax_real = (center + half + 0.5).floor() as i64;
        let xmax_real = xmin_real + (xmax_real - xmin_real).clamp(0, window);
        let (xmin_cut, xmax_cut) = (xmin_real.clamp(0, n), xmax_real.clamp(0, n));
        let xmin = if exclude { xmin_cut } else { xmin_real };
        let len = if exclude { xmax_cut } else { xmax_real } - xmin;
        let mut buf = vec![0.0f32; len.max(0) as usize];
        let mut total = 0.0f32;
        for x in 0..len {
            let w = filter(((x + xmin) as f32 - center + 0.5) * filter_scale);
            buf[x as usize] = w;
            total += w;
        }
        if !exclude && xmin_cut < xmax_cut {
            let neg = (-xmin).clamp(0, len - 1);
            for x in 0..neg {
                buf[neg as usize] += buf[x as usize];
            }
            let over = (len + xmin - n).clamp(0, len - 1);
            for x in (len - over)..len {
                buf[(len - over - 1) as usize] += buf[x as usize];
            }
            if (neg | over) > 0 {
                for x in 0..(xmax_cut - xmin_cut) {
                    buf[x as usize] = buf[(x + neg) as usize];
                }
            }
        }
        let total_inv = if total == 0.0 { 1.0 } else { 1.0 / total };
        let count = (xmax_cut - xmin_cut).max(0) as usize;
        let weights = buf[..count].iter().map(|w| w * total_inv).collect();
        rows.push((xmin_cut, weights));
    }
    let taps = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(1);
    (0..taps)
        .map(|t| {
            rows.iter()
                .map(|(start, w)| match w.get(t) {
                    Some(&w) => ((start + t as i64) as i32, w),
                    None => (0, 0.0),
                })
                .unzip()
        })
        .collect()
}

/// ORT's linear taps: the clamped coordinate between its floor and the next index, weighted by
/// the distance to the other one (0.5 each at the last index).
fn linear_taps(coords: &[f32], n: i64) -> Vec<(Vec<i32>, Vec<f32>)> {
    let m = coords.len();
    let (mut i1, mut i2, mut w1, mut w2) = (
        Vec::with_capacity(m),
        Vec::with_capacity(m),
        Vec::with_capacity(m),
        Vec::with_capacity(m),
    );
    let last = (n - 1).max(0);
    for &c in coords {
        let c = c.min(last as f32).max(0.0);
        let a = (c as i64).min(last);
        let b = (a + 1).min(last);
        let (mut d1, mut d2) = ((c - a as f32).abs(), (c - b as f32).abs());
        if a == b {
            d1 = 0.5;
            d2 = 0.5;
        }
        i1.push(a as i32);
        i2.push(b as i32);
        // The lower index is weighted by the distance to the upper one, and vice versa.
        w1.push(d2);
        w2.push(d1);
    }
    vec![(i1, w1), (i2, w2)]
}

/// ORT's cubic taps: 4 clamped indices around `floor(c)`; with `exclude_outside` the weights of
/// taps outside the input are 0 and the rest are renormalised by their sum (pre-divided for the
/// innermost pass, as a per-output divisor otherwise).
#[allow(clippy::type_complexity)]
fn cubic_taps(
    coords: &[f32],
    n: i64,
    a: f32,
    exclude_outside: bool,
    innermost: bool,
) -> (Vec<(Vec<i32>, Vec<f32>)>, Option<Vec<f32>>) {
    let m = coords.len();
    let mut taps: Vec<(Vec<i32>, Vec<f32>)> = (0..4)
        .map(|_| (Vec::with_capacity(m), Vec::with_capacity(m)))
        .collect();
    let mut divisor = Vec::with_capacity(m);
    for &c in coords {
        let base = c.floor() as i64;
        let coeffs = cubic_coeffs(c - base as f32, a);
        let mut w = coeffs;
        let mut sum = 1.0f32;
        if exclude_outside {
            sum = 0.0;
            for (i, wi) in w.iter_mut().enumerate() {
                let p = base - 1 + i as i64;
                if p < 0 || p >= n {
                    *wi = 0.0;
                }
                sum += *wi;
            }
        }
        for (i, tap) in taps.iter_mut().enumerate() {
            let p = (base - 1 + i as i64).clamp(0, (n - 1).max(0));
            tap.0.push(p as i32);
            tap.1.push(if innermost { w[i] / sum } else { w[i] });
        }
        divisor.push(sum);
    }
    let divisor = (exclude_outside && !innermost).then_some(divisor);
    (taps, divisor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::Slot;

    struct NoHost;
    impl HostReader for NoHost {
        fn ints(&mut self, s: Slot) -> Result<Vec<i64>, String> {
            Err(format!("unexpected read of {s:?}"))
        }
        fn floats(&mut self, s: Slot) -> Result<Vec<f64>, String> {
            Err(format!("unexpected read of {s:?}"))
        }
    }

    fn spec(mode: InterpMode, ct: CoordinateTransform, scales: &[f64]) -> InterpSpec {
        InterpSpec {
            mode,
            coordinates: InterpCoordinates::Transform(ct),
            scales: Some(FloatSource::Static(scales.to_vec())),
            sizes: None,
            axes: None,
            policy: AspectPolicy::Stretch,
            antialias: false,
        }
    }

    #[test]
    fn output_sizes_use_float32_products() {
        // 0.7f32 * 10 rounds to 7 in float32 (6.99999988 in float64).
        let (out, sc) = resize_output(
            &[1, 10],
            &[0, 1],
            Some(&[1.0, 0.7]),
            None,
            AspectPolicy::Stretch,
        )
        .unwrap();
        assert_eq!(out, vec![1, 7]);
        assert_eq!(sc[1], 0.7f32);
        let (out, sc) =
            resize_output(&[2, 3], &[1], None, Some(&[7]), AspectPolicy::Stretch).unwrap();
        assert_eq!(out, vec![2, 7]);
        assert_eq!(sc, vec![1.0, 7.0f32 / 3.0]);
        assert!(
            resize_output(
                &[2, 3],
                &[0, 1],
                Some(&[1.0, 0.0]),
                None,
                AspectPolicy::Stretch
            )
            .is_err()
        );
        assert!(resize_output(&[2, 3], &[0, 1], None, Some(&[2]), AspectPolicy::Stretch).is_err());
        // not_larger: one scale min(6/4, 3/3) = 1 for both axes; not_smaller: 1.5, 3 * 1.5 + 0.5.
        let (out, sc) = resize_output(
            &[4, 3],
            &[0, 1],
            None,
            Some(&[6, 3]),
            AspectPolicy::NotLarger,
        )
        .unwrap();
        assert_eq!((out, sc), (vec![4, 3], vec![1.0, 1.0]));
        let (out, _) = resize_output(
            &[4, 3],
            &[0, 1],
            None,
            Some(&[6, 3]),
            AspectPolicy::NotSmaller,
        )
        .unwrap();
        assert_eq!(out, vec![6, 5]);
    }

    #[test]
    fn interpolated_axes_follow_ort() {
        let lin = InterpMode::Linear;
        let cub = InterpMode::Cubic {
            a: -0.75,
            exclude_outside: false,
        };
        assert_eq!(interpolated_axes(lin, &[2.0, 2.0]).unwrap(), vec![0, 1]);
        assert_eq!(
            interpolated_axes(lin, &[1.0, 1.0, 2.0, 3.0]).unwrap(),
            vec![2, 3]
        );
        assert_eq!(
            interpolated_axes(lin, &[1.0, 2.0, 3.0, 1.0]).unwrap(),
            vec![1, 2]
        );
        assert_eq!(
            interpolated_axes(lin, &[1.0, 1.0, 2.0, 2.0, 2.0]).unwrap(),
            vec![2, 3, 4]
        );
        assert!(interpolated_axes(lin, &[2.0]).is_err());
        assert!(interpolated_axes(lin, &[2.0, 2.0, 2.0, 2.0]).is_err());
        assert_eq!(
            interpolated_axes(cub, &[1.0, 1.0, 2.0, 2.0]).unwrap(),
            vec![2, 3]
        );
        assert!(interpolated_axes(cub, &[1.0, 2.0, 2.0, 1.0]).is_err());
        assert!(interpolated_axes(cub, &[2.0, 2.0, 2.0]).is_err());
    }

    #[test]
    fn linear_taps_and_weights() {
        // 2 -> 4, half_pixel: coords -0.25, 0.25, 0.75, 1.25 -> clamped 0, 0.25, 0.75, 1.
        let a = spec(
            InterpMode::Linear,
            CoordinateTransform::HalfPixel,
            &[1.0, 2.0],
        )
        .resolve(&[3, 2], &mut NoHost)
        .unwrap();
        assert_eq!(a.out_shape, vec![3, 4]);
        assert_eq!(a.axes.len(), 2);
        // Axis 0 has scale 1: identity coordinates, still interpolated (weights 1 / 0).
        assert_eq!(a.axes[0].taps[0].0, vec![0, 1, 2]);
        assert_eq!(a.axes[0].taps[1].0, vec![1, 2, 2]);
        assert_eq!(a.axes[0].taps[0].1, vec![1.0, 1.0, 0.5]);
        let ax = &a.axes[1];
        assert_eq!(ax.taps[0].0, vec![0, 0, 0, 1]);
        assert_eq!(ax.taps[1].0, vec![1, 1, 1, 1]);
        assert_eq!(ax.taps[0].1, vec![1.0, 0.75, 0.25, 0.5]);
        assert_eq!(ax.taps[1].1, vec![0.0, 0.25, 0.75, 0.5]);
        assert!(!a.separable);
        // Output equal to the input: a copy.
        let a = spec(
            InterpMode::Linear,
            CoordinateTransform::HalfPixel,
            &[1.0, 1.2],
        )
        .resolve(&[3, 2], &mut NoHost)
        .unwrap();
        assert!(a.axes.is_empty());
    }

    #[test]
    fn cubic_coefficients_and_exclude_outside() {
        let c = cubic_coeffs(0.0, -0.75);
        assert_eq!(c, [0.0, 1.0, 0.0, 0.0]);
        let c = cubic_coeffs(0.5, -0.75);
        assert!((c.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(c[0], c[3]);
        let mode = InterpMode::Cubic {
            a: -0.5,
            exclude_outside: true,
        };
        let a = spec(
            mode,
            CoordinateTransform::AlignCorners,
            &[1.0, 1.0, 2.0, 2.0],
        )
        .resolve(&[1, 1, 3, 3], &mut NoHost)
        .unwrap();
        assert!(a.separable);
        let (outer, inner) = (&a.axes[0], &a.axes[1]);
        // Position 0: coordinate 0, taps -1..2 clamped; tap -1 excluded.
        assert_eq!(inner.taps[0].0[0], 0);
        assert_eq!(inner.taps[0].1[0], 0.0);
        assert!(inner.divisor.is_none());
        assert!(outer.divisor.is_some());
        let total: f32 = inner.taps.iter().map(|t| t.1[1]).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    #[test]
    fn coordinate_modes() {
        use CoordinateTransform::*;
        let f = |ct, o| source_coordinate(Some(ct), o, 2.0, 8.0, 4.0, 0.0, 1.0);
        assert_eq!(f(Asymmetric, 3.0), 1.5);
        assert_eq!(f(HalfPixel, 0.0), -0.25);
        assert_eq!(f(PytorchHalfPixel, 0.0), -0.25);
        assert_eq!(f(AlignCorners, 7.0), 3.0);
        assert_eq!(f(TfHalfPixelForNearest, 1.0), 0.75);
        assert_eq!(f(HalfPixelSymmetric, 0.0), -0.25);
        assert_eq!(
            source_coordinate(Some(PytorchHalfPixel), 0.0, 0.25, 1.0, 4.0, 0.0, 1.0),
            0.0
        );
        // tf_crop_and_resize: roi 0.25..0.75 of a 5-long axis onto 3 outputs: 1, 2, 3.
        let c = |o| source_coordinate(None, o, 0.6, 3.0, 5.0, 0.25, 0.75);
        assert_eq!((c(0.0), c(1.0), c(2.0)), (1.0, 2.0, 3.0));
    }
}
