//! `ai.onnx.ml` tree ensembles: TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1 and
//! 3, int64 labels) and TreeEnsemble (opset 5), following ONNX Runtime's CPU kernel.
//!
//! At plan time the trees become flat node tables (feature id, threshold, comparison, missing
//! value rule, the true and false child) over all trees, leaves pointing at themselves. The
//! traversal runs on MLX as a loop of gathers bounded by the deepest tree: each level reads the
//! feature of every (row, tree) node, compares it with the node's threshold and picks a child,
//! so after `depth` levels each (row, tree) pair sits on its leaf. Leaf weights are gathered
//! from a `[nodes, targets]` table and aggregated over the trees in tree order, one add per
//! tree (ORT's scalar order, so sums round as ORT's do when ORT itself does not split the trees
//! across threads; beyond 512 trees an MLX sum is used).
//!
//! ORT's scoring rules are kept: a target or class no leaf gave a weight to outputs 0, one
//! target ignores every post transform but PROBIT, a two-class classifier follows ORT's
//! single-score rule (labels and the `[1 - p, p]` / `[-s, s]` score pairs), and the classifier
//! always sums. BRANCH_MEMBER (opset 5) is lowered as ORT's chain of BRANCH_EQ nodes. A float64
//! input compares and sums in float64 (thresholds from the float attributes or from their
//! float64 `*_as_tensor` twins), which MLX runs on its CPU stream; ORT's transforms stay in
//! float32 there too. The large member sets ORT looks up another way, `*_as_tensor` of another
//! type than the input (ORT fails to read them), PROBIT, string labels and malformed trees are
//! declined and stay on ORT's CPU EP.

use std::collections::HashMap;

use onnx_ir::{Attribute, DataType, Node, TensorData};

use super::linear::{Post, apply_post, post_transform};
use super::*;
use crate::decline;
use crate::step::{ArgReduceOp, ReduceAxes, ReduceOp, UnaryOp as U};

/// Registers the tree ensembles.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(ML, "TreeEnsembleRegressor", 1, 4, claim_regressor, lower_regressor)
        .notes("float32/float64 `[N, C]`; all node modes, missing_value_tracks_true, SUM/AVERAGE/MIN/MAX, base_values, `*_as_tensor` of the input's type; PROBIT declined");
    r.op(ML, "TreeEnsembleClassifier", 1, 4, claim_classifier, lower_classifier)
        .notes("float32/float64/int32/int64 `[N, C]`, `classlabels_int64s`; ORT's binary single-score rule; PROBIT and string labels declined");
    r.op(ML, "TreeEnsemble", 5, ML_MAX, claim_v5, lower_v5)
        .notes("float32/float64 `[N, C]`; BRANCH_MEMBER sets of under 31 values in [0, 30] (ORT's BRANCH_EQ chains); post_transform codes as ORT reads them; larger sets and PROBIT declined");
}

/// The deepest tree (in branch nodes from root to leaf) lowered: one loop level per node.
const MAX_DEPTH: usize = 256;

/// The node comparisons (ORT's `NODE_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Mode {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    Leaf,
}

impl Mode {
    fn from_v3(s: &[u8]) -> Option<Mode> {
        Some(match s {
            b"BRANCH_LEQ" => Mode::Leq,
            b"BRANCH_LT" => Mode::Lt,
            b"BRANCH_GTE" => Mode::Gte,
            b"BRANCH_GT" => Mode::Gt,
            b"BRANCH_EQ" => Mode::Eq,
            b"BRANCH_NEQ" => Mode::Neq,
            b"LEAF" => Mode::Leaf,
            _ => return None,
        })
    }

    fn op(self) -> BinaryOp {
        match self {
            Mode::Leq => BinaryOp::LessEqual,
            Mode::Lt => BinaryOp::Less,
            Mode::Gte => BinaryOp::GreaterEqual,
            Mode::Gt => BinaryOp::Greater,
            Mode::Eq => BinaryOp::Equal,
            Mode::Neq | Mode::Leaf => BinaryOp::NotEqual,
        }
    }

    fn code(self) -> i32 {
        self as i32
    }
}

/// ORT's aggregate functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Agg {
    Average,
    Sum,
    Min,
    Max,
}

/// The trees as flat tables (one entry per node of every tree; leaves point at themselves).
#[derive(Debug, Default)]
struct Forest {
    feature: Vec<i32>,
    threshold: Vec<f64>,
    mode: Vec<Mode>,
    missing_true: Vec<bool>,
    on_true: Vec<i32>,
    on_false: Vec<i32>,
    /// The (target, weight) votes of each leaf, in ORT's order.
    weights: Vec<Vec<(usize, f64)>>,
    /// The root of each tree, in ORT's tree order.
    roots: Vec<i32>,
    /// Branch nodes on the longest root-to-leaf path.
    depth: usize,
    /// The largest feature id of any node (ORT checks it against the input's features).
    max_feature: i64,
    /// Targets (regressors) or classes.
    targets: usize,
}

impl Forest {
    fn push(&mut self, feature: i32, threshold: f64, mode: Mode, missing_true: bool) -> usize {
        let i = self.feature.len();
        self.feature.push(feature);
        self.threshold.push(threshold);
        self.mode.push(mode);
        self.missing_true.push(missing_true);
        self.on_true.push(i as i32);
        self.on_false.push(i as i32);
        self.weights.push(Vec::new());
        i
    }

    /// Checks the trees reachable from the roots (no cycle, every leaf voting, bounded depth)
    /// and sets `depth`.
    fn finish(&mut self, op: &str) -> Result<(), String> {
        if self.roots.is_empty() {
            return Err(format!("{op}: no trees"));
        }
        let n = self.feature.len();
        // Iterative depth-first walk; a path longer than the node count is a cycle.
        let mut depth = 0usize;
        for &root in &self.roots {
            let mut stack = vec![(root as usize, 0usize)];
            while let Some((i, d)) = stack.pop() {
                if d > n || d > MAX_DEPTH {
                    return Err(format!(
                        "{op}: a tree is deeper than {MAX_DEPTH} nodes or has a cycle"
                    ));
                }
                if self.mode[i] == Mode::Leaf {
                    if self.weights[i].is_empty() {
                        return Err(format!(
                            "{op}: a leaf has no weight (ORT's kernel rejects it)"
                        ));
                    }
                    depth = depth.max(d);
                    continue;
                }
                stack.push((self.on_true[i] as usize, d + 1));
                stack.push((self.on_false[i] as usize, d + 1));
            }
        }
        if depth == 0 {
            return Err(format!("{op}: every tree is a single leaf"));
        }
        self.depth = depth;
        Ok(())
    }

