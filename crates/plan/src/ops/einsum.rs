//! Einsum, decomposed into diagonals (`mlx_gather`), sums, transposes, reshapes and, per pair of
//! operands, `mlx_matmul` (floats with a contraction) or a broadcast multiply and sum.

use std::collections::BTreeSet;

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, DimRule, ReduceAxes, ReduceOp, ReshapeTarget};

/// Registers Einsum.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Einsum", 12, MAX, claim_einsum, lower_einsum);
}

/// A subscript: a letter, or one of the dims an ellipsis covers (right-aligned across
/// operands, so `Ell(i)` is the same dim of the broadcast ellipsis everywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Label {
    /// Dim `i` of the broadcast ellipsis.
    Ell(usize),
    /// A letter.
    Char(u8),
}

/// A parsed equation with every operand's labels (one per dim) and the output's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Equation {
    /// Labels of each input, one per dim.
    pub inputs: Vec<Vec<Label>>,
    /// Labels of the output.
    pub output: Vec<Label>,
}

/// One term: its letters and where its ellipsis sits (index into the letters), if any.
fn parse_term(term: &str) -> Result<(Vec<u8>, Option<usize>), String> {
    let bytes = term.as_bytes();
    let (mut letters, mut ell) = (Vec::new(), None);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'.' {
            if ell.is_some() || !term[i..].starts_with("...") {
                return Err(format!("Einsum: malformed ellipsis in '{term}'"));
            }
            ell = Some(letters.len());
            i += 3;
            continue;
        }
        if !bytes[i].is_ascii_alphabetic() {
            return Err(format!("Einsum: invalid subscript '{}'", bytes[i] as char));
        }
        letters.push(bytes[i]);
        i += 1;
    }
    Ok((letters, ell))
}

/// Parses `equation` for inputs of the given ranks.
pub(crate) fn parse_equation(equation: &str, ranks: &[usize]) -> Result<Equation, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err(format!(
            "Einsum: '{equation}' has {} operands but the node has {} inputs",
            terms.len(),
            ranks.len()
        ));
    }
    let parsed: Vec<(Vec<u8>, Option<usize>)> = terms
        .iter()
        .map(|t| parse_term(t))
        .collect::<Result<_, _>>()?;
    let mut ell_len = Vec::with_capacity(ranks.len());
    for (i, (letters, ell)) in parsed.iter().enumerate() {
        let n = match ell {
            Some(_) if ranks[i] >= letters.len() => ranks[i] - letters.len(),
            None if ranks[i] == letters.len() => 0,
            _ => {
                return Err(format!(
                    "Einsum: operand {i} ('{}') does not match its rank {}",
                    terms[i], ranks[i]
                ));
            }
        };
        ell_len.push(n);
    }
    let e = ell_len.iter().copied().max().unwrap_or(0);
    let inputs: Vec<Vec<Label>> = parsed
        .iter()
        .zip(&ell_len)
        .map(|((letters, ell), &n)| {
            let mut v: Vec<Label> = letters.iter().map(|&c| Label::Char(c)).collect();
            if let Some(at) = ell {
                let dims = (e - n..e).map(Label::Ell);
                v.splice(*at..*at, dims);
            }
            v
        })
        .collect();
    let output = match rhs {
        Some(r) => {
            let (letters, ell) = parse_term(r)?;
            if ell.is_none() && e > 0 {
                return Err(
                    "Einsum: an output without '...' sums broadcast dims (not claimed)".into(),
                );
            }
            let mut v: Vec<Label> = letters.iter().map(|&c| Label::Char(c)).collect();
            if let Some(at) = ell {
                v.splice(at..at, (0..e).map(Label::Ell));
            }
            let mut seen = BTreeSet::new();
            for l in &v {
                if !seen.insert(*l) {
                    return Err(format!("Einsum: output subscript {l:?} is repeated"));
                }
                if !inputs.iter().any(|t| t.contains(l)) {
                    return Err(format!("Einsum: output subscript {l:?} is in no input"));
                }
            }
            v
        }
        None => {
            let all: Vec<u8> = parsed.iter().flat_map(|(l, _)| l.iter().copied()).collect();
            let mut once: Vec<u8> = all
                .iter()
                .copied()
                .filter(|c| all.iter().filter(|d| *d == c).count() == 1)
                .collect();
            if once.iter().any(u8::is_ascii_uppercase) && once.iter().any(u8::is_ascii_lowercase) {
                return Err(
                    "Einsum: implicit output with mixed-case subscripts is not claimed (ordering)"
                        .into(),
                );
            }
            once.sort_unstable();
            let mut v: Vec<Label> = (0..e).map(Label::Ell).collect();
            v.extend(once.into_iter().map(Label::Char));
            v
        }
    };
    Ok(Equation { inputs, output })
}

