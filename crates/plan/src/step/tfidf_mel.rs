//! The host computations behind the `tfidf_vectorizer` and `mel_weight_matrix` host kernels
//! (registered by `ops/text.rs` and `ops/signal.rs`): n-gram counting over integer tokens and
//! mel filter banks from scalars, as ONNX Runtime's CPU kernels compute them.

use std::collections::HashMap;

use onnx_ir::{DataType, TensorData};

/// The most elements a host kernel makes (a hostile size is an error, not an abort).
const MAX_ELEMENTS: i64 = 1 << 24;

// ---------------------------------------------------------------------------------------------
// TfIdfVectorizer.

/// ONNX `TfIdfVectorizer` `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TfIdfMode {
    /// Counts.
    Tf,
    /// 1 (or the weight) where the count is positive.
    Idf,
    /// Counts times the weights.
    TfIdf,
}

/// A validated `TfIdfVectorizer` (integer pool).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TfIdfSpec {
    /// Weighting.
    pub mode: TfIdfMode,
    /// `min_gram_length`.
    pub min_gram: usize,
    /// `max_gram_length`.
    pub max_gram: usize,
    /// `max_skip_count`.
    pub max_skip: usize,
    /// The pool's n-grams of a counted length (`min_gram..=max_gram`), each with its output
    /// index (`ngram_indexes` of its position in the pool).
    pub grams: Vec<(Vec<i64>, usize)>,
    /// `max(ngram_indexes) + 1`.
    pub output_size: usize,
    /// `weights`, indexed by output position (as ORT reads them), when given.
    pub weights: Option<Vec<f32>>,
}

