//! The shapeless decode closure of a GroupQueryAttention decoder: compiled runs equal eager
//! ones token by token, one closure serves every past length, no host read inside the step,
//! and runs outside the decode layout (padding, a local window, a step that depends on the
//! past length) go eager and stay right.

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use plan::CompileClass;
use runtime::{Executable, OutputTensor, RunPath};

mod common;
use common::{executable_with, f32_bytes, i64_bytes, input};

const HIDDEN: i64 = 32;
const HEADS: i64 = 4;
const KV_HEADS: i64 = 2;
const HEAD: i64 = HIDDEN / HEADS;
const VOCAB: i64 = 48;
const MAX_POS: i64 = 64;

fn sym(names: &[&str]) -> Vec<Dim> {
    names
        .iter()
        .map(|n| match n.parse::<i64>() {
            Ok(v) => Dim::Fixed(v),
            Err(_) => Dim::Symbolic((*n).into()),
        })
        .collect()
}

/// Deterministic weights in [-0.5, 0.5).
fn weights(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn node(op: &str, domain: &str, ins: &[&str], outs: &[&str]) -> Node {
    let mut n = Node::new(op, ins.iter().copied(), outs.iter().copied());
    n.domain = domain.into();
    n.name = outs[0].into();
    n
}

fn typed(g: &mut Graph, name: &str, dtype: DataType, shape: Option<Vec<Dim>>) {
    g.value_info.insert(
        name.into(),
        ValueInfo {
            name: name.into(),
            dtype: Some(dtype),
            shape,
        },
    );
}

/// A one-layer decoder in ONNX Runtime GenAI's layout: embeddings, q/k/v projections,
/// GroupQueryAttention with rotary embedding over a KV cache (`seqlens_k` and
/// `total_sequence_length` from `attention_mask`), and logits. `window` is
/// `local_window_size`; `probe_past` adds an output that slices the present cache with fixed
/// bounds (a step whose arguments depend on the past length).
fn decoder(window: i64, probe_past: bool) -> Graph {
    decoder_with(window, probe_past, None)
}

/// [`decoder`] whose GroupQueryAttention has a soft cap of `softcap` and `smooth_softmax`
/// (a zero sink logit per head) when `softcap` is given.
fn decoder_with(window: i64, probe_past: bool, softcap: Option<f32>) -> Graph {
    let mut g = Graph::default();
    g.opset_imports.insert(String::new(), 17);
    g.opset_imports.insert("com.microsoft".into(), 1);
    g.inputs = vec![
        ValueInfo::new("input_ids", DataType::Int64, sym(&["batch", "sequence"])),
        ValueInfo::new(
            "attention_mask",
            DataType::Int64,
            sym(&["batch", "total_sequence"]),
        ),
    ];
    let kv = sym(&["batch", "2", "past_sequence", "8"]);
    for n in ["past_key_values.0.key", "past_key_values.0.value"] {
        g.inputs
            .push(ValueInfo::new(n, DataType::Float, kv.clone()));
    }
    let present = sym(&["batch", "2", "total_sequence", "8"]);
    g.outputs = vec![
        ValueInfo::new("logits", DataType::Float, sym(&["batch", "sequence", "48"])),
        ValueInfo::new("present.0.key", DataType::Float, present.clone()),
        ValueInfo::new("present.0.value", DataType::Float, present),
    ];
    let mut init = |name: &str, dims: Vec<i64>, seed: u64| {
        let n = dims.iter().product::<i64>() as usize;
        g.initializers
            .insert(name.into(), TensorData::from_f32(dims, &weights(seed, n)));
    };
    init("embed", vec![VOCAB, HIDDEN], 1);
    init("wq", vec![HIDDEN, HEADS * HEAD], 2);
    init("wk", vec![HIDDEN, KV_HEADS * HEAD], 3);
    init("wv", vec![HIDDEN, KV_HEADS * HEAD], 4);
    init("wo", vec![HEADS * HEAD, VOCAB], 5);
    let half = (HEAD / 2) as usize;
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in 0..MAX_POS {
        for i in 0..half {
            let f = p as f32 / 10000f32.powf(2.0 * i as f32 / HEAD as f32);
            cos.push(f.cos());
            sin.push(f.sin());
        }
    }
    g.initializers.insert(
        "cos_cache".into(),
        TensorData::from_f32(vec![MAX_POS, half as i64], &cos),
    );
    g.initializers.insert(
        "sin_cache".into(),
        TensorData::from_f32(vec![MAX_POS, half as i64], &sin),
    );
    g.initializers
        .insert("one".into(), TensorData::from_i64(vec![1], &[1]));
    g.initializers
        .insert("one_scalar".into(), TensorData::from_i64(vec![], &[1]));
    let mut gather = node("Gather", "", &["embed", "input_ids"], &["x"]);
    gather.attributes.insert("axis".into(), Attribute::Int(0));
    let mut sum = node("ReduceSum", "", &["attention_mask", "one"], &["mask_sum"]);
    sum.attributes.insert("keepdims".into(), Attribute::Int(0));
    let mut cast_seqlens = node("Cast", "", &["seqlens_i64"], &["seqlens_k"]);
    cast_seqlens
        .attributes
        .insert("to".into(), Attribute::Int(6));
    let mut total_gather = node("Gather", "", &["mask_shape", "one_scalar"], &["total_i64"]);
    total_gather
        .attributes
        .insert("axis".into(), Attribute::Int(0));
    let mut cast_total = node("Cast", "", &["total_i64"], &["total_seq_len"]);
    cast_total.attributes.insert("to".into(), Attribute::Int(6));
    let mut gqa = node(
        "GroupQueryAttention",
        "com.microsoft",
        &[
            "q",
            "k",
            "v",
            "past_key_values.0.key",
            "past_key_values.0.value",
            "seqlens_k",
            "total_seq_len",
            "cos_cache",
            "sin_cache",
        ],
        &["attn", "present.0.key", "present.0.value"],
    );
    for (k, v) in [
        ("num_heads", HEADS),
        ("kv_num_heads", KV_HEADS),
        ("do_rotary", 1),
        ("local_window_size", window),
    ] {
        gqa.attributes.insert(k.into(), Attribute::Int(v));
    }
    if let Some(cap) = softcap {
        gqa.attributes
            .insert("softcap".into(), Attribute::Float(cap));
        gqa.attributes
            .insert("smooth_softmax".into(), Attribute::Int(1));
    }
    g.nodes = vec![
        gather,
        node("MatMul", "", &["x", "wq"], &["q"]),
        node("MatMul", "", &["x", "wk"], &["k"]),
        node("MatMul", "", &["x", "wv"], &["v"]),
        sum,
        node("Sub", "", &["mask_sum", "one"], &["seqlens_i64"]),
        cast_seqlens,
        node("Shape", "", &["attention_mask"], &["mask_shape"]),
        total_gather,
        cast_total,
        gqa,
        node("MatMul", "", &["attn", "wo"], &["logits"]),
    ];
    for (name, dtype, shape) in [
        (
            "x",
            DataType::Float,
            Some(sym(&["batch", "sequence", "32"])),
        ),
        (
            "q",
            DataType::Float,
            Some(sym(&["batch", "sequence", "32"])),
        ),
        (
            "k",
            DataType::Float,
            Some(sym(&["batch", "sequence", "16"])),
        ),
        (
            "v",
            DataType::Float,
            Some(sym(&["batch", "sequence", "16"])),
        ),
        (
            "attn",
            DataType::Float,
            Some(sym(&["batch", "sequence", "32"])),
        ),
        ("mask_sum", DataType::Int64, Some(sym(&["batch"]))),
        ("seqlens_i64", DataType::Int64, Some(sym(&["batch"]))),
        ("seqlens_k", DataType::Int32, Some(sym(&["batch"]))),
        ("mask_shape", DataType::Int64, Some(sym(&["2"]))),
        ("total_i64", DataType::Int64, Some(vec![])),
        ("total_seq_len", DataType::Int32, Some(vec![])),
    ] {
        typed(&mut g, name, dtype, shape);
    }
    if probe_past {
        for (name, v) in [("s0", 0), ("s1", 2), ("s_axis", 2)] {
            g.initializers
                .insert(name.into(), TensorData::from_i64(vec![1], &[v]));
        }
        g.nodes.push(node(
            "Slice",
            "",
            &["present.0.key", "s0", "s1", "s_axis"],
            &["first_keys"],
        ));
        g.outputs.push(ValueInfo::new(
            "first_keys",
            DataType::Float,
            sym(&["batch", "2", "2", "8"]),
        ));
    }
    g
}

/// One generation step's inputs (owned), in the plan's input order.
struct Step {
    ids: Vec<i64>,
    mask: Vec<i64>,
    past_k: Vec<f32>,
    past_v: Vec<f32>,
    batch: i64,
    seq: i64,
    past: i64,
}

impl Step {
    fn run(&self, e: &Executable) -> Vec<OutputTensor> {
        let (ids, mask) = (i64_bytes(&self.ids), i64_bytes(&self.mask));
        let (pk, pv) = (f32_bytes(&self.past_k), f32_bytes(&self.past_v));
        let ids_dims = [self.batch, self.seq];
        let mask_dims = [self.batch, self.past + self.seq];
        let kv_dims = [self.batch, KV_HEADS, self.past, HEAD];
        e.run(&[
            input(DataType::Int64, &ids_dims, &ids),
            input(DataType::Int64, &mask_dims, &mask),
            input(DataType::Float, &kv_dims, &pk),
            input(DataType::Float, &kv_dims, &pv),
        ])
        .expect("run")
    }
}

fn floats(t: &OutputTensor) -> Vec<f32> {
    t.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let worst = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= 1e-4, "{what}: max |difference| {worst}");
}

