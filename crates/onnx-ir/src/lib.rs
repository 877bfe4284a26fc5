//! An ONNX graph IR that knows neither ONNX Runtime nor MLX.
//!
//! The execution provider fills a [`Graph`] from ORT's `OrtGraph`; the planner reads it.
//! Values are referred to by name, as in ONNX; an empty input name means "optional input
//! absent".
//!
//! ```
//! use onnx_ir::{Attribute, DataType, Dim, Graph, Node, ValueInfo};
//!
//! let mut graph = Graph::default();
//! graph.inputs.push(ValueInfo::new("x", DataType::Float, vec![Dim::Symbolic("n".into()), Dim::Fixed(4)]));
//! graph.outputs.push(ValueInfo::new("y", DataType::Float, vec![Dim::Symbolic("n".into()), Dim::Fixed(4)]));
//! graph.nodes.push(Node::new("Relu", ["x"], ["y"]));
//! graph.nodes[0].attributes.insert("unused".into(), Attribute::Int(1));
//! assert_eq!(graph.topological_order().unwrap(), vec![0]);
//! ```

mod dtype;
mod graph;
pub mod proto;
mod tensor;

pub use dtype::DataType;
pub use graph::{Attribute, DEFAULT_DOMAIN, Dim, Graph, IrError, Node, ValueInfo};
pub use tensor::{TensorData, decode_strings};
