//! Reads an ORT `OrtGraph` into an [`onnx_ir::Graph`] through the 1.23 graph accessors.
//!
//! Everything is copied (names, attributes, constant initializer bytes), so the result holds no
//! ORT pointer and outlives the callback; only [`ReadGraph::nodes`] keeps the `OrtNode` handles
//! of the callback that read it, for `EpGraphSupportInfo_AddNodesToFuse`.

use std::collections::{HashMap, HashSet};
use std::ffi::c_char;
use std::ptr;

use onnx_ir::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};
use ort_sys::{
    ONNXTensorElementDataType, ONNXType, OrtGraph, OrtNode, OrtOpAttr, OrtOpAttrType, OrtStatusPtr,
    OrtTensorTypeAndShapeInfo, OrtTypeInfo, OrtValue, OrtValueInfo,
};

use crate::api::{Api, cstr_lossy};
use crate::error::EpError;

/// How to treat values a graph reads from enclosing scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The graph is read as a self-contained unit (GetCapability, Compile): values it reads
    /// but doesn't define become graph inputs, and constant initializers of outer scopes are
    /// copied in.
    Closed,
    /// The graph is a subgraph attribute (If/Loop/Scan body): it keeps its formal inputs only
    /// and refers to outer values by name.
    Nested,
}

/// A graph read from ORT, with the `OrtNode` handle of each IR node.
pub struct ReadGraph {
    /// The graph in IR form.
    pub graph: Graph,
    /// `nodes[i]` is the ORT node of `graph.nodes[i]`; valid only during the callback.
    pub nodes: Vec<*const OrtNode>,
}

/// Calls an ORT "get N things" accessor: `count` then `fill`, returning the handles.
///
/// # Safety
/// The closures must call matching ORT accessors on live handles.
unsafe fn get_list<T>(
    api: &Api,
    what: &str,
    count: impl FnOnce(*mut usize) -> OrtStatusPtr,
    fill: impl FnOnce(*mut *const T, usize) -> OrtStatusPtr,
) -> Result<Vec<*const T>, EpError> {
    let mut n = 0usize;
    api.check(count(&mut n), what)?;
    let mut out = vec![ptr::null::<T>(); n];
    if n > 0 {
        api.check(fill(out.as_mut_ptr(), n), what)?;
    }
    Ok(out)
}

/// Reads a C string out-parameter.
unsafe fn get_str(
    api: &Api,
    what: &str,
    f: impl FnOnce(*mut *const c_char) -> OrtStatusPtr,
) -> Result<String, EpError> {
    let p: *const c_char = api.out(what, ptr::null(), |p| f(p))?;
    // SAFETY: ORT returns a NUL-terminated string or null.
    Ok(unsafe { cstr_lossy(p) })
}

/// Reads a `bool` out-parameter.
fn get_bool(
    api: &Api,
    what: &str,
    f: impl FnOnce(*mut bool) -> OrtStatusPtr,
) -> Result<bool, EpError> {
    api.out(what, false, |b| f(b))
}

/// The name of a value.
///
/// # Safety
/// `vi` must be a live `OrtValueInfo`.
pub unsafe fn value_name(api: &Api, vi: *const OrtValueInfo) -> Result<String, EpError> {
    // SAFETY: live handle.
    unsafe {
        get_str(api, "GetValueInfoName", |p| {
            (api.ort.GetValueInfoName)(vi, p)
        })
    }
}

/// Element type and shape of a tensor type-and-shape info.
///
/// A rank of 0 reads as "shape unknown" (`None`) unless the host can say it is a scalar (see
/// `has_shape`); callers reading a real tensor treat `None` as a scalar.
///
/// The element type of an ORT `ONNXTensorElementDataType` value. ORT's C enum follows
/// ONNX's `TensorProto.DataType` up to FLOAT4E2M1 (23), then differs: ORT has UINT2 = 24,
/// INT2 = 25, FLOAT8E8M0 = 26 where ONNX has FLOAT8E8M0 = 24, UINT2 = 25, INT2 = 26.
pub fn dtype_from_ort(elem: i32) -> Option<DataType> {
    match elem {
        24 => Some(DataType::Uint2),
        25 => Some(DataType::Int2),
        26 => Some(DataType::Float8E8M0),
        27.. => None,
        v => DataType::from_onnx(v),
    }
}

/// The raw ONNX element type and the dims (`-1`: not fixed) of a tensor type.
///
/// # Safety
/// `info` must be a live `OrtTensorTypeAndShapeInfo`.
pub(crate) unsafe fn element_type_and_dims(
    api: &Api,
    info: *const OrtTensorTypeAndShapeInfo,
) -> Result<(i32, Vec<i64>), EpError> {
    let mut elem: i32 = 0;
    api.check(
        // SAFETY: the enum is i32-sized; reading it as i32 avoids trusting unknown values.
        unsafe {
            (api.ort.GetTensorElementType)(
                info,
                &mut elem as *mut i32 as *mut ONNXTensorElementDataType,
            )
        },
        "GetTensorElementType",
    )?;
    // SAFETY: live handle.
    let rank = api.out("GetDimensionsCount", 0usize, |out| unsafe {
        (api.ort.GetDimensionsCount)(info, out)
    })?;
    let mut dims = vec![0i64; rank];
    if rank > 0 {
        // SAFETY: a buffer of `rank` elements.
        api.check(
            unsafe { (api.ort.GetDimensions)(info, dims.as_mut_ptr(), rank) },
            "GetDimensions",
        )?;
    }
    Ok((elem, dims))
}

