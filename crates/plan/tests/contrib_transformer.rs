//! Claims and lowerings of the com.microsoft ops of ORT's transformer optimizer and quantizer:
//! Attention, EmbedLayerNormalization, FusedMatMul, BiasSoftmax, GroupNorm, the integer
//! matmuls with float results.

mod common;

use common::*;
use onnx_ir::{DataType, TensorData};
use plan::{Step, step::BinaryOp};

fn g() -> G {
    ms_graph(17)
}

// ---------------------------------------------------------------------------------------------
// Attention

/// Attention over `[B, S, 16]` (2 heads) with a mask of `mask` dims (none when empty).
fn attention(mask: &[i64], extra: &[(&str, onnx_ir::Attribute)], past: bool) -> (G, usize) {
    let mut g = g();
    g.input("x", DataType::Float, &[-1, -1, 16]);
    g.weight("w", &[16, 48]).weight("b", &[48]);
    let mut ins = vec!["x", "w", "b", ""];
    if !mask.is_empty() {
        g.input("m", DataType::Int32, mask);
        ins[3] = "m";
    }
    if past {
        g.input("past", DataType::Float, &[2, -1, 2, -1, 8]);
        ins.push("past");
    }
    while ins.last() == Some(&"") {
        ins.pop();
    }
    g.output_any("y", DataType::Float);
    if past {
        g.output_any("present", DataType::Float);
    }
    let outs: &[&str] = if past { &["y", "present"] } else { &["y"] };
    let n = ms(&mut g, "Attention", &ins, outs);
    attr(&mut g, n, "num_heads", int(2));
    for (k, v) in extra {
        attr(&mut g, n, k, v.clone());
    }
    (g, n)
}

fn additive_mask(p: &plan::Plan) -> bool {
    count(p, |s| {
        matches!(
            s,
            Step::Attention {
                mask: Some(_),
                causal: false,
                ..
            }
        )
    }) == 1
}

#[test]
fn attention_lowers_each_mask_form_to_an_additive_mask() {
    // [B] ends (the mask's dim is the batch symbol), [2B] (fixed), [B, T], [B, S, T].
    for mask in [&[-1][..], &[-1, -1], &[-1, -1, -1]] {
        let (g, _) = attention(mask, &[], false);
        let p = plan_of(&g.build());
        assert!(additive_mask(&p), "{mask:?}");
    }
    let mut g = g();
    g.input("x", DataType::Float, &[2, 4, 16]);
    g.input("m", DataType::Int32, &[4]);
    g.weight("w", &[16, 48]);
    g.output_any("y", DataType::Float);
    let n = ms(&mut g, "Attention", &["x", "w", "", "m"], &["y"]);
    attr(&mut g, n, "num_heads", int(2));
    let p = plan_of(&g.build());
    // end and start positions: one split of the mask, two comparisons with the key iota
    assert_eq!(count(&p, |s| matches!(s, Step::Split { axis: 0, .. })), 1);
    assert!(additive_mask(&p));
}

#[test]
fn attention_mask_of_unknown_length_is_checked_at_run_time() {
    let mut g = g();
    g.input("x", DataType::Float, &[-1, -1, 16]);
    g.weight("w", &[16, 48]);
    g.value("m", DataType::Int32, &[7]);
    g.input("m0", DataType::Int32, &[7]);
    g.node("Identity", &["m0"], &["m"]);
    g.output_any("y", DataType::Float);
    let n = ms(&mut g, "Attention", &["x", "w", "", "m"], &["y"]);
    attr(&mut g, n, "num_heads", int(2));
    let p = plan_of(&g.build());
    assert_eq!(
        count(
            &p,
            |s| matches!(s, Step::Require { what, .. } if what.contains("B or 2B"))
        ),
        1
    );
}

#[test]
fn attention_causal_mask_and_past() {
    let (g, _) = attention(&[-1, -1], &[("unidirectional", int(1))], true);
    let p = plan_of(&g.build());
    assert!(additive_mask(&p));
    // past keys and values are taken from the packed past and concatenated before the new
    assert_eq!(count(&p, |s| matches!(s, Step::Take { .. })), 2);
    assert_eq!(count(&p, |s| matches!(s, Step::Concat { axis: 2, .. })), 2);
    // present = [k, v] stacked
    assert_eq!(count(&p, |s| matches!(s, Step::Concat { axis: 0, .. })), 1);
    // future keys: where(t - T > s - S, lowest, mask)
    assert!(count(&p, |s| matches!(s, Step::Where { .. })) >= 2);
}

