//! Block-quantized weights of `com.microsoft`: MatMulNBits and GatherBlockQuantized.
//!
//! ORT dequantizes `w = (q - zero_point) * scale` per block of `block_size` elements along K,
//! `q` packed low bits first into bytes. MLX's affine quantization is `w = scale * q + bias`
//! per group with `q` packed low bits first into little-endian uint32 words, so constant
//! weights map onto it with `bias = -scale * zero_point` and the bytes reinterpreted, whenever
//! a group size MLX supports (32, 64, 128) divides both the block and K. Other block sizes
//! (16) and ragged K are dequantized to float at plan time.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReshapeTarget, ShapeSource, normalize_axis};

/// Registers the ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "MatMulNBits", 1, 1, claim_mnb, lower_mnb)
        .notes("4/8 bits, constant weights; MLX quantized matmul for groups of 32/64/128 (on the CPU stream dequantized once at load: float weights, BLAS), else dequantized at plan time; no `g_idx`, no `accuracy_level` 4 (ORT quantizes A to int8 there)");
    r.op(MS, "GatherBlockQuantized", 1, 1, claim_gbq, lower_gbq)
        .notes("uint8 data with 4 or 8 bits, gather axis 0, quantized along the last axis");
}

/// MatMulNBits' static description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NBits {
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// Bits per weight.
    pub bits: usize,
    /// Elements per quantization block.
    pub block: usize,
}

impl NBits {
    /// Blocks per output row.
    pub fn blocks(&self) -> usize {
        self.k.div_ceil(self.block)
    }
    /// Bytes per block.
    pub fn blob(&self) -> usize {
        self.block * self.bits / 8
    }
    /// Bytes of packed zero points per output row.
    pub fn zp_row(&self) -> usize {
        (self.blocks() * self.bits).div_ceil(8)
    }
    /// The MLX group size: the largest of 128, 64, 32 dividing both the block and K.
    pub fn mlx_group(&self) -> Option<usize> {
        [128, 64, 32]
            .into_iter()
            .find(|&g| self.block.is_multiple_of(g) && self.k.is_multiple_of(g))
    }
}

/// Zero points of MatMulNBits: packed like the weights, floats, or the default `2^(bits-1)`.
pub(crate) enum ZeroPoints<'a> {
    /// Absent.
    Default,
    /// uint8, `zp_row` bytes per row.
    Packed(&'a [u8]),
    /// One float per block.
    Float(Vec<f64>),
}

/// Element `i` of values packed `bits` wide, low bits first.
pub(crate) fn unpack(bytes: &[u8], bits: usize, i: usize) -> u32 {
    let per = 8 / bits;
    let byte = bytes[i / per];
    ((byte >> ((i % per) * bits)) as u32) & ((1u32 << bits) - 1)
}

impl NBits {
    fn zero_point(&self, zp: &ZeroPoints, row: usize, blk: usize) -> f64 {
        match zp {
            ZeroPoints::Default => (1u32 << (self.bits - 1)) as f64,
            ZeroPoints::Packed(b) => unpack(
                &b[row * self.zp_row()..(row + 1) * self.zp_row()],
                self.bits,
                blk,
            ) as f64,
            ZeroPoints::Float(v) => v[row * self.blocks() + blk],
        }
    }

    /// The dequantized weight, transposed: `[K, N]` row-major, as f64.
    pub fn dequantize_t(&self, b: &[u8], scales: &[f64], zp: &ZeroPoints) -> Vec<f64> {
        let (n, k, nb) = (self.n, self.k, self.blocks());
        let row_bytes = nb * self.blob();
        let mut out = vec![0.0; k * n];
        for r in 0..n {
            let row = &b[r * row_bytes..(r + 1) * row_bytes];
            for blk in 0..nb {
                let s = scales[r * nb + blk] as f32;
                let z = self.zero_point(zp, r, blk) as f32;
                for j in blk * self.block..((blk + 1) * self.block).min(k) {
                    let q = unpack(row, self.bits, j) as f32;
                    out[j * n + r] = ((q - z) * s) as f64;
                }
            }
        }
        out
    }

