//! Text: TfIdfVectorizer (n-gram counting over integer tokens) and the string ops
//! (StringConcat, StringSplit, RegexFullMatch, StringNormalizer, and `Equal` on strings for
//! the elementwise family), all host kernels.
//!
//! MLX has no strings: a string value lives on the host as [`TensorData`] of dtype string
//! (length-prefixed elements, [`TensorData::strings`]); string inputs reach a kernel as host
//! values (a plan input's or an earlier kernel's) or as constants (`host_input`), never as
//! arrays, and a plan holding one runs eagerly. The bool and int64 results of these kernels
//! are ordinary arrays.

mod re2;

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::registry::ClaimCtx;
use crate::step::{TfIdfMode, TfIdfSpec};

/// The host kernel counting n-grams.
const TFIDF_KERNEL: &str = "tfidf_vectorizer";
/// `Equal` on strings: bytewise equality, broadcast.
const STRING_EQUAL_KERNEL: &str = "string_equal";
/// `StringConcat`: `x[i] + y[i]`, broadcast.
const STRING_CONCAT_KERNEL: &str = "string_concat";
/// `StringSplit`: substrings padded to the longest split, and their counts.
const STRING_SPLIT_KERNEL: &str = "string_split";
/// `RegexFullMatch`: whether each element matches the whole pattern (RE2 syntax).
const REGEX_FULL_MATCH_KERNEL: &str = "regex_full_match";
/// `StringNormalizer`: stopword removal and case change.
const STRING_NORMALIZER_KERNEL: &str = "string_normalizer";

/// The most elements a string kernel makes, and the most bytes of strings: a bound on what a
/// hostile input (a broadcast of two long vectors, one string of a million delimiters among
/// many) can make it allocate.
const MAX_STRING_ELEMENTS: usize = 1 << 26;
const MAX_STRING_BYTES: usize = 1 << 31;

/// The string element type, as claims check it.
const STRING: &[DataType] = &[DataType::String];

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "TfIdfVectorizer", 9, MAX, claim_tfidf, lower_tfidf);
    r.kernel(TFIDF_KERNEL, tfidf_kernel);
    r.op("", "StringConcat", 20, MAX, claim_concat, lower_concat)
        .notes("host kernel (MLX has no strings); numpy broadcasting");
    r.op("", "StringSplit", 20, MAX, claim_split, lower_split)
        .notes("host kernel; an empty or absent delimiter splits at runs of spaces, as ORT");
    r.op("", "RegexFullMatch", 20, MAX, claim_regex, lower_regex)
        .notes("host kernel with the `regex` crate, RE2 syntax and semantics (ASCII `\\w \\d \\s \\b`); patterns it can't read stay on CPU");
    r.op("", "StringNormalizer", 10, MAX, claim_normalizer, lower_normalizer)
        .notes("host kernel; locales en_US (Unicode simple case mapping) and C/POSIX (ASCII); others stay on CPU");
    r.kernel(STRING_EQUAL_KERNEL, string_equal_kernel);
    r.kernel(STRING_CONCAT_KERNEL, string_concat_kernel);
    r.kernel(STRING_SPLIT_KERNEL, string_split_kernel);
    r.kernel(REGEX_FULL_MATCH_KERNEL, regex_full_match_kernel);
    r.kernel(STRING_NORMALIZER_KERNEL, string_normalizer_kernel);
}

/// `mode` as the kernel's attribute numbers it (`weights` travel as a constant input).
const MODES: [&str; 3] = ["TF", "IDF", "TFIDF"];

