//! The operand and result visitors of [`Step`].

use super::*;

impl Step {
    /// Applies `f` to every slot this step reads (the ones [`Step::inputs`] lists), in place.
    pub fn map_inputs(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        use Step::*;
        fn src(s: &mut ShapeSource, f: &mut dyn FnMut(&mut Slot)) {
            if let ShapeSource::Dynamic(x) = s {
                f(x);
            }
        }
        fn fsrc(s: &mut FloatSource, f: &mut dyn FnMut(&mut Slot)) {
            if let FloatSource::Dynamic(x) = s {
                f(x);
            }
        }
        match self {
            Unary { x, .. }
            | AsType { x, .. }
            | Transpose { x, .. }
            | Softmax { x, .. }
            | ArgReduce { x, .. }
            | Windows { x, .. }
            | PoolDivisor { x, .. }
            | Shape { x, .. }
            | CumSum { x, .. }
            | View { x, .. }
            | Triangle { x, .. } => f(x),
            Cumulative { x, axis, .. } => {
                f(x);
                src(axis, f);
            }
            Binary { a, b, .. } | MatMul { a, b, .. } => {
                f(a);
                f(b);
            }
            Where { cond, x, y, .. } => {
                f(cond);
                f(x);
                f(y);
            }
            Addmm { c, a, b, .. } => {
                f(c);
                f(a);
                f(b);
            }
            Attention { q, k, v, mask, .. } => {
                f(q);
                f(k);
                f(v);
                if let Some(m) = mask {
                    f(m);
                }
            }
            Reshape { x, target, .. } => {
                f(x);
                match target {
                    ReshapeTarget::Onnx { shape, .. } => src(shape, f),
                    ReshapeTarget::Squeeze { axes: Some(a) } => src(a, f),
                    ReshapeTarget::Unsqueeze { axes } => src(axes, f),
                    ReshapeTarget::Like(s) => f(s),
                    _ => {}
                }
            }
            Expand { x, shape, .. } => {
                f(x);
                src(shape, f);
            }
            Concat { inputs, .. } => inputs.iter_mut().for_each(f),
            Slice { x, spec, .. } => {
                f(x);
                src(&mut spec.starts, f);
                src(&mut spec.ends, f);
                if let Some(a) = &mut spec.axes {
                    src(a, f);
                }
                if let Some(st) = &mut spec.steps {
                    src(st, f);
                }
            }
            Take { x, indices, .. } | TakeAlongAxis { x, indices, .. } => {
                f(x);
                f(indices);
            }
            LayerNorm {
                x, weight, bias, ..
            } => {
                f(x);
                if let Some(w) = weight {
                    f(w);
                }
                if let Some(b) = bias {
                    f(b);
                }
            }
            RmsNorm { x, weight, .. } => {
                f(x);
                if let Some(w) = weight {
                    f(w);
                }
            }
            Reduce { x, axes, .. } => {
                f(x);
                if let ReduceAxes::Dynamic { axes, .. } = axes {
                    f(axes);
                }
            }
            Conv { x, w, .. } => {
                f(x);
                f(w);
            }
            Pad { x, pads, value, .. } => {
                f(x);
                f(value);
                if let PadSpec::Onnx { pads, axes } = pads {
                    src(pads, f);
                    if let Some(a) = axes {
                        src(a, f);
                    }
                }
            }
            ResizeNearest { x, spec, .. } => {
                f(x);
                if let Some(s) = &mut spec.scales {
                    fsrc(s, f);
                }
                if let Some(s) = &mut spec.sizes {
                    src(s, f);
                }
            }
            Full { shape, value, .. } => {
                src(shape, f);
                f(value);
            }
            Arange {
                start,
                limit,
                delta,
                ..
            } => {
                fsrc(start, f);
                fsrc(limit, f);
                fsrc(delta, f);
            }
            Split { x, sizes, .. } => {
                f(x);
                if let Some(s) = sizes {
                    src(s, f);
                }
            }
            Tile { x, reps, .. } => {
                f(x);
                src(reps, f);
            }
            QuantizedMatmul {
                x,
                w,
                scales,
                biases,
                ..
            } => {
                f(x);
                f(w);
                f(scales);
                f(biases);
            }
            KvCache {
                past,
                new,
                seqlens,
                total,
                ..
            } => {
                if let Some(p) = past {
                    f(p);
                }
                f(new);
                f(seqlens);
                src(total, f);
            }
            GqaMask {
                seqlens,
                total,
                like,
                past,
                bias,
                ..
            } => {
                f(seqlens);
                src(total, f);
                f(like);
                if let Some(p) = past {
                    f(p);
                }
                if let Some(b) = bias {
                    f(b);
                }
            }
            GqaPositions {
                seqlens,
                total,
                like,
                past,
                position_ids,
                ..
            } => {
                f(seqlens);
                src(total, f);
                f(like);
                if let Some(p) = past {
                    f(p);
                }
                if let Some(p) = position_ids {
                    f(p);
                }
            }
            Iota { like, .. } => f(like),
            ConvTranspose { x, w, .. } => {
                f(x);
                f(w);
            }
            ArgSort { x, .. } | NonZero { x, .. } => f(x),
            Require { ok, .. } => f(ok),
            HostEval { args, .. } => args.iter_mut().filter_map(|a| a.slot_mut()).for_each(f),
            Scatter {
                x,
                indices,
                updates,
                ..
            } => {
                f(x);
                indices.iter_mut().for_each(&mut *f);
                f(updates);
            }
            Gather { x, indices, .. } => {
                f(x);
                indices.iter_mut().for_each(f);
            }
            ResizeInterp { x, spec, .. } => {
                f(x);
                spec.map_slots(f);
            }
            Col2Im { x, spec, .. } => {
                f(x);
                spec.map_slots(f);
            }
            Window { size, .. } => src(size, f),
            Dft { x, spec, .. } => {
                f(x);
                spec.map_slots(f);
            }
            Det { x, .. } | Unique { x, .. } => f(x),
            RoiAlign {
                x,
                rois,
                batch_indices,
                ..
            } => {
                f(x);
                f(rois);
                f(batch_indices);
            }
            NonMaxSuppression {
                boxes,
                scores,
                max_output,
                iou_threshold,
                score_threshold,
                ..
            } => {
                f(boxes);
                f(scores);
                [max_output, iou_threshold, score_threshold]
                    .into_iter()
                    .flatten()
                    .for_each(f);
            }
            Recurrent {
                x,
                w,
                r,
                b,
                lens,
                h0,
                c0,
                p,
                ..
            } => {
                for s in [x, w, r] {
                    f(s);
                }
                for s in [b, lens, h0, c0, p].into_iter().flatten() {
                    f(s);
                }
            }
            AttentionEx {
                q,
                k,
                v,
                mask,
                sinks,
                ..
            } => {
                f(q);
                f(k);
                f(v);
                if let Some(m) = mask {
                    f(m);
                }
                if let Some(s) = sinks {
                    f(s);
                }
            }
        }
    }

