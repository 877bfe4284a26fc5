//! A fake ORT graph API for unit tests: mock graph objects behind a real `OrtApi` table whose
//! graph accessors are implemented here, so the graph reader runs its real FFI code paths.
//!
//! Handles are pointers to the mock structs, cast to ORT's opaque types. Members of the table
//! that the tests don't use abort when called.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CString, c_char, c_void};
use std::ptr;

use ort_sys::{
    ONNXTensorElementDataType, ONNXType, OrtApi, OrtErrorCode, OrtGraph, OrtNode, OrtOpAttr,
    OrtOpAttrType, OrtStatus, OrtStatusPtr, OrtTensorTypeAndShapeInfo, OrtTypeInfo, OrtValue,
    OrtValueInfo,
};

use crate::abi::OrtEpApi;
use crate::api::Api;

/// Type of a value (doubles as `OrtTypeInfo` and `OrtTensorTypeAndShapeInfo`).
pub struct MockType {
    pub tensor: bool,
    pub elem: i32,
    pub dims: Vec<i64>,
    pub syms: Vec<CString>,
}

impl MockType {
    /// A tensor type; `sym` names a dim whose size is -1.
    pub fn tensor(elem: i32, dims: &[i64], syms: &[&str]) -> Self {
        MockType {
            tensor: true,
            elem,
            dims: dims.to_vec(),
            syms: (0..dims.len())
                .map(|i| CString::new(*syms.get(i).unwrap_or(&"")).unwrap())
                .collect(),
        }
    }
}

/// A tensor value; a string tensor (element type 8) holds its elements in `bytes` in the IR's
/// length-prefixed form (`onnx_ir::TensorData::from_strings`).
pub struct MockValue {
    pub ty: MockType,
    pub bytes: Vec<u8>,
}

/// A value info.
pub struct MockValueInfo {
    pub name: CString,
    pub ty: MockType,
    pub initializer: Option<MockValue>,
    pub outer: bool,
}

/// An attribute value.
pub enum MockAttrValue {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Str(Vec<u8>),
    Strs(Vec<Vec<u8>>),
    Tensor(MockValue),
    Sparse,
}

/// An attribute.
pub struct MockAttr {
    pub name: CString,
    pub value: MockAttrValue,
}

/// A node.
pub struct MockNode {
    pub name: CString,
    pub op: CString,
    pub domain: CString,
    pub id: usize,
    pub inputs: Vec<*const MockValueInfo>,
    pub outputs: Vec<*const MockValueInfo>,
    pub attrs: Vec<MockAttr>,
    pub subgraphs: Vec<(CString, *const MockGraph)>,
}

/// A graph.
pub struct MockGraph {
    pub name: CString,
    pub opsets: Vec<(CString, i64)>,
    pub inputs: Vec<*const MockValueInfo>,
    pub outputs: Vec<*const MockValueInfo>,
    pub initializers: Vec<*const MockValueInfo>,
    pub nodes: Vec<*const MockNode>,
}

fn ok() -> OrtStatusPtr {
    OrtStatusPtr(ptr::null_mut())
}

fn err(msg: &str) -> OrtStatusPtr {
    OrtStatusPtr(Box::into_raw(Box::new(CString::new(msg).unwrap())) as *mut OrtStatus)
}

unsafe extern "system" fn create_status(_c: OrtErrorCode, msg: *const c_char) -> OrtStatusPtr {
    let s = unsafe { std::ffi::CStr::from_ptr(msg) }.to_owned();
    OrtStatusPtr(Box::into_raw(Box::new(s)) as *mut OrtStatus)
}
unsafe extern "system" fn get_error_message(st: *const OrtStatus) -> *const c_char {
    unsafe { &*(st as *const CString) }.as_ptr()
}
unsafe extern "system" fn release_status(st: *mut OrtStatus) {
    drop(unsafe { Box::from_raw(st as *mut CString) });
}

