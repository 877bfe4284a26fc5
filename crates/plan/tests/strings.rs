//! String ops: claims, lowerings (host kernels, never arrays of strings) and the kernels
//! themselves, called by name (no MLX, no ORT).

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, TensorData};
use plan::{CompileClass, KernelAttrs, Step, run_host_kernel};

const S: DataType = DataType::String;

fn st(dims: &[i64], v: &[&str]) -> Option<TensorData> {
    Some(TensorData::from_strings(dims.to_vec(), v).unwrap())
}

fn texts(t: &TensorData) -> Vec<String> {
    t.strings()
        .unwrap()
        .into_iter()
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect()
}

fn run(name: &str, inputs: &[Option<TensorData>], attrs: KernelAttrs) -> Vec<TensorData> {
    run_host_kernel(name, inputs, &attrs).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// One node of `op` at `opset` over string inputs `ins` (dims each) with outputs `outs`.
fn graph(opset: i64, op: &str, ins: &[&[i64]], outs: &[(&str, DataType)]) -> G {
    let mut g = G::new(opset);
    let names: Vec<String> = (0..ins.len()).map(|i| format!("x{i}")).collect();
    for (n, d) in names.iter().zip(ins) {
        g.input(n, S, d);
    }
    for (n, dt) in outs {
        g.output_any(n, *dt);
    }
    let ins: Vec<&str> = names.iter().map(String::as_str).collect();
    let outs: Vec<&str> = outs.iter().map(|(n, _)| *n).collect();
    g.node(op, &ins, &outs);
    g
}

#[test]
fn string_ops_lower_to_host_kernels_and_run_eagerly() {
    let cases = [
        (19, "Equal", 2, DataType::Bool, "string_equal"),
        (20, "StringConcat", 2, S, "string_concat"),
        (20, "RegexFullMatch", 1, DataType::Bool, "regex_full_match"),
        (10, "StringNormalizer", 1, S, "string_normalizer"),
    ];
    for (opset, op, arity, out, kernel) in cases {
        let ins: Vec<&[i64]> = vec![&[3]; arity];
        let mut g = graph(opset, op, &ins, &[("y", out)]);
        if op == "RegexFullMatch" {
            g.g.nodes[0].attr("pattern", string("a+"));
        }
        claim(&g, 0).unwrap_or_else(|e| panic!("{op}: {e}"));
        let p = plan_of(&g.build());
        assert_eq!(kernel_steps(&p, kernel).len(), 1, "{op}:\n{p}");
        assert_eq!(p.steps.len(), 1, "{op}:\n{p}");
        assert!(
            p.constants.iter().all(|(_, t)| t.dtype != S),
            "{op}: a string array"
        );
        assert_eq!(p.compile_class(), CompileClass::Eager, "{op}");
        assert!(
            p.compile_blockers()
                .iter()
                .any(|b| b.reason.contains("lives on the host")),
            "{op}"
        );
    }
    let g = graph(
        20,
        "StringSplit",
        &[&[2]],
        &[("y", S), ("n", DataType::Int64)],
    );
    let p = plan_of(&g.build());
    assert_eq!(kernel_steps(&p, "string_split").len(), 1, "{p}");
}

#[test]
fn string_declines() {
    // Equal gained strings in opset 19
    declined(
        &graph(18, "Equal", &[&[2], &[2]], &[("y", DataType::Bool)]),
        0,
        "string",
    );
    let mut g = graph(20, "RegexFullMatch", &[&[2]], &[("y", DataType::Bool)]);
    g.g.nodes[0].attr("pattern", string("(a"));
    declined(&g, 0, "unmatched '('");
    let mut g = graph(20, "RegexFullMatch", &[&[2]], &[("y", DataType::Bool)]);
    g.g.nodes[0].attr("pattern", string(r"(a)\1"));
    declined(&g, 0, "backreferences");
    let mut g = graph(20, "RegexFullMatch", &[&[2]], &[("y", DataType::Bool)]);
    g.g.nodes[0].attr("pattern", Attribute::String(vec![0xff, b'a']));
    declined(&g, 0, "not valid UTF-8");
    let mut g = graph(10, "StringNormalizer", &[&[2]], &[("y", S)]);
    g.g.nodes[0].attr("locale", string("tr_TR.UTF-8"));
    // the locale is never read without a case change or case-blind stopwords
    claim(&g, 0).unwrap();
    g.g.nodes[0].attr("case_change_action", string("UPPER"));
    declined(&g, 0, "locale");
    let mut g = graph(10, "StringNormalizer", &[&[2]], &[("y", S)]);
    g.g.nodes[0].attr("case_change_action", string("TITLE"));
    declined(&g, 0, "case_change_action");
    declined(
        &graph(10, "StringNormalizer", &[&[1, 2, 3]], &[("y", S)]),
        0,
        "rank-3",
    );
    // A string value can't be an MLX array: ops without a string form still decline.
    declined(
        &graph(17, "Identity", &[&[2]], &[("y", S)]),
        0,
        "MLX has no strings",
    );
}

#[test]
fn string_constants_travel_as_kernel_constants() {
    let mut g = G::new(20);
    g.input("x", S, &[2]);
    g.init("c", TensorData::from_strings(vec![1], &["!"]).unwrap());
    g.output_any("y", S);
    g.node("StringConcat", &["x", "c"], &["y"]);
    let p = plan_of(&g.build());
    assert!(p.constants.is_empty(), "{p}");
    let Step::HostKernel { inputs, .. } = kernel_steps(&p, "string_concat")[0] else {
        unreachable!()
    };
    assert!(matches!(inputs[1], plan::HostArg::Const(ref t) if t.dtype == S));
}

#[test]
fn two_patterns_of_one_length_stay_two_steps() {
    let mut g = G::new(20);
    g.input("x", S, &[2]);
    g.output_any("a", DataType::Bool);
    g.output_any("b", DataType::Bool);
    g.node("RegexFullMatch", &["x"], &["a"])
        .attr("pattern", string("a+"));
    g.node("RegexFullMatch", &["x"], &["b"])
        .attr("pattern", string("b+"));
    let p = plan_of(&g.build());
    assert_eq!(kernel_steps(&p, "regex_full_match").len(), 2, "{p}");
}

#[test]
fn equal_and_concat_broadcast() {
    let a = st(&[2, 1], &["a", "b"]);
    let b = st(&[3], &["a", "b", "c"]);
    let eq = run("string_equal", &[a.clone(), b.clone()], KernelAttrs::new());
    assert_eq!(eq[0].dims, vec![2, 3]);
    assert_eq!(eq[0].bytes.to_vec(), vec![1, 0, 0, 0, 1, 0]);
    let cat = run("string_concat", &[a, b], KernelAttrs::new());
    assert_eq!(texts(&cat[0]), ["aa", "ab", "ac", "ba", "bb", "bc"]);
    // scalars, empty tensors, UTF-8
    let cat = run(
        "string_concat",
        &[st(&[], &["é"]), st(&[], &["ß"])],
        KernelAttrs::new(),
    );
    assert_eq!(
        (cat[0].dims.clone(), texts(&cat[0])),
        (vec![], vec!["éß".to_string()])
    );
    let cat = run(
        "string_concat",
        &[st(&[0], &[]), st(&[1], &["x"])],
        KernelAttrs::new(),
    );
    assert_eq!(cat[0].dims, vec![0]);
    assert!(
        run_host_kernel(
            "string_concat",
            &[st(&[2], &["a", "b"]), st(&[3], &["a", "b", "c"])],
            &KernelAttrs::new()
        )
        .is_err()
    );
    // malformed string bytes are an error
    let bad = TensorData {
        dtype: S,
        dims: vec![1],
        bytes: vec![9u8, 0, 0].into(),
    };
    assert!(
        run_host_kernel(
            "string_equal",
            &[Some(bad.clone()), st(&[1], &["a"])],
            &KernelAttrs::new()
        )
        .is_err()
    );
}

fn split(x: &[&str], delim: &str, maxsplit: i64) -> (Vec<i64>, Vec<String>, Vec<i64>) {
    let out = run(
        "string_split",
        &[st(&[x.len() as i64], x), st(&[], &[delim])],
        KernelAttrs::new().int("maxsplit", maxsplit),
    );
    (
        out[0].dims.clone(),
        texts(&out[0]),
        out[1].to_i64_vec().unwrap(),
    )
}

#[test]
fn string_split_as_ort() {
    let (d, s, n) = split(&["a.b.c", "d", ""], ".", -1);
    assert_eq!(d, vec![3, 3]);
    assert_eq!(s, ["a", "b", "c", "d", "", "", "", "", ""]);
    assert_eq!(n, [3, 1, 0]);
    let (_, s, n) = split(&["a--b", "-"], "-", -1);
    assert_eq!(
        (s, n),
        (
            vec!["a", "", "b", "", "", ""]
                .into_iter()
                .map(String::from)
                .collect(),
            vec![3, 2]
        )
    );
    // whitespace: runs of spaces, ends trimmed
    let (_, s, n) = split(&["  hello   world ", "x"], "", -1);
    assert_eq!(s, ["hello", "world", "x", ""]);
    assert_eq!(n, [2, 1]);
    // maxsplit: the rest is one substring (trailing spaces trimmed in whitespace mode)
    let (_, s, _) = split(&["a b  c  "], "", 1);
    assert_eq!(s, ["a", "b  c"]);
    let (_, s, _) = split(&["a.b.c"], ".", 1);
    assert_eq!(s, ["a", "b.c"]);
    let (_, s, _) = split(&["a.b.c"], ".", 0);
    assert_eq!(s, ["a.b.c"]);
    // a huge maxsplit is no limit
    let (_, s, _) = split(&["a.b"], ".", i64::MAX);
    assert_eq!(s, ["a", "b"]);
    let (d, s, n) = split(&[], ".", -1);
    assert_eq!((d, s.len(), n.len()), (vec![0, 0], 0, 0));
    // multi-byte delimiters and UTF-8
    let (_, s, _) = split(&["αβ::γ"], "::", -1);
    assert_eq!(s, ["αβ", "γ"]);
}

#[test]
fn string_split_is_bounded() {
    // one string of a million delimiters among many: refused, not allocated
    let long = ".".repeat(1 << 20);
    let many: Vec<&str> = std::iter::once(long.as_str())
        .chain(std::iter::repeat_n("x", 200))
        .collect();
    let err = run_host_kernel(
        "string_split",
        &[st(&[many.len() as i64], &many), st(&[], &["."])],
        &KernelAttrs::new().int("maxsplit", -1),
    )
    .unwrap_err();
    assert!(err.contains("bound"), "{err}");
}

fn regex(pattern: &str, x: &[&str]) -> Vec<u8> {
    run(
        "regex_full_match",
        &[st(&[x.len() as i64], x), st(&[], &[pattern])],
        KernelAttrs::new(),
    )[0]
    .bytes
    .to_vec()
}

#[test]
fn regex_full_match_is_re2_like() {
    let p = r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)";
    assert_eq!(
        regex(p, &["account@gmail.com", "x@hotmail.com", "a@yahoo.com "]),
        [1, 0, 1]
    );
    assert_eq!(regex("a+", &["aaa", "aab", ""]), [1, 0, 0]);
    assert_eq!(regex(r"\w+", &["héllo", "hello"]), [0, 1]);
    assert_eq!(regex(".", &["é"]), [1]);
    // invalid UTF-8 input: no '.' matches the bad byte, no panic
    let bad = TensorData::from_strings(vec![1], &[vec![0xffu8]]).unwrap();
    let out = run(
        "regex_full_match",
        &[Some(bad), st(&[], &[".*"])],
        KernelAttrs::new(),
    );
    assert_eq!(out[0].bytes.to_vec(), [0]);
    // an invalid pattern is an error, not a panic
    assert!(
        run_host_kernel(
            "regex_full_match",
            &[st(&[1], &["a"]), st(&[], &["(a"])],
            &KernelAttrs::new()
        )
        .is_err()
    );
}

