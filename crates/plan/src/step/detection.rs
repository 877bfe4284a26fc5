//! ONNX `NonMaxSuppression`, computed on the host (its output length depends on the values).
//!
//! Matches ONNX Runtime's CPU kernel: candidates of one (batch, class) whose score is strictly
//! above `score_threshold` (when given) are taken from a binary max-heap ordered by score, then
//! by lower box index; a candidate is kept unless its float32 IoU with an already kept box of
//! that class is strictly above `iou_threshold`; at most `max_output_boxes_per_class` per class.
//! The heap is the one of GCC's `std::priority_queue` (libstdc++'s `make_heap` / `pop_heap`), so
//! even NaN scores, which no ordering ranks, come out in ORT's order.

use onnx_ir::TensorData;

/// The inputs of ONNX `NonMaxSuppression`, read on the host.
#[derive(Debug, Clone, Copy)]
pub struct NmsInputs<'a> {
    /// Shape of `boxes` (`[B, N, 4]`).
    pub boxes_shape: &'a [i64],
    /// `boxes`, row-major.
    pub boxes: &'a [f32],
    /// Shape of `scores` (`[B, C, N]`).
    pub scores_shape: &'a [i64],
    /// `scores`, row-major.
    pub scores: &'a [f32],
    /// The elements of `max_output_boxes_per_class` (`None`: input absent).
    pub max_output: Option<&'a [i64]>,
    /// The elements of `iou_threshold` (`None`: absent, 0).
    pub iou_threshold: Option<&'a [f32]>,
    /// The elements of `score_threshold` (`None`: absent, no score filter).
    pub score_threshold: Option<&'a [f32]>,
    /// Boxes are `[x_center, y_center, width, height]` (else `[y1, x1, y2, x2]`).
    pub center_point_box: bool,
}

/// One candidate box: its score, index and extent (`[y_min, x_min, y_max, x_max]`) and area.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: f32,
    index: i64,
    extent: [f32; 4],
    area: f32,
}

impl Candidate {
    fn new(score: f32, index: i64, b: &[f32], center: bool) -> Self {
        let (extent, area) = if center {
            let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
            ([b[1] - hh, b[0] - hw, b[1] + hh, b[0] + hw], b[2] * b[3])
        } else {
            let (y0, y1) = min_max(b[0], b[2]);
            let (x0, x1) = min_max(b[1], b[3]);
            ([y0, x0, y1, x1], (y1 - y0) * (x1 - x0))
        };
        Candidate {
            score,
            index,
            extent,
            area,
        }
    }

    /// The heap order: lower score, or equal score and higher index, ranks below.
    fn below(&self, other: &Self) -> bool {
        self.score < other.score || (self.score == other.score && self.index > other.index)
    }

    /// True when the IoU of `self` (the candidate) and `kept` is above `threshold` (float32).
    fn suppressed_by(&self, kept: &Self, threshold: f32) -> bool {
        let (a, b) = (&self.extent, &kept.extent);
        let x_lo = a[1].max(b[1]);
        let x_hi = a[3].min(b[3]);
        if x_hi <= x_lo {
            return false;
        }
        let y_lo = a[0].max(b[0]);
        let y_hi = a[2].min(b[2]);
        if y_hi <= y_lo {
            return false;
        }
        let inter = (x_hi - x_lo) * (y_hi - y_lo);
        if inter <= 0.0 {
            return false;
        }
        let union = self.area + kept.area - inter;
        inter / union > threshold
    }
}

/// `(min, max)`, the first operand winning ties (as ORT's `MaxMin`).
fn min_max(a: f32, b: f32) -> (f32, f32) {
    if a >= b { (b, a) } else { (a, b) }
}

/// libstdc++'s `__adjust_heap`: sifts the hole at `hole` down to a leaf along the higher
/// children, then `value` up from there (no higher than `hole`).
fn adjust_heap(h: &mut [Candidate], mut hole: usize, len: usize, value: Candidate) {
    let top = hole;
    let mut child = hole;
    while len >= 2 && child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if h[child].below(&h[child - 1]) {
            child -= 1;
        }
        h[hole] = h[child];
        hole = child;
    }
    if len >= 2 && len.is_multiple_of(2) && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        h[hole] = h[child - 1];
        hole = child - 1;
    }
    // __push_heap
    while hole > top {
        let parent = (hole - 1) / 2;
        if !h[parent].below(&value) {
            break;
        }
        h[hole] = h[parent];
        hole = parent;
    }
    h[hole] = value;
}