    /// MLX operands for group size `g`: packed uint32 words `[N, K * bits / 32]` (as little-endian
    /// bytes), and per-group scales and biases `[N, K / g]`.
    pub fn mlx_operands(
        &self,
        b: &[u8],
        scales: &[f64],
        zp: &ZeroPoints,
        g: usize,
    ) -> (Vec<u8>, Vec<f64>, Vec<f64>) {
        let (n, k, nb) = (self.n, self.k, self.blocks());
        let row_bytes = nb * self.blob();
        let used = k * self.bits / 8;
        let mut w = Vec::with_capacity(n * used);
        let groups = k / g;
        let mut s_out = Vec::with_capacity(n * groups);
        let mut b_out = Vec::with_capacity(n * groups);
        for r in 0..n {
            w.extend_from_slice(&b[r * row_bytes..r * row_bytes + used]);
            for j in 0..groups {
                let blk = j * g / self.block;
                let s = scales[r * nb + blk] as f32;
                let z = self.zero_point(zp, r, blk) as f32;
                s_out.push(s as f64);
                b_out.push((-(s * z)) as f64);
            }
        }
        (w, s_out, b_out)
    }
}

fn nbits_of(node: &Node) -> Result<NBits, String> {
    let get = |name: &str| -> Result<i64, String> {
        attr_int(node, name)?.ok_or_else(|| format!("MatMulNBits: attribute {name} is missing"))
    };
    let (n, k, block) = (get("N")?, get("K")?, get("block_size")?);
    let bits = attr_int(node, "bits")?.unwrap_or(4);
    if n <= 0 || k <= 0 {
        return Err("MatMulNBits: N and K must be positive".into());
    }
    if bits != 4 && bits != 8 {
        return Err(format!(
            "MatMulNBits: bits={bits} is not claimed (4 and 8 are)"
        ));
    }
    if block < 16 || block & (block - 1) != 0 {
        return Err(format!(
            "MatMulNBits: block_size={block} must be a power of 2, at least 16"
        ));
    }
    Ok(NBits {
        n: n as usize,
        k: k as usize,
        bits: bits as usize,
        block: block as usize,
    })
}

fn claim_mnb(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, FLOATS)?;
    let nb = nbits_of(node).or_decline()?;
    no_input(node, 4, "g_idx")?;
    if attr_int(node, "accuracy_level").or_decline()?.unwrap_or(0) >= 4 {
        decline!(
            "MatMulNBits: accuracy_level 4 is not claimed (ORT's CPU EP quantizes A to int8 there, which MLX would not reproduce)"
        );
    }
    if attr_int(node, "weight_prepacked")
        .or_decline()?
        .unwrap_or(0)
        != 0
    {
        decline!("MatMulNBits: prepacked weights are not claimed");
    }
    let Some(b) = node.input(1).and_then(|n| ctx.constant(n)) else {
        decline!("MatMulNBits: B must be a constant initializer");
    };
    if b.dtype != DataType::Uint8 || b.numel() as usize != nb.n * nb.blocks() * nb.blob() {
        decline!("MatMulNBits: B must be uint8 [N, K/block_size, block_size*bits/8]");
    }
    let Some(s) = node.input(2).and_then(|n| ctx.constant(n)) else {
        decline!("MatMulNBits: scales must be a constant initializer");
    };
    if s.dtype != dt || s.numel() as usize != nb.n * nb.blocks() {
        decline!("MatMulNBits: scales must be {dt} with N * K/block_size values");
    }
    if let Some(name) = node.input(3) {
        let Some(z) = ctx.constant(name) else {
            decline!("MatMulNBits: zero_points must be a constant initializer");
        };
        let ok = if z.dtype == DataType::Uint8 {
            z.numel() as usize == nb.n * nb.zp_row()
        } else {
            z.dtype == dt && z.numel() as usize == nb.n * nb.blocks()
        };
        if !ok {
            decline!("MatMulNBits: zero_points have an unexpected type or size");
        }
    }
    if node.input(5).is_some() {
        ctx.expect_dtype(node, 5, &[dt])?;
    }
    Ok(())
}

