//! Models importing an opset newer than the planner's newest: a node is claimed when its op got
//! no new schema since (onnx's schema history, `src/schema_versions.rs`), and then lowers
//! exactly as at the planner's newest opset; an op that changed is declined with the reason.

mod common;

use common::*;
use onnx_ir::DataType;
use plan::schema_versions::{DOMAIN_OPSETS, SINCE_VERSIONS};
use plan::{MAX_KNOWN_OPSET, PLANNER_OPSETS, Registry, handled_opset, partition};

/// Ops whose schemas did not change after opset 26, several with opset-dependent lowering
/// (Softmax's axis default, ReduceMean's axes input, Split's num_outputs).
fn unchanged_ops(opset: i64) -> G {
    let mut g = G::new(opset);
    g.input("x", DataType::Float, &[2, 3, 4]);
    g.init_i64("axes", &[1], &[1]);
    for (v, d) in [
        ("r", &[2, 3, 4][..]),
        ("s", &[2, 3, 4]),
        ("m", &[2, 1, 4]),
        ("a", &[2, 3, 4]),
    ] {
        g.value(v, DataType::Float, d);
    }
    g.value("p", DataType::Float, &[2, 3, 2])
        .value("q", DataType::Float, &[2, 3, 2]);
    g.node("Relu", &["x"], &["r"]);
    g.node("Softmax", &["r"], &["s"]);
    g.node("ReduceMean", &["s", "axes"], &["m"]);
    g.node("Add", &["s", "m"], &["a"]);
    g.node("Split", &["a"], &["p", "q"])
        .attr("axis", int(2))
        .attr("num_outputs", int(2));
    g.node("Mul", &["p", "q"], &["y"]);
    g.output("y", DataType::Float, &[2, 3, 2]);
    g
}

#[test]
fn unchanged_ops_are_claimed_and_lower_as_at_the_planners_newest() {
    let newest = DOMAIN_OPSETS.iter().find(|(d, _)| d.is_empty()).unwrap().1;
    assert!(newest > MAX_KNOWN_OPSET, "the schema table is not newer");
    let reference = plan_of(&unchanged_ops(MAX_KNOWN_OPSET).build()).to_string();
    for opset in MAX_KNOWN_OPSET + 1..=newest {
        let g = unchanged_ops(opset).build();
        let p = partition(&g, &Registry::default());
        assert!(p.declines.is_empty(), "opset {opset}: {:?}", p.declines);
        assert_eq!(p.clusters.len(), 1);
        assert_eq!(
            plan_of(&g).to_string(),
            reference,
            "opset {opset} lowers differently"
        );
    }
}

#[test]
fn changed_ops_are_declined_with_the_reason() {
    // Mod got a new schema in opset 28, Range in 27.
    let mut g = G::new(28);
    g.input("x", DataType::Float, &[4]);
    g.node("Mod", &["x", "x"], &["y"]).attr("fmod", int(1));
    g.init_f32("start", &[], &[0.0]);
    g.init_f32("limit", &[], &[4.0]);
    g.init_f32("delta", &[], &[1.0]);
    g.node("Range", &["start", "limit", "delta"], &["r"]);
    declined(
        &g,
        0,
        "Op Mod got a new schema in opset 28, which this planner does not implement",
    );
    declined(&g, 1, "Op Range got a new schema in opset 27");
    // At opset 27 Mod has its opset-26 schema still; Range has not.
    g.g.opset_imports.insert(String::new(), 27);
    assert_eq!(claim(&g, 0), Ok(()));
    declined(&g, 1, "Op Range got a new schema in opset 27");
    // The partition reports the same reasons.
    let p = partition(&g.build(), &Registry::default());
    assert_eq!(p.declines.len(), 1);
    assert!(p.declines[0].reason.contains("Range got a new schema"));
}

