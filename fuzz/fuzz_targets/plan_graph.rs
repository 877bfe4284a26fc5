//! Arbitrary graphs through the planner: `plan::partition`, `plan::partition_plannable`,
//! `plan::build_plan` of every cluster (and of the whole graph), the plan listing and the host
//! program run on arbitrary shapes. None may panic, abort or allocate without bound; every
//! cluster `partition_plannable` keeps must plan.

#![no_main]

use std::collections::HashSet;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use plan::Registry;

#[derive(Arbitrary, Debug)]
struct Input {
    opset: u8,
    ms_opset: u8,
    inputs: Vec<Val>,
    inits: Vec<Init>,
    nodes: Vec<FNode>,
    outputs: Vec<u16>,
    /// Run-time shapes for the host program, per plan input.
    shapes: Vec<Vec<i8>>,
}

#[derive(Arbitrary, Debug)]
struct Val {
    dtype: u8,
    shape: Option<Vec<FDim>>,
}

#[derive(Arbitrary, Debug)]
enum FDim {
    Fixed(i8),
    Sym(u8),
    Unknown,
}

#[derive(Arbitrary, Debug)]
struct Init {
    dtype: u8,
    dims: Vec<u8>,
    data: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct FNode {
    op: u16,
    /// 0: absent optional input; u16::MAX: a value nothing produces; else a defined value.
    inputs: Vec<u16>,
    outputs: u8,
    out_types: Vec<Val>,
    attrs: Vec<(u8, Attr)>,
}

#[derive(Arbitrary, Debug)]
enum Attr {
    Int(i64),
    SmallInt(i8),
    Ints(Vec<i64>),
    SmallInts(Vec<i8>),
    Float(f32),
    Floats(Vec<f32>),
    Str(u8),
    Strings(Vec<u8>),
    Tensor(Init),
}

const ATTR_NAMES: &[&str] = &[
    "axis",
    "axes",
    "perm",
    "to",
    "keepdims",
    "allowzero",
    "kernel_shape",
    "strides",
    "pads",
    "dilations",
    "group",
    "transA",
    "transB",
    "alpha",
    "beta",
    "gamma",
    "epsilon",
    "mode",
    "value",
    "starts",
    "ends",
    "split",
    "direction",
    "largest",
    "sorted",
    "k",
    "batch_dims",
    "reduction",
    "fmod",
    "auto_pad",
    "ceil_mode",
    "count_include_pad",
    "select_last_index",
    "noop_with_empty_axes",
    "exclusive",
    "reverse",
    "upper",
    "blocksize",
    "output_padding",
    "output_shape",
    "coordinate_transformation_mode",
    "nearest_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "extrapolation_value",
    "stash_type",
    "num_outputs",
    "min",
    "max",
    "approximate",
    "seed",
    "ratio",
    "training_mode",
    "lambd",
    "bias",
    "p",
    "start",
    "end",
    "time_axis",
    "batch_axis",
    "center_point_box",
    "scale",
    "is_causal",
    "q_num_heads",
    "kv_num_heads",
    "softcap",
    "num_heads",
    "interleaved",
    "rotary_embedding_dim",
    "do_rotary",
    "local_window_size",
    "bits",
    "block_size",
    "N",
    "K",
    "value_float",
    "value_int",
    "value_ints",
    "value_floats",
    "dtype",
    "across_channels",
    "normalize_variance",
    "spatial",
    "momentum",
    "layout",
    "unidirectional",
];

const STRINGS: &[&str] = &[
    "NOTSET",
    "SAME_UPPER",
    "SAME_LOWER",
    "VALID",
    "nearest",
    "linear",
    "cubic",
    "half_pixel",
    "asymmetric",
    "align_corners",
    "pytorch_half_pixel",
    "tf_crop_and_resize",
    "half_pixel_symmetric",
    "round_prefer_floor",
    "round_prefer_ceil",
    "floor",
    "ceil",
    "LEFT",
    "RIGHT",
    "constant",
    "reflect",
    "edge",
    "wrap",
    "none",
    "add",
    "mul",
    "max",
    "min",
    "tanh",
    "DCR",
    "CRD",
    "",
    "bogus",
];

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::default)
}

fn ops() -> &'static Vec<(&'static str, &'static str)> {
    static OPS: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    OPS.get_or_init(|| {
        let mut v: Vec<(&str, &str)> = registry()
            .entries()
            .iter()
            .map(|e| (e.domain, e.op_type))
            .collect();
        v.dedup();
        v.push(("", "NoSuchOp"));
        v.push(("", "If"));
        v.push(("com.example", "Relu"));
        v
    })
}

fn dtype(d: u8) -> Option<DataType> {
    DataType::from_onnx((d % 24) as i32)
}

fn tensor(init: &Init) -> Option<TensorData> {
    let dt = dtype(init.dtype)?;
    let size = dt.size_in_bytes()?;
    let dims: Vec<i64> = init.dims.iter().take(4).map(|&d| (d % 6) as i64).collect();
    let numel: usize = dims.iter().map(|&d| d as usize).product();
    let n = numel * size;
    let bytes: Vec<u8> = if init.data.is_empty() {
        vec![0; n]
    } else {
        init.data.iter().copied().cycle().take(n).collect()
    };
    TensorData::new(dt, dims, bytes).ok()
}