impl TfIdfSpec {
    /// Validates the attributes as ORT's kernel constructor does (an error where it refuses
    /// the node or would read out of bounds).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mode: &str,
        min_gram: i64,
        max_gram: i64,
        max_skip: i64,
        ngram_counts: &[i64],
        ngram_indexes: &[i64],
        pool: &[i64],
        weights: Option<Vec<f32>>,
    ) -> Result<TfIdfSpec, String> {
        let mode = match mode {
            "TF" => TfIdfMode::Tf,
            "IDF" => TfIdfMode::Idf,
            "TFIDF" => TfIdfMode::TfIdf,
            m => return Err(format!("mode '{m}' is not TF, IDF or TFIDF")),
        };
        if min_gram < 1 {
            return Err(format!("min_gram_length {min_gram} must be positive"));
        }
        if max_gram < min_gram {
            return Err(format!(
                "max_gram_length {max_gram} is below min_gram_length {min_gram}"
            ));
        }
        if max_skip < 0 {
            return Err(format!("max_skip_count {max_skip} is negative"));
        }
        if ngram_counts.is_empty() || max_gram as usize > ngram_counts.len() {
            return Err(format!(
                "max_gram_length {max_gram} is out of ngram_counts {ngram_counts:?}"
            ));
        }
        if ngram_indexes.is_empty() || ngram_indexes.iter().any(|&i| i < 0) {
            return Err("ngram_indexes must be non-empty and non-negative".into());
        }
        let output_size = *ngram_indexes.iter().max().expect("non-empty") as usize + 1;
        if let Some(w) = &weights {
            if w.len() != ngram_indexes.len() {
                return Err(format!(
                    "{} weights for {} ngram_indexes",
                    w.len(),
                    ngram_indexes.len()
                ));
            }
            if mode != TfIdfMode::Tf && w.len() < output_size {
                return Err(format!(
                    "{} weights for {output_size} outputs (ORT reads a weight per output)",
                    w.len()
                ));
            }
        }
        if pool.is_empty() {
            return Err("pool_int64s is empty".into());
        }
        let mut grams = Vec::new();
        let mut seen = HashMap::new();
        let mut id = 0usize;
        for (k, &start) in ngram_counts.iter().enumerate() {
            let size = k + 1;
            let end = ngram_counts
                .get(k + 1)
                .copied()
                .unwrap_or(pool.len() as i64);
            if start < 0 || end < start || end as usize > pool.len() {
                return Err(format!("ngram_counts are out of bounds for {size}-grams"));
            }
            let items = (end - start) as usize;
            if !items.is_multiple_of(size) {
                return Err(format!("{items} items do not make whole {size}-grams"));
            }
            let n = items / size;
            if size >= min_gram as usize && size <= max_gram as usize {
                for g in 0..n {
                    let from = start as usize + g * size;
                    let gram = pool[from..from + size].to_vec();
                    let Some(&index) = ngram_indexes.get(id + g) else {
                        return Err(format!("ngram_indexes has no entry for n-gram {}", id + g));
                    };
                    if seen.insert(gram.clone(), ()).is_some() {
                        return Err(format!("duplicate {size}-gram {gram:?} in the pool"));
                    }
                    grams.push((gram, index as usize));
                }
            }
            id += n;
        }
        Ok(TfIdfSpec {
            mode,
            min_gram: min_gram as usize,
            max_gram: max_gram as usize,
            max_skip: max_skip as usize,
            grams,
            output_size,
            weights,
        })
    }

    /// The float32 output for tokens of `shape` (`[]`, `[C]` or `[N, C]`).
    pub fn run(&self, shape: &[i64], tokens: &[i64]) -> Result<TensorData, String> {
        let (rows, c, out_dims) = match shape {
            [] => (1usize, 1usize, vec![self.output_size as i64]),
            [c] => (1, *c as usize, vec![self.output_size as i64]),
            [n, c] if *n > 0 => (*n as usize, *c as usize, vec![*n, self.output_size as i64]),
            _ => {
                return Err(format!(
                    "TfIdfVectorizer input {shape:?} is not [C] or [N, C] with N > 0"
                ));
            }
        };
        if tokens.len() != rows * c {
            return Err(format!("read {} tokens for {shape:?}", tokens.len()));
        }
        if (rows * self.output_size) as i64 > MAX_ELEMENTS {
            return Err(format!(
                "output of {rows} x {} is larger than computed on the host",
                self.output_size
            ));
        }
        let map: HashMap<&[i64], usize> =
            self.grams.iter().map(|(g, i)| (g.as_slice(), *i)).collect();
        let mut counts = vec![0u32; rows * self.output_size];
        let mut gram = Vec::with_capacity(self.max_gram);
        for row in 0..rows {
            let x = &tokens[row * c..(row + 1) * c];
            let out = &mut counts[row * self.output_size..(row + 1) * self.output_size];
            let mut start = self.min_gram;
            for d in 1..=self.max_skip + 1 {
                for i in 0..c {
                    for n in start..=self.max_gram {
                        if i + (n - 1) * d >= c {
                            break;
                        }
                        gram.clear();
                        gram.extend((0..n).map(|k| x[i + k * d]));
                        if let Some(&idx) = map.get(gram.as_slice()) {
                            out[idx] += 1;
                        }
                    }
                }
                // Unigrams do not depend on the skip: counted at distance 1 only.
                if start == 1 {
                    start = 2;
                    if start > self.max_gram {
                        break;
                    }
                }
            }
        }
        let w = self.weights.as_deref();
        let values: Vec<f64> = counts
            .iter()
            .enumerate()
            .map(|(k, &f)| {
                let i = k % self.output_size;
                let f = f as f32;
                let v = match (self.mode, w) {
                    (TfIdfMode::Tf, _) | (TfIdfMode::TfIdf, None) => f,
                    (TfIdfMode::Idf, Some(w)) => {
                        if f > 0.0 {
                            w[i]
                        } else {
                            0.0
                        }
                    }
                    (TfIdfMode::Idf, None) => {
                        if f > 0.0 {
                            1.0
                        } else {
                            0.0
                        }
                    }
                    (TfIdfMode::TfIdf, Some(w)) => f * w[i],
                };
                v as f64
            })
            .collect();
        crate::consts::tensor_from_f64(DataType::Float, out_dims, &values)
            .ok_or_else(|| "cannot build the TfIdfVectorizer output".into())
    }
}

// ---------------------------------------------------------------------------------------------
// MelWeightMatrix.

/// Output types of `MelWeightMatrix` (ORT's kernel's; float64 stays on ORT's CPU EP).
pub const MEL_TYPES: &[DataType] = &[
    DataType::Float,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];

fn hz_to_mel(hz: f64) -> f64 {
    2595.0 * (1.0 + hz / 700.0).log10()
}

fn mel_to_hz(mel: f64) -> f64 {
    700.0 * (10f64.powf(mel / 2595.0) - 1.0)
}

