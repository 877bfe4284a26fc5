//! ONNX `DFT` as one MLX FFT along an axis, with ONNX's packing of complex values as a trailing
//! dim of 2 (real, imaginary).

use std::fmt;

use super::{HostReader, ShapeSource, Slot, normalize_axis, to_i32};

/// Static and run-time parameters of a [`super::Step::Dft`].
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DftSpec {
    /// The transformed axis (one value; negative counts from the end, the complex dim included).
    pub axis: ShapeSource,
    /// `dft_length`, when given.
    pub length: Option<ShapeSource>,
    /// `inverse`.
    pub inverse: bool,
    /// `onesided`.
    pub onesided: bool,
}

impl fmt::Debug for DftSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "axis={:?} length={:?} inverse={} onesided={}",
            self.axis, self.length, self.inverse, self.onesided
        )
    }
}

/// Which MLX transform a [`DftArgs`] calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DftKind {
    /// `mlx_fft_fft`.
    Forward,
    /// `mlx_fft_ifft` (scaled by `1 / n`).
    Inverse,
    /// `mlx_fft_irfft`: a one-sided spectrum to a real signal (`inverse` and `onesided`).
    InverseReal,
}

/// Resolved arguments of a [`super::Step::Dft`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DftArgs {
    /// The transformed axis (non-negative, not the last).
    pub axis: i32,
    /// Transform length (the signal is zero-padded or truncated to it).
    pub n: i32,
    /// The input's trailing dim is 2 (complex) rather than 1 (real).
    pub complex_in: bool,
    /// The transform.
    pub kind: DftKind,
    /// Forward one-sided: the number of leading bins kept (`n / 2 + 1`).
    pub keep: Option<i32>,
}

impl DftSpec {
    /// Arguments for an input of `input_shape` (`[..., 1 | 2]`).
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<DftArgs, String> {
        let rank = input_shape.len();
        if rank < 2 {
            return Err(format!("DFT input {input_shape:?} has no signal dim"));
        }
        let complex_in = match input_shape[rank - 1] {
            1 => false,
            2 => true,
            d => return Err(format!("DFT input's last dim is {d}, not 1 or 2")),
        };
        let axis = *self.axis.get(host)?.first().ok_or("DFT axis is empty")?;
        let axis = normalize_axis(axis, rank)?;
        if axis == rank - 1 {
            return Err("DFT axis is the complex dim".into());
        }
        let samples = input_shape[axis];
        let kind = match (self.inverse, self.onesided) {
            (true, true) => DftKind::InverseReal,
            (true, false) => DftKind::Inverse,
            (false, _) => DftKind::Forward,
        };
        let n = match &self.length {
            Some(l) => *l.get(host)?.first().ok_or("DFT dft_length is empty")?,
            None if kind == DftKind::InverseReal => 2 * (samples - 1),
            None => samples,
        };
        if n <= 0 {
            return Err(format!("DFT length {n} must be positive"));
        }
        let keep = (kind == DftKind::Forward && self.onesided).then(|| n / 2 + 1);
        Ok(DftArgs {
            axis: axis as i32,
            n: to_i32(n, "DFT length")?,
            complex_in,
            kind,
            keep: keep.map(|k| k as i32),
        })
    }

    /// Slots read on the host by [`DftSpec::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        self.axis
            .dynamic_slot()
            .into_iter()
            .chain(self.length.as_ref().and_then(ShapeSource::dynamic_slot))
            .collect()
    }

    /// Applies `f` to every slot the spec reads.
    pub fn map_slots(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        if let ShapeSource::Dynamic(s) = &mut self.axis {
            f(s);
        }
        if let Some(ShapeSource::Dynamic(s)) = &mut self.length {
            f(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoHost;
    impl HostReader for NoHost {
        fn ints(&mut self, s: Slot) -> Result<Vec<i64>, String> {
            Err(format!("unexpected read of {s:?}"))
        }
        fn floats(&mut self, s: Slot) -> Result<Vec<f64>, String> {
            Err(format!("unexpected read of {s:?}"))
        }
    }

    fn spec(axis: i64, length: Option<i64>, inverse: bool, onesided: bool) -> DftSpec {
        DftSpec {
            axis: ShapeSource::Static(vec![axis]),
            length: length.map(|l| ShapeSource::Static(vec![l])),
            inverse,
            onesided,
        }
    }

    #[test]
    fn resolves_lengths_and_kinds() {
        let a = spec(1, None, false, true)
            .resolve(&[1, 10, 3, 1], &mut NoHost)
            .unwrap();
        assert_eq!(
            (a.axis, a.n, a.complex_in, a.kind, a.keep),
            (1, 10, false, DftKind::Forward, Some(6))
        );
        let a = spec(-2, Some(16), true, false)
            .resolve(&[2, 5, 2], &mut NoHost)
            .unwrap();
        assert_eq!(
            (a.axis, a.n, a.complex_in, a.kind, a.keep),
            (1, 16, true, DftKind::Inverse, None)
        );
        // irfft: 6 bins -> 10 samples by default.
        let a = spec(1, None, true, true)
            .resolve(&[1, 6, 10, 2], &mut NoHost)
            .unwrap();
        assert_eq!((a.n, a.kind), (10, DftKind::InverseReal));
        assert!(
            spec(3, None, false, false)
                .resolve(&[1, 6, 10, 2], &mut NoHost)
                .is_err()
        );
        assert!(
            spec(1, None, false, false)
                .resolve(&[1, 6, 10, 3], &mut NoHost)
                .is_err()
        );
        assert!(
            spec(1, Some(0), false, false)
                .resolve(&[1, 6, 1], &mut NoHost)
                .is_err()
        );
    }
}
