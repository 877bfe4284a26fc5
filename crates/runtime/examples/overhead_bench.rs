//! The EP's own cost per run: the same computation through the EP's runtime and written
//! directly against the `mlx` crate, in one process.
//!
//! `cargo xtask bench overhead` runs this. Workloads: a 1-node graph, one MiniLM-class encoder
//! layer, a whole 6-layer MiniLM-class encoder, and one decode step of the bench Llama of
//! `tests/python/llm.py` (the "tiny" config, GroupQueryAttention with a KV cache, past length
//! 128). Each is an ONNX graph (built here as `onnx-ir`, node for node as the Python builders
//! write it) and the same math as plain MLX calls.
//!
//! - **ep**: `plan::build_plan` then `runtime::Executable::run` with the EP's default options for
//!   the device: the EP minus ORT's shell (no kernel-context I/O, no ORT graph optimizations).
//! - **raw**: the MLX calls an MLX programmer would write (fast layer norm / RMS norm / RoPE /
//!   attention), eagerly and as one compiled closure; the faster of the two counts.
//!
//! Both sides do the same per-run work around the math: inputs are uploaded from host bytes
//! every run (the decode step gets the same past every run, so the EP's KV-cache carrying never
//! applies; it compares bytes and uploads like raw), and outputs are evaluated and made
//! row-contiguous. Times are medians over runs after a warm-up (compiling happens there).
//!
//! Arguments: `--device cpu|gpu`, `--out <json>`, `--budget-ms <per variant>`, `--only <name,...>`,
//! `--explain` (print each plan, and what keeps it from the shapeless compiled slot).
//! Prints `name ep_ms raw_ms ep/raw fixed_us` per workload and, last,
//! `overhead: ep/raw=<r> fixed_us=<us>` for the decode step. `fixed_us` is `ep - raw` in
//! microseconds: what the EP adds per run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

use mlx::{Array, Closure, Device, Dtype, Stream, fast, ops};
use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use runtime::{DeviceKind, Executable, InputTensor, RuntimeOptions};

mod bench_common;
use bench_common::{Timer, median_phases, phases_json, write_report};

type MlxResult<T> = mlx::Result<T>;
/// The raw computation: input arrays (plan input order) to output arrays (plan output order).
type RawFn = Box<dyn FnMut(&[Array], &Stream) -> MlxResult<Vec<Array>> + Send>;

const MS: &str = "com.microsoft";

/// A deterministic pseudo-random source (weights only need plausible magnitudes).
struct Rng(u64);

impl Rng {
    fn normal(&mut self) -> f32 {
        // Sum of uniforms, roughly normal with unit variance.
        let mut s = 0.0f32;
        for _ in 0..4 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s += ((self.0 >> 40) as f32) / ((1u64 << 24) as f32) - 0.5;
        }
        s * 1.732
    }

    fn fill(&mut self, n: usize, std: f32) -> Vec<f32> {
        (0..n).map(|_| self.normal() * std).collect()
    }
}

/// An ONNX graph and the same weights as MLX arrays, built side by side.
struct Builder {
    g: Graph,
    rng: Rng,
    arrays: HashMap<String, Array>,
}

impl Builder {
    fn new(name: &str) -> Builder {
        let mut g = Graph {
            name: name.into(),
            ..Graph::default()
        };
        g.opset_imports.insert(String::new(), 21);
        g.opset_imports.insert(MS.into(), 1);
        Builder {
            g,
            rng: Rng(0x5eed),
            arrays: HashMap::new(),
        }
    }

    fn constant_f32(&mut self, name: &str, dims: &[i64], values: Vec<f32>) -> String {
        let shape: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
        self.arrays.insert(
            name.into(),
            Array::from_slice(&values, &shape).expect("weight array"),
        );
        self.g
            .initializers
            .insert(name.into(), TensorData::from_f32(dims.to_vec(), &values));
        name.into()
    }

    fn constant_i64(&mut self, name: &str, dims: &[i64], values: &[i64]) -> String {
        self.g
            .initializers
            .insert(name.into(), TensorData::from_i64(dims.to_vec(), values));
        name.into()
    }

    fn weight(&mut self, name: &str, dims: &[i64], std: f32) -> String {
        let n = dims.iter().product::<i64>() as usize;
        let values = self.rng.fill(n, std);
        self.constant_f32(name, dims, values)
    }

    fn around_one(&mut self, name: &str, n: i64) -> String {
        let values = self
            .rng
            .fill(n as usize, 0.1)
            .iter()
            .map(|v| v + 1.0)
            .collect();
        self.constant_f32(name, &[n], values)
    }

    /// Adds a node; each output gets dtype `dtype` in `value_info`.
    fn node(
        &mut self,
        op: &str,
        domain: &str,
        inputs: &[&str],
        outputs: &[&str],
        dtype: DataType,
        attrs: &[(&str, Attribute)],
    ) -> String {
        let mut n = Node::new(op, inputs.iter().copied(), outputs.iter().copied());
        n.name = outputs
            .iter()
            .find(|o| !o.is_empty())
            .unwrap_or(&op)
            .to_string();
        n.domain = domain.into();
        for (k, v) in attrs {
            n = n.with_attr(k, v.clone());
        }
        for o in outputs.iter().filter(|o| !o.is_empty()) {
            let info = ValueInfo {
                name: o.to_string(),
                dtype: Some(dtype),
                shape: None,
            };
            self.g.value_info.insert(o.to_string(), info);
        }
        self.g.nodes.push(n);
        outputs[0].to_string()
    }

    fn op(&mut self, op: &str, inputs: &[&str], out: &str) -> String {
        self.node(op, "", inputs, &[out], DataType::Float, &[])
    }

