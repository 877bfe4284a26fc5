//! Reading ONNX protobuf files into the IR: a `ModelProto` (`.onnx`) into a [`Graph`], a
//! `TensorProto` (`.pb`, as ONNX's test data sets store inputs and outputs) into a
//! [`TensorData`].
//!
//! A small decoder of the protobuf wire format for the fields the IR models; everything else
//! is skipped. The graph comes out as the EP's reader builds it from ORT's graph: `ai.onnx`
//! imported as the default domain, initializers as constants (an initializer that is also a
//! graph input stays a constant only below IR version 4, where ONNX lists every initializer
//! among the inputs; from IR 4 on such an input may be fed, so it stays an input), value
//! infos for the intermediate values only, unnamed nodes named `<op_type>_<index>`.
//! Tensors kept in external data files and string tensors are refused with an error.

use std::collections::HashMap;

use crate::{Attribute, DataType, Dim, Graph, Node, TensorData, ValueInfo};

/// Subgraphs nested deeper than this are refused (a hostile file can't exhaust the stack).
const MAX_DEPTH: usize = 64;

/// A malformed or unsupported protobuf file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtoError {}

type Result<T> = std::result::Result<T, ProtoError>;

fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(ProtoError(msg.into()))
}

/// One field's value on the wire.
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one message, in order.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Fields { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return err("truncated varint");
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        err("varint longer than 10 bytes")
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| ProtoError("truncated field".into()))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next `(field number, value)`, `None` at the end of the message.
    fn next_field(&mut self) -> Result<Option<(u64, Wire<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(
                self.take(8)?.try_into().expect("8 bytes"),
            )),
            2 => {
                let n = usize::try_from(self.varint()?)
                    .map_err(|_| ProtoError("length too large".into()))?;
                Wire::Bytes(self.take(n)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().expect("4 bytes"),
            )),
            w => return err(format!("unsupported wire type {w}")),
        };
        Ok(Some((key >> 3, wire)))
    }
}

impl<'a> Wire<'a> {
    fn bytes(self, what: &str) -> Result<&'a [u8]> {
        match self {
            Wire::Bytes(b) => Ok(b),
            _ => err(format!("{what}: expected a length-delimited field")),
        }
    }

    fn string(self, what: &str) -> Result<String> {
        Ok(String::from_utf8_lossy(self.bytes(what)?).into_owned())
    }

    fn int(self, what: &str) -> Result<i64> {
        match self {
            Wire::Varint(v) => Ok(v as i64),
            _ => err(format!("{what}: expected a varint")),
        }
    }

    /// A repeated varint field, packed or not: appends to `out`.
    fn ints_into(self, out: &mut Vec<i64>, what: &str) -> Result<()> {
        match self {
            Wire::Varint(v) => out.push(v as i64),
            Wire::Bytes(b) => {
                let mut f = Fields::new(b);
                while f.pos < b.len() {
                    out.push(f.varint()? as i64);
                }
            }
            _ => return err(format!("{what}: expected varints")),
        }
        Ok(())
    }

    /// A repeated 32-bit fixed field (float), packed or not: appends the raw words to `out`.
    fn fixed32_into(self, out: &mut Vec<u32>, what: &str) -> Result<()> {
        match self {
            Wire::Fixed32(v) => out.push(v),
            Wire::Bytes(b) if b.len() % 4 == 0 => out.extend(
                b.chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))),
            ),
            _ => return err(format!("{what}: expected 32-bit values")),
        }
        Ok(())
    }

    /// A repeated 64-bit fixed field (double), packed or not: appends the raw words to `out`.
    fn fixed64_into(self, out: &mut Vec<u64>, what: &str) -> Result<()> {
        match self {
            Wire::Fixed64(v) => out.push(v),
            Wire::Bytes(b) if b.len() % 8 == 0 => out.extend(
                b.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
            ),
            _ => return err(format!("{what}: expected 64-bit values")),
        }
        Ok(())
    }
}