    /// Applies `f` to every slot this step writes, in place.
    pub fn map_outputs(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        use Step::*;
        match self {
            Split { outs, .. } => outs.iter_mut().for_each(f),
            Unary { out, .. }
            | Binary { out, .. }
            | Where { out, .. }
            | AsType { out, .. }
            | MatMul { out, .. }
            | Addmm { out, .. }
            | Attention { out, .. }
            | Reshape { out, .. }
            | Transpose { out, .. }
            | Expand { out, .. }
            | Concat { out, .. }
            | Slice { out, .. }
            | Take { out, .. }
            | TakeAlongAxis { out, .. }
            | Softmax { out, .. }
            | LayerNorm { out, .. }
            | RmsNorm { out, .. }
            | Reduce { out, .. }
            | ArgReduce { out, .. }
            | Conv { out, .. }
            | Pad { out, .. }
            | Windows { out, .. }
            | PoolDivisor { out, .. }
            | ResizeNearest { out, .. }
            | Shape { out, .. }
            | Full { out, .. }
            | Arange { out, .. }
            | CumSum { out, .. }
            | Cumulative { out, .. }
            | View { out, .. }
            | Triangle { out, .. }
            | Tile { out, .. }
            | QuantizedMatmul { out, .. }
            | KvCache { out, .. }
            | GqaMask { out, .. }
            | GqaPositions { out, .. }
            | Iota { out, .. }
            | AttentionEx { out, .. }
            | ConvTranspose { out, .. }
            | ArgSort { out, .. }
            | Scatter { out, .. }
            | Gather { out, .. }
            | ResizeInterp { out, .. }
            | Col2Im { out, .. }
            | Require { out, .. }
            | HostEval { out, .. }
            | NonZero { out, .. }
            | Window { out, .. }
            | Dft { out, .. }
            | Det { out, .. }
            | RoiAlign { out, .. }
            | NonMaxSuppression { out, .. } => f(out),
            Unique { outs, .. } => outs.iter_mut().for_each(f),
            Recurrent { outs, .. } => outs.iter_mut().flatten().for_each(f),
        }
    }