fn normalize(
    x: &[&str],
    dims: &[i64],
    stop: &[&str],
    case: i64,
    sensitive: bool,
    ascii: bool,
) -> Result<(Vec<i64>, Vec<String>), String> {
    let out = run_host_kernel(
        "string_normalizer",
        &[st(dims, x), st(&[stop.len() as i64], stop)],
        &KernelAttrs::new()
            .int("case", case)
            .bool("case_sensitive", sensitive)
            .bool("ascii", ascii),
    )?;
    Ok((out[0].dims.clone(), texts(&out[0])))
}

#[test]
fn string_normalizer_as_ort() {
    let x = ["monday", "tuesday", "wednesday", "thursday"];
    let (d, s) = normalize(&x, &[4], &["monday"], 1, true, false).unwrap();
    assert_eq!(
        (d, s),
        (
            vec![3],
            vec!["tuesday".into(), "wednesday".into(), "thursday".into()]
        )
    );
    let (d, s) = normalize(
        &["Monday", "tuesday"],
        &[1, 2],
        &["monday"],
        2,
        false,
        false,
    )
    .unwrap();
    assert_eq!((d, s), (vec![1, 1], vec!["TUESDAY".into()]));
    // everything dropped: one empty string
    let (d, s) = normalize(&["monday"], &[1], &["monday"], 2, true, false).unwrap();
    assert_eq!((d, s), (vec![1], vec![String::new()]));
    // Unicode simple case mapping (one character per character), ASCII only in the C locale
    let (_, s) = normalize(
        &["Straße", "ÉCOLE", "ǅ", "İ", "ᾳ"],
        &[5],
        &[],
        2,
        true,
        false,
    )
    .unwrap();
    assert_eq!(s, ["STRAßE", "ÉCOLE", "Ǆ", "İ", "ᾼ"]);
    let (_, s) = normalize(&["ÉCOLE", "İ"], &[2], &[], 1, true, false).unwrap();
    assert_eq!(s, ["école", "i"]);
    let (_, s) = normalize(&["ÉCOLE"], &[1], &[], 1, true, true).unwrap();
    assert_eq!(s, ["École"]);
    // case-insensitive stopwords compare lowercased
    let (_, s) = normalize(&["ÉTÉ", "x"], &[2], &["été"], 0, false, false).unwrap();
    assert_eq!(s, ["x"]);
    // what ORT refuses
    assert!(normalize(&[], &[0], &[], 0, true, false).is_err());
    assert!(normalize(&["a", "b"], &[2, 1], &[], 0, true, false).is_err());
    let bad = TensorData::from_strings(vec![1], &[vec![0xc3u8]]).unwrap();
    let err = run_host_kernel(
        "string_normalizer",
        &[Some(bad), st(&[0], &[])],
        &KernelAttrs::new()
            .int("case", 0)
            .bool("case_sensitive", true)
            .bool("ascii", false),
    )
    .unwrap_err();
    assert!(err.contains("UTF-8"), "{err}");
}

