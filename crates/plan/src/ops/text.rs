//! Text: TfIdfVectorizer (n-gram counting over integer tokens, a host kernel).

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::registry::ClaimCtx;
use crate::step::{TfIdfMode, TfIdfSpec};

/// The host kernel counting n-grams.
const TFIDF_KERNEL: &str = "tfidf_vectorizer";

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "TfIdfVectorizer", 9, MAX, claim_tfidf, lower_tfidf);
    r.kernel(TFIDF_KERNEL, tfidf_kernel);
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
