//! Nearest-neighbour resize: coordinate transforms and the resize spec.

use std::fmt;

use super::{
    AspectPolicy, FloatSource, HostReader, ShapeSource, known_scales, resize_target,
    source_coordinate,
};

// ---------------------------------------------------------------------------------------------
// Resize.

/// ONNX `Resize` coordinate transformation modes (nearest only uses them to map output to
/// input positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CoordinateTransform {
    /// `half_pixel`.
    HalfPixel,
    /// `half_pixel_symmetric`.
    HalfPixelSymmetric,
    /// `pytorch_half_pixel`.
    PytorchHalfPixel,
    /// `align_corners`.
    AlignCorners,
    /// `asymmetric`.
    Asymmetric,
    /// `tf_half_pixel_for_nearest`.
    TfHalfPixelForNearest,
}

/// ONNX `Resize` `nearest_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum NearestMode {
    /// `round_prefer_floor`.
    RoundPreferFloor,
    /// `round_prefer_ceil`.
    RoundPreferCeil,
    /// `floor`.
    Floor,
    /// `ceil`.
    Ceil,
}

/// ONNX `Resize` in nearest mode.
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ResizeSpec {
    /// Coordinate mapping.
    pub coordinate_transform: CoordinateTransform,
    /// Rounding of the mapped coordinate.
    pub nearest_mode: NearestMode,
    /// `scales` input (one per axis, or per listed axis), when given.
    pub scales: Option<FloatSource>,
    /// `sizes` input, when given (takes precedence when both are).
    pub sizes: Option<ShapeSource>,
    /// Opset 18 `axes` (normalised when the rank was known); `None` means every axis.
    pub axes: Option<Vec<i64>>,
    /// Opset 18 `keep_aspect_ratio_policy` (applies to `sizes`).
    pub policy: AspectPolicy,
}

impl fmt::Debug for ResizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{:?}", self.coordinate_transform, self.nearest_mode)?;
        if let Some(s) = &self.scales {
            write!(f, " scales={s:?}")?;
        }
        if let Some(s) = &self.sizes {
            write!(f, " sizes={s:?}")?;
        }
        if let Some(a) = &self.axes {
            write!(f, " axes={a:?}")?;
        }
        Ok(())
    }
}

impl ResizeSpec {
    /// For an input of `input_shape`: the gathers to perform, as `(axis, indices)` pairs
    /// (axes whose size and scale leave them unchanged are omitted).
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<Vec<(i32, Vec<i32>)>, String> {
        let rank = input_shape.len();
        // ORT's output sizes (float32 products, the aspect-ratio policy) and scales.
        let (_, out_shape, scales) = resize_target(
            input_shape,
            self.axes.as_deref(),
            self.sizes.as_ref(),
            self.scales.as_ref(),
            self.policy,
            host,
        )?;
        // ORT copies the input when no dim changes size, whatever the scales.
        if out_shape == input_shape {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for ax in 0..rank {
            let (in_dim, out_dim, scale) = (input_shape[ax], out_shape[ax], scales[ax]);
            // A scale of 1 maps each position to itself.
            if scale == 1.0 && out_dim == in_dim {
                continue;
            }
            let idx = nearest_indices(
                in_dim,
                out_dim,
                scale,
                self.coordinate_transform,
                self.nearest_mode,
            );
            out.push((ax as i32, idx));
        }
        Ok(out)
    }

    /// The axes some run of an input whose dims are `known` may gather: those whose scale is
    /// not known to be 1 (see [`known_scales`]).
    pub fn gather_axes(&self, known: &[Option<i64>]) -> Result<Vec<usize>, String> {
        let scales = known_scales(
            self.axes.as_deref(),
            self.sizes.as_ref(),
            self.scales.as_ref(),
            self.policy,
            known,
        )?;
        Ok((0..known.len())
            .filter(|&i| scales[i] != Some(1.0))
            .collect())
    }

    /// One index vector per axis of `axes` for an input of `input_shape`: the run's gather
    /// ([`ResizeSpec::resolve`]), or the identity where it gathers nothing. `Err` when the
    /// run gathers an axis `axes` lacks.
    pub fn indices(
        &self,
        input_shape: &[i64],
        axes: &[usize],
        host: &mut dyn HostReader,
    ) -> Result<Vec<Vec<i32>>, String> {
        let gathers = self.resolve(input_shape, host)?;
        if let Some((a, _)) = gathers.iter().find(|(a, _)| !axes.contains(&(*a as usize))) {
            return Err(format!(
                "Resize: this run resizes axis {a}, which the plan's layout {axes:?} lacks"
            ));
        }
        axes.iter()
            .map(
                |&ax| match gathers.iter().find(|(a, _)| *a as usize == ax) {
                    Some((_, idx)) => Ok(idx.clone()),
                    None => {
                        let n = *input_shape
                            .get(ax)
                            .ok_or_else(|| format!("Resize: no axis {ax} in {input_shape:?}"))?;
                        let n =
                            i32::try_from(n).map_err(|_| "Resize: dim too large".to_string())?;
                        Ok((0..n).collect())
                    }
                },
            )
            .collect()
    }
}

/// Source indices of ONNX nearest-neighbour resize along one axis.
pub fn nearest_indices(
    in_dim: i64,
    out_dim: i64,
    scale: f32,
    ct: CoordinateTransform,
    mode: NearestMode,
) -> Vec<i32> {
    // Float32 arithmetic throughout, as ONNX Runtime's CPU kernel does: boundary cases
    // (a source coordinate that is exactly an integer in real arithmetic) then round alike.
    let (in_f, out_f) = (in_dim as f32, out_dim as f32);
    (0..out_dim)
        .map(|o| {
            let o = o as f32;
            // ORT's formulas (half_pixel_symmetric partly in double precision).
            let x = source_coordinate(Some(ct), o, scale, out_f, in_f, 0.0, 1.0);
            let half = x.fract().abs() == 0.5;
            let r = match mode {
                NearestMode::RoundPreferFloor if half => x.floor(),
                NearestMode::RoundPreferCeil if half => x.ceil(),
                NearestMode::RoundPreferFloor | NearestMode::RoundPreferCeil => x.round(),
                NearestMode::Floor => x.floor(),
                NearestMode::Ceil => x.ceil(),
            };
            (r as i64).clamp(0, (in_dim - 1).max(0)) as i32
        })
        .collect()
}
