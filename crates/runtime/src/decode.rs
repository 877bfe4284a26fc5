//! The KV-cache-aware decode path: what one step of a generation hands to the next.
//!
//! A plan is a *decoder with a KV cache* when some of its inputs have a matching output: the
//! input `past…` and the output named by replacing `past_key_values` with `present` (or else
//! `past` with `present`): `past_key_values.0.key` -> `present.0.key`, `past_key` ->
//! `present_key`, the layouts of Hugging Face / Optimum exports and ONNX Runtime GenAI models.
//! For such a plan every run is a step of a generation:
//!
//! - a **new generation** starts at the first run, when a cache input is empty (past length
//!   0: a new prompt), when the caller's generation key changes (the run option
//!   [`GENERATION_KEY`], given through [`RunContext`]), or when no cache input continues the
//!   previous step; everything carried is dropped then;
//! - within a generation, a cache input whose bytes equal the matching output of the previous
//!   step is bound to that output's MLX array (it stays where MLX computed it, on the GPU for a
//!   GPU plan) instead of being uploaded again, and any other input equal to its value in the
//!   previous step (an encoder's hidden states, a cross-attention cache) reuses the previous
//!   step's array.
//!
//! Equality is checked byte for byte, so a caller that edits the cache between steps (beam
//! reordering, a prefix cache) simply gets a fresh upload: results never depend on reuse.
//! `ORTMLX_DISABLE_DECODE_REUSE=1` turns the carrying off (generations are still counted,
//! from empty caches and keys).

use mlx::Array;

use crate::InputTensor;
use crate::dtype::to_mlx;

/// The run option (`OrtRunOptions` config entry) that names the generation a run belongs to.
pub const GENERATION_KEY: &str = "ep.mlx.generation_key";

/// Per-run context from the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunContext<'a> {
    /// The caller's generation key ([`GENERATION_KEY`]), when given: a change starts a new
    /// generation.
    pub generation_key: Option<&'a str>,
}

/// Counters of the decode path, for tests and diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Generations started.
    pub generations: u64,
    /// Runs (steps) seen.
    pub steps: u64,
    /// Cache inputs bound to the previous step's output array instead of an upload.
    pub carried_inputs: u64,
    /// Other inputs bound to the previous step's array of the same input.
    pub reused_inputs: u64,
}

/// How a step's input is found equal to the array kept from the previous step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compare {
    /// Same dtype, shape and bytes (the bytes are read on the host unless the input is the
    /// array's own buffer).
    Bytes,
    /// Same dtype and shape, and the input is the array's own buffer (IOBinding, device
    /// memory): nothing is read, so a GPU array stays on the GPU.
    SameBuffer,
}

/// Why a generation started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reset {
    First,
    EmptyPast,
    KeyChanged,
    Discontinued,
}

impl Reset {
    fn describe(self) -> &'static str {
        match self {
            Reset::First => "first run",
            Reset::EmptyPast => "empty past cache",
            Reset::KeyChanged => "generation key changed",
            Reset::Discontinued => "the cache does not continue the previous step",
        }
    }
}

/// The state of a decoder's current generation.
pub(crate) struct DecodeState {
    /// `(input index, output index)` of each cache pair.
    pairs: Vec<(usize, usize)>,
    /// Per input: whether it is the cache input of a pair.
    is_cache_input: Vec<bool>,
    reuse: bool,
    compare: Compare,
    key: Option<String>,
    started: bool,
    /// Per cache pair: the previous step's output array.
    carried: Vec<Option<Array>>,
    /// Per input (cache inputs excluded): the previous step's array.
    previous: Vec<Option<Array>>,
    stats: DecodeStats,
}

/// The output name that carries input `name` to the next step, by the common conventions.
fn present_name(name: &str) -> Option<String> {
    if name.contains("past_key_values") {
        Some(name.replacen("past_key_values", "present", 1))
    } else if name.contains("past") {
        Some(name.replacen("past", "present", 1))
    } else {
        None
    }
}

