//! Transposed convolution (ONNX `ConvTranspose`) as one `mlx_conv_general` call over the
//! stride-dilated input with a flipped kernel, plus a crop (a `Slice` step the lowering emits)
//! where ONNX pads exceed the kernel.

use super::{ConvArgs, shape_to_i32, to_i32};

/// How a [`ConvTransposeSpec`] decides its padding and output size (ONNX Runtime's rules).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ConvTransposePadding {
    /// Explicit `pads` (`auto_pad` NOTSET or VALID): output =
    /// `(in - 1) * stride + output_padding + (kernel - 1) * dilation + 1 - lo - hi`.
    Explicit {
        /// Padding removed before each spatial dim.
        lo: Vec<i64>,
        /// Padding removed after each spatial dim.
        hi: Vec<i64>,
    },
    /// `auto_pad` SAME_UPPER / SAME_LOWER: output = `in * stride`; an odd total padding puts
    /// the extra element at the end (`upper`) or at the start.
    Same {
        /// SAME_UPPER.
        upper: bool,
    },
    /// The `output_shape` attribute (spatial dims): the total padding is what makes the output
    /// that size (never negative; a larger output is zero-filled at the end), split as for
    /// `Same` with `upper` = SAME_UPPER, else with the extra element at the start.
    OutputShape {
        /// Output spatial dims.
        shape: Vec<i64>,
        /// `auto_pad` is SAME_UPPER.
        upper: bool,
    },
}

/// Static attributes of a [`super::Step::ConvFlipped`]: channels-last input
/// `[N, *spatial, C]`, weight already in `mlx_conv_general`'s layout `[O, *kernel, C/groups]`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConvTransposeSpec {
    /// Kernel spatial size.
    pub kernel: Vec<i64>,
    /// `strides`.
    pub strides: Vec<i64>,
    /// `dilations`.
    pub dilations: Vec<i64>,
    /// `output_padding` (added after each spatial dim).
    pub output_padding: Vec<i64>,
    /// Padding rule.
    pub padding: ConvTransposePadding,
    /// `group`.
    pub groups: i64,
}

/// Resolved arguments: `mlx_conv_general(x, w, conv...)` with `flip = true` (the
/// [`super::Step::ConvFlipped`] step), then (when any crop is non-zero) a slice removing
/// `crop_lo` / `crop_hi` elements of each spatial dim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConvTransposeArgs {
    /// The convolution (stride 1, `input_dilation` = the ONNX strides).
    pub conv: ConvArgs,
    /// Elements to drop at the start of each spatial dim of the convolution's output.
    pub crop_lo: Vec<i32>,
    /// Elements to drop at the end of each spatial dim.
    pub crop_hi: Vec<i32>,
    /// The ONNX output's spatial dims.
    pub out_spatial: Vec<i64>,
}

impl ConvTransposeArgs {
    /// True when the convolution's output needs a crop.
    pub fn needs_crop(&self) -> bool {
        self.crop_lo.iter().chain(&self.crop_hi).any(|&c| c != 0)
    }
}

/// ONNX Runtime's split of a total transposed-convolution padding: SAME_UPPER puts the odd
/// element at the end, every other mode at the start.
pub fn distribute_padding(total: i64, upper: bool) -> (i64, i64) {
    if upper {
        (total / 2, total - total / 2)
    } else {
        (total - total / 2, total / 2)
    }
}

impl ConvTransposeSpec {
    /// True when the arguments do not depend on the input's size (explicit pads within the
    /// kernel span, or SAME padding), so a shapeless compiled closure stays valid.
    pub fn is_shapeless(&self) -> bool {
        match &self.padding {
            ConvTransposePadding::Explicit { lo, hi } => (0..self.kernel.len()).all(|i| {
                lo[i] <= (self.kernel[i] - 1) * self.dilations[i]
                    && hi[i] <= (self.kernel[i] - 1) * self.dilations[i]
            }),
            ConvTransposePadding::Same { .. } => (0..self.kernel.len()).all(|i| {
                let total = (self.output_padding[i] + (self.kernel[i] - 1) * self.dilations[i] + 1
                    - self.strides[i])
                    .max(0);
                total <= (self.kernel[i] - 1) * self.dilations[i]
            }),
            ConvTransposePadding::OutputShape { .. } => false,
        }
    }

