//! Plans of small graphs executed on MLX, checked against values computed here.

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use runtime::{Executable, InputTensor, RuntimeOptions};

mod common;
use common::{executable_with, f32_bytes, i64_bytes, input};

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// [`common::graph`] with every node output typed float32.
fn graph(inputs: Vec<ValueInfo>, outputs: Vec<ValueInfo>, nodes: Vec<Node>) -> Graph {
    let mut g = common::graph(inputs, outputs, nodes);
    // Intermediate values are float32 here, as ORT's type inference would report them.
    for n in &g.nodes {
        for o in &n.outputs {
            let info = ValueInfo {
                name: o.clone(),
                dtype: Some(DataType::Float),
                shape: None,
            };
            g.value_info.insert(o.clone(), info);
        }
    }
    g
}

fn executable(g: &Graph) -> Executable {
    executable_with(g, None, None)
}

fn fixed(dims: &[i64]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Fixed(d)).collect()
}

#[test]
fn matmul_add_relu_matches_host_math() {
    let mut g = graph(
        vec![ValueInfo::new(
            "x",
            DataType::Float,
            vec![Dim::Symbolic("n".into()), Dim::Fixed(3)],
        )],
        vec![ValueInfo::new(
            "y",
            DataType::Float,
            vec![Dim::Symbolic("n".into()), Dim::Fixed(2)],
        )],
        vec![
            Node::new("MatMul", ["x", "w"], ["xw"]),
            Node::new("Add", ["xw", "b"], ["z"]),
            Node::new("Relu", ["z"], ["y"]),
        ],
    );
    let w = [1.0f32, -1.0, 0.5, 2.0, -0.25, 0.0];
    let b = [0.1f32, -0.2];
    g.initializers
        .insert("w".into(), TensorData::from_f32(vec![3, 2], &w));
    g.initializers
        .insert("b".into(), TensorData::from_f32(vec![2], &b));
    // As planned, and with the weight stored transposed as the GPU stream stores it.
    let mut transposed = plan::build_plan(&g, &plan::Registry::default()).expect("plan");
    assert_eq!(plan::gemv::transpose_constant_weights(&mut transposed), 1);
    let transposed = Executable::new(transposed, &RuntimeOptions::default()).expect("executable");
    for exe in [executable(&g), transposed] {
        for n in [1usize, 4] {
            let x: Vec<f32> = (0..n * 3).map(|i| i as f32 * 0.5 - 1.0).collect();
            let dims = [n as i64, 3];
            let bytes = f32_bytes(&x);
            let out = exe.run(&[input(DataType::Float, &dims, &bytes)]).unwrap();
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].dims, vec![n as i64, 2]);
            assert_eq!(out[0].dtype, DataType::Float);
            let got = f32s(out[0].data());
            for r in 0..n {
                for c in 0..2 {
                    let z: f32 = (0..3).map(|k| x[r * 3 + k] * w[k * 2 + c]).sum::<f32>() + b[c];
                    assert!((got[r * 2 + c] - z.max(0.0)).abs() < 1e-6);
                }
            }
        }
    }
}

#[test]
fn reshape_transpose_with_a_shape_input_read_at_run_time() {
    let g = graph(
        vec![
            ValueInfo::new("x", DataType::Float, fixed(&[2, 3])),
            ValueInfo::new("shape", DataType::Int64, fixed(&[2])),
        ],
        vec![ValueInfo::new(
            "y",
            DataType::Float,
            vec![Dim::Unknown, Dim::Unknown],
        )],
        vec![
            Node::new("Reshape", ["x", "shape"], ["r"]),
            Node::new("Transpose", ["r"], ["y"]),
        ],
    );
    let exe = executable(&g);
    let x = f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let shape = i64_bytes(&[3, -1]);
    let out = exe
        .run(&[
            input(DataType::Float, &[2, 3], &x),
            input(DataType::Int64, &[2], &shape),
        ])
        .unwrap();
    assert_eq!(out[0].dims, vec![2, 3]);
    assert_eq!(f32s(out[0].data()), vec![0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
}

#[test]
fn softmax_and_gather_with_negative_indices() {
    let mut g = graph(
        vec![ValueInfo::new("x", DataType::Float, fixed(&[2, 3]))],
        vec![ValueInfo::new("y", DataType::Float, fixed(&[2, 2]))],
        vec![
            Node::new("Softmax", ["x"], ["s"]).with_attr("axis", Attribute::Int(-1)),
            Node::new("Gather", ["s", "idx"], ["y"]).with_attr("axis", Attribute::Int(1)),
        ],
    );
    g.initializers
        .insert("idx".into(), TensorData::from_i64(vec![2], &[-1, 0]));
    let exe = executable(&g);
    let x = [1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0];
    let out = exe
        .run(&[input(DataType::Float, &[2, 3], &f32_bytes(&x))])
        .unwrap();
    let got = f32s(out[0].data());
    let e: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|v| v.exp()).collect();
    let sum: f32 = e.iter().sum();
    let want = [e[2] / sum, e[0] / sum, 1.0 / 3.0, 1.0 / 3.0];
    assert!(
        got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6),
        "{got:?} vs {want:?}"
    );
}