#[test]
fn opsets_beyond_the_schema_table_are_declined() {
    let newest = DOMAIN_OPSETS.iter().find(|(d, _)| d.is_empty()).unwrap().1;
    let mut g = G::new(newest + 1);
    g.input("x", DataType::Float, &[2]);
    g.node("Relu", &["x"], &["y"]);
    declined(&g, 0, "than the newest in its schema table");
}

#[test]
fn domains_without_schema_history_keep_their_ranges() {
    // com.microsoft ops are not in onnx: the registered range (1..=1) decides, whatever the
    // ai.onnx opset.
    let mut g = G::new(28);
    g.g.opset_imports.insert("com.microsoft".into(), 1);
    g.input("x", DataType::Float, &[2]);
    g.node("Gelu", &["x"], &["y"]).domain = "com.microsoft".into();
    assert_eq!(claim(&g, 0), Ok(()));
    g.g.opset_imports.insert("com.microsoft".into(), 2);
    declined(&g, 0, "outside the supported opset range 1..=1");
    assert_eq!(handled_opset("com.microsoft", "Gelu", 7), Ok(7));
}

#[test]
fn handled_opsets() {
    assert_eq!(handled_opset("", "Relu", 20), Ok(20));
    assert_eq!(handled_opset("", "Relu", 28), Ok(MAX_KNOWN_OPSET));
    assert_eq!(handled_opset("ai.onnx", "Relu", 28), Ok(MAX_KNOWN_OPSET));
    assert!(handled_opset("", "Cast", 28).is_err());
    // Ops onnx does not define (ONNX Runtime's own ops in the ONNX domain) don't change.
    assert_eq!(
        handled_opset("", "SimplifiedLayerNormalization", 28),
        Ok(MAX_KNOWN_OPSET)
    );
    // ai.onnx.ml: the planner knows opset 5, the newest in the table.
    assert_eq!(handled_opset("ai.onnx.ml", "Imputer", 5), Ok(5));
    let r = handled_opset("ai.onnx.ml", "Imputer", 6).unwrap_err();
    assert!(r.reason.contains("schema table"), "{r}");
}

/// Ops ONNX Runtime defines in the ONNX domain (not in onnx's schema history) that the
/// registry lowers.
const ORT_ONNX_DOMAIN_OPS: &[&str] = &["SimplifiedLayerNormalization"];

#[test]
fn the_schema_table_is_sorted_and_covers_the_registry() {
    for w in SINCE_VERSIONS.windows(2) {
        assert!(
            (w[0].0, w[0].1) < (w[1].0, w[1].1),
            "unsorted at {:?}",
            w[1].1
        );
    }
    for (d, op, since) in SINCE_VERSIONS {
        assert!(
            !since.is_empty() && since.windows(2).all(|w| w[0] < w[1]),
            "{d}::{op}"
        );
    }
    for w in DOMAIN_OPSETS.windows(2) {
        assert!(w[0].0 < w[1].0);
    }
    for (d, known) in PLANNER_OPSETS {
        let newest = DOMAIN_OPSETS.iter().find(|(t, _)| t == d).unwrap().1;
        assert!(
            *known <= newest,
            "{d}: the planner knows {known}, the table {newest}"
        );
    }
    // Every op registered in a domain with schema history is in the table from the first
    // opset its entries cover (a typo'd op name would not be checked at newer opsets), but
    // for ONNX Runtime's own ops in the ONNX domain.
    let mut not_onnx = Vec::new();
    for e in Registry::default().entries() {
        if PLANNER_OPSETS.iter().any(|(d, _)| *d == e.domain) {
            match plan::schema_since_versions(e.domain, e.op_type) {
                Some(since) => {
                    assert!(
                        since[0] <= e.since,
                        "{e:?} starts before the op exists ({since:?})"
                    )
                }
                None => not_onnx.push(e.op_type),
            }
        }
    }
    not_onnx.dedup();
    assert_eq!(not_onnx, ORT_ONNX_DOMAIN_OPS);
}