    /// A float32 `Transpose` of `x` by `perm`.
    fn transpose(&mut self, x: &str, out: &str, perm: &[i64]) -> String {
        let perm = [("perm", Attribute::Ints(perm.to_vec()))];
        self.node("Transpose", "", &[x], &[out], DataType::Float, &perm)
    }

    fn linear(&mut self, x: &str, p: &str, k: i64, n: i64, bias: bool) -> String {
        let w = self.weight(&format!("{p}.weight"), &[k, n], 1.0 / (k as f32).sqrt());
        let y = self.op("MatMul", &[x, &w], &format!("{p}/MatMul"));
        if !bias {
            return y;
        }
        let b = self.weight(&format!("{p}.bias"), &[n], 0.1);
        self.op("Add", &[&y, &b], &format!("{p}/Add"))
    }

    fn array(&self, name: &str) -> Array {
        self.arrays[name].clone()
    }
}

fn sym(names: &[&str]) -> Vec<Dim> {
    names
        .iter()
        .map(|n| match n.parse::<i64>() {
            Ok(d) => Dim::Fixed(d),
            Err(_) => Dim::Symbolic(n.to_string()),
        })
        .collect()
}

/// One benchmark case.
struct Workload {
    name: &'static str,
    graph: Graph,
    /// Inputs in graph-input order: dtype, dims, bytes.
    inputs: Vec<(DataType, Vec<i64>, Vec<u8>)>,
    /// Makes the raw computation (called once for eager, once for the compiled closure).
    raw: Box<dyn Fn() -> RawFn>,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// ---------------------------------------------------------------------------------------------
// (a) one node

fn tiny() -> Workload {
    let mut b = Builder::new("tiny");
    b.g.inputs
        .push(ValueInfo::new("x", DataType::Float, sym(&["n", "64"])));
    b.g.outputs
        .push(ValueInfo::new("y", DataType::Float, sym(&["n", "64"])));
    let bias = b.weight("b", &[64], 1.0);
    b.node("Add", "", &["x", &bias], &["y"], DataType::Float, &[]);
    let ba = b.array("b");
    let x = b.rng.fill(64, 1.0);
    Workload {
        name: "1-node",
        graph: b.g,
        inputs: vec![(DataType::Float, vec![1, 64], f32_bytes(&x))],
        raw: Box::new(move || {
            let ba = ba.clone();
            Box::new(move |x: &[Array], s: &Stream| Ok(vec![ops::add(&x[0], &ba, s)?]))
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// (b), (c) MiniLM-class encoder (tests/python/models.py `minilm_encoder`, without the mask)

#[derive(Clone, Copy)]
struct EncoderCfg {
    hidden: i64,
    heads: i64,
    intermediate: i64,
    vocab: i64,
}

const MINILM: EncoderCfg = EncoderCfg {
    hidden: 384,
    heads: 12,
    intermediate: 1536,
    vocab: 1000,
};

/// Weights of one encoder layer, as arrays.
#[derive(Clone)]
struct LayerArrays {
    q: (Array, Array),
    k: (Array, Array),
    v: (Array, Array),
    o: (Array, Array),
    ln1: (Array, Array),
    up: (Array, Array),
    down: (Array, Array),
    ln2: (Array, Array),
}

fn encoder_layer_graph(b: &mut Builder, x: &str, p: &str, c: EncoderCfg) -> (String, LayerArrays) {
    let heads_shape = b.constant_i64("heads_shape", &[4], &[0, 0, c.heads, c.hidden / c.heads]);
    let merge_shape = b.constant_i64("merge_shape", &[3], &[0, 0, c.hidden]);
    let scale = b.constant_f32(
        "attn_scale",
        &[],
        vec![((c.hidden / c.heads) as f32).sqrt()],
    );
    let sqrt2 = b.constant_f32("gelu_sqrt2", &[], vec![std::f32::consts::SQRT_2]);
    let one = b.constant_f32("gelu_one", &[], vec![1.0]);
    let half = b.constant_f32("gelu_half", &[], vec![0.5]);
    let h = c.hidden;
    let heads = |b: &mut Builder, which: &str| {
        let y = b.linear(x, &format!("{p}.{which}"), h, h, true);
        b.op(
            "Reshape",
            &[&y, &heads_shape],
            &format!("{p}.{which}/Reshape"),
        )
    };
    let q = heads(b, "query");
    let k = heads(b, "key");
    let v = heads(b, "value");
    let qt = b.transpose(&q, &format!("{p}/qT"), &[0, 2, 1, 3]);
    let kt = b.transpose(&k, &format!("{p}/kT"), &[0, 2, 3, 1]);
    let vt = b.transpose(&v, &format!("{p}/vT"), &[0, 2, 1, 3]);
    let scores = b.op("MatMul", &[&qt, &kt], &format!("{p}/scores"));
    let scaled = b.op("Div", &[&scores, &scale], &format!("{p}/scaled"));
    let probs = b.node(
        "Softmax",
        "",
        &[&scaled],
        &[&format!("{p}/probs")],
        DataType::Float,
        &[("axis", Attribute::Int(-1))],
    );
    let ctx = b.op("MatMul", &[&probs, &vt], &format!("{p}/ctx"));
    let ctx = b.transpose(&ctx, &format!("{p}/ctxT"), &[0, 2, 1, 3]);
    let ctx = b.op("Reshape", &[&ctx, &merge_shape], &format!("{p}/merged"));
    let attn = b.linear(&ctx, &format!("{p}.attention.output"), h, h, true);
    let res = b.op("Add", &[&attn, x], &format!("{p}/res1"));
    let layer_norm = |b: &mut Builder, x: &str, name: &str| {
        let gamma = b.around_one(&format!("{name}.weight"), h);
        let beta = b.weight(&format!("{name}.bias"), &[h], 0.1);
        b.node(
            "LayerNormalization",
            "",
            &[x, &gamma, &beta],
            &[&format!("{name}/LayerNorm")],
            DataType::Float,
            &[
                ("axis", Attribute::Int(-1)),
                ("epsilon", Attribute::Float(1e-12)),
            ],
        )
    };
    let x1 = layer_norm(b, &res, &format!("{p}.ln1"));
    let up = b.linear(&x1, &format!("{p}.intermediate"), h, c.intermediate, true);
    let d = b.op("Div", &[&up, &sqrt2], &format!("{p}/gelu_div"));
    let e = b.op("Erf", &[&d], &format!("{p}/gelu_erf"));
    let e1 = b.op("Add", &[&e, &one], &format!("{p}/gelu_add"));
    let m = b.op("Mul", &[&up, &e1], &format!("{p}/gelu_mul"));
    let g = b.op("Mul", &[&m, &half], &format!("{p}/gelu"));
    let down = b.linear(&g, &format!("{p}.output"), c.intermediate, h, true);
    let res2 = b.op("Add", &[&down, &x1], &format!("{p}/res2"));
    let out = layer_norm(b, &res2, &format!("{p}.ln2"));
    let pair = |b: &Builder, n: &str| {
        (
            b.array(&format!("{n}.weight")),
            b.array(&format!("{n}.bias")),
        )
    };
    let arrays = LayerArrays {
        q: pair(b, &format!("{p}.query")),
        k: pair(b, &format!("{p}.key")),
        v: pair(b, &format!("{p}.value")),
        o: pair(b, &format!("{p}.attention.output")),
        ln1: pair(b, &format!("{p}.ln1")),
        up: pair(b, &format!("{p}.intermediate")),
        down: pair(b, &format!("{p}.output")),
        ln2: pair(b, &format!("{p}.ln2")),
    };
    (out, arrays)
}

/// One encoder layer as plain MLX calls (`[B, S, hidden]` in and out).
fn encoder_layer_raw(x: &Array, w: &LayerArrays, c: EncoderCfg, s: &Stream) -> MlxResult<Array> {
    let shape = x.shape();
    let (bsz, seq) = (shape[0], shape[1]);
    let (h, nh) = (c.hidden as i32, c.heads as i32);
    let d = h / nh;
    let lin = |x: &Array, wb: &(Array, Array)| ops::add(&ops::matmul(x, &wb.0, s)?, &wb.1, s);
    let split = |y: Array| -> MlxResult<Array> {
        ops::transpose_axes(&ops::reshape(&y, &[bsz, seq, nh, d], s)?, &[0, 2, 1, 3], s)
    };
    let q = split(lin(x, &w.q)?)?;
    let k = split(lin(x, &w.k)?)?;
    let v = split(lin(x, &w.v)?)?;
    // As the graph writes it (MatMul, Div, Softmax, MatMul): the EP runs the ops it is given,
    // so a fused attention here would measure a graph rewrite, not the EP's overhead.
    let scale = Array::scalar_f32((d as f32).sqrt());
    let kt = ops::transpose_axes(&k, &[0, 1, 3, 2], s)?;
    let scores = ops::divide(&ops::matmul(&q, &kt, s)?, &scale, s)?;
    let probs = ops::softmax_axes(&scores, &[-1], true, s)?;
    let ctx = ops::matmul(&probs, &v, s)?;
    let ctx = ops::reshape(
        &ops::transpose_axes(&ctx, &[0, 2, 1, 3], s)?,
        &[bsz, seq, h],
        s,
    )?;
    let res = ops::add(&lin(&ctx, &w.o)?, x, s)?;
    let x1 = fast::layer_norm(&res, Some(&w.ln1.0), Some(&w.ln1.1), 1e-12, s)?;
    let up = lin(&x1, &w.up)?;
    let inv_sqrt2 = Array::scalar_f32(std::f32::consts::FRAC_1_SQRT_2);
    let gelu = ops::multiply(
        &ops::multiply(
            &up,
            &ops::add(
                &ops::erf(&ops::multiply(&up, &inv_sqrt2, s)?, s)?,
                &Array::scalar_f32(1.0),
                s,
            )?,
            s,
        )?,
        &Array::scalar_f32(0.5),
        s,
    )?;
    let res2 = ops::add(&lin(&gelu, &w.down)?, &x1, s)?;
    fast::layer_norm(&res2, Some(&w.ln2.0), Some(&w.ln2.1), 1e-12, s)
}

fn encoder_layer(batch: i64, seq: i64) -> Workload {
    let c = MINILM;
    let mut b = Builder::new("encoder_layer");
    b.g.inputs.push(ValueInfo::new(
        "x",
        DataType::Float,
        sym(&["batch", "seq", &c.hidden.to_string()]),
    ));
    let (out, w) = encoder_layer_graph(&mut b, "x", "layer0", c);
    rename_output(&mut b.g, &out, "y");
    b.g.outputs.push(ValueInfo::new(
        "y",
        DataType::Float,
        sym(&["batch", "seq", &c.hidden.to_string()]),
    ));
    let x = b.rng.fill((batch * seq * c.hidden) as usize, 1.0);
    Workload {
        name: "encoder-layer",
        graph: b.g,
        inputs: vec![(DataType::Float, vec![batch, seq, c.hidden], f32_bytes(&x))],
        raw: Box::new(move || {
            let w = w.clone();
            Box::new(move |x: &[Array], s: &Stream| Ok(vec![encoder_layer_raw(&x[0], &w, c, s)?]))
        }),
    }
}

/// Renames the value `from` (a node output) to `to` everywhere.
fn rename_output(g: &mut Graph, from: &str, to: &str) {
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().chain(n.outputs.iter_mut()) {
            if v == from {
                *v = to.to_string();
            }
        }
    }
    if let Some(mut info) = g.value_info.remove(from) {
        info.name = to.into();
        g.value_info.insert(to.into(), info);
    }
}

fn encoder(layers: usize, batch: i64, seq: i64) -> Workload {
    let c = MINILM;
    let h = c.hidden;
    let mut b = Builder::new("encoder");
    b.g.inputs.push(ValueInfo::new(
        "input_ids",
        DataType::Int64,
        sym(&["batch", "seq"]),
    ));
    let word = b.weight("embeddings.word", &[c.vocab, h], 1.0);
    let x = b.node(
        "Gather",
        "",
        &[&word, "input_ids"],
        &["emb/word"],
        DataType::Float,
        &[("axis", Attribute::Int(0))],
    );
    let pos = b.weight("embeddings.position", &[seq, h], 1.0);
    let x = b.op("Add", &[&x, &pos], "emb/add_pos");
    let tt = b.weight("embeddings.token_type", &[h], 1.0);
    let x = b.op("Add", &[&x, &tt], "emb/add_tt");
    let gamma = b.around_one("emb.ln.weight", h);
    let beta = b.weight("emb.ln.bias", &[h], 0.1);
    let mut x = b.node(
        "LayerNormalization",
        "",
        &[&x, &gamma, &beta],
        &["emb/LayerNorm"],
        DataType::Float,
        &[
            ("axis", Attribute::Int(-1)),
            ("epsilon", Attribute::Float(1e-12)),
        ],
    );
    let mut layer_weights = Vec::new();
    for i in 0..layers {
        let (out, w) = encoder_layer_graph(&mut b, &x, &format!("layer{i}"), c);
        x = out;
        layer_weights.push(w);
    }
    rename_output(&mut b.g, &x, "last_hidden_state");
    b.g.outputs.push(ValueInfo::new(
        "last_hidden_state",
        DataType::Float,
        sym(&["batch", "seq", &h.to_string()]),
    ));
    let emb = (
        b.array("embeddings.word"),
        b.array("embeddings.position"),
        b.array("embeddings.token_type"),
        b.array("emb.ln.weight"),
        b.array("emb.ln.bias"),
    );
    let ids: Vec<i64> = (0..batch * seq).map(|i| (i * 37 + 11) % c.vocab).collect();
    Workload {
        name: "encoder-6l",
        graph: b.g,
        inputs: vec![(DataType::Int64, vec![batch, seq], i64_bytes(&ids))],
        raw: Box::new(move || {
            let (emb, layer_weights) = (emb.clone(), layer_weights.clone());
            Box::new(move |x: &[Array], s: &Stream| {
                let mut h = ops::take_axis(&emb.0, &x[0], 0, s)?;
                h = ops::add(&ops::add(&h, &emb.1, s)?, &emb.2, s)?;
                h = fast::layer_norm(&h, Some(&emb.3), Some(&emb.4), 1e-12, s)?;
                for w in &layer_weights {
                    h = encoder_layer_raw(&h, w, c, s)?;
                }
                Ok(vec![h])
            })
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// (d) one decode step of tests/python/llm.py's "tiny" Llama

#[derive(Clone, Copy)]
struct LlamaCfg {
    layers: usize,
    hidden: i64,
    heads: i64,
    kv_heads: i64,
    intermediate: i64,
    vocab: i64,
    max_positions: i64,
    eps: f32,
}

const TINY_LLAMA: LlamaCfg = LlamaCfg {
    layers: 4,
    hidden: 256,
    heads: 8,
    kv_heads: 2,
    intermediate: 512,
    vocab: 1024,
    max_positions: 512,
    eps: 1e-5,
};

#[derive(Clone)]
struct LlamaLayer {
    ln1: Array,
    q: Array,
    k: Array,
    v: Array,
    o: Array,
    ln2: Array,
    gate: Array,
    up: Array,
    down: Array,
}

fn decode_step(past: i64) -> Workload {
    let c = TINY_LLAMA;
    let (h, d) = (c.hidden, c.hidden / c.heads);
    let mut b = Builder::new("llama_tiny");
    let i64t = DataType::Int64;
    b.g.inputs.push(ValueInfo::new(
        "input_ids",
        i64t,
        sym(&["batch", "sequence"]),
    ));
    b.g.inputs.push(ValueInfo::new(
        "attention_mask",
        i64t,
        sym(&["batch", "total_sequence"]),
    ));
    b.g.outputs.push(ValueInfo::new(
        "logits",
        DataType::Float,
        sym(&["batch", "sequence", &c.vocab.to_string()]),
    ));
    // Attention bookkeeping shared by every layer (as llm.py writes it).
    let one = b.constant_i64("one_i64", &[1], &[1]);
    b.node(
        "ReduceSum",
        "",
        &["attention_mask", &one],
        &["mask_sum"],
        i64t,
        &[("keepdims", Attribute::Int(0))],
    );
    b.node("Sub", "", &["mask_sum", &one], &["seqlens_i64"], i64t, &[]);
    b.node(
        "Cast",
        "",
        &["seqlens_i64"],
        &["seqlens_k"],
        DataType::Int32,
        &[("to", Attribute::Int(6))],
    );
    b.node("Shape", "", &["attention_mask"], &["mask_shape"], i64t, &[]);
    let one_scalar = b.constant_i64("one_scalar", &[], &[1]);
    b.node(
        "Gather",
        "",
        &["mask_shape", &one_scalar],
        &["total_i64"],
        i64t,
        &[("axis", Attribute::Int(0))],
    );
    b.node(
        "Cast",
        "",
        &["total_i64"],
        &["total_seq_len"],
        DataType::Int32,
        &[("to", Attribute::Int(6))],
    );
    // The shapes ORT's inference gives the bookkeeping values (the planner's host program
    // evaluates Shape -> Gather -> Cast from them).
    for (name, dims) in [
        ("mask_sum", &[1i64][..]),
        ("seqlens_i64", &[1]),
        ("seqlens_k", &[1]),
        ("mask_shape", &[2]),
        ("total_i64", &[]),
        ("total_seq_len", &[]),
    ] {
        if let Some(info) = b.g.value_info.get_mut(name) {
            info.shape = Some(dims.iter().map(|&d| Dim::Fixed(d)).collect());
        }
    }
    let half = (d / 2) as usize;
    let mut cos = Vec::with_capacity(c.max_positions as usize * half);
    let mut sin = Vec::with_capacity(cos.capacity());
    for p in 0..c.max_positions {
        for i in 0..half {
            let inv = 1.0 / 10000f64.powf((2 * i) as f64 / d as f64);
            cos.push((p as f64 * inv).cos() as f32);
            sin.push((p as f64 * inv).sin() as f32);
        }
    }
    b.constant_f32("cos_cache", &[c.max_positions, half as i64], cos);
    b.constant_f32("sin_cache", &[c.max_positions, half as i64], sin);
    let emb = b.weight("embed_tokens.weight", &[c.vocab, h], 1.0);
    b.node(
        "Gather",
        "",
        &[&emb, "input_ids"],
        &["embeds"],
        DataType::Float,
        &[("axis", Attribute::Int(0))],
    );
    let std = 1.0 / (h as f32).sqrt();
    let mut residual = "embeds".to_string();
    let mut down: Option<String> = None;
    let mut layers = Vec::new();
    let mut past_inputs = Vec::new();
    let kv_dims = sym(&[
        "batch",
        &c.kv_heads.to_string(),
        "past_sequence",
        &d.to_string(),
    ]);
    let linear = |b: &mut Builder, x: &str, name: &str, k: i64, n: i64, std: f32| {
        let w = b.weight(&format!("{name}.weight"), &[k, n], std);
        b.op("MatMul", &[x, &w], &format!("{name}_out"))
    };
    for i in 0..c.layers {
        let p = format!("layers.{i}");
        let ln1 = b.around_one(&format!("{p}.input_layernorm.weight"), h);
        let ln1_out = format!("{p}.ln1");
        match &down {
            None => {
                b.node(
                    "SimplifiedLayerNormalization",
                    "",
                    &[&residual, &ln1],
                    &[&ln1_out],
                    DataType::Float,
                    &[
                        ("epsilon", Attribute::Float(c.eps)),
                        ("axis", Attribute::Int(-1)),
                    ],
                );
            }
            Some(dn) => {
                let res = format!("{p}.res1");
                b.node(
                    "SkipSimplifiedLayerNormalization",
                    MS,
                    &[dn, &residual, &ln1],
                    &[&ln1_out, "", "", &res],
                    DataType::Float,
                    &[("epsilon", Attribute::Float(c.eps))],
                );
                residual = res;
            }
        }
        let q = linear(
            &mut b,
            &ln1_out,
            &format!("{p}.q_proj"),
            h,
            c.heads * d,
            std,
        );
        let k = linear(
            &mut b,
            &ln1_out,
            &format!("{p}.k_proj"),
            h,
            c.kv_heads * d,
            std,
        );
        let v = linear(
            &mut b,
            &ln1_out,
            &format!("{p}.v_proj"),
            h,
            c.kv_heads * d,
            std,
        );
        // ORT's shape inference gives GroupQueryAttention its hidden sizes.
        for (name, n) in [
            (&q, c.heads * d),
            (&k, c.kv_heads * d),
            (&v, c.kv_heads * d),
        ] {
            if let Some(info) = b.g.value_info.get_mut(name.as_str()) {
                info.shape = Some(sym(&["batch", "sequence", &n.to_string()]));
            }
        }
        let (past_k, past_v) = (
            format!("past_key_values.{i}.key"),
            format!("past_key_values.{i}.value"),
        );
        let (present_k, present_v) = (format!("present.{i}.key"), format!("present.{i}.value"));
        for n in [&past_k, &past_v] {
            b.g.inputs
                .push(ValueInfo::new(n.as_str(), DataType::Float, kv_dims.clone()));
            past_inputs.push(n.clone());
        }
        for n in [&present_k, &present_v] {
            b.g.outputs.push(ValueInfo::new(
                n.as_str(),
                DataType::Float,
                sym(&[
                    "batch",
                    &c.kv_heads.to_string(),
                    "total_sequence",
                    &d.to_string(),
                ]),
            ));
        }
        let attn = format!("{p}.attn");
        b.node(
            "GroupQueryAttention",
            MS,
            &[
                &q,
                &k,
                &v,
                &past_k,
                &past_v,
                "seqlens_k",
                "total_seq_len",
                "cos_cache",
                "sin_cache",
            ],
            &[&attn, &present_k, &present_v],
            DataType::Float,
            &[
                ("num_heads", Attribute::Int(c.heads)),
                ("kv_num_heads", Attribute::Int(c.kv_heads)),
                ("do_rotary", Attribute::Int(1)),
            ],
        );
        let o = linear(&mut b, &attn, &format!("{p}.o_proj"), c.heads * d, h, std);
        let ln2 = b.around_one(&format!("{p}.post_attention_layernorm.weight"), h);
        let (ln2_out, res2) = (format!("{p}.ln2"), format!("{p}.res2"));
        b.node(
            "SkipSimplifiedLayerNormalization",
            MS,
            &[&o, &residual, &ln2],
            &[&ln2_out, "", "", &res2],
            DataType::Float,
            &[("epsilon", Attribute::Float(c.eps))],
        );
        residual = res2;
        let gate = linear(
            &mut b,
            &ln2_out,
            &format!("{p}.gate_proj"),
            h,
            c.intermediate,
            std,
        );
        let up = linear(
            &mut b,
            &ln2_out,
            &format!("{p}.up_proj"),
            h,
            c.intermediate,
            std,
        );
        let sig = b.op("Sigmoid", &[&gate], &format!("{p}.gate_sig"));
        let silu = b.op("Mul", &[&gate, &sig], &format!("{p}.silu"));
        let gated = b.op("Mul", &[&silu, &up], &format!("{p}.gated"));
        down = Some(linear(
            &mut b,
            &gated,
            &format!("{p}.down_proj"),
            c.intermediate,
            h,
            1.0 / (c.intermediate as f32).sqrt(),
        ));
        let a = |n: &str| b.array(&format!("{p}.{n}"));
        layers.push(LlamaLayer {
            ln1: a("input_layernorm.weight"),
            q: a("q_proj.weight"),
            k: a("k_proj.weight"),
            v: a("v_proj.weight"),
            o: a("o_proj.weight"),
            ln2: a("post_attention_layernorm.weight"),
            gate: a("gate_proj.weight"),
            up: a("up_proj.weight"),
            down: a("down_proj.weight"),
        });
    }
    let final_w = b.around_one("norm.weight", h);
    let dn = down.unwrap_or_default();
    b.node(
        "SkipSimplifiedLayerNormalization",
        MS,
        &[&dn, &residual, &final_w],
        &["final_norm"],
        DataType::Float,
        &[("epsilon", Attribute::Float(c.eps))],
    );
    let lm = linear(&mut b, "final_norm", "lm_head", h, c.vocab, 1.0);
    b.node("Identity", "", &[&lm], &["logits"], DataType::Float, &[]);
    // The outputs in graph order: logits, then present k/v per layer (already pushed after
    // logits in layer order).
    let embed = b.array("embed_tokens.weight");
    let (norm, lm_head) = (b.array("norm.weight"), b.array("lm_head.weight"));
    // Inputs: ids, mask, then per layer past key / value.
    let total = past + 1;
    let mut inputs = vec![
        (i64t, vec![1, 1], i64_bytes(&[17])),
        (i64t, vec![1, total], i64_bytes(&vec![1; total as usize])),
    ];
    for _ in &past_inputs {
        let kv = b.rng.fill((c.kv_heads * past * d) as usize, 1.0);
        inputs.push((
            DataType::Float,
            vec![1, c.kv_heads, past, d],
            f32_bytes(&kv),
        ));
    }
    Workload {
        name: "llama-decode",
        graph: b.g,
        inputs,
        raw: Box::new(move || {
            let (embed, norm, lm_head, layers) =
                (embed.clone(), norm.clone(), lm_head.clone(), layers.clone());
            Box::new(move |x: &[Array], s: &Stream| {
                let (nh, nkv, dd) = (c.heads as i32, c.kv_heads as i32, d as i32);
                let offset = x[2].shape()[2];
                let mut hs = ops::take_axis(&embed, &x[0], 0, s)?; // [1, 1, h]
                let mut outs = vec![Array::scalar_f32(0.0)];
                for (i, w) in layers.iter().enumerate() {
                    let xn = fast::rms_norm(&hs, Some(&w.ln1), c.eps, s)?;
                    let heads = |y: Array, n: i32| -> MlxResult<Array> {
                        ops::transpose_axes(&ops::reshape(&y, &[1, 1, n, dd], s)?, &[0, 2, 1, 3], s)
                    };
                    let q = heads(ops::matmul(&xn, &w.q, s)?, nh)?;
                    let k = heads(ops::matmul(&xn, &w.k, s)?, nkv)?;
                    let v = heads(ops::matmul(&xn, &w.v, s)?, nkv)?;
                    let q = fast::rope(&q, dd, false, Some(10000.0), 1.0, offset, None, s)?;
                    let k = fast::rope(&k, dd, false, Some(10000.0), 1.0, offset, None, s)?;
                    let k = ops::concatenate(&[&x[2 + 2 * i], &k], 2, s)?;
                    let v = ops::concatenate(&[&x[3 + 2 * i], &v], 2, s)?;
                    let a = fast::scaled_dot_product_attention(
                        &q,
                        &k,
                        &v,
                        1.0 / (dd as f32).sqrt(),
                        fast::AttentionMask::None,
                        s,
                    )?;
                    let a = ops::reshape(
                        &ops::transpose_axes(&a, &[0, 2, 1, 3], s)?,
                        &[1, 1, nh * dd],
                        s,
                    )?;
                    hs = ops::add(&hs, &ops::matmul(&a, &w.o, s)?, s)?;
                    let xn = fast::rms_norm(&hs, Some(&w.ln2), c.eps, s)?;
                    let gate = ops::matmul(&xn, &w.gate, s)?;
                    let silu = ops::multiply(&gate, &ops::sigmoid(&gate, s)?, s)?;
                    let mlp = ops::matmul(
                        &ops::multiply(&silu, &ops::matmul(&xn, &w.up, s)?, s)?,
                        &w.down,
                        s,
                    )?;
                    hs = ops::add(&hs, &mlp, s)?;
                    outs.push(k);
                    outs.push(v);
                }
                let xn = fast::rms_norm(&hs, Some(&norm), c.eps, s)?;
                outs[0] = ops::matmul(&xn, &lm_head, s)?;
                Ok(outs)
            })
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// timing

fn upload(inputs: &[(DataType, Vec<i64>, Vec<u8>)]) -> MlxResult<Vec<Array>> {
    inputs
        .iter()
        .map(|(dtype, dims, bytes)| {
            let shape: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
            let dt = match dtype {
                DataType::Int64 => Dtype::Int64,
                _ => Dtype::Float32,
            };
            Array::from_bytes(bytes, &shape, dt)
        })
        .collect()
}

/// Evaluates the outputs together and makes them row-contiguous, as the EP does.
fn finish(outputs: &[Array], s: &Stream) -> MlxResult<Vec<Array>> {
    let refs: Vec<&Array> = outputs.iter().collect();
    mlx::eval(&refs)?;
    outputs.iter().map(|a| a.to_contiguous(s)).collect()
}

struct Measured {
    name: &'static str,
    nodes: usize,
    ep_s: f64,
    ep_eager_s: f64,
    ep_compiled_s: f64,
    raw_eager_s: f64,
    raw_compiled_s: f64,
    path: &'static str,
    /// The path of the other variant (see `measure`).
    other_path: &'static str,
    syncs_per_run: f64,
    reads_per_run: f64,
    max_abs_diff: f32,
    /// Per phase of the EP's run (`RunPhases::named`), the median microseconds.
    phases: Vec<(&'static str, u32)>,
    /// The same for the other variant.
    other_phases: Vec<(&'static str, u32)>,
    /// The same for raw compiled (upload, closure call, evaluation, contiguous outputs).
    raw_phases: Vec<(&'static str, u32)>,
}

impl Measured {
    fn raw_s(&self) -> f64 {
        self.raw_eager_s.min(self.raw_compiled_s)
    }
}

fn ep_executable(
    w: &Workload,
    device: DeviceKind,
    compile: Option<bool>,
) -> Result<Executable, String> {
    let plan = plan::build_plan(&w.graph, &plan::Registry::default())
        .map_err(|e| format!("{}: plan: {e}", w.name))?;
    Executable::new(
        plan,
        &RuntimeOptions {
            device,
            compile,
            ..RuntimeOptions::default()
        },
    )
    .map_err(|e| format!("{}: {e}", w.name))
}

fn measure(w: &Workload, device: DeviceKind, timer: &Timer) -> Result<Measured, String> {
    let stream = Stream::default_for(&match device {
        DeviceKind::Gpu => Device::gpu(),
        DeviceKind::Cpu => Device::cpu(),
    })
    .map_err(|e| e.to_string())?;
    let inputs: Vec<InputTensor<'_>> = w
        .inputs
        .iter()
        .map(|(dtype, dims, data)| InputTensor {
            dtype: *dtype,
            dims,
            data,
        })
        .collect();
    let ep_time = |exe: &Executable| {
        timer.median(3, &mut || {
            exe.run(&inputs).map(drop).map_err(|e| e.to_string())
        })
    };
    let default = ep_executable(w, device, None)?;
    let ep_s = ep_time(&default)?;
    let stats = default.run_stats();
    let phases = median_phases(&default, &inputs)?;
    let ep_out = default.run(&inputs).map_err(|e| e.to_string())?;
    // The variant the device's default leaves out (GPU: eager; CPU: compiled), and its path.
    let other = ep_executable(w, device, Some(device != DeviceKind::Gpu))?;
    let other_s = ep_time(&other)?;
    let other_path = other.run_stats().last.map_or("none", |l| l.path.name());
    let other_phases = median_phases(&other, &inputs)?;
    let (ep_eager_s, ep_compiled_s) = if device == DeviceKind::Gpu {
        (other_s, ep_s)
    } else {
        (ep_s, other_s)
    };
    let mut eager = (w.raw)();
    let raw_eager_s = timer.median(3, &mut || {
        let x = upload(&w.inputs).map_err(|e| e.to_string())?;
        let out = eager(&x, &stream).map_err(|e| e.to_string())?;
        finish(&out, &stream).map(drop).map_err(|e| e.to_string())
    })?;
    let body = (w.raw)();
    let mut body = Some(body);
    let compiled = Closure::new(move |args: &[Array]| {
        let s = Stream::default_for(&match device {
            DeviceKind::Gpu => Device::gpu(),
            DeviceKind::Cpu => Device::cpu(),
        })?;
        match body.as_mut() {
            Some(f) => f(args, &s),
            None => Err(mlx::Error::new("no body")),
        }
    })
    .compile(false)
    .map_err(|e| e.to_string())?;
    let mut raw_samples: Vec<[u32; 4]> = Vec::new();
    let raw_compiled_s = timer.median(3, &mut || {
        let t = Instant::now();
        let x = upload(&w.inputs).map_err(|e| e.to_string())?;
        let refs: Vec<&Array> = x.iter().collect();
        let bound = Instant::now();
        let out = compiled.apply(&refs).map_err(|e| e.to_string())?;
        let called = Instant::now();
        let refs: Vec<&Array> = out.iter().collect();
        mlx::eval(&refs).map_err(|e| e.to_string())?;
        let evaluated = Instant::now();
        let out: Vec<Array> = out
            .iter()
            .map(|a| a.to_contiguous(&stream))
            .collect::<MlxResult<_>>()
            .map_err(|e| e.to_string())?;
        drop(out);
        let us = |a: Instant, b: Instant| b.duration_since(a).as_micros() as u32;
        raw_samples.push([
            us(t, bound),
            us(bound, called),
            us(called, evaluated),
            us(evaluated, Instant::now()),
        ]);
        Ok(())
    })?;
    let raw_phases = ["bind", "dispatch", "eval", "finish"]
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let mut v: Vec<u32> = raw_samples.iter().map(|s| s[k]).collect();
            v.sort_unstable();
            (*name, v.get(v.len() / 2).copied().unwrap_or(0))
        })
        .collect();
    // The same computation? Compare the first output.
    let x = upload(&w.inputs).map_err(|e| e.to_string())?;
    let raw_out = finish(&eager(&x, &stream).map_err(|e| e.to_string())?, &stream)
        .map_err(|e| e.to_string())?;
    let a = raw_out[0].to_vec::<f32>().map_err(|e| e.to_string())?;
    let b: Vec<f32> = ep_out[0]
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let max_abs_diff = if a.len() == b.len() {
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    } else {
        f32::INFINITY
    };
    let path = match stats.last.map(|l| l.path) {
        Some(p) => p.name(),
        None => "none",
    };
    Ok(Measured {
        name: w.name,
        nodes: w.graph.nodes.len(),
        ep_s,
        ep_eager_s,
        ep_compiled_s,
        raw_eager_s,
        raw_compiled_s,
        path,
        other_path,
        syncs_per_run: stats.syncs_per_run(),
        reads_per_run: stats.reads_per_run(),
        max_abs_diff,
        phases,
        other_phases,
        raw_phases,
    })
}

fn main() {
    if let Err(e) = run() {
        eprintln!("overhead bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut device = DeviceKind::Cpu;
    let mut out = std::path::PathBuf::from("target/bench/overhead.json");
    let mut budget_ms = 2000.0;
    let mut only: Option<Vec<String>> = None;
    let mut explain = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--device" => {
                device = match value()?.as_str() {
                    "cpu" => DeviceKind::Cpu,
                    "gpu" => DeviceKind::Gpu,
                    other => return Err(format!("--device cpu|gpu, not {other}")),
                }
            }
            "--out" => out = value()?.into(),
            "--budget-ms" => {
                budget_ms = value()?.parse().map_err(|e| format!("--budget-ms: {e}"))?
            }
            "--only" => only = Some(value()?.split(',').map(str::to_string).collect()),
            "--explain" => explain = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    runtime::init().map_err(|e| e.to_string())?;
    if device == DeviceKind::Gpu && !runtime::gpu_available() {
        return Err("--device gpu: the linked MLX has no GPU".into());
    }
    let timer = Timer {
        budget_s: budget_ms / 1000.0,
    };
    let workloads: Vec<fn() -> Workload> = vec![
        tiny,
        || encoder_layer(1, 128),
        || encoder(6, 1, 128),
        || decode_step(128),
    ];
    println!(
        "{:<15}{:>6}{:>10}{:>10}{:>8}{:>10}   ep path, host syncs/reads per run; raw eager/compiled ms; ep eager/compiled ms",
        "workload", "nodes", "ep_ms", "raw_ms", "ep/raw", "fixed_us"
    );
    let mut results = Vec::new();
    for make in workloads {
        let w = make();
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == w.name))
        {
            continue;
        }
        if explain {
            let plan = plan::build_plan(&w.graph, &plan::Registry::default())
                .map_err(|e| format!("{}: plan: {e}", w.name))?;
            println!("{}: compile class {:?}", w.name, plan.compile_class());
            for b in plan.compile_blockers() {
                println!("  {b}");
            }
            println!("{plan}");
        }
        let m = measure(&w, device, &timer)?;
        println!(
            "{:<15}{:>6}{:>10.3}{:>10.3}{:>8.2}{:>10.1}   {}, {:.1}/{:.1}; raw {:.3}/{:.3}; ep {:.3}/{:.3} (other: {}); {:.2} us/node; max |ep-raw| {:.1e}",
            m.name,
            m.nodes,
            m.ep_s * 1e3,
            m.raw_s() * 1e3,
            m.ep_s / m.raw_s(),
            (m.ep_s - m.raw_s()) * 1e6,
            m.path,
            m.syncs_per_run,
            m.reads_per_run,
            m.raw_eager_s * 1e3,
            m.raw_compiled_s * 1e3,
            m.ep_eager_s * 1e3,
            m.ep_compiled_s * 1e3,
            m.other_path,
            m.ep_s * 1e6 / m.nodes as f64,
            m.max_abs_diff
        );
        let spent = |phases: &[(&str, u32)]| {
            phases
                .iter()
                .map(|(name, us)| format!("{} {us}", name.trim_end_matches("_us")))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "{:<15}ep run phases, median us: {}; other ({}): {}; raw compiled: {}",
            "",
            spent(&m.phases),
            m.other_path,
            spent(&m.other_phases),
            spent(&m.raw_phases)
        );
        results.push(m);
    }
    let mut json = String::from("{\n");
    let _ = writeln!(
        json,
        "  \"device\": \"{}\",",
        if device == DeviceKind::Gpu {
            "gpu"
        } else {
            "cpu"
        }
    );
    let _ = writeln!(json, "  \"mlx\": \"{}\",", mlx::version());
    json.push_str("  \"workloads\": [\n");
    for (i, m) in results.iter().enumerate() {
        let _ = writeln!(
            json,
            "    {{\"name\": \"{}\", \"nodes\": {}, \"ep_ms\": {:.4}, \"raw_ms\": {:.4}, \"ep_over_raw\": {:.4}, \"fixed_us\": {:.2}, \
             \"ep_eager_ms\": {:.4}, \"ep_compiled_ms\": {:.4}, \"raw_eager_ms\": {:.4}, \"raw_compiled_ms\": {:.4}, \
             \"ep_path\": \"{}\", \"other_path\": \"{}\", \"us_per_node\": {:.3}, \"host_syncs_per_run\": {:.3}, \"host_reads_per_run\": {:.3}, \"max_abs_diff\": {:e}, \"phases_us\": {{{}}}}}{}",
            m.name,
            m.nodes,
            m.ep_s * 1e3,
            m.raw_s() * 1e3,
            m.ep_s / m.raw_s(),
            (m.ep_s - m.raw_s()) * 1e6,
            m.ep_eager_s * 1e3,
            m.ep_compiled_s * 1e3,
            m.raw_eager_s * 1e3,
            m.raw_compiled_s * 1e3,
            m.path,
            m.other_path,
            m.ep_s * 1e6 / m.nodes as f64,
            m.syncs_per_run,
            m.reads_per_run,
            m.max_abs_diff,
            phases_json(&m.phases),
            if i + 1 < results.len() { "," } else { "" }
        );
    }
    json.push_str("  ]\n}\n");
    write_report(&out, &json)?;
    if let Some(m) = results.iter().find(|m| m.name == "llama-decode") {
        println!(
            "overhead: ep/raw={:.2} fixed_us={:.0}",
            m.ep_s / m.raw_s(),
            (m.ep_s - m.raw_s()) * 1e6
        );
    }
    Ok(())
}
