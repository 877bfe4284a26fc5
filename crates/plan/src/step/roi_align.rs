//! ONNX `RoiAlign`: the bilinear sample positions and weights of every output bin, computed
//! on the host from the roi values (as ONNX Runtime's CPU kernel, in float32); the runtime
//! gathers the corners from X on the device and reduces them.

/// The most sample corners (gather rows) one RoiAlign run may compute on the host.
const MAX_SAMPLES: i64 = 1 << 27;

/// The static attributes of one `RoiAlign` node.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RoiAlignSpec {
    /// `mode == "max"` (else `avg`).
    pub max_mode: bool,
    /// `output_height` (>= 1).
    pub output_height: i64,
    /// `output_width` (>= 1).
    pub output_width: i64,
    /// `sampling_ratio` (0: adaptive, `ceil(roi_size / output_size)` per roi).
    pub sampling_ratio: i64,
    /// `spatial_scale`.
    pub spatial_scale: f32,
    /// `coordinate_transformation_mode == "half_pixel"` (opset 10 and `output_half_pixel`: false).
    pub half_pixel: bool,
}

/// The gather rows and weights of a `RoiAlign`, per roi `r`, output bin `p`
/// (`output_height * output_width`, row-major) and corner entry `k` (`corners` per bin: up to
/// the largest sampling grid of any roi, times 4 bilinear corners); all flattened `[R, P, K]`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RoiSamples {
    /// Number of rois `R`.
    pub rois: usize,
    /// Corner entries per bin `K` (a multiple of 4, at least 4).
    pub corners: usize,
    /// Row into X viewed as `[N * H * W, C]`: `batch * H * W + y * W + x`.
    pub rows: Vec<i32>,
    /// Bilinear weight of the corner (0 for samples outside the image, ORT's rule).
    pub weights: Vec<f32>,
    /// False for padding entries (past the roi's own sampling grid).
    pub valid: Vec<bool>,
    /// The value a padding entry takes before the reduction: 0 (avg, or a roi with no
    /// samples in max mode) or -inf (max).
    pub fill: Vec<f32>,
    /// Per roi, the avg divisor `max(grid_h * grid_w, 1)`.
    pub count: Vec<f32>,
}

