//! Stores the constant right operand of each matmul transposed, for MLX's CUDA backend.
//!
//! A one-row product `x @ W` runs through MLX's own GEMV kernel on CUDA only when `W` is read
//! transposed (its rows are the output features, as a PyTorch `Linear` stores them); with `W`
//! row-major `[K, N]`, as ONNX exporters write a `MatMul` weight, MLX hands it to cuBLASLt,
//! whose generic kernel takes several times longer for one row (measured on an H200: 9.6 us
//! against 2.3 us per call for llama-tiny's projections). Every token of a decoder is such a
//! product, so on the GPU stream the runtime rewrites `MatMul { a, b }` over a constant 2-D `b`
//! into [`Step::MatMulTransposed`] over `b` transposed once here. Products of many rows go
//! to cuBLASLt either way, which takes both layouts at the same speed.

use std::collections::HashMap;

use crate::plan::Plan;
use crate::step::{Slot, Step};

/// Rewrites every `MatMul` whose right operand is a 2-D constant into a
/// [`Step::MatMulTransposed`] over that constant transposed (one transposed copy per
/// constant, however many matmuls read it); drops the originals nothing reads any more.
/// Returns how many steps were rewritten.
pub fn transpose_constant_weights(plan: &mut Plan) -> usize {
    let consts = plan.constant_positions();
    let mut made: HashMap<Slot, Slot> = HashMap::new();
    let mut rewritten = 0;
    for i in 0..plan.steps.len() {
        let Step::MatMul { a, b, out } = plan.steps[i] else {
            continue;
        };
        let Some(&bi) = consts.get(&b) else {
            continue;
        };
        let bt = match made.get(&b) {
            Some(&s) => s,
            None => {
                let w = &plan.constants[bi].1;
                if w.dims.len() != 2 {
                    continue;
                }
                let Some(t) = crate::consts::transpose(w, &[1, 0]) else {
                    continue;
                };
                let name = format!("{}'transposed", plan.slots[b.index()].name);
                let slot = plan.push_constant(name, t);
                made.insert(b, slot);
                slot
            }
        };
        plan.steps[i] = Step::MatMulTransposed { a, bt, out };
        rewritten += 1;
    }
    if rewritten > 0 {
        plan.drop_unread_constants();
    }
    rewritten
}