fn ml_graph(ml: i64, x: DataType, y: DataType, attrs: &[(&str, Attribute)]) -> G {
    let mut g = G::new(17);
    g.g.opset_imports.insert("ai.onnx.ml".into(), ml);
    g.input("x", x, &[3]);
    g.output_any("y", y);
    let n = g.node("LabelEncoder", &["x"], &["y"]);
    n.domain = "ai.onnx.ml".into();
    for (k, v) in attrs {
        n.attr(k, v.clone());
    }
    g
}

#[test]
fn label_encoder_string_forms_claim_and_lower() {
    let si = [
        ("keys_strings", strings(&["a", "b"])),
        ("values_int64s", ints(&[1, 2])),
    ];
    for ml in [2, 3, 4] {
        let g = ml_graph(ml, S, DataType::Int64, &si);
        claim(&g, 0).unwrap();
        let p = plan_of(&g.build());
        assert_eq!(kernel_steps(&p, "label_encoder").len(), 1, "{p}");
        assert_eq!(
            kernel_attrs(&p, "label_encoder")
                .get_bool("nan_matches")
                .unwrap(),
            ml >= 4
        );
    }
    let is = [
        ("keys_int64s", ints(&[1])),
        ("values_strings", strings(&["a"])),
    ];
    claim(&ml_graph(2, DataType::Int64, S, &is), 0).unwrap();
    let t = [
        (
            "keys_tensor",
            Attribute::Tensor(TensorData::from_strings(vec![2], &["a", "b"]).unwrap()),
        ),
        (
            "values_tensor",
            Attribute::Tensor(TensorData::new(DataType::Int16, vec![2], vec![0, 0, 1, 0]).unwrap()),
        ),
        (
            "default_tensor",
            Attribute::Tensor(TensorData::new(DataType::Int16, vec![1], vec![42, 0]).unwrap()),
        ),
    ];
    claim(&ml_graph(4, S, DataType::Int16, &t), 0).unwrap();
    declined(&ml_graph(3, S, DataType::Int16, &t), 0, "no keys");
    // opset 1: classes_strings, both directions
    let c = [("classes_strings", strings(&["x", "y"]))];
    claim(&ml_graph(1, S, DataType::Int64, &c), 0).unwrap();
    claim(&ml_graph(1, DataType::Int64, S, &c), 0).unwrap();
    declined(
        &ml_graph(2, DataType::Int64, DataType::Int64, &si),
        0,
        "keys are string",
    );
}

