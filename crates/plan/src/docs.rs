//! The operator reference (`docs/operators.md`), generated from the registry.
//!
//! Each registry entry becomes one row: op, opset range, the element types it claims, the
//! compile mode a plan of that op alone allows, and its noted limits. What an entry does not
//! declare is read from the code:
//!
//! - **element types**: [`crate::OpEntry::dtypes`] when declared; otherwise the claim
//!   predicate runs on a probe node whose inputs have a type no entry claims, and the list of
//!   types its first `expect_dtype` check allows is taken (input 0's for most ops);
//! - **compile mode**: a one-node graph (1 to 3 inputs of shape `[3, 3]` or `[1, 1, 4, 4]`:
//!   input 0 of the first claimed type, the others of that type, int64 or float32) is
//!   claimed and planned, and the plan's
//!   [`CompileClass`] is shown; `—` when no such probe is claimed (the op needs constant
//!   inputs or attributes).
//!
//! `cargo xtask docs` writes the page; `cargo xtask test` fails when it is stale.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use onnx_ir::{DataType, Dim, Graph, Node, ValueInfo};

use crate::registry::{ClaimCtx, MAX_KNOWN_OPSET, OpEntry, Registry, domain_name};
use crate::{CompileClass, build_plan};

/// What the probes found out about one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFacts {
    /// Element types: declared, or read from the claim predicate; `None` when neither.
    pub dtypes: Option<Vec<DataType>>,
    /// Whether `dtypes` came from the claim predicate rather than a declaration.
    pub dtypes_probed: bool,
    /// Which input the element types are for (0 for most ops).
    pub dtype_input: usize,
    /// The compile class of a plan of the op alone, when a float32 probe is claimed.
    pub compile: Option<CompileClass>,
}

/// The opset a probe of `entry` uses: the newest it covers that the planner knows.
fn probe_opset(entry: &OpEntry) -> i64 {
    entry.until.min(MAX_KNOWN_OPSET).max(entry.since)
}

/// A graph holding one node of `entry`'s op whose inputs have the given types and `dims`.
fn probe_graph(entry: &OpEntry, input_types: &[DataType], dims: &[i64]) -> Graph {
    let mut g = Graph {
        name: format!("probe_{}", entry.op_type),
        ..Graph::default()
    };
    g.opset_imports
        .insert(entry.domain.to_string(), probe_opset(entry));
    if !entry.domain.is_empty() {
        g.opset_imports.insert(String::new(), MAX_KNOWN_OPSET);
    }
    let inputs: Vec<String> = (0..input_types.len()).map(|i| format!("in{i}")).collect();
    for (name, dtype) in inputs.iter().zip(input_types) {
        g.inputs.push(ValueInfo::new(
            name.clone(),
            *dtype,
            dims.iter().map(|&d| Dim::Fixed(d)).collect(),
        ));
    }
    let mut node = Node::new(entry.op_type, inputs, ["out0"]);
    node.name = format!("{}_0", entry.op_type);
    node.domain = entry.domain.to_string();
    g.nodes.push(node);
    g.outputs.push(ValueInfo {
        name: "out0".into(),
        ..ValueInfo::default()
    });
    g
}

/// Probes one entry (see the module docs).
pub fn entry_facts(entry: &OpEntry, registry: &Registry) -> EntryFacts {
    let mut facts = EntryFacts {
        dtypes: None,
        dtypes_probed: false,
        dtype_input: 0,
        compile: None,
    };
    if !entry.dtypes.is_empty() {
        facts.dtypes = Some(entry.dtypes.to_vec());
    } else {
        for arity in 1..=3 {
            let g = probe_graph(entry, &vec![DataType::String; arity], &[3, 3]);
            let checks = RefCell::new(Vec::new());
            let ctx = ClaimCtx::new(&g, probe_opset(entry)).with_dtype_checks(&checks);
            let _ = (entry.claim)(&ctx, &g.nodes[0]);
            if let Some((input, allowed)) = checks.into_inner().into_iter().next() {
                facts.dtypes = Some(allowed);
                facts.dtypes_probed = true;
                facts.dtype_input = input;
                break;
            }
        }
    }
    // Input 0 of the first claimed type (float32 when unknown); the others of that type,
    // int64 (indices, shapes) or float32; rank 2 or 4.
    let first = facts
        .dtypes
        .as_ref()
        .and_then(|d| d.first().copied())
        .unwrap_or(DataType::Float);
    'probe: for dims in [&[3, 3][..], &[1, 1, 4, 4][..]] {
        for arity in 1..=3 {
            for others in [first, DataType::Int64, DataType::Float] {
                let mut types = vec![others; arity];
                types[0] = first;
                let g = probe_graph(entry, &types, dims);
                let ctx = ClaimCtx::new(&g, probe_opset(entry));
                if (entry.claim)(&ctx, &g.nodes[0]).is_err() {
                    continue;
                }
                if let Ok(plan) = build_plan(&g, registry) {
                    facts.compile = Some(plan.compile_class());
                    break 'probe;
                }
            }
        }
    }
    facts
}

fn compile_name(class: Option<CompileClass>) -> &'static str {
    match class {
        Some(CompileClass::Shapeless) => "shapeless",
        Some(CompileClass::ShapeKeyed) => "shape-keyed",
        Some(CompileClass::Eager) => "eager",
        None => "—",
    }
}