    /// Slots whose arrays this step reads (including host reads and shape-only reads).
    pub fn inputs(&self) -> Vec<Slot> {
        use Step::*;
        let mut v = match self {
            Unary { x, .. }
            | AsType { x, .. }
            | Reshape { x, .. }
            | Transpose { x, .. }
            | Expand { x, .. }
            | Slice { x, .. }
            | Softmax { x, .. }
            | Reduce { x, .. }
            | ArgReduce { x, .. }
            | Windows { x, .. }
            | PoolDivisor { x, .. }
            | ResizeNearest { x, .. }
            | Shape { x, .. }
            | Split { x, .. }
            | CumSum { x, .. }
            | Cumulative { x, .. }
            | View { x, .. }
            | Triangle { x, .. }
            | Tile { x, .. } => vec![*x],
            Binary { a, b, .. } | MatMul { a, b, .. } => vec![*a, *b],
            Where { cond, x, y, .. } => vec![*cond, *x, *y],
            Addmm { c, a, b, .. } => vec![*c, *a, *b],
            Attention { q, k, v, mask, .. } => {
                let mut s = vec![*q, *k, *v];
                s.extend(mask.iter());
                s
            }
            Concat { inputs, .. } => inputs.clone(),
            Take { x, indices, .. } | TakeAlongAxis { x, indices, .. } => vec![*x, *indices],
            LayerNorm {
                x, weight, bias, ..
            } => {
                let mut v = vec![*x];
                v.extend(weight.iter().chain(bias.iter()));
                v
            }
            RmsNorm { x, weight, .. } => {
                let mut v = vec![*x];
                v.extend(weight.iter());
                v
            }
            Conv { x, w, .. } => vec![*x, *w],
            Pad { x, value, .. } => vec![*x, *value],
            Full { value, .. } => vec![*value],
            Arange { .. } => vec![],
            QuantizedMatmul {
                x,
                w,
                scales,
                biases,
                ..
            } => vec![*x, *w, *scales, *biases],
            KvCache {
                past, new, seqlens, ..
            } => {
                let mut v: Vec<Slot> = past.iter().copied().collect();
                v.extend([*new, *seqlens]);
                v
            }
            GqaMask {
                seqlens,
                like,
                past,
                bias,
                ..
            } => {
                let mut v = vec![*seqlens, *like];
                v.extend(past.iter().chain(bias.iter()));
                v
            }
            GqaPositions {
                seqlens,
                like,
                past,
                position_ids,
                ..
            } => {
                let mut v = vec![*seqlens, *like];
                v.extend(past.iter().chain(position_ids.iter()));
                v
            }
            Iota { like, .. } => vec![*like],
            ConvTranspose { x, w, .. } => vec![*x, *w],
            ArgSort { x, .. }
            | ResizeInterp { x, .. }
            | Col2Im { x, .. }
            | NonZero { x, .. }
            | Det { x, .. }
            | Dft { x, .. }
            | Unique { x, .. } => vec![*x],
            NonMaxSuppression { .. } => self.nms_inputs(),
            // rois and batch_indices come with the host reads below.
            RoiAlign { x, .. } => vec![*x],
            Window { .. } => vec![],
            Recurrent {
                x,
                w,
                r,
                b,
                lens,
                h0,
                c0,
                p,
                ..
            } => {
                let mut v = vec![*x, *w, *r];
                v.extend([b, lens, h0, c0, p].into_iter().flatten());
                v
            }
            Require { ok, .. } => vec![*ok],
            HostEval { args, .. } => args.iter().filter_map(|a| a.slot()).collect(),
            Scatter {
                x,
                indices,
                updates,
                ..
            } => {
                let mut v = vec![*x];
                v.extend(indices.iter().copied());
                v.push(*updates);
                v
            }
            Gather { x, indices, .. } => {
                let mut v = vec![*x];
                v.extend(indices.iter().copied());
                v
            }
            AttentionEx {
                q,
                k,
                v,
                mask,
                sinks,
                ..
            } => {
                let mut s = vec![*q, *k, *v];
                s.extend(mask.iter().chain(sinks.iter()));
                s
            }
        };
        if let Reshape {
            target: ReshapeTarget::Like(s),
            ..
        } = self
        {
            v.push(*s);
        }
        v.extend(self.host_reads());
        v
    }

