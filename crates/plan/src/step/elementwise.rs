//! Elementwise and reduction op kinds named by [`super::Step::Unary`], [`super::Step::Binary`],
//! [`super::Step::Reduce`] and [`super::Step::ArgReduce`].

/// Elementwise one-input MLX ops; the result has the input's dtype (the planner only emits the
/// float-only ops on float inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum UnaryOp {
    /// `mlx_abs`.
    Abs,
    /// `mlx_negative`.
    Negative,
    /// `mlx_exp`.
    Exp,
    /// `mlx_log`.
    Log,
    /// `mlx_log1p`.
    Log1p,
    /// `mlx_expm1`.
    Expm1,
    /// `mlx_sqrt`.
    Sqrt,
    /// `mlx_rsqrt`.
    Rsqrt,
    /// `mlx_square`.
    Square,
    /// `mlx_reciprocal`.
    Reciprocal,
    /// `mlx_erf`.
    Erf,
    /// `mlx_tanh`.
    Tanh,
    /// `mlx_sigmoid`.
    Sigmoid,
    /// `mlx_sin`.
    Sin,
    /// `mlx_cos`.
    Cos,
    /// `mlx_tan`.
    Tan,
    /// `mlx_arcsin`.
    Asin,
    /// `mlx_arccos`.
    Acos,
    /// `mlx_arctan`.
    Atan,
    /// `mlx_sinh`.
    Sinh,
    /// `mlx_cosh`.
    Cosh,
    /// `mlx_arcsinh`.
    Asinh,
    /// `mlx_arccosh`.
    Acosh,
    /// `mlx_arctanh`.
    Atanh,
    /// `mlx_floor`.
    Floor,
    /// `mlx_ceil`.
    Ceil,
    /// `mlx_round` with `decimals = 0` (round half to even).
    Round,
    /// `mlx_sign`.
    Sign,
    /// `mlx_logical_not` (bool in, bool out).
    LogicalNot,
    /// `mlx_bitwise_invert` (integers).
    BitwiseInvert,
    /// `mlx_isnan` (bool out).
    IsNan,
    /// `mlx_isinf` (bool out).
    IsInf,
    /// `mlx_isposinf` (bool out).
    IsPosInf,
    /// `mlx_isneginf` (bool out).
    IsNegInf,
}

impl UnaryOp {
    /// The mlx-c function this op calls.
    pub fn mlx_fn(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Abs => "mlx_abs",
            Negative => "mlx_negative",
            Exp => "mlx_exp",
            Log => "mlx_log",
            Log1p => "mlx_log1p",
            Expm1 => "mlx_expm1",
            Sqrt => "mlx_sqrt",
            Rsqrt => "mlx_rsqrt",
            Square => "mlx_square",
            Reciprocal => "mlx_reciprocal",
            Erf => "mlx_erf",
            Tanh => "mlx_tanh",
            Sigmoid => "mlx_sigmoid",
            Sin => "mlx_sin",
            Cos => "mlx_cos",
            Tan => "mlx_tan",
            Asin => "mlx_arcsin",
            Acos => "mlx_arccos",
            Atan => "mlx_arctan",
            Sinh => "mlx_sinh",
            Cosh => "mlx_cosh",
            Asinh => "mlx_arcsinh",
            Acosh => "mlx_arccosh",
            Atanh => "mlx_arctanh",
            Floor => "mlx_floor",
            Ceil => "mlx_ceil",
            Round => "mlx_round",
            Sign => "mlx_sign",
            LogicalNot => "mlx_logical_not",
            BitwiseInvert => "mlx_bitwise_invert",
            IsNan => "mlx_isnan",
            IsInf => "mlx_isinf",
            IsPosInf => "mlx_isposinf",
            IsNegInf => "mlx_isneginf",
        }
    }
}

/// Elementwise two-input MLX ops with numpy broadcasting (the same as ONNX multidirectional
/// broadcasting). The planner always passes operands of one dtype, so MLX's promotion never
/// applies; comparisons and logical ops return bool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum BinaryOp {
    /// `mlx_add`.
    Add,
    /// `mlx_subtract`.
    Subtract,
    /// `mlx_multiply`.
    Multiply,
    /// `mlx_divide` (emitted for float operands only: MLX divides integers into floats).
    Divide,
    /// `mlx_floor_divide` (integers; see the note on integer division in `STEPS.md`).
    FloorDivide,
    /// `mlx_remainder` (result has the divisor's sign, like Python's `%`).
    Remainder,
    /// `mlx_power`.
    Power,
    /// `mlx_maximum`.
    Maximum,
    /// `mlx_minimum`.
    Minimum,
    /// `mlx_equal` (bool out).
    Equal,
    /// `mlx_not_equal` (bool out).
    NotEqual,
    /// `mlx_less` (bool out).
    Less,
    /// `mlx_less_equal` (bool out).
    LessEqual,
    /// `mlx_greater` (bool out).
    Greater,
    /// `mlx_greater_equal` (bool out).
    GreaterEqual,
    /// `mlx_logical_and` (bool).
    LogicalAnd,
    /// `mlx_logical_or` (bool).
    LogicalOr,
    /// `mlx_bitwise_and`.
    BitwiseAnd,
    /// `mlx_bitwise_or`.
    BitwiseOr,
    /// `mlx_bitwise_xor`.
    BitwiseXor,
    /// `mlx_left_shift`.
    LeftShift,
    /// `mlx_right_shift`.
    RightShift,
    /// `mlx_arctan2`.
    Atan2,
    /// `mlx_logaddexp` (`log(exp(a) + exp(b))`, computed stably).
    LogAddExp,
}