/// Renders a dtype list compactly: the usual groups get a short name.
fn dtype_list(dtypes: &[DataType]) -> String {
    use DataType::{
        BFloat16, Float, Float16, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64,
    };
    let mut rest: Vec<DataType> = dtypes.to_vec();
    let mut parts: Vec<String> = Vec::new();
    let groups: [(&str, &[DataType]); 3] = [
        ("float, float16, bfloat16", &[Float, Float16, BFloat16]),
        ("int8/16/32/64", &[Int8, Int16, Int32, Int64]),
        ("uint8/16/32/64", &[Uint8, Uint16, Uint32, Uint64]),
    ];
    for (label, group) in groups {
        if group.iter().all(|d| rest.contains(d)) {
            parts.push(label.to_string());
            rest.retain(|d| !group.contains(d));
        }
    }
    parts.extend(rest.iter().map(|d| d.name().to_string()));
    parts.join(", ")
}

/// Escapes `|` so that a note stays in its table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// The whole `docs/operators.md` page.
pub fn operators_markdown(registry: &Registry) -> String {
    let entries = registry.entries();
    let mut by_domain: BTreeMap<&str, Vec<&OpEntry>> = BTreeMap::new();
    for e in &entries {
        by_domain.entry(e.domain).or_default().push(e);
    }
    let ops: std::collections::BTreeSet<(&str, &str)> =
        entries.iter().map(|e| (e.domain, e.op_type)).collect();

    let mut out = String::new();
    out.push_str("# Operators\n\n");
    out.push_str(
        "<!-- Generated by `cargo xtask docs` from the op registry (crates/plan); do not edit.\n     \
         `cargo xtask test` fails when this page is stale. -->\n\n",
    );
    let _ = writeln!(
        out,
        "The MLX execution provider claims {} operators ({} registry entries) in {} domain(s). \
         A node is claimed only when the entry's claim predicate accepts it; a declined node \
         stays on ONNX Runtime's CPU EP, and `ORTMLX_LOG_CLAIMS=1` prints why. In models \
         importing an `ai.onnx` opset newer than {MAX_KNOWN_OPSET}, a node is claimed (and \
         lowered as at opset {MAX_KNOWN_OPSET}) when its op got no new schema version since, \
         as onnx {}'s schema history records it (`cargo xtask gen-opset-table`); ops that did \
         change are declined.\n",
        ops.len(),
        entries.len(),
        by_domain.len(),
        crate::schema_versions::ONNX_VERSION
    );
    out.push_str(
        "Columns:\n\n\
         - **opsets**: the opset versions of the op's domain the entry covers.\n\
         - **types**: the element types claimed (of input 0 unless noted). Declared in the \
         registry, or, marked `*`, read from the claim predicate's type check; other \
         conditions (ranks, attributes, constant inputs) may still decline a node.\n\
         - **compile**: how a plan of the op alone may be compiled with `mlx_compile`: \
         `shapeless` (one closure for all shapes), `shape-keyed` (one per input shapes) or \
         `eager` (reads values on the host). Measured on a probe node (input 0 of the first type listed, the \
         others of that type, int64 or float32; shape `[3, 3]` or `[1, 1, 4, 4]`; no \
         attributes); `—` \
         when no probe is claimed (constant inputs or attributes needed). A fused group compiles as its most restrictive op.\n\
         - **notes**: known limits recorded with the entry.\n\n",
    );
    for (domain, list) in &by_domain {
        let _ = writeln!(out, "## {}\n", domain_name(domain));
        out.push_str("| op | opsets | types | compile | notes |\n");
        out.push_str("|---|---|---|---|---|\n");
        for e in list {
            let facts = entry_facts(e, registry);
            let types = match &facts.dtypes {
                Some(d) if d.is_empty() => "—".to_string(),
                Some(d) => {
                    let mut s = dtype_list(d);
                    if facts.dtype_input != 0 {
                        let _ = write!(s, " (input {})", facts.dtype_input);
                    }
                    if facts.dtypes_probed {
                        s.push_str(" *");
                    }
                    s
                }
                None => "—".to_string(),
            };
            let _ = writeln!(
                out,
                "| {} | {}–{} | {} | {} | {} |",
                e.op_type,
                e.since,
                e.until,
                types,
                compile_name(facts.compile),
                cell(e.notes)
            );
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relu_is_probed_from_its_claim() {
        let r = Registry::default();
        let relu = r
            .entries()
            .into_iter()
            .find(|e| e.domain.is_empty() && e.op_type == "Relu")
            .expect("Relu is registered");
        let facts = entry_facts(&relu, &r);
        let dtypes = facts.dtypes.expect("Relu checks its input type");
        assert!(dtypes.contains(&DataType::Float), "{dtypes:?}");
        // float64 is claimed exactly for the ops of FLOAT64_OPS
        assert_eq!(
            dtypes.contains(&DataType::Double),
            crate::registry::FLOAT64_OPS.contains(&"Relu"),
            "{dtypes:?}"
        );
        assert_eq!(facts.compile, Some(CompileClass::Shapeless));
    }

    #[test]
    fn page_lists_every_entry() {
        let r = Registry::default();
        let page = operators_markdown(&r);
        assert!(page.starts_with("# Operators\n"));
        for e in r.entries() {
            assert!(
                page.contains(&format!("| {} | {}–{} |", e.op_type, e.since, e.until)),
                "{e:?} missing"
            );
        }
    }

    #[test]
    fn dtype_groups_are_compact() {
        use DataType::*;
        assert_eq!(
            dtype_list(&[Float, Float16, BFloat16, Int32, Int64]),
            "float, float16, bfloat16, int32, int64"
        );
        assert_eq!(
            dtype_list(&[Int8, Int16, Int32, Int64, Bool]),
            "int8/16/32/64, bool"
        );
    }
}