/// The validated attributes (string pools are declined).
fn tfidf_spec(node: &Node) -> Result<TfIdfSpec, String> {
    if node.attributes.contains_key("pool_strings") {
        return Err("TfIdfVectorizer: pool_strings (string tokens) are not claimed".into());
    }
    let need_int = |name: &str| -> Result<i64, String> {
        attr_int(node, name)?.ok_or_else(|| format!("TfIdfVectorizer: {name} is required"))
    };
    let need_ints = |name: &str| -> Result<Vec<i64>, String> {
        attr_ints(node, name)?.ok_or_else(|| format!("TfIdfVectorizer: {name} is required"))
    };
    let mode = attr_str(node, "mode")?.ok_or("TfIdfVectorizer: mode is required")?;
    TfIdfSpec::new(
        &mode,
        need_int("min_gram_length")?,
        need_int("max_gram_length")?,
        need_int("max_skip_count")?,
        &need_ints("ngram_counts")?,
        &need_ints("ngram_indexes")?,
        &need_ints("pool_int64s")?,
        attr_floats(node, "weights")?,
    )
    .map_err(|e| format!("TfIdfVectorizer: {e}"))
}

fn claim_tfidf(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, INDEX)?;
    let r = ctx.expect_rank(node, 0)?;
    if r > 2 {
        decline!("TfIdfVectorizer: a rank-{r} input is not [C] or [N, C]");
    }
    tfidf_spec(node).or_decline()?;
    Ok(())
}

/// Counted on the host (the `tfidf_vectorizer` kernel); folded when the tokens are a constant.
fn lower_tfidf(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let spec = tfidf_spec(node).or_invalid(node)?;
    if let Some(t) = ctx.const_input(node, 0)
        && let Some(v) = t.to_i64_vec()
    {
        let y = spec.run(&t.dims.clone(), &v).or_invalid(node)?;
        ctx.fold(node, 0, y);
        return Ok(());
    }
    let x = ctx.input(node, 0)?;
    let get = |name: &str| attr_ints(node, name).ok().flatten().unwrap_or_default();
    let int = |name: &str| attr_int(node, name).ok().flatten().unwrap_or(0);
    let mode = match spec.mode {
        TfIdfMode::Tf => 0,
        TfIdfMode::Idf => 1,
        TfIdfMode::TfIdf => 2,
    };
    let attrs = KernelAttrs::new()
        .int("mode", mode)
        .int("min_gram_length", int("min_gram_length"))
        .int("max_gram_length", int("max_gram_length"))
        .int("max_skip_count", int("max_skip_count"))
        .ints("ngram_counts", get("ngram_counts"))
        .ints("ngram_indexes", get("ngram_indexes"))
        .ints("pool_int64s", get("pool_int64s"));
    let weights = match &spec.weights {
        Some(w) => HostArg::Const(TensorData::from_f32(vec![w.len() as i64], w)),
        None => HostArg::Absent,
    };
    let out = ctx.host_kernel(
        node,
        TFIDF_KERNEL,
        vec![HostArg::Value(x), weights],
        attrs,
        &[DataType::Float],
    )?;
    ctx.finish(node, 0, out[0], DataType::Float)
}

/// `TfIdfVectorizer`: input 0 the tokens (int32 / int64, `[C]` or `[N, C]`), input 1 the
/// `weights` (float32) when the node has them; the attributes as the node's.
fn tfidf_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = kernel::input(inputs, 0)?;
    let mode = usize::try_from(attrs.get_int("mode")?)
        .ok()
        .and_then(|m| MODES.get(m))
        .ok_or("TfIdfVectorizer: bad mode")?;
    let weights = kernel::opt_input(inputs, 1).map(kernel::f32s).transpose()?;
    let spec = TfIdfSpec::new(
        mode,
        attrs.get_int("min_gram_length")?,
        attrs.get_int("max_gram_length")?,
        attrs.get_int("max_skip_count")?,
        attrs.get_ints("ngram_counts")?,
        attrs.get_ints("ngram_indexes")?,
        attrs.get_ints("pool_int64s")?,
        weights,
    )?;
    Ok(vec![spec.run(&x.dims, &kernel::i64s(x)?)?])
}

// ---------------------------------------------------------------------------------------------
// Strings: shared helpers.

/// Input `i` of `node` as a host-kernel argument: the constant when it is known at plan time
/// (a string constant never becomes an array), else its slot's host value.
pub(crate) fn host_input(ctx: &mut LowerCtx, node: &Node, i: usize) -> Result<HostArg, PlanError> {
    if let Some(t) = ctx.const_input(node, i) {
        return Ok(HostArg::Const(t.clone()));
    }
    Ok(HostArg::Value(ctx.input(node, i)?))
}