/// Reads a serialized `ModelProto` (the bytes of a `.onnx` file) into its main graph, with the
/// model's opset imports.
pub fn read_model(bytes: &[u8]) -> Result<Graph> {
    let mut f = Fields::new(bytes);
    let mut ir_version = 0;
    let mut opsets = HashMap::new();
    let mut graph = None;
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => ir_version = w.int("ir_version")?,
            7 => graph = Some(w.bytes("graph")?),
            8 => {
                let (domain, version) = read_opset(w.bytes("opset_import")?)?;
                opsets.insert(domain, version);
            }
            _ => {}
        }
    }
    let Some(graph) = graph else {
        return err("the model has no graph");
    };
    let mut g = read_graph(graph, ir_version, 0)?;
    g.opset_imports = opsets;
    Ok(g)
}

fn read_opset(b: &[u8]) -> Result<(String, i64)> {
    let mut f = Fields::new(b);
    let (mut domain, mut version) = (String::new(), 0);
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => domain = w.string("opset domain")?,
            2 => version = w.int("opset version")?,
            _ => {}
        }
    }
    if domain == "ai.onnx" {
        domain.clear();
    }
    Ok((domain, version))
}

fn read_graph(b: &[u8], ir_version: i64, depth: usize) -> Result<Graph> {
    if depth > MAX_DEPTH {
        return err(format!("subgraphs nested deeper than {MAX_DEPTH}"));
    }
    let mut f = Fields::new(b);
    let mut g = Graph::default();
    let mut infos = Vec::new();
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => g
                .nodes
                .push(read_node(w.bytes("node")?, ir_version, depth)?),
            2 => g.name = w.string("graph name")?,
            5 => {
                let (name, t) = read_tensor(w.bytes("initializer")?)?;
                g.initializers.insert(name, t);
            }
            11 => g.inputs.push(read_value_info(w.bytes("graph input")?)?),
            12 => g.outputs.push(read_value_info(w.bytes("graph output")?)?),
            13 => infos.push(read_value_info(w.bytes("value_info")?)?),
            15 => return err("sparse initializers are not read"),
            _ => {}
        }
    }
    // An initializer listed among the inputs: a constant below IR 4, an input that may be
    // fed from IR 4 on.
    if ir_version >= 4 {
        let inputs = &g.inputs;
        g.initializers
            .retain(|name, _| !inputs.iter().any(|v| &v.name == name));
    } else {
        let inits = &g.initializers;
        g.inputs.retain(|v| !inits.contains_key(&v.name));
    }
    for v in infos {
        let interface = g.inputs.iter().chain(&g.outputs).any(|i| i.name == v.name);
        if !interface && !g.initializers.contains_key(&v.name) {
            g.value_info.insert(v.name.clone(), v);
        }
    }
    for (i, node) in g.nodes.iter_mut().enumerate() {
        if node.name.is_empty() {
            node.name = format!("{}_{i}", node.op_type);
        }
    }
    Ok(g)
}

fn read_node(b: &[u8], ir_version: i64, depth: usize) -> Result<Node> {
    let mut f = Fields::new(b);
    let mut node = Node::default();
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => node.inputs.push(w.string("node input")?),
            2 => node.outputs.push(w.string("node output")?),
            3 => node.name = w.string("node name")?,
            4 => node.op_type = w.string("op_type")?,
            5 => {
                let (name, a) = read_attribute(w.bytes("attribute")?, ir_version, depth)?;
                node.attributes.insert(name, a);
            }
            7 => node.domain = w.string("node domain")?,
            _ => {}
        }
    }
    Ok(node)
}