/// # Safety
/// `info` must be a live `OrtTensorTypeAndShapeInfo`.
pub unsafe fn tensor_info(
    api: &Api,
    info: *const OrtTensorTypeAndShapeInfo,
) -> Result<(Option<DataType>, Option<Vec<Dim>>), EpError> {
    // SAFETY: live handle.
    let (elem, dims) = unsafe { element_type_and_dims(api, info) }?;
    let dtype = dtype_from_ort(elem);
    let rank = dims.len();
    let mut syms: Vec<*const c_char> = vec![ptr::null(); rank];
    if rank > 0 {
        api.check(
            // SAFETY: a buffer of `rank` elements.
            unsafe { (api.ort.GetSymbolicDimensions)(info, syms.as_mut_ptr(), rank) },
            "GetSymbolicDimensions",
        )?;
    } else if !has_shape(api, info) {
        return Ok((dtype, None));
    }
    let shape = dims
        .iter()
        .zip(&syms)
        .map(|(&d, &s)| {
            // SAFETY: ORT's symbolic names are NUL-terminated or null.
            let name = unsafe { cstr_lossy(s) };
            if d >= 0 {
                Dim::Fixed(d)
            } else if !name.is_empty() {
                Dim::Symbolic(name)
            } else {
                Dim::Unknown
            }
        })
        .collect();
    Ok((dtype, Some(shape)))
}

/// Whether a rank-0 type-and-shape info really has a (scalar) shape.
///
/// ORT 1.24 added `TensorTypeAndShape_HasShape` (the first member after the 1.23 `OrtApi`);
/// before it, "no shape" and "scalar" look alike, so the answer there is "unknown".
fn has_shape(api: &Api, info: *const OrtTensorTypeAndShapeInfo) -> bool {
    let f = api.member_after_v23(0, 24);
    if f.is_null() {
        return false;
    }
    // SAFETY: on 1.24+ this member is `bool (*)(const OrtTensorTypeAndShapeInfo*)`.
    let f: unsafe extern "system" fn(*const OrtTensorTypeAndShapeInfo) -> bool =
        unsafe { std::mem::transmute(f) };
    // SAFETY: live handle.
    unsafe { f(info) }
}

/// Element type and shape of a value; `(None, None)` for non-tensors or unknown types.
///
/// # Safety
/// `vi` must be a live `OrtValueInfo`.
pub unsafe fn value_type(
    api: &Api,
    vi: *const OrtValueInfo,
) -> Result<(Option<DataType>, Option<Vec<Dim>>), EpError> {
    // SAFETY: live handle; the type info is owned by the value info.
    let ti: *const OrtTypeInfo = api.out("GetValueInfoTypeInfo", ptr::null(), |out| unsafe {
        (api.ort.GetValueInfoTypeInfo)(vi, out)
    })?;
    if ti.is_null() {
        return Ok((None, None));
    }
    let mut ty: i32 = 0;
    api.check(
        // SAFETY: i32-sized enum read as i32.
        unsafe { (api.ort.GetOnnxTypeFromTypeInfo)(ti, &mut ty as *mut i32 as *mut ONNXType) },
        "GetOnnxTypeFromTypeInfo",
    )?;
    if ty != ONNXType::ONNX_TYPE_TENSOR as i32 {
        return Ok((None, None));
    }
    // SAFETY: tensor type info; the result is owned by `ti`.
    let tsi: *const OrtTensorTypeAndShapeInfo =
        api.out("CastTypeInfoToTensorInfo", ptr::null(), |out| unsafe {
            (api.ort.CastTypeInfoToTensorInfo)(ti, out)
        })?;
    if tsi.is_null() {
        return Ok((None, None));
    }
    // SAFETY: live handle.
    unsafe { tensor_info(api, tsi) }
}

/// A tensor's element type and shape, each when known.
pub type TensorType = (Option<DataType>, Option<Vec<Dim>>);