fn lower_mnb(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let nb = nbits_of(node).or_invalid(node)?;
    let (Some(b), Some(s)) = (ctx.const_input(node, 1), ctx.const_input(node, 2)) else {
        crate::plan::invalid!(node, "B and scales must be constants");
    };
    let (b, s) = (b.clone(), s.clone());
    let scales = s.to_f64_vec().unwrap_or_default();
    let zt = ctx.const_input(node, 3).cloned();
    let zp = match &zt {
        None => ZeroPoints::Default,
        Some(z) if z.dtype == DataType::Uint8 => ZeroPoints::Packed(&z.bytes),
        Some(z) => ZeroPoints::Float(z.to_f64_vec().unwrap_or_default()),
    };
    let src = node.input(1).unwrap_or("B").to_string();
    let (n, k) = (nb.n as i64, nb.k as i64);
    let encode = |v: &[f64], dims: Vec<i64>| {
        crate::consts::tensor_from_f64(dt, dims, v).ok_or_else(|| PlanError::Invalid {
            node: node.name.clone(),
            reason: format!("cannot encode {dt} constants"),
        })
    };
    let a = ctx.input(node, 0)?;
    let y = ctx.temp(dt);
    match nb.mlx_group() {
        Some(g) => {
            let (w, sg, bg) = nb.mlx_operands(&b.bytes, &scales, &zp, g);
            let words = k * nb.bits as i64 / 32;
            let w = TensorData::new(DataType::Uint32, vec![n, words], w).map_err(|e| {
                PlanError::Invalid {
                    node: node.name.clone(),
                    reason: e,
                }
            })?;
            let groups = k / g as i64;
            let w = ctx.constant_from(&src, w);
            let sc = encode(&sg, vec![n, groups])?;
            let bc = encode(&bg, vec![n, groups])?;
            let scales = ctx.constant_from(&src, sc);
            let biases = ctx.constant_from(&src, bc);
            ctx.push(Step::QuantizedMatmul {
                x: a,
                w,
                scales,
                biases,
                group_size: g as i32,
                bits: nb.bits as i32,
                out: y,
            });
        }
        None => {
            let wt = encode(&nb.dequantize_t(&b.bytes, &scales, &zp), vec![k, n])?;
            let w = ctx.constant_from(&src, wt);
            ctx.push(Step::MatMul { a, b: w, out: y });
        }
    }
    let y = match ctx.opt_input(node, 5)? {
        Some(bias) => ctx.binary(B::Add, y, bias, dt),
        None => y,
    };
    ctx.finish(node, 0, y, dt)
}

// ---------------------------------------------------------------------------------------------
// GatherBlockQuantized.

struct Gbq {
    bits: i64,
    block: i64,
    /// Rows of the data (gather axis 0).
    rows: i64,
    /// Packed last dim of the data.
    packed: i64,
    data_rank: usize,
    idx_rank: usize,
}

fn gbq_of(ctx: &ClaimCtx, node: &Node) -> Result<Gbq, Decline> {
    let bits = attr_int(node, "bits").or_decline()?.unwrap_or(4);
    let block = attr_int(node, "block_size").or_decline()?.unwrap_or(128);
    let data_rank = ctx.expect_rank(node, 0)?;
    let idx_rank = ctx.expect_rank(node, 1)?;
    let g = normalize_axis(
        attr_int(node, "gather_axis").or_decline()?.unwrap_or(0),
        data_rank,
    )
    .or_decline()?;
    let q = normalize_axis(
        attr_int(node, "quantize_axis").or_decline()?.unwrap_or(1),
        data_rank,
    )
    .or_decline()?;
    if g != 0 || q + 1 != data_rank || data_rank < 2 {
        decline!(
            "GatherBlockQuantized: only gather_axis 0 with quantize_axis last (rank >= 2) is claimed"
        );
    }
    let dims = dims_of(ctx, node.input(0).unwrap_or("")).unwrap_or_default();
    let (Some(rows), Some(packed)) = (
        dims.first().and_then(|d| d.fixed()),
        dims.last().and_then(|d| d.fixed()),
    ) else {
        decline!("GatherBlockQuantized: the data's first and last dims must be fixed");
    };
    if bits != 4 && bits != 8 {
        decline!("GatherBlockQuantized: bits={bits} is not claimed (4 and 8 are)");
    }
    if block < 16 || block & (block - 1) != 0 || (packed * 8 / bits) % block != 0 {
        decline!(
            "GatherBlockQuantized: block_size={block} must be a power of 2 (>= 16) dividing the quantized axis"
        );
    }
    Ok(Gbq {
        bits,
        block,
        rows,
        packed,
        data_rank,
        idx_rank,
    })
}