    /// Slots this step writes.
    pub fn outputs(&self) -> Vec<Slot> {
        use Step::*;
        match self {
            Split { outs, .. } => outs.clone(),
            Unary { out, .. }
            | Binary { out, .. }
            | Where { out, .. }
            | AsType { out, .. }
            | MatMul { out, .. }
            | Addmm { out, .. }
            | Attention { out, .. }
            | Reshape { out, .. }
            | Transpose { out, .. }
            | Expand { out, .. }
            | Concat { out, .. }
            | Slice { out, .. }
            | Take { out, .. }
            | TakeAlongAxis { out, .. }
            | Softmax { out, .. }
            | LayerNorm { out, .. }
            | RmsNorm { out, .. }
            | Reduce { out, .. }
            | ArgReduce { out, .. }
            | Conv { out, .. }
            | Pad { out, .. }
            | Windows { out, .. }
            | PoolDivisor { out, .. }
            | ResizeNearest { out, .. }
            | Shape { out, .. }
            | Full { out, .. }
            | Arange { out, .. }
            | CumSum { out, .. }
            | Cumulative { out, .. }
            | View { out, .. }
            | Triangle { out, .. }
            | Tile { out, .. }
            | QuantizedMatmul { out, .. }
            | KvCache { out, .. }
            | GqaMask { out, .. }
            | GqaPositions { out, .. }
            | Iota { out, .. }
            | AttentionEx { out, .. }
            | ConvTranspose { out, .. }
            | ArgSort { out, .. }
            | Scatter { out, .. }
            | Gather { out, .. }
            | ResizeInterp { out, .. }
            | Col2Im { out, .. }
            | Require { out, .. }
            | HostEval { out, .. }
            | NonZero { out, .. }
            | Window { out, .. }
            | Dft { out, .. }
            | Det { out, .. }
            | RoiAlign { out, .. }
            | NonMaxSuppression { out, .. } => vec![*out],
            Unique { outs, .. } => outs.clone(),
            Recurrent { outs, .. } => outs.iter().flatten().copied().collect(),
        }
    }