/// The contained tensor type of an `optional(tensor)` value; `None` for any other value.
///
/// # Safety
/// `vi` must be a live `OrtValueInfo`.
pub unsafe fn optional_tensor_type(
    api: &Api,
    vi: *const OrtValueInfo,
) -> Result<Option<TensorType>, EpError> {
    let o = api.ort;
    // SAFETY: live handle; the type info is owned by the value info.
    let ti: *const OrtTypeInfo = api.out("GetValueInfoTypeInfo", ptr::null(), |out| unsafe {
        (o.GetValueInfoTypeInfo)(vi, out)
    })?;
    if ti.is_null() {
        return Ok(None);
    }
    let mut ty: i32 = 0;
    api.check(
        // SAFETY: i32-sized enum read as i32.
        unsafe { (o.GetOnnxTypeFromTypeInfo)(ti, &mut ty as *mut i32 as *mut ONNXType) },
        "GetOnnxTypeFromTypeInfo",
    )?;
    if ty != ONNXType::ONNX_TYPE_OPTIONAL as i32 {
        return Ok(None);
    }
    // SAFETY: an optional type info; the cast result is owned by `ti`.
    let oti = api.out(
        "CastTypeInfoToOptionalTypeInfo",
        ptr::null(),
        |out| unsafe { (o.CastTypeInfoToOptionalTypeInfo)(ti, out) },
    )?;
    if oti.is_null() {
        return Ok(None);
    }
    // SAFETY: live optional info; we own and release the contained type info.
    let inner: *mut OrtTypeInfo = api.out(
        "GetOptionalContainedTypeInfo",
        ptr::null_mut(),
        |out| unsafe { (o.GetOptionalContainedTypeInfo)(oti, out) },
    )?;
    if inner.is_null() {
        return Ok(None);
    }
    let result = (|| {
        let mut ty: i32 = 0;
        api.check(
            // SAFETY: live type info.
            unsafe { (o.GetOnnxTypeFromTypeInfo)(inner, &mut ty as *mut i32 as *mut ONNXType) },
            "GetOnnxTypeFromTypeInfo",
        )?;
        if ty != ONNXType::ONNX_TYPE_TENSOR as i32 {
            return Ok(None);
        }
        // SAFETY: tensor type info owned by `inner`.
        let tsi: *const OrtTensorTypeAndShapeInfo =
            api.out("CastTypeInfoToTensorInfo", ptr::null(), |out| unsafe {
                (o.CastTypeInfoToTensorInfo)(inner, out)
            })?;
        if tsi.is_null() {
            return Ok(None);
        }
        // SAFETY: live handle.
        unsafe { tensor_info(api, tsi) }.map(Some)
    })();
    // SAFETY: we own it.
    unsafe { (o.ReleaseTypeInfo)(inner) };
    result
}

/// A value's name and type as an IR `ValueInfo`.
///
/// # Safety
/// `vi` must be a live `OrtValueInfo`.
pub unsafe fn value_info(api: &Api, vi: *const OrtValueInfo) -> Result<ValueInfo, EpError> {
    // SAFETY: live handle.
    let name = unsafe { value_name(api, vi) }?;
    // SAFETY: live handle.
    let (dtype, shape) = unsafe { value_type(api, vi) }.map_err(|e| e.context(&name))?;
    Ok(ValueInfo { name, dtype, shape })
}

/// Copies a dense tensor `OrtValue` (CPU-readable) into IR tensor data.
///
/// # Safety
/// `value` must be a live tensor `OrtValue`.
pub unsafe fn read_tensor(api: &Api, value: *const OrtValue) -> Result<TensorData, EpError> {
    // SAFETY: live value; we own and release `info`.
    let info: *mut OrtTensorTypeAndShapeInfo =
        api.out("GetTensorTypeAndShape", ptr::null_mut(), |out| unsafe {
            (api.ort.GetTensorTypeAndShape)(value, out)
        })?;
    // SAFETY: `info` is live until released below.
    let shape = unsafe { tensor_info(api, info) };
    // SAFETY: we own it.
    unsafe { (api.ort.ReleaseTensorTypeAndShapeInfo)(info) };
    let (dtype, shape) = shape?;
    let dtype = dtype.ok_or_else(|| EpError::new("tensor of an element type the IR lacks"))?;
    let dims: Vec<i64> = shape
        .unwrap_or_default()
        .iter()
        .map(|d| {
            d.fixed()
                .ok_or_else(|| EpError::new("tensor with a non-fixed dim"))
        })
        .collect::<Result<_, _>>()?;
    if dtype == DataType::String {
        // SAFETY: live string tensor of these dims.
        return unsafe { crate::strings::read_strings(api, value, &dims) };
    }
    // SAFETY: live value.
    let size = api.out("GetTensorSizeInBytes", 0usize, |out| unsafe {
        (api.ort.GetTensorSizeInBytes)(value, out)
    })?;
    let bytes: Vec<u8> = if size == 0 {
        Vec::new()
    } else {
        // SAFETY: live value; the data stays valid while the value lives.
        let data: *const std::ffi::c_void =
            api.out("GetTensorData", ptr::null(), |out| unsafe {
                (api.ort.GetTensorData)(value, out)
            })?;
        if data.is_null() {
            return Err(EpError::new("tensor data pointer is null"));
        }
        // SAFETY: ORT reports `size` readable bytes at `data`.
        unsafe { std::slice::from_raw_parts(data as *const u8, size) }.to_vec()
    };
    TensorData::new(dtype, dims, bytes).map_err(EpError::new)
}