/// One bilinear sample: four (flat position, weight) corners, ORT's boundary rules.
fn bilinear(height: i64, width: i64, y: f32, x: f32) -> [(i64, f32); 4] {
    if y < -1.0 || y > height as f32 || x < -1.0 || x > width as f32 {
        return [(0, 0.0); 4];
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    let (mut y_lo, mut x_lo) = (y as i64, x as i64);
    let y_hi = if y_lo >= height - 1 {
        y_lo = height - 1;
        y = y_lo as f32;
        y_lo
    } else {
        y_lo + 1
    };
    let x_hi = if x_lo >= width - 1 {
        x_lo = width - 1;
        x = x_lo as f32;
        x_lo
    } else {
        x_lo + 1
    };
    let (ly, lx) = (y - y_lo as f32, x - x_lo as f32);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    [
        (y_lo * width + x_lo, hy * hx),
        (y_lo * width + x_hi, hy * lx),
        (y_hi * width + x_lo, ly * hx),
        (y_hi * width + x_hi, ly * lx),
    ]
}

impl RoiAlignSpec {
    /// The samples of every roi over X of shape `x_shape` (`[N, C, H, W]`); `rois` is
    /// `[R, 4]` (`x1, y1, x2, y2`) flattened, `batch_indices` `[R]`.
    pub fn samples(
        &self,
        x_shape: &[i64],
        rois: &[f32],
        batch_indices: &[i64],
    ) -> Result<RoiSamples, String> {
        let &[n, _, height, width] = x_shape else {
            return Err(format!("RoiAlign: X {x_shape:?} must be 4-D"));
        };
        let r = batch_indices.len();
        if rois.len() != 4 * r {
            return Err(format!(
                "RoiAlign: rois have {} values for {r} batch indices",
                rois.len()
            ));
        }
        let (oh, ow) = (self.output_height, self.output_width);
        if oh < 1 || ow < 1 || self.sampling_ratio < 0 {
            return Err("RoiAlign: bad output size or sampling_ratio".into());
        }
        let offset = if self.half_pixel { 0.5f32 } else { 0.0 };
        // Per roi: start (y, x), bin size (h, w), grid (h, w).
        let mut geo = Vec::with_capacity(r);
        for (i, (&b, roi)) in batch_indices.iter().zip(rois.chunks_exact(4)).enumerate() {
            if b < 0 || b >= n {
                return Err(format!(
                    "RoiAlign: batch_indices value {b} at index {i} is out of range [0, {n})"
                ));
            }
            let s = self.spatial_scale;
            let [x1, y1, x2, y2] = [roi[0], roi[1], roi[2], roi[3]].map(|v| v * s - offset);
            let (mut rw, mut rh) = (x2 - x1, y2 - y1);
            if !self.half_pixel {
                rw = rw.max(1.0);
                rh = rh.max(1.0);
            }
            let grid = |size: f32, out: i64| {
                if self.sampling_ratio > 0 {
                    self.sampling_ratio
                } else {
                    (size / out as f32).ceil() as i64
                }
            };
            let (gh, gw) = (grid(rh, oh), grid(rw, ow));
            geo.push((b, y1, x1, rh / oh as f32, rw / ow as f32, gh, gw));
        }
        let max_grid = geo
            .iter()
            .map(|g| g.5.max(0).saturating_mul(g.6.max(0)))
            .max()
            .unwrap_or(0);
        // Hostile rois (huge, or with an enormous adaptive grid) must give an error, not an
        // allocation failure that would abort the process.
        let total = (r as i64)
            .checked_mul(oh)
            .and_then(|t| t.checked_mul(ow))
            .and_then(|t| t.checked_mul(max_grid.max(1)))
            .and_then(|t| t.checked_mul(4))
            .filter(|&t| t <= MAX_SAMPLES)
            .ok_or_else(|| {
                format!(
                    "RoiAlign: {r} roi(s) of {oh}x{ow} bins with up to {max_grid} samples each \
                     need more than {MAX_SAMPLES} sample corners"
                )
            })? as usize;
        let corners = 4 * max_grid.max(1) as usize;
        let mut out = RoiSamples {
            rois: r,
            corners,
            rows: Vec::with_capacity(total),
            weights: Vec::with_capacity(total),
            valid: Vec::with_capacity(total),
            fill: Vec::with_capacity(total),
            count: Vec::with_capacity(r),
        };
        let plane = height * width;
        for &(b, y1, x1, bin_h, bin_w, gh, gw) in &geo {
            let (gh, gw) = (gh.max(0), gw.max(0));
            let samples = (gh * gw) as usize;
            out.count.push((gh * gw).max(1) as f32);
            let pad = if self.max_mode && samples > 0 {
                f32::NEG_INFINITY
            } else {
                0.0
            };
            for ph in 0..oh {
                for pw in 0..ow {
                    for iy in 0..gh {
                        let y = y1 + ph as f32 * bin_h + (iy as f32 + 0.5) * bin_h / gh as f32;
                        for ix in 0..gw {
                            let x = x1 + pw as f32 * bin_w + (ix as f32 + 0.5) * bin_w / gw as f32;
                            for (pos, w) in bilinear(height, width, y, x) {
                                let row = i32::try_from(b * plane + pos)
                                    .map_err(|_| "RoiAlign: X is too large".to_string())?;
                                out.rows.push(row);
                                out.weights.push(w);
                                out.valid.push(true);
                                out.fill.push(0.0);
                            }
                        }
                    }
                    for _ in 4 * samples..corners {
                        out.rows.push(0);
                        out.weights.push(0.0);
                        out.valid.push(false);
                        out.fill.push(pad);
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies the samples to a single-channel X on the host (the runtime's reduction).
    fn apply(spec: &RoiAlignSpec, x: &[f32], s: &RoiSamples) -> Vec<f32> {
        let bins = (spec.output_height * spec.output_width) as usize;
        let mut y = Vec::new();
        for r in 0..s.rois {
            for p in 0..bins {
                let base = (r * bins + p) * s.corners;
                let vals = (base..base + s.corners).map(|i| {
                    if s.valid[i] {
                        s.weights[i] * x[s.rows[i] as usize]
                    } else {
                        s.fill[i]
                    }
                });
                y.push(if spec.max_mode {
                    vals.fold(f32::NEG_INFINITY, f32::max)
                } else {
                    vals.sum::<f32>() / s.count[r]
                });
            }
        }
        y
    }

    fn spec(max_mode: bool, half_pixel: bool, sampling_ratio: i64) -> RoiAlignSpec {
        RoiAlignSpec {
            max_mode,
            output_height: 1,
            output_width: 1,
            sampling_ratio,
            spatial_scale: 1.0,
            half_pixel,
        }
    }

    /// X = [[0, 1, 2], [3, 4, 5], [6, 7, 8]].
    fn ramp() -> Vec<f32> {
        (0..9).map(|v| v as f32).collect()
    }

    #[test]
    fn huge_adaptive_grids_are_an_error_not_an_allocation() {
        for roi in [[0.0, 0.0, 1e30, 1e30], [0.0, 0.0, f32::INFINITY, 4.0]] {
            let e = spec(false, false, 0)
                .samples(&[1, 1, 3, 3], &roi, &[0])
                .unwrap_err();
            assert!(e.contains("sample corners"), "{e}");
        }
    }

    #[test]
    fn one_sample_interpolates_bilinearly() {
        // roi [0, 0, 1, 1], output_half_pixel, 1x1 grid: the sample is at (0.5, 0.5).
        let sp = spec(false, false, 1);
        let s = sp
            .samples(&[1, 1, 3, 3], &[0.0, 0.0, 1.0, 1.0], &[0])
            .unwrap();
        assert_eq!(s.corners, 4);
        assert_eq!(s.rows, vec![0, 1, 3, 4]);
        assert_eq!(s.weights, vec![0.25; 4]);
        assert_eq!(apply(&sp, &ramp(), &s), vec![2.0]);
        // max mode takes the largest weighted corner: 0.25 * 4.
        let sp = spec(true, false, 1);
        assert_eq!(apply(&sp, &ramp(), &s), vec![1.0]);
    }

    #[test]
    fn samples_clamp_at_the_border_and_vanish_outside() {
        // A sample at (2.5, 2.5) clamps to the last pixel; one at (-1.5, -1.5) is zero.
        let sp = spec(false, false, 1);
        let s = sp
            .samples(
                &[1, 1, 3, 3],
                &[2.0, 2.0, 3.0, 3.0, -2.0, -2.0, -1.0, -1.0],
                &[0, 0],
            )
            .unwrap();
        assert_eq!(&s.rows[..4], &[8, 8, 8, 8]);
        assert_eq!(&s.weights[..4], &[1.0, 0.0, 0.0, 0.0]);
        assert_eq!(&s.weights[4..], &[0.0; 4]);
        assert_eq!(apply(&sp, &ramp(), &s), vec![8.0, 0.0]);
    }

    #[test]
    fn adaptive_grid_pads_smaller_rois() {
        // Roi 0 spans 2x2 pixels (grid 2x2), roi 1 is degenerate in half_pixel (grid 0).
        let mut sp = spec(true, true, 0);
        let s = sp
            .samples(
                &[2, 1, 3, 3],
                &[0.0, 0.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0],
                &[1, 0],
            )
            .unwrap();
        assert_eq!(s.corners, 16);
        assert_eq!(s.count, vec![4.0, 1.0]);
        assert!(s.rows[..16].iter().all(|&r| r >= 9), "batch 1 rows");
        assert!(s.valid[..16].iter().all(|&v| v));
        assert!(s.valid[16..].iter().all(|&v| !v));
        assert_eq!(&s.fill[16..], &[0.0; 16]);
        let mut x = ramp();
        x.extend(ramp());
        // Max mode: the empty roi gives 0.
        assert_eq!(apply(&sp, &x, &s)[1], 0.0);
        // Avg: half pixel shifts the roi to [-0.5, 1.5], so the samples sit at 0 and 1.
        sp.max_mode = false;
        let y = apply(&sp, &x, &s);
        assert_eq!(y[0], (0.0 + 1.0 + 3.0 + 4.0) / 4.0);
        assert_eq!(y[1], 0.0);
    }

    #[test]
    fn output_half_pixel_forces_one_pixel_rois() {
        // A degenerate roi becomes 1x1 and still samples.
        let sp = spec(false, false, 0);
        let s = sp
            .samples(&[1, 1, 3, 3], &[1.0, 1.0, 1.0, 1.0], &[0])
            .unwrap();
        assert_eq!(s.count, vec![1.0]);
        assert_eq!(apply(&sp, &ramp(), &s), vec![6.0]);
    }

    #[test]
    fn rejects_bad_batch_indices() {
        let sp = spec(false, false, 0);
        assert!(sp.samples(&[1, 1, 3, 3], &[0.0; 4], &[1]).is_err());
        assert!(sp.samples(&[1, 1, 3, 3], &[0.0; 3], &[0]).is_err());
    }
}