    fn same_mode(&self) -> Option<Mode> {
        let mut modes = self.mode.iter().filter(|m| **m != Mode::Leaf);
        let first = *modes.next()?;
        modes.all(|m| *m == first).then_some(first)
    }

    fn has_missing(&self) -> bool {
        self.missing_true
            .iter()
            .zip(&self.mode)
            .any(|(m, mode)| *m && *mode != Mode::Leaf)
    }

    /// The leaves reachable from `root`.
    fn leaves(&self, root: i32) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![root as usize];
        while let Some(i) = stack.pop() {
            if self.mode[i] == Mode::Leaf {
                out.push(i);
            } else {
                stack.push(self.on_true[i] as usize);
                stack.push(self.on_false[i] as usize);
            }
        }
        out
    }

    /// Per target: true when some tree gives it a weight on every leaf, so every row has a
    /// score for it.
    fn always_scored(&self) -> Vec<bool> {
        let mut out = vec![false; self.targets];
        for &root in &self.roots {
            let leaves = self.leaves(root);
            for (k, o) in out.iter_mut().enumerate() {
                if !*o
                    && leaves
                        .iter()
                        .all(|&l| self.weights[l].iter().any(|w| w.0 == k))
                {
                    *o = true;
                }
            }
        }
        out
    }

    /// Per target: true when no leaf gives it a weight.
    fn never_scored(&self, k: usize) -> bool {
        !self
            .weights
            .iter()
            .enumerate()
            .any(|(i, w)| self.mode[i] == Mode::Leaf && w.iter().any(|w| w.0 == k))
    }
}

// ---------------------------------------------------------------------------------------------
// Attributes.

/// A float list attribute, or its `*_as_tensor` twin, as values of `dt` (the input's float
/// type: ORT reads the twin as that type and fails on another).
fn floats_or_tensor(node: &Node, name: &str, dt: DataType) -> Result<Vec<f64>, String> {
    let plain: Vec<f64> = attr_floats(node, name)?
        .unwrap_or_default()
        .into_iter()
        .map(f64::from)
        .collect();
    let tname = format!("{name}_as_tensor");
    match node.attributes.get(&tname) {
        None => Ok(plain),
        Some(Attribute::Tensor(t)) => {
            if t.numel() == 0 {
                return Ok(plain);
            }
            if !plain.is_empty() {
                return Err(format!(
                    "{}: both '{name}' and '{tname}' are set (ORT's kernel rejects it)",
                    node.op_type
                ));
            }
            tensor_values(node, &tname, t, dt)
        }
        Some(a) => Err(format!(
            "{}: attribute '{tname}' is {}, expected TENSOR",
            node.op_type,
            a.kind()
        )),
    }
}

/// The values of a tensor attribute of `dt`.
fn tensor_values(
    node: &Node,
    name: &str,
    t: &TensorData,
    dt: DataType,
) -> Result<Vec<f64>, String> {
    if t.dtype != dt {
        return Err(format!(
            "{}: '{name}' is {} for a {dt} input (ORT's kernel fails to read it)",
            node.op_type, t.dtype
        ));
    }
    Ok(t.to_f64_vec().unwrap_or_default())
}

/// An optional tensor attribute of `dt` values (empty when absent).
fn tensor_attr(node: &Node, name: &str, dt: DataType) -> Result<Vec<f64>, String> {
    match node.attributes.get(name) {
        None => Ok(Vec::new()),
        Some(Attribute::Tensor(t)) => tensor_values(node, name, t, dt),
        Some(a) => Err(format!(
            "{}: attribute '{name}' is {}, expected TENSOR",
            node.op_type,
            a.kind()
        )),
    }
}

/// The type ORT compares and sums in: float64 for a float64 input, float32 otherwise.
fn value_type(input: DataType) -> DataType {
    if input == DataType::Double {
        DataType::Double
    } else {
        DataType::Float
    }
}

fn ints(node: &Node, name: &str) -> Result<Vec<i64>, String> {
    Ok(attr_ints(node, name)?.unwrap_or_default())
}

fn aggregate(node: &Node) -> Result<Agg, String> {
    Ok(
        match attr_str(node, "aggregate_function")?
            .as_deref()
            .unwrap_or("SUM")
        {
            "AVERAGE" => Agg::Average,
            "SUM" => Agg::Sum,
            "MIN" => Agg::Min,
            "MAX" => Agg::Max,
            other => {
                return Err(format!(
                    "{}: unknown aggregate_function '{other}'",
                    node.op_type
                ));
            }
        },
    )
}

/// Everything a lowering needs besides the trees.
struct Ensemble {
    forest: Forest,
    agg: Agg,
    post: Post,
    base: Vec<f64>,
    /// The type of thresholds, weights and sums (float32 or float64).
    dt: DataType,
    /// Classifier labels (empty for regressors).
    labels: Vec<i64>,
    /// Distinct class ids over all votes (classifier).
    distinct_classes: usize,
    /// No vote weight is negative (classifier).
    weights_positive: bool,
}