fn equation_of(node: &Node) -> Result<String, String> {
    attr_str(node, "equation")?.ok_or_else(|| "Einsum: the 'equation' attribute is missing".into())
}

const EINSUM_TYPES: &[DataType] = &[
    DataType::Float,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int32,
    DataType::Int64,
];

fn claim_einsum(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if node.inputs.is_empty() {
        decline!("Einsum: no inputs");
    }
    same_dtypes(ctx, node, 0..node.inputs.len(), EINSUM_TYPES)?;
    let mut ranks = Vec::new();
    for i in 0..node.inputs.len() {
        ranks.push(ctx.expect_rank(node, i)?);
    }
    parse_equation(&equation_of(node).or_decline()?, &ranks).or_decline()?;
    Ok(())
}

/// A value and the label of each of its dims.
struct Operand {
    slot: Slot,
    labels: Vec<Label>,
}

fn perm_to(labels: &[Label], order: &[Label]) -> Vec<usize> {
    order
        .iter()
        .map(|l| labels.iter().position(|m| m == l).expect("label present"))
        .collect()
}

fn transpose(ctx: &mut LowerCtx, x: Slot, perm: Vec<usize>, dt: DataType) -> Slot {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return x;
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: Some(perm.into_iter().map(|p| p as i32).collect()),
        out,
    });
    out
}

fn reshape(ctx: &mut LowerCtx, x: Slot, rules: Vec<DimRule>, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x,
        target: ReshapeTarget::Dims(rules),
        out,
    });
    out
}

/// Takes repeated labels' diagonals, then sums the labels nothing else needs.
fn prepare(ctx: &mut LowerCtx, mut op: Operand, needed: &BTreeSet<Label>, dt: DataType) -> Operand {
    loop {
        let dup = op.labels.iter().enumerate().find_map(|(i, l)| {
            op.labels[i + 1..]
                .iter()
                .position(|m| m == l)
                .map(|j| (i, i + 1 + j))
        });
        let Some((i, j)) = dup else { break };
        let pos = ctx.temp(DataType::Int32);
        ctx.push(Step::Iota {
            like: op.slot,
            axis: i as i32,
            dtype: DataType::Int32,
            out: pos,
        });
        let g = ctx.temp(dt);
        ctx.push(Step::Gather {
            x: op.slot,
            indices: vec![pos, pos],
            axes: vec![i as i32, j as i32],
            out: g,
        });
        // [n, dims with 1 at i and j] -> [n, other dims].
        let slot = ctx.squeeze(g, vec![1 + i as i64, 1 + j as i64], dt);
        let mut labels = vec![op.labels[i]];
        labels.extend(
            op.labels
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != i && *k != j)
                .map(|(_, l)| *l),
        );
        op = Operand { slot, labels };
    }
    let drop: Vec<i64> = op
        .labels
        .iter()
        .enumerate()
        .filter(|(_, l)| !needed.contains(l))
        .map(|(k, _)| k as i64)
        .collect();
    if !drop.is_empty() {
        let out = ctx.temp(dt);
        ctx.push(Step::Reduce {
            op: ReduceOp::Sum,
            x: op.slot,
            axes: ReduceAxes::Static(drop),
            keepdims: false,
            out,
        });
        op.labels.retain(|l| needed.contains(l));
        op.slot = out;
    }
    op
}

