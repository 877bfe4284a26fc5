//! Regressions for what the hostile-model suite and the fuzzers found in the planner: hostile
//! shapes and values are errors or declines, never panics, overflows or unbounded
//! allocations, and what is claimed can be planned.

use std::time::Instant;

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use plan::{Registry, Step, build_plan, cluster_graph, partition, partition_plannable, step};

fn fixed(d: &[i64]) -> Vec<Dim> {
    d.iter().map(|&v| Dim::Fixed(v)).collect()
}

fn graph(opset: i64) -> Graph {
    let mut g = Graph::default();
    g.opset_imports.insert(String::new(), opset);
    g
}

#[test]
fn reshape_targets_keep_the_element_count() {
    // Found by the shape_fns fuzzer: a scalar "reshaped" to 64883 elements was accepted.
    assert!(step::reshape_target(&[], &[64883], false).is_err());
    assert!(step::reshape_target(&[2, 3], &[4, 4], false).is_err());
    assert_eq!(
        step::reshape_target(&[2, 3], &[3, -1], false),
        Ok(vec![3, 2])
    );
    assert_eq!(
        step::reshape_target(&[2, 3], &[0, 3], false),
        Ok(vec![2, 3])
    );
    // Products that overflow are errors, not wrapped sizes.
    assert!(step::reshape_target(&[2, 3], &[i64::MAX, 4, -1], false).is_err());
    assert!(step::reshape_target(&[i64::MAX, 4], &[-1], false).is_err());
}

#[test]
fn slice_steps_beyond_the_axis_take_one_element() {
    // `(e - s + step - 1) / step` overflowed for step = i64::MAX (ORT: one element).
    let b = step::slice_bounds(&[4, 5], &[-100], &[100], Some(&[-1]), Some(&[i64::MAX])).unwrap();
    assert_eq!(b.out_shape, vec![4, 1]);
    let b = step::slice_bounds(
        &[4, 5],
        &[i64::MAX],
        &[i64::MIN],
        Some(&[1]),
        Some(&[i64::MIN]),
    )
    .unwrap();
    assert_eq!(b.out_shape, vec![4, 1]);
    assert!(step::slice_bounds(&[4, 5], &[0], &[3], Some(&[1]), Some(&[0])).is_err());
}

#[test]
fn constant_folding_never_builds_huge_tensors() {
    // An int64 Expand of constants to 1e12 elements: the folder gave up only after filling
    // memory (the process was OOM-killed). Now it leaves the node to the run, where the
    // runtime's size guard refuses it.
    let mut g = graph(17);
    g.inputs
        .push(ValueInfo::new("x", DataType::Int64, fixed(&[1])));
    g.initializers
        .insert("v".into(), TensorData::from_i64(vec![1], &[3]));
    g.initializers.insert(
        "s".into(),
        TensorData::from_i64(vec![2], &[1_000_000, 1_000_000]),
    );
    g.nodes.push(Node::new("Expand", ["v", "s"], ["e"]));
    g.value_info.insert(
        "e".into(),
        ValueInfo::new("e", DataType::Int64, fixed(&[1_000_000, 1_000_000])),
    );
    g.nodes.push(Node::new("Add", ["e", "x"], ["y"]));
    g.outputs.push(ValueInfo {
        name: "y".into(),
        dtype: Some(DataType::Int64),
        shape: None,
    });
    let start = Instant::now();
    let p = build_plan(&g, &Registry::default()).unwrap();
    assert!(start.elapsed().as_secs() < 5);
    assert!(p.constants.iter().all(|(_, t)| t.numel() <= 1 << 16));
    // The same through Range: (limit - start) overflowed i64.
    let mut g = graph(17);
    g.inputs
        .push(ValueInfo::new("x", DataType::Int64, fixed(&[1])));
    for (n, v) in [("a", -1), ("b", i64::MAX), ("d", 1)] {
        g.initializers
            .insert(n.into(), TensorData::from_i64(vec![], &[v]));
    }
    g.nodes.push(Node::new("Range", ["a", "b", "d"], ["r"]));
    g.value_info.insert(
        "r".into(),
        ValueInfo::new("r", DataType::Int64, vec![Dim::Unknown]),
    );
    g.nodes.push(Node::new("Add", ["r", "x"], ["y"]));
    g.outputs.push(ValueInfo {
        name: "y".into(),
        dtype: Some(DataType::Int64),
        shape: None,
    });
    let _ = build_plan(&g, &Registry::default());
}

