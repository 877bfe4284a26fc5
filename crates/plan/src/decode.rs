//! Which runs of a plan one shapeless compiled closure can serve (the runtime's decode slot).
//!
//! A plan whose steps are all shape-polymorphic needs nothing more. A decoder lowered from
//! com.microsoft `GroupQueryAttention` also has the cache layout steps (`KvCache`, `GqaMask`,
//! `GqaPositions`), whose MLX calls depend on host values (`seqlens_k`,
//! `total_sequence_length`). In the common decode layout, every sequence appends its new
//! tokens right after its whole past and sees every key, and those steps trace to the same
//! shape-polymorphic calls whatever the past length: the cache is `concat(past, new)`, no
//! mask is needed, and the rotary positions are `seqlens_k + 1 - S + s`, computed on the
//! device from the `seqlens_k` array. [`Plan::decode_key`] says, from a run's input shapes and
//! host values alone (before any MLX call), whether the run is in that layout; runs with the
//! same key share one closure.

use std::collections::HashSet;

use onnx_ir::TensorData;

use crate::gqa::{GqaLayout, gqa_layout};
use crate::plan::Plan;
use crate::step::{ShapeSource, Slot, Step};

impl GqaLayout {
    /// True when every query sees every key of the present cache: [`GqaLayout::mask`] is all
    /// true (computed without building the mask).
    pub fn keeps_every_key(&self, window: i64) -> bool {
        self.offsets.iter().all(|&off| {
            // Query `s` sees keys `t <= off + s` (and `t > off + s - window`): all of them
            // for every `s` iff the first query sees the last key and the last query the first.
            let (first_last, last_last) = (off, off + self.seq - 1);
            self.seq > 0
                && first_last >= self.present_len - 1
                && (window <= 0 || last_last - window < 0)
        })
    }

    /// True when the present cache is the whole past followed by the new tokens of every
    /// sequence (no padding, no static-cache tail), outside the first prompt: the layout that
    /// the decode slot's closure serves.
    pub fn appends_to_whole_past(&self, past_len: i64) -> bool {
        !self.first_prompt
            && self.present_len == past_len + self.seq
            && self.offsets.iter().all(|&o| o == past_len)
    }
}

/// The host values a step reads, as the runtime has them before the run.
pub trait HostValues {
    /// The value of a host-program result or of a plan input read on the host.
    fn value(&self, slot: Slot) -> Option<&TensorData>;
    /// The shape of plan input `slot`, when `slot` is a plan input.
    fn input_shape(&self, slot: Slot) -> Option<&[i64]>;
}

impl Plan {
    /// Slots whose values are known on the host without a device read and may shape a
    /// compiled trace: the host program's results, the results of `HostEval` steps (computed
    /// while tracing, from shapes), and the integer or bool plan inputs of rank 0 or 1 (shape
    /// vectors, lengths: ORT hands inputs over in host memory). Larger
    /// inputs that a step reads whole (`NonZero` of a feed) keep the plan eager, so that no
    /// closure is compiled per input value.
    pub fn host_known_slots(&self) -> HashSet<Slot> {
        let small_ints = self.inputs.iter().filter(|i| {
            crate::host::host_dtype(i.dtype) && i.shape.as_ref().is_some_and(|d| d.len() <= 1)
        });
        let host_evals = self.steps.iter().filter_map(|s| match s {
            Step::HostEval { out, .. } => Some(*out),
            _ => None,
        });
        self.host
            .outputs
            .iter()
            .map(|(_, s)| *s)
            .chain(small_ints.map(|i| i.slot))
            .chain(host_evals)
            .collect()
    }

