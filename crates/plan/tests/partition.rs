//! Partitioner: convex clusters, determinism, declines.

mod common;

use std::collections::HashSet;

use common::*;
use onnx_ir::{DataType, Graph};
use plan::{Cluster, Registry, build_plan, cluster_graph, partition};

fn names(g: &Graph, c: &Cluster) -> Vec<String> {
    c.nodes.iter().map(|&i| g.nodes[i].name.clone()).collect()
}

/// Every path leaving a cluster must not come back into it.
fn assert_convex(g: &Graph, c: &Cluster) {
    let members: HashSet<usize> = c.nodes.iter().copied().collect();
    let producers = g.producers();
    // Reachability from outside nodes that consume cluster outputs.
    let n = g.nodes.len();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in g.nodes.iter().enumerate() {
        for inp in &node.inputs {
            if let Some(&p) = producers.get(inp.as_str()) {
                succ[p].push(i);
            }
        }
    }
    for &m in &c.nodes {
        let mut stack: Vec<usize> = succ[m]
            .iter()
            .copied()
            .filter(|s| !members.contains(s))
            .collect();
        let mut seen = HashSet::new();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            assert!(
                !members.contains(&x),
                "cluster {:?} is not convex: a path leaves through an outside node and returns",
                names(g, c)
            );
            stack.extend(succ[x].iter().copied());
        }
    }
}

#[test]
fn diamond_through_unclaimed_node_splits() {
    // a -> (unclaimed u) -> d, a -> c -> d: {a, c, d} would not be convex.
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[4]);
    g.output("d", DataType::Float, &[4]);
    g.node("Relu", &["x"], &["a"]);
    g.node("Mystery", &["a"], &["u"]).domain = "custom".into();
    g.node("Sigmoid", &["a"], &["c"]);
    g.node("Add", &["u", "c"], &["d"]);
    g.value("a", DataType::Float, &[4])
        .value("u", DataType::Float, &[4])
        .value("c", DataType::Float, &[4]);
    let graph = g.build();
    let p = partition(&graph, &Registry::default());
    assert_eq!(p.clusters.len(), 2, "{:?}", p.clusters);
    assert_eq!(names(&graph, &p.clusters[0]), vec!["Relu_a", "Sigmoid_c"]);
    assert_eq!(names(&graph, &p.clusters[1]), vec!["Add_d"]);
    for c in &p.clusters {
        assert_convex(&graph, c);
    }
    assert_eq!(p.declines.len(), 1);
    assert_eq!(p.declines[0].op_type, "Mystery");
    assert_eq!(p.declines[0].reason, "no MLX lowering for custom::Mystery");
}

#[test]
fn independent_branches_merge_and_order_is_deterministic() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[4]);
    g.input("y", DataType::Float, &[4]);
    g.node("Relu", &["x"], &["a"]);
    g.node("Relu", &["y"], &["b"]);
    g.node("Mystery", &["a"], &["m"]).domain = "custom".into();
    g.node("Sigmoid", &["m"], &["s"]);
    g.node("Add", &["s", "b"], &["z"]);
    g.output("z", DataType::Float, &[4]);
    for v in ["a", "b", "m", "s"] {
        g.value(v, DataType::Float, &[4]);
    }
    let graph = g.build();
    let p1 = partition(&graph, &Registry::default());
    let p2 = partition(&graph, &Registry::default());
    assert_eq!(p1, p2);
    // Both Relus (independent, ready first) form one cluster; the tail forms another.
    assert_eq!(p1.clusters.len(), 2);
    assert_eq!(names(&graph, &p1.clusters[0]), vec!["Relu_a", "Relu_b"]);
    assert_eq!(names(&graph, &p1.clusters[1]), vec!["Sigmoid_s", "Add_z"]);
    for c in &p1.clusters {
        assert_convex(&graph, c);
    }
    // The cluster graphs plan.
    for c in &p1.clusters {
        let cg = cluster_graph(&graph, c);
        let plan = build_plan(&cg, &Registry::default()).unwrap();
        assert_eq!(plan.outputs.len(), cg.outputs.len());
    }
    let cg = cluster_graph(&graph, &p1.clusters[0]);
    let ins: Vec<&str> = cg.inputs.iter().map(|v| v.name.as_str()).collect();
    let outs: Vec<&str> = cg.outputs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(ins, vec!["x", "y"]);
    assert_eq!(outs, vec!["a", "b"]);
}

#[test]
fn long_chain_with_unclaimed_nodes_in_the_middle() {
    // x -> r1 -> U1 -> r2 -> r3 -> U2 -> r4, plus a side edge r1 -> r3.
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[4]);
    g.node("Relu", &["x"], &["r1"]);
    g.node("U", &["r1"], &["u1"]).domain = "custom".into();
    g.node("Relu", &["u1"], &["r2"]);
    g.node("Add", &["r2", "r1"], &["r3"]);
    g.node("U", &["r3"], &["u2"]).domain = "custom".into();
    g.node("Relu", &["u2"], &["r4"]);
    g.output("r4", DataType::Float, &[4]);
    for v in ["r1", "u1", "r2", "r3", "u2"] {
        g.value(v, DataType::Float, &[4]);
    }
    let graph = g.build();
    let p = partition(&graph, &Registry::default());
    let got: Vec<Vec<String>> = p.clusters.iter().map(|c| names(&graph, c)).collect();
    assert_eq!(
        got,
        vec![vec!["Relu_r1"], vec!["Relu_r2", "Add_r3"], vec!["Relu_r4"]]
    );
    for c in &p.clusters {
        assert_convex(&graph, c);
    }
}

#[test]
fn exhaustive_small_dags_are_convex() {
    // Every claimed/unclaimed labelling of a fixed 6-node DAG gives convex clusters covering
    // exactly the claimed nodes.
    let edges: &[(usize, usize)] = &[
        (0, 1),
        (0, 2),
        (1, 3),
        (2, 3),
        (3, 4),
        (2, 4),
        (4, 5),
        (1, 5),
    ];
    for mask in 0u32..64 {
        let mut g = G::new(17);
        g.input("x", DataType::Float, &[4]);
        for i in 0..6 {
            let mut ins: Vec<String> = edges
                .iter()
                .filter(|e| e.1 == i)
                .map(|e| format!("v{}", e.0))
                .collect();
            if ins.is_empty() {
                ins.push("x".into());
            }
            let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
            let op = if ins.len() == 1 { "Relu" } else { "Add" };
            let out = format!("v{i}");
            let node = g.node(op, &refs[..ins.len().min(2)], &[out.as_str()]);
            if mask & (1 << i) == 0 {
                node.domain = "custom".into();
            }
            g.value(&out, DataType::Float, &[4]);
        }
        g.output("v5", DataType::Float, &[4]);
        let graph = g.build();
        let p = partition(&graph, &Registry::default());
        let mut covered: Vec<usize> = p.clusters.iter().flat_map(|c| c.nodes.clone()).collect();
        covered.sort_unstable();
        let claimed: Vec<usize> = (0..6).filter(|i| mask & (1 << i) != 0).collect();
        assert_eq!(covered, claimed, "mask {mask:06b}");
        for c in &p.clusters {
            assert_convex(&graph, c);
        }
    }
}
