//! Convolution, pooling, padding and window specs.

use std::fmt;

use super::{HostReader, ShapeSource, Slot, normalize_axes, shape_to_i32, to_i32};

// ---------------------------------------------------------------------------------------------
// Convolution and pooling.

/// How spatial padding is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AutoPad {
    /// Explicit `pads` (low and high per spatial dim).
    Explicit {
        /// Padding before each spatial dim.
        lo: Vec<i64>,
        /// Padding after each spatial dim.
        hi: Vec<i64>,
    },
    /// `SAME_UPPER`: output = ceil(input / stride), extra padding at the end.
    SameUpper,
    /// `SAME_LOWER`: as `SAME_UPPER`, extra padding at the start.
    SameLower,
}

/// Spatial padding of SAME auto-pad for one dim.
pub fn same_pads(input: i64, kernel: i64, stride: i64, dilation: i64, upper: bool) -> (i64, i64) {
    let out = (input + stride - 1) / stride;
    let eff_k = (kernel - 1) * dilation + 1;
    let total = ((out - 1) * stride + eff_k - input).max(0);
    let small = total / 2;
    if upper {
        (small, total - small)
    } else {
        (total - small, small)
    }
}

impl AutoPad {
    /// Low and high pads per spatial dim for the given spatial input dims.
    pub fn resolve(
        &self,
        input_spatial: &[i64],
        kernel: &[i64],
        strides: &[i64],
        dilations: &[i64],
    ) -> (Vec<i64>, Vec<i64>) {
        match self {
            AutoPad::Explicit { lo, hi } => (lo.clone(), hi.clone()),
            AutoPad::SameUpper | AutoPad::SameLower => {
                let upper = matches!(self, AutoPad::SameUpper);
                input_spatial
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| same_pads(d, kernel[i], strides[i], dilations[i], upper))
                    .unzip()
            }
        }
    }
}

/// Static attributes of a [`Step::Conv`](super::Step::Conv) (channels-last: input
/// `[N, *spatial, C]`, weight `[O, *kernel, C/groups]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConvSpec {
    /// Kernel spatial size (from the weight's shape).
    pub kernel: Vec<i64>,
    /// Strides per spatial dim.
    pub strides: Vec<i64>,
    /// Kernel dilations per spatial dim.
    pub dilations: Vec<i64>,
    /// Padding.
    pub padding: AutoPad,
    /// Groups.
    pub groups: i64,
    /// Integer-valued operands whose float32 result must be exact (ConvInteger and
    /// QLinearConv): the runtime convolves these on MLX's CPU stream, since GPU convolution
    /// libraries may pick transform-based algorithms (Winograd, FFT) that round.
    pub exact_integers: bool,
}

/// Resolved `mlx_conv_general` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConvArgs {
    /// `stride`.
    pub stride: Vec<i32>,
    /// `padding_lo`.
    pub padding_lo: Vec<i32>,
    /// `padding_hi`.
    pub padding_hi: Vec<i32>,
    /// `kernel_dilation`.
    pub kernel_dilation: Vec<i32>,
    /// `input_dilation` (all ones).
    pub input_dilation: Vec<i32>,
    /// `groups`.
    pub groups: i32,
}

impl ConvSpec {
    /// `mlx_conv_general` arguments for a channels-last input of `input_shape`
    /// (`[N, *spatial, C]`).
    pub fn resolve(&self, input_shape: &[i64]) -> Result<ConvArgs, String> {
        let d = self.kernel.len();
        if input_shape.len() != d + 2 {
            return Err(format!(
                "Conv with {d} spatial dims got an input of shape {input_shape:?}"
            ));
        }
        let spatial = &input_shape[1..1 + d];
        let (lo, hi) = self
            .padding
            .resolve(spatial, &self.kernel, &self.strides, &self.dilations);
        Ok(ConvArgs {
            stride: shape_to_i32(&self.strides)?,
            padding_lo: shape_to_i32(&lo)?,
            padding_hi: shape_to_i32(&hi)?,
            kernel_dilation: shape_to_i32(&self.dilations)?,
            input_dilation: vec![1; d],
            groups: to_i32(self.groups, "groups")?,
        })
    }
}

