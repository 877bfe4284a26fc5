//! One MLX FFT along an axis (the step ONNX `DFT` and `STFT` lower to; the packing of complex
//! values as a trailing dim of 2 is done by the lowering with `Pad` and `View` steps).

use std::fmt;

/// Which MLX transform a [`super::Step::Fft`] calls.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FftOp {
    /// `mlx_fft_fft`.
    Fft,
    /// `mlx_fft_ifft` (scaled by `1 / n`).
    Ifft,
    /// `mlx_fft_irfft`: a one-sided spectrum to a real signal.
    Irfft,
}

impl fmt::Debug for FftOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FftOp::Fft => "fft",
            FftOp::Ifft => "ifft",
            FftOp::Irfft => "irfft",
        })
    }
}

impl FftOp {
    /// MLX's default transform length for an axis of `dim` elements (`n = None` in MLX's
    /// Python API): `dim`, or `2 * (dim - 1)` for `irfft`.
    pub fn default_length(self, dim: i64) -> i64 {
        match self {
            FftOp::Fft | FftOp::Ifft => dim,
            FftOp::Irfft => 2 * (dim - 1),
        }
    }

    /// The transform length: `n` when given (one value), else [`FftOp::default_length`];
    /// an error unless positive.
    pub fn length(self, n: Option<&[i64]>, dim: i64) -> Result<i64, String> {
        let n = match n {
            Some(v) => *v.first().ok_or("FFT length is empty")?,
            None => self.default_length(dim),
        };
        if n <= 0 {
            return Err(format!("FFT length {n} must be positive"));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_follow_mlx_defaults() {
        assert_eq!(FftOp::Fft.length(None, 10), Ok(10));
        assert_eq!(FftOp::Ifft.length(Some(&[16]), 5), Ok(16));
        // irfft: 6 bins -> 10 samples by default.
        assert_eq!(FftOp::Irfft.length(None, 6), Ok(10));
        assert!(FftOp::Fft.length(Some(&[0]), 6).is_err());
        assert!(FftOp::Irfft.length(None, 1).is_err());
        assert!(FftOp::Fft.length(Some(&[]), 6).is_err());
    }
}