/// ONNX `MelWeightMatrix` `[dft_length / 2 + 1, num_mel_bins]` as ORT computes it: the edge
/// checks in float32, the mel points in double precision, each triangle's rising edge
/// `(j - left) / (center - left)` then its falling edge `(right - j) / (right - center)`
/// (integer division for integer types).
pub fn mel_weight_matrix(
    num_mel_bins: i64,
    dft_length: i64,
    sample_rate: i64,
    lower_edge_hertz: f32,
    upper_edge_hertz: f32,
    dtype: DataType,
) -> Result<TensorData, String> {
    if num_mel_bins < 0 || dft_length < 0 || sample_rate <= 0 {
        return Err(format!(
            "MelWeightMatrix: num_mel_bins {num_mel_bins}, dft_length {dft_length} and sample_rate {sample_rate} must be non-negative (sample_rate positive)"
        ));
    }
    let bins = dft_length / 2 + 1;
    if bins.saturating_mul(num_mel_bins) > MAX_ELEMENTS {
        return Err(format!(
            "MelWeightMatrix of {bins} x {num_mel_bins} is larger than computed on the host"
        ));
    }
    let n1 = (dft_length + 1) as f32;
    let lowest = ((n1 * lower_edge_hertz) / sample_rate as f32).floor();
    let highest = ((n1 * upper_edge_hertz) / sample_rate as f32).floor();
    for (what, v) in [("lower", lowest), ("upper", highest)] {
        if !(v >= 0.0 && v < bins as f32) {
            return Err(format!(
                "MelWeightMatrix: {what}_edge_hertz produces a filter bank out of range of the dft_length and sample_rate"
            ));
        }
    }
    let m = num_mel_bins as usize;
    let low = hz_to_mel(lower_edge_hertz as f64);
    let high = hz_to_mel(upper_edge_hertz as f64);
    let step = (high - low) / ((m + 2) as f32) as f64;
    let points: Vec<usize> = (0..m + 2)
        .map(|i| {
            let hz = mel_to_hz(low + step * i as f64);
            ((dft_length + 1) as f64 * hz / sample_rate as f64)
                .floor()
                .max(0.0) as usize
        })
        .collect();
    let bins = bins as usize;
    let integer = !dtype.is_float();
    let ratio = |num: usize, den: usize| -> f64 {
        if integer {
            (num / den) as f64
        } else {
            (num as f32 / den as f32) as f64
        }
    };
    let mut y = vec![0f64; bins * m];
    let mut set = |j: usize, i: usize, v: f64| -> Result<(), String> {
        if j >= bins {
            return Err(format!(
                "MelWeightMatrix: a filter reaches spectrogram bin {j} of {bins}"
            ));
        }
        y[j * m + i] = v;
        Ok(())
    };
    for i in 0..m {
        let (left, center, right) = (points[i], points[i + 1], points[i + 2]);
        if center < left || right < center {
            return Err("MelWeightMatrix: the mel points are not increasing".into());
        }
        if center == left {
            set(center, i, 1.0)?;
        } else {
            for j in left..=center {
                set(j, i, ratio(j - left, center - left))?;
            }
        }
        if right > center {
            for j in center..right {
                set(j, i, ratio(right - j, right - center))?;
            }
        }
    }
    let dims = vec![bins as i64, m as i64];
    let t = if integer {
        let ints: Vec<i64> = y.iter().map(|&v| v as i64).collect();
        crate::consts::tensor_from_i64(dtype, dims, &ints)
    } else {
        crate::consts::tensor_from_f64(dtype, dims, &y)
    };
    t.ok_or_else(|| format!("cannot build a {dtype} MelWeightMatrix"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tfidf_counts_skip_grams() {
        // The ONNX example: bigrams with up to 5 skips.
        let spec = TfIdfSpec::new(
            "TF",
            2,
            2,
            5,
            &[0, 4],
            &[0, 1, 2, 3, 4, 5, 6],
            &[2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
            None,
        )
        .unwrap();
        let t = spec
            .run(&[12], &[1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8])
            .unwrap();
        let v: Vec<f64> = t.to_f64_vec().unwrap();
        assert_eq!(v, vec![0.0, 0.0, 0.0, 0.0, 1.0, 3.0, 1.0]);
    }

    #[test]
    fn tfidf_rejects_duplicates() {
        assert!(TfIdfSpec::new("TF", 1, 1, 0, &[0], &[0, 1], &[3, 3], None).is_err());
    }

    #[test]
    fn mel_matches_onnx_example() {
        let t = mel_weight_matrix(8, 16, 8192, 0.0, 4096.0, DataType::Float).unwrap();
        assert_eq!(t.dims, vec![9, 8]);
        let v = t.to_f64_vec().unwrap();
        assert_eq!(&v[..8], &[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }
}