/// Static attributes of ONNX `MaxPool`/`AveragePool` over an NC* (channels-first) input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PoolSpec {
    /// `kernel_shape`.
    pub kernel: Vec<i64>,
    /// `strides`.
    pub strides: Vec<i64>,
    /// `dilations`.
    pub dilations: Vec<i64>,
    /// `pads` / `auto_pad`.
    pub padding: AutoPad,
    /// `ceil_mode`.
    pub ceil_mode: bool,
    /// AveragePool `count_include_pad` (counts explicit/auto pads, never the ceil-mode tail).
    pub count_include_pad: bool,
}

/// Per-spatial-dim geometry of a pool for one input shape.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PoolGeometry {
    /// Output spatial dims.
    pub out: Vec<i64>,
    /// Padding before each spatial dim.
    pub pad_lo: Vec<i64>,
    /// Padding after each spatial dim, including the ceil-mode tail.
    pub pad_hi: Vec<i64>,
    /// The part of `pad_hi` that only ceil mode added (never counted by AveragePool).
    pub ceil_tail: Vec<i64>,
}

impl PoolSpec {
    /// Output size and padding for the given spatial input dims.
    pub fn geometry(&self, input_spatial: &[i64]) -> Result<PoolGeometry, String> {
        let d = self.kernel.len();
        if input_spatial.len() != d {
            return Err(format!(
                "pool with {d} spatial dims got spatial input {input_spatial:?}"
            ));
        }
        let (lo, hi) =
            self.padding
                .resolve(input_spatial, &self.kernel, &self.strides, &self.dilations);
        let mut g = PoolGeometry {
            out: Vec::with_capacity(d),
            pad_lo: lo.clone(),
            pad_hi: Vec::with_capacity(d),
            ceil_tail: Vec::with_capacity(d),
        };
        for i in 0..d {
            let (n, k, s, dil) = (
                input_spatial[i],
                self.kernel[i],
                self.strides[i],
                self.dilations[i],
            );
            let eff_k = (k - 1) * dil + 1;
            let padded = n + lo[i] + hi[i];
            if padded < eff_k {
                return Err(format!(
                    "pool window {eff_k} is larger than the padded input {padded}"
                ));
            }
            let span = padded - eff_k;
            let mut out = if self.ceil_mode
                && !matches!(self.padding, AutoPad::SameUpper | AutoPad::SameLower)
            {
                (span + s - 1) / s + 1
            } else {
                span / s + 1
            };
            if self.ceil_mode && out > 1 && (out - 1) * s >= n + lo[i] {
                out -= 1;
            }
            let needed = (out - 1) * s + eff_k;
            let tail = (needed - padded).max(0);
            g.out.push(out);
            g.pad_hi.push(hi[i] + tail);
            g.ceil_tail.push(tail);
        }
        Ok(g)
    }

    /// AveragePool divisors for a channels-first input of `input_shape`: the output's spatial
    /// shape (as `[1, 1, *out]`, broadcasting over N and C) and the number of counted elements
    /// of every window, row-major.
    pub fn divisor(&self, input_shape: &[i64]) -> Result<(Vec<i32>, Vec<f32>), String> {
        let d = self.kernel.len();
        if input_shape.len() != d + 2 {
            return Err(format!("pool input {input_shape:?} is not rank {}", d + 2));
        }
        let spatial = &input_shape[2..];
        let g = self.geometry(spatial)?;
        // Per dim: the count of each output position's window, then an outer product.
        let per_dim: Vec<Vec<i64>> = (0..d)
            .map(|i| {
                let (n, k, s, dil) = (
                    spatial[i],
                    self.kernel[i],
                    self.strides[i],
                    self.dilations[i],
                );
                let lo = g.pad_lo[i];
                let hi = g.pad_hi[i] - g.ceil_tail[i];
                let (lower, upper) = if self.count_include_pad {
                    (-lo, n + hi)
                } else {
                    (0, n)
                };
                (0..g.out[i])
                    .map(|o| {
                        let first = o * s - lo;
                        (0..k)
                            .map(|j| first + j * dil)
                            .filter(|&p| p >= lower && p < upper)
                            .count() as i64
                    })
                    .collect()
            })
            .collect();
        let total: usize = g.out.iter().map(|&o| o as usize).product();
        let mut values = Vec::with_capacity(total);
        let mut idx = vec![0usize; d];
        for _ in 0..total {
            let c: i64 = (0..d).map(|i| per_dim[i][idx[i]]).product();
            values.push(c as f32);
            for i in (0..d).rev() {
                idx[i] += 1;
                if (idx[i] as i64) < g.out[i] {
                    break;
                }
                idx[i] = 0;
            }
        }
        let mut shape = vec![1i32, 1];
        shape.extend(shape_to_i32(&g.out)?);
        Ok((shape, values))
    }
}