fn read_attribute(b: &[u8], ir_version: i64, depth: usize) -> Result<(String, Attribute)> {
    let mut f = Fields::new(b);
    let mut name = String::new();
    let mut kind = 0;
    let (mut fl, mut int, mut s, mut t, mut g) = (None, None, None, None, None);
    let (mut floats, mut ints, mut strings) = (Vec::new(), Vec::new(), Vec::new());
    let (mut tensors, mut graphs) = (Vec::new(), Vec::new());
    let mut other = false;
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => name = w.string("attribute name")?,
            2 => {
                let mut v = Vec::new();
                w.fixed32_into(&mut v, "attribute f")?;
                fl = v.first().map(|&b| f32::from_bits(b));
            }
            3 => int = Some(w.int("attribute i")?),
            4 => s = Some(w.bytes("attribute s")?.to_vec()),
            5 => t = Some(read_tensor(w.bytes("attribute t")?)?.1),
            6 => g = Some(read_graph(w.bytes("attribute g")?, ir_version, depth + 1)?),
            7 => {
                let mut v = Vec::new();
                w.fixed32_into(&mut v, "attribute floats")?;
                floats.extend(v.into_iter().map(f32::from_bits));
            }
            8 => w.ints_into(&mut ints, "attribute ints")?,
            9 => strings.push(w.bytes("attribute strings")?.to_vec()),
            10 => tensors.push(read_tensor(w.bytes("attribute tensors")?)?.1),
            11 => graphs.push(read_graph(
                w.bytes("attribute graphs")?,
                ir_version,
                depth + 1,
            )?),
            14 | 15 | 22 | 23 => other = true,
            20 => kind = w.int("attribute type")?,
            _ => {}
        }
    }
    // AttributeProto.AttributeType; 0 (files before IR 2) means "the field that is set".
    let a = match kind {
        1 => Attribute::Float(fl.unwrap_or(0.0)),
        2 => Attribute::Int(int.unwrap_or(0)),
        3 => Attribute::String(s.unwrap_or_default()),
        4 => match t {
            Some(t) => Attribute::Tensor(t),
            None => return err(format!("attribute '{name}': TENSOR without a tensor")),
        },
        5 => match g {
            Some(g) => Attribute::Graph(Box::new(g)),
            None => return err(format!("attribute '{name}': GRAPH without a graph")),
        },
        6 => Attribute::Floats(floats),
        7 => Attribute::Ints(ints),
        8 => Attribute::Strings(strings),
        9 => Attribute::Tensors(tensors),
        10 => Attribute::Graphs(graphs),
        0 => {
            if let Some(v) = fl {
                Attribute::Float(v)
            } else if let Some(v) = int {
                Attribute::Int(v)
            } else if let Some(v) = s {
                Attribute::String(v)
            } else if let Some(v) = t {
                Attribute::Tensor(v)
            } else if let Some(v) = g {
                Attribute::Graph(Box::new(v))
            } else if !floats.is_empty() {
                Attribute::Floats(floats)
            } else if !ints.is_empty() {
                Attribute::Ints(ints)
            } else if !strings.is_empty() {
                Attribute::Strings(strings)
            } else if other {
                Attribute::Unsupported("sparse tensor or type proto".into())
            } else {
                return err(format!("attribute '{name}' has no type and no value"));
            }
        }
        k => Attribute::Unsupported(format!("attribute type {k}")),
    };
    Ok((name, a))
}