/// Reads the raw bytes of a list/string attribute with `ReadOpAttr`'s size protocol.
unsafe fn read_attr_bytes(
    api: &Api,
    attr: *const OrtOpAttr,
    ty: OrtOpAttrType,
) -> Result<Vec<u8>, EpError> {
    let mut needed = 0usize;
    let mut probe = [0u8; 8];
    // First call with an empty buffer asks for the size (an error status when non-empty).
    // SAFETY: live attribute; a zero-length buffer is never written.
    let st = unsafe { (api.ort.ReadOpAttr)(attr, ty, probe.as_mut_ptr().cast(), 0, &mut needed) };
    if needed == 0 {
        api.check(st, "ReadOpAttr")?;
        return Ok(Vec::new());
    }
    api.discard(st);
    let mut buf = vec![0u8; needed];
    // SAFETY: a buffer of `needed` bytes.
    let written = api.out("ReadOpAttr", 0usize, |out| unsafe {
        (api.ort.ReadOpAttr)(attr, ty, buf.as_mut_ptr().cast(), needed, out)
    })?;
    buf.truncate(written.min(needed));
    Ok(buf)
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn i64s(bytes: &[u8]) -> Vec<i64> {
    bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

/// Splits ORT's `STRINGS` encoding (each string followed by a NUL).
pub fn split_strings(bytes: &[u8]) -> Vec<Vec<u8>> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let body = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    body.split(|&b| b == 0).map(<[u8]>::to_vec).collect()
}

/// Reads one attribute (graphs come separately, from `Node_GetSubgraphs`).
///
/// # Safety
/// `attr` must be a live `OrtOpAttr`.
unsafe fn read_attribute(
    api: &Api,
    attr: *const OrtOpAttr,
) -> Result<(String, Attribute), EpError> {
    // SAFETY: live handle.
    let name = unsafe { get_str(api, "OpAttr_GetName", |p| (api.ort.OpAttr_GetName)(attr, p)) }?;
    let mut raw: i32 = 0;
    // SAFETY: i32-sized enum read as i32.
    let st = unsafe { (api.ort.OpAttr_GetType)(attr, &mut raw as *mut i32 as *mut OrtOpAttrType) };
    if let Err(e) = api.check(st, "OpAttr_GetType") {
        // TENSORS, GRAPHS, SPARSE_TENSOR(S), TYPE_PROTO(S): ORT has no accessor for them.
        return Ok((name, Attribute::Unsupported(e.message)));
    }
    use OrtOpAttrType::*;
    let kind = [
        ORT_OP_ATTR_UNDEFINED,
        ORT_OP_ATTR_INT,
        ORT_OP_ATTR_INTS,
        ORT_OP_ATTR_FLOAT,
        ORT_OP_ATTR_FLOATS,
        ORT_OP_ATTR_STRING,
        ORT_OP_ATTR_STRINGS,
        ORT_OP_ATTR_GRAPH,
        ORT_OP_ATTR_TENSOR,
    ]
    .into_iter()
    .find(|k| *k as i32 == raw);
    // SAFETY (all arms): live attribute, buffers sized by the read protocol.
    let value = match kind {
        Some(ORT_OP_ATTR_INT) => {
            let b = unsafe { read_attr_bytes(api, attr, ORT_OP_ATTR_INT) }?;
            Attribute::Int(
                i64s(&b)
                    .first()
                    .copied()
                    .ok_or("INT attribute without value")?,
            )
        }
        Some(ORT_OP_ATTR_FLOAT) => {
            let b = unsafe { read_attr_bytes(api, attr, ORT_OP_ATTR_FLOAT) }?;
            Attribute::Float(
                f32s(&b)
                    .first()
                    .copied()
                    .ok_or("FLOAT attribute without value")?,
            )
        }
        Some(ORT_OP_ATTR_INTS) => Attribute::Ints(i64s(&unsafe {
            read_attr_bytes(api, attr, ORT_OP_ATTR_INTS)
        }?)),
        Some(ORT_OP_ATTR_FLOATS) => Attribute::Floats(f32s(&unsafe {
            read_attr_bytes(api, attr, ORT_OP_ATTR_FLOATS)
        }?)),
        Some(ORT_OP_ATTR_STRING) => {
            let mut b = unsafe { read_attr_bytes(api, attr, ORT_OP_ATTR_STRING) }?;
            if b.last() == Some(&0) {
                b.pop();
            }
            Attribute::String(b)
        }
        Some(ORT_OP_ATTR_STRINGS) => Attribute::Strings(split_strings(&unsafe {
            read_attr_bytes(api, attr, ORT_OP_ATTR_STRINGS)
        }?)),
        Some(ORT_OP_ATTR_TENSOR) => {
            let v: *mut OrtValue = api.out(
                "OpAttr_GetTensorAttributeAsOrtValue",
                ptr::null_mut(),
                |out| unsafe { (api.ort.OpAttr_GetTensorAttributeAsOrtValue)(attr, out) },
            )?;
            let t = unsafe { read_tensor(api, v) };
            // SAFETY: we own the value ORT created.
            unsafe { (api.ort.ReleaseValue)(v) };
            match t {
                Ok(t) => Attribute::Tensor(t),
                Err(e) => Attribute::Unsupported(format!("TENSOR attribute: {e}")),
            }
        }
        Some(ORT_OP_ATTR_GRAPH) => {
            Attribute::Unsupported("GRAPH (read through Node_GetSubgraphs)".into())
        }
        _ => Attribute::Unsupported(format!("attribute type {raw}")),
    };
    Ok((name, value))
}

/// The reader's options.
struct Reader<'a> {
    api: &'a Api,
    scope: Scope,
}