unsafe fn vi<'a>(p: *const OrtValueInfo) -> &'a MockValueInfo {
    unsafe { &*(p as *const MockValueInfo) }
}
unsafe fn node<'a>(p: *const OrtNode) -> &'a MockNode {
    unsafe { &*(p as *const MockNode) }
}
unsafe fn graph<'a>(p: *const OrtGraph) -> &'a MockGraph {
    unsafe { &*(p as *const MockGraph) }
}
unsafe fn ty<'a>(p: *const OrtTensorTypeAndShapeInfo) -> &'a MockType {
    unsafe { &*(p as *const MockType) }
}

unsafe fn fill<T>(src: &[*const T], out: *mut *const c_void, n: usize) -> OrtStatusPtr {
    if n < src.len() {
        return err("array too small");
    }
    for (i, p) in src.iter().enumerate() {
        unsafe { *out.add(i) = *p as *const c_void };
    }
    ok()
}

unsafe extern "system" fn value_info_name(
    v: *const OrtValueInfo,
    out: *mut *const c_char,
) -> OrtStatusPtr {
    unsafe { *out = vi(v).name.as_ptr() };
    ok()
}
unsafe extern "system" fn value_info_type(
    v: *const OrtValueInfo,
    out: *mut *const OrtTypeInfo,
) -> OrtStatusPtr {
    unsafe { *out = &vi(v).ty as *const MockType as *const OrtTypeInfo };
    ok()
}
unsafe extern "system" fn onnx_type(t: *const OrtTypeInfo, out: *mut ONNXType) -> OrtStatusPtr {
    let t = unsafe { &*(t as *const MockType) };
    unsafe {
        *out = if t.tensor {
            ONNXType::ONNX_TYPE_TENSOR
        } else {
            ONNXType::ONNX_TYPE_SEQUENCE
        }
    };
    ok()
}
unsafe extern "system" fn cast_tensor(
    t: *const OrtTypeInfo,
    out: *mut *const OrtTensorTypeAndShapeInfo,
) -> OrtStatusPtr {
    unsafe { *out = t as *const OrtTensorTypeAndShapeInfo };
    ok()
}
unsafe extern "system" fn elem_type(
    t: *const OrtTensorTypeAndShapeInfo,
    out: *mut ONNXTensorElementDataType,
) -> OrtStatusPtr {
    unsafe { *(out as *mut i32) = ty(t).elem };
    ok()
}
unsafe extern "system" fn dims_count(
    t: *const OrtTensorTypeAndShapeInfo,
    out: *mut usize,
) -> OrtStatusPtr {
    unsafe { *out = ty(t).dims.len() };
    ok()
}
unsafe extern "system" fn dims(
    t: *const OrtTensorTypeAndShapeInfo,
    out: *mut i64,
    n: usize,
) -> OrtStatusPtr {
    let d = unsafe { &ty(t).dims };
    unsafe { ptr::copy_nonoverlapping(d.as_ptr(), out, n.min(d.len())) };
    ok()
}
unsafe extern "system" fn sym_dims(
    t: *const OrtTensorTypeAndShapeInfo,
    out: *mut *const c_char,
    n: usize,
) -> OrtStatusPtr {
    for (i, s) in unsafe { &ty(t).syms }.iter().enumerate().take(n) {
        unsafe { *out.add(i) = s.as_ptr() };
    }
    ok()
}
unsafe extern "system" fn tensor_type_and_shape(
    v: *const OrtValue,
    out: *mut *mut OrtTensorTypeAndShapeInfo,
) -> OrtStatusPtr {
    let v = unsafe { &*(v as *const MockValue) };
    unsafe { *out = &v.ty as *const MockType as *mut OrtTensorTypeAndShapeInfo };
    ok()
}
unsafe extern "system" fn release_tensor_info(_t: *mut OrtTensorTypeAndShapeInfo) {}
unsafe extern "system" fn tensor_size(v: *const OrtValue, out: *mut usize) -> OrtStatusPtr {
    unsafe { *out = (*(v as *const MockValue)).bytes.len() };
    ok()
}
unsafe extern "system" fn tensor_data(v: *const OrtValue, out: *mut *const c_void) -> OrtStatusPtr {
    unsafe { *out = (*(v as *const MockValue)).bytes.as_ptr() as *const c_void };
    ok()
}
unsafe extern "system" fn release_value(_v: *mut OrtValue) {}
unsafe fn mock_strings<'a>(v: *const OrtValue) -> Vec<&'a [u8]> {
    onnx_ir::decode_strings(unsafe { &(*(v as *const MockValue)).bytes }).unwrap_or_default()
}
unsafe extern "system" fn string_data_length(v: *const OrtValue, out: *mut usize) -> OrtStatusPtr {
    unsafe { *out = mock_strings(v).iter().map(|s| s.len()).sum() };
    ok()
}
unsafe extern "system" fn string_content(
    v: *const OrtValue,
    s: *mut c_void,
    s_len: usize,
    offsets: *mut usize,
    offsets_len: usize,
) -> OrtStatusPtr {
    let elements = unsafe { mock_strings(v) };
    if offsets_len != elements.len() || s_len < elements.iter().map(|e| e.len()).sum() {
        return err("buffers of the wrong size");
    }
    let mut at = 0;
    for (i, e) in elements.iter().enumerate() {
        unsafe {
            *offsets.add(i) = at;
            ptr::copy_nonoverlapping(e.as_ptr(), (s as *mut u8).add(at), e.len());
        }
        at += e.len();
    }
    ok()
}

