//! The [`Step`] enum: one variant per MLX-level operation.

use onnx_ir::DataType;

use super::operands::define_steps;
use super::*;

define_steps! {
    /// One MLX-level operation of a plan. See `STEPS.md` for the exact mlx-c calls of each variant.
    #[derive(Debug, Clone, PartialEq)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub enum Step {
        /// `out = mlx_<op>(x)`.
        Unary {
            /// The op.
            attr op: UnaryOp,
            /// Input.
            read x: Slot,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_<op>(a, b)` with broadcasting.
        Binary {
            /// The op.
            attr op: BinaryOp,
            /// Left operand.
            read a: Slot,
            /// Right operand.
            read b: Slot,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_where(cond, x, y)`.
        Where {
            /// Bool condition.
            read cond: Slot,
            /// Taken where `cond` is true.
            read x: Slot,
            /// Taken where `cond` is false.
            read y: Slot,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_astype(x, dtype)`.
        AsType {
            /// Input.
            read x: Slot,
            /// Target dtype.
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_matmul(a, b)` (numpy semantics, 1-D operands included).
        MatMul {
            /// Left operand.
            read a: Slot,
            /// Right operand.
            read b: Slot,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_matmul(a, mlx_transpose(bt))`: a matmul whose right operand is stored
        /// transposed (`bt` is `[N, K]`), the layout MLX's CUDA GEMV reads (see
        /// `plan::gemv`).
        MatMulTransposed {
            /// Left operand.
            read a: Slot,
            /// Right operand, transposed (2-D).
            read bt: Slot,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_addmm(c, a, b, alpha, beta)` = `alpha * a@b + beta * c`.
        Addmm {
            /// Added term (broadcast to the product's shape).
            read c: Slot,
            /// Left operand (2-D).
            read a: Slot,
            /// Right operand (2-D).
            read b: Slot,
            /// Product scale.
            attr alpha: f32,
            /// `c` scale.
            attr beta: f32,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_reshape(x, target.resolve(x.shape, ...))`.
        Reshape {
            /// Input.
            read x: Slot,
            /// Target shape rule.
            mixed target: ReshapeTarget,
            /// Output.
            write out: Slot,
        } shapeless: matches!(target, ReshapeTarget::Fixed(_)),
        /// `out = mlx_transpose_axes(x, perm)`, or `mlx_transpose(x)` (reverse) when `perm` is
        /// `None`.
        Transpose {
            /// Input.
            read x: Slot,
            /// Permutation.
            attr perm: Option<Vec<i32>>,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_broadcast_to(x, expand_shape(x.shape, shape))` (ONNX `Expand`).
        Expand {
            /// Input.
            read x: Slot,
            /// The `shape` input.
            host shape: ShapeSource,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_concatenate_axis(inputs, axis)`.
        Concat {
            /// Inputs, in order.
            read inputs: Vec<Slot>,
            /// Axis (negative only when the rank was unknown; MLX accepts it).
            attr axis: i32,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_slice(x, start, stop, strides)` with `spec.resolve(x.shape, host)`.
        Slice {
            /// Input.
            read x: Slot,
            /// ONNX slice parameters.
            host spec: SliceSpec,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_take_axis(x, indices, axis)`. MLX wraps negative indices of signed index
        /// types (`idx + dim`), which is ONNX `Gather`'s rule.
        Take {
            /// Data.
            read x: Slot,
            /// Integer indices (any shape).
            read indices: Slot,
            /// Axis (negative only when the rank was unknown).
            attr axis: i32,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_take_along_axis(x, indices, axis)` (ONNX `GatherElements`).
        TakeAlongAxis {
            /// Data.
            read x: Slot,
            /// Integer indices of the output's shape.
            read indices: Slot,
            /// Axis.
            attr axis: i32,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_softmax_axes(x, axes, precise)`.
        Softmax {
            /// Input.
            read x: Slot,
            /// Axes softmaxed jointly.
            attr axes: Vec<i32>,
            /// Accumulate half-precision inputs in float32.
            attr precise: bool,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_fast_layer_norm(x, weight, bias, eps)` over the last axis.
        LayerNorm {
            /// Input.
            read x: Slot,
            /// 1-D scale of the last dim's size (null when absent).
            read weight: Option<Slot>,
            /// 1-D bias of the last dim's size (null when absent).
            read bias: Option<Slot>,
            /// Epsilon.
            attr eps: f32,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_fast_rms_norm(x, weight, eps)` over the last axis.
        RmsNorm {
            /// Input.
            read x: Slot,
            /// 1-D scale of the last dim's size (null when absent).
            read weight: Option<Slot>,
            /// Epsilon.
            attr eps: f32,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_fast_scaled_dot_product_attention(q, k, v, scale, mode, mask, sinks)`
        /// with `mode = "causal"` (mask null) when `causal`, else `""` (mask or null). q is
        /// `[B, Hq, S, D]`, k `[B, Hkv, T, D]`, v `[B, Hkv, T, Dv]` (Hq a multiple of Hkv); a bool
        /// mask means "attend where true", a float mask is added to the scores. A mask slot that
        /// the step writing it left absent on purpose (see [`Step::GqaMask`]) counts as none.
        Attention {
            /// Queries.
            read q: Slot,
            /// Keys.
            read k: Slot,
            /// Values.
            read v: Slot,
            /// Optional mask broadcastable to `[B, Hq, S, T]`.
            read mask: Option<Slot>,
            /// MLX's causal mask (aligned to the bottom-right; the planner only sets it where that
            /// agrees with ONNX).
            attr causal: bool,
            /// Per-head sink logits `[Hq]`: one more logit per row in the softmax's denominator.
            read sinks: Option<Slot>,
            /// Score scale.
            attr scale: f32,
            /// Output `[B, Hq, S, Dv]`.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_<op>_axes(x, axes.resolve(rank, host), keepdims)`; when the axes resolve to
        /// `None` (ONNX `noop_with_empty_axes`) `out = x`.
        Reduce {
            /// The reduction.
            attr op: ReduceOp,
            /// Input.
            read x: Slot,
            /// Axes.
            host axes: ReduceAxes,
            /// Keep reduced dims as size 1.
            attr keepdims: bool,
            /// Output.
            write out: Slot,
        } shapeless: !matches!(axes, ReduceAxes::Dynamic { .. }),
        /// `out = mlx_arg{max,min}_axis(x, axis, keepdims)` (uint32 result).
        ArgReduce {
            /// The reduction.
            attr op: ArgReduceOp,
            /// Input.
            read x: Slot,
            /// Axis.
            attr axis: i32,
            /// Keep the reduced dim as size 1.
            attr keepdims: bool,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_conv_general(x, w, spec.resolve(x.shape)..., flip=false)`; channels-last
        /// input `[N, *spatial, C]` and weight `[O, *kernel, C/groups]`.
        Conv {
            /// Channels-last input.
            read x: Slot,
            /// Channels-last weight.
            read w: Slot,
            /// Attributes.
            attr spec: ConvSpec,
            /// Output (channels-last).
            write out: Slot,
        } shapeless: matches!(spec.padding, AutoPad::Explicit { .. }),
        /// `out = mlx_pad(x, axes, lo, hi, value, mode)` with `pads.resolve(x.shape, host)`.
        Pad {
            /// Input.
            read x: Slot,
            /// Padding rule.
            host pads: PadSpec,
            /// `"constant"` or `"edge"`.
            attr mode: PadMode,
            /// Scalar pad value (a constant of x's dtype).
            read value: Slot,
            /// Output.
            write out: Slot,
        } shapeless: matches!(pads, PadSpec::Static { .. })
            && matches!(mode, PadMode::Constant | PadMode::Edge),
        /// `out = mlx_as_strided(x, shape, strides, 0)` with `spec.resolve(x.shape)`: sliding
        /// windows `[N, C, *out, *kernel]` of a channels-first input.
        Windows {
            /// Input (padded already).
            read x: Slot,
            /// Window geometry.
            attr spec: WindowSpec,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// AveragePool divisors: `(shape, data) = spec.divisor(x.shape)`, then
        /// `out = mlx_astype(array(data, shape, float32), dtype)`.
        PoolDivisor {
            /// The pool's (unpadded) input, read for its shape only.
            read x: Slot,
            /// Pool attributes.
            attr spec: PoolSpec,
            /// Output dtype.
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = take_axis(...)` repeated: for each `(axis, idx)` of `spec.resolve(x.shape,
        /// host)`, `x = mlx_take_axis(x, array(idx, int32), axis)`; then `out = x`.
        ResizeNearest {
            /// Input.
            read x: Slot,
            /// Resize parameters.
            host spec: ResizeSpec,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out` = the 1-D int64 array `x.shape[shape_range(rank, start, end)]` (no evaluation of
        /// `x` needed).
        Shape {
            /// Input, read for its shape only.
            read x: Slot,
            /// ONNX `start`.
            attr start: i64,
            /// ONNX `end`.
            attr end: Option<i64>,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_full(full_shape(shape), value, dtype)` (ONNX `ConstantOfShape`).
        Full {
            /// Output shape.
            host shape: ShapeSource,
            /// Scalar fill value (a constant of `dtype`).
            read value: Slot,
            /// Output dtype.
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_arange(start, limit, delta, dtype)` with the three scalars read on the host
        /// (ONNX `Range`).
        Arange {
            /// Start scalar.
            host start: FloatSource,
            /// Limit scalar.
            host limit: FloatSource,
            /// Delta scalar.
            host delta: FloatSource,
            /// Output dtype.
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `outs = mlx_split_sections(x, indices, axis)` where `indices` are the cumulative split
        /// points from `split_points(x.shape[axis], ...)`.
        Split {
            /// Input.
            read x: Slot,
            /// Axis.
            attr axis: i32,
            /// Sizes of the parts; `None` means equal parts (`outs.len()` of them, the last one
            /// smaller when the dim does not divide, as ONNX opset 18 allows).
            host sizes: Option<ShapeSource>,
            /// Outputs.
            write outs: Vec<Slot>,
        } shapeless: false,
        /// `out = mlx_cumsum_axis(x, axis, reverse, inclusive, dtype)` (ONNX `CumSum`).
        CumSum {
            /// Input.
            read x: Slot,
            /// Axis.
            attr axis: i32,
            /// Accumulate from the end.
            attr reverse: bool,
            /// Include the current element (ONNX `exclusive == 0`).
            attr inclusive: bool,
            /// Accumulation and output dtype (x's dtype).
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_cum{sum,prod}_axis(x, axis, reverse, inclusive)` in x's dtype (ONNX
        /// `CumProd`, and `CumSum` whose axis is an input known only at run time).
        Cumulative {
            /// Sum or product.
            attr op: CumOp,
            /// Input.
            read x: Slot,
            /// The axis: one value, negative counting from the end ([`cumulative_axis`]).
            host axis: ShapeSource,
            /// Accumulate from the end.
            attr reverse: bool,
            /// Include the current element (ONNX `exclusive == 0`).
            attr inclusive: bool,
            /// Output.
            write out: Slot,
        } shapeless: matches!(axis, ShapeSource::Static(_)),
        /// `out = mlx_view(x, dtype)`: x's bytes reinterpreted as `dtype` of the same width
        /// (ONNX `BitCast`; float bit manipulation).
        View {
            /// Input.
            read x: Slot,
            /// The element type to read the bytes as (same size as x's).
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_triu(x, k)` when `upper`, else `mlx_tril(x, k)` (ONNX `Trilu`).
        Triangle {
            /// Input (rank >= 2; the last two dims are the matrix).
            read x: Slot,
            /// Keep the upper triangle.
            attr upper: bool,
            /// Diagonal offset.
            attr k: i32,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_tile(x, reps)` (ONNX `Tile`).
        Tile {
            /// Input.
            read x: Slot,
            /// Repeats per axis.
            host reps: ShapeSource,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_quantized_matmul(x, w, scales, biases, transpose=true, group_size, bits,
        /// "affine")`: `x @ w_hat.T` with `w_hat = scales * q + biases` per group (com.microsoft
        /// MatMulNBits).
        QuantizedMatmul {
            /// Activations `[..., K]`.
            read x: Slot,
            /// Packed weights `[N, K * bits / 32]` (uint32).
            read w: Slot,
            /// Scales `[N, K / group_size]` (x's dtype).
            read scales: Slot,
            /// Biases `[N, K / group_size]` (x's dtype).
            read biases: Slot,
            /// Elements per group (32, 64 or 128).
            attr group_size: i32,
            /// Bits per element (4 or 8).
            attr bits: i32,
            /// Output `[..., N]`.
            write out: Slot,
        } shapeless: true,
        /// The present key or value cache of com.microsoft GroupQueryAttention: with
        /// `l = gqa_layout(B, S, past.shape[2], host(seqlens), host(total)[0])`, sequence `b` of
        /// `out` (`[B, H, l.present_len, D]`) is `past[b, :, :l.offsets[b]]`, then `new[b]`, then
        /// zeros (`mlx_slice`, `mlx_concatenate_axis`, `mlx_zeros`).
        KvCache {
            /// Past cache `[B, H, M, D]`, if any.
            read past: Option<Slot>,
            /// New keys or values `[B, H, S, D]`.
            read new: Slot,
            /// `seqlens_k` (`[B]`, read on the host).
            read_host seqlens: Slot,
            /// `total_sequence_length`.
            host total: ShapeSource,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// The attention mask of com.microsoft GroupQueryAttention: `l.mask(window)` as a bool
        /// array `[B, 1, S, P]` (`l` as for [`Step::KvCache`], `B`, `S` from `like`, which is
        /// `[B, H, S, D]`); with `bias` (`[B|1, H|1, S, T]`), the additive float mask
        /// `mlx_where(keep, pad(bias, T -> P), -inf)`. Without `bias`, when every query sees
        /// every key, `out` is left absent (`omit`: the fused attention step then runs unmasked)
        /// or is the bool scalar `true`.
        GqaMask {
            /// `seqlens_k` (read on the host).
            read_host seqlens: Slot,
            /// `total_sequence_length`.
            host total: ShapeSource,
            /// New keys `[B, H, S, D]` (read for their shape only).
            read like: Slot,
            /// Past cache (read for its shape only), if any.
            read past: Option<Slot>,
            /// Local window (`<= 0`: none).
            attr window: i64,
            /// Attention bias added to the scores, if any.
            read bias: Option<Slot>,
            /// Leave a mask that keeps every key absent (its reader takes an absent mask as
            /// none).
            attr omit: bool,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// Rotary positions of com.microsoft GroupQueryAttention: `l.positions(position_ids)` as an
        /// int64 array `[B, S]` (`position_ids` read on the host when given).
        GqaPositions {
            /// `seqlens_k` (read on the host).
            read_host seqlens: Slot,
            /// `total_sequence_length`.
            host total: ShapeSource,
            /// New keys `[B, H, S, D]` (read for their shape only).
            read like: Slot,
            /// Past cache (read for its shape only), if any.
            read past: Option<Slot>,
            /// Explicit position ids `[B, S]` (int64), if any.
            read_host position_ids: Option<Slot>,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_arange(0, like.shape[axis], 1, dtype)` (`like` is read for its shape only).
        Iota {
            /// The array whose dim gives the length.
            read like: Slot,
            /// The dim (may be negative: MLX's rule).
            attr axis: i32,
            /// Output dtype.
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_conv_general(x, w, a.conv..., flip = true)` with `a = spec.resolve(x.shape)`
        /// (channels-last input `[N, *spatial, C]`, weight `[O, *kernel, C/groups]`;
        /// `input_dilation` carries the strides of ONNX `ConvTranspose`, whose crop, where its
        /// pads exceed the kernel, the lowering emits as a `Slice`).
        ConvFlipped {
            /// Channels-last input.
            read x: Slot,
            /// Weight in `mlx_conv_general`'s layout.
            read w: Slot,
            /// Attributes.
            attr spec: ConvTransposeSpec,
            /// Output (channels-last).
            write out: Slot,
        } shapeless: spec.is_shapeless(),
        /// `out = mlx_argsort_axis(x, axis)`: uint32 indices that sort `x` ascending along `axis`;
        /// equal elements keep their order (MLX sorts stably).
        ArgSort {
            /// Input.
            read x: Slot,
            /// Axis.
            attr axis: i32,
            /// Output (uint32).
            write out: Slot,
        } shapeless: true,
        /// `out = <op.mlx_fn()>(x, vector(indices), updates, axes)`: MLX's scatter with one index
        /// array per axis in `axes` (broadcast together to shape `I`); `updates` has shape
        /// `I ++ slice`, the slice being 1 on `axes` and `x`'s dim elsewhere.
        Scatter {
            /// `none` / `add` / `mul` / `max` / `min`.
            attr op: ScatterOp,
            /// Data.
            read x: Slot,
            /// Integer index arrays (non-negative), one per axis.
            read indices: Vec<Slot>,
            /// Updates.
            read updates: Slot,
            /// Indexed axes.
            attr axes: Vec<i32>,
            /// Output.
            write out: Slot,
        } shapeless: true,
        /// `out = mlx_gather(x, vector(indices), axes, gather_slice_sizes(x.shape, axes))`: shape
        /// `I ++ slice` (the slice is 1 on `axes`, `x`'s dim elsewhere); MLX wraps negative
        /// indices of signed types.
        Gather {
            /// Data.
            read x: Slot,
            /// Integer index arrays, one per axis, broadcast together.
            read indices: Vec<Slot>,
            /// Indexed axes.
            attr axes: Vec<i32>,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_fft_<op>(x, n, axis)` of a complex64 `x`: `n` is `length`'s one value, or
        /// MLX's default for `x.shape[axis]` when `None` ([`FftOp::length`]); `axis` is one
        /// value (negative: MLX's rule).
        Fft {
            /// The transform.
            attr op: FftOp,
            /// Input (complex64).
            read x: Slot,
            /// The transform length, when given.
            host length: Option<ShapeSource>,
            /// The axis.
            host axis: ShapeSource,
            /// Output (complex64; float32 for `irfft`).
            write out: Slot,
        } shapeless: false,
        /// `out = mlx_linalg_det(x)` on the CPU stream (MLX's linear algebra runs on the CPU only);
        /// `x` is float32 `[..., n, n]`.
        Det {
            /// Square matrices.
            read x: Slot,
            /// Determinants.
            write out: Slot,
        } shapeless: false,
        /// A host kernel (see [`crate::kernel`]): the runtime reads each of `inputs` to the host
        /// (`HostArg::Value`: the slot's values in its dtype; `ShapeOf`: its array's shape as
        /// int64; `Const`, `Absent`), calls `run_host_kernel(kernel, inputs, attrs)` and makes
        /// arrays of the results for `outputs` (`mlx_array_new_data`). For ops MLX can't express:
        /// data-dependent output shapes (NonZero, Unique, NonMaxSuppression) or gathers driven by
        /// small host-side tables (RoiAlign, MaxRoiPool, windows of a run-time size).
        HostKernel {
            /// The kernel's registered name.
            attr kernel: String,
            /// Where each input comes from.
            mixed inputs: Vec<crate::host::HostArg>,
            /// Static attributes.
            attr attrs: crate::kernel::KernelAttrs,
            /// One slot per kernel output, in order.
            write outputs: Vec<Slot>,
        } shapeless: false,
        /// A random draw with the key `mlx_random_key(random_draw_seed(base, run))`, `run`
        /// counting this step's runs in its program (`base` from [`random_base`]): `Normal`
        /// `mlx_random_normal(shape, float32, mean, scale)`, `Uniform`
        /// `mlx_random_uniform(low, high, shape, float32)`, `Bernoulli`
        /// `mlx_random_bernoulli(x, x.shape)`, `Categorical`
        /// `mlx_random_categorical_num_samples(x, 1, samples)`; then `mlx_astype(.., dtype)`.
        /// `shape` is `x.shape` when `x` is set (the `*Like` ops read it for its shape only).
        /// A plan holding one is eager ([`Step::is_random`]): a compiled closure would replay
        /// its first key.
        Random {
            /// The distribution.
            attr dist: RandomDist,
            /// Shape source (`*Like`), probabilities (`Bernoulli`) or logits (`Categorical`).
            read x: Option<Slot>,
            /// The output shape when `x` is `None`.
            attr shape: Vec<i32>,
            /// The ONNX `seed` attribute (`None`: a seed the runtime picks per program).
            attr seed: Option<f32>,
            /// Output dtype.
            attr dtype: DataType,
            /// Output.
            write out: Slot,
        } shapeless: false,
        /// A run-time requirement on values (ORT's kernels check them; MLX doesn't): the run fails
        /// with `node '<node>' (<op>): <what>` unless every element of `ok` (bool) is true. `out`
        /// is `all(ok)` (bool scalar); the runtime folds it into the run's status, evaluated with
        /// the outputs, so the check costs no extra synchronisation.
        Require {
            /// The condition (bool, any shape; empty is true).
            read ok: Slot,
            /// What is wrong when it fails.
            attr what: String,
            /// `all(ok)`.
            write out: Slot,
        } shapeless: true,
        /// Integer shape arithmetic on the host during the trace (no MLX call, no device read):
        /// `crate::host::eval_host_node(node, args)`, bound to `out` as a host value and as an
        /// array. Exported decoders compute reshape targets and slice bounds from `Shape` of
        /// activations whose dims the planner can't know; MLX knows every array's shape while
        /// building the graph, so the whole chain runs here.
        HostEval {
            /// The ONNX node (a host-program op, or `Shape`).
            attr node: Box<crate::host::HostNode>,
            /// Where each input's host value comes from.
            mixed args: Vec<crate::host::HostArg>,
            /// The result.
            write out: Slot,
        } shapeless: false,
        /// Runs one of two sub-plans, chosen by the host value of `cond` (a one-element bool
        /// tensor): `then_body` on `then_args` when it is true, else `else_body` on
        /// `else_args`; binds the chosen body's outputs to `outs`. The runtime interprets it
        /// with its sub-programs (never inside a compiled closure).
        Branch {
            /// The condition, read on the host.
            host cond: Slot,
            /// Taken when `cond` is true.
            attr then_body: SubPlan,
            /// Taken when `cond` is false.
            attr else_body: SubPlan,
            /// Outer values `then_body` reads (its inputs, in order).
            read then_args: Vec<Slot>,
            /// Outer values `else_body` reads (its inputs, in order).
            read else_args: Vec<Slot>,
            /// The outputs.
            write outs: Vec<Slot>,
        } shapeless: false,
        /// Runs `body` repeatedly, keeping carried values as device arrays between iterations.
        ///
        /// The body's formal inputs are: with `counted`, the iteration number (int64 scalar)
        /// and the continue flag (bool scalar) first; then the carried values; then one slice
        /// of each `scanned` input (the iteration's index along its [`ScanAxis`], that axis
        /// removed). Its outputs are: with `counted`, the next continue flag first; then the
        /// next carried values; then per-iteration values that are stacked along their
        /// [`ScanAxis`] into the trailing `outs`. `outs` holds the final carried values, then
        /// the stacked outputs.
        ///
        /// The iteration count is the smallest of: `max_trips`' host value (when set), the
        /// length of the scanned inputs along their axes (when any), and the first iteration
        /// whose continue flag (`cond` before the first, the body's afterwards) is false.
        ///
        /// With `inline` (not `counted`, no `max_trips` or `cond`, at least one scanned input,
        /// a body with no host program that reads nothing on the host), the count is the
        /// scanned inputs' length, known from the shapes: the body's steps are traced into the
        /// enclosing program once per iteration (eagerly, or into the enclosing compiled
        /// closure, so the plan stays compilable), each slice is `mlx_slice` then
        /// `mlx_squeeze_axes`, and with no iteration a stacked output is `mlx_zeros` of the
        /// shape one iteration's output would have (the body traced once on zero slices, never
        /// evaluated) with 0 on the axis, `empty_shapes` unused. Otherwise the runtime runs the
        /// body as a sub-program (through its own compiled closures), never inside a compiled
        /// closure.
        Repeat {
            /// The body.
            attr body: SubPlan,
            /// The body is traced inline (see above).
            attr inline: bool,
            /// The body takes the iteration number and continue flag, and returns the flag.
            attr counted: bool,
            /// The largest iteration count (an integer scalar), read on the host.
            host max_trips: Option<Slot>,
            /// The initial continue flag (a bool scalar), read on the host.
            host cond: Option<Slot>,
            /// Initial values of the carried values.
            read carried: Vec<Slot>,
            /// Inputs sliced per iteration.
            read scanned: Vec<Slot>,
            /// How each of `scanned` is sliced.
            attr scan_in: Vec<ScanAxis>,
            /// Outer values the body reads (its trailing inputs, in order).
            read args: Vec<Slot>,
            /// How each per-iteration output is stacked.
            attr scan_out: Vec<ScanAxis>,
            /// Shapes of one iteration's stacked outputs as declared (unknown dims 0), used
            /// when no iteration runs.
            attr empty_shapes: Vec<Vec<i64>>,
            /// Final carried values, then stacked outputs.
            write outs: Vec<Slot>,
        } shapeless: false,
    }
}