fn read_value_info(b: &[u8]) -> Result<ValueInfo> {
    let mut f = Fields::new(b);
    let mut v = ValueInfo::default();
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => v.name = w.string("value name")?,
            2 => {
                // TypeProto: only tensor_type (field 1) carries a dtype and shape here.
                let mut t = Fields::new(w.bytes("value type")?);
                while let Some((n, w)) = t.next_field()? {
                    if n == 1 {
                        read_tensor_type(w.bytes("tensor_type")?, &mut v)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(v)
}

fn read_tensor_type(b: &[u8], v: &mut ValueInfo) -> Result<()> {
    let mut f = Fields::new(b);
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => v.dtype = DataType::from_onnx(w.int("elem_type")? as i32),
            2 => {
                let mut dims = Vec::new();
                let mut s = Fields::new(w.bytes("shape")?);
                while let Some((n, w)) = s.next_field()? {
                    if n != 1 {
                        continue;
                    }
                    let mut dim = Dim::Unknown;
                    let mut d = Fields::new(w.bytes("dim")?);
                    while let Some((n, w)) = d.next_field()? {
                        match n {
                            1 => dim = Dim::Fixed(w.int("dim_value")?),
                            2 => dim = Dim::Symbolic(w.string("dim_param")?),
                            _ => {}
                        }
                    }
                    dims.push(dim);
                }
                v.shape = Some(dims);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads a serialized `TensorProto` into its name and data.
pub fn read_tensor(b: &[u8]) -> Result<(String, TensorData)> {
    let mut f = Fields::new(b);
    let mut name = String::new();
    let mut dims = Vec::new();
    let mut dtype = 0;
    let mut raw: Option<&[u8]> = None;
    let (mut f32s, mut i32s, mut i64s) = (Vec::new(), Vec::new(), Vec::new());
    let (mut f64s, mut u64s) = (Vec::new(), Vec::new());
    let mut external = false;
    let mut strings = false;
    while let Some((n, w)) = f.next_field()? {
        match n {
            1 => w.ints_into(&mut dims, "dims")?,
            2 => dtype = w.int("data_type")?,
            4 => w.fixed32_into(&mut f32s, "float_data")?,
            5 => w.ints_into(&mut i32s, "int32_data")?,
            6 => strings = true,
            7 => w.ints_into(&mut i64s, "int64_data")?,
            8 => name = w.string("tensor name")?,
            9 => raw = Some(w.bytes("raw_data")?),
            10 => w.fixed64_into(&mut f64s, "double_data")?,
            11 => {
                let mut v = Vec::new();
                w.ints_into(&mut v, "uint64_data")?;
                u64s.extend(v.into_iter().map(|x| x as u64));
            }
            14 => external |= w.int("data_location")? == 1,
            3 => return err(format!("tensor '{name}': segmented tensors are not read")),
            _ => {}
        }
    }
    let Some(dt) = DataType::from_onnx(dtype as i32) else {
        return err(format!("tensor '{name}': unknown data type {dtype}"));
    };
    if external {
        return err(format!("tensor '{name}': external data is not read"));
    }
    if dt == DataType::String || strings {
        return err(format!("tensor '{name}': string tensors are not read"));
    }
    let bytes: Vec<u8> = match raw {
        Some(r) => r.to_vec(),
        None => {
            use DataType::*;
            match dt {
                Float | Complex64 => f32s.iter().flat_map(|v| v.to_le_bytes()).collect(),
                Double | Complex128 => f64s.iter().flat_map(|v| v.to_le_bytes()).collect(),
                Int64 => i64s.iter().flat_map(|v| v.to_le_bytes()).collect(),
                Uint64 => u64s.iter().flat_map(|v| v.to_le_bytes()).collect(),
                Uint32 => u64s
                    .iter()
                    .flat_map(|&v| (v as u32).to_le_bytes())
                    .collect(),
                Int32 => i32s
                    .iter()
                    .flat_map(|&v| (v as i32).to_le_bytes())
                    .collect(),
                Int16 | Uint16 | Float16 | BFloat16 => i32s
                    .iter()
                    .flat_map(|&v| (v as u16).to_le_bytes())
                    .collect(),
                Int8 | Uint8 | Bool | Float8E4M3FN | Float8E4M3FNUZ | Float8E5M2
                | Float8E5M2FNUZ | Float8E8M0 => i32s.iter().map(|&v| v as u8).collect(),
                // Sub-byte types: int32_data holds the packed bytes, one per value.
                Uint4 | Int4 | Float4E2M1 | Uint2 | Int2 => i32s.iter().map(|&v| v as u8).collect(),
                String => unreachable!("refused above"),
            }
        }
    };
    if let Some(bits) = dt.packed_bits() {
        if dims.iter().any(|&d| d < 0) {
            return err(format!("tensor '{name}' has a negative dim: {dims:?}"));
        }
        let numel = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        let want = numel
            .and_then(|n| n.checked_mul(u64::from(bits)))
            .map(|b| b.div_ceil(8));
        if want != Some(bytes.len() as u64) {
            return err(format!(
                "tensor '{name}': {dt} {dims:?} needs {want:?} bytes, has {}",
                bytes.len()
            ));
        }
        return Ok((
            name,
            TensorData {
                dtype: dt,
                dims,
                bytes: bytes.into(),
            },
        ));
    }
    let t = TensorData::new(dt, dims, bytes)
        .map_err(|e| ProtoError(format!("tensor '{name}': {e}")))?;
    Ok((name, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny protobuf writer for the tests.
    #[derive(Default)]
    struct W(Vec<u8>);

    impl W {
        fn varint(&mut self, mut v: u64) -> &mut Self {
            loop {
                let b = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    self.0.push(b);
                    return self;
                }
                self.0.push(b | 0x80);
            }
        }
        fn int(&mut self, field: u64, v: i64) -> &mut Self {
            self.varint(field << 3).varint(v as u64)
        }
        fn bytes(&mut self, field: u64, b: &[u8]) -> &mut Self {
            self.varint((field << 3) | 2).varint(b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        fn str(&mut self, field: u64, s: &str) -> &mut Self {
            self.bytes(field, s.as_bytes())
        }
        fn f32(&mut self, field: u64, v: f32) -> &mut Self {
            self.varint((field << 3) | 5);
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn msg(&mut self, field: u64, m: &W) -> &mut Self {
            self.bytes(field, &m.0)
        }
    }

    fn value_info(name: &str, elem: i64, dims: &[std::result::Result<i64, &str>]) -> W {
        let mut shape = W::default();
        for d in dims {
            let mut dim = W::default();
            match d {
                Ok(v) => dim.int(1, *v),
                Err(p) => dim.str(2, p),
            };
            shape.msg(1, &dim);
        }
        let mut tt = W::default();
        tt.int(1, elem).msg(2, &shape);
        let mut ty = W::default();
        ty.msg(1, &tt);
        let mut v = W::default();
        v.str(1, name).msg(2, &ty);
        v
    }

    #[test]
    fn reads_a_model() {
        // W [2] float as float_data (packed), shape [2]; a Gemm-like node with attributes.
        let mut w = W::default();
        w.int(1, 2).int(2, 1).str(8, "w");
        let mut packed = W::default();
        packed.0.extend(1.5f32.to_le_bytes());
        packed.0.extend((-2.0f32).to_le_bytes());
        w.bytes(4, &packed.0);
        let mut alpha = W::default();
        alpha.str(1, "alpha").f32(2, 0.5).int(20, 1);
        let mut perm = W::default();
        let mut ints = W::default();
        ints.varint(1).varint(0);
        perm.str(1, "perm").bytes(8, &ints.0).int(20, 7);
        let mut acts = W::default();
        acts.str(1, "acts").str(9, "Tanh").str(9, "Relu").int(20, 8);
        let mut node = W::default();
        node.str(1, "x")
            .str(1, "w")
            .str(1, "")
            .str(2, "y")
            .str(4, "Foo")
            .str(7, "com.example")
            .msg(5, &alpha)
            .msg(5, &perm)
            .msg(5, &acts);
        let mut node2 = W::default();
        node2.str(1, "y").str(2, "z").str(4, "Relu").str(3, "relu0");
        let mut g = W::default();
        g.msg(1, &node)
            .msg(1, &node2)
            .str(2, "main")
            .msg(5, &w)
            .msg(11, &value_info("x", 1, &[Err("n"), Ok(2)]))
            .msg(12, &value_info("z", 1, &[Err("n"), Ok(2)]))
            .msg(13, &value_info("y", 1, &[Err("n"), Ok(2)]));
        let mut opset = W::default();
        opset.str(1, "").int(2, 17);
        let mut ms = W::default();
        ms.str(1, "com.example").int(2, 1);
        let mut m = W::default();
        m.int(1, 8).msg(7, &g).msg(8, &opset).msg(8, &ms);

        let graph = read_model(&m.0).unwrap();
        assert_eq!(graph.name, "main");
        assert_eq!(graph.opset(""), Some(17));
        assert_eq!(graph.opset("com.example"), Some(1));
        assert_eq!(graph.inputs.len(), 1);
        assert_eq!(
            graph.inputs[0].shape,
            Some(vec![Dim::Symbolic("n".into()), Dim::Fixed(2)])
        );
        assert_eq!(graph.inputs[0].dtype, Some(DataType::Float));
        assert_eq!(graph.initializers["w"].to_f64_vec(), Some(vec![1.5, -2.0]));
        assert_eq!(graph.value_info["y"].dtype, Some(DataType::Float));
        let n = &graph.nodes[0];
        assert_eq!(n.name, "Foo_0");
        assert_eq!(n.domain, "com.example");
        assert_eq!(n.inputs, vec!["x", "w", ""]);
        assert_eq!(n.attributes["alpha"], Attribute::Float(0.5));
        assert_eq!(n.attributes["perm"], Attribute::Ints(vec![1, 0]));
        assert_eq!(
            n.attributes["acts"],
            Attribute::Strings(vec![b"Tanh".to_vec(), b"Relu".to_vec()])
        );
        assert_eq!(graph.nodes[1].name, "relu0");
        assert_eq!(graph.topological_order().unwrap(), vec![0, 1]);
    }

    #[test]
    fn initializers_listed_as_inputs_follow_the_ir_version() {
        let mut w = W::default();
        w.int(1, 1).int(2, 7).str(8, "k").int(7, 3);
        let mut g = W::default();
        g.msg(5, &w)
            .msg(11, &value_info("k", 7, &[Ok(1)]))
            .msg(11, &value_info("x", 1, &[Ok(1)]));
        for (ir, constant) in [(3, true), (8, false)] {
            let mut m = W::default();
            m.int(1, ir).msg(7, &g);
            let graph = read_model(&m.0).unwrap();
            assert_eq!(graph.initializers.contains_key("k"), constant, "IR {ir}");
            assert_eq!(graph.inputs.len(), if constant { 1 } else { 2 }, "IR {ir}");
        }
    }

    #[test]
    fn reads_typed_fields_and_raw_data() {
        // float16 in int32_data (bit patterns), int64 unpacked, raw bytes of int32.
        let mut h = W::default();
        h.int(1, 2)
            .int(2, 10)
            .int(5, 0x3c00)
            .int(5, 0xc000)
            .str(8, "h");
        let (name, t) = read_tensor(&h.0).unwrap();
        assert_eq!(name, "h");
        assert_eq!(t.to_f64_vec(), Some(vec![1.0, -2.0]));
        let mut l = W::default();
        l.int(2, 7).int(7, -5).int(7, 9).int(1, 2);
        assert_eq!(read_tensor(&l.0).unwrap().1.to_i64_vec(), Some(vec![-5, 9]));
        let mut r = W::default();
        let raw: Vec<u8> = [7i32, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        r.int(1, 2).int(2, 6).bytes(9, &raw);
        assert_eq!(read_tensor(&r.0).unwrap().1.to_i64_vec(), Some(vec![7, -1]));
        // A scalar.
        let mut s = W::default();
        s.int(2, 1).f32(4, 3.0);
        let t = read_tensor(&s.0).unwrap().1;
        assert!(t.dims.is_empty());
        assert_eq!(t.to_f64_vec(), Some(vec![3.0]));
    }

    #[test]
    fn refuses_what_it_does_not_read() {
        let mut e = W::default();
        e.int(1, 1).int(2, 1).int(14, 1).str(8, "big");
        assert!(read_tensor(&e.0).unwrap_err().0.contains("external data"));
        let mut s = W::default();
        s.int(1, 1).int(2, 8).str(6, "a");
        assert!(read_tensor(&s.0).unwrap_err().0.contains("string"));
        let mut short = W::default();
        short.int(1, 3).int(2, 1).f32(4, 1.0);
        assert!(read_tensor(&short.0).is_err());
        // Truncated input, a bad wire type, a model without a graph.
        assert!(read_model(&[0x3a, 0x05, 0x01]).is_err());
        assert!(read_model(&[0x0b]).is_err());
        assert!(
            read_model(&[0x08, 0x08])
                .unwrap_err()
                .0
                .contains("no graph")
        );
        // Deeply nested subgraph attributes stop at the limit.
        let mut inner = W::default();
        inner.str(2, "leaf");
        for _ in 0..(MAX_DEPTH + 2) {
            let mut attr = W::default();
            attr.str(1, "body").msg(6, &inner).int(20, 5);
            let mut node = W::default();
            node.str(4, "If").msg(5, &attr);
            let mut g = W::default();
            g.msg(1, &node);
            inner = g;
        }
        let mut m = W::default();
        m.int(1, 8).msg(7, &inner);
        assert!(read_model(&m.0).unwrap_err().0.contains("nested deeper"));
    }

    #[test]
    fn arbitrary_bytes_give_errors_not_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (seed >> 56) as u8
                })
                .collect();
            let _ = read_model(&bytes);
            let _ = read_tensor(&bytes);
        }
        // Every truncation of a valid tensor.
        let mut t = W::default();
        t.int(1, 2)
            .int(1, 3)
            .int(2, 22)
            .bytes(9, &[0x21, 0x43, 0x05])
            .str(8, "q");
        assert_eq!(read_tensor(&t.0).unwrap().1.dims, vec![2, 3]);
        for n in 0..t.0.len() {
            let _ = read_tensor(&t.0[..n]);
        }
        // A packed type with a negative or overflowing dim.
        let mut neg = W::default();
        neg.int(1, -2).int(2, 22).bytes(9, &[0]);
        assert!(read_tensor(&neg.0).is_err());
        let mut big = W::default();
        big.int(1, i64::MAX).int(1, 4).int(2, 22).bytes(9, &[0]);
        assert!(read_tensor(&big.0).is_err());
    }
}