#[test]
fn a_wrong_input_dtype_is_an_error_and_the_next_run_works() {
    let g = graph(
        vec![ValueInfo::new("x", DataType::Float, fixed(&[2]))],
        vec![ValueInfo::new("y", DataType::Float, fixed(&[2]))],
        vec![Node::new("Relu", ["x"], ["y"])],
    );
    let exe = executable(&g);
    let ints = i64_bytes(&[1, 2]);
    let err = exe
        .run(&[input(DataType::Int64, &[2], &ints)])
        .err()
        .unwrap();
    assert!(err.0.contains("int64"), "{err}");
    let ok = exe
        .run(&[input(DataType::Float, &[2], &f32_bytes(&[-1.0, 2.0]))])
        .unwrap();
    assert_eq!(f32s(ok[0].data()), vec![0.0, 2.0]);
}

#[test]
fn runs_from_other_threads_work() {
    // Runs execute on the runtime's stream lanes (thread-unsafe MLX streams behind a lock), not
    // on the calling thread's own stream, so any thread may run an executable, one at a time.
    let g = graph(
        vec![ValueInfo::new("x", DataType::Float, fixed(&[2]))],
        vec![ValueInfo::new("y", DataType::Float, fixed(&[2]))],
        vec![Node::new("Relu", ["x"], ["y"])],
    );
    let exe = std::sync::Arc::new(executable(&g));
    let run = |exe: &Executable| {
        let x = f32_bytes(&[1.5, -2.0]);
        let out = exe.run(&[input(DataType::Float, &[2], &x)]).unwrap();
        out[0].data().to_vec()
    };
    let first = run(&exe);
    assert_eq!(first, f32_bytes(&[1.5, 0.0]));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let other = exe.clone();
            std::thread::spawn(move || run(&other))
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), first);
    }
    assert_eq!(run(&exe), first);
}

#[test]
fn identical_initializers_are_shared_between_executables() {
    let mut g = graph(
        vec![ValueInfo::new("x", DataType::Float, fixed(&[1024]))],
        vec![ValueInfo::new("y", DataType::Float, fixed(&[1024]))],
        vec![Node::new("Add", ["x", "w"], ["y"])],
    );
    let w: Vec<f32> = (0..1024).map(|i| i as f32 * 0.001 + 0.123).collect();
    g.initializers
        .insert("w".into(), TensorData::from_f32(vec![1024], &w));
    let pool = initializer_pool::InitializerPool::<mlx::FrozenArray>::global();
    let before = pool.stats();
    let a = executable(&g);
    let b = executable(&g);
    let after = pool.stats();
    if initializer_pool::sharing_enabled() {
        assert!(
            after.hits > before.hits,
            "second executable reused the first one's constant"
        );
    }
    let x = f32_bytes(&vec![1.0; 1024]);
    let ra = a.run(&[input(DataType::Float, &[1024], &x)]).unwrap();
    let rb = b.run(&[input(DataType::Float, &[1024], &x)]).unwrap();
    assert_eq!(ra[0].data(), rb[0].data());
    assert!((f32s(ra[0].data())[10] - (1.0 + w[10])).abs() < 1e-6);
}

fn run_f32(exe: &Executable, inputs: &[(&[i64], &[f32])]) -> Vec<f32> {
    let bytes: Vec<Vec<u8>> = inputs.iter().map(|(_, v)| f32_bytes(v)).collect();
    let tensors: Vec<InputTensor> = inputs
        .iter()
        .zip(&bytes)
        .map(|((dims, _), data)| input(DataType::Float, dims, data))
        .collect();
    f32s(exe.run(&tensors).unwrap()[0].data())
}