impl Reader<'_> {
    /// Reads a node's inputs or outputs as names ("" for absent optional ones).
    unsafe fn io_names(&self, list: &[*const OrtValueInfo]) -> Result<Vec<String>, EpError> {
        list.iter()
            // SAFETY: live handles from the node.
            .map(|&vi| {
                if vi.is_null() {
                    Ok(String::new())
                } else {
                    unsafe { value_name(self.api, vi) }
                }
            })
            .collect()
    }

    unsafe fn read_node(
        &self,
        node: *const OrtNode,
        pending: &mut Vec<*const OrtValueInfo>,
    ) -> Result<Node, EpError> {
        let api = self.api;
        let o = api.ort;
        // SAFETY (all calls): `node` is live for the callback; out-buffers are sized by the
        // matching count accessor.
        unsafe {
            let op_type = get_str(api, "Node_GetOperatorType", |p| {
                (o.Node_GetOperatorType)(node, p)
            })?;
            let domain = get_str(api, "Node_GetDomain", |p| (o.Node_GetDomain)(node, p))?;
            let mut name = get_str(api, "Node_GetName", |p| (o.Node_GetName)(node, p))?;
            if name.is_empty() {
                let mut id = 0usize;
                api.check((o.Node_GetId)(node, &mut id), "Node_GetId")?;
                name = format!("{op_type}_{id}");
            }
            let ctx = |e: EpError| e.context(format!("node '{name}' ({op_type})"));
            let inputs = get_list(
                api,
                "Node_GetInputs",
                |n| (o.Node_GetNumInputs)(node, n),
                |p, n| (o.Node_GetInputs)(node, p, n),
            )
            .map_err(ctx)?;
            let outputs = get_list(
                api,
                "Node_GetOutputs",
                |n| (o.Node_GetNumOutputs)(node, n),
                |p, n| (o.Node_GetOutputs)(node, p, n),
            )
            .map_err(ctx)?;
            pending.extend(
                inputs
                    .iter()
                    .chain(&outputs)
                    .copied()
                    .filter(|p| !p.is_null()),
            );

            let mut ir = Node {
                name: name.clone(),
                op_type: op_type.clone(),
                domain,
                inputs: self.io_names(&inputs).map_err(ctx)?,
                outputs: self.io_names(&outputs).map_err(ctx)?,
                ..Node::default()
            };

            let attrs = get_list(
                api,
                "Node_GetAttributes",
                |n| (o.Node_GetNumAttributes)(node, n),
                |p, n| (o.Node_GetAttributes)(node, p, n),
            )
            .map_err(ctx)?;
            for attr in attrs.into_iter().filter(|a| !a.is_null()) {
                let (k, v) = read_attribute(api, attr).map_err(ctx)?;
                ir.attributes.insert(k, v);
            }

            let mut nsub = 0usize;
            api.check(
                (o.Node_GetNumSubgraphs)(node, &mut nsub),
                "Node_GetNumSubgraphs",
            )
            .map_err(ctx)?;
            if nsub > 0 {
                let mut subs: Vec<*const OrtGraph> = vec![ptr::null(); nsub];
                let mut names: Vec<*const c_char> = vec![ptr::null(); nsub];
                api.check(
                    (o.Node_GetSubgraphs)(node, subs.as_mut_ptr(), nsub, names.as_mut_ptr()),
                    "Node_GetSubgraphs",
                )
                .map_err(ctx)?;
                if self.scope == Scope::Closed {
                    // Outer values the bodies read: their types, and constants to copy in.
                    let implicit = get_list(
                        api,
                        "Node_GetImplicitInputs",
                        |n| (o.Node_GetNumImplicitInputs)(node, n),
                        |p, n| (o.Node_GetImplicitInputs)(node, p, n),
                    )
                    .map_err(ctx)?;
                    pending.extend(implicit.into_iter().filter(|p| !p.is_null()));
                }
                for (sub, attr_name) in subs.into_iter().zip(names) {
                    let attr_name = cstr_lossy(attr_name);
                    let value = match read_graph(api, sub, Scope::Nested) {
                        Ok(g) => Attribute::Graph(Box::new(g.graph)),
                        Err(e) => Attribute::Unsupported(format!("GRAPH: {e}")),
                    };
                    ir.attributes.insert(attr_name, value);
                }
            }
            Ok(ir)
        }
    }
}

