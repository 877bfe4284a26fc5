//! Run-time layout of `com.microsoft` GroupQueryAttention: where each sequence's past ends in
//! the KV cache, how long the present cache is, which keys each query sees and at which
//! rotary positions it sits. Pure functions of the host values `seqlens_k` and
//! `total_sequence_length` and of input shapes, mirroring ORT's CPU kernel (1.31):
//!
//! - the present cache holds `max(total_sequence_length, past_len)` positions (a "dynamic"
//!   cache grows by the new tokens, a "static" one keeps the past buffer's length);
//! - a run is the first prompt when `sequence_length == total_sequence_length`: the new keys
//!   go to position 0 of every sequence. Otherwise sequence `b` holds `seqlens_k[b] + 1`
//!   tokens after this run, so its `past_b = seqlens_k[b] + 1 - sequence_length` cached
//!   positions are kept and the new keys follow them;
//! - cache positions after `past_b + sequence_length` are zero;
//! - query `s` of sequence `b` attends to keys `t <= past_b + s`, and with a local window of
//!   `w > 0` only to the last `w` of them (`t > past_b + s - w`);
//! - rotary positions are `past_b + s`; given `position_ids` are used as they are, except in
//!   the first prompt, where ORT reads only the first one and counts up from it.

/// The layout of one GroupQueryAttention run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GqaLayout {
    /// Batch size.
    pub batch: usize,
    /// New tokens per sequence (query length).
    pub seq: i64,
    /// Length of the present key/value cache.
    pub present_len: i64,
    /// Positions of the past cache each sequence keeps (where its new keys start).
    pub offsets: Vec<i64>,
    /// `sequence_length == total_sequence_length`.
    pub first_prompt: bool,
}

/// The layout for queries of `batch` x `seq` tokens, a past cache of `past_len` positions
/// (`None` without one), `seqlens_k` (one per sequence) and `total_sequence_length`.
pub fn gqa_layout(
    batch: i64,
    seq: i64,
    past_len: Option<i64>,
    seqlens_k: &[i64],
    total: i64,
) -> Result<GqaLayout, String> {
    if seqlens_k.len() as i64 != batch {
        return Err(format!(
            "GroupQueryAttention: seqlens_k has {} values for a batch of {batch}",
            seqlens_k.len()
        ));
    }
    let past = past_len.unwrap_or(0);
    if total != past + seq && !(past_len.is_some() && total <= past) {
        return Err(format!(
            "GroupQueryAttention: total_sequence_length {total} must equal the past length {past} \
             plus the new length {seq} (dynamic cache) or be at most the past length (static cache)"
        ));
    }
    if total < seq {
        return Err(format!(
            "GroupQueryAttention: total_sequence_length {total} is below the sequence length {seq}"
        ));
    }
    let present_len = total.max(past);
    let first_prompt = seq == total;
    let mut offsets = Vec::with_capacity(batch as usize);
    for (b, &k) in seqlens_k.iter().enumerate() {
        let off = if first_prompt { 0 } else { k + 1 - seq };
        if off < 0 || off + seq > present_len || (past_len.is_none() && off > 0) || off > past {
            return Err(format!(
                "GroupQueryAttention: seqlens_k[{b}] = {k} is out of range for {seq} new tokens, \
                 a past of {past} and a present cache of {present_len}"
            ));
        }
        offsets.push(off);
    }
    Ok(GqaLayout {
        batch: batch as usize,
        seq,
        present_len,
        offsets,
        first_prompt,
    })
}

impl GqaLayout {
    /// The common offset when every sequence has the same one.
    pub fn uniform_offset(&self) -> Option<i64> {
        let first = *self.offsets.first()?;
        self.offsets.iter().all(|&o| o == first).then_some(first)
    }

    /// Rotary positions, `[batch * seq]` row-major; `position_ids` (`[batch * seq]`) when given.
    pub fn positions(&self, position_ids: Option<&[i64]>) -> Result<Vec<i64>, String> {
        let n = self.batch * self.seq as usize;
        match position_ids {
            Some(p) if self.first_prompt => {
                let start = *p
                    .first()
                    .ok_or("GroupQueryAttention: position_ids is empty")?;
                Ok((0..n).map(|i| start + (i as i64 % self.seq)).collect())
            }
            Some(p) => {
                if p.len() != n {
                    return Err(format!(
                        "GroupQueryAttention: position_ids has {} values, expected {n}",
                        p.len()
                    ));
                }
                Ok(p.to_vec())
            }
            None => Ok((0..n)
                .map(|i| self.offsets[i / self.seq as usize] + (i as i64 % self.seq))
                .collect()),
        }
    }

