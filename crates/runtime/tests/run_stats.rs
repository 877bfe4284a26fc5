//! `Executable::run_stats`: the path that served each run and its host synchronisations.

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use plan::CompileClass;
use runtime::{Executable, RunPath};

mod common;
use common::{executable_with, f32_bytes, graph, i64_bytes, input};

fn typed(g: &mut Graph, name: &str, dtype: DataType) {
    g.value_info.insert(
        name.into(),
        ValueInfo {
            name: name.into(),
            dtype: Some(dtype),
            shape: None,
        },
    );
}

fn exe(g: &Graph, compile: bool) -> Executable {
    executable_with(g, Some(compile), None)
}

fn named(mut n: Node, name: &str) -> Node {
    n.name = name.into();
    n
}

fn dyn2(a: &str, b: &str) -> Vec<Dim> {
    vec![Dim::Symbolic(a.into()), Dim::Symbolic(b.into())]
}

/// `y = relu(x + b)`: no host read, a contiguous output.
fn plain() -> Graph {
    let mut g = graph(
        vec![ValueInfo::new("x", DataType::Float, dyn2("n", "c"))],
        vec![ValueInfo::new("y", DataType::Float, dyn2("n", "c"))],
        vec![
            Node::new("Add", ["x", "b"], ["z"]),
            Node::new("Relu", ["z"], ["y"]),
        ],
    );
    g.initializers
        .insert("b".into(), TensorData::from_f32(vec![], &[0.5]));
    typed(&mut g, "z", DataType::Float);
    g
}