fn gelu_graph() -> Graph {
    let mut g = graph(
        vec![ValueInfo::new(
            "x",
            DataType::Float,
            vec![Dim::Symbolic("n".into()), Dim::Fixed(4)],
        )],
        vec![ValueInfo::new(
            "y",
            DataType::Float,
            vec![Dim::Symbolic("n".into()), Dim::Fixed(4)],
        )],
        vec![
            Node::new("Div", ["x", "sqrt2"], ["a"]),
            Node::new("Erf", ["a"], ["b"]),
            Node::new("Add", ["b", "one"], ["c"]),
            Node::new("Mul", ["x", "c"], ["d"]),
            Node::new("Mul", ["d", "half"], ["y"]),
        ],
    );
    g.initializers.insert(
        "sqrt2".into(),
        TensorData::from_f32(vec![], &[std::f32::consts::SQRT_2]),
    );
    g.initializers
        .insert("one".into(), TensorData::from_f32(vec![], &[1.0]));
    g.initializers
        .insert("half".into(), TensorData::from_f32(vec![], &[0.5]));
    g
}

fn with_compile(g: &Graph, compile: bool, capacity: Option<usize>) -> Executable {
    executable_with(g, Some(compile), capacity)
}

#[test]
fn compiled_runs_equal_eager_runs_and_the_shape_cache_is_bounded() {
    let g = gelu_graph();
    let eager = with_compile(&g, false, None);
    let compiled = with_compile(&g, true, Some(2));
    for n in [1i64, 3, 1, 5, 3, 1] {
        let x: Vec<f32> = (0..n * 4).map(|i| i as f32 * 0.37 - 2.0).collect();
        let dims = [n, 4];
        // MLX's CPU compile builds fused kernels with the system compiler, which may contract
        // multiply-adds differently from libmlx's own kernels: equal up to float rounding.
        let (c, e) = (
            run_f32(&compiled, &[(&dims, &x)]),
            run_f32(&eager, &[(&dims, &x)]),
        );
        assert_eq!(c.len(), e.len());
        for (a, b) in c.iter().zip(&e) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "n = {n}: {c:?} vs {e:?}"
            );
        }
    }
    assert_eq!(eager.cache_stats().compiles, 0, "compile off means eager");
    // The CPU's default compiles the decode closure only: this plan has none.
    let default = executable_with(&g, None, None);
    run_f32(&default, &[(&[2, 4], &[0.5; 8])]);
    assert_eq!(
        default.cache_stats().compiles,
        0,
        "the CPU default runs it eagerly"
    );
    assert_eq!(default.run_stats().eager, 1);
    let stats = compiled.cache_stats();
    assert!(stats.compiles >= 3, "{stats:?}");
    assert!(
        stats.held <= 2,
        "the general cache holds at most its capacity: {stats:?}"
    );
    assert!(stats.evictions >= 1, "{stats:?}");
    assert!(stats.hits >= 1, "{stats:?}");
}

#[test]
fn decode_shaped_runs_use_one_shapeless_closure() {
    // An input named input_ids of sequence length 1 selects the decode slot.
    let mut g = graph(
        vec![
            ValueInfo::new(
                "input_ids",
                DataType::Int64,
                vec![Dim::Symbolic("b".into()), Dim::Symbolic("s".into())],
            ),
            ValueInfo::new(
                "past",
                DataType::Float,
                vec![Dim::Symbolic("b".into()), Dim::Symbolic("p".into())],
            ),
        ],
        vec![ValueInfo::new(
            "y",
            DataType::Float,
            vec![Dim::Unknown, Dim::Unknown],
        )],
        vec![
            Node::new("Cast", ["input_ids"], ["ids_f"]).with_attr("to", Attribute::Int(1)),
            Node::new("Concat", ["past", "ids_f"], ["cat"]).with_attr("axis", Attribute::Int(1)),
            Node::new("Tanh", ["cat"], ["y"]),
        ],
    );
    g.value_info.get_mut("ids_f").unwrap().dtype = Some(DataType::Float);
    let exe = with_compile(&g, true, None);
    let eager = with_compile(&g, false, None);
    for past_len in [0i64, 1, 2, 3] {
        let ids = i64_bytes(&[7]);
        let past: Vec<f32> = (0..past_len).map(|i| i as f32 * 0.1).collect();
        let past_b = f32_bytes(&past);
        let run = |e: &Executable| {
            let out = e
                .run(&[
                    input(DataType::Int64, &[1, 1], &ids),
                    input(DataType::Float, &[1, past_len], &past_b),
                ])
                .unwrap();
            (out[0].dims.clone(), f32s(out[0].data()))
        };
        assert_eq!(run(&exe), run(&eager), "past length {past_len}");
    }
    let stats = exe.cache_stats();
    if exe.plan().compile_class() == plan::CompileClass::Shapeless {
        assert_eq!(
            stats.compiles, 1,
            "one shapeless closure for every decode step: {stats:?}"
        );
        assert_eq!(stats.hits, 3, "{stats:?}");
    } else {
        assert_eq!(
            stats.compiles, 0,
            "a shape-keyed decode runs eagerly: {stats:?}"
        );
        assert_eq!(stats.eager_fallbacks, 4, "{stats:?}");
    }
}