impl BinaryOp {
    /// The mlx-c function this op calls.
    pub fn mlx_fn(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "mlx_add",
            Subtract => "mlx_subtract",
            Multiply => "mlx_multiply",
            Divide => "mlx_divide",
            FloorDivide => "mlx_floor_divide",
            Remainder => "mlx_remainder",
            Power => "mlx_power",
            Maximum => "mlx_maximum",
            Minimum => "mlx_minimum",
            Equal => "mlx_equal",
            NotEqual => "mlx_not_equal",
            Less => "mlx_less",
            LessEqual => "mlx_less_equal",
            Greater => "mlx_greater",
            GreaterEqual => "mlx_greater_equal",
            LogicalAnd => "mlx_logical_and",
            LogicalOr => "mlx_logical_or",
            BitwiseAnd => "mlx_bitwise_and",
            BitwiseOr => "mlx_bitwise_or",
            BitwiseXor => "mlx_bitwise_xor",
            LeftShift => "mlx_left_shift",
            RightShift => "mlx_right_shift",
            Atan2 => "mlx_arctan2",
            LogAddExp => "mlx_logaddexp",
        }
    }

    /// True when the result is bool whatever the operand dtype.
    pub fn returns_bool(self) -> bool {
        use BinaryOp::*;
        matches!(
            self,
            Equal | NotEqual | Less | LessEqual | Greater | GreaterEqual | LogicalAnd | LogicalOr
        )
    }
}

/// Reductions over axes (`mlx_<op>_axes(x, axes, keepdims)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ReduceOp {
    /// `mlx_sum_axes`.
    Sum,
    /// `mlx_mean_axes` (emitted for float inputs only).
    Mean,
    /// `mlx_max_axes`.
    Max,
    /// `mlx_min_axes`.
    Min,
    /// `mlx_prod_axes`.
    Prod,
    /// `mlx_logsumexp_axes` (float inputs only).
    LogSumExp,
    /// `mlx_all_axes` (bool out).
    All,
    /// `mlx_any_axes` (bool out).
    Any,
}

impl ReduceOp {
    /// The mlx-c function this op calls.
    pub fn mlx_fn(self) -> &'static str {
        match self {
            ReduceOp::Sum => "mlx_sum_axes",
            ReduceOp::Mean => "mlx_mean_axes",
            ReduceOp::Max => "mlx_max_axes",
            ReduceOp::Min => "mlx_min_axes",
            ReduceOp::Prod => "mlx_prod_axes",
            ReduceOp::LogSumExp => "mlx_logsumexp_axes",
            ReduceOp::All => "mlx_all_axes",
            ReduceOp::Any => "mlx_any_axes",
        }
    }

    /// The result of this reduction over an empty set (a zero-size reduced axis), which MLX
    /// refuses for max/min: ONNX defines it as the reduction's identity (ReduceSum 0,
    /// ReduceProd 1, ReduceMax the lowest value of the type, -inf for floats, ReduceMin the
    /// highest, ReduceLogSumExp -inf, all -> true, any -> false). `None` (Mean) leaves it to
    /// MLX (0 / 0 = NaN, as numpy).
    pub fn empty_value(self) -> Option<EmptyValue> {
        Some(match self {
            ReduceOp::Mean => return None,
            ReduceOp::Sum => EmptyValue::Zero,
            ReduceOp::Prod => EmptyValue::One,
            ReduceOp::LogSumExp => EmptyValue::NegInfinity,
            ReduceOp::All => EmptyValue::True,
            ReduceOp::Any => EmptyValue::False,
            ReduceOp::Max => EmptyValue::Lowest,
            ReduceOp::Min => EmptyValue::Highest,
        })
    }
}

/// A fill value given by kind, in the dtype of the array it fills (see
/// [`ReduceOp::empty_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EmptyValue {
    /// `0`.
    Zero,
    /// `1`.
    One,
    /// `-inf` (floats).
    NegInfinity,
    /// `true`.
    True,
    /// `false`.
    False,
    /// The lowest value of the type (`-inf` for floats, `false` for bool).
    Lowest,
    /// The highest value of the type (`+inf` for floats, `true` for bool).
    Highest,
}

/// Index-returning reductions (`mlx_argmax_axis` / `mlx_argmin_axis`); MLX returns uint32, so
/// the planner follows them with an `AsType` to int64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ArgReduceOp {
    /// `mlx_argmax_axis`.
    ArgMax,
    /// `mlx_argmin_axis`.
    ArgMin,
}
