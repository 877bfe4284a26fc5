//! The planner of the MLX execution provider: pure Rust, no FFI.
//!
//! - [`Registry`]: one entry per (domain, op, opset range) with a claim predicate (a
//!   [`Decline`] carries a human-readable reason) and the lowering that runs what it claims, so
//!   "claimed" and "runnable" cannot disagree. Op families live in `ops/*`.
//! - [`partition`]: groups claimed nodes into convex [`Cluster`]s.
//! - [`build_plan`]: lowers one cluster (as its own [`onnx_ir::Graph`]) into a [`Plan`]: value
//!   slots, constants and [`Step`]s naming MLX primitives, with ONNX attributes resolved. What
//!   only the run time knows is resolved by pure functions on the step types (see `STEPS.md`).
//!
//! ```
//! use onnx_ir::{DataType, Dim, Graph, Node, ValueInfo};
//! use plan::{build_plan, partition, Registry};
//!
//! let mut g = Graph::default();
//! g.opset_imports.insert("".into(), 17);
//! g.inputs.push(ValueInfo::new("x", DataType::Float, vec![Dim::Fixed(4)]));
//! g.outputs.push(ValueInfo::new("y", DataType::Float, vec![Dim::Fixed(4)]));
//! g.nodes.push(Node::new("Relu", ["x"], ["y"]));
//! let registry = Registry::default();
//! let p = partition(&g, &registry);
//! assert_eq!(p.clusters.len(), 1);
//! let plan = build_plan(&g, &registry).unwrap();
//! assert_eq!(plan.outputs.len(), 1);
//! ```

mod consts;
mod decode;
pub mod docs;
mod fold;
pub mod gemv;
pub mod gqa;
mod host;
pub mod kernel;
pub mod ops;
mod partition;
mod plan;
pub mod quantized;
mod registry;
pub mod schema_versions;
pub mod step;
mod verify;

pub use consts::{f32_to_bf16_bits, f32_to_f16_bits, tensor_from_i64};
pub use decode::{DecodeKey, HostValues};
pub use gqa::{GqaLayout, gqa_layout};
pub use host::{HostArg, HostNode, HostProgram, eval_host_node};
pub use kernel::{KernelAttr, KernelAttrs, KernelFn, host_kernel, run_host_kernel};
pub use partition::{Cluster, NodeDecline, Partition, cluster_graph, decline_summary, partition};
pub use plan::{
    CompileBlocker, CompileClass, LowerCtx, NodeSpan, Plan, PlanError, PlanInput, SeqValue,
    SlotInfo, build_plan,
};
pub use registry::{
    ClaimCtx, ClaimFn, Decline, EntryMeta, LowerFn, MAX_KNOWN_OPSET, OpEntry, PLANNER_OPSETS,
    Registry, handled_opset, schema_since_versions,
};
pub use step::{
    ArgReduceOp, AutoPad, BinaryOp, ConvArgs, ConvSpec, CoordinateTransform, FloatSource,
    HostReader, NearestMode, PadArgs, PadMode, PadSpec, PoolGeometry, PoolSpec, ReduceAxes,
    ReduceOp, ReshapeTarget, ResizeSpec, ShapeSource, SliceBounds, SliceSpec, Slot, Step, UnaryOp,
    WindowArgs, WindowSpec,
};
pub use verify::partition_plannable;