unsafe extern "system" fn is_const_init(v: *const OrtValueInfo, out: *mut bool) -> OrtStatusPtr {
    unsafe { *out = vi(v).initializer.is_some() };
    ok()
}
unsafe extern "system" fn is_outer(v: *const OrtValueInfo, out: *mut bool) -> OrtStatusPtr {
    unsafe { *out = vi(v).outer };
    ok()
}
unsafe extern "system" fn init_value(
    v: *const OrtValueInfo,
    out: *mut *const OrtValue,
) -> OrtStatusPtr {
    unsafe {
        *out = vi(v)
            .initializer
            .as_ref()
            .map_or(ptr::null(), |t| t as *const MockValue as *const OrtValue)
    };
    ok()
}

unsafe extern "system" fn graph_name(g: *const OrtGraph, out: *mut *const c_char) -> OrtStatusPtr {
    unsafe { *out = graph(g).name.as_ptr() };
    ok()
}
unsafe extern "system" fn num_opsets(g: *const OrtGraph, out: *mut usize) -> OrtStatusPtr {
    unsafe { *out = graph(g).opsets.len() };
    ok()
}
unsafe extern "system" fn opsets(
    g: *const OrtGraph,
    d: *mut *const c_char,
    v: *mut i64,
    n: usize,
) -> OrtStatusPtr {
    for (i, (name, ver)) in unsafe { &graph(g).opsets }.iter().enumerate().take(n) {
        unsafe {
            *d.add(i) = name.as_ptr();
            *v.add(i) = *ver;
        }
    }
    ok()
}

macro_rules! list_accessors {
    ($count:ident, $get:ident, $h:ty, $field:ident, $item:ty, $cast:ident) => {
        unsafe extern "system" fn $count(h: *const $h, out: *mut usize) -> OrtStatusPtr {
            unsafe { *out = $cast(h).$field.len() };
            ok()
        }
        unsafe extern "system" fn $get(
            h: *const $h,
            out: *mut *const $item,
            n: usize,
        ) -> OrtStatusPtr {
            unsafe { fill(&$cast(h).$field, out as *mut *const c_void, n) }
        }
    };
}