fn claim_gbq(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let ddt = ctx.input_dtype(node, 0)?;
    if ddt != DataType::Uint8 {
        decline!("GatherBlockQuantized: {ddt} data is not claimed (uint8 is)");
    }
    ctx.expect_dtype(node, 1, INDEX)?;
    ctx.expect_dtype(node, 2, FLOATS)?;
    if node.input(3).is_some() {
        ctx.expect_dtype(node, 3, &[DataType::Uint8])?;
    }
    gbq_of(ctx, node)?;
    Ok(())
}

/// Unpacks 4-bit values (low nibble first) along the last axis: `[..., m]` -> `[..., 2m]`.
fn unpack_nibbles(ctx: &mut LowerCtx, x: Slot, rank: usize) -> Result<Slot, PlanError> {
    let u8t = DataType::Uint8;
    let mask = ctx.scalar(u8t, 15.0)?;
    let four = ctx.scalar(u8t, 4.0)?;
    let lo = ctx.binary(B::BitwiseAnd, x, mask, u8t);
    let hi = ctx.binary(B::RightShift, x, four, u8t);
    let lo = unsqueeze(ctx, lo, -1, u8t);
    let hi = unsqueeze(ctx, hi, -1, u8t);
    let pairs = concat(ctx, vec![lo, hi], -1, u8t);
    let mut shape = vec![0; rank - 1];
    shape.push(-1);
    Ok(reshape_to(ctx, pairs, &shape, u8t))
}