/// Padding of a [`Step::Pad`](super::Step::Pad).
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PadSpec {
    /// Fixed pads per axis.
    Static {
        /// Axes padded.
        axes: Vec<i32>,
        /// Padding before.
        lo: Vec<i32>,
        /// Padding after.
        hi: Vec<i32>,
    },
    /// The spatial padding of a pool (channels-first input), ceil-mode tail included.
    Pool(PoolSpec),
    /// ONNX `Pad` `pads` input (`[lo..., hi...]`), with optional `axes`.
    Onnx {
        /// The `pads` values.
        pads: ShapeSource,
        /// The `axes` values, when given (opset 18).
        axes: Option<ShapeSource>,
    },
}

impl fmt::Debug for PadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadSpec::Static { axes, lo, hi } => write!(f, "axes={axes:?} lo={lo:?} hi={hi:?}"),
            PadSpec::Pool(p) => write!(
                f,
                "pool(kernel={:?} strides={:?} dilations={:?} {:?} ceil={})",
                p.kernel, p.strides, p.dilations, p.padding, p.ceil_mode
            ),
            PadSpec::Onnx { pads, axes } => write!(f, "onnx(pads={pads:?}, axes={axes:?})"),
        }
    }
}

/// How a pad fills the new positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PadMode {
    /// `"constant"`: fill with the value.
    Constant,
    /// `"edge"`: repeat the border element (ONNX `edge`).
    Edge,
    /// ONNX `reflect`: mirror the elements next to the border, the border excluded.
    Reflect,
    /// ONNX `wrap`: continue periodically from the opposite side.
    Wrap,
}

impl PadMode {
    /// The mode string `mlx_pad` takes, or `None` for modes done by gathering
    /// ([`PadMode::source_indices`]).
    pub fn mlx_mode(self) -> Option<&'static str> {
        match self {
            PadMode::Constant => Some("constant"),
            PadMode::Edge => Some("edge"),
            PadMode::Reflect | PadMode::Wrap => None,
        }
    }

    /// For a gathering mode, the source index of each position along an axis of length `n`
    /// padded by `lo` before and `hi` after. As in ONNX Runtime, a reflect pad must be below
    /// `n`, while wrap repeats the axis as often as the pads need.
    pub fn source_indices(self, n: i64, lo: i64, hi: i64) -> Result<Vec<i32>, String> {
        let name = match self {
            PadMode::Reflect => "reflect",
            PadMode::Wrap => "wrap",
            PadMode::Constant | PadMode::Edge => {
                return Err(format!("{self:?} pads are not gathered"));
            }
        };
        let too_wide = self == PadMode::Reflect && (lo > n - 1 || hi > n - 1);
        if lo < 0 || hi < 0 || too_wide || (n == 0 && lo + hi > 0) || n > i64::from(i32::MAX) {
            return Err(format!(
                "Pad {name}: pads {lo} and {hi} are out of range for a dimension of {n}{}",
                if self == PadMode::Reflect {
                    " (at most the dimension minus 1)"
                } else {
                    ""
                }
            ));
        }
        Ok((-lo..n + hi)
            .map(|i| {
                let j = match self {
                    PadMode::Reflect if i < 0 => -i,
                    PadMode::Reflect if i >= n => 2 * (n - 1) - i,
                    PadMode::Reflect => i,
                    _ => i.rem_euclid(n),
                };
                j as i32
            })
            .collect())
    }
}

/// Resolved `mlx_pad` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PadArgs {
    /// `axes`.
    pub axes: Vec<i32>,
    /// `low_pad_size`.
    pub lo: Vec<i32>,
    /// `high_pad_size`.
    pub hi: Vec<i32>,
}