    /// The keep-mask `[batch, 1, seq, present_len]` row-major: causal within each sequence's
    /// tokens, limited to the last `window` keys when `window > 0`.
    pub fn mask(&self, window: i64) -> Vec<bool> {
        let (s_len, p_len) = (self.seq, self.present_len);
        let mut m = Vec::with_capacity(self.batch * (s_len * p_len) as usize);
        for &off in &self.offsets {
            for s in 0..s_len {
                let last = off + s;
                for t in 0..p_len {
                    m.push(t <= last && (window <= 0 || t > last - window));
                }
            }
        }
        m
    }

    /// True when [`GqaLayout::mask`] keeps every key of the present cache for every query
    /// (so no mask is needed).
    pub fn mask_is_trivial(&self, window: i64) -> bool {
        self.mask(window).iter().all(|&k| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_prompt_without_past() {
        let l = gqa_layout(2, 4, None, &[3, 3], 4).unwrap();
        assert_eq!(l.present_len, 4);
        assert_eq!(l.offsets, vec![0, 0]);
        assert!(l.first_prompt);
        assert_eq!(l.positions(None).unwrap(), vec![0, 1, 2, 3, 0, 1, 2, 3]);
        // Causal.
        let m = l.mask(-1);
        assert_eq!(
            &m[..8],
            &[true, false, false, false, true, true, false, false]
        );
        // position_ids in the first prompt: the first one, counting up.
        assert_eq!(
            l.positions(Some(&[5, 9, 9, 9, 0, 0, 0, 0])).unwrap(),
            vec![5, 6, 7, 8, 5, 6, 7, 8]
        );
    }

    #[test]
    fn dynamic_cache_decode() {
        // Past of 5, one new token, total 6: the new key goes to position 5.
        let l = gqa_layout(1, 1, Some(5), &[5], 6).unwrap();
        assert_eq!((l.present_len, l.offsets.clone()), (6, vec![5]));
        assert!(!l.first_prompt);
        assert!(l.mask_is_trivial(-1));
        assert_eq!(l.positions(None).unwrap(), vec![5]);
        // A window of 3 keeps keys 3, 4, 5.
        assert_eq!(l.mask(3), vec![false, false, false, true, true, true]);
    }

    #[test]
    fn static_cache_ragged_batch() {
        let l = gqa_layout(2, 1, Some(8), &[4, 6], 7).unwrap();
        assert_eq!(l.present_len, 8);
        assert_eq!(l.offsets, vec![4, 6]);
        assert_eq!(l.uniform_offset(), None);
        let m = l.mask(-1);
        assert_eq!(
            &m[..8],
            &[true, true, true, true, true, false, false, false]
        );
        assert_eq!(&m[8..], &[true, true, true, true, true, true, true, false]);
        assert_eq!(l.positions(None).unwrap(), vec![4, 6]);
        // A static cache's first prompt.
        let l = gqa_layout(1, 3, Some(8), &[2], 3).unwrap();
        assert_eq!(
            (l.present_len, l.offsets.clone(), l.first_prompt),
            (8, vec![0], true)
        );
    }

    #[test]
    fn subsequent_prompt() {
        let l = gqa_layout(1, 3, Some(5), &[7], 8).unwrap();
        assert_eq!((l.present_len, l.offsets.clone()), (8, vec![5]));
        assert_eq!(l.positions(None).unwrap(), vec![5, 6, 7]);
        assert_eq!(l.positions(Some(&[10, 11, 12])).unwrap(), vec![10, 11, 12]);
        let m = l.mask(-1);
        assert_eq!(&m[..8], &[true, true, true, true, true, true, false, false]);
        assert_eq!(&m[16..], &[true; 8]);
        assert!(!l.mask_is_trivial(-1));
    }

    #[test]
    fn invalid_runs_are_errors() {
        // total must be past + new (dynamic) or at most past (static).
        assert!(gqa_layout(1, 1, Some(5), &[5], 7).is_err());
        assert!(gqa_layout(1, 2, None, &[1], 3).is_err());
        // seqlens_k too large for the cache.
        assert!(gqa_layout(1, 1, Some(8), &[8], 6).is_err());
        // Batch mismatch.
        assert!(gqa_layout(2, 1, Some(5), &[5], 6).is_err());
    }
}
