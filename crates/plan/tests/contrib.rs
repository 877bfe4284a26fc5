//! Claims and lowerings of ORT's com.microsoft transformer ops (and SimplifiedLayerNormalization).

mod common;

use common::*;
use onnx_ir::{DataType, Graph, TensorData};
use plan::{CompileClass, Plan, Registry, Step};

fn g() -> G {
    ms_graph(21)
}

fn decline_of(g: &Graph) -> String {
    let r = Registry::default();
    let node = g.nodes.last().unwrap();
    r.claim(g, node).expect_err("expected a decline").reason
}

// ---------------------------------------------------------------------------------------------
// GroupQueryAttention

/// A decode-shaped GQA: symbolic batch and lengths, past cache, rotary.
fn gqa(rotary: bool) -> G {
    let (heads, kv, head) = (4, 2, 16);
    let mut g = g();
    g.input("q", DataType::Float, &[-1, -1, heads * head]);
    g.input("k", DataType::Float, &[-1, -1, kv * head]);
    g.input("v", DataType::Float, &[-1, -1, kv * head]);
    g.input("pk", DataType::Float, &[-1, kv, -1, head]);
    g.input("pv", DataType::Float, &[-1, kv, -1, head]);
    g.input("seqlens", DataType::Int32, &[-1]);
    g.input("total", DataType::Int32, &[]);
    g.weight("cos", &[64, head / 2])
        .weight("sin", &[64, head / 2]);
    g.output_any("y", DataType::Float);
    g.output_any("present_k", DataType::Float);
    g.output_any("present_v", DataType::Float);
    let ins: &[&str] = if rotary {
        &["q", "k", "v", "pk", "pv", "seqlens", "total", "cos", "sin"]
    } else {
        &["q", "k", "v", "pk", "pv", "seqlens", "total"]
    };
    let n = ms(
        &mut g,
        "GroupQueryAttention",
        ins,
        &["y", "present_k", "present_v"],
    );
    attr(&mut g, n, "num_heads", int(heads));
    attr(&mut g, n, "kv_num_heads", int(kv));
    if rotary {
        attr(&mut g, n, "do_rotary", int(1));
    }
    g
}

#[test]
fn gqa_lowers_to_cache_mask_and_attention() {
    let p = plan_of(&gqa(true).build());
    assert_eq!(count(&p, |s| matches!(s, Step::GqaPositions { .. })), 1);
    assert_eq!(count(&p, |s| matches!(s, Step::KvCache { .. })), 2);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::GqaMask {
                window: -1,
                bias: None,
                ..
            }
        )),
        1
    );
    let attn: Vec<&Step> = p
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Attention { .. }))
        .collect();
    assert_eq!(attn.len(), 1);
    let Step::Attention {
        scale,
        causal,
        sinks,
        mask,
        ..
    } = attn[0]
    else {
        unreachable!()
    };
    assert_eq!((*scale, *causal), (0.25, false));
    // The fused attention runs unmasked when the mask keeps every key.
    assert_eq!(
        count(&p, |s| matches!(s, Step::GqaMask { omit: true, .. })),
        1
    );
    assert!(sinks.is_none() && mask.is_some());
    // Rotary: cos and sin gathered at the positions (shared by q and k), and the halves of q
    // and k swapped by one gather each (no Split: its dynamic slices are slow in a closure).
    assert_eq!(count(&p, |s| matches!(s, Step::Take { axis: 0, .. })), 2);
    assert_eq!(count(&p, |s| matches!(s, Step::Take { axis: 3, .. })), 2);
    assert_eq!(count(&p, |s| matches!(s, Step::Split { .. })), 0);
    // seqlens_k is read on the host: a graph input, whose bytes the host has, so the plan is
    // shape-keyed (no device read), and its decode runs can share a shapeless closure.
    assert_eq!(p.compile_class(), CompileClass::ShapeKeyed);
    assert!(p.decode_compilable(), "{p}\n{:?}", p.compile_blockers());
    assert_eq!(p.outputs.len(), 3);
}