/// A one-string constant argument (a pattern, a delimiter).
fn string_scalar(s: &[u8]) -> HostArg {
    HostArg::Const(TensorData::from_strings(vec![], &[s]).expect("one element for a scalar"))
}

/// The elements of a string kernel input.
pub(crate) fn strings_of(t: &TensorData) -> Result<Vec<&[u8]>, String> {
    if t.dtype != DataType::String {
        return Err(format!("host kernel input is {}, not string", t.dtype));
    }
    t.strings()
        .ok_or_else(|| "host kernel input holds malformed string bytes".to_string())
}

/// A string tensor of `values`, refused past the kernels' size bounds.
pub(crate) fn string_tensor<S: AsRef<[u8]>>(
    dims: Vec<i64>,
    values: &[S],
) -> Result<TensorData, String> {
    check_string_size(values.len(), values.iter().map(|v| v.as_ref().len()).sum())?;
    TensorData::from_strings(dims, values)
}

/// Errors past [`MAX_STRING_ELEMENTS`] elements or [`MAX_STRING_BYTES`] bytes.
fn check_string_size(elements: usize, bytes: usize) -> Result<(), String> {
    if elements > MAX_STRING_ELEMENTS || bytes.saturating_add(8 * elements) > MAX_STRING_BYTES {
        return Err(format!(
            "a string result of {elements} elements and {bytes} bytes is over the host kernels' \
             bound ({MAX_STRING_ELEMENTS} elements, {MAX_STRING_BYTES} bytes)"
        ));
    }
    Ok(())
}

/// A broadcast's dims and, per element (row-major), the flat indices into its two inputs.
type Broadcast = (Vec<i64>, Vec<(usize, usize)>);

/// The broadcast of dims `a` and `b` and, for each element of it (row-major), the flat
/// indices into `a` and `b` (numpy broadcasting).
fn broadcast_indices(a: &[i64], b: &[i64]) -> Result<Broadcast, String> {
    let out = crate::step::broadcast_shapes(a, b)?;
    let n = out
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
        .filter(|&n| n <= MAX_STRING_ELEMENTS)
        .ok_or_else(|| format!("the broadcast of {a:?} and {b:?} is too large"))?;
    let rank = out.len();
    // Each input's element strides over the output's axes (0 where it broadcasts).
    let strides = |dims: &[i64]| -> Vec<usize> {
        let mut st = vec![0usize; rank];
        let mut step = 1usize;
        for (k, &d) in dims.iter().enumerate().rev() {
            let axis = rank - dims.len() + k;
            if d != 1 {
                st[axis] = step;
            }
            step *= d as usize;
        }
        st
    };
    let (sa, sb) = (strides(a), strides(b));
    let mut index = vec![0i64; rank];
    let (mut ia, mut ib) = (0usize, 0usize);
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        pairs.push((ia, ib));
        // Advance the row-major output index, carrying into the inputs' offsets.
        for axis in (0..rank).rev() {
            index[axis] += 1;
            ia += sa[axis];
            ib += sb[axis];
            if index[axis] < out[axis] {
                break;
            }
            ia -= sa[axis] * out[axis] as usize;
            ib -= sb[axis] * out[axis] as usize;
            index[axis] = 0;
        }
    }
    Ok((out, pairs))
}

/// Two string inputs of the same kind (Equal, StringConcat).
fn claim_two_strings(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, STRING)?;
    ctx.expect_dtype(node, 1, STRING)?;
    Ok(())
}

/// Lowers a two-input string kernel with one output of `out_dtype`.
fn lower_two_strings(
    ctx: &mut LowerCtx,
    node: &Node,
    kernel: &str,
    out_dtype: DataType,
) -> Result<(), PlanError> {
    let a = host_input(ctx, node, 0)?;
    let b = host_input(ctx, node, 1)?;
    let out = ctx.host_kernel(node, kernel, vec![a, b], KernelAttrs::new(), &[out_dtype])?;
    ctx.finish(node, 0, out[0], out_dtype)
}