    /// The crop of each spatial dim (`lo`, `hi`) when it is known without the input's size:
    /// always for explicit and SAME padding (it does not depend on it), for `output_shape` only
    /// when every spatial dim is in `spatial` (the input's, where fixed).
    pub fn static_crop(&self, spatial: &[Option<i64>]) -> Option<(Vec<i64>, Vec<i64>)> {
        let d = self.kernel.len();
        let (mut lo, mut hi) = (Vec::with_capacity(d), Vec::with_capacity(d));
        for i in 0..d {
            let (k, s, dil, adj) = (
                self.kernel[i],
                self.strides[i],
                self.dilations[i],
                self.output_padding[i],
            );
            let span = (k - 1) * dil;
            let (head, tail, extra) = match &self.padding {
                ConvTransposePadding::Explicit { lo, hi } => (lo[i], hi[i], 0),
                // The full output less `in * stride` does not depend on `in`.
                ConvTransposePadding::Same { upper } => {
                    let (h, t) = distribute_padding((adj + span + 1 - s).max(0), *upper);
                    (h, t, 0)
                }
                ConvTransposePadding::OutputShape { shape, upper } => {
                    let n = (*spatial.get(i)?)?;
                    let want = *shape.get(i)?;
                    let full = (n - 1) * s + adj + span + 1;
                    let (h, t) = distribute_padding((full - want).max(0), *upper);
                    (h, t, (want - full).max(0))
                }
            };
            lo.push((head - span).max(0));
            hi.push((tail - span - adj - extra).max(0));
        }
        Some((lo, hi))
    }

