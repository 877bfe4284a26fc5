//! Plan-time evaluation of small integer computations (shape arithmetic) on known values.
//!
//! When every input of a node is known at plan time (initializers, Constant nodes, shapes the
//! graph fixes), cheap shape arithmetic is computed here and its result becomes a constant, so
//! `Reshape`s fed by `Shape -> Gather -> Concat` chains get static targets.

use onnx_ir::{Attribute, DataType, Node, TensorData};

use crate::consts::{reshaped, tensor_from_i64};
use crate::ops::{attr_int, attr_ints};
use crate::plan::{LowerCtx, PlanError};
use crate::step::{
    broadcast_shapes, flatten_shape, normalize_axis, reshape_target, slice_bounds, squeeze_shape,
    unsqueeze_shape,
};

/// The tensor a `Constant` node produces, when it is one this crate can represent.
pub fn constant_node_value(node: &Node) -> Option<TensorData> {
    let (k, v) = node.attributes.iter().next()?;
    Some(match (k.as_str(), v) {
        ("value", Attribute::Tensor(t)) => t.clone(),
        ("value_float", Attribute::Float(f)) => TensorData::from_f32(vec![], &[*f]),
        ("value_floats", Attribute::Floats(f)) => TensorData::from_f32(vec![f.len() as i64], f),
        ("value_int", Attribute::Int(i)) => TensorData::from_i64(vec![], &[*i]),
        ("value_ints", Attribute::Ints(i)) => TensorData::from_i64(vec![i.len() as i64], i),
        _ => return None,
    })
}

/// Largest integer tensor (in elements) evaluated on the host.
const LIMIT: u64 = 1 << 16;

/// Largest tensor (in elements) the host program may compute: its values are shape vectors,
/// so anything near this comes from a hostile model or feed, and must not allocate without
/// bound.
const HOST_LIMIT: u64 = 1 << 24;

/// True when a tensor of `dims` has at most `limit` elements (and no negative dim).
fn fits(dims: &[i64], limit: u64) -> bool {
    dims.iter()
        .try_fold(1u64, |acc, &d| {
            u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        })
        .is_some_and(|n| n <= limit)
}

/// An integer (or bool) tensor as `i64` values.
struct Ints {
    dtype: DataType,
    dims: Vec<i64>,
    v: Vec<i64>,
}

impl Ints {
    fn of(t: &TensorData, limit: u64) -> Option<Ints> {
        if t.numel() > limit || !(t.dtype.is_integer() || t.dtype == DataType::Bool) {
            return None;
        }
        Some(Ints {
            dtype: t.dtype,
            dims: t.dims.clone(),
            v: t.to_i64_vec()?,
        })
    }

    fn tensor(self) -> Option<TensorData> {
        tensor_from_i64(self.dtype, self.dims, &self.v)
    }
}

fn strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Iterates over every multi-index of `dims`, row-major.
fn for_each_index(dims: &[i64], mut f: impl FnMut(&[i64])) {
    let n: i64 = dims.iter().product();
    let mut idx = vec![0i64; dims.len()];
    for _ in 0..n {
        f(&idx);
        for i in (0..dims.len()).rev() {
            idx[i] += 1;
            if idx[i] < dims[i] {
                break;
            }
            idx[i] = 0;
        }
    }
}

/// The flat offset into a tensor of `dims` broadcast to an output index `out_idx`.
fn bcast_offset(out_idx: &[i64], dims: &[i64], st: &[i64]) -> usize {
    let off = out_idx.len() - dims.len();
    (0..dims.len())
        .map(|i| {
            if dims[i] == 1 {
                0
            } else {
                out_idx[off + i] * st[i]
            }
        })
        .sum::<i64>() as usize
}

fn broadcast_map(
    limit: u64,
    inputs: &[&Ints],
    dtype: DataType,
    f: impl Fn(&[i64]) -> Option<i64>,
) -> Option<Ints> {
    let mut dims: Vec<i64> = Vec::new();
    for t in inputs {
        dims = broadcast_shapes(&dims, &t.dims).ok()?;
    }
    if !fits(&dims, limit) {
        return None;
    }
    let sts: Vec<Vec<i64>> = inputs.iter().map(|t| strides(&t.dims)).collect();
    let mut v = Vec::new();
    let mut ok = true;
    let mut args = vec![0i64; inputs.len()];
    for_each_index(&dims, |idx| {
        for (k, t) in inputs.iter().enumerate() {
            args[k] = t.v[bcast_offset(idx, &t.dims, &sts[k])];
        }
        match f(&args) {
            Some(x) => v.push(x),
            None => ok = false,
        }
    });
    ok.then_some(Ints { dtype, dims, v })
}