/// Greedy generation of `steps` tokens after `prompt` (one row per batch entry; `pad[b]`
/// leading mask zeros in row `b`), on a compiled and an eager executable side by side: the
/// outputs of every run agree. Returns the compiled executable.
fn generate(g: &Graph, prompt: &[Vec<i64>], pad: &[i64], steps: usize) -> Executable {
    generate_with(g, Some(true), prompt, pad, steps)
}

/// [`generate`] with the compiled side's `compile` option.
fn generate_with(
    g: &Graph,
    compile: Option<bool>,
    prompt: &[Vec<i64>],
    pad: &[i64],
    steps: usize,
) -> Executable {
    let compiled = executable_with(g, compile, None);
    let eager = executable_with(g, Some(false), None);
    let batch = prompt.len() as i64;
    let seq = prompt[0].len() as i64;
    let mut step = Step {
        ids: prompt.concat(),
        mask: (0..batch)
            .flat_map(|b| (0..seq).map(move |t| i64::from(t >= pad[b as usize])))
            .collect(),
        past_k: Vec::new(),
        past_v: Vec::new(),
        batch,
        seq,
        past: 0,
    };
    for i in 0..=steps {
        let got = step.run(&compiled);
        let want = step.run(&eager);
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.dims, b.dims, "step {i} output {k}");
            assert_close(&floats(a), &floats(b), &format!("step {i} output {k}"));
        }
        let logits = floats(&want[0]);
        let next: Vec<i64> = (0..batch as usize)
            .map(|b| {
                let row = &logits
                    [(b * step.seq as usize + step.seq as usize - 1) * VOCAB as usize..]
                    [..VOCAB as usize];
                row.iter()
                    .enumerate()
                    .max_by(|x, y| x.1.total_cmp(y.1))
                    .map(|(t, _)| t as i64)
                    .unwrap_or(0)
            })
            .collect();
        let total = step.past + step.seq;
        let mut mask = Vec::new();
        for b in 0..batch as usize {
            mask.extend_from_slice(&step.mask[b * total as usize..(b + 1) * total as usize]);
            mask.push(1);
        }
        step = Step {
            ids: next,
            mask,
            past_k: floats(&want[1]),
            past_v: floats(&want[2]),
            batch,
            seq: 1,
            past: total,
        };
    }
    compiled
}