impl PadSpec {
    /// `mlx_pad` arguments for an input of `input_shape`.
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<PadArgs, String> {
        match self {
            PadSpec::Static { axes, lo, hi } => Ok(PadArgs {
                axes: axes.clone(),
                lo: lo.clone(),
                hi: hi.clone(),
            }),
            PadSpec::Pool(p) => {
                let d = p.kernel.len();
                if input_shape.len() != d + 2 {
                    return Err(format!("pool input {input_shape:?} is not rank {}", d + 2));
                }
                let g = p.geometry(&input_shape[2..])?;
                Ok(PadArgs {
                    axes: (2..2 + d as i32).collect(),
                    lo: shape_to_i32(&g.pad_lo)?,
                    hi: shape_to_i32(&g.pad_hi)?,
                })
            }
            PadSpec::Onnx { pads, axes } => {
                let pads = pads.get(host)?;
                let rank = input_shape.len();
                let axes: Vec<i64> = match axes {
                    Some(a) => a.get(host)?,
                    None => (0..rank as i64).collect(),
                };
                let axes = normalize_axes(&axes, rank)?;
                if pads.len() != 2 * axes.len() {
                    return Err(format!(
                        "Pad has {} pads for {} axes",
                        pads.len(),
                        axes.len()
                    ));
                }
                let n = axes.len();
                for i in 0..n {
                    if pads[i] < 0 || pads[n + i] < 0 {
                        return Err("negative pads are not supported".into());
                    }
                }
                Ok(PadArgs {
                    axes: axes.iter().map(|&a| a as i32).collect(),
                    lo: shape_to_i32(&pads[..n])?,
                    hi: shape_to_i32(&pads[n..])?,
                })
            }
        }
    }

    /// Slots read on the host by [`PadSpec::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        match self {
            PadSpec::Onnx { pads, axes } => pads
                .dynamic_slot()
                .into_iter()
                .chain(axes.as_ref().and_then(ShapeSource::dynamic_slot))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Sliding windows over the trailing spatial dims of a channels-first input, for pooling.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WindowSpec {
    /// Window size per spatial dim.
    pub kernel: Vec<i64>,
    /// Window step per spatial dim.
    pub strides: Vec<i64>,
    /// Element spacing inside a window per spatial dim.
    pub dilations: Vec<i64>,
}

/// Resolved `mlx_as_strided` arguments (element strides of a row-contiguous input).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WindowArgs {
    /// `shape`: `[N, C, *out, *kernel]`.
    pub shape: Vec<i32>,
    /// `strides`, in elements.
    pub strides: Vec<i64>,
    /// `offset` (always 0).
    pub offset: usize,
}

impl WindowSpec {
    /// `mlx_as_strided` arguments for an (already padded) input of `input_shape`.
    pub fn resolve(&self, input_shape: &[i64]) -> Result<WindowArgs, String> {
        let d = self.kernel.len();
        let rank = input_shape.len();
        if rank < d {
            return Err(format!("windows of rank {d} over input {input_shape:?}"));
        }
        let lead = rank - d;
        let mut contiguous = vec![1i64; rank];
        for i in (0..rank.saturating_sub(1)).rev() {
            contiguous[i] = contiguous[i + 1] * input_shape[i + 1];
        }
        let mut shape: Vec<i64> = input_shape[..lead].to_vec();
        let mut strides: Vec<i64> = contiguous[..lead].to_vec();
        for i in 0..d {
            let eff_k = (self.kernel[i] - 1) * self.dilations[i] + 1;
            let n = input_shape[lead + i];
            if n < eff_k {
                return Err(format!("window {eff_k} is larger than dim {n}"));
            }
            shape.push((n - eff_k) / self.strides[i] + 1);
            strides.push(contiguous[lead + i] * self.strides[i]);
        }
        for i in 0..d {
            shape.push(self.kernel[i]);
            strides.push(contiguous[lead + i] * self.dilations[i]);
        }
        Ok(WindowArgs {
            shape: shape_to_i32(&shape)?,
            strides,
            offset: 0,
        })
    }
}