/// Contracts `a` with `b`, keeping the labels in `keep`.
fn contract(
    ctx: &mut LowerCtx,
    a: Operand,
    b: Operand,
    keep: &BTreeSet<Label>,
    dt: DataType,
) -> Operand {
    let shared: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l))
        .collect();
    let batch: Vec<Label> = shared
        .iter()
        .copied()
        .filter(|l| keep.contains(l))
        .collect();
    let summed: Vec<Label> = shared
        .iter()
        .copied()
        .filter(|l| !keep.contains(l))
        .collect();
    let left: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| !shared.contains(l))
        .collect();
    let right: Vec<Label> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !shared.contains(l))
        .collect();
    let (nb, nl, nr, nc) = (batch.len(), left.len(), right.len(), summed.len());
    if nc == 0 || !dt.is_float() {
        // [batch, left, 1.., summed] * [batch, 1.., right, summed], then sum the summed dims.
        let order_a: Vec<Label> = [&batch[..], &left, &summed].concat();
        let order_b: Vec<Label> = [&batch[..], &right, &summed].concat();
        let pa = perm_to(&a.labels, &order_a);
        let xa = transpose(ctx, a.slot, pa, dt);
        let xa = ctx.unsqueeze(xa, ((nb + nl) as i64..(nb + nl + nr) as i64).collect(), dt);
        let pb = perm_to(&b.labels, &order_b);
        let xb = transpose(ctx, b.slot, pb, dt);
        let xb = ctx.unsqueeze(xb, (nb as i64..(nb + nl) as i64).collect(), dt);
        let mut y = ctx.binary(B::Multiply, xa, xb, dt);
        if nc > 0 {
            let n = (nb + nl + nr) as i64;
            let out = ctx.temp(dt);
            ctx.push(Step::Reduce {
                op: ReduceOp::Sum,
                x: y,
                axes: ReduceAxes::Static((n..n + nc as i64).collect()),
                keepdims: false,
                out,
            });
            y = out;
        }
        return Operand {
            slot: y,
            labels: [&batch[..], &left, &right].concat(),
        };
    }
    // Matrix product: the last left label is the row, the last right label the column; the
    // other left / right labels join the batch dims (size 1 in the other operand).
    let (lx, lm) = match left.split_last() {
        Some((m, rest)) => (rest.to_vec(), Some(*m)),
        None => (vec![], None),
    };
    let (rx, rn) = match right.split_last() {
        Some((n, rest)) => (rest.to_vec(), Some(*n)),
        None => (vec![], None),
    };
    // a: [batch, lx, 1 x |rx|, lm | 1, summed...] with the summed dims merged.
    let order_a: Vec<Label> = [&batch[..], &lx, lm.as_slice(), &summed].concat();
    let pa = perm_to(&a.labels, &order_a);
    let mut xa = transpose(ctx, a.slot, pa, dt);
    let at = (nb + lx.len()) as i64;
    xa = ctx.unsqueeze(xa, (at..at + rx.len() as i64).collect(), dt);
    let mut rank_a = nb + lx.len() + rx.len() + lm.iter().count() + nc;
    if lm.is_none() {
        let at = (rank_a - nc) as i64;
        xa = ctx.unsqueeze(xa, vec![at], dt);
        rank_a += 1;
    }
    if nc > 1 {
        let mut rules: Vec<DimRule> = (0..rank_a - nc).map(DimRule::copy).collect();
        rules.push(DimRule::product(&(rank_a - nc..rank_a).collect::<Vec<_>>()));
        xa = reshape(ctx, xa, rules, dt);
    }
    // b: [batch, 1 x |lx|, rx, summed..., rn | 1] with the summed dims merged.
    let order_b: Vec<Label> = [&batch[..], &rx, &summed, rn.as_slice()].concat();
    let pb = perm_to(&b.labels, &order_b);
    let mut xb = transpose(ctx, b.slot, pb, dt);
    xb = ctx.unsqueeze(xb, (nb as i64..(nb + lx.len()) as i64).collect(), dt);
    let mut rank_b = nb + lx.len() + rx.len() + nc + rn.iter().count();
    if rn.is_none() {
        xb = ctx.unsqueeze(xb, vec![rank_b as i64], dt);
        rank_b += 1;
    }
    if nc > 1 {
        let first = rank_b - 1 - nc;
        let mut rules: Vec<DimRule> = (0..first).map(DimRule::copy).collect();
        rules.push(DimRule::product(&(first..first + nc).collect::<Vec<_>>()));
        rules.push(DimRule::copy(rank_b - 1));
        xb = reshape(ctx, xb, rules, dt);
    }
    let y = ctx.temp(dt);
    ctx.push(Step::MatMul {
        a: xa,
        b: xb,
        out: y,
    });
    // [batch, lx, rx, lm | 1, rn | 1]
    let base = (nb + lx.len() + rx.len()) as i64;
    let mut squeeze = Vec::new();
    if lm.is_none() {
        squeeze.push(base);
    }
    if rn.is_none() {
        squeeze.push(base + 1);
    }
    let y = ctx.squeeze(y, squeeze, dt);
    Operand {
        slot: y,
        labels: [&batch[..], &lx, &rx, lm.as_slice(), rn.as_slice()].concat(),
    }
}

