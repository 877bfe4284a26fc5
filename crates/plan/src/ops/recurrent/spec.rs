//! The static description of a recurrent layer: ONNX RNN / GRU / LSTM with attributes resolved
//! by the rules of ORT's CPU kernels.

use std::fmt;

/// Which recurrent layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RecurrentKind {
    /// ONNX `RNN`: `H = f(X W^T + H R^T + Wb + Rb)`.
    Rnn,
    /// ONNX `GRU`: gates z, r, h.
    Gru,
    /// ONNX `LSTM`: gates i, o, f, c.
    Lstm,
}

impl RecurrentKind {
    /// Gates stacked in W / R.
    pub fn gates(self) -> i64 {
        match self {
            RecurrentKind::Rnn => 1,
            RecurrentKind::Gru => 3,
            RecurrentKind::Lstm => 4,
        }
    }

    /// Activation functions per direction.
    pub fn acts(self) -> usize {
        match self {
            RecurrentKind::Rnn => 1,
            RecurrentKind::Gru => 2,
            RecurrentKind::Lstm => 3,
        }
    }

    /// Number of ONNX outputs (Y, Y_h and, for LSTM, Y_c).
    pub fn outputs(self) -> usize {
        if self == RecurrentKind::Lstm { 3 } else { 2 }
    }
}

/// A recurrent activation with its resolved alpha / beta (ORT's formulas).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Activation {
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `max(x, 0)`.
    Relu,
    /// `alpha * x + beta`.
    Affine(f32, f32),
    /// `x >= 0 ? x : alpha * x`.
    LeakyRelu(f32),
    /// `x > alpha ? x : 0`.
    ThresholdedRelu(f32),
    /// `alpha * tanh(beta * x)`.
    ScaledTanh(f32, f32),
    /// `min(max(alpha * x + beta, 0), 1)`.
    HardSigmoid(f32, f32),
    /// `x >= 0 ? x : alpha * (e^x - 1)`.
    Elu(f32),
    /// `x / (1 + |x|)`.
    Softsign,
    /// `log(e^x + 1)`.
    Softplus,
}

impl Activation {
    /// The activation of a lower-case ONNX name with its parameters.
    pub fn from_name(name: &str, alpha: f32, beta: f32) -> Option<Activation> {
        use Activation::*;
        Some(match name {
            "sigmoid" => Sigmoid,
            "tanh" => Tanh,
            "relu" => Relu,
            "affine" => Affine(alpha, beta),
            "leakyrelu" => LeakyRelu(alpha),
            "thresholdedrelu" => ThresholdedRelu(alpha),
            "scaledtanh" => ScaledTanh(alpha, beta),
            "hardsigmoid" => HardSigmoid(alpha, beta),
            "elu" => Elu(alpha),
            "softsign" => Softsign,
            "softplus" => Softplus,
            _ => return None,
        })
    }
}

/// Static attributes of one recurrent node, computed in float32.
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RecurrentSpec {
    /// The layer.
    pub kind: RecurrentKind,
    /// One entry per direction: true when it runs backwards in time.
    pub reverse: Vec<bool>,
    /// `hidden_size`.
    pub hidden: i64,
    /// `kind.acts()` activations per direction, directions in order (ONNX order within one:
    /// RNN `f`; GRU `f, g`; LSTM `f, g, h`).
    pub acts: Vec<Activation>,
    /// Pre-activation clip `[-c, c]`, when set.
    pub clip: Option<f32>,
    /// LSTM `input_forget`: `f = 1 - i`.
    pub input_forget: bool,
    /// GRU `linear_before_reset`.
    pub linear_before_reset: bool,
}

impl RecurrentSpec {
    /// The activations of direction `d`.
    pub fn dir_acts(&self, d: usize) -> &[Activation] {
        let n = self.kind.acts();
        &self.acts[d * n..(d + 1) * n]
    }
}

impl fmt::Debug for RecurrentSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} reverse={:?} hidden={} acts={:?}",
            self.kind, self.reverse, self.hidden, self.acts
        )?;
        if let Some(c) = self.clip {
            write!(f, " clip={c}")?;
        }
        if self.input_forget {
            write!(f, " input_forget")?;
        }
        if self.linear_before_reset {
            write!(f, " linear_before_reset")?;
        }
        Ok(())
    }
}