list_accessors!(
    g_num_inputs,
    g_inputs,
    OrtGraph,
    inputs,
    OrtValueInfo,
    graph
);
list_accessors!(
    g_num_outputs,
    g_outputs,
    OrtGraph,
    outputs,
    OrtValueInfo,
    graph
);
list_accessors!(
    g_num_inits,
    g_inits,
    OrtGraph,
    initializers,
    OrtValueInfo,
    graph
);
list_accessors!(g_num_nodes, g_nodes, OrtGraph, nodes, OrtNode, graph);
list_accessors!(n_num_inputs, n_inputs, OrtNode, inputs, OrtValueInfo, node);
list_accessors!(
    n_num_outputs,
    n_outputs,
    OrtNode,
    outputs,
    OrtValueInfo,
    node
);

unsafe extern "system" fn node_name(n: *const OrtNode, out: *mut *const c_char) -> OrtStatusPtr {
    unsafe { *out = node(n).name.as_ptr() };
    ok()
}
unsafe extern "system" fn node_op(n: *const OrtNode, out: *mut *const c_char) -> OrtStatusPtr {
    unsafe { *out = node(n).op.as_ptr() };
    ok()
}
unsafe extern "system" fn node_domain(n: *const OrtNode, out: *mut *const c_char) -> OrtStatusPtr {
    unsafe { *out = node(n).domain.as_ptr() };
    ok()
}
unsafe extern "system" fn node_id(n: *const OrtNode, out: *mut usize) -> OrtStatusPtr {
    unsafe { *out = node(n).id };
    ok()
}
unsafe extern "system" fn node_num_attrs(n: *const OrtNode, out: *mut usize) -> OrtStatusPtr {
    unsafe { *out = node(n).attrs.len() };
    ok()
}
unsafe extern "system" fn node_attrs(
    n: *const OrtNode,
    out: *mut *const OrtOpAttr,
    cap: usize,
) -> OrtStatusPtr {
    let attrs = unsafe { &node(n).attrs };
    if cap < attrs.len() {
        return err("array too small");
    }
    for (i, a) in attrs.iter().enumerate() {
        unsafe { *out.add(i) = a as *const MockAttr as *const OrtOpAttr };
    }
    ok()
}
unsafe extern "system" fn node_num_subgraphs(n: *const OrtNode, out: *mut usize) -> OrtStatusPtr {
    unsafe { *out = node(n).subgraphs.len() };
    ok()
}
unsafe extern "system" fn node_num_implicit_inputs(
    _n: *const OrtNode,
    out: *mut usize,
) -> OrtStatusPtr {
    unsafe { *out = 0 };
    ok()
}
unsafe extern "system" fn node_implicit_inputs(
    _n: *const OrtNode,
    _out: *mut *const OrtValueInfo,
    _cap: usize,
) -> OrtStatusPtr {
    ok()
}
unsafe extern "system" fn node_subgraphs(
    n: *const OrtNode,
    out: *mut *const OrtGraph,
    cap: usize,
    names: *mut *const c_char,
) -> OrtStatusPtr {
    for (i, (name, g)) in unsafe { &node(n).subgraphs }.iter().enumerate().take(cap) {
        unsafe {
            *out.add(i) = *g as *const OrtGraph;
            if !names.is_null() {
                *names.add(i) = name.as_ptr();
            }
        }
    }
    ok()
}

unsafe fn attr<'a>(a: *const OrtOpAttr) -> &'a MockAttr {
    unsafe { &*(a as *const MockAttr) }
}
unsafe extern "system" fn attr_name(a: *const OrtOpAttr, out: *mut *const c_char) -> OrtStatusPtr {
    unsafe { *out = attr(a).name.as_ptr() };
    ok()
}
unsafe extern "system" fn attr_type(a: *const OrtOpAttr, out: *mut OrtOpAttrType) -> OrtStatusPtr {
    use OrtOpAttrType::*;
    let t = match unsafe { &attr(a).value } {
        MockAttrValue::Int(_) => ORT_OP_ATTR_INT,
        MockAttrValue::Float(_) => ORT_OP_ATTR_FLOAT,
        MockAttrValue::Ints(_) => ORT_OP_ATTR_INTS,
        MockAttrValue::Floats(_) => ORT_OP_ATTR_FLOATS,
        MockAttrValue::Str(_) => ORT_OP_ATTR_STRING,
        MockAttrValue::Strs(_) => ORT_OP_ATTR_STRINGS,
        MockAttrValue::Tensor(_) => ORT_OP_ATTR_TENSOR,
        MockAttrValue::Sparse => return err("Unexpected attribute type."),
    };
    unsafe { *out = t };
    ok()
}