// ---------------------------------------------------------------------------------------------
// Equal on strings (the elementwise family claims it from opset 19, where ONNX added strings).

/// Lowers `Equal` of two string inputs: the `string_equal` kernel.
pub(crate) fn lower_string_equal(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    lower_two_strings(ctx, node, STRING_EQUAL_KERNEL, DataType::Bool)
}

/// `Equal`: inputs 0 and 1 strings; a bool tensor of their broadcast shape.
fn string_equal_kernel(
    inputs: &[Option<TensorData>],
    _attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let (a, b) = (kernel::input(inputs, 0)?, kernel::input(inputs, 1)?);
    let (sa, sb) = (strings_of(a)?, strings_of(b)?);
    let (dims, pairs) = broadcast_indices(&a.dims, &b.dims)?;
    let bytes: Vec<u8> = pairs.iter().map(|&(i, j)| (sa[i] == sb[j]) as u8).collect();
    Ok(vec![TensorData::new(DataType::Bool, dims, bytes)?])
}

// ---------------------------------------------------------------------------------------------
// StringConcat (opset 20).

fn claim_concat(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim_two_strings(ctx, node)
}

fn lower_concat(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    lower_two_strings(ctx, node, STRING_CONCAT_KERNEL, DataType::String)
}

/// `StringConcat`: inputs 0 and 1 strings; `x + y` elementwise over their broadcast shape.
fn string_concat_kernel(
    inputs: &[Option<TensorData>],
    _attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let (a, b) = (kernel::input(inputs, 0)?, kernel::input(inputs, 1)?);
    let (sa, sb) = (strings_of(a)?, strings_of(b)?);
    let (dims, pairs) = broadcast_indices(&a.dims, &b.dims)?;
    let total = pairs
        .iter()
        .try_fold(0usize, |acc, &(i, j)| {
            acc.checked_add(sa[i].len() + sb[j].len())
        })
        .unwrap_or(usize::MAX);
    check_string_size(pairs.len(), total)?;
    let joined: Vec<Vec<u8>> = pairs
        .iter()
        .map(|&(i, j)| [sa[i], sb[j]].concat())
        .collect();
    Ok(vec![string_tensor(dims, &joined)?])
}

// ---------------------------------------------------------------------------------------------
// StringSplit (opset 20).

fn claim_split(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, STRING)?;
    attr_bytes(node, "delimiter").or_decline()?;
    attr_int(node, "maxsplit").or_decline()?;
    Ok(())
}

fn lower_split(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let delimiter = attr_bytes(node, "delimiter")
        .or_invalid(node)?
        .unwrap_or_default();
    // Absent or negative: no limit (as ORT: its default is int64 max - 1).
    let maxsplit = attr_int(node, "maxsplit").or_invalid(node)?.unwrap_or(-1);
    let x = host_input(ctx, node, 0)?;
    let out = ctx.host_kernel(
        node,
        STRING_SPLIT_KERNEL,
        vec![x, string_scalar(&delimiter)],
        KernelAttrs::new().int("maxsplit", maxsplit),
        &[DataType::String, DataType::Int64],
    )?;
    ctx.finish(node, 0, out[0], DataType::String)?;
    ctx.finish(node, 1, out[1], DataType::Int64)
}

/// The substrings of `s` split at `delimiter` with at most `max_splits` splits (`None`: no
/// limit), as ORT's CPU EP computes them: an empty string has none; an empty delimiter splits
/// at runs of spaces, ignoring leading and trailing ones (a split-off remainder keeps its inner
/// spaces, less the trailing ones).
fn split_one<'a>(s: &'a [u8], delimiter: &[u8], max_splits: Option<u64>) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    if s.is_empty() {
        return out;
    }
    let limit_hit = |count: usize| max_splits.is_some_and(|m| count as u64 == m);
    if delimiter.is_empty() {
        let mut pos = s.iter().position(|&c| c != b' ');
        while let Some(start) = pos {
            if limit_hit(out.len()) {
                let end = s.iter().rposition(|&c| c != b' ').map_or(start, |e| e + 1);
                out.push(&s[start..end]);
                break;
            }
            let end = s[start..]
                .iter()
                .position(|&c| c == b' ')
                .map_or(s.len(), |e| start + e);
            out.push(&s[start..end]);
            pos = s[end..].iter().position(|&c| c != b' ').map(|p| end + p);
        }
        return out;
    }
    let mut start = 0usize;
    loop {
        let next = find(&s[start..], delimiter).map(|p| start + p);
        match next {
            Some(p) if !limit_hit(out.len()) => {
                out.push(&s[start..p]);
                start = p + delimiter.len();
            }
            _ => {
                out.push(&s[start..]);
                break;
            }
        }
    }
    out
}

