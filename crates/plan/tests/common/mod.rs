//! A small graph builder for the planner's tests.
#![allow(dead_code)]

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};

/// Dims from ints (negative = symbolic, named `s<k>`).
pub fn dims(d: &[i64]) -> Vec<Dim> {
    d.iter()
        .enumerate()
        .map(|(i, &v)| {
            if v < 0 {
                Dim::Symbolic(format!("s{i}"))
            } else {
                Dim::Fixed(v)
            }
        })
        .collect()
}

/// A builder over a [`Graph`].
pub struct G {
    pub g: Graph,
}

/// A value of type `dt` and no stated shape.
fn unranked(name: &str, dt: DataType) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        dtype: Some(dt),
        shape: None,
    }
}

impl G {
    pub fn new(opset: i64) -> Self {
        let mut g = Graph {
            name: "test".into(),
            ..Graph::default()
        };
        g.opset_imports.insert(String::new(), opset);
        G { g }
    }

    pub fn input(&mut self, name: &str, dt: DataType, d: &[i64]) -> &mut Self {
        self.g.inputs.push(ValueInfo::new(name, dt, dims(d)));
        self
    }

    pub fn input_unranked(&mut self, name: &str, dt: DataType) -> &mut Self {
        self.g.inputs.push(unranked(name, dt));
        self
    }

    pub fn output(&mut self, name: &str, dt: DataType, d: &[i64]) -> &mut Self {
        self.g.outputs.push(ValueInfo::new(name, dt, dims(d)));
        self
    }

    /// An output whose shape the test does not state.
    pub fn output_any(&mut self, name: &str, dt: DataType) -> &mut Self {
        self.g.outputs.push(unranked(name, dt));
        self
    }

    /// Declares an intermediate value's type.
    pub fn value(&mut self, name: &str, dt: DataType, d: &[i64]) -> &mut Self {
        self.g
            .value_info
            .insert(name.into(), ValueInfo::new(name, dt, dims(d)));
        self
    }

    pub fn init(&mut self, name: &str, t: TensorData) -> &mut Self {
        self.g.initializers.insert(name.into(), t);
        self
    }

    pub fn init_f32(&mut self, name: &str, d: &[i64], v: &[f32]) -> &mut Self {
        self.init(name, TensorData::from_f32(d.to_vec(), v))
    }

    /// A float initializer filled with `0.01 * i`.
    pub fn weight(&mut self, name: &str, d: &[i64]) -> &mut Self {
        let n: i64 = d.iter().product();
        let v: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
        self.init_f32(name, d, &v)
    }

    pub fn init_i64(&mut self, name: &str, d: &[i64], v: &[i64]) -> &mut Self {
        self.init(name, TensorData::from_i64(d.to_vec(), v))
    }

    pub fn node(&mut self, op: &str, ins: &[&str], outs: &[&str]) -> &mut Node {
        self.g.nodes.push(Node::new(
            op,
            ins.iter().map(|s| s.to_string()),
            outs.iter().map(|s| s.to_string()),
        ));
        self.g.nodes.last_mut().unwrap()
    }

    pub fn build(&self) -> Graph {
        self.g.clone()
    }
}

/// The com.microsoft domain.
pub const MS: &str = "com.microsoft";

/// A graph of the default domain at `opset` that also imports com.microsoft version 1.
pub fn ms_graph(opset: i64) -> G {
    let mut g = G::new(opset);
    g.g.opset_imports.insert(MS.into(), 1);
    g
}

/// Adds a com.microsoft `op` node; its index.
pub fn ms(g: &mut G, op: &str, ins: &[&str], outs: &[&str]) -> usize {
    g.node(op, ins, outs).domain = MS.into();
    g.g.nodes.len() - 1
}

/// Sets attribute `name` of node `i`.
pub fn attr(g: &mut G, i: usize, name: &str, a: Attribute) {
    g.g.nodes[i].attributes.insert(name.into(), a);
}

pub fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

pub fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

pub fn float(v: f32) -> Attribute {
    Attribute::Float(v)
}

pub fn floats(v: &[f32]) -> Attribute {
    Attribute::Floats(v.to_vec())
}

pub fn strings(v: &[&str]) -> Attribute {
    Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}

pub fn string(v: &str) -> Attribute {
    Attribute::String(v.as_bytes().to_vec())
}

/// Adds attributes to a node in place.
pub trait With {
    fn attr(&mut self, name: &str, a: Attribute) -> &mut Self;
}

impl With for Node {
    fn attr(&mut self, name: &str, a: Attribute) -> &mut Self {
        self.attributes.insert(name.into(), a);
        self
    }
}

/// The plan of a graph whose every node is claimed (no declines).
pub fn plan_of(g: &Graph) -> plan::Plan {
    let r = plan::Registry::default();
    let p = plan::partition(g, &r);
    assert!(p.declines.is_empty(), "declines: {:?}", p.declines);
    plan::build_plan(g, &r).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether the registry claims node `node` of the graph (the decline reason when not).
pub fn claim(g: &G, node: usize) -> Result<(), String> {
    let graph = g.build();
    plan::Registry::default()
        .claim(&graph, &graph.nodes[node])
        .map_err(|d| d.reason)
}

/// Asserts that node `node` is declined with a reason containing `needle`.
pub fn declined(g: &G, node: usize, needle: &str) {
    match claim(g, node) {
        Ok(()) => panic!("node {node} was claimed; expected a decline mentioning '{needle}'"),
        Err(r) => assert!(r.contains(needle), "reason '{r}' lacks '{needle}'"),
    }
}

/// The number of steps of `p` for which `f` holds.
pub fn count(p: &plan::Plan, f: impl Fn(&plan::Step) -> bool) -> usize {
    p.steps.iter().filter(|s| f(s)).count()
}

/// The host kernel steps of a plan running `kernel`.
pub fn kernel_steps<'a>(p: &'a plan::Plan, kernel: &str) -> Vec<&'a plan::Step> {
    p.steps
        .iter()
        .filter(|s| matches!(s, plan::Step::HostKernel { kernel: k, .. } if k == kernel))
        .collect()
}

/// The attributes of the first host kernel step running `kernel`.
pub fn kernel_attrs<'a>(p: &'a plan::Plan, kernel: &str) -> &'a plan::KernelAttrs {
    match kernel_steps(p, kernel).first() {
        Some(plan::Step::HostKernel { attrs, .. }) => attrs,
        _ => panic!("no {kernel} host kernel step"),
    }
}
