//! Operands of the steps that hold sub-plans (branches and repeated bodies).

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::plan::Plan;
use crate::step::Step;

/// A lowered body (a branch, or the body of a repeated step): a [`Plan`] of its own whose
/// inputs are the body's formal inputs followed by the outer values the step passes in
/// (`args` of the step, in order), and whose outputs are the body's outputs.
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SubPlan {
    /// The body's plan.
    pub plan: Box<Plan>,
    /// How many of the plan's inputs are formal inputs (the rest are outer values).
    pub formal_inputs: usize,
}

impl SubPlan {
    /// A stable digest of the body (for step listings and common-step elimination, which
    /// compare steps by their `Debug` text).
    pub fn digest(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{:?}", self.plan).hash(&mut h);
        self.formal_inputs.hash(&mut h);
        h.finish()
    }
}

impl fmt::Debug for SubPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "plan({} in, {} steps, {} out, #{:016x})",
            self.plan.inputs.len(),
            self.plan.steps.len(),
            self.plan.outputs.len(),
            self.digest()
        )
    }
}

/// How a repeated step slices one input, or stacks one output, per iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ScanAxis {
    /// The axis; negative counts from the end (of the sliced input's rank, or of the stacked
    /// output's rank).
    pub axis: i64,
    /// True to walk the axis from its end (inputs) or to stack the last iteration first
    /// (outputs).
    pub reverse: bool,
}

impl ScanAxis {
    /// The axis as a non-negative index into a rank-`rank` array, or why it is out of range.
    pub fn resolve(&self, rank: usize) -> Result<usize, String> {
        let r = rank as i64;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if a < 0 || a >= r {
            return Err(format!(
                "axis {} is out of range for rank {rank}",
                self.axis
            ));
        }
        Ok(a as usize)
    }
}

impl Step {
    /// The sub-plans the step runs (branches, repeated bodies); empty for most steps.
    pub fn sub_plans(&self) -> Vec<&SubPlan> {
        match self {
            Step::Branch {
                then_body,
                else_body,
                ..
            } => vec![then_body, else_body],
            Step::Repeat { body, .. } => vec![body],
            _ => Vec::new(),
        }
    }

    /// True for a step whose sub-plans the runtime chooses or repeats on the host (never
    /// inside a compiled closure); false for an inline [`Step::Repeat`], which traces its body
    /// into the enclosing program, and for steps without sub-plans.
    pub fn runs_sub_plans_on_host(&self) -> bool {
        matches!(
            self,
            Step::Branch { .. } | Step::Repeat { inline: false, .. }
        )
    }
}