#[test]
fn the_host_program_refuses_huge_values() {
    // Shape arithmetic on the host: a Mul of a run-time dim by 1e9 feeding a Range would
    // have built a 1e12-element vector on the host.
    let mut g = graph(17);
    g.inputs.push(ValueInfo::new(
        "x",
        DataType::Float,
        vec![Dim::Symbolic("n".into())],
    ));
    g.initializers.insert(
        "big".into(),
        TensorData::from_i64(vec![1], &[1_000_000_000]),
    );
    g.initializers
        .insert("zero".into(), TensorData::from_i64(vec![], &[0]));
    g.initializers
        .insert("one".into(), TensorData::from_i64(vec![], &[1]));
    g.initializers
        .insert("idx".into(), TensorData::from_i64(vec![], &[0]));
    g.nodes.push(Node::new("Shape", ["x"], ["s"]));
    g.nodes.push(Node::new("Mul", ["s", "big"], ["m"]));
    g.nodes
        .push(Node::new("Gather", ["m", "idx"], ["lim"]).with_attr("axis", Attribute::Int(0)));
    g.nodes
        .push(Node::new("Range", ["zero", "lim", "one"], ["r"]));
    g.nodes
        .push(Node::new("Cast", ["r"], ["y"]).with_attr("to", Attribute::Int(1)));
    for (n, shape) in [
        ("s", fixed(&[1])),
        ("m", fixed(&[1])),
        ("lim", fixed(&[])),
        ("r", vec![Dim::Unknown]),
    ] {
        g.value_info
            .insert(n.into(), ValueInfo::new(n, DataType::Int64, shape));
    }
    g.outputs.push(ValueInfo {
        name: "y".into(),
        dtype: Some(DataType::Float),
        shape: None,
    });
    let p = build_plan(&g, &Registry::default()).unwrap();
    let start = Instant::now();
    assert!(!p.host.is_empty(), "the chain should run on the host:\n{p}");
    assert!(p.host.run(&[vec![1000]]).is_err(), "{p}");
    assert!(p.host.run(&[vec![0]]).is_ok(), "{p}");
    assert!(start.elapsed().as_secs() < 5);
}

#[test]
fn claimed_clusters_always_plan() {
    // A pool window larger than its static input passes the claim but not the lowering:
    // `partition_plannable` declines the node instead of failing the session in Compile.
    let mut g = graph(17);
    g.inputs
        .push(ValueInfo::new("x", DataType::Float, fixed(&[1, 1, 3, 3])));
    g.nodes.push(
        Node::new("AveragePool", ["x"], ["y"])
            .with_attr("kernel_shape", Attribute::Ints(vec![5, 5])),
    );
    g.outputs.push(ValueInfo {
        name: "y".into(),
        dtype: Some(DataType::Float),
        shape: None,
    });
    let registry = Registry::default();
    let p = partition_plannable(&g, &registry);
    for c in &p.clusters {
        build_plan(&cluster_graph(&g, c), &registry).unwrap();
    }
    if !partition(&g, &registry).clusters.is_empty() {
        assert!(p.clusters.is_empty(), "{p:?}");
        assert!(p.declines[0].reason.starts_with("planning failed"), "{p:?}");
    }
}

#[test]
fn topk_validates_k() {
    let registry = Registry::default();
    let topk = |k: Option<i64>| {
        let mut g = graph(17);
        g.inputs
            .push(ValueInfo::new("x", DataType::Float, fixed(&[2, 5])));
        match k {
            Some(k) => {
                g.initializers
                    .insert("k".into(), TensorData::from_i64(vec![1], &[k]));
            }
            None => g
                .inputs
                .push(ValueInfo::new("k", DataType::Int64, fixed(&[1]))),
        }
        g.nodes.push(Node::new("TopK", ["x", "k"], ["v", "i"]));
        for (n, dt) in [("v", DataType::Float), ("i", DataType::Int64)] {
            g.outputs.push(ValueInfo {
                name: n.into(),
                dtype: Some(dt),
                shape: None,
            });
        }
        g
    };
    // A constant k outside [0, 5] can't be planned (ORT's CPU EP reports it).
    assert!(build_plan(&topk(Some(7)), &registry).is_err());
    assert!(build_plan(&topk(Some(-1)), &registry).is_err());
    assert!(build_plan(&topk(Some(3)), &registry).is_ok());
    // A run-time k gets a run-time requirement.
    let p = build_plan(&topk(None), &registry).unwrap();
    assert!(
        p.steps.iter().any(|s| matches!(s, Step::Require { .. })),
        "{p}"
    );
}

#[test]
fn host_computed_sizes_are_bounded() {
    // Found by the fuzzers: a Split into 0 parts divided by zero; a window of 2^40 samples
    // overflowed the allocation (a feed could ask for it at run time).
    assert!(step::split_points(6, 0, None).is_err());
    let _ = step::split_points(i64::MAX, 3, None);
    assert!(step::split_points(6, 2, Some(&[i64::MAX, i64::MAX])).is_err());
    assert_eq!(step::split_points(7, 3, None), Ok(vec![3, 6]));
    for kind in [step::WindowKind::Hann, step::WindowKind::Hamming] {
        assert!(step::cosine_window(kind, 1 << 40, true, DataType::Float).is_err());
        assert!(step::cosine_window(kind, 8, true, DataType::Float).is_ok());
    }
}
