//! An inline repeat (`plan::Step::Repeat` with `inline`) run through a recurrent layer's
//! lowering: a bidirectional tanh RNN with `sequence_lens` and an initial state, eager and
//! compiled, checked against the recurrence computed here; and a run of zero time steps.

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use runtime::OutputTensor;

mod common;
use common::{executable_with, f32_bytes, input};

const B: usize = 2;
const I: usize = 3;
const H: usize = 2;
const D: usize = 2;

fn f32s(o: &OutputTensor) -> Vec<f32> {
    o.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Deterministic values in about [-1, 1].
fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + seed) * 0.73).sin()).collect()
}

fn weights() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    (
        values(D * H * I, 0.5),
        values(D * H * H, 1.5),
        values(D * 2 * H, 2.5),
    )
}

/// RNN(x [T, B, I] symbolic T, W, R, B, lens, h0) -> Y, Y_h, bidirectional.
fn rnn_graph() -> Graph {
    let (w, r, b) = weights();
    let t = Dim::Symbolic("T".into());
    let fixed = |d: &[usize]| d.iter().map(|&v| Dim::Fixed(v as i64)).collect::<Vec<_>>();
    let mut x_dims = vec![t];
    x_dims.extend(fixed(&[B, I]));
    let mut g = common::graph(
        vec![
            ValueInfo::new("x", DataType::Float, x_dims),
            ValueInfo::new("lens", DataType::Int32, fixed(&[B])),
            ValueInfo::new("h0", DataType::Float, fixed(&[D, B, H])),
        ],
        vec![
            ValueInfo::new("y", DataType::Float, Vec::new()),
            ValueInfo::new("y_h", DataType::Float, Vec::new()),
        ],
        vec![
            Node::new("RNN", ["x", "w", "r", "b", "lens", "h0"], ["y", "y_h"])
                .with_attr("hidden_size", Attribute::Int(H as i64))
                .with_attr("direction", Attribute::String(b"bidirectional".to_vec())),
        ],
    );
    g.value_info.clear();
    let init =
        |v: &[f32], d: &[usize]| TensorData::from_f32(d.iter().map(|&v| v as i64).collect(), v);
    g.initializers.insert("w".into(), init(&w, &[D, H, I]));
    g.initializers.insert("r".into(), init(&r, &[D, H, H]));
    g.initializers.insert("b".into(), init(&b, &[D, 2 * H]));
    g
}

/// The recurrence computed here: Y `[T, D, B, H]`, Y_h `[D, B, H]` (ORT's rules: masked steps
/// keep the state and write zeros; an empty sequence ends with a zero state).
fn reference(x: &[f32], t: usize, lens: &[i32], h0: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let (w, r, bias) = weights();
    let mut y = vec![0.0; t * D * B * H];
    let mut yh = vec![0.0; D * B * H];
    for d in 0..D {
        for b in 0..B {
            let mut h: Vec<f32> = h0[(d * B + b) * H..][..H].to_vec();
            for step in 0..t {
                let tt = if d == 1 { t - 1 - step } else { step };
                if tt as i32 >= lens[b] {
                    continue;
                }
                let xt = &x[(tt * B + b) * I..][..I];
                let next: Vec<f32> = (0..H)
                    .map(|j| {
                        let wx: f32 = (0..I).map(|k| w[(d * H + j) * I + k] * xt[k]).sum();
                        let rh: f32 = (0..H).map(|k| r[(d * H + j) * H + k] * h[k]).sum();
                        (wx + rh + bias[d * 2 * H + j] + bias[d * 2 * H + H + j]).tanh()
                    })
                    .collect();
                y[((tt * D + d) * B + b) * H..][..H].copy_from_slice(&next);
                h = next;
            }
            if lens[b] > 0 {
                yh[(d * B + b) * H..][..H].copy_from_slice(&h);
            }
        }
    }
    (y, yh)
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (a, b) in got.iter().zip(want) {
        assert!((a - b).abs() <= 1e-5, "{what}: {got:?} vs {want:?}");
    }
}

#[test]
fn a_bidirectional_masked_rnn_matches_the_recurrence_eager_and_compiled() {
    let g = rnn_graph();
    for compile in [false, true] {
        let exe = executable_with(&g, Some(compile), None);
        for (t, lens) in [(4usize, [4i32, 2]), (3, [0, 3]), (4, [1, 4])] {
            let x = values(t * B * I, t as f32);
            let h0 = values(D * B * H, 7.0);
            let lens_bytes: Vec<u8> = lens.iter().flat_map(|v| v.to_le_bytes()).collect();
            let (xb, hb) = (f32_bytes(&x), f32_bytes(&h0));
            let x_dims = [t as i64, B as i64, I as i64];
            let outs = exe
                .run(&[
                    input(DataType::Float, &x_dims, &xb),
                    input(DataType::Int32, &[B as i64], &lens_bytes),
                    input(DataType::Float, &[D as i64, B as i64, H as i64], &hb),
                ])
                .expect("run");
            let (y, yh) = reference(&x, t, &lens, &h0);
            let what = format!("compile={compile} t={t} lens={lens:?}");
            assert_eq!(outs[0].dims, vec![t as i64, D as i64, B as i64, H as i64]);
            assert_close(&f32s(&outs[0]), &y, &format!("Y, {what}"));
            assert_close(&f32s(&outs[1]), &yh, &format!("Y_h, {what}"));
        }
        if compile {
            assert!(exe.cache_stats().compiles >= 2, "{:?}", exe.cache_stats());
        }
    }
}

#[test]
fn zero_time_steps_give_an_empty_y_and_zero_states() {
    let g = rnn_graph();
    for compile in [false, true] {
        let exe = executable_with(&g, Some(compile), None);
        let h0 = values(D * B * H, 7.0);
        let hb = f32_bytes(&h0);
        let lens_bytes: Vec<u8> = [0i32, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let outs = exe
            .run(&[
                input(DataType::Float, &[0, B as i64, I as i64], &[]),
                input(DataType::Int32, &[B as i64], &lens_bytes),
                input(DataType::Float, &[D as i64, B as i64, H as i64], &hb),
            ])
            .expect("run");
        assert_eq!(outs[0].dims, vec![0, D as i64, B as i64, H as i64]);
        assert_eq!(outs[1].dims, vec![D as i64, B as i64, H as i64]);
        assert!(
            f32s(&outs[1]).iter().all(|&v| v == 0.0),
            "compile={compile}"
        );
    }
}