#[test]
fn gqa_options_reach_the_steps() {
    let mut g = gqa(false);
    let n = g.g.nodes.len() - 1;
    attr(&mut g, n, "softcap", float(30.0));
    attr(&mut g, n, "scale", float(0.5));
    attr(&mut g, n, "local_window_size", int(8));
    attr(&mut g, n, "smooth_softmax", int(1));
    let p = plan_of(&g.build());
    // The soft cap is computed step by step, so the mask is always an array.
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::GqaMask {
                window: 8,
                omit: false,
                ..
            }
        )),
        1
    );
    assert_eq!(count(&p, |s| matches!(s, Step::Attention { .. })), 0);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Unary {
                op: plan::UnaryOp::Tanh,
                ..
            }
        )),
        1
    );
    // smooth_softmax: zero sinks in the softmax's denominator (exp of the scores and the sink).
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Unary {
                op: plan::UnaryOp::Exp,
                ..
            }
        )),
        2
    );
    assert_eq!(count(&p, |s| matches!(s, Step::GqaPositions { .. })), 0);
}

#[test]
fn gqa_declines_what_it_cannot_reproduce() {
    for (name, value, why) in [
        ("qk_output", int(1), "qk_output"),
        ("sliding_window_cache", int(1), "sliding_window_cache"),
        ("causal", int(0), "causal=0"),
        ("local_window_size", int(0), "local_window_size=0"),
        ("k_quant_type", string("PER_CHANNEL"), "quantized KV cache"),
    ] {
        let mut g = gqa(true);
        let n = g.g.nodes.len() - 1;
        attr(&mut g, n, name, value);
        let reason = decline_of(&g.build());
        assert!(reason.contains(why), "{name}: {reason}");
    }
    // A uint8 (quantized) cache.
    let mut g = gqa(false);
    g.g.inputs[3] = onnx_ir::ValueInfo::new("pk", DataType::Uint8, dims(&[-1, 2, -1, 16]));
    assert!(decline_of(&g.build()).contains("quantized KV caches"));
    // The head size must be known.
    let mut g = gqa(false);
    g.g.inputs[0] = onnx_ir::ValueInfo::new("q", DataType::Float, dims(&[-1, -1, -1]));
    assert!(decline_of(&g.build()).contains("head size"));
    // Q/K norm weights.
    let mut g = gqa(false);
    let n = g.g.nodes.len() - 1;
    g.g.nodes[n].inputs.resize(15, String::new());
    g.g.nodes[n].inputs[14] = "cos".into();
    assert!(decline_of(&g.build()).contains("q_norm_weight"));
}

#[test]
fn gqa_packed_qkv_splits_the_query() {
    let mut g = g();
    g.input("qkv", DataType::Float, &[-1, -1, 128]);
    g.input("seqlens", DataType::Int32, &[-1]);
    g.input("total", DataType::Int32, &[]);
    g.output_any("y", DataType::Float);
    let n = ms(
        &mut g,
        "GroupQueryAttention",
        &["qkv", "", "", "", "", "seqlens", "total"],
        &["y"],
    );
    attr(&mut g, n, "num_heads", int(4));
    attr(&mut g, n, "kv_num_heads", int(2));
    let p = plan_of(&g.build());
    let split = p.steps.iter().find_map(|s| match s {
        Step::Split { sizes, outs, .. } => Some((sizes.clone(), outs.len())),
        _ => None,
    });
    assert_eq!(
        split,
        Some((Some(plan::ShapeSource::Static(vec![64, 32, 32])), 3))
    );
}

// ---------------------------------------------------------------------------------------------
// MultiHeadAttention

fn mha(s: i64, l: i64, unidirectional: bool) -> G {
    let mut g = g();
    g.input("q", DataType::Float, &[2, s, 8]);
    g.input("k", DataType::Float, &[2, l, 8]);
    g.input("v", DataType::Float, &[2, l, 8]);
    g.input("kpm", DataType::Int32, &[2]);
    g.output_any("y", DataType::Float);
    let n = ms(
        &mut g,
        "MultiHeadAttention",
        &["q", "k", "v", "", "kpm"],
        &["y"],
    );
    attr(&mut g, n, "num_heads", int(2));
    if unidirectional {
        attr(&mut g, n, "unidirectional", int(1));
    }
    g
}

#[test]
fn mha_lowers_and_declines() {
    let p = plan_of(&mha(3, 3, true).build());
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Attention {
                causal: false,
                mask: Some(_),
                ..
            }
        )),
        1
    );
    // Key lengths [B] become a mask through an iota over the keys; the causal mask, folded
    // into it, through iotas over the queries and keys.
    assert_eq!(count(&p, |s| matches!(s, Step::Iota { .. })), 3);
    assert!(decline_of(&mha(3, 5, true).build()).contains("unidirectional"));
    plan_of(&mha(3, 5, false).build());
}

// ---------------------------------------------------------------------------------------------
// MatMulNBits