fn lower_einsum(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let mut ranks = Vec::new();
    for i in 0..node.inputs.len() {
        ranks.push(ctx.need_rank(node, i)?);
    }
    let eq = parse_equation(&equation_of(node).or_invalid(node)?, &ranks).or_invalid(node)?;
    let out_set: BTreeSet<Label> = eq.output.iter().copied().collect();
    // Labels needed after operand `i` is folded in: the output's and later operands'.
    let later = |i: usize| -> BTreeSet<Label> {
        let mut s = out_set.clone();
        for t in &eq.inputs[i + 1..] {
            s.extend(t.iter().copied());
        }
        s
    };
    let needed_by_others = |i: usize| -> BTreeSet<Label> {
        let mut s = out_set.clone();
        for (j, t) in eq.inputs.iter().enumerate() {
            if j != i {
                s.extend(t.iter().copied());
            }
        }
        s
    };
    let first = Operand {
        slot: ctx.input(node, 0)?,
        labels: eq.inputs[0].clone(),
    };
    let mut acc = prepare(ctx, first, &needed_by_others(0), dt);
    for i in 1..eq.inputs.len() {
        let op = Operand {
            slot: ctx.input(node, i)?,
            labels: eq.inputs[i].clone(),
        };
        let op = prepare(ctx, op, &needed_by_others(i), dt);
        acc = contract(ctx, acc, op, &later(i), dt);
    }
    let acc = prepare(ctx, acc, &out_set, dt);
    let perm = perm_to(&acc.labels, &eq.output);
    let y = transpose(ctx, acc.slot, perm, dt);
    ctx.finish(node, 0, y, dt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Label::*;

    fn c(s: &str) -> Vec<Label> {
        s.bytes().map(Char).collect()
    }

    #[test]
    fn parses_explicit_and_implicit_equations() {
        let e = parse_equation("ij,jk->ik", &[2, 2]).unwrap();
        assert_eq!(e.inputs, vec![c("ij"), c("jk")]);
        assert_eq!(e.output, c("ik"));
        // Implicit: letters seen once, sorted.
        let e = parse_equation("ba,ac", &[2, 2]).unwrap();
        assert_eq!(e.output, c("bc"));
        let e = parse_equation("ii", &[2]).unwrap();
        assert_eq!(e.output, vec![]);
        // Ellipsis right-aligned; the output gets the broadcast ellipsis first.
        let e = parse_equation("...ij,...jk", &[4, 3]).unwrap();
        assert_eq!(e.inputs[0], vec![Ell(0), Ell(1), Char(b'i'), Char(b'j')]);
        assert_eq!(e.inputs[1], vec![Ell(1), Char(b'j'), Char(b'k')]);
        assert_eq!(e.output, vec![Ell(0), Ell(1), Char(b'i'), Char(b'k')]);
        let e = parse_equation(" b i , b j -> b i j ", &[2, 2]).unwrap();
        assert_eq!(e.output, c("bij"));
    }

    #[test]
    fn rejects_what_is_not_claimed() {
        assert!(parse_equation("ij,jk->ik", &[2]).is_err());
        assert!(parse_equation("ij->i", &[3]).is_err());
        assert!(parse_equation("ij->ii", &[2]).is_err());
        assert!(parse_equation("ij->k", &[2]).is_err());
        assert!(parse_equation("...i->i", &[2]).is_err());
        assert!(parse_equation("aB,c", &[2, 1]).is_err());
        assert!(parse_equation("aB,B", &[2, 1]).is_ok());
        assert!(parse_equation("i.j", &[2]).is_err());
        assert!(parse_equation("i1", &[2]).is_err());
    }
}
