//! Text: TfIdfVectorizer (n-gram counting over integer tokens, a host kernel).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{HostKernel, TfIdfSpec};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "TfIdfVectorizer", 9, MAX, claim_tfidf, lower_tfidf);
}

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

/// Counted on the host ([`HostKernel::TfIdf`]); folded when the tokens are a constant.
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
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::HostKernel {
        kernel: HostKernel::TfIdf(spec),
        inputs: vec![x],
        outs: vec![out],
    });
    ctx.finish(node, 0, out, DataType::Float)
}