#[test]
fn attention_declines_what_ort_refuses() {
    let (g4, n) = attention(&[-1, 1, 4, 4], &[], false);
    declined(&g4, n, "rank-4 mask_index");
    let (gr, n) = attention(&[], &[("do_rotary", int(1))], false);
    declined(&gr, n, "do_rotary");
    let (gs, n) = attention(&[], &[("past_present_share_buffer", int(1))], false);
    declined(&gs, n, "past_present_share_buffer");
    let (gq, n) = attention(&[], &[("qkv_hidden_sizes", ints(&[16, 8, 24]))], false);
    declined(&gq, n, "Q and K hidden sizes");
    let (gh, n) = attention(&[], &[("num_heads", int(3))], false);
    declined(&gh, n, "multiple of num_heads");
    let (mut gb, _) = attention(&[], &[], true);
    gb.input("bias4", DataType::Float, &[1, 2, -1, -1]);
    let node = gb.g.nodes.last_mut().unwrap();
    node.inputs.push("bias4".into());
    let n = gb.g.nodes.len() - 1;
    declined(&gb, n, "past and attention_bias");
    let (mut gp, n) = attention(&[], &[], true);
    gp.g.nodes[n].outputs.truncate(1);
    declined(&gp, n, "present output");
}

#[test]
fn attention_v_hidden_size_from_qkv_hidden_sizes() {
    let mut g = g();
    g.input("x", DataType::Float, &[2, 3, 16]);
    g.weight("w", &[16, 40]);
    g.output_any("y", DataType::Float);
    let n = ms(&mut g, "Attention", &["x", "w"], &["y"]);
    attr(&mut g, n, "num_heads", int(2));
    attr(&mut g, n, "qkv_hidden_sizes", ints(&[16, 16, 8]));
    let p = plan_of(&g.build());
    assert_eq!(
        count(
            &p,
            |s| matches!(s, Step::Split { axis: -1, outs, .. } if outs.len() == 3)
        ),
        1
    );
    // present would need equal K and V sizes
    g.g.nodes[n].outputs.push("present".into());
    declined(&g, n, "present needs equal K and V");
}

// ---------------------------------------------------------------------------------------------
// EmbedLayerNormalization

#[test]
fn embed_layer_norm_checks_ids_and_counts_the_mask() {
    let mut g = g();
    g.input("ids", DataType::Int32, &[-1, -1]);
    g.input("seg", DataType::Int32, &[-1, -1]);
    g.input("mask", DataType::Int32, &[-1, -1]);
    g.weight("word", &[30, 8])
        .weight("pos", &[16, 8])
        .weight("segtab", &[2, 8])
        .weight("gamma", &[8])
        .weight("beta", &[8]);
    g.output_any("y", DataType::Float);
    g.output_any("mask_index", DataType::Int32);
    let n = ms(
        &mut g,
        "EmbedLayerNormalization",
        &[
            "ids", "seg", "word", "pos", "segtab", "gamma", "beta", "mask",
        ],
        &["y", "mask_index"],
    );
    let p = plan_of(&g.build());
    // word, position and segment ids each checked against their table
    assert_eq!(
        count(
            &p,
            |s| matches!(s, Step::Require { what, .. } if what.contains("out of range"))
        ),
        3
    );
    assert_eq!(count(&p, |s| matches!(s, Step::LayerNorm { .. })), 1);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Binary {
                op: BinaryOp::Equal,
                ..
            }
        )),
        1
    );
    // segment ids without the table are refused
    g.g.nodes[n].inputs[4] = String::new();
    declined(&g, n, "together");
}

// ---------------------------------------------------------------------------------------------
// FusedMatMul, BiasSoftmax, GroupNorm

#[test]
fn fused_matmul_transposes_and_scales() {
    let mut g = g();
    g.input("a", DataType::Float, &[4, 2, 3]);
    g.input("b", DataType::Float, &[2, 5, 4]);
    g.output_any("y", DataType::Float);
    let n = ms(&mut g, "FusedMatMul", &["a", "b"], &["y"]);
    attr(&mut g, n, "transA", int(1));
    attr(&mut g, n, "transB", int(1));
    attr(&mut g, n, "transBatchA", int(1));
    attr(&mut g, n, "alpha", float(0.5));
    let p = plan_of(&g.build());
    // A: batch move then last-two swap in one permutation; B: last-two swap
    assert_eq!(
        count(
            &p,
            |s| matches!(s, Step::Transpose { perm: Some(p), .. } if p == &[1, 2, 0])
        ),
        1
    );
    assert_eq!(
        count(
            &p,
            |s| matches!(s, Step::Transpose { perm: Some(p), .. } if p == &[0, 2, 1])
        ),
        1
    );
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Binary {
                op: BinaryOp::Multiply,
                ..
            }
        )),
        1
    );
    let mut g2 = self::g();
    g2.input("a", DataType::Float, &[3, 4]);
    g2.input("b", DataType::Float, &[4, 5]);
    g2.output_any("y", DataType::Float);
    let n = ms(&mut g2, "FusedMatMul", &["a", "b"], &["y"]);
    attr(&mut g2, n, "transBatchB", int(1));
    declined(&g2, n, "at least 3");
}