/// Parses and checks an opset 1/3 node, as ORT's kernel does at session creation.
fn ensemble_v3(node: &Node, classifier: bool, dt: DataType) -> Result<Ensemble, String> {
    let op = node.op_type.as_str();
    let post = post_transform(node)?;
    if post == Post::Probit {
        return Err(format!(
            "{op}: post_transform PROBIT is not claimed (ORT's inverse-erf approximation is \
             not reproduced exactly)"
        ));
    }
    let agg = aggregate(node)?;
    let base = floats_or_tensor(node, "base_values", dt)?;
    let (prefix, labels, targets) = if classifier {
        if matches!(node.attributes.get("classlabels_strings"), Some(Attribute::Strings(v)) if !v.is_empty())
        {
            return Err(format!(
                "{op}: attribute 'classlabels_strings' holds strings (MLX has no strings)"
            ));
        }
        let labels = ints(node, "classlabels_int64s")?;
        if labels.len() < 2 {
            return Err(format!(
                "{op}: {} class labels (two or more are claimed)",
                labels.len()
            ));
        }
        let k = labels.len();
        ("class", labels, k)
    } else {
        let t = attr_int(node, "n_targets")?.unwrap_or(0);
        if t < 1 {
            return Err(format!("{op}: n_targets = {t} (ORT's kernel rejects it)"));
        }
        ("target", Vec::new(), t as usize)
    };
    if classifier {
        if targets == 2 && base.len() == 2 {
            return Err(format!(
                "{op}: two classes with two base_values (ORT's rule for them is not reproduced)"
            ));
        }
        if (targets == 2 && base.len() > 2)
            || (targets > 2 && !base.is_empty() && base.len() != targets)
        {
            return Err(format!(
                "{op}: {} base_values for {targets} classes (ORT's kernel rejects it)",
                base.len()
            ));
        }
    } else if !base.is_empty() && base.len() != targets {
        return Err(format!(
            "{op}: {} base_values for {targets} targets (ORT's kernel rejects it)",
            base.len()
        ));
    }

    let falses = ints(node, "nodes_falsenodeids")?;
    let features = ints(node, "nodes_featureids")?;
    let modes = match node.attributes.get("nodes_modes") {
        Some(Attribute::Strings(v)) => v.clone(),
        None => Vec::new(),
        Some(a) => return Err(format!("{op}: nodes_modes is {}", a.kind())),
    };
    let node_ids = ints(node, "nodes_nodeids")?;
    let tree_ids = ints(node, "nodes_treeids")?;
    let trues = ints(node, "nodes_truenodeids")?;
    let values = floats_or_tensor(node, "nodes_values", dt)?;
    let missing = ints(node, "nodes_missing_value_tracks_true")?;
    let n = falses.len();
    if [
        features.len(),
        modes.len(),
        node_ids.len(),
        tree_ids.len(),
        trues.len(),
        values.len(),
    ]
    .iter()
    .any(|&l| l != n)
        || n == 0
    {
        return Err(format!(
            "{op}: the nodes_* attributes differ in length or are empty (ORT's kernel rejects it)"
        ));
    }
    let w_ids = ints(node, &format!("{prefix}_ids"))?;
    let w_nodes = ints(node, &format!("{prefix}_nodeids"))?;
    let w_trees = ints(node, &format!("{prefix}_treeids"))?;
    let w_values = floats_or_tensor(node, &format!("{prefix}_weights"), dt)?;
    let m = w_ids.len();
    if w_nodes.len() != m || w_trees.len() != m || w_values.len() != m {
        return Err(format!(
            "{op}: the {prefix}_* attributes differ in length (ORT's kernel rejects it)"
        ));
    }
    if let Some(&bad) = w_ids.iter().find(|&&k| k < 0 || k as usize >= targets) {
        return Err(format!(
            "{op}: {prefix} id {bad} is outside [0, {targets}) (ORT's kernel rejects it)"
        ));
    }

    let mut f = Forest {
        targets,
        ..Forest::default()
    };
    let mut index = HashMap::with_capacity(n);
    for i in 0..n {
        let mode = Mode::from_v3(&modes[i]).ok_or_else(|| {
            format!(
                "{op}: node mode '{}' is not claimed",
                String::from_utf8_lossy(&modes[i])
            )
        })?;
        let feature = features[i];
        if mode != Mode::Leaf && !(0..=i32::MAX as i64).contains(&feature) {
            return Err(format!("{op}: feature id {feature}"));
        }
        f.max_feature = f.max_feature.max(feature);
        let feature = if mode == Mode::Leaf {
            0
        } else {
            feature as i32
        };
        f.push(feature, values[i], mode, missing.get(i) == Some(&1));
        if index.insert((tree_ids[i], node_ids[i]), i).is_some() {
            return Err(format!(
                "{op}: node {} of tree {} appears twice (ORT's kernel rejects it)",
                node_ids[i], tree_ids[i]
            ));
        }
    }
    for i in 0..n {
        if f.mode[i] == Mode::Leaf {
            continue;
        }
        for (ids, slot) in [(&trues, 0), (&falses, 1)] {
            let Some(&c) = index.get(&(tree_ids[i], ids[i])) else {
                return Err(format!(
                    "{op}: node {} of tree {} points at a missing node (ORT's kernel rejects it)",
                    node_ids[i], tree_ids[i]
                ));
            };
            if c == i {
                return Err(format!(
                    "{op}: a node points at itself (ORT's kernel rejects it)"
                ));
            }
            if slot == 0 {
                f.on_true[i] = c as i32;
            } else {
                f.on_false[i] = c as i32;
            }
        }
    }
    // ORT sorts the votes by (tree, node, position) and ignores those on branch nodes.
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by_key(|&j| (w_trees[j], w_nodes[j], j));
    for j in order {
        let Some(&i) = index.get(&(w_trees[j], w_nodes[j])) else {
            return Err(format!(
                "{op}: a weight names a missing node (ORT's kernel rejects it)"
            ));
        };
        if f.mode[i] != Mode::Leaf {
            continue;
        }
        let k = w_ids[j] as usize;
        if targets > 1 && f.weights[i].iter().any(|w| w.0 == k) {
            return Err(format!(
                "{op}: a leaf votes twice for one {prefix} (ORT adds the votes one by one; \
                 not reproduced)"
            ));
        }
        f.weights[i].push((k, w_values[j]));
    }
    // A tree starts wherever the tree id changes from the previous node's.
    for i in 0..n {
        if i == 0 || tree_ids[i] != tree_ids[i - 1] {
            f.roots.push(i as i32);
        }
    }
    f.finish(op)?;
    let distinct_classes = {
        let mut v = w_ids.clone();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    Ok(Ensemble {
        forest: f,
        agg,
        post,
        base,
        dt,
        labels,
        distinct_classes,
        // ORT tests `w < 0`, so a NaN weight counts as positive.
        weights_positive: !w_values.iter().any(|w| *w < 0.0),
    })
}

/// Parses and checks a TreeEnsemble (opset 5) node, as ORT's conversion to the opset 3 form.
fn ensemble_v5(node: &Node, dt: DataType) -> Result<Ensemble, String> {
    let op = "TreeEnsemble";
    let agg = match attr_int(node, "aggregate_function")?.unwrap_or(1) {
        0 => Agg::Average,
        1 => Agg::Sum,
        2 => Agg::Min,
        3 => Agg::Max,
        v => return Err(format!("{op}: aggregate_function = {v}")),
    };
    // ORT maps the codes through its own enum order (NONE, LOGISTIC, SOFTMAX, ...), which
    // swaps the spec's SOFTMAX (1) and LOGISTIC (2): its numbers are the ones users get.
    let post = match attr_int(node, "post_transform")?.unwrap_or(0) {
        0 => Post::None,
        1 => Post::Logistic,
        2 => Post::Softmax,
        3 => Post::SoftmaxZero,
        4 => {
            return Err(format!(
                "{op}: post_transform PROBIT is not claimed (ORT's inverse-erf approximation \
                 is not reproduced exactly)"
            ));
        }
        v => return Err(format!("{op}: post_transform = {v}")),
    };
    let targets = attr_int(node, "n_targets")?.unwrap_or(0);
    if targets < 1 {
        return Err(format!(
            "{op}: n_targets = {targets} (ORT's kernel rejects it)"
        ));
    }
    let targets = targets as usize;
    let roots = ints(node, "tree_roots")?;
    let features = ints(node, "nodes_featureids")?;
    let splits = tensor_attr(node, "nodes_splits", dt)?;
    let modes = match node.attributes.get("nodes_modes") {
        Some(Attribute::Tensor(t)) => t.to_i64_vec().unwrap_or_default(),
        _ => return Err(format!("{op}: nodes_modes is missing or not a tensor")),
    };
    let trues = ints(node, "nodes_truenodeids")?;
    let true_leafs = ints(node, "nodes_trueleafs")?;
    let falses = ints(node, "nodes_falsenodeids")?;
    let false_leafs = ints(node, "nodes_falseleafs")?;
    let missing = ints(node, "nodes_missing_value_tracks_true")?;
    let members = tensor_attr(node, "membership_values", dt)?;
    let leaf_targets = ints(node, "leaf_targetids")?;
    let leaf_weights = tensor_attr(node, "leaf_weights", dt)?;
    let n = features.len();
    if [
        splits.len(),
        modes.len(),
        trues.len(),
        true_leafs.len(),
        falses.len(),
        false_leafs.len(),
    ]
    .iter()
    .any(|&l| l != n)
        || (!missing.is_empty() && missing.len() != n)
        || n == 0
    {
        return Err(format!(
            "{op}: the nodes_* attributes differ in length or are empty"
        ));
    }
    let leaves = leaf_targets.len();
    if leaf_weights.len() != leaves || leaves == 0 {
        return Err(format!(
            "{op}: leaf_targetids and leaf_weights differ in length"
        ));
    }
    if let Some(&bad) = leaf_targets
        .iter()
        .find(|&&k| k < 0 || k as usize >= targets)
    {
        return Err(format!(
            "{op}: leaf target id {bad} is outside [0, {targets}) (ORT's kernel rejects it)"
        ));
    }
    let mut f = Forest {
        targets,
        ..Forest::default()
    };
    // Nodes first, then leaves; member sets add BRANCH_EQ nodes after both.
    let mut sets = members.split(|v| v.is_nan());
    let mut chains = Vec::new();
    for i in 0..n {
        let mode = match modes[i] {
            0 => Mode::Leq,
            1 => Mode::Lt,
            2 => Mode::Gte,
            3 => Mode::Gt,
            4 => Mode::Eq,
            5 => Mode::Neq,
            6 => Mode::Eq,
            v => return Err(format!("{op}: node mode {v} is not claimed")),
        };
        if !(0..=i32::MAX as i64).contains(&features[i]) {
            return Err(format!("{op}: feature id {}", features[i]));
        }
        f.max_feature = f.max_feature.max(features[i]);
        let mt = missing.get(i) == Some(&1);
        let mut split = splits[i];
        if modes[i] == 6 {
            let set = sets.next().unwrap_or(&[]).to_vec();
            if set.is_empty() {
                return Err(format!("{op}: a BRANCH_MEMBER node has no members"));
            }
            if set.len() >= 31 || set.iter().any(|v| !(0.0..=30.0).contains(v)) {
                return Err(format!(
                    "{op}: a BRANCH_MEMBER set of {} values (ORT looks sets of 31 or more \
                     values, or values outside [0, 30], up in a way not reproduced)",
                    set.len()
                ));
            }
            split = set[0];
            chains.push((i, set));
        }
        f.push(features[i] as i32, split, mode, mt);
    }
    for j in 0..leaves {
        let l = f.push(0, 0.0, Mode::Leaf, false);
        f.weights[l].push((leaf_targets[j] as usize, leaf_weights[j]));
    }
    let child = |id: i64, leaf: i64| -> Result<i32, String> {
        let (lo, hi) = if leaf != 0 { (n, leaves) } else { (0, n) };
        if id < 0 || id as usize >= hi {
            return Err(format!("{op}: a child index {id} is out of range"));
        }
        Ok((lo + id as usize) as i32)
    };
    for i in 0..n {
        f.on_true[i] = child(trues[i], true_leafs[i])?;
        f.on_false[i] = child(falses[i], false_leafs[i])?;
    }
    for (i, set) in chains {
        // x == s1 ? T : (x == s2 ? T : ... (x == sk ? T : F)), each link keeping the node's
        // missing-value rule, as ORT's conversion does.
        let (t, fl) = (f.on_true[i], f.on_false[i]);
        let mut prev = i;
        for &s in &set[1..] {
            let c = f.push(f.feature[i], s, Mode::Eq, f.missing_true[i]);
            f.on_true[c] = t;
            f.on_false[c] = fl;
            f.on_false[prev] = c as i32;
            prev = c;
        }
    }
    for &r in &roots {
        if r < 0 || r as usize >= n {
            return Err(format!("{op}: tree root {r} is out of range"));
        }
        let r = r as usize;
        let is_leaf = falses[r] == trues[r] && false_leafs[r] != 0 && true_leafs[r] != 0;
        if is_leaf {
            // ORT reads a single-leaf tree's leaf at the root's own index.
            if r >= leaves {
                return Err(format!("{op}: single-leaf tree {r} has no leaf {r}"));
            }
            f.roots.push((n + r) as i32);
        } else {
            f.roots.push(r as i32);
        }
    }
    f.finish(op)?;
    Ok(Ensemble {
        forest: f,
        agg,
        post,
        base: Vec::new(),
        dt,
        labels: Vec::new(),
        distinct_classes: 0,
        weights_positive: true,
    })
}

// ---------------------------------------------------------------------------------------------
// Claims.

/// Checks input 0 (rank, dtype, features) against the forest. An input of unknown rank (a
/// value another claimed node makes, such as a Scaler's output) is checked at run time.
fn claim_input(
    ctx: &ClaimCtx,
    node: &Node,
    e: &Ensemble,
    dtypes: &[DataType],
) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, dtypes)?;
    if e.post != Post::None {
        sequential_ok(node, e.forest.targets as i64)?;
    }
    if node.input(0).and_then(|n| ctx.rank(n)).is_none() {
        return Ok(());
    }
    let rank = ctx.expect_rank(node, 0)?;
    if rank != 2 {
        decline!(
            "{}: input 0 has rank {rank} (ORT's kernel reads [N, C])",
            node.op_type
        );
    }
    let Some(c) = feature_count(ctx, node, 0) else {
        return Ok(());
    };
    if e.forest.max_feature >= c {
        decline!(
            "{}: a node reads feature {} of {c} (ORT's kernel rejects it)",
            node.op_type,
            e.forest.max_feature
        );
    }
    Ok(())
}