/// The cache pairs of a plan with these input and output names.
pub(crate) fn cache_pairs(inputs: &[&str], outputs: &[&str]) -> Vec<(usize, usize)> {
    inputs
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let want = present_name(name)?;
            outputs.iter().position(|o| *o == want).map(|o| (i, o))
        })
        .collect()
}

/// True when `array` holds exactly the tensor's dtype, shape and bytes (read as `compare`
/// says).
fn same_value(array: &Array, tensor: &InputTensor<'_>, compare: Compare) -> bool {
    if tensor.dtype.packed_bits().is_some() || to_mlx(tensor.dtype) != Ok(array.dtype()) {
        return false;
    }
    let shape = array.shape();
    shape.len() == tensor.dims.len()
        && shape
            .iter()
            .zip(tensor.dims)
            .all(|(&a, &d)| i64::from(a) == d)
        // the same bytes in place (an input bound to the array's own buffer) need no reading
        && array.as_bytes().is_ok_and(|b| {
            (b.as_ptr() == tensor.data.as_ptr() && b.len() == tensor.data.len())
                || (compare == Compare::Bytes && b == tensor.data)
        })
}

impl DecodeState {
    /// The state of a plan with `num_inputs` inputs and these cache pairs (`None` when the
    /// plan has no cache, and so no decode path), finding kept arrays equal as `compare` says.
    pub(crate) fn new(
        num_inputs: usize,
        pairs: Vec<(usize, usize)>,
        compare: Compare,
    ) -> Option<DecodeState> {
        if pairs.is_empty() {
            return None;
        }
        let disabled = crate::config().disable_decode_reuse;
        let mut is_cache_input = vec![false; num_inputs];
        for &(i, _) in &pairs {
            if let Some(c) = is_cache_input.get_mut(i) {
                *c = true;
            }
        }
        Some(DecodeState {
            is_cache_input,
            carried: vec![None; pairs.len()],
            previous: vec![None; num_inputs],
            pairs,
            reuse: !disabled,
            compare,
            key: None,
            started: false,
            stats: DecodeStats::default(),
        })
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> DecodeStats {
        self.stats
    }

    /// Starts a step: begins a new generation when one starts here, then returns, per input,
    /// the array to bind instead of uploading (`None`: upload).
    pub(crate) fn begin(
        &mut self,
        inputs: &[InputTensor<'_>],
        ctx: &RunContext<'_>,
    ) -> Vec<Option<Array>> {
        self.stats.steps += 1;
        let key_changed = ctx
            .generation_key
            .is_some_and(|k| self.key.as_deref() != Some(k));
        if let Some(k) = ctx.generation_key {
            self.key = Some(k.to_string());
        }
        let empty_past = self
            .pairs
            .iter()
            .any(|&(i, _)| inputs.get(i).is_some_and(|t| t.data.is_empty()));
        let mut bound: Vec<Option<Array>> = vec![None; inputs.len()];
        for (p, &(i, _)) in self.pairs.iter().enumerate() {
            if let (Some(a), Some(t)) = (&self.carried[p], inputs.get(i))
                && same_value(a, t, self.compare)
            {
                bound[i] = Some(a.clone());
            }
        }
        let continued = bound.iter().any(Option::is_some);
        let reset = if !self.started {
            Some(Reset::First)
        } else if empty_past {
            Some(Reset::EmptyPast)
        } else if key_changed {
            Some(Reset::KeyChanged)
        } else if self.reuse && self.compare == Compare::Bytes && !continued {
            // (comparing buffers only, an equal cache in a fresh buffer can't be told from
            // a new one, so only an empty past or a new key starts a generation)
            Some(Reset::Discontinued)
        } else {
            None
        };
        if let Some(why) = reset {
            self.started = true;
            self.stats.generations += 1;
            log::info!(
                "decode: generation {} starts ({})",
                self.stats.generations,
                why.describe()
            );
            self.carried.iter_mut().for_each(|c| *c = None);
            self.previous.iter_mut().for_each(|c| *c = None);
            return vec![None; inputs.len()];
        }
        if !self.reuse {
            return vec![None; inputs.len()];
        }
        self.stats.carried_inputs += bound.iter().filter(|b| b.is_some()).count() as u64;
        for (i, t) in inputs.iter().enumerate() {
            if bound[i].is_some() || self.is_cache_input.get(i).copied().unwrap_or(true) {
                continue;
            }
            if let Some(a) = &self.previous[i]
                && same_value(a, t, self.compare)
            {
                bound[i] = Some(a.clone());
                self.stats.reused_inputs += 1;
            }
        }
        bound
    }

    /// Ends a step: keeps this step's input arrays and the cache outputs (evaluated and
    /// row-contiguous) for the next one.
    pub(crate) fn finish(&mut self, inputs: &[Array], outputs: &[Array]) {
        if !self.reuse {
            return;
        }
        for (p, &(_, o)) in self.pairs.iter().enumerate() {
            self.carried[p] = outputs.get(o).cloned();
        }
        for (i, a) in inputs.iter().enumerate() {
            if !self.is_cache_input.get(i).copied().unwrap_or(true) {
                self.previous[i] = Some(a.clone());
            }
        }
    }
}

impl Drop for DecodeState {
    fn drop(&mut self) {
        let s = self.stats;
        log::info!(
            "decode: {} generation(s), {} step(s), {} cache input(s) carried, {} input(s) reused",
            s.generations,
            s.steps,
            s.carried_inputs,
            s.reused_inputs
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_ir::DataType;

    #[test]
    fn cache_pairs_follow_the_common_naming() {
        let inputs = [
            "input_ids",
            "attention_mask",
            "past_key_values.0.key",
            "past_key_values.0.value",
            "past_key",
            "past.1.decoder.key",
        ];
        let outputs = [
            "logits",
            "present.0.value",
            "present.0.key",
            "present_key",
            "present.1.decoder.key",
        ];
        assert_eq!(
            cache_pairs(&inputs, &outputs),
            vec![(2, 2), (3, 1), (4, 3), (5, 4)]
        );
        assert!(cache_pairs(&["x"], &["y"]).is_empty());
        assert!(DecodeState::new(1, Vec::new(), Compare::Bytes).is_none());
    }

    /// One decode step of a plan with inputs `(ids, past)` and outputs `(logits, present)`:
    /// which inputs the state binds to kept arrays.
    fn step(state: &mut DecodeState, ids: &[u8], past: &[u8]) -> Vec<bool> {
        let dims = [past.len() as i64 / 4];
        let inputs = [
            InputTensor {
                dtype: DataType::Float,
                dims: &[1],
                data: ids,
            },
            InputTensor {
                dtype: DataType::Float,
                dims: &dims,
                data: past,
            },
        ];
        let bound = state.begin(&inputs, &RunContext::default());
        let flags = bound.iter().map(Option::is_some).collect();
        let arrays: Vec<Array> = inputs
            .iter()
            .map(|t| crate::packed::array_from_bytes(t.data, &[t.dims[0] as i32], t.dtype).unwrap())
            .collect();
        state.finish(&arrays, &[arrays[0].clone(), arrays[1].clone()]);
        flags
    }

    #[test]
    fn equal_bytes_are_reused_only_when_comparing_bytes() {
        let ids = 1f32.to_ne_bytes();
        let past: Vec<u8> = [1f32, 2.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut bytes = DecodeState::new(2, vec![(1, 1)], Compare::Bytes).unwrap();
        step(&mut bytes, &ids, &past);
        assert_eq!(step(&mut bytes, &ids, &past), vec![true, true]);
        assert_eq!(bytes.stats().generations, 1);

        let mut buffers = DecodeState::new(2, vec![(1, 1)], Compare::SameBuffer).unwrap();
        step(&mut buffers, &ids, &past);
        // equal values in other buffers: uploaded again, and still the same generation
        assert_eq!(step(&mut buffers, &ids, &past), vec![false, false]);
        assert_eq!(buffers.stats().generations, 1);
        // an empty past still starts a new one
        step(&mut buffers, &ids, &[]);
        assert_eq!(buffers.stats().generations, 2);
    }
}