#[test]
fn a_gqa_decoder_decodes_through_one_shapeless_closure() {
    let g = decoder(-1, false);
    let e = executable_with(&g, Some(true), None);
    assert_eq!(e.plan().compile_class(), CompileClass::ShapeKeyed);
    assert!(
        e.plan().decode_compilable(),
        "{}\n{:#?}",
        e.plan(),
        e.plan().compile_blockers()
    );
    // seqlens_k and total_sequence_length are computed on the host from the mask.
    assert_eq!(e.plan().host.value_inputs.len(), 1);
    let e = generate(&g, &[vec![3, 7, 1, 12]], &[0], 8);
    let stats = e.run_stats();
    assert_eq!(stats.decode_compiled, 8, "{stats:?}");
    assert_eq!(stats.prefill_compiled, 1, "{stats:?}");
    let last = stats.last.unwrap();
    assert_eq!(last.path, RunPath::DecodeCompiled);
    assert_eq!((last.host_reads, last.host_syncs), (0, 1), "{last:?}");
    // One decode closure for every past length, one prefill closure.
    let c = e.cache_stats();
    assert_eq!((c.compiles, c.hits), (2, 7), "{c:?}");
}

#[test]
fn the_cpu_default_compiles_the_decode_closure_only() {
    // compile unset on the CPU: decode steps take the shapeless closure (one compile for
    // every token), the prefill runs eagerly (a shape-keyed closure would compile per shape).
    let g = decoder(-1, false);
    let e = generate_with(&g, None, &[vec![3, 7, 1, 12]], &[0], 6);
    let stats = e.run_stats();
    assert_eq!(stats.decode_compiled, 6, "{stats:?}");
    assert_eq!((stats.prefill_compiled, stats.eager), (0, 1), "{stats:?}");
    let c = e.cache_stats();
    assert_eq!((c.compiles, c.hits), (1, 5), "{c:?}");
}