    /// The slots that steps read on the host (their values shape the MLX calls, so a compiled
    /// closure is only valid for the values it was traced with).
    pub fn host_read_slots(&self) -> Vec<Slot> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for s in &self.steps {
            for r in s.host_reads() {
                if seen.insert(r) {
                    out.push(r);
                }
            }
        }
        out
    }

    /// True when some runs of the plan may share one shapeless compiled closure: no
    /// `HostEval` step, every host read is known before the run, and every GroupQueryAttention layout step has no
    /// attention bias and a past cache that is a plan input. (Whether the steps that are not
    /// shape-polymorphic depend on the past length is checked at run time, see
    /// [`DecodeKey::varying`].)
    pub fn decode_compilable(&self) -> bool {
        // `HostEval` results are baked into a trace as constants: they identify it.
        if self
            .steps
            .iter()
            .any(|s| matches!(s, Step::HostEval { .. }))
        {
            return false;
        }
        let known = self.host_known_slots();
        let input_slots: HashSet<Slot> = self.inputs.iter().map(|i| i.slot).collect();
        self.steps.iter().all(|s| {
            let layout_ok = match s {
                Step::KvCache { past, .. } | Step::GqaPositions { past, .. } => {
                    past.is_some_and(|p| input_slots.contains(&p))
                }
                Step::GqaMask { past, bias, .. } => {
                    bias.is_none() && past.is_some_and(|p| input_slots.contains(&p))
                }
                _ => true,
            };
            layout_ok && s.host_reads().iter().all(|r| known.contains(r))
        })
    }

    /// The key of the shapeless closure that serves a run, or `None` when this run needs
    /// another path. Call only for a plan that is [`Plan::decode_compilable`]. A plan without
    /// layout steps is keyed by its exact input shapes (and host-read values). Otherwise every layout
    /// step must be in the decode layout (see the module doc) with the same past and total
    /// length; the key then holds each layout step's batch and query length, and the input
    /// shapes with the dims that grow with the past (see [`DecodeKey::varying`]) as `-1`.
    pub fn decode_key(&self, shapes: &[Vec<i64>], host: &dyn HostValues) -> Option<DecodeKey> {
        let mut key = DecodeKey::default();
        let mut lengths: Option<(i64, i64)> = None;
        for s in &self.steps {
            let (seqlens, total, past, window) = match s {
                Step::KvCache {
                    seqlens,
                    total,
                    past,
                    ..
                }
                | Step::GqaPositions {
                    seqlens,
                    total,
                    past,
                    ..
                } => (seqlens, total, past, 0),
                Step::GqaMask {
                    seqlens,
                    total,
                    past,
                    window,
                    ..
                } => (seqlens, total, past, *window),
                _ => continue,
            };
            let past_len = *host.input_shape((*past)?)?.get(2)?;
            let seqlens = host.value(*seqlens)?.to_i64_vec()?;
            let total = match total {
                ShapeSource::Static(v) => *v.first()?,
                ShapeSource::Dynamic(slot) => *host.value(*slot)?.to_i64_vec()?.first()?,
            };
            if lengths.is_some_and(|l| l != (past_len, total)) {
                return None;
            }
            lengths = Some((past_len, total));
            let seq = total - past_len;
            let batch = seqlens.len() as i64;
            let l = gqa_layout(batch, seq, Some(past_len), &seqlens, total).ok()?;
            if !l.appends_to_whole_past(past_len) || !l.keeps_every_key(window) {
                return None;
            }
            key.layout.extend([batch, seq]);
        }
        // Values read by the other steps are baked into the trace: they identify it.
        let mut read = HashSet::new();
        for s in self.steps.iter().filter(|s| !s.is_decode_layout()) {
            for r in s.host_reads() {
                if read.insert(r) {
                    key.read_values.push(host.value(r)?.bytes.to_vec());
                }
            }
        }
        let Some((past_len, total)) = lengths else {
            // Without layout steps nothing says which dims may vary: a trace serves the exact
            // input shapes it was made for (its reshapes and slices are baked in).
            key.shapes = shapes.to_vec();
            return Some(key);
        };
        key.shapes = shapes.to_vec();
        for (i, (input, shape)) in self.inputs.iter().zip(shapes).enumerate() {
            let declared = input.shape.as_deref().unwrap_or(&[]);
            for (d, v) in shape.iter().enumerate() {
                let fixed = declared.get(d).and_then(onnx_ir::Dim::fixed).is_some();
                if !fixed && (*v == past_len || *v == total) {
                    key.varying.push((i, d));
                    key.shapes[i][d] = -1;
                }
            }
        }
        Some(key)
    }
}

/// What identifies the decode closure that serves a run (see [`Plan::decode_key`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodeKey {
    /// Batch and query length of each layout step.
    pub layout: Vec<i64>,
    /// The values that the steps other than the layout steps read on the host.
    pub read_values: Vec<Vec<u8>>,
    /// The input shapes, with the dims in [`DecodeKey::varying`] as `-1` (none vary in a plan
    /// without layout steps).
    pub shapes: Vec<Vec<i64>>,
    /// The (input, dim) pairs that grow with the past: dims not fixed in the declared shape
    /// whose run value is the past or the total length. A closure traced for one past length
    /// serves the others only when the steps that are not shape-polymorphic see the same
    /// shapes whatever these dims are (the runtime checks that once, with a second trace).
    pub varying: Vec<(usize, usize)>,
}

impl Step {
    /// True for the GroupQueryAttention layout steps, which have a shape-polymorphic form in
    /// the decode layout (see [`Plan::decode_key`]).
    pub fn is_decode_layout(&self) -> bool {
        matches!(
            self,
            Step::KvCache { .. } | Step::GqaMask { .. } | Step::GqaPositions { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_every_key_agrees_with_the_mask() {
        for (batch, seq, past, seqlens, total) in [
            (1, 1, Some(5), vec![5], 6),
            (2, 1, Some(8), vec![4, 6], 7),
            (1, 3, Some(5), vec![7], 8),
            (1, 4, None, vec![3], 4),
            (2, 1, Some(3), vec![3, 3], 4),
            (1, 1, Some(0), vec![0], 1),
        ] {
            let l = gqa_layout(batch, seq, past, &seqlens, total).unwrap();
            for window in [-1, 0, 1, 2, 3, 4, 5, 6, 7, 100] {
                assert_eq!(
                    l.keeps_every_key(window),
                    l.mask_is_trivial(window),
                    "{l:?} window {window}"
                );
            }
        }
    }

    #[test]
    fn appends_to_whole_past_only_in_the_decode_layout() {
        assert!(
            gqa_layout(1, 1, Some(5), &[5], 6)
                .unwrap()
                .appends_to_whole_past(5)
        );
        assert!(
            gqa_layout(2, 1, Some(3), &[3, 3], 4)
                .unwrap()
                .appends_to_whole_past(3)
        );
        // Ragged batch, static cache, first prompt.
        assert!(
            !gqa_layout(2, 1, Some(8), &[4, 6], 7)
                .unwrap()
                .appends_to_whole_past(8)
        );
        assert!(
            !gqa_layout(1, 3, Some(8), &[2], 3)
                .unwrap()
                .appends_to_whole_past(8)
        );
        // A padded row keeps less than its whole past.
        assert!(
            !gqa_layout(2, 1, Some(4), &[4, 2], 5)
                .unwrap()
                .appends_to_whole_past(4)
        );
    }
}