fn value_info(name: &str, v: &Val) -> ValueInfo {
    ValueInfo {
        name: name.to_string(),
        dtype: dtype(v.dtype),
        shape: v.shape.as_ref().map(|s| {
            s.iter()
                .take(6)
                .map(|d| match d {
                    FDim::Fixed(x) => Dim::Fixed(*x as i64),
                    FDim::Sym(x) => Dim::Symbolic(format!("s{}", x % 4)),
                    FDim::Unknown => Dim::Unknown,
                })
                .collect()
        }),
    }
}

fn attribute(a: &Attr) -> Attribute {
    match a {
        Attr::Int(v) => Attribute::Int(*v),
        Attr::SmallInt(v) => Attribute::Int(*v as i64),
        Attr::Ints(v) => Attribute::Ints(v.iter().take(8).copied().collect()),
        Attr::SmallInts(v) => Attribute::Ints(v.iter().take(8).map(|&x| x as i64).collect()),
        Attr::Float(v) => Attribute::Float(*v),
        Attr::Floats(v) => Attribute::Floats(v.iter().take(8).copied().collect()),
        Attr::Str(i) => Attribute::String(STRINGS[*i as usize % STRINGS.len()].into()),
        Attr::Strings(v) => Attribute::Strings(
            v.iter()
                .take(4)
                .map(|i| STRINGS[*i as usize % STRINGS.len()].into())
                .collect(),
        ),
        Attr::Tensor(t) => match tensor(t) {
            Some(t) => Attribute::Tensor(t),
            None => Attribute::Unsupported("tensor".into()),
        },
    }
}

fn build(input: &Input) -> Graph {
    let mut g = Graph {
        name: "fuzz".into(),
        ..Graph::default()
    };
    g.opset_imports
        .insert(String::new(), 1 + (input.opset % 25) as i64);
    g.opset_imports
        .insert("com.microsoft".into(), (input.ms_opset % 3) as i64);
    let mut names: Vec<String> = Vec::new();
    for (i, v) in input.inputs.iter().take(8).enumerate() {
        let name = format!("i{i}");
        g.inputs.push(value_info(&name, v));
        names.push(name);
    }
    for (i, t) in input.inits.iter().take(8).enumerate() {
        if let Some(t) = tensor(t) {
            let name = format!("c{i}");
            g.initializers.insert(name.clone(), t);
            names.push(name);
        }
    }
    let ops = ops();
    for (j, n) in input.nodes.iter().take(24).enumerate() {
        let (domain, op) = ops[n.op as usize % ops.len()];
        let inputs: Vec<String> = n
            .inputs
            .iter()
            .take(6)
            .map(|&r| match r {
                0 => String::new(),
                u16::MAX => "dangling".to_string(),
                r if names.is_empty() => format!("early{r}"),
                r => names[(r as usize - 1) % names.len()].clone(),
            })
            .collect();
        let outputs: Vec<String> = (0..1 + n.outputs % 3)
            .map(|k| format!("n{j}_{k}"))
            .collect();
        for (k, o) in outputs.iter().enumerate() {
            if let Some(t) = n.out_types.get(k) {
                g.value_info.insert(o.clone(), value_info(o, t));
            }
        }
        let mut node = Node {
            name: format!("node{j}"),
            op_type: op.to_string(),
            domain: domain.to_string(),
            inputs,
            outputs: outputs.clone(),
            ..Node::default()
        };
        for (k, a) in n.attrs.iter().take(6) {
            node.attributes.insert(
                ATTR_NAMES[*k as usize % ATTR_NAMES.len()].to_string(),
                attribute(a),
            );
        }
        g.nodes.push(node);
        names.extend(outputs);
    }
    let mut seen = HashSet::new();
    for &r in input.outputs.iter().take(6) {
        if names.is_empty() {
            break;
        }
        let name = names[r as usize % names.len()].clone();
        if seen.insert(name.clone()) {
            let vi = g.value(&name).unwrap_or(ValueInfo {
                name: name.clone(),
                ..ValueInfo::default()
            });
            g.outputs.push(vi);
        }
    }
    g
}

fn exercise(plan: &plan::Plan, shapes: &[Vec<i8>]) {
    let _ = format!("{plan}");
    let _ = plan.compile_class();
    let _ = plan.last_uses();
    let run_shapes: Vec<Vec<i64>> = plan
        .inputs
        .iter()
        .enumerate()
        .map(|(i, pi)| match shapes.get(i) {
            Some(s) => s.iter().take(6).map(|&d| d as i64).collect(),
            None => pi
                .shape
                .iter()
                .flatten()
                .map(|d| d.fixed().unwrap_or(2))
                .collect(),
        })
        .collect();
    let _ = plan.host.run(&run_shapes);
}

fuzz_target!(|input: Input| {
    let g = build(&input);
    let registry = registry();
    let p = plan::partition(&g, registry);
    for c in &p.clusters {
        if let Ok(plan) = plan::build_plan(&plan::cluster_graph(&g, c), registry) {
            exercise(&plan, &input.shapes);
        }
    }
    let checked = plan::partition_plannable(&g, registry);
    for c in &checked.clusters {
        let cg = plan::cluster_graph(&g, c);
        if let Err(e) = plan::build_plan(&cg, registry) {
            panic!("partition_plannable kept a cluster that does not plan: {e}");
        }
    }
    if let Ok(plan) = plan::build_plan(&g, registry) {
        exercise(&plan, &input.shapes);
    }
    let _ = plan::decline_summary(&p);
});
