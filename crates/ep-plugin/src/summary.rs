//! The session's placement summary: one warning line when fewer than all nodes run on MLX.
//!
//! ORT may call `GetCapability` more than once per graph: after a first pass it inlines the
//! function ops no EP took (one whose attributes or inputs the EP declines, say) and
//! partitions again. Nodes claimed in an earlier pass are then fused nodes of this EP (domain
//! `MLXExecutionProvider`), which are neither new nodes nor declines; nodes declined earlier
//! either come back (declined again) or were replaced by their function body. So per graph the
//! tally is: every node claimed in any pass, plus the nodes the latest pass did not claim.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// How many decline reasons the line names.
const TOP_REASONS: usize = 3;

/// Whether a node of `domain` is one this EP fused in an earlier `GetCapability` pass.
pub fn is_own_fused_node(domain: &str) -> bool {
    domain == crate::options::EP_NAME
}

/// A node a `GetCapability` pass did not claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotClaimed {
    /// The node's name.
    pub node: String,
    /// Why.
    pub reason: String,
    /// ORT had already assigned it to another EP (the CPU EP, after an earlier pass): the
    /// reason of the pass that declined it is the one worth reporting.
    pub assigned_elsewhere: bool,
}

#[derive(Debug, Default)]
struct GraphTally {
    /// Nodes claimed over all passes (they are fused and don't come back).
    claimed: usize,
    /// The nodes the latest pass did not claim.
    not_claimed: Vec<NotClaimed>,
}

/// The placement of one session's nodes, over all its `GetCapability` passes.
#[derive(Debug, Default)]
pub struct SessionSummary {
    graphs: Mutex<HashMap<String, GraphTally>>,
}

impl SessionSummary {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, GraphTally>> {
        // A panic elsewhere can't leave the tallies half-written: take them as they are.
        self.graphs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one `GetCapability` pass over graph `graph`: `claimed` nodes went to MLX, the
    /// others (this EP's fused nodes excluded by the caller) stay on ORT for these reasons.
    pub fn record(&self, graph: &str, claimed: usize, mut not_claimed: Vec<NotClaimed>) {
        let mut graphs = self.lock();
        let tally = graphs.entry(graph.to_string()).or_default();
        for n in not_claimed.iter_mut().filter(|n| n.assigned_elsewhere) {
            if let Some(earlier) = tally.not_claimed.iter().find(|e| e.node == n.node) {
                n.reason.clone_from(&earlier.reason);
            }
        }
        tally.claimed += claimed;
        tally.not_claimed = not_claimed;
    }

    /// `(nodes on MLX, all nodes)` over the session's graphs.
    pub fn counts(&self) -> (usize, usize) {
        let graphs = self.lock();
        let on_mlx: usize = graphs.values().map(|t| t.claimed).sum();
        let left: usize = graphs.values().map(|t| t.not_claimed.len()).sum();
        (on_mlx, on_mlx + left)
    }

    /// The warning line, when some node does not run on MLX: "MLXExecutionProvider: N of M
    /// nodes on MLX; top reasons: ..." with the most frequent reasons and their counts.
    pub fn line(&self) -> Option<String> {
        let (on_mlx, total) = self.counts();
        if on_mlx == total {
            return None;
        }
        let graphs = self.lock();
        // Counted in a stable order (graph name, then node order) so ties read the same in
        // every run.
        let mut names: Vec<&String> = graphs.keys().collect();
        names.sort();
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for name in names {
            for n in &graphs[name].not_claimed {
                let reason = n.reason.as_str();
                match counts.iter_mut().find(|(r, _)| *r == reason) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((reason, 1)),
                }
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        let top: Vec<String> = counts
            .iter()
            .take(TOP_REASONS)
            .map(|(reason, n)| format!("{n}x {reason}"))
            .collect();
        Some(format!(
            "{}: {on_mlx} of {total} nodes on MLX; top reasons: {} (ORTMLX_LOG_CLAIMS=1 lists every node)",
            crate::options::EP_NAME,
            top.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons(list: &[&str]) -> Vec<NotClaimed> {
        list.iter()
            .enumerate()
            .map(|(i, s)| NotClaimed {
                node: format!("n{i}"),
                reason: s.to_string(),
                assigned_elsewhere: false,
            })
            .collect()
    }

    #[test]
    fn all_on_mlx_says_nothing() {
        let s = SessionSummary::default();
        assert_eq!(s.line(), None);
        s.record("g", 3, vec![]);
        assert_eq!(s.counts(), (3, 3));
        assert_eq!(s.line(), None);
    }

    #[test]
    fn top_reasons_with_counts() {
        let s = SessionSummary::default();
        s.record("g", 2, reasons(&["a", "b", "b", "c", "c", "c", "d"]));
        assert_eq!(
            s.line().unwrap(),
            "MLXExecutionProvider: 2 of 9 nodes on MLX; top reasons: 3x c; 2x b; 1x a \
             (ORTMLX_LOG_CLAIMS=1 lists every node)"
        );
    }

    #[test]
    fn a_later_pass_replaces_the_declines_and_adds_the_claims() {
        // Pass 1: Relu claimed, Swish declined. ORT inlines Swish; pass 2 sees the fused node
        // (left out by the caller) and Swish's body, all claimed.
        let s = SessionSummary::default();
        s.record("g", 1, reasons(&["no MLX lowering for ai.onnx::Swish"]));
        assert_eq!(s.counts(), (1, 2));
        s.record("g", 4, vec![]);
        assert_eq!(s.counts(), (5, 5));
        assert_eq!(s.line(), None);
        // A node declined in pass 1 and given to the CPU EP keeps its first reason.
        let s = SessionSummary::default();
        s.record("g", 1, reasons(&["Softmax: float64"]));
        let mut later = reasons(&["assigned to CPUExecutionProvider"]);
        later[0].assigned_elsewhere = true;
        s.record("g", 4, later);
        assert_eq!(s.counts(), (5, 6));
        assert!(
            s.line()
                .unwrap()
                .contains("top reasons: 1x Softmax: float64 (")
        );
        // Another graph (a subgraph) adds to the session's counts.
        s.record("body", 0, reasons(&["x"]));
        assert_eq!(s.counts(), (5, 7));
        assert!(
            s.line()
                .unwrap()
                .contains("5 of 7 nodes on MLX; top reasons: 1x x; 1x Softmax: float64 (")
        );
    }
}