/// Folds `node` when all its inputs are known and it is cheap shape arithmetic; returns
/// whether it did.
pub fn try_fold(ctx: &mut LowerCtx, node: &Node) -> Result<bool, PlanError> {
    if !node.normalized_domain().is_empty() || node.outputs.len() != 1 {
        return Ok(false);
    }
    let present: Vec<usize> = (0..node.inputs.len())
        .filter(|&i| node.input(i).is_some())
        .collect();
    if present.is_empty() || present.iter().any(|&i| ctx.const_input(node, i).is_none()) {
        return Ok(false);
    }
    let inputs: Vec<Option<TensorData>> = (0..node.inputs.len())
        .map(|i| ctx.const_input(node, i).cloned())
        .collect();
    let result = fold_node(ctx.opset(), node, &inputs, LIMIT);
    match result {
        Some(t) => {
            // The declared output type must agree (it always does for valid models).
            if let Some(dt) = node
                .output(0)
                .and_then(|o| ctx.graph().value(o))
                .and_then(|v| v.dtype)
                && dt != t.dtype
            {
                return Ok(false);
            }
            ctx.fold(node, 0, t);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Evaluates a host-program node (host values are shape vectors: [`HOST_LIMIT`] elements).
pub(crate) fn eval_host(
    opset: i64,
    node: &Node,
    inputs: &[Option<TensorData>],
) -> Option<TensorData> {
    fold_node(opset, node, inputs, HOST_LIMIT)
}

fn fold_node(
    opset: i64,
    node: &Node,
    inputs: &[Option<TensorData>],
    limit: u64,
) -> Option<TensorData> {
    let t0 = inputs.first()?.as_ref()?;
    let ints = |i: usize| -> Option<Vec<i64>> { inputs.get(i)?.as_ref()?.to_i64_vec() };
    match node.op_type.as_str() {
        // Pure re-indexing of any dtype: the bytes stay, the dims change.
        "Identity" => Some(t0.clone()),
        "Reshape" => {
            let allowzero = opset >= 14 && attr_int(node, "allowzero").ok()?.unwrap_or(0) == 1;
            let d = reshape_target(&t0.dims, &ints(1)?, allowzero).ok()?;
            reshaped(t0, d)
        }
        "Flatten" => {
            let axis = attr_int(node, "axis").ok()?.unwrap_or(1);
            reshaped(t0, flatten_shape(&t0.dims, axis).ok()?)
        }
        "Squeeze" => {
            let axes = if opset >= 13 {
                ints(1)
            } else {
                attr_ints(node, "axes").ok()?
            };
            reshaped(t0, squeeze_shape(&t0.dims, axes.as_deref()).ok()?)
        }
        "Unsqueeze" => {
            let axes = if opset >= 13 {
                ints(1)?
            } else {
                attr_ints(node, "axes").ok()??
            };
            reshaped(t0, unsqueeze_shape(&t0.dims, &axes).ok()?)
        }
        _ => fold_ints(opset, node, inputs, limit),
    }
}

fn fold_ints(
    opset: i64,
    node: &Node,
    inputs: &[Option<TensorData>],
    limit: u64,
) -> Option<TensorData> {
    let all: Vec<Option<Ints>> = inputs
        .iter()
        .map(|t| t.as_ref().and_then(|t| Ints::of(t, limit)))
        .collect();
    let get = |i: usize| all.get(i).and_then(|t| t.as_ref());
    let a = get(0)?;
    let out = match node.op_type.as_str() {
        "Add" | "Sub" | "Mul" | "Div" | "Mod" | "Max" | "Min" if node.inputs.len() == 2 => {
            let b = get(1)?;
            if a.dtype != b.dtype || a.dtype == DataType::Bool {
                return None;
            }
            let fmod = attr_int(node, "fmod").ok()?.unwrap_or(0) != 0;
            let op = node.op_type.clone();
            broadcast_map(limit, &[a, b], a.dtype, move |v| {
                let (x, y) = (v[0], v[1]);
                Some(match op.as_str() {
                    "Add" => x.wrapping_add(y),
                    "Sub" => x.wrapping_sub(y),
                    "Mul" => x.wrapping_mul(y),
                    "Div" => x.checked_div(y)?,
                    "Mod" if fmod => x.checked_rem(y)?,
                    "Mod" => {
                        let r = x.checked_rem(y)?;
                        if r != 0 && ((r < 0) != (y < 0)) {
                            r + y
                        } else {
                            r
                        }
                    }
                    "Max" => x.max(y),
                    _ => x.min(y),
                })
            })?
        }
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
            let b = get(1)?;
            if a.dtype != b.dtype {
                return None;
            }
            let op = node.op_type.clone();
            broadcast_map(limit, &[a, b], DataType::Bool, move |v| {
                let (x, y) = (v[0], v[1]);
                Some(match op.as_str() {
                    "Equal" => x == y,
                    "Less" => x < y,
                    "Greater" => x > y,
                    "LessOrEqual" => x <= y,
                    "GreaterOrEqual" => x >= y,
                    "And" => x != 0 && y != 0,
                    "Or" => x != 0 || y != 0,
                    _ => (x != 0) != (y != 0),
                } as i64)
            })?
        }
        "Not" => broadcast_map(limit, &[a], DataType::Bool, |v| Some((v[0] == 0) as i64))?,
        "Neg" => broadcast_map(limit, &[a], a.dtype, |v| Some(v[0].wrapping_neg()))?,
        "Abs" => broadcast_map(limit, &[a], a.dtype, |v| Some(v[0].wrapping_abs()))?,
        "Where" => {
            let (x, y) = (get(1)?, get(2)?);
            if a.dtype != DataType::Bool || x.dtype != y.dtype {
                return None;
            }
            broadcast_map(limit, &[a, x, y], x.dtype, |v| {
                Some(if v[0] != 0 { v[1] } else { v[2] })
            })?
        }
        "Expand" => {
            let shape = get(1)?;
            let dims = broadcast_shapes(&a.dims, &shape.v).ok()?;
            if !fits(&dims, limit) {
                return None;
            }
            let target = Ints {
                dtype: a.dtype,
                dims,
                v: Vec::new(),
            };
            let st = strides(&a.dims);
            let mut v = Vec::new();
            for_each_index(&target.dims, |idx| {
                v.push(a.v[bcast_offset(idx, &a.dims, &st)])
            });
            Ints { v, ..target }
        }
        "Cast" => {
            let to = DataType::from_onnx(attr_int(node, "to").ok()?? as i32)?;
            if !(to.is_integer() || to == DataType::Bool || to.is_float()) {
                return None;
            }
            return tensor_from_i64(to, a.dims.clone(), &a.v);
        }
        "Concat" => {
            let axis = attr_int(node, "axis").ok()??;
            let parts: Vec<&Ints> = (0..node.inputs.len()).filter_map(get).collect();
            if parts.len() != node.inputs.iter().filter(|s| !s.is_empty()).count() {
                return None;
            }
            let rank = a.dims.len();
            let ax = normalize_axis(axis, rank).ok()?;
            let mut dims = a.dims.clone();
            dims[ax] = parts
                .iter()
                .map(|p| p.dims.get(ax).copied().unwrap_or(0))
                .sum();
            if parts.iter().any(|p| {
                p.dims.len() != rank
                    || p.dtype != a.dtype
                    || (0..rank).any(|k| k != ax && p.dims[k] != a.dims[k])
            }) {
                return None;
            }
            let outer: i64 = a.dims[..ax].iter().product();
            let mut v = Vec::new();
            for o in 0..outer {
                for p in &parts {
                    let inner: i64 = p.dims[ax..].iter().product();
                    let start = (o * inner) as usize;
                    v.extend_from_slice(&p.v[start..start + inner as usize]);
                }
            }
            Ints {
                dtype: a.dtype,
                dims,
                v,
            }
        }
        "Gather" => {
            let idx = get(1)?;
            let axis = attr_int(node, "axis").ok()?.unwrap_or(0);
            let ax = normalize_axis(axis, a.dims.len()).ok()?;
            let n = a.dims[ax];
            let outer: i64 = a.dims[..ax].iter().product();
            let inner: i64 = a.dims[ax + 1..].iter().product();
            let mut dims = a.dims[..ax].to_vec();
            dims.extend_from_slice(&idx.dims);
            dims.extend_from_slice(&a.dims[ax + 1..]);
            if !fits(&dims, limit) {
                return None;
            }
            let mut v = Vec::new();
            for o in 0..outer {
                for &i in &idx.v {
                    let i = if i < 0 { i + n } else { i };
                    if !(0..n).contains(&i) {
                        return None;
                    }
                    let start = ((o * n + i) * inner) as usize;
                    v.extend_from_slice(&a.v[start..start + inner as usize]);
                }
            }
            Ints {
                dtype: a.dtype,
                dims,
                v,
            }
        }
        "Slice" => {
            let (starts, ends, axes, steps) = if opset >= 10 {
                (
                    get(1)?.v.clone(),
                    get(2)?.v.clone(),
                    get(3).map(|t| t.v.clone()),
                    get(4).map(|t| t.v.clone()),
                )
            } else {
                (
                    attr_ints(node, "starts").ok()??,
                    attr_ints(node, "ends").ok()??,
                    attr_ints(node, "axes").ok()?,
                    None,
                )
            };
            let b =
                slice_bounds(&a.dims, &starts, &ends, axes.as_deref(), steps.as_deref()).ok()?;
            let st = strides(&a.dims);
            let mut v = Vec::new();
            for_each_index(&b.out_shape, |idx| {
                let off: i64 = (0..idx.len())
                    .map(|k| (b.start[k] as i64 + idx[k] * b.strides[k] as i64) * st[k])
                    .sum();
                v.push(a.v[off as usize]);
            });
            Ints {
                dtype: a.dtype,
                dims: b.out_shape,
                v,
            }
        }
        "ReduceProd" | "ReduceSum" | "ReduceMax" | "ReduceMin" => {
            return reduce_ints(opset, node, a, get(1).map(|t| t.v.as_slice()));
        }
        "Range" => {
            let (l, d) = (get(1)?, get(2)?);
            let (s, l, d) = (*a.v.first()?, *l.v.first()?, *d.v.first()?);
            if d == 0 {
                return None;
            }
            let n = ((l as f64 - s as f64) / d as f64).ceil().max(0.0);
            // NaN (from infinite bounds) and counts above the limit fold to nothing.
            if n.is_nan() || n > limit as f64 {
                return None;
            }
            let n = n as i64;
            Ints {
                dtype: a.dtype,
                dims: vec![n],
                v: (0..n).map(|i| s.wrapping_add(i.wrapping_mul(d))).collect(),
            }
        }
        _ => return None,
    };
    out.tensor()
}

/// An integer `ReduceSum`/`ReduceProd`/`ReduceMax`/`ReduceMin` over the axes of an attribute
/// (before opset 13 for `ReduceSum`, 18 for the others) or of input 1, with `keepdims` and
/// `noop_with_empty_axes`. Max/Min over an empty axis are left to the device.
fn reduce_ints(
    opset: i64,
    node: &Node,
    a: &Ints,
    axes_input: Option<&[i64]>,
) -> Option<TensorData> {
    if a.dtype == DataType::Bool {
        return None;
    }
    let op = node.op_type.as_str();
    let axes_from_input = opset >= if op == "ReduceSum" { 13 } else { 18 };
    let axes: Vec<i64> = if axes_from_input {
        if node.input(1).is_some() && axes_input.is_none() {
            return None;
        }
        axes_input.map(<[i64]>::to_vec).unwrap_or_default()
    } else {
        attr_ints(node, "axes").ok()?.unwrap_or_default()
    };
    let keep = attr_int(node, "keepdims").ok()?.unwrap_or(1) != 0;
    let noop = attr_int(node, "noop_with_empty_axes").ok()?.unwrap_or(0) != 0;
    let rank = a.dims.len();
    if axes.is_empty() && noop && axes_from_input {
        return tensor_from_i64(a.dtype, a.dims.clone(), &a.v);
    }
    let mut reduced = vec![axes.is_empty(); rank];
    for &ax in &axes {
        let ax = normalize_axis(ax, rank).ok()?;
        reduced[ax] = true;
    }
    if matches!(op, "ReduceMax" | "ReduceMin") && (0..rank).any(|k| reduced[k] && a.dims[k] == 0) {
        return None;
    }
    let out_dims: Vec<i64> = (0..rank)
        .filter_map(|k| match (reduced[k], keep) {
            (false, _) => Some(a.dims[k]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    let kept_dims: Vec<i64> = (0..rank)
        .map(|k| if reduced[k] { 1 } else { a.dims[k] })
        .collect();
    let kept_strides = strides(&kept_dims);
    let n: i64 = kept_dims.iter().product();
    let init = match op {
        "ReduceSum" => 0,
        "ReduceProd" => 1,
        "ReduceMax" => i64::MIN,
        _ => i64::MAX,
    };
    let mut acc = vec![init; n as usize];
    let mut flat = 0usize;
    for_each_index(&a.dims, |idx| {
        let o: i64 = (0..rank)
            .map(|k| {
                if reduced[k] {
                    0
                } else {
                    idx[k] * kept_strides[k]
                }
            })
            .sum();
        let (slot, x) = (&mut acc[o as usize], a.v[flat]);
        *slot = match op {
            "ReduceSum" => slot.wrapping_add(x),
            "ReduceProd" => slot.wrapping_mul(x),
            "ReduceMax" => (*slot).max(x),
            _ => (*slot).min(x),
        };
        flat += 1;
    });
    tensor_from_i64(a.dtype, out_dims, &acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold_node_t(opset: i64, n: &Node, inputs: &[Option<TensorData>]) -> Option<TensorData> {
        fold_node(opset, n, inputs, LIMIT)
    }

    fn i64s(dims: Vec<i64>, v: &[i64]) -> Option<TensorData> {
        Some(TensorData::from_i64(dims, v))
    }

    #[test]
    fn folds_shape_arithmetic() {
        let n = Node::new("Gather", ["s", "i"], ["o"]).with_attr("axis", Attribute::Int(0));
        let t = fold_node_t(13, &n, &[i64s(vec![3], &[2, 5, 7]), i64s(vec![], &[-1])]).unwrap();
        assert_eq!((t.dims.clone(), t.to_i64_vec().unwrap()), (vec![], vec![7]));
        let n = Node::new("Concat", ["a", "b"], ["o"]).with_attr("axis", Attribute::Int(0));
        let t = fold_node_t(13, &n, &[i64s(vec![1], &[2]), i64s(vec![2], &[-1, 4])]).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), vec![2, -1, 4]);
        let n = Node::new("Div", ["a", "b"], ["o"]);
        let t = fold_node_t(13, &n, &[i64s(vec![2], &[-7, 7]), i64s(vec![], &[2])]).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), vec![-3, 3]);
        let n = Node::new("Unsqueeze", ["a", "axes"], ["o"]);
        let t = fold_node_t(13, &n, &[i64s(vec![], &[5]), i64s(vec![1], &[0])]).unwrap();
        assert_eq!(t.dims, vec![1]);
        let n = Node::new("Slice", ["a", "s", "e"], ["o"]);
        let t = fold_node_t(
            13,
            &n,
            &[
                i64s(vec![4], &[1, 2, 3, 4]),
                i64s(vec![1], &[-2]),
                i64s(vec![1], &[i64::MAX]),
            ],
        )
        .unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), vec![3, 4]);
        let n = Node::new("Equal", ["a", "b"], ["o"]);
        let t = fold_node_t(13, &n, &[i64s(vec![2], &[1, 2]), i64s(vec![], &[2])]).unwrap();
        assert_eq!(
            (t.dtype, t.to_i64_vec().unwrap()),
            (DataType::Bool, vec![0, 1])
        );
        let n = Node::new("Where", ["c", "a", "b"], ["o"]);
        let c = tensor_from_i64(DataType::Bool, vec![2], &[1, 0]);
        let t = fold_node_t(13, &n, &[c, i64s(vec![2], &[1, 2]), i64s(vec![], &[9])]).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), vec![1, 9]);
        // Floats are left alone.
        let n = Node::new("Add", ["a", "b"], ["o"]);
        let f = Some(TensorData::from_f32(vec![1], &[1.0]));
        assert!(fold_node_t(13, &n, &[f.clone(), f]).is_none());
    }
}