    /// Slots whose values this step reads back to the host at run time (each forces an
    /// evaluation, so a plan with any cannot be compiled as one closure).
    pub fn host_reads(&self) -> Vec<Slot> {
        use Step::*;
        match self {
            Reshape { target, .. } => target.host_reads(),
            Expand { shape, .. } | Full { shape, .. } => shape.dynamic_slot().into_iter().collect(),
            Slice { spec, .. } => spec.host_reads(),
            Reduce {
                axes: ReduceAxes::Dynamic { axes, .. },
                ..
            } => vec![*axes],
            Pad { pads, .. } => pads.host_reads(),
            ResizeNearest { spec, .. } => spec.host_reads(),
            Arange {
                start,
                limit,
                delta,
                ..
            } => [start, limit, delta]
                .into_iter()
                .filter_map(FloatSource::dynamic_slot)
                .collect(),
            Split { sizes, .. } => sizes
                .as_ref()
                .and_then(ShapeSource::dynamic_slot)
                .into_iter()
                .collect(),
            Tile { reps, .. } => reps.dynamic_slot().into_iter().collect(),
            HostEval { args, .. } => args
                .iter()
                .filter_map(|a| match a {
                    crate::host::HostArg::Value(s) => Some(*s),
                    _ => None,
                })
                .collect(),
            Cumulative { axis, .. } => axis.dynamic_slot().into_iter().collect(),
            KvCache { seqlens, total, .. } | GqaMask { seqlens, total, .. } => {
                let mut v = vec![*seqlens];
                v.extend(total.dynamic_slot());
                v
            }
            GqaPositions {
                seqlens,
                total,
                position_ids,
                ..
            } => {
                let mut v = vec![*seqlens];
                v.extend(total.dynamic_slot());
                v.extend(position_ids.iter());
                v
            }
            ResizeInterp { spec, .. } => spec.host_reads(),
            Col2Im { spec, .. } => spec.host_reads(),
            NonZero { x, .. } | Unique { x, .. } => vec![*x],
            NonMaxSuppression { .. } => self.nms_inputs(),
            RoiAlign {
                rois,
                batch_indices,
                ..
            } => vec![*rois, *batch_indices],
            Window { size, .. } => size.dynamic_slot().into_iter().collect(),
            Dft { spec, .. } => spec.host_reads(),
            _ => Vec::new(),
        }
    }

    /// The inputs of a `NonMaxSuppression` step (all read on the host); empty for others.
    fn nms_inputs(&self) -> Vec<Slot> {
        match self {
            Step::NonMaxSuppression {
                boxes,
                scores,
                max_output,
                iou_threshold,
                score_threshold,
                ..
            } => [
                Some(*boxes),
                Some(*scores),
                *max_output,
                *iou_threshold,
                *score_threshold,
            ]
            .into_iter()
            .flatten()
            .collect(),
            _ => Vec::new(),
        }
    }

    /// True when the step's MLX calls depend on input shapes only through MLX itself, so a
    /// shapeless compiled closure stays valid when input shapes change.
    pub fn is_shapeless(&self) -> bool {
        use Step::*;
        match self {
            Unary { .. }
            | Binary { .. }
            | Where { .. }
            | AsType { .. }
            | MatMul { .. }
            | Addmm { .. }
            | Attention { .. }
            | Transpose { .. }
            | Concat { .. }
            | Take { .. }
            | TakeAlongAxis { .. }
            | Softmax { .. }
            | LayerNorm { .. }
            | RmsNorm { .. }
            | CumSum { .. }
            | View { .. }
            | Triangle { .. }
            | ArgReduce { .. }
            | QuantizedMatmul { .. }
            | ArgSort { .. }
            | Require { .. }
            | Scatter { .. } => true,
            ConvTranspose { spec, .. } => spec.is_shapeless(),
            AttentionEx { causal, mask, .. } => !(*causal && mask.is_some()),
            Reduce { axes, .. } => !matches!(axes, ReduceAxes::Dynamic { .. }),
            Cumulative { axis, .. } => matches!(axis, ShapeSource::Static(_)),
            Reshape {
                target: ReshapeTarget::Fixed(_),
                ..
            } => true,
            Pad {
                pads: PadSpec::Static { .. },
                mode: PadMode::Constant | PadMode::Edge,
                ..
            } => true,
            Conv { spec, .. } => matches!(spec.padding, AutoPad::Explicit { .. }),
            _ => false,
        }
    }
}