#[test]
fn label_encoder_kernel_maps_with_defaults() {
    let keys = st(&[3], &["a", "b", "a"]);
    let values = Some(TensorData::from_i64(vec![3], &[0, 1, 2]));
    let default = Some(TensorData::from_i64(vec![], &[42]));
    let x = st(&[2, 2], &["a", "b", "c", ""]);
    let attrs = |last: bool| {
        KernelAttrs::new()
            .bool("nan_matches", true)
            .bool("last_wins", last)
    };
    let out = run(
        "label_encoder",
        &[x.clone(), keys.clone(), values.clone(), default.clone()],
        attrs(false),
    );
    assert_eq!(out[0].dims, vec![2, 2]);
    assert_eq!(out[0].to_i64_vec().unwrap(), [0, 1, 42, 42]);
    let out = run("label_encoder", &[x, keys, values, default], attrs(true));
    assert_eq!(out[0].to_i64_vec().unwrap(), [2, 1, 42, 42]);
    // float keys to strings: NaN matches NaN only where asked, -0 matches 0
    let fk = Some(TensorData::from_f32(vec![2], &[f32::NAN, 0.0]));
    let sv = st(&[2], &["nan", "zero"]);
    let sd = st(&[], &["_Unused"]);
    let fx = Some(TensorData::from_f32(vec![3], &[f32::NAN, -0.0, 1.0]));
    let out = run(
        "label_encoder",
        &[fx.clone(), fk.clone(), sv.clone(), sd.clone()],
        attrs(false),
    );
    assert_eq!(texts(&out[0]), ["nan", "zero", "_Unused"]);
    let out = run(
        "label_encoder",
        &[fx, fk, sv, sd],
        KernelAttrs::new()
            .bool("nan_matches", false)
            .bool("last_wins", false),
    );
    assert_eq!(texts(&out[0]), ["_Unused", "zero", "_Unused"]);
    // mismatched types are an error
    assert!(
        run_host_kernel(
            "label_encoder",
            &[
                st(&[1], &["a"]),
                Some(TensorData::from_i64(vec![1], &[1])),
                st(&[1], &["x"]),
                st(&[], &["d"])
            ],
            &attrs(false)
        )
        .is_err()
    );
}