fn run_plain(e: &Executable, n: i64) -> Vec<f32> {
    let x: Vec<f32> = (0..n * 4).map(|i| i as f32 - 3.0).collect();
    let out = e
        .run(&[input(DataType::Float, &[n, 4], &f32_bytes(&x))])
        .expect("run");
    out[0]
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_plain_eager_run_synchronises_once_and_reads_nothing() {
    let e = exe(&plain(), false);
    assert_eq!(e.run_stats().runs, 0);
    assert_eq!(e.run_stats().last, None);
    for n in [1, 2, 3] {
        let y = run_plain(&e, n);
        assert_eq!(y[0], 0.0, "relu(-3 + 0.5)");
        assert_eq!(y[4 * n as usize - 1], 4.0 * n as f32 - 4.0 + 0.5);
        assert_eq!(
            e.run_stats()
                .last
                .map(|l| (l.path, l.host_syncs, l.host_reads)),
            Some((RunPath::Eager, 1, 0))
        );
    }
    let s = e.run_stats();
    assert_eq!((s.runs, s.eager, s.host_syncs, s.host_reads), (3, 3, 3, 0));
    assert_eq!(s.max_host_syncs, 1);
    assert!(e.plan().compile_blockers().is_empty(), "plain is shapeless");
}

#[test]
fn compiled_runs_are_counted_per_slot() {
    let g = plain();
    let compiled = exe(&g, true);
    let eager = exe(&g, false);
    for n in [2, 2, 5] {
        let (c, r) = (run_plain(&compiled, n), run_plain(&eager, n));
        assert_eq!(c, r);
        let last = compiled.run_stats().last.expect("a run");
        assert_eq!(last.path, RunPath::GeneralCompiled);
        assert_eq!((last.host_syncs, last.host_reads), (1, 0));
    }
    let s = compiled.run_stats();
    assert_eq!((s.runs, s.general_compiled, s.eager), (3, 3, 0));
    assert_eq!(eager.run_stats().eager, 3);
}

#[test]
fn a_decode_shaped_run_of_a_shapeless_plan_uses_the_decode_slot() {
    let mut g = graph(
        vec![
            ValueInfo::new("input_ids", DataType::Int64, dyn2("b", "s")),
            ValueInfo::new("past", DataType::Float, dyn2("b", "p")),
        ],
        vec![ValueInfo::new("y", DataType::Float, dyn2("b", "t"))],
        vec![
            Node::new("Cast", ["input_ids"], ["ids_f"]).with_attr("to", Attribute::Int(1)),
            Node::new("Concat", ["past", "ids_f"], ["cat"]).with_attr("axis", Attribute::Int(1)),
            Node::new("Tanh", ["cat"], ["y"]),
        ],
    );
    typed(&mut g, "ids_f", DataType::Float);
    typed(&mut g, "cat", DataType::Float);
    let e = exe(&g, true);
    assert_eq!(e.plan().compile_class(), CompileClass::Shapeless);
    let ids = i64_bytes(&[7]);
    for past_len in [1i64, 2, 3] {
        let past = f32_bytes(&vec![0.25; past_len as usize]);
        let past_dims = [1, past_len];
        let prompt = [
            input(DataType::Int64, &[1, 1], &ids),
            input(DataType::Float, &past_dims, &past),
        ];
        e.run(&prompt).expect("run");
        let last = e.run_stats().last.unwrap();
        assert_eq!(last.path, RunPath::DecodeCompiled);
        assert_eq!(last.host_syncs, 1);
    }
    assert_eq!(e.run_stats().decode_compiled, 3);
}

/// `y = reshape(x, cast(shape))` of a float `shape`: the target is computed on the device, so
/// the run reads it back to the host.
fn computed_shape() -> Graph {
    let mut cast = named(Node::new("Cast", ["shape"], ["shape2"]), "cast_shape");
    cast.attributes.insert("to".into(), Attribute::Int(7));
    let mut g = graph(
        vec![
            ValueInfo::new("x", DataType::Float, vec![Dim::Fixed(2), Dim::Fixed(3)]),
            ValueInfo::new("shape", DataType::Float, vec![Dim::Fixed(2)]),
        ],
        vec![ValueInfo::new(
            "y",
            DataType::Float,
            vec![Dim::Unknown, Dim::Unknown],
        )],
        vec![
            cast,
            named(
                Node::new("Reshape", ["x", "shape2"], ["y"]),
                "reshape_computed",
            ),
        ],
    );
    typed(&mut g, "shape2", DataType::Int64);
    g
}

#[test]
fn a_host_read_is_a_synchronisation_and_keeps_the_plan_eager() {
    let g = computed_shape();
    // Compile on: the plan still runs eagerly, because a step reads a computed value.
    let e = exe(&g, true);
    assert_eq!(e.plan().compile_class(), CompileClass::Eager);
    let blockers = e.plan().compile_blockers();
    assert_eq!(blockers.len(), 1, "{blockers:?}");
    assert_eq!(blockers[0].node, "reshape_computed");
    assert_eq!(blockers[0].limits_to, CompileClass::Eager);
    assert!(blockers[0].reason.contains("shape2"), "{}", blockers[0]);
    let x = f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let shape = f32_bytes(&[3.0, -1.0]);
    for _ in 0..2 {
        let out = e
            .run(&[
                input(DataType::Float, &[2, 3], &x),
                input(DataType::Float, &[2], &shape),
            ])
            .expect("run");
        assert_eq!(out[0].dims, vec![3, 2]);
        assert_eq!(
            e.run_stats()
                .last
                .map(|l| (l.path, l.host_syncs, l.host_reads)),
            Some((RunPath::Eager, 2, 1)),
            "one read of the shape, then the final evaluation"
        );
    }
    let s = e.run_stats();
    assert_eq!((s.host_syncs, s.host_reads), (4, 2));
    assert_eq!(e.cache_stats().compiles, 0);
}

/// `y = reshape(x, shape * 1)` of an int64 input `shape`: integer arithmetic on an input's
/// value, computed on the host before the steps.
fn host_computed_shape() -> Graph {
    let mut g = graph(
        vec![
            ValueInfo::new("x", DataType::Float, vec![Dim::Fixed(2), Dim::Fixed(3)]),
            ValueInfo::new("shape", DataType::Int64, vec![Dim::Fixed(2)]),
        ],
        vec![ValueInfo::new(
            "y",
            DataType::Float,
            vec![Dim::Unknown, Dim::Unknown],
        )],
        vec![
            named(
                Node::new("Mul", ["shape", "one"], ["shape2"]),
                "scale_shape",
            ),
            named(
                Node::new("Reshape", ["x", "shape2"], ["y"]),
                "reshape_computed",
            ),
        ],
    );
    g.initializers
        .insert("one".into(), TensorData::from_i64(vec![], &[1]));
    typed(&mut g, "shape2", DataType::Int64);
    g
}

#[test]
fn input_values_shape_the_compiled_key_and_need_no_host_read() {
    let g = host_computed_shape();
    let e = exe(&g, true);
    assert_eq!(e.plan().compile_class(), CompileClass::ShapeKeyed);
    let x = f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // The same input shapes with other values: each value gets its own closure (a stale one
    // would give the first run's shape), and a repeated value hits.
    for (target, want) in [
        ([3, -1], vec![3, 2]),
        ([6, -1], vec![6, 1]),
        ([3, -1], vec![3, 2]),
        ([-1, 1], vec![6, 1]),
        ([1, 6], vec![1, 6]),
    ] {
        let shape = i64_bytes(&target);
        let out = e
            .run(&[
                input(DataType::Float, &[2, 3], &x),
                input(DataType::Int64, &[2], &shape),
            ])
            .expect("run");
        assert_eq!(out[0].dims, want, "target {target:?}");
        assert_eq!(
            e.run_stats()
                .last
                .map(|l| (l.path, l.host_syncs, l.host_reads)),
            Some((RunPath::GeneralCompiled, 1, 0)),
        );
    }
    let c = e.cache_stats();
    assert_eq!((c.compiles, c.hits), (4, 1), "{c:?}");
}

#[test]
fn a_strided_output_costs_one_more_synchronisation() {
    let mut g = graph(
        vec![ValueInfo::new("x", DataType::Float, dyn2("n", "c"))],
        vec![ValueInfo::new("y", DataType::Float, dyn2("c", "n"))],
        vec![
            Node::new("Neg", ["x"], ["z"]),
            Node::new("Transpose", ["z"], ["y"]),
        ],
    );
    typed(&mut g, "z", DataType::Float);
    let e = exe(&g, false);
    let x = f32_bytes(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let out = e.run(&[input(DataType::Float, &[2, 3], &x)]).expect("run");
    assert_eq!(out[0].dims, vec![3, 2]);
    let last = e.run_stats().last.unwrap();
    assert_eq!((last.host_syncs, last.host_reads), (2, 0), "{last:?}");
}

/// `y = reshape(r, [shape(r)[0], -1])` of `r = relu(x)`, whose shape the planner doesn't know
/// (as after a reshape with a computed target): the Shape chain runs on the host while the
/// graph is built (HostEval steps), so nothing is read back from the device.
fn shape_of_activation() -> Graph {
    let mut g = graph(
        vec![ValueInfo::new(
            "x",
            DataType::Float,
            vec![Dim::Unknown, Dim::Unknown, Dim::Unknown],
        )],
        vec![ValueInfo::new(
            "y",
            DataType::Float,
            vec![Dim::Unknown, Dim::Unknown],
        )],
        vec![
            Node::new("Relu", ["x"], ["r"]),
            Node::new("Shape", ["r"], ["s"]),
            Node::new("Gather", ["s", "zero"], ["n"]).with_attr("axis", Attribute::Int(0)),
            Node::new("Unsqueeze", ["n", "axes"], ["n1"]),
            Node::new("Concat", ["n1", "minus_one"], ["target"])
                .with_attr("axis", Attribute::Int(0)),
            named(Node::new("Reshape", ["r", "target"], ["y"]), "reshape"),
        ],
    );
    for (name, dims, v) in [
        ("zero", vec![], vec![0]),
        ("axes", vec![1], vec![0]),
        ("minus_one", vec![1], vec![-1]),
    ] {
        g.initializers
            .insert(name.into(), TensorData::from_i64(dims, &v));
    }
    typed(&mut g, "r", DataType::Float);
    for n in ["s", "n", "n1", "target"] {
        typed(&mut g, n, DataType::Int64);
    }
    g
}

#[test]
fn shape_arithmetic_of_activations_runs_on_the_host() {
    let g = shape_of_activation();
    for compile in [false, true] {
        let e = exe(&g, compile);
        let host_evals = e
            .plan()
            .steps
            .iter()
            .filter(|s| matches!(s, plan::Step::HostEval { .. }))
            .count();
        assert_eq!(host_evals, 4, "{}", e.plan());
        assert_eq!(e.plan().compile_class(), CompileClass::ShapeKeyed);
        for dims in [[2i64, 3, 4], [5, 1, 2], [2, 3, 4]] {
            let n = dims.iter().product::<i64>() as usize;
            let x = f32_bytes(&(0..n).map(|i| i as f32 - 3.0).collect::<Vec<_>>());
            let out = e.run(&[input(DataType::Float, &dims, &x)]).expect("run");
            assert_eq!(out[0].dims, vec![dims[0], dims[1] * dims[2]]);
            let got: Vec<f32> = out[0]
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let want: Vec<f32> = (0..n).map(|i| (i as f32 - 3.0).max(0.0)).collect();
            assert_eq!(got, want);
            let last = e.run_stats().last.unwrap();
            assert_eq!((last.host_syncs, last.host_reads), (1, 0), "{last:?}");
            let path = if compile {
                RunPath::GeneralCompiled
            } else {
                RunPath::Eager
            };
            assert_eq!(last.path, path);
        }
    }
}