#[test]
fn bias_softmax_softmaxes_the_trailing_dims() {
    let mut g = g();
    g.input("x", DataType::Float, &[2, 3, 4, 5]);
    g.input("b", DataType::Float, &[4, 5]);
    g.output_any("y", DataType::Float);
    let n = ms(&mut g, "BiasSoftmax", &["x", "b"], &["y"]);
    attr(&mut g, n, "axis", int(2));
    attr(&mut g, n, "is_inner_broadcast", int(0));
    let p = plan_of(&g.build());
    assert_eq!(
        count(
            &p,
            |s| matches!(s, Step::Softmax { axes, precise: true, .. } if axes == &[2, 3])
        ),
        1
    );
    attr(&mut g, n, "is_inner_broadcast", int(1));
    declined(&g, n, "numpy broadcasting");
}

#[test]
fn group_norm_needs_divisible_channels() {
    let mut g = g();
    g.input("x", DataType::Float, &[1, 4, 4, 12]);
    g.weight("gamma", &[12]).weight("beta", &[12]);
    g.output_any("y", DataType::Float);
    let n = ms(&mut g, "GroupNorm", &["x", "gamma", "beta"], &["y"]);
    attr(&mut g, n, "groups", int(4));
    attr(&mut g, n, "activation", int(1));
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Reduce { .. })), 2);
    attr(&mut g, n, "groups", int(5));
    declined(&g, n, "not a multiple of 5 groups");
    attr(&mut g, n, "groups", int(4));
    attr(&mut g, n, "activation", int(2));
    declined(&g, n, "activation=2");
}

// ---------------------------------------------------------------------------------------------
// Integer matmuls with float results

fn u8_tensor(d: &[i64]) -> TensorData {
    let n: i64 = d.iter().product();
    TensorData::new(
        DataType::Uint8,
        d.to_vec(),
        (0..n).map(|i| i as u8).collect::<Vec<u8>>(),
    )
    .unwrap()
}

#[test]
fn matmul_integer_to_float_chunks_k_exactly() {
    let mut g = g();
    g.input("a", DataType::Uint8, &[-1, 600]);
    g.init("b", u8_tensor(&[600, 4]));
    g.init_f32("sa", &[], &[0.1])
        .init_f32("sb", &[4], &[0.1; 4]);
    g.output_any("y", DataType::Float);
    ms(
        &mut g,
        "MatMulIntegerToFloat",
        &["a", "b", "sa", "sb"],
        &["y"],
    );
    let p = plan_of(&g.build());
    // 600 = 256 + 256 + 88: three exact float32 partial products summed in int32
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 3);
}

#[test]
fn dynamic_quantize_matmul_quantizes_a_then_accumulates() {
    let mut g = g();
    g.input("a", DataType::Float, &[-1, 32]);
    g.init("b", u8_tensor(&[32, 4]));
    g.init_f32("sb", &[], &[0.1]);
    g.output_any("y", DataType::Float);
    let n = ms(&mut g, "DynamicQuantizeMatMul", &["a", "b", "sb"], &["y"]);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 1);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::AsType {
                dtype: DataType::Uint8,
                ..
            }
        )),
        1
    );
    g.g.nodes[n].inputs[2] = "sb2".into();
    g.init_f32("sb2", &[2, 2], &[0.1; 4]);
    declined(&g, n, "scalar or 1-D");
}

// ---------------------------------------------------------------------------------------------
// MoE / QMoE

fn qmoe(bits: i64, block: i64) -> (G, usize) {
    let (e, h, i) = (2i64, 32i64, 32i64);
    let per = 8 / bits;
    let mut g = g();
    g.input("x", DataType::Float, &[-1, h]);
    g.input("router", DataType::Float, &[-1, e]);
    g.init("q1", u8_tensor(&[e, i, h / per]));
    g.init("q2", u8_tensor(&[e, h, i / per]));
    let nb = if block > 0 { h / block } else { 1 };
    let sd: &[i64] = if block > 0 { &[e, i, nb] } else { &[e, i] };
    let n = (e * i * nb) as usize;
    g.init_f32("s1", sd, &vec![0.01; n])
        .init_f32("s2", sd, &vec![0.02; n]);
    g.output_any("y", DataType::Float);
    let node = ms(
        &mut g,
        "QMoE",
        &["x", "router", "q1", "s1", "", "q2", "s2"],
        &["y"],
    );
    attr(&mut g, node, "expert_weight_bits", int(bits));
    attr(&mut g, node, "k", int(1));
    if block > 0 {
        attr(&mut g, node, "block_size", int(block));
    }
    (g, node)
}

#[test]
fn qmoe_dequantizes_at_plan_time() {
    for (bits, block) in [(4, 0), (8, 0), (4, 16)] {
        let (g, _) = qmoe(bits, block);
        let p = plan_of(&g.build());
        // two batched expert matmuls over float weights, routing by a sort of the router
        assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 2);
        assert_eq!(count(&p, |s| matches!(s, Step::ArgSort { .. })), 1);
        assert!(
            p.constants
                .iter()
                .any(|(_, t)| t.dtype == DataType::Float && t.dims == [2, 32, 32]),
            "bits {bits} block {block}"
        );
    }
    let (g, n) = qmoe(8, 16);
    declined(&g, n, "8-bit block-wise");
}