    /// `mlx_conv_general` arguments and the crop for a channels-last input of `input_shape`.
    pub fn resolve(&self, input_shape: &[i64]) -> Result<ConvTransposeArgs, String> {
        let d = self.kernel.len();
        if input_shape.len() != d + 2 {
            return Err(format!(
                "ConvTranspose with {d} spatial dims got an input of shape {input_shape:?}"
            ));
        }
        let mut conv = ConvArgs {
            stride: vec![1; d],
            padding_lo: Vec::with_capacity(d),
            padding_hi: Vec::with_capacity(d),
            kernel_dilation: shape_to_i32(&self.dilations)?,
            input_dilation: shape_to_i32(&self.strides)?,
            groups: to_i32(self.groups, "groups")?,
        };
        let (mut crop_lo, mut crop_hi, mut out_spatial) = (vec![], vec![], vec![]);
        for i in 0..d {
            let (n, k, s, dil, adj) = (
                input_shape[1 + i],
                self.kernel[i],
                self.strides[i],
                self.dilations[i],
                self.output_padding[i],
            );
            let span = (k - 1) * dil;
            // The output before any padding is removed.
            let full = (n - 1) * s + adj + span + 1;
            let (head, tail, extra) = match &self.padding {
                ConvTransposePadding::Explicit { lo, hi } => (lo[i], hi[i], 0),
                ConvTransposePadding::Same { upper } => {
                    let (h, t) = distribute_padding((full - n * s).max(0), *upper);
                    (h, t, 0)
                }
                ConvTransposePadding::OutputShape { shape, upper } => {
                    let want = *shape
                        .get(i)
                        .ok_or("ConvTranspose output_shape is too short")?;
                    let (h, t) = distribute_padding((full - want).max(0), *upper);
                    (h, t, (want - full).max(0))
                }
            };
            let out = full - head - tail + extra;
            if out <= 0 {
                return Err(format!(
                    "ConvTranspose output dim {i} would be {out} (input {input_shape:?})"
                ));
            }
            // Convolving the stride-dilated input padded by `span - head` before and
            // `span - tail + adj + extra` after gives exactly `out` elements.
            let lo = span - head;
            let hi = span - tail + adj + extra;
            conv.padding_lo.push(to_i32(lo.max(0), "padding")?);
            conv.padding_hi.push(to_i32(hi.max(0), "padding")?);
            crop_lo.push(to_i32((-lo).max(0), "crop")?);
            crop_hi.push(to_i32((-hi).max(0), "crop")?);
            out_spatial.push(out);
        }
        Ok(ConvTransposeArgs {
            conv,
            crop_lo,
            crop_hi,
            out_spatial,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(k: i64, s: i64, d: i64, adj: i64, padding: ConvTransposePadding) -> ConvTransposeSpec {
        ConvTransposeSpec {
            kernel: vec![k],
            strides: vec![s],
            dilations: vec![d],
            output_padding: vec![adj],
            padding,
            groups: 1,
        }
    }

    fn explicit(lo: i64, hi: i64) -> ConvTransposePadding {
        ConvTransposePadding::Explicit {
            lo: vec![lo],
            hi: vec![hi],
        }
    }

    /// Output length of the convolution `resolve` describes, before the crop.
    fn conv_len(n: i64, a: &ConvTransposeArgs, k: i64) -> i64 {
        let s = a.conv.input_dilation[0] as i64;
        let d = a.conv.kernel_dilation[0] as i64;
        (n - 1) * s + 1 + a.conv.padding_lo[0] as i64 + a.conv.padding_hi[0] as i64
            - ((k - 1) * d + 1)
            + 1
    }

    #[test]
    fn output_sizes_follow_onnx_runtime() {
        // in 3, k 3, s 2: full output 7.
        let a = spec(3, 2, 1, 0, explicit(0, 0))
            .resolve(&[1, 3, 1])
            .unwrap();
        assert_eq!(a.out_spatial, vec![7]);
        assert_eq!(
            (a.conv.padding_lo.clone(), a.conv.padding_hi.clone()),
            (vec![2], vec![2])
        );
        assert!(!a.needs_crop());
        assert_eq!(conv_len(3, &a, 3), 7);
        // SAME: output in * stride = 6; total 1 -> upper drops it at the end, lower at the start.
        let a = spec(3, 2, 1, 0, ConvTransposePadding::Same { upper: true })
            .resolve(&[1, 3, 1])
            .unwrap();
        assert_eq!(a.out_spatial, vec![6]);
        assert_eq!((a.conv.padding_lo[0], a.conv.padding_hi[0]), (2, 1));
        let a = spec(3, 2, 1, 0, ConvTransposePadding::Same { upper: false })
            .resolve(&[1, 3, 1])
            .unwrap();
        assert_eq!((a.conv.padding_lo[0], a.conv.padding_hi[0]), (1, 2));
        // output_shape 4 (total 3): NOTSET puts 2 at the start, SAME_UPPER 1.
        let os = |upper| ConvTransposePadding::OutputShape {
            shape: vec![4],
            upper,
        };
        let a = spec(3, 2, 1, 0, os(false)).resolve(&[1, 3, 1]).unwrap();
        assert_eq!(a.out_spatial, vec![4]);
        assert_eq!((a.conv.padding_lo[0], a.conv.padding_hi[0]), (0, 1));
        assert_eq!(conv_len(3, &a, 3), 4);
        let a = spec(3, 2, 1, 0, os(true)).resolve(&[1, 3, 1]).unwrap();
        assert_eq!((a.conv.padding_lo[0], a.conv.padding_hi[0]), (1, 0));
        // A larger output_shape zero-fills at the end.
        let a = spec(
            3,
            2,
            1,
            0,
            ConvTransposePadding::OutputShape {
                shape: vec![9],
                upper: false,
            },
        )
        .resolve(&[1, 3, 1])
        .unwrap();
        assert_eq!(a.out_spatial, vec![9]);
        assert_eq!(conv_len(3, &a, 3), 9);
        // output_padding adds at the end; dilation widens the kernel.
        let a = spec(3, 3, 2, 1, explicit(1, 2))
            .resolve(&[1, 4, 1])
            .unwrap();
        assert_eq!(a.out_spatial, vec![(4 - 1) * 3 + 1 + 4 + 1 - 3]);
        assert_eq!(conv_len(4, &a, 3), a.out_spatial[0]);
    }

    #[test]
    fn pads_beyond_the_kernel_become_a_crop() {
        // k 2 (span 1), pads 3/2: padding would be -2 / -1.
        let a = spec(2, 1, 1, 0, explicit(3, 2))
            .resolve(&[1, 8, 1])
            .unwrap();
        assert_eq!(a.out_spatial, vec![8 + 1 - 5]);
        assert_eq!((a.conv.padding_lo[0], a.conv.padding_hi[0]), (0, 0));
        assert_eq!((a.crop_lo[0], a.crop_hi[0]), (2, 1));
        assert_eq!(
            conv_len(8, &a, 2) - (a.crop_lo[0] + a.crop_hi[0]) as i64,
            a.out_spatial[0]
        );
        assert!(a.needs_crop());
        let crop = spec(2, 1, 1, 0, explicit(3, 2)).static_crop(&[None]);
        assert_eq!(crop, Some((vec![2], vec![1])));
        let os = ConvTransposePadding::OutputShape {
            shape: vec![2],
            upper: false,
        };
        assert_eq!(spec(2, 1, 1, 0, os.clone()).static_crop(&[None]), None);
        let a = spec(2, 1, 1, 0, os.clone()).resolve(&[1, 8, 1]).unwrap();
        let crop = spec(2, 1, 1, 0, os).static_crop(&[Some(8)]);
        assert_eq!(
            crop,
            Some((vec![a.crop_lo[0] as i64], vec![a.crop_hi[0] as i64]))
        );
        let a = spec(3, 1, 1, 0, ConvTransposePadding::Same { upper: true })
            .resolve(&[1, 5, 1])
            .unwrap();
        let crop = spec(3, 1, 1, 0, ConvTransposePadding::Same { upper: true }).static_crop(&[]);
        assert_eq!(
            crop,
            Some((vec![a.crop_lo[0] as i64], vec![a.crop_hi[0] as i64]))
        );
        assert!(
            spec(2, 1, 1, 0, explicit(5, 5))
                .resolve(&[1, 3, 1])
                .is_err()
        );
        assert!(spec(2, 1, 1, 0, explicit(0, 0)).resolve(&[1, 3]).is_err());
    }
}