/// Reads an `OrtGraph` into IR.
///
/// # Safety
/// `graph` must be a live `OrtGraph` (valid for the current callback).
pub unsafe fn read_graph(
    api: &Api,
    graph: *const OrtGraph,
    scope: Scope,
) -> Result<ReadGraph, EpError> {
    let o = api.ort;
    let reader = Reader { api, scope };
    let mut ir = Graph::default();
    // SAFETY (whole body): `graph` and every handle reached from it are live for the
    // callback; out-buffers are sized by the matching count accessor.
    unsafe {
        ir.name = get_str(api, "Graph_GetName", |p| (o.Graph_GetName)(graph, p))?;

        let mut nops = 0usize;
        api.check(
            (o.Graph_GetNumOperatorSets)(graph, &mut nops),
            "Graph_GetNumOperatorSets",
        )?;
        if nops > 0 {
            let mut domains: Vec<*const c_char> = vec![ptr::null(); nops];
            let mut versions = vec![0i64; nops];
            api.check(
                (o.Graph_GetOperatorSets)(graph, domains.as_mut_ptr(), versions.as_mut_ptr(), nops),
                "Graph_GetOperatorSets",
            )?;
            for (d, v) in domains.into_iter().zip(versions) {
                let d = cstr_lossy(d);
                let d = if d == "ai.onnx" { String::new() } else { d };
                ir.opset_imports.insert(d, v);
            }
        }

        // Constant initializers (and the names of every initializer).
        let inits = get_list(
            api,
            "Graph_GetInitializers",
            |n| (o.Graph_GetNumInitializers)(graph, n),
            |p, n| (o.Graph_GetInitializers)(graph, p, n),
        )?;
        for vi in inits.into_iter().filter(|p| !p.is_null()) {
            reader.maybe_read_initializer(vi, &mut ir)?;
        }

        let inputs = get_list(
            api,
            "Graph_GetInputs",
            |n| (o.Graph_GetNumInputs)(graph, n),
            |p, n| (o.Graph_GetInputs)(graph, p, n),
        )?;
        for vi in inputs.into_iter().filter(|p| !p.is_null()) {
            let name = value_name(api, vi)?;
            if ir.initializers.contains_key(&name) {
                continue; // an initializer listed among the inputs (IR < 4): a constant
            }
            let mut info = value_info(api, vi)?;
            if info.dtype.is_none()
                && let Some((dtype, shape)) = optional_tensor_type(api, vi)?
                && dtype.is_some()
            {
                // an optional(tensor) input: its tensor type, and absent when it holds none
                info.dtype = dtype;
                info.shape = shape;
                ir.optional_inputs.insert(info.name.clone());
            }
            ir.inputs.push(info);
        }

        let outputs = get_list(
            api,
            "Graph_GetOutputs",
            |n| (o.Graph_GetNumOutputs)(graph, n),
            |p, n| (o.Graph_GetOutputs)(graph, p, n),
        )?;
        for vi in outputs.into_iter().filter(|p| !p.is_null()) {
            ir.outputs.push(value_info(api, vi)?);
        }

        let nodes = get_list(
            api,
            "Graph_GetNodes",
            |n| (o.Graph_GetNumNodes)(graph, n),
            |p, n| (o.Graph_GetNodes)(graph, p, n),
        )?;
        let mut pending: Vec<*const OrtValueInfo> = Vec::new();
        for &node in &nodes {
            let n = reader.read_node(node, &mut pending)?;
            ir.nodes.push(n);
        }

        // Types of every value the nodes touch, and constant initializers they read (from this
        // or, for closed reads, enclosing scopes).
        let mut seen: HashSet<String> = HashSet::new();
        let defined: HashSet<String> = ir
            .inputs
            .iter()
            .chain(&ir.outputs)
            .map(|v| v.name.clone())
            .collect();
        let mut types: HashMap<String, ValueInfo> = HashMap::new();
        // optional(tensor) values, applied where one becomes an input below
        let mut optional_types: HashMap<String, TensorType> = HashMap::new();
        for vi in pending {
            let name = value_name(api, vi)?;
            if !seen.insert(name.clone()) || ir.initializers.contains_key(&name) {
                continue;
            }
            if reader.maybe_read_initializer(vi, &mut ir)? {
                continue;
            }
            if !defined.contains(&name) {
                let info = value_info(api, vi)?;
                if info.dtype.is_none()
                    && scope == Scope::Closed
                    && let Some(t) = optional_tensor_type(api, vi)?
                    && t.0.is_some()
                {
                    optional_types.insert(name.clone(), t);
                }
                types.insert(name.clone(), info);
            }
        }

        // A constant first met among the node inputs may also be listed as a graph input.
        let inits = &ir.initializers;
        ir.inputs.retain(|v| !inits.contains_key(&v.name));

        if scope == Scope::Closed {
            // Values read but not defined here become inputs (outer-scope values of a
            // subgraph, or the boundary of a fused group).
            let produced: HashSet<&str> = ir
                .nodes
                .iter()
                .flat_map(|n| n.outputs.iter().map(String::as_str))
                .collect();
            let mut extra: Vec<ValueInfo> = Vec::new();
            let mut have: HashSet<String> = ir.inputs.iter().map(|v| v.name.clone()).collect();
            // Node inputs and what the nodes' bodies read from outside, in first-use order.
            for i in ir.outer_references() {
                if produced.contains(i.as_str())
                    || ir.initializers.contains_key(&i)
                    || have.contains(&i)
                    || ir.outputs.iter().any(|o| o.name == i)
                {
                    continue;
                }
                have.insert(i.clone());
                let mut info = types.remove(&i).unwrap_or_else(|| ValueInfo {
                    name: i.clone(),
                    ..ValueInfo::default()
                });
                if let Some((dtype, shape)) = optional_types.remove(&i) {
                    info.dtype = dtype;
                    info.shape = shape;
                    ir.optional_inputs.insert(i.clone());
                }
                extra.push(info);
            }
            ir.inputs.extend(extra);
        }
        ir.value_info = types;

        Ok(ReadGraph { graph: ir, nodes })
    }
}

/// One node as a graph of its own: the node (with its bodies), its inputs and the outer values
/// its bodies read as graph inputs (constant initializers copied in), its outputs as graph
/// outputs. Opset imports are left to the caller.
///
/// # Safety
/// `node` must be a live `OrtNode` (valid for the current callback).
pub unsafe fn read_node_alone(api: &Api, node: *const OrtNode) -> Result<Graph, EpError> {
    let reader = Reader {
        api,
        scope: Scope::Closed,
    };
    let mut pending = Vec::new();
    let mut g = Graph::default();
    // SAFETY: live node; the handles reached from it are live for the callback.
    unsafe {
        let n = reader.read_node(node, &mut pending)?;
        let mut seen = HashSet::new();
        for vi in pending {
            let name = value_name(api, vi)?;
            if !seen.insert(name.clone()) || reader.maybe_read_initializer(vi, &mut g)? {
                continue;
            }
            let info = value_info(api, vi)?;
            if n.outputs.contains(&name) {
                g.outputs.push(info);
            } else {
                g.inputs.push(info);
            }
        }
        g.name = n.name.clone();
        g.nodes.push(n);
    }
    Ok(g)
}