/// The first position of `needle` (non-empty) in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `StringSplit`: input 0 the strings, input 1 the delimiter (one string); attribute
/// `maxsplit` (negative: no limit). Outputs the substrings (`x.dims + [longest]`, padded with
/// empty strings) and the count of each (int64, `x.dims`).
fn string_split_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = kernel::input(inputs, 0)?;
    let delimiter = strings_of(kernel::input(inputs, 1)?)?;
    let delimiter = delimiter.first().copied().unwrap_or_default();
    let max_splits = u64::try_from(attrs.get_int("maxsplit")?).ok();
    let parts: Vec<Vec<&[u8]>> = strings_of(x)?
        .into_iter()
        .map(|s| split_one(s, delimiter, max_splits))
        .collect();
    let longest = parts.iter().map(Vec::len).max().unwrap_or(0);
    let elements = parts.len().saturating_mul(longest);
    let bytes: usize = parts.iter().flatten().map(|p| p.len()).sum();
    check_string_size(elements, bytes)?;
    let mut flat: Vec<&[u8]> = Vec::with_capacity(elements);
    for p in &parts {
        flat.extend_from_slice(p);
        flat.extend(std::iter::repeat_n(&b""[..], longest - p.len()));
    }
    let mut dims = x.dims.clone();
    dims.push(longest as i64);
    let counts: Vec<i64> = parts.iter().map(|p| p.len() as i64).collect();
    Ok(vec![
        string_tensor(dims, &flat)?,
        TensorData::from_i64(x.dims.clone(), &counts),
    ])
}

// ---------------------------------------------------------------------------------------------
// RegexFullMatch (opset 20).

/// The node's pattern, compiled (a decline reason when it can't be).
fn regex_of(node: &Node) -> Result<std::sync::Arc<regex::bytes::Regex>, String> {
    let pattern =
        attr_bytes(node, "pattern")?.ok_or("RegexFullMatch: the pattern attribute is required")?;
    re2::compile(&pattern).map_err(|e| format!("RegexFullMatch: {e}"))
}

fn claim_regex(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, STRING)?;
    regex_of(node).or_decline()?;
    Ok(())
}

fn lower_regex(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    regex_of(node).or_invalid(node)?;
    let pattern = attr_bytes(node, "pattern")
        .or_invalid(node)?
        .unwrap_or_default();
    let x = host_input(ctx, node, 0)?;
    let out = ctx.host_kernel(
        node,
        REGEX_FULL_MATCH_KERNEL,
        vec![x, string_scalar(&pattern)],
        KernelAttrs::new(),
        &[DataType::Bool],
    )?;
    ctx.finish(node, 0, out[0], DataType::Bool)
}

/// `RegexFullMatch`: input 0 the strings, input 1 the pattern (one string, RE2 syntax); a bool
/// tensor of the input's shape, true where the whole element matches (RE2's `FullMatch`).
fn regex_full_match_kernel(
    inputs: &[Option<TensorData>],
    _attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = kernel::input(inputs, 0)?;
    let pattern = strings_of(kernel::input(inputs, 1)?)?;
    let re = re2::compile(pattern.first().copied().unwrap_or_default())?;
    let bytes: Vec<u8> = strings_of(x)?
        .into_iter()
        .map(|s| re2::full_match(&re, s) as u8)
        .collect();
    Ok(vec![TensorData::new(
        DataType::Bool,
        x.dims.clone(),
        bytes,
    )?])
}