#[test]
fn a_batch_of_equal_rows_shares_the_closure() {
    let g = decoder(-1, false);
    let e = generate(&g, &[vec![3, 7, 1], vec![5, 5, 9]], &[0, 0], 5);
    assert_eq!(e.run_stats().decode_compiled, 5);
}

#[test]
fn a_padded_batch_decodes_eagerly_and_right() {
    let g = decoder(-1, false);
    // Row 1 is left-padded: its past is shorter than the cache, so the layout is not the
    // decode layout and the runs go eager (with the same outputs).
    let e = generate(&g, &[vec![3, 7, 1, 4], vec![0, 0, 5, 9]], &[0, 2], 4);
    let stats = e.run_stats();
    assert_eq!(stats.decode_compiled, 0, "{stats:?}");
    assert_eq!(stats.eager, 4, "{stats:?}");
    assert_eq!(e.cache_stats().eager_fallbacks, 4);
}

#[test]
fn a_local_window_leaves_the_closure_once_it_masks_keys() {
    // Window 6: decode steps see every key while the cache holds at most 6 tokens (past 3, 4,
    // 5), then the window masks the oldest keys and the runs go eager.
    let g = decoder(6, false);
    let e = generate(&g, &[vec![3, 7, 1]], &[0], 6);
    let stats = e.run_stats();
    assert_eq!(stats.decode_compiled, 3, "{stats:?}");
    assert_eq!(stats.eager, 3, "{stats:?}");
}

#[test]
fn a_step_that_depends_on_the_past_length_keeps_decode_eager() {
    // A Slice of the present cache with fixed bounds: its input grows with the past, so the
    // second trace with a longer past disagrees and the closure is refused.
    let g = decoder(-1, true);
    let e = generate(&g, &[vec![3, 7, 1]], &[0], 4);
    let stats = e.run_stats();
    assert_eq!(stats.decode_compiled, 0, "{stats:?}");
    assert_eq!(stats.eager, 4, "{stats:?}");
}

#[test]
fn a_soft_capped_decoder_with_sinks_decodes_through_the_closure() {
    // The soft cap and the sinks are computed step by step, in a layout in which no reshape
    // touches the key length: one shapeless closure still serves every decode step, and its
    // results equal the eager ones.
    let g = decoder_with(-1, false, Some(0.8));
    let e = generate(&g, &[vec![3, 7, 1, 12]], &[0], 6);
    let stats = e.run_stats();
    assert_eq!(stats.decode_compiled, 6, "{stats:?}");
    let last = stats.last.unwrap();
    assert_eq!((last.host_reads, last.host_syncs), (0, 1), "{last:?}");
}