/// A one-layer "decoder": `present = Concat(past, x)` along the sequence axis, `y = past-mean
/// of present`, plus an encoder state `enc` that stays the same through a generation.
fn cached_decoder() -> Graph {
    let dims = |s: &str| vec![Dim::Fixed(1), Dim::Symbolic(s.into()), Dim::Fixed(2)];
    graph(
        vec![
            ValueInfo::new("x", DataType::Float, dims("s")),
            ValueInfo::new("enc", DataType::Float, dims("e")),
            ValueInfo::new("past_key_values.0.key", DataType::Float, dims("p")),
        ],
        vec![
            ValueInfo::new(
                "y",
                DataType::Float,
                vec![Dim::Fixed(1), Dim::Fixed(1), Dim::Fixed(2)],
            ),
            ValueInfo::new("present.0.key", DataType::Float, dims("t")),
        ],
        vec![
            Node::new("Concat", ["past_key_values.0.key", "x"], ["present.0.key"])
                .with_attr("axis", Attribute::Int(1)),
            Node::new("ReduceMean", ["present.0.key"], ["m"])
                .with_attr("axes", Attribute::Ints(vec![1]))
                .with_attr("keepdims", Attribute::Int(1)),
            Node::new("ReduceMean", ["enc"], ["em"])
                .with_attr("axes", Attribute::Ints(vec![1]))
                .with_attr("keepdims", Attribute::Int(1)),
            Node::new("Add", ["m", "em"], ["y"]),
        ],
    )
}