// ---------------------------------------------------------------------------------------------
// StringNormalizer (opset 10).

/// How StringNormalizer changes case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CaseChange {
    None = 0,
    Lower = 1,
    Upper = 2,
}

/// The validated attributes: case change, case-sensitive stopword matching, ASCII-only case
/// mapping (the C locale), and the stopwords.
struct NormalizerSpec {
    case: CaseChange,
    case_sensitive: bool,
    ascii: bool,
    stopwords: Vec<Vec<u8>>,
}

/// Locales whose case mapping this kernel implements: the default (ORT's `en_US.UTF-8`) and
/// other spellings of it (Unicode simple case mapping, as glibc's `towlower`/`towupper`), and
/// the C locale (ASCII letters only).
fn locale_is_ascii(locale: &str) -> Option<bool> {
    let l = locale.to_ascii_lowercase().replace('-', "_");
    match l.as_str() {
        "en_us" | "en_us.utf8" | "en_us.utf_8" | "c.utf8" | "c.utf_8" => Some(false),
        "c" | "posix" => Some(true),
        _ => None,
    }
}

fn normalizer_spec(node: &Node) -> Result<NormalizerSpec, String> {
    let case = match attr_bytes(node, "case_change_action")?.as_deref() {
        None | Some(b"NONE") => CaseChange::None,
        Some(b"LOWER") => CaseChange::Lower,
        Some(b"UPPER") => CaseChange::Upper,
        Some(other) => {
            return Err(format!(
                "StringNormalizer: case_change_action {:?} is not LOWER, UPPER or NONE",
                String::from_utf8_lossy(other)
            ));
        }
    };
    let case_sensitive = attr_int(node, "is_case_sensitive")?.unwrap_or(0) != 0;
    let stopwords = attr_bytes_list(node, "stopwords")?.unwrap_or_default();
    // the locale matters only where case is mapped (a case change, case-blind stopwords)
    let maps_case = case != CaseChange::None || (!case_sensitive && !stopwords.is_empty());
    let ascii = match attr_bytes(node, "locale")? {
        Some(_) if !maps_case => false,
        None => false,
        Some(l) => {
            let l = String::from_utf8_lossy(&l).into_owned();
            locale_is_ascii(&l).ok_or_else(|| {
                format!(
                    "StringNormalizer: locale {l:?} is not claimed (en_US and C case mapping only)"
                )
            })?
        }
    };
    if !case_sensitive && stopwords.iter().any(|w| std::str::from_utf8(w).is_err()) {
        return Err("StringNormalizer: a stopword is not valid UTF-8".into());
    }
    Ok(NormalizerSpec {
        case,
        case_sensitive,
        ascii,
        stopwords,
    })
}

fn claim_normalizer(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, STRING)?;
    if let Some(r) = node.input(0).and_then(|x| ctx.rank(x))
        && !(1..=2).contains(&r)
    {
        decline!("StringNormalizer: a rank-{r} input is not [C] or [1, C]");
    }
    normalizer_spec(node).or_decline()?;
    Ok(())
}

fn lower_normalizer(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let spec = normalizer_spec(node).or_invalid(node)?;
    let x = host_input(ctx, node, 0)?;
    let words = TensorData::from_strings(vec![spec.stopwords.len() as i64], &spec.stopwords)
        .or_invalid(node)?;
    let out = ctx.host_kernel(
        node,
        STRING_NORMALIZER_KERNEL,
        vec![x, HostArg::Const(words)],
        KernelAttrs::new()
            .int("case", spec.case as i64)
            .bool("case_sensitive", spec.case_sensitive)
            .bool("ascii", spec.ascii),
        &[DataType::String],
    )?;
    ctx.finish(node, 0, out[0], DataType::String)
}

/// The simple (one-character) lowercase of `c`, as glibc's `towlower` in `en_US.UTF-8`; ASCII
/// letters only when `ascii`.
fn lower_char(c: char, ascii: bool) -> char {
    if ascii {
        return c.to_ascii_lowercase();
    }
    let mut it = c.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        // U+0130 (capital I with dot) is the one letter whose full lowercase has two
        // characters; its simple lowercase is 'i'.
        _ if c == '\u{130}' => 'i',
        _ => c,
    }
}