/// Mimics ORT's `ReadOpAttr`: writes when `len` suffices, always reports the size needed.
unsafe extern "system" fn read_op_attr(
    a: *const OrtOpAttr,
    _t: OrtOpAttrType,
    data: *mut c_void,
    len: usize,
    out: *mut usize,
) -> OrtStatusPtr {
    let bytes: Vec<u8> = match unsafe { &attr(a).value } {
        MockAttrValue::Int(v) => v.to_le_bytes().to_vec(),
        MockAttrValue::Float(v) => v.to_le_bytes().to_vec(),
        MockAttrValue::Ints(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        MockAttrValue::Floats(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        MockAttrValue::Str(s) => s.iter().copied().chain([0]).collect(),
        MockAttrValue::Strs(ss) => ss
            .iter()
            .flat_map(|s| s.iter().copied().chain([0]))
            .collect(),
        _ => return err("unreadable"),
    };
    unsafe { *out = bytes.len() };
    if len < bytes.len() {
        return err("Size of data not large enough");
    }
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), data as *mut u8, bytes.len()) };
    ok()
}
unsafe extern "system" fn attr_tensor(
    a: *const OrtOpAttr,
    out: *mut *mut OrtValue,
) -> OrtStatusPtr {
    match unsafe { &attr(a).value } {
        MockAttrValue::Tensor(t) => {
            unsafe { *out = t as *const MockValue as *mut OrtValue };
            ok()
        }
        _ => err("not a tensor"),
    }
}

unsafe extern "system" fn missing() {
    eprintln!("mock OrtApi: an unmocked member was called");
    std::process::abort();
}