fn nbits(k: i64, n: i64, block: i64, bits: i64) -> G {
    let nb = (k + block - 1) / block;
    let blob = block * bits / 8;
    let mut g = g();
    g.input("a", DataType::Float, &[-1, k]);
    g.output_any("y", DataType::Float);
    let b: Vec<u8> = (0..n * nb * blob).map(|i| (i * 37 % 251) as u8).collect();
    g.init(
        "b",
        TensorData::new(DataType::Uint8, vec![n, nb, blob], b).unwrap(),
    );
    g.weight("scales", &[n * nb]);
    let i = ms(&mut g, "MatMulNBits", &["a", "b", "scales"], &["y"]);
    attr(&mut g, i, "K", int(k));
    attr(&mut g, i, "N", int(n));
    attr(&mut g, i, "bits", int(bits));
    attr(&mut g, i, "block_size", int(block));
    g
}

fn qmm_group(p: &Plan) -> Option<(i32, i32)> {
    p.steps.iter().find_map(|s| match s {
        Step::QuantizedMatmul {
            group_size, bits, ..
        } => Some((*group_size, *bits)),
        _ => None,
    })
}

#[test]
fn matmul_nbits_uses_mlx_groups_or_dequantizes() {
    assert_eq!(
        qmm_group(&plan_of(&nbits(64, 8, 32, 4).build())),
        Some((32, 4))
    );
    assert_eq!(
        qmm_group(&plan_of(&nbits(512, 8, 256, 4).build())),
        Some((128, 4))
    );
    assert_eq!(
        qmm_group(&plan_of(&nbits(128, 8, 64, 8).build())),
        Some((64, 8))
    );
    // Block 16 has no MLX group: a float matmul over a [K, N] constant.
    let p = plan_of(&nbits(64, 8, 16, 4).build());
    assert_eq!(qmm_group(&p), None);
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 1);
    assert!(p.constants.iter().any(|(_, t)| t.dims == vec![64, 8]));
    // Ragged K (100 = 3 blocks of 32 + 4) is dequantized too.
    assert_eq!(qmm_group(&plan_of(&nbits(100, 8, 32, 4).build())), None);
}

#[test]
fn matmul_nbits_declines() {
    let mut g = nbits(64, 8, 32, 4);
    attr(&mut g, 0, "accuracy_level", int(4));
    assert!(decline_of(&g.build()).contains("accuracy_level 4"));
    let mut g = nbits(64, 8, 32, 4);
    g.g.nodes[0].inputs = vec!["a", "b", "scales", "", "gidx"]
        .into_iter()
        .map(String::from)
        .collect();
    g.input("gidx", DataType::Int32, &[64]);
    assert!(decline_of(&g.build()).contains("g_idx"));
    let mut g = nbits(64, 8, 32, 4);
    attr(&mut g, 0, "bits", int(2));
    assert!(decline_of(&g.build()).contains("bits=2"));
    let mut g = nbits(64, 8, 32, 4);
    g.g.initializers.remove("b");
    g.input("b", DataType::Uint8, &[8, 2, 16]);
    assert!(decline_of(&g.build()).contains("constant"));
}

#[test]
fn quantized_matmuls_become_float_matmuls_for_the_cpu() {
    let g = nbits(64, 8, 32, 4).build();
    let mut p = plan_of(&g);
    let Some(Step::QuantizedMatmul {
        w, scales, biases, ..
    }) = p
        .steps
        .iter()
        .find(|s| matches!(s, Step::QuantizedMatmul { .. }))
        .cloned()
    else {
        panic!("no quantized matmul");
    };
    let get = |p: &Plan, s| p.constants.iter().find(|(c, _)| *c == s).unwrap().1.clone();
    let expect = plan::quantized::dequantize_affine_t(
        &get(&p, w),
        &get(&p, scales),
        &get(&p, biases),
        32,
        4,
    )
    .unwrap();
    assert_eq!(plan::quantized::dequantize_quantized_matmuls(&mut p), 1);
    assert_eq!(count(&p, |s| matches!(s, Step::QuantizedMatmul { .. })), 0);
    let Some(Step::MatMul { b, .. }) = p.steps.iter().find(|s| matches!(s, Step::MatMul { .. }))
    else {
        panic!("no matmul");
    };
    assert_eq!(get(&p, *b), expect);
    assert_eq!(expect.dims, vec![64, 8]);
    // The packed operands are gone; constants and their sources stay parallel.
    assert!(
        p.constants
            .iter()
            .all(|(s, _)| *s != w && *s != scales && *s != biases)
    );
    assert_eq!(p.constants.len(), p.constant_sources.len());
    // The dequantized weight is the one the plan-time path computes for the same bytes.
    let reference = plan_of(&nbits(64, 8, 16, 4).build());
    assert!(
        reference
            .constants
            .iter()
            .any(|(_, t)| t.dims == vec![64, 8])
    );
}