/// Runs one decoder step; returns `y` and `present`.
fn decoder_step(
    exe: &Executable,
    x: &[f32],
    enc: &[f32],
    past: &[f32],
    key: Option<&str>,
) -> (Vec<f32>, Vec<f32>) {
    let (xb, eb, pb) = (f32_bytes(x), f32_bytes(enc), f32_bytes(past));
    let dims = |v: &[f32]| [1, v.len() as i64 / 2, 2];
    let (xd, ed, pd) = (dims(x), dims(enc), dims(past));
    let out = exe
        .run_with(
            &[
                input(DataType::Float, &xd, &xb),
                input(DataType::Float, &ed, &eb),
                input(DataType::Float, &pd, &pb),
            ],
            &runtime::RunContext {
                generation_key: key,
            },
        )
        .unwrap();
    (f32s(out[0].data()), f32s(out[1].data()))
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

#[test]
fn a_generation_carries_its_cache_and_resets_on_a_new_prompt_or_key() {
    let g = cached_decoder();
    let exe = executable(&g);
    let plain = {
        let plan = plan::build_plan(&g, &plan::Registry::default()).unwrap();
        let opts = RuntimeOptions {
            share_initializers: false,
            ..RuntimeOptions::default()
        };
        Executable::new(plan, &opts).unwrap()
    };
    let enc = [0.5f32, -1.0, 1.5, 2.0];
    let expected_y = |present: &[f32]| -> Vec<f32> {
        let n = present.len() / 2;
        (0..2)
            .map(|c| {
                let m: f32 = (0..n).map(|t| present[2 * t + c]).sum::<f32>() / n as f32;
                m + (enc[c] + enc[2 + c]) / 2.0
            })
            .collect()
    };
    let generation = |key: Option<&str>, prompt: &[f32], steps: usize| {
        // Prefill with an empty cache, then feed each present back as the next past.
        let (y, mut present) = decoder_step(&exe, prompt, &enc, &[], key);
        assert_close(&y, &expected_y(&present));
        for step in 0..steps {
            let x = [step as f32, -(step as f32)];
            let (y, next) = decoder_step(&exe, &x, &enc, &present, key);
            let mut want = present.clone();
            want.extend_from_slice(&x);
            assert_eq!(next, want, "present grows by the new token");
            assert_close(&y, &expected_y(&next));
            // An executable without a decode history gives the same step.
            assert_eq!(
                (y, next.clone()),
                decoder_step(&plain, &x, &enc, &present, None)
            );
            present = next;
        }
        present
    };
    let first = generation(None, &[1.0, 2.0, 3.0, 4.0], 3);
    let s = exe.decode_stats().expect("a decoder with a KV cache");
    assert_eq!(s.generations, 1, "{s:?}");
    assert_eq!(s.steps, 4, "{s:?}");
    // ORTMLX_DISABLE_DECODE_REUSE reaches the runtime through its installed config.
    let reuse = !runtime::config().disable_decode_reuse;
    if reuse {
        assert_eq!(
            s.carried_inputs, 3,
            "each decode step reuses the previous present: {s:?}"
        );
        assert_eq!(
            s.reused_inputs, 3,
            "the unchanged encoder state is reused: {s:?}"
        );
    }
    // A new prompt (empty past) starts a new generation.
    generation(None, &[9.0, 8.0], 2);
    assert_eq!(exe.decode_stats().unwrap().generations, 2);
    // A cache that does not continue the previous step (edited between steps) is uploaded
    // and starts a generation; the result follows the edited cache.
    let mut edited = first.clone();
    edited[0] += 1.0;
    let (y, present) = decoder_step(&exe, &[0.0, 0.0], &enc, &edited, None);
    assert_eq!(present[..edited.len()], edited[..]);
    assert_close(&y, &expected_y(&present));
    if reuse {
        assert_eq!(exe.decode_stats().unwrap().generations, 3);
    }
    // A changed generation key starts a new generation even when the cache continues.
    let (_, p1) = decoder_step(&exe, &[1.0, 1.0], &enc, &present, Some("a"));
    let before = exe.decode_stats().unwrap().generations;
    decoder_step(&exe, &[1.0, 1.0], &enc, &p1, Some("b"));
    assert_eq!(exe.decode_stats().unwrap().generations, before + 1);
    decoder_step(&exe, &[1.0, 1.0], &enc, &p1, Some("b"));
    // Plans without a cache have no decode path.
    assert!(executable(&gelu_graph()).decode_stats().is_none());
}

/// A host kernel step (NonZero of a value computed on the device, then Unique of a feed):
/// the runtime reads its input back, runs the plan's kernel by name and binds the results.
#[test]
fn host_kernel_steps_run_on_device_values() {
    let mut g = Graph {
        inputs: vec![
            ValueInfo::new("x", DataType::Float, fixed(&[2, 3])),
            ValueInfo::new("u", DataType::Int64, fixed(&[5])),
        ],
        outputs: vec![
            ValueInfo::new("y", DataType::Int64, vec![Dim::Fixed(2), Dim::Unknown]),
            ValueInfo::new("uy", DataType::Int64, vec![Dim::Unknown]),
            ValueInfo::new("uc", DataType::Int64, vec![Dim::Unknown]),
        ],
        nodes: vec![
            Node::new("Relu", ["x"], ["r"]),
            Node::new("NonZero", ["r"], ["y"]),
            Node::new("Unique", ["u"], ["uy", "", "", "uc"]),
        ],
        ..Graph::default()
    };
    g.opset_imports.insert(String::new(), 17);
    g.value_info.insert(
        "r".into(),
        ValueInfo::new("r", DataType::Float, fixed(&[2, 3])),
    );
    let exe = executable(&g);
    let x = f32_bytes(&[-1.0, 2.0, 0.0, 3.0, -0.5, 4.0]);
    let u = i64_bytes(&[3, 1, 3, 2, 1]);
    let out = exe
        .run(&[
            input(DataType::Float, &[2, 3], &x),
            input(DataType::Int64, &[5], &u),
        ])
        .unwrap();
    let i64s = |b: &[u8]| -> Vec<i64> {
        b.chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    assert_eq!(out[0].dims, vec![2, 3]);
    assert_eq!(i64s(out[0].data()), vec![0, 1, 1, 1, 0, 2]);
    assert_eq!(i64s(out[1].data()), vec![1, 2, 3]);
    assert_eq!(i64s(out[2].data()), vec![2, 1, 2]);
}

#[test]
fn random_normal_seed_repeats_per_executable_and_advances_per_run() {
    let mut node = Node::new("RandomNormal", Vec::<&str>::new(), ["y"]);
    node.attributes
        .insert("shape".into(), Attribute::Ints(vec![1000]));
    node.attributes.insert("seed".into(), Attribute::Float(4.0));
    node.attributes.insert("mean".into(), Attribute::Float(3.0));
    let g = graph(
        vec![],
        vec![ValueInfo::new("y", DataType::Float, fixed(&[1000]))],
        vec![node],
    );
    let runs = |exe: &Executable| -> Vec<Vec<f32>> {
        (0..2)
            .map(|_| f32s(exe.run(&[]).unwrap()[0].data()))
            .collect()
    };
    let a = runs(&executable(&g));
    let b = runs(&executable(&g));
    assert_eq!(a, b);
    assert_ne!(a[0], a[1]);
    let mean = a[0].iter().sum::<f32>() / 1000.0;
    assert!((mean - 3.0).abs() < 0.2, "mean {mean}");
}