/// A leaked `Api` whose graph accessors read the mock structs.
pub fn mock_api(host_minor: u32) -> Api {
    let words = size_of::<OrtApi>() / size_of::<usize>();
    let table: Vec<usize> = vec![missing as *const () as usize; words];
    // SAFETY: OrtApi is a struct of `words` pointer-sized function pointers; every slot holds
    // a valid function address (calling an unmocked one aborts).
    let mut o: OrtApi = unsafe { ptr::read(table.as_ptr() as *const OrtApi) };
    o.CreateStatus = create_status;
    o.GetErrorMessage = get_error_message;
    o.ReleaseStatus = release_status;
    o.GetValueInfoName = value_info_name;
    o.GetValueInfoTypeInfo = value_info_type;
    o.GetOnnxTypeFromTypeInfo = onnx_type;
    o.CastTypeInfoToTensorInfo = cast_tensor;
    o.GetTensorElementType = elem_type;
    o.GetDimensionsCount = dims_count;
    o.GetDimensions = dims;
    o.GetSymbolicDimensions = sym_dims;
    o.GetTensorTypeAndShape = tensor_type_and_shape;
    o.ReleaseTensorTypeAndShapeInfo = release_tensor_info;
    o.GetTensorSizeInBytes = tensor_size;
    o.GetTensorData = tensor_data;
    o.GetStringTensorDataLength = string_data_length;
    o.GetStringTensorContent = string_content;
    o.ReleaseValue = release_value;
    o.ValueInfo_IsConstantInitializer = is_const_init;
    o.ValueInfo_IsFromOuterScope = is_outer;
    o.ValueInfo_GetInitializerValue = init_value;
    o.Graph_GetName = graph_name;
    o.Graph_GetNumOperatorSets = num_opsets;
    o.Graph_GetOperatorSets = opsets;
    o.Graph_GetNumInputs = g_num_inputs;
    o.Graph_GetInputs = g_inputs;
    o.Graph_GetNumOutputs = g_num_outputs;
    o.Graph_GetOutputs = g_outputs;
    o.Graph_GetNumInitializers = g_num_inits;
    o.Graph_GetInitializers = g_inits;
    o.Graph_GetNumNodes = g_num_nodes;
    o.Graph_GetNodes = g_nodes;
    o.Node_GetName = node_name;
    o.Node_GetOperatorType = node_op;
    o.Node_GetDomain = node_domain;
    o.Node_GetId = node_id;
    o.Node_GetNumInputs = n_num_inputs;
    o.Node_GetInputs = n_inputs;
    o.Node_GetNumOutputs = n_num_outputs;
    o.Node_GetOutputs = n_outputs;
    o.Node_GetNumAttributes = node_num_attrs;
    o.Node_GetAttributes = node_attrs;
    o.Node_GetNumSubgraphs = node_num_subgraphs;
    o.Node_GetSubgraphs = node_subgraphs;
    o.Node_GetNumImplicitInputs = node_num_implicit_inputs;
    o.Node_GetImplicitInputs = node_implicit_inputs;
    o.OpAttr_GetName = attr_name;
    o.OpAttr_GetType = attr_type;
    o.ReadOpAttr = read_op_attr;
    o.OpAttr_GetTensorAttributeAsOrtValue = attr_tensor;

    let ep_words = size_of::<OrtEpApi>() / size_of::<usize>();
    let ep_table: Vec<usize> = vec![missing as *const () as usize; ep_words];
    // SAFETY: as above, for the EP table.
    let ep: OrtEpApi = unsafe { ptr::read(ep_table.as_ptr() as *const OrtEpApi) };
    Api {
        ort: Box::leak(Box::new(o)),
        ep: Box::leak(Box::new(ep)),
        host_minor,
        host_patch: 0,
    }
}

/// Leaks a value info.
pub fn value(name: &str, ty: MockType) -> *const MockValueInfo {
    Box::leak(Box::new(MockValueInfo {
        name: CString::new(name).unwrap(),
        ty,
        initializer: None,
        outer: false,
    }))
}

/// Leaks a constant-initializer value info.
pub fn constant(
    name: &str,
    elem: i32,
    dims: &[i64],
    bytes: Vec<u8>,
    outer: bool,
) -> *const MockValueInfo {
    Box::leak(Box::new(MockValueInfo {
        name: CString::new(name).unwrap(),
        ty: MockType::tensor(elem, dims, &[]),
        initializer: Some(MockValue {
            ty: MockType::tensor(elem, dims, &[]),
            bytes,
        }),
        outer,
    }))
}

/// Leaks a node.
#[allow(clippy::too_many_arguments)]
pub fn mock_node(
    name: &str,
    op: &str,
    domain: &str,
    id: usize,
    inputs: Vec<*const MockValueInfo>,
    outputs: Vec<*const MockValueInfo>,
    attrs: Vec<MockAttr>,
    subgraphs: Vec<(&str, *const MockGraph)>,
) -> *const MockNode {
    Box::leak(Box::new(MockNode {
        name: CString::new(name).unwrap(),
        op: CString::new(op).unwrap(),
        domain: CString::new(domain).unwrap(),
        id,
        inputs,
        outputs,
        attrs,
        subgraphs: subgraphs
            .into_iter()
            .map(|(n, g)| (CString::new(n).unwrap(), g))
            .collect(),
    }))
}

/// An attribute.
pub fn mock_attr(name: &str, value: MockAttrValue) -> MockAttr {
    MockAttr {
        name: CString::new(name).unwrap(),
        value,
    }
}