impl Reader<'_> {
    /// Copies `vi` into the initializers when it is a constant initializer this read should
    /// hold. Returns whether it was one.
    unsafe fn maybe_read_initializer(
        &self,
        vi: *const OrtValueInfo,
        ir: &mut Graph,
    ) -> Result<bool, EpError> {
        let api = self.api;
        let o = api.ort;
        // SAFETY (whole body): live handle.
        unsafe {
            if !get_bool(api, "ValueInfo_IsConstantInitializer", |b| {
                (o.ValueInfo_IsConstantInitializer)(vi, b)
            })? {
                return Ok(false);
            }
            if self.scope == Scope::Nested
                && get_bool(api, "ValueInfo_IsFromOuterScope", |b| {
                    (o.ValueInfo_IsFromOuterScope)(vi, b)
                })?
            {
                return Ok(false);
            }
            let name = value_name(api, vi)?;
            if ir.initializers.contains_key(&name) {
                return Ok(true);
            }
            let mut value: *const OrtValue = ptr::null();
            api.check(
                (o.ValueInfo_GetInitializerValue)(vi, &mut value),
                "ValueInfo_GetInitializerValue",
            )?;
            if value.is_null() {
                return Ok(false);
            }
            match read_tensor(api, value) {
                Ok(t) => {
                    ir.initializers.insert(name, t);
                    Ok(true)
                }
                Err(e) => {
                    // An unreadable constant (a string tensor, say) is left as a graph input,
                    // so nodes reading it see a runtime value of its type.
                    log::debug!("initializer '{name}' kept as an input: {e}");
                    Ok(false)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use onnx_ir::{Attribute, DataType, Dim};

    use super::*;
    use crate::mock_ort::*;

    const F32: i32 = 1;
    const I64: i32 = 7;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn ort_element_types_map_to_onnx_types() {
        // ORT's enum matches ONNX's up to 23, then orders the newest types differently
        assert_eq!(dtype_from_ort(1), Some(DataType::Float));
        assert_eq!(dtype_from_ort(17), Some(DataType::Float8E4M3FN));
        assert_eq!(dtype_from_ort(22), Some(DataType::Int4));
        assert_eq!(dtype_from_ort(23), Some(DataType::Float4E2M1));
        assert_eq!(dtype_from_ort(24), Some(DataType::Uint2));
        assert_eq!(dtype_from_ort(25), Some(DataType::Int2));
        assert_eq!(dtype_from_ort(26), Some(DataType::Float8E8M0));
        assert_eq!(dtype_from_ort(27), None);
        assert_eq!(dtype_from_ort(0), None);
    }

    /// x[batch,4] + w -> a; Foo(a, <absent>, outer_v) -> y (every attribute kind);
    /// If(cond) with a then-branch reading w from the outer scope -> z.
    fn sample() -> *const MockGraph {
        let x = value("x", MockType::tensor(F32, &[-1, 4], &["batch"]));
        let cond = value("cond", MockType::tensor(9, &[], &[]));
        let w = constant("w", F32, &[4], f32_bytes(&[1.0, 2.0, 3.0, 4.0]), false);
        let a = value("a", MockType::tensor(F32, &[-1, 4], &["batch"]));
        let outer_v = value("outer_v", MockType::tensor(I64, &[-1], &[]));
        let y = value("y", MockType::tensor(F32, &[-1, -1], &["batch", ""]));
        let s = value("s", MockType::tensor(F32, &[], &[]));
        let z = value("z", MockType::tensor(F32, &[4], &[]));

        let w_outer = constant("w", F32, &[4], f32_bytes(&[1.0, 2.0, 3.0, 4.0]), true);
        let z_inner = value("z_inner", MockType::tensor(F32, &[4], &[]));
        let then_branch: *const MockGraph = Box::leak(Box::new(MockGraph {
            name: c"then".into(),
            opsets: vec![(c"".into(), 17)],
            inputs: vec![],
            outputs: vec![z_inner],
            initializers: vec![],
            nodes: vec![mock_node(
                "inner",
                "Identity",
                "",
                0,
                vec![w_outer],
                vec![z_inner],
                vec![],
                vec![],
            )],
        }));

        let attrs = vec![
            mock_attr("i", MockAttrValue::Int(-3)),
            mock_attr("f", MockAttrValue::Float(0.5)),
            mock_attr("is", MockAttrValue::Ints(vec![1, -2, 3])),
            mock_attr("fs", MockAttrValue::Floats(vec![])),
            mock_attr("s", MockAttrValue::Str(b"NOTSET".to_vec())),
            mock_attr(
                "ss",
                MockAttrValue::Strs(vec![b"a".to_vec(), b"".to_vec(), b"ccc".to_vec()]),
            ),
            mock_attr(
                "t",
                MockAttrValue::Tensor(MockValue {
                    ty: MockType::tensor(I64, &[2], &[]),
                    bytes: [5i64, 6].iter().flat_map(|v| v.to_le_bytes()).collect(),
                }),
            ),
            mock_attr(
                "st",
                MockAttrValue::Tensor(MockValue {
                    ty: MockType::tensor(8, &[3], &[]),
                    bytes: onnx_ir::TensorData::from_strings(vec![3], &["a", "", "日本"])
                        .unwrap()
                        .bytes
                        .to_vec(),
                }),
            ),
            mock_attr("sp", MockAttrValue::Sparse),
        ];
        let nodes = vec![
            mock_node("", "Add", "", 7, vec![x, w], vec![a], vec![], vec![]),
            mock_node(
                "foo",
                "Foo",
                "com.example",
                8,
                vec![a, ptr::null(), outer_v],
                vec![y, s],
                attrs,
                vec![],
            ),
            mock_node(
                "if",
                "If",
                "",
                9,
                vec![cond],
                vec![z],
                vec![],
                vec![("then_branch", then_branch)],
            ),
        ];
        Box::leak(Box::new(MockGraph {
            name: c"main".into(),
            opsets: vec![(c"ai.onnx".into(), 17), (c"com.example".into(), 1)],
            inputs: vec![x, cond],
            outputs: vec![y, z],
            initializers: vec![w],
            nodes,
        }))
    }

    #[test]
    fn reads_nodes_attributes_types_and_constants() {
        let api = mock_api(23);
        let read = unsafe { read_graph(&api, sample() as *const OrtGraph, Scope::Closed) }.unwrap();
        let g = &read.graph;
        assert_eq!(read.nodes.len(), 3);
        assert_eq!(g.name, "main");
        assert_eq!(g.opset(""), Some(17));
        assert_eq!(g.opset("com.example"), Some(1));

        // Interface: outer_v (read, never defined) became an input in a closed read.
        let names: Vec<&str> = g.inputs.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["x", "cond", "outer_v"]);
        assert_eq!(
            g.inputs[0].shape,
            Some(vec![Dim::Symbolic("batch".into()), Dim::Fixed(4)])
        );
        assert_eq!(g.inputs[2].dtype, Some(DataType::Int64));
        assert_eq!(
            g.outputs[0].shape,
            Some(vec![Dim::Symbolic("batch".into()), Dim::Unknown])
        );

        // Constant initializer bytes are copied.
        let w = &g.initializers["w"];
        assert_eq!(w.dims, vec![4]);
        assert_eq!(w.to_f64_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);

        // Nodes: unnamed nodes get op_id names; absent optional inputs are "".
        assert_eq!(g.nodes[0].name, "Add_7");
        assert_eq!(g.nodes[1].domain, "com.example");
        assert_eq!(g.nodes[1].inputs, ["a", "", "outer_v"]);
        assert_eq!(g.nodes[1].outputs, ["y", "s"]);

        let at = &g.nodes[1].attributes;
        assert_eq!(at["i"], Attribute::Int(-3));
        assert_eq!(at["f"], Attribute::Float(0.5));
        assert_eq!(at["is"], Attribute::Ints(vec![1, -2, 3]));
        assert_eq!(at["fs"], Attribute::Floats(vec![]));
        assert_eq!(at["s"], Attribute::String(b"NOTSET".to_vec()));
        assert_eq!(
            at["ss"],
            Attribute::Strings(vec![b"a".to_vec(), b"".to_vec(), b"ccc".to_vec()])
        );
        match &at["t"] {
            Attribute::Tensor(t) => assert_eq!(t.to_i64_vec().unwrap(), vec![5, 6]),
            other => panic!("{other:?}"),
        }
        // A string tensor attribute is read through ORT's string API.
        match &at["st"] {
            Attribute::Tensor(t) => {
                assert_eq!(t.dtype, DataType::String);
                assert_eq!(t.strings().unwrap(), [&b"a"[..], b"", "日本".as_bytes()]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(at["sp"], Attribute::Unsupported(_)));

        // Value infos of intermediates; a rank-0 type is "rank unknown" before ORT 1.24.
        assert_eq!(g.value_info["a"].dtype, Some(DataType::Float));
        assert_eq!(g.value_info["s"].shape, None);
        assert_eq!(g.value_info["s"].dtype, Some(DataType::Float));

        // The subgraph keeps referring to the outer w by name.
        match &g.nodes[2].attributes["then_branch"] {
            Attribute::Graph(sub) => {
                assert_eq!(sub.nodes[0].op_type, "Identity");
                assert_eq!(sub.nodes[0].inputs, ["w"]);
                assert!(sub.inputs.is_empty());
                assert!(sub.initializers.is_empty());
                assert_eq!(sub.outputs[0].name, "z_inner");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(g.topological_order().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn closed_read_copies_outer_constants() {
        let api = mock_api(23);
        let g = sample();
        // Read the then-branch on its own, as GetCapability does for nested graphs.
        let if_node = unsafe { &*(&*g).nodes[2] };
        let then = if_node.subgraphs[0].1;
        let read = unsafe { read_graph(&api, then as *const OrtGraph, Scope::Closed) }.unwrap();
        assert!(read.graph.inputs.is_empty());
        assert_eq!(read.graph.initializers["w"].dims, vec![4]);
    }

    #[test]
    fn strings_split() {
        assert!(split_strings(b"").is_empty());
        assert_eq!(split_strings(b"\0"), vec![b"".to_vec()]);
        assert_eq!(
            split_strings(b"ab\0c\0"),
            vec![b"ab".to_vec(), b"c".to_vec()]
        );
    }
}