fn lower_gbq(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let g = gbq_of(
        &ClaimCtx::new(ctx.graph(), ctx.opset()).with_constants(ctx.known()),
        node,
    )
    .map_err(|d| PlanError::Invalid {
        node: node.name.clone(),
        reason: d.reason,
    })?;
    let odt = ctx.input_dtype(node, 2)?;
    let idt = ctx.input_dtype(node, 1)?;
    let data = ctx.input(node, 0)?;
    let idx = ctx.input(node, 1)?;
    // ORT gives zeros for out-of-range indices; negative ones count from the end.
    let lo = ctx.scalar(idt, -g.rows as f64)?;
    let hi = ctx.scalar(idt, g.rows as f64)?;
    let ge = ctx.binary(B::GreaterEqual, idx, lo, idt);
    let lt = ctx.binary(B::Less, idx, hi, idt);
    let valid = ctx.binary(B::LogicalAnd, ge, lt, DataType::Bool);
    let zero_i = ctx.scalar(idt, 0.0)?;
    let safe = ctx.temp(idt);
    ctx.push(Step::Where {
        cond: valid,
        x: idx,
        y: zero_i,
        out: safe,
    });
    // Output rank: idx_rank + data_rank - 1, last axis K.
    let rank = g.idx_rank + g.data_rank - 1;
    let take = |ctx: &mut LowerCtx, x: Slot, dt: DataType| {
        let out = ctx.temp(dt);
        ctx.push(Step::Take {
            x,
            indices: safe,
            axis: 0,
            out,
        });
        out
    };
    let mut q = take(ctx, data, DataType::Uint8);
    if g.bits == 4 {
        q = unpack_nibbles(ctx, q, rank)?;
    }
    let qf = ctx.cast(q, DataType::Uint8, odt);
    let k = g.packed * 8 / g.bits;
    let nb = k / g.block;
    // [..., K] -> [..., nb, block]
    let mut blocks = vec![0; rank - 1];
    blocks.extend([nb, g.block]);
    let qb = reshape_to(ctx, qf, &blocks, odt);
    let scales = ctx.input(node, 2)?;
    let s = take(ctx, scales, odt);
    let s = unsqueeze(ctx, s, -1, odt);
    let zp = match ctx.opt_input(node, 3)? {
        Some(z) => {
            let mut z = take(ctx, z, DataType::Uint8);
            if g.bits == 4 {
                z = unpack_nibbles(ctx, z, rank)?;
                // Rows hold whole bytes: drop the padding nibble of an odd block count.
                let t = ctx.temp(DataType::Uint8);
                ctx.push(Step::Slice {
                    x: z,
                    spec: crate::step::SliceSpec {
                        starts: ShapeSource::Static(vec![0]),
                        ends: ShapeSource::Static(vec![nb]),
                        axes: Some(ShapeSource::Static(vec![-1])),
                        steps: None,
                    },
                    out: t,
                });
                z = t;
            }
            let zf = ctx.cast(z, DataType::Uint8, odt);
            unsqueeze(ctx, zf, -1, odt)
        }
        None => ctx.scalar(odt, (1i64 << (g.bits - 1)) as f64)?,
    };
    let d = ctx.binary(B::Subtract, qb, zp, odt);
    let w = ctx.binary(B::Multiply, d, s, odt);
    let mut back = vec![0; rank - 1];
    back.push(-1);
    let w = reshape_to(ctx, w, &back, odt);
    // Zero the rows of out-of-range indices: valid [idx...] -> [idx..., 1, ...].
    let axes: Vec<i64> = (g.idx_rank as i64..rank as i64).collect();
    let v = reshape(
        ctx,
        valid,
        ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static(axes),
        },
        DataType::Bool,
    );
    let zero = ctx.scalar(odt, 0.0)?;
    let out = ctx.temp(odt);
    ctx.push(Step::Where {
        cond: v,
        x: w,
        y: zero,
        out,
    });
    ctx.finish(node, 0, out, odt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack4(q: &[u32]) -> Vec<u8> {
        q.chunks(2).map(|c| (c[0] | (c[1] << 4)) as u8).collect()
    }

    #[test]
    fn dequantize_and_mlx_operands_agree() {
        // N=2, K=64, block 32, 4 bits: 2 blocks per row.
        let nb = NBits {
            n: 2,
            k: 64,
            bits: 4,
            block: 32,
        };
        let q: Vec<u32> = (0..128).map(|i| (i * 7 % 16) as u32).collect();
        let b = pack4(&q);
        let scales = vec![0.5, 0.25, 2.0, 1.0];
        // Zero points 3, 9 (row 0), 1, 15 (row 1), packed low nibble first.
        let zp = [3u8 | (9 << 4), 1 | (15 << 4)];
        let z = ZeroPoints::Packed(&zp);
        let wt = nb.dequantize_t(&b, &scales, &z);
        // w[k=0, n=0] = (q0 - 3) * 0.5; w[k=40, n=1] = (q[64 + 40] - 15) * 1.0.
        assert_eq!(wt[0], (q[0] as f64 - 3.0) * 0.5);
        assert_eq!(wt[40 * 2 + 1], q[104] as f64 - 15.0);
        assert_eq!(nb.mlx_group(), Some(32));
        let (w, s, bias) = nb.mlx_operands(&b, &scales, &z, 32);
        assert_eq!(w.len(), 64);
        // MLX: scale * q + bias reproduces the same weights.
        for r in 0..2 {
            for j in 0..64 {
                let qv = unpack(&w[r * 32..], 4, j) as f64;
                let g = j / 32;
                let v = s[r * 2 + g] * qv + bias[r * 2 + g];
                assert!((v - wt[j * 2 + r]).abs() < 1e-6, "r={r} j={j}");
            }
        }
    }

    #[test]
    fn group_choice() {
        let g = |k, block| {
            NBits {
                n: 1,
                k,
                bits: 4,
                block,
            }
            .mlx_group()
        };
        assert_eq!(g(256, 256), Some(128));
        assert_eq!(g(256, 64), Some(64));
        assert_eq!(g(256, 16), None);
        assert_eq!(g(96, 32), Some(32));
        assert_eq!(g(100, 32), None);
        // Default zero point is 2^(bits-1); 8-bit values are whole bytes.
        let nb = NBits {
            n: 1,
            k: 16,
            bits: 8,
            block: 16,
        };
        let b: Vec<u8> = (0..16).collect();
        let wt = nb.dequantize_t(&b, &[2.0], &ZeroPoints::Default);
        assert_eq!(wt[0], -256.0);
        assert_eq!(wt[15], (15.0 - 128.0) * 2.0);
    }
}