// ---------------------------------------------------------------------------------------------
// Norms, Gelu, rotary, GatherBlockQuantized

#[test]
fn norms_take_the_fast_path_unless_statistics_are_asked_for() {
    let mut g = G::new(21);
    g.input("x", DataType::Float, &[2, 4, 8]);
    g.weight("w", &[8]);
    g.output_any("y", DataType::Float);
    g.node("SimplifiedLayerNormalization", &["x", "w"], &["y"]);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::RmsNorm { .. })), 1);
    g.g.nodes[0].outputs.push("inv".into());
    g.output_any("inv", DataType::Float);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::RmsNorm { .. })), 0);

    let mut g = self::g();
    g.input("x", DataType::Float, &[2, 4, 8]);
    g.input("s", DataType::Float, &[2, 4, 8]);
    g.weight("w", &[8]).weight("b", &[8]);
    g.output_any("y", DataType::Float);
    g.output_any("sum", DataType::Float);
    ms(
        &mut g,
        "SkipLayerNormalization",
        &["x", "s", "w", "b"],
        &["y", "", "", "sum"],
    );
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::LayerNorm { .. })), 1);
    g.g.nodes[0].outputs[1] = "mean".into();
    g.output_any("mean", DataType::Float);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::LayerNorm { .. })), 0);
}

#[test]
fn gelu_family_and_rotary_are_claimed() {
    for (op, ins) in [
        ("Gelu", vec!["x"]),
        ("FastGelu", vec!["x", "b"]),
        ("BiasGelu", vec!["x", "b"]),
        ("QuickGelu", vec!["x"]),
    ] {
        let mut g = g();
        g.input("x", DataType::Float16, &[2, 8]);
        g.init(
            "b",
            TensorData::new(DataType::Float16, vec![8], vec![0u8; 16]).unwrap(),
        );
        g.output_any("y", DataType::Float16);
        ms(&mut g, op, &ins, &["y"]);
        let p = plan_of(&g.build());
        // Half inputs are computed in float32.
        assert!(
            p.steps.iter().any(|s| matches!(
                s,
                Step::AsType {
                    dtype: DataType::Float,
                    ..
                }
            )),
            "{op}"
        );
    }
    let mut g = g();
    g.input("x", DataType::Float, &[2, 5, 32]);
    g.input("pos", DataType::Int64, &[1]);
    g.weight("cos", &[16, 8]).weight("sin", &[16, 8]);
    g.output_any("y", DataType::Float);
    let n = ms(
        &mut g,
        "RotaryEmbedding",
        &["x", "pos", "cos", "sin"],
        &["y"],
    );
    let p = plan_of(&g.build());
    // An offset position: positions = pos[0] + iota(S).
    assert_eq!(count(&p, |s| matches!(s, Step::Iota { .. })), 1);
    attr(&mut g, n, "is_packed_batching", int(1));
    assert!(decline_of(&g.build()).contains("is_packed_batching"));
}

#[test]
fn gather_block_quantized_claims() {
    let gbq = |data: DataType, attrs: &[(&str, i64)]| {
        let mut g = g();
        g.input("idx", DataType::Int64, &[-1]);
        g.init(
            "data",
            TensorData::new(data, vec![8, 32], vec![0u8; 256]).unwrap(),
        );
        g.weight("scales", &[8, 2]);
        g.output_any("y", DataType::Float);
        let n = ms(
            &mut g,
            "GatherBlockQuantized",
            &["data", "idx", "scales"],
            &["y"],
        );
        attr(&mut g, n, "block_size", int(32));
        for (k, v) in attrs {
            attr(&mut g, n, k, int(*v));
        }
        g.build()
    };
    let p = plan_of(&gbq(DataType::Uint8, &[]));
    // Nibbles unpacked with a mask and a shift.
    assert!(p.steps.iter().any(|s| matches!(
        s,
        Step::Binary {
            op: plan::BinaryOp::RightShift,
            ..
        }
    )));
    plan_of(&gbq(DataType::Uint8, &[("bits", 8), ("block_size", 32)]));
    assert!(decline_of(&gbq(DataType::Uint8, &[("gather_axis", 1)])).contains("gather_axis"));
    assert!(decline_of(&gbq(DataType::Int8, &[])).contains("int8"));
}