/// The classifier's input types (ORT 1.31 has integer kernels of the classifier only).
const INPUTS: &[DataType] = &[
    DataType::Float,
    DataType::Double,
    DataType::Int32,
    DataType::Int64,
];
/// The regressors' input types.
const FLOATS_ONLY: &[DataType] = &[DataType::Float, DataType::Double];

/// The value type of input 0, once it is one of `allowed`.
fn claim_dtype(ctx: &ClaimCtx, node: &Node, allowed: &[DataType]) -> Result<DataType, Decline> {
    Ok(value_type(ctx.expect_dtype(node, 0, allowed)?))
}

fn claim_regressor(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = claim_dtype(ctx, node, FLOATS_ONLY)?;
    let e = ensemble_v3(node, false, dt).or_decline()?;
    claim_input(ctx, node, &e, FLOATS_ONLY)
}

fn claim_v5(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = claim_dtype(ctx, node, FLOATS_ONLY)?;
    let e = ensemble_v5(node, dt).or_decline()?;
    claim_input(ctx, node, &e, FLOATS_ONLY)
}

fn claim_classifier(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = claim_dtype(ctx, node, INPUTS)?;
    let e = ensemble_v3(node, true, dt).or_decline()?;
    claim_input(ctx, node, &e, INPUTS)?;
    let f = &e.forest;
    if e.labels.len() == 2 && e.distinct_classes != 1 && e.base.len() == 1 && !f.always_scored()[1]
    {
        decline!(
            "TreeEnsembleClassifier: two classes voted for separately with one base value: \
             ORT leaves the second score unwritten for rows without a class-1 vote"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lowering.

fn i32_const(ctx: &mut LowerCtx, dims: Vec<i64>, v: &[i32]) -> Slot {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    ctx.constant(TensorData::new(DataType::Int32, dims, bytes).expect("sized"))
}

/// A constant of `dt` (float32 or float64) holding `v`.
fn value_const(ctx: &mut LowerCtx, dt: DataType, dims: Vec<i64>, v: &[f64]) -> Slot {
    if dt == DataType::Double {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        ctx.constant(TensorData::new(DataType::Double, dims, bytes).expect("sized"))
    } else {
        let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        f32_const(ctx, dims, &v)
    }
}

fn bool_const(ctx: &mut LowerCtx, dims: Vec<i64>, v: &[bool]) -> Slot {
    let bytes: Vec<u8> = v.iter().map(|&b| b as u8).collect();
    ctx.constant(TensorData::new(DataType::Bool, dims, bytes).expect("sized"))
}

fn take(ctx: &mut LowerCtx, x: Slot, indices: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Take {
        x,
        indices,
        axis: 0,
        out,
    });
    out
}

/// The float32 `[N, C]` input. ORT rejects inputs of another rank and nodes reading a
/// feature the input lacks: where the claim could not check that, a run-time requirement does.
fn input_rows(ctx: &mut LowerCtx, node: &Node, f: &Forest) -> Result<Slot, PlanError> {
    let (i, b) = (DataType::Int64, DataType::Bool);
    let dt = ctx.input_dtype(node, 0)?;
    let fl = value_type(dt);
    let x = ctx.input(node, 0)?;
    // ORT compares integer features with float thresholds after converting them to float.
    let x = ctx.cast(x, dt, fl);
    let rank = ctx.input_rank(node, 0);
    if rank == Some(2) && crate::ops::microsoft::lower_last_dim(ctx, node, 0).is_some() {
        return Ok(x);
    }
    let shape = ctx.shape_vec(x);
    let rk = ctx.shape_vec(shape);
    let last = crate::ops::microsoft::slice_last(ctx, shape, -1, i64::MAX, 1, i);
    let two = ctx.scalar(i, 2.0)?;
    let is2 = ctx.binary(BinaryOp::Equal, rk, two, i);
    let maxf = ctx.scalar(i, f.max_feature as f64)?;
    let wide = ctx.binary(BinaryOp::Greater, last, maxf, i);
    let ok = ctx.binary(BinaryOp::LogicalAnd, is2, wide, b);
    let out = ctx.temp(b);
    ctx.push(Step::Require {
        ok,
        what: format!("the input must be [N, C] with C > {}", f.max_feature),
        out,
    });
    let flat = ctx.temp(fl);
    ctx.push(Step::Reshape {
        x,
        target: crate::step::ReshapeTarget::Flatten { axis: -1 },
        out: flat,
    });
    Ok(flat)
}

/// Walks every row down every tree: the int32 `[N, T]` leaf indices.
fn traverse(
    ctx: &mut LowerCtx,
    node: &Node,
    x: Slot,
    f: &Forest,
    fl: DataType,
) -> Result<Slot, PlanError> {
    let (i32t, b) = (DataType::Int32, DataType::Bool);
    let m = f.feature.len() as i64;
    let t = f.roots.len() as i64;
    let same = f.same_mode();
    let missing = f.has_missing();
    let modes: Vec<Mode> = {
        let mut v: Vec<Mode> = f
            .mode
            .iter()
            .copied()
            .filter(|m| *m != Mode::Leaf)
            .collect();
        v.sort_by_key(|m| m.code());
        v.dedup();
        v
    };
    let at = |v: &[i32]| -> Vec<i32> { f.roots.iter().map(|&r| v[r as usize]).collect() };
    let feature = i32_const(ctx, vec![m], &f.feature);
    let threshold = value_const(ctx, fl, vec![m], &f.threshold);
    let on_true = i32_const(ctx, vec![m], &f.on_true);
    let on_false = i32_const(ctx, vec![m], &f.on_false);
    let codes: Vec<i32> = f.mode.iter().map(|m| m.code()).collect();
    let mode_tbl = (same.is_none()).then(|| i32_const(ctx, vec![m], &codes));
    let missing_tbl = missing.then(|| bool_const(ctx, vec![m], &f.missing_true));
    let mut idx: Option<Slot> = None;
    for _ in 0..f.depth {
        let (xv, th, mode, mt, tc, fc) = match idx {
            None => {
                // The first level reads the roots, the same node for every row.
                let feat0 = i32_const(ctx, vec![t], &at(&f.feature));
                let xv = ctx.temp(fl);
                ctx.push(Step::Take {
                    x,
                    indices: feat0,
                    axis: 1,
                    out: xv,
                });
                let th: Vec<f64> = f.roots.iter().map(|&r| f.threshold[r as usize]).collect();
                let th = value_const(ctx, fl, vec![t], &th);
                let mode = same.is_none().then(|| i32_const(ctx, vec![t], &at(&codes)));
                let mt = missing.then(|| {
                    let v: Vec<bool> = f
                        .roots
                        .iter()
                        .map(|&r| f.missing_true[r as usize])
                        .collect();
                    bool_const(ctx, vec![t], &v)
                });
                let tc = i32_const(ctx, vec![t], &at(&f.on_true));
                let fc = i32_const(ctx, vec![t], &at(&f.on_false));
                (xv, th, mode, mt, tc, fc)
            }
            Some(i) => {
                let fid = take(ctx, feature, i, i32t);
                let xv = ctx.temp(fl);
                ctx.push(Step::TakeAlongAxis {
                    x,
                    indices: fid,
                    axis: 1,
                    out: xv,
                });
                let th = take(ctx, threshold, i, fl);
                let mode = mode_tbl.map(|tbl| take(ctx, tbl, i, i32t));
                let mt = missing_tbl.map(|tbl| take(ctx, tbl, i, b));
                let tc = take(ctx, on_true, i, i32t);
                let fc = take(ctx, on_false, i, i32t);
                (xv, th, mode, mt, tc, fc)
            }
        };
        let mut cond = match (same, mode) {
            (Some(s), _) => ctx.binary(s.op(), xv, th, fl),
            (None, Some(mode)) => {
                let mut cond = ctx.binary(modes[0].op(), xv, th, fl);
                for md in &modes[1..] {
                    let c = ctx.binary(md.op(), xv, th, fl);
                    let code = ctx.scalar(i32t, md.code() as f64)?;
                    let is = ctx.binary(BinaryOp::Equal, mode, code, i32t);
                    cond = select(ctx, is, c, cond, b);
                }
                cond
            }
            (None, None) => crate::plan::invalid!(node, "internal: no mode table"),
        };
        if let Some(mt) = mt {
            let nan = ctx.unary(U::IsNan, xv, b);
            let track = ctx.binary(BinaryOp::LogicalAnd, nan, mt, b);
            cond = ctx.binary(BinaryOp::LogicalOr, cond, track, b);
        }
        idx = Some(select(ctx, cond, tc, fc, i32t));
    }
    Ok(idx.expect("depth >= 1"))
}

/// The sum over axis 1 of `[N, T, K]` (or `[N, T]`), tree by tree (ORT's order) up to
/// [`MAX_SEQUENTIAL`] trees: `[N, K]` (or `[N, 1]`).
fn sum_trees(
    ctx: &mut LowerCtx,
    g: Slot,
    t: i64,
    k: Option<i64>,
    fl: DataType,
) -> Result<Slot, PlanError> {
    if t > MAX_SEQUENTIAL {
        let out = ctx.temp(fl);
        ctx.push(Step::Reduce {
            op: ReduceOp::Sum,
            x: g,
            axes: ReduceAxes::Static(vec![1]),
            keepdims: k.is_none(),
            out,
        });
        return Ok(out);
    }
    match k {
        None => sequential_sum(ctx, g, t, fl),
        Some(k) => {
            let gt = crate::ops::microsoft::transpose(ctx, g, &[0, 2, 1], fl);
            let s = sequential_sum(ctx, gt, t, fl)?;
            Ok(crate::ops::microsoft::reshape_to(ctx, s, &[-1, k], fl))
        }
    }
}

/// Min or max over axis 1.
fn extreme(ctx: &mut LowerCtx, g: Slot, op: ReduceOp, keepdims: bool, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reduce {
        op,
        x: g,
        axes: ReduceAxes::Static(vec![1]),
        keepdims,
        out,
    });
    out
}

/// ORT's scalar logistic: `v = 1 / (1 + exp(-|x|))`, `1 - v` for negative `x`.
fn logistic(ctx: &mut LowerCtx, s: Slot) -> Result<Slot, PlanError> {
    let fl = DataType::Float;
    let a = ctx.unary(U::Abs, s, fl);
    let na = ctx.unary(U::Negative, a, fl);
    let e = ctx.unary(U::Exp, na, fl);
    let one = ctx.scalar(fl, 1.0)?;
    let d = ctx.binary(BinaryOp::Add, one, e, fl);
    let v = ctx.binary(BinaryOp::Divide, one, d, fl);
    let zero = ctx.scalar(fl, 0.0)?;
    let neg = ctx.binary(BinaryOp::Less, s, zero, fl);
    let w = ctx.binary(BinaryOp::Subtract, one, v, fl);
    Ok(select(ctx, neg, w, v, fl))
}

/// ORT's `write_scores` transform of `[N, K]` scores of `dt`, `K >= 2`, written as `out`:
/// the transforms compute in float32 (ORT casts each score to float for them).
fn transform(
    ctx: &mut LowerCtx,
    node: &Node,
    s: Slot,
    k: i64,
    post: Post,
    dt: DataType,
    out: DataType,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    if post == Post::None {
        return Ok(ctx.cast(s, dt, out));
    }
    let s = ctx.cast(s, dt, f);
    let y = match post {
        Post::Logistic => logistic(ctx, s)?,
        _ => apply_post(ctx, node, s, k, post)?,
    };
    Ok(ctx.cast(y, f, out))
}

/// Per-row sums `[N, K]` and, where some row may miss a vote for a class, the has-a-vote mask
/// `[N, K]` (`None`: every row has every class).
struct Scores {
    sum: Slot,
    has: Option<Slot>,
}

/// Gathers the leaf votes of `[N, T]` leaves into per-target scores by `agg` (multi-target).
fn gather_votes(
    ctx: &mut LowerCtx,
    f: &Forest,
    leaves: Slot,
    agg: Agg,
    fl: DataType,
) -> Result<Scores, PlanError> {
    let b = DataType::Bool;
    let m = f.feature.len();
    let k = f.targets;
    let t = f.roots.len() as i64;
    let mut w = vec![0f64; m * k];
    let mut h = vec![false; m * k];
    for (i, votes) in f.weights.iter().enumerate() {
        for &(c, v) in votes {
            w[i * k + c] = v;
            h[i * k + c] = true;
        }
    }
    let always = f.always_scored();
    let need_has = always.iter().any(|a| !a) || matches!(agg, Agg::Min | Agg::Max);
    let wt = value_const(ctx, fl, vec![m as i64, k as i64], &w);
    let g = take(ctx, wt, leaves, fl);
    let hg = if need_has {
        let ht = bool_const(ctx, vec![m as i64, k as i64], &h);
        Some(take(ctx, ht, leaves, b))
    } else {
        None
    };
    let sum = match agg {
        Agg::Sum | Agg::Average => sum_trees(ctx, g, t, Some(k as i64), fl)?,
        Agg::Min | Agg::Max => {
            let (op, fill) = if agg == Agg::Min {
                (ReduceOp::Min, f64::INFINITY)
            } else {
                (ReduceOp::Max, f64::NEG_INFINITY)
            };
            let fill = ctx.scalar(fl, fill)?;
            let masked = select(ctx, hg.expect("has mask"), g, fill, fl);
            extreme(ctx, masked, op, false, fl)
        }
    };
    let has = if always.iter().all(|a| *a) {
        None
    } else {
        let out = ctx.temp(b);
        ctx.push(Step::Reduce {
            op: ReduceOp::Any,
            x: hg.expect("has mask"),
            axes: ReduceAxes::Static(vec![1]),
            keepdims: false,
            out,
        });
        Some(out)
    };
    Ok(Scores { sum, has })
}

/// `has ? v : 0`.
fn zero_unscored(
    ctx: &mut LowerCtx,
    v: Slot,
    has: Option<Slot>,
    dt: DataType,
) -> Result<Slot, PlanError> {
    Ok(match has {
        None => v,
        Some(h) => {
            let zero = ctx.scalar(dt, 0.0)?;
            select(ctx, h, v, zero, dt)
        }
    })
}

/// The regressor scores `[N, K]` of an ensemble (TreeEnsembleRegressor and TreeEnsemble).
fn regress(
    ctx: &mut LowerCtx,
    node: &Node,
    e: &Ensemble,
    out: DataType,
) -> Result<Slot, PlanError> {
    let fl = e.dt;
    let f = &e.forest;
    let x = input_rows(ctx, node, f)?;
    let leaves = traverse(ctx, node, x, f, fl)?;
    let t = f.roots.len() as i64;
    if f.targets == 1 {
        // One target: each leaf's first vote; transforms other than PROBIT do not apply.
        let lw: Vec<f64> = f
            .weights
            .iter()
            .map(|w| w.first().map_or(0.0, |w| w.1))
            .collect();
        let lw = value_const(ctx, fl, vec![lw.len() as i64], &lw);
        let g = take(ctx, lw, leaves, fl);
        let s = match e.agg {
            Agg::Sum => sum_trees(ctx, g, t, None, fl)?,
            Agg::Average => {
                let s = sum_trees(ctx, g, t, None, fl)?;
                let n = ctx.scalar(fl, t as f64)?;
                ctx.binary(BinaryOp::Divide, s, n, fl)
            }
            Agg::Min => extreme(ctx, g, ReduceOp::Min, true, fl),
            Agg::Max => extreme(ctx, g, ReduceOp::Max, true, fl),
        };
        let origin = if e.base.len() == 1 { e.base[0] } else { 0.0 };
        let origin = ctx.scalar(fl, origin)?;
        let y = ctx.binary(BinaryOp::Add, s, origin, fl);
        return Ok(ctx.cast(y, fl, out));
    }
    let k = f.targets as i64;
    let sc = gather_votes(ctx, f, leaves, e.agg, fl)?;
    let base = (!e.base.is_empty()).then(|| value_const(ctx, fl, vec![k], &e.base));
    let v = match e.agg {
        Agg::Sum => match base {
            Some(bs) => ctx.binary(BinaryOp::Add, sc.sum, bs, fl),
            None => sc.sum,
        },
        Agg::Average => {
            let n = ctx.scalar(fl, t as f64)?;
            let a = ctx.binary(BinaryOp::Divide, sc.sum, n, fl);
            match base {
                Some(bs) => ctx.binary(BinaryOp::Add, a, bs, fl),
                None => a,
            }
        }
        Agg::Min | Agg::Max => match base {
            Some(bs) => ctx.binary(BinaryOp::Add, bs, sc.sum, fl),
            None => sc.sum,
        },
    };
    let v = zero_unscored(ctx, v, sc.has, fl)?;
    transform(ctx, node, v, k, e.post, fl, out)
}

fn lower_regressor(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = value_type(ctx.input_dtype(node, 0)?);
    let e = ensemble_v3(node, false, dt).or_invalid(node)?;
    // The opset 1/3 regressor always writes float32.
    let y = regress(ctx, node, &e, DataType::Float)?;
    ctx.finish(node, 0, y, DataType::Float)
}

fn lower_v5(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = value_type(ctx.input_dtype(node, 0)?);
    let e = ensemble_v5(node, dt).or_invalid(node)?;
    let y = regress(ctx, node, &e, dt)?;
    ctx.finish(node, 0, y, dt)
}

fn lower_classifier(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let i = DataType::Int64;
    let fl = value_type(ctx.input_dtype(node, 0)?);
    let e = ensemble_v3(node, true, fl).or_invalid(node)?;
    let f = &e.forest;
    let x = input_rows(ctx, node, f)?;
    let leaves = traverse(ctx, node, x, f, fl)?;
    let k = e.labels.len() as i64;
    // ORT's classifier always sums the votes.
    let sc = gather_votes(ctx, f, leaves, Agg::Sum, fl)?;
    let (label, y) = if k > 2 {
        let (s, has) = if e.base.is_empty() {
            (sc.sum, sc.has)
        } else {
            // Base values give every class a score.
            let bs = value_const(ctx, fl, vec![k], &e.base);
            (ctx.binary(BinaryOp::Add, sc.sum, bs, fl), None)
        };
        // The first best class among those with a score.
        let ranked = match has {
            Some(h) => {
                let low = ctx.scalar(fl, f64::NEG_INFINITY)?;
                select(ctx, h, s, low, fl)
            }
            None => s,
        };
        let at = ctx.temp(DataType::Uint32);
        ctx.push(Step::ArgReduce {
            op: ArgReduceOp::ArgMax,
            x: ranked,
            axis: 1,
            keepdims: false,
            out: at,
        });
        let lc = i64_const(ctx, vec![k], &e.labels);
        let lab = ctx.temp(i);
        ctx.push(Step::Take {
            x: lc,
            indices: at,
            axis: 0,
            out: lab,
        });
        let v = zero_unscored(ctx, s, has, fl)?;
        (
            lab,
            transform(ctx, node, v, k, e.post, fl, DataType::Float)?,
        )
    } else {
        binary_scores(ctx, node, &e, sc)?
    };
    ctx.finish(node, 0, label, i)?;
    ctx.finish(node, 1, y, DataType::Float)
}

/// ORT's two-class rule: labels `[N]` and scores `[N, 2]`.
fn binary_scores(
    ctx: &mut LowerCtx,
    node: &Node,
    e: &Ensemble,
    sc: Scores,
) -> Result<(Slot, Slot), PlanError> {
    let (i, b) = (DataType::Int64, DataType::Bool);
    let fl = e.dt;
    let f32t = DataType::Float;
    let f = &e.forest;
    let always = f.always_scored();
    let slice = |ctx: &mut LowerCtx, v: Slot, j: i64, dt: DataType| {
        crate::ops::microsoft::slice_last(ctx, v, j, j + 1, 1, dt)
    };
    let mut s0 = slice(ctx, sc.sum, 0, fl);
    let s1 = slice(ctx, sc.sum, 1, fl);
    let (h0, h1) = match sc.has {
        Some(h) => (
            (!always[0]).then(|| slice(ctx, h, 0, b)),
            (!always[1]).then(|| slice(ctx, h, 1, b)),
        ),
        None => (None, None),
    };
    let h1_never = f.never_scored(1);
    if e.base.len() == 1 {
        let b0 = ctx.scalar(fl, e.base[0])?;
        s0 = ctx.binary(BinaryOp::Add, s0, b0, fl);
    }
    let zero = ctx.scalar(fl, 0.0)?;
    // A class without a vote reads as 0 (ORT's `ScoreValue` conversion).
    let v0 = match h0 {
        Some(h) => select(ctx, h, s0, zero, fl),
        None => s0,
    };
    let pos = if h1_never {
        v0
    } else {
        match h1 {
            Some(h) => select(ctx, h, s1, v0, fl),
            None => s1,
        }
    };
    // Labels.
    let (cut, lpos, lneg) = if e.distinct_classes == 1 {
        let cut = if e.weights_positive { 0.5 } else { 0.0 };
        (cut, e.labels[1], e.labels[0])
    } else {
        // ORT returns 1 and 0 here, not the class labels.
        (0.0, 1, 0)
    };
    let cut = ctx.scalar(fl, cut)?;
    let up = ctx.binary(BinaryOp::Greater, pos, cut, fl);
    let lp = ctx.scalar(i, lpos as f64)?;
    let ln = ctx.scalar(i, lneg as f64)?;
    let lab = select(ctx, up, lp, ln, i);
    let lab = crate::ops::microsoft::reshape_to(ctx, lab, &[-1], i);
    // Scores when class 1 has a vote: both transformed as usual.
    let two = |ctx: &mut LowerCtx| -> Result<Slot, PlanError> {
        let pair = crate::ops::microsoft::concat(ctx, vec![v0, s1], 1, fl);
        transform(ctx, node, pair, 2, e.post, fl, f32t)
    };
    // Scores from the single class-0 score `s`.
    // (LOGISTIC computes in float32, the rest in the value type, as ORT.)
    let one = |ctx: &mut LowerCtx| -> Result<Slot, PlanError> {
        let (s, t) = if e.post == Post::Logistic {
            (ctx.cast(v0, fl, f32t), f32t)
        } else {
            (v0, fl)
        };
        let (a, c) = if e.distinct_classes == 1 && e.weights_positive {
            // [1 - p, p]; ORT 1.31 takes p through LOGISTIC here too.
            let p = if e.post == Post::Logistic {
                logistic(ctx, s)?
            } else {
                s
            };
            let one = ctx.scalar(t, 1.0)?;
            (ctx.binary(BinaryOp::Subtract, one, p, t), p)
        } else if e.post == Post::Logistic {
            let ns = ctx.unary(U::Negative, s, t);
            (logistic(ctx, ns)?, logistic(ctx, s)?)
        } else {
            (ctx.unary(U::Negative, s, t), s)
        };
        let pair = crate::ops::microsoft::concat(ctx, vec![a, c], 1, t);
        Ok(ctx.cast(pair, t, f32t))
    };
    let y = if h1_never {
        one(ctx)?
    } else {
        match h1 {
            None => two(ctx)?,
            Some(h) => {
                let a = two(ctx)?;
                let c = one(ctx)?;
                select(ctx, h, a, c, f32t)
            }
        }
    };
    Ok((lab, y))
}