/// The simple (one-character) uppercase of `c`, as glibc's `towupper` in `en_US.UTF-8`: a
/// letter whose full uppercase has several characters ('ß' -> "SS") keeps itself, except the
/// Greek letters with ypogegrammeni, whose simple uppercase is the letter with prosgegrammeni.
fn upper_char(c: char, ascii: bool) -> char {
    if ascii {
        return c.to_ascii_uppercase();
    }
    let mut it = c.to_uppercase();
    match (it.next(), it.next()) {
        (Some(u), None) => u,
        _ => {
            let v = c as u32;
            let simple = match v {
                0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => v + 8,
                0x1FB3 => 0x1FBC,
                0x1FC3 => 0x1FCC,
                0x1FF3 => 0x1FFC,
                _ => v,
            };
            char::from_u32(simple).unwrap_or(c)
        }
    }
}

/// `s` with every character mapped by `f`.
fn map_chars(s: &str, f: impl Fn(char) -> char) -> String {
    s.chars().map(f).collect()
}

/// `StringNormalizer`: input 0 the strings (`[C]` or `[1, C]`, C > 0, valid UTF-8), input 1
/// the stopwords; attributes `case` (0 none, 1 lower, 2 upper), `case_sensitive`, `ascii`.
/// Drops the elements equal to a stopword (compared lowercased unless case-sensitive), changes
/// the case of the rest; an empty result is one empty string.
fn string_normalizer_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = kernel::input(inputs, 0)?;
    let stopwords = strings_of(kernel::input(inputs, 1)?)?;
    let case = match attrs.get_int("case")? {
        0 => CaseChange::None,
        1 => CaseChange::Lower,
        2 => CaseChange::Upper,
        c => return Err(format!("StringNormalizer: bad case change {c}")),
    };
    let case_sensitive = attrs.get_bool("case_sensitive")?;
    let ascii = attrs.get_bool("ascii")?;
    let two_d = match x.dims.as_slice() {
        [c] if *c > 0 => false,
        [1, c] if *c > 0 => true,
        [_] => return Err("StringNormalizer: a [C] input needs C > 0".into()),
        dims => {
            return Err(format!(
                "StringNormalizer: input dims {dims:?}: [C > 0] or [1, C > 0] are allowed"
            ));
        }
    };
    let texts: Vec<&str> = strings_of(x)?
        .into_iter()
        .map(std::str::from_utf8)
        .collect::<Result<_, _>>()
        .map_err(|_| "StringNormalizer: input strings must be valid UTF-8".to_string())?;
    let lower = |s: &str| map_chars(s, |c| lower_char(c, ascii));
    let kept: Vec<&str> = if stopwords.is_empty() {
        texts
    } else if case_sensitive {
        let stops: std::collections::HashSet<&[u8]> = stopwords.iter().copied().collect();
        texts
            .into_iter()
            .filter(|s| !stops.contains(s.as_bytes()))
            .collect()
    } else {
        let stops: std::collections::HashSet<String> = stopwords
            .iter()
            .map(|w| std::str::from_utf8(w).map(lower))
            .collect::<Result<_, _>>()
            .map_err(|_| "StringNormalizer: a stopword is not valid UTF-8".to_string())?;
        texts
            .into_iter()
            .filter(|s| !stops.contains(&lower(s)))
            .collect()
    };
    let mut out: Vec<String> = kept
        .into_iter()
        .map(|s| match case {
            CaseChange::None => s.to_string(),
            CaseChange::Lower => lower(s),
            CaseChange::Upper => map_chars(s, |c| upper_char(c, ascii)),
        })
        .collect();
    if out.is_empty() {
        out.push(String::new());
    }
    let dims = if two_d {
        vec![1, out.len() as i64]
    } else {
        vec![out.len() as i64]
    };
    Ok(vec![string_tensor(dims, &out)?])
}