/// libstdc++'s `make_heap`.
fn make_heap(h: &mut [Candidate]) {
    let len = h.len();
    if len < 2 {
        return;
    }
    for parent in (0..=(len - 2) / 2).rev() {
        adjust_heap(h, parent, len, h[parent]);
    }
}

/// libstdc++'s `pop_heap` followed by `pop_back`: removes and returns the top.
fn pop_heap(h: &mut Vec<Candidate>) -> Option<Candidate> {
    let last = h.pop()?;
    if h.is_empty() {
        return Some(last);
    }
    let top = h[0];
    let len = h.len();
    adjust_heap(h, 0, len, last);
    Some(top)
}

/// The single value of a scalar (or one-element) input.
fn first<T: Copy>(v: &[T], what: &str) -> Result<T, String> {
    v.first()
        .copied()
        .ok_or_else(|| format!("NonMaxSuppression: {what} is empty"))
}

/// ONNX `NonMaxSuppression`: the int64 `[num_selected, 3]` rows `(batch, class, box)`, by
/// batch, then class, then in selection order (ONNX Runtime's CPU kernel, see the module docs).
pub fn non_max_suppression(inp: &NmsInputs) -> Result<TensorData, String> {
    let (bs, ss) = (inp.boxes_shape, inp.scores_shape);
    if bs.len() != 3 || ss.len() != 3 {
        return Err(format!(
            "NonMaxSuppression: boxes {bs:?} and scores {ss:?} must be 3-D"
        ));
    }
    if bs[0] != ss[0] || bs[1] != ss[2] || bs[2] != 4 {
        return Err(format!(
            "NonMaxSuppression: boxes {bs:?} must be [B, N, 4] and scores {ss:?} [B, C, N]"
        ));
    }
    let (batches, classes, n) = (bs[0] as usize, ss[1] as usize, bs[1] as usize);
    if inp.boxes.len() != batches * n * 4 || inp.scores.len() != batches * classes * n {
        return Err("NonMaxSuppression: boxes or scores have the wrong length".into());
    }
    let max_output = match inp.max_output {
        Some(v) => first(v, "max_output_boxes_per_class")?.max(0),
        None => 0,
    };
    let iou = match inp.iou_threshold {
        Some(v) => first(v, "iou_threshold")?,
        None => 0.0,
    };
    if !(0.0..=1.0).contains(&iou) {
        return Err("NonMaxSuppression: iou_threshold must be in range [0, 1]".into());
    }
    let score_threshold = inp
        .score_threshold
        .map(|v| first(v, "score_threshold"))
        .transpose()?;
    let mut rows: Vec<i64> = Vec::new();
    if max_output == 0 {
        return Ok(TensorData::from_i64(vec![0, 3], &rows));
    }
    for b in 0..batches {
        let boxes = &inp.boxes[b * n * 4..(b + 1) * n * 4];
        for c in 0..classes {
            let scores = &inp.scores[(b * classes + c) * n..(b * classes + c + 1) * n];
            let mut heap: Vec<Candidate> = scores
                .iter()
                .enumerate()
                .filter(|(_, s)| score_threshold.is_none_or(|t| **s > t))
                .map(|(i, s)| {
                    Candidate::new(*s, i as i64, &boxes[i * 4..i * 4 + 4], inp.center_point_box)
                })
                .collect();
            make_heap(&mut heap);
            let mut kept: Vec<Candidate> = Vec::new();
            while (kept.len() as i64) < max_output {
                let Some(cand) = pop_heap(&mut heap) else {
                    break;
                };
                if !kept.iter().any(|k| cand.suppressed_by(k, iou)) {
                    kept.push(cand);
                    rows.extend([b as i64, c as i64, cand.index]);
                }
            }
        }
    }
    Ok(TensorData::from_i64(vec![rows.len() as i64 / 3, 3], &rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one NMS and returns the rows.
    fn nms(
        boxes: &[[f32; 4]],
        scores: &[f32],
        max: Option<i64>,
        iou: Option<f32>,
        score: Option<f32>,
        center: bool,
    ) -> Vec<[i64; 3]> {
        let n = boxes.len() as i64;
        let flat: Vec<f32> = boxes.iter().flatten().copied().collect();
        let (m, i, s) = (max.map(|v| [v]), iou.map(|v| [v]), score.map(|v| [v]));
        let t = non_max_suppression(&NmsInputs {
            boxes_shape: &[1, n, 4],
            boxes: &flat,
            scores_shape: &[1, 1, n],
            scores,
            max_output: m.as_ref().map(|v| &v[..]),
            iou_threshold: i.as_ref().map(|v| &v[..]),
            score_threshold: s.as_ref().map(|v| &v[..]),
            center_point_box: center,
        })
        .unwrap();
        rows(&t)
    }

    fn rows(t: &TensorData) -> Vec<[i64; 3]> {
        let v = t.to_i64_vec().unwrap();
        assert_eq!(t.dims, vec![v.len() as i64 / 3, 3]);
        v.chunks(3).map(|r| [r[0], r[1], r[2]]).collect()
    }

    fn sel(boxes: &[i64]) -> Vec<[i64; 3]> {
        boxes.iter().map(|b| [0, 0, *b]).collect()
    }

    const SCORES: [f32; 6] = [0.9, 0.75, 0.6, 0.95, 0.5, 0.3];

    #[test]
    fn corner_center_and_flipped_formats_agree() {
        // The ONNX reference cases (suppress by IoU, center point box, flipped coordinates).
        let corners = [
            [0.0, 0.0, 1.0, 1.0],
            [0.0, 0.1, 1.0, 1.1],
            [0.0, -0.1, 1.0, 0.9],
            [0.0, 10.0, 1.0, 11.0],
            [0.0, 10.1, 1.0, 11.1],
            [0.0, 100.0, 1.0, 101.0],
        ];
        let flipped = [
            [1.0, 1.0, 0.0, 0.0],
            [0.0, 0.1, 1.0, 1.1],
            [0.0, 0.9, 1.0, -0.1],
            [0.0, 10.0, 1.0, 11.0],
            [1.0, 10.1, 0.0, 11.1],
            [1.0, 101.0, 0.0, 100.0],
        ];
        let centers = [
            [0.5, 0.5, 1.0, 1.0],
            [0.6, 0.5, 1.0, 1.0],
            [0.4, 0.5, 1.0, 1.0],
            [10.5, 0.5, 1.0, 1.0],
            [10.6, 0.5, 1.0, 1.0],
            [100.5, 0.5, 1.0, 1.0],
        ];
        let want = sel(&[3, 0, 5]);
        let args = (Some(3), Some(0.5), Some(0.0));
        assert_eq!(nms(&corners, &SCORES, args.0, args.1, args.2, false), want);
        assert_eq!(nms(&flipped, &SCORES, args.0, args.1, args.2, false), want);
        assert_eq!(nms(&centers, &SCORES, args.0, args.1, args.2, true), want);
        // Up to 10 per class keeps every box not overlapping a better one by more than 0.5.
        assert_eq!(
            nms(&corners, &SCORES, Some(10), Some(0.5), None, false),
            sel(&[3, 0, 5])
        );
        // A score threshold of 0.4 drops box 5 (0.3).
        assert_eq!(
            nms(&corners, &SCORES, Some(3), Some(0.5), Some(0.4), false),
            sel(&[3, 0])
        );
        // iou 0: any overlap suppresses; iou 1: nothing does.
        assert_eq!(
            nms(&corners, &SCORES, Some(10), None, None, false),
            sel(&[3, 0, 5])
        );
        assert_eq!(
            nms(&corners, &SCORES, Some(10), Some(1.0), None, false),
            sel(&[3, 0, 1, 2, 4, 5])
        );
    }

    #[test]
    fn identical_boxes_and_ties() {
        let same = [[0.0, 0.0, 1.0, 1.0]; 10];
        assert_eq!(
            nms(&same, &[0.9; 10], Some(3), Some(0.5), Some(0.0), false),
            sel(&[0])
        );
        // Equal scores: lower box index first.
        let apart: Vec<[f32; 4]> = (0..5)
            .map(|k| [0.0, 2.0 * k as f32, 1.0, 2.0 * k as f32 + 1.0])
            .collect();
        assert_eq!(
            nms(
                &apart,
                &[0.5, 0.7, 0.5, 0.7, 0.5],
                Some(10),
                None,
                None,
                false
            ),
            sel(&[1, 3, 0, 2, 4])
        );
        // Zero-area boxes never suppress (nor are suppressed).
        let flat = [
            [0.0, 0.0, 0.0, 1.0],
            [0.0, 0.0, 0.0, 1.0],
            [0.0, 0.0, 1.0, 1.0],
        ];
        assert_eq!(
            nms(&flat, &[0.9, 0.8, 0.7], Some(10), None, None, false),
            sel(&[0, 1, 2])
        );
    }

    #[test]
    fn thresholds_at_equality_do_not_act() {
        // IoU of [0, 0, 1, 2] and [0, 1, 1, 3] is 1 / 3 in float32.
        let b = [[0.0, 0.0, 1.0, 2.0], [0.0, 1.0, 1.0, 3.0]];
        assert_eq!(
            nms(&b, &[0.9, 0.8], Some(5), Some(1.0 / 3.0), None, false),
            sel(&[0, 1])
        );
        assert_eq!(
            nms(&b, &[0.9, 0.8], Some(5), Some(0.33), None, false),
            sel(&[0])
        );
        // A score equal to the threshold is filtered (strictly greater passes).
        assert_eq!(
            nms(&b, &[0.9, 0.5], Some(5), Some(1.0), Some(0.5), false),
            sel(&[0])
        );
    }

    #[test]
    fn limits() {
        let apart: Vec<[f32; 4]> = (0..3)
            .map(|k| [0.0, 2.0 * k as f32, 1.0, 2.0 * k as f32 + 1.0])
            .collect();
        let s = [0.1, 0.3, 0.2];
        assert_eq!(nms(&apart, &s, Some(2), None, None, false), sel(&[1, 2]));
        assert_eq!(nms(&apart, &s, Some(-4), None, None, false), sel(&[]));
        assert_eq!(nms(&apart, &s, Some(0), None, None, false), sel(&[]));
        assert_eq!(nms(&apart, &s, None, None, None, false), sel(&[]));
        assert_eq!(nms(&apart, &s, Some(9), None, Some(0.5), false), sel(&[]));
        assert_eq!(nms(&[], &[], Some(9), None, None, false), sel(&[]));
    }

    #[test]
    fn nan_scores_follow_the_libstdcxx_heap() {
        // Orders observed from ONNX Runtime's CPU EP (disjoint boxes, so all are selected).
        let apart: Vec<[f32; 4]> = (0..8)
            .map(|k| [10.0 * k as f32, 0.0, 10.0 * k as f32 + 1.0, 1.0])
            .collect();
        let nan = f32::NAN;
        assert_eq!(
            nms(
                &apart,
                &[nan, 0.5, 0.7, nan, 0.7, 0.5, 0.1, nan],
                Some(100),
                None,
                None,
                false
            ),
            sel(&[2, 4, 1, 5, 0, 6, 3, 7])
        );
        assert_eq!(
            nms(
                &apart,
                &[0.2, nan, 0.5, 0.5, nan, 0.9, 0.5, 0.1],
                Some(100),
                None,
                None,
                false
            ),
            sel(&[5, 2, 6, 0, 7, 1, 4, 3])
        );
    }

    #[test]
    fn batches_and_classes_in_order() {
        // B = 2, C = 2, N = 3 disjoint boxes.
        let mut boxes = Vec::new();
        for b in 0..2 {
            for k in 0..3 {
                let o = (k * 2 + b) as f32;
                boxes.extend([0.0, o, 1.0, o + 1.0]);
            }
        }
        let scores = [
            0.1, 0.9, 0.5, // b0 c0
            0.8, 0.2, 0.3, // b0 c1
            0.3, 0.2, 0.1, // b1 c0
            0.0, 0.6, 0.7, // b1 c1
        ];
        let t = non_max_suppression(&NmsInputs {
            boxes_shape: &[2, 3, 4],
            boxes: &boxes,
            scores_shape: &[2, 2, 3],
            scores: &scores,
            max_output: Some(&[2]),
            iou_threshold: Some(&[0.5]),
            score_threshold: Some(&[0.15]),
            center_point_box: false,
        })
        .unwrap();
        assert_eq!(
            rows(&t),
            vec![
                [0, 0, 1],
                [0, 0, 2],
                [0, 1, 0],
                [0, 1, 2],
                [1, 0, 0],
                [1, 0, 1],
                [1, 1, 2],
                [1, 1, 1]
            ]
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let ok = NmsInputs {
            boxes_shape: &[1, 1, 4],
            boxes: &[0.0, 0.0, 1.0, 1.0],
            scores_shape: &[1, 1, 1],
            scores: &[0.5],
            max_output: Some(&[1]),
            iou_threshold: Some(&[0.5]),
            score_threshold: None,
            center_point_box: false,
        };
        assert_eq!(rows(&non_max_suppression(&ok).unwrap()), sel(&[0]));
        for bad in [
            NmsInputs {
                iou_threshold: Some(&[1.5]),
                ..ok
            },
            NmsInputs {
                iou_threshold: Some(&[f32::NAN]),
                ..ok
            },
            NmsInputs {
                scores_shape: &[1, 1, 2],
                ..ok
            },
            NmsInputs {
                boxes_shape: &[1, 4],
                ..ok
            },
            NmsInputs {
                max_output: Some(&[]),
                ..ok
            },
        ] {
            assert!(non_max_suppression(&bad).is_err(), "{bad:?}");
        }
    }
}
