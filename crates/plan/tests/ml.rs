//! Claims, declines (with their reasons) and lowerings of the `ai.onnx.ml` family.

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, TensorData};
use plan::Step;

const ML: &str = "ai.onnx.ml";
const F: DataType = DataType::Float;
const I64: DataType = DataType::Int64;

/// A graph importing `ai.onnx.ml` opset `ml`, with input `x` of `dt` and `dims` (`-1`: a
/// symbolic dim) and one node of `op` reading it into `y`.
fn one(
    op: &str,
    ml: i64,
    dt: DataType,
    dims: &[i64],
    out: DataType,
    attrs: &[(&str, Attribute)],
) -> G {
    let mut g = G::new(17);
    g.g.opset_imports.insert(ML.into(), ml);
    g.input("x", dt, dims);
    g.output_any("y", out);
    let n = g.node(op, &["x"], &["y"]);
    n.domain = ML.into();
    for (k, v) in attrs {
        n.attr(k, v.clone());
    }
    g
}

#[test]
fn scaler_claims_per_feature_and_single_values() {
    let per = [
        ("offset", floats(&[1.0, 2.0])),
        ("scale", floats(&[0.5, 3.0])),
    ];
    claim(&one("Scaler", 1, F, &[-1, 2], F, &per), 0).unwrap();
    claim(&one("Scaler", 1, I64, &[2], F, &per), 0).unwrap();
    let single = [("offset", floats(&[1.0])), ("scale", floats(&[0.5]))];
    let p = plan_of(&one("Scaler", 1, F, &[2, 3, 4], F, &single).build());
    assert_eq!(count(&p, |s| matches!(s, Step::Binary { .. })), 2);
}

#[test]
fn scaler_declines_what_ort_rejects_or_reads_otherwise() {
    let per = [
        ("offset", floats(&[1.0, 2.0])),
        ("scale", floats(&[0.5, 3.0])),
    ];
    declined(
        &one("Scaler", 1, F, &[-1, 3], F, &per),
        0,
        "2 scale values for 3 features",
    );
    declined(&one("Scaler", 1, F, &[2, 2, 2], F, &per), 0, "rank 3");
    declined(&one("Scaler", 1, F, &[-1, -1], F, &per), 0, "feature count");
    let uneven = [("offset", floats(&[1.0])), ("scale", floats(&[0.5, 3.0]))];
    declined(
        &one("Scaler", 1, F, &[2, 2], F, &uneven),
        0,
        "same non-zero number",
    );
    declined(
        &one("Scaler", 1, DataType::Double, &[2, 2], F, &per),
        0,
        "double",
    );
}

#[test]
fn normalizer_norms_and_types() {
    for norm in ["MAX", "L1", "L2"] {
        claim(
            &one("Normalizer", 1, F, &[-1, 4], F, &[("norm", string(norm))]),
            0,
        )
        .unwrap();
    }
    claim(
        &one(
            "Normalizer",
            1,
            I64,
            &[-1, 4],
            F,
            &[("norm", string("MAX"))],
        ),
        0,
    )
    .unwrap();
    declined(
        &one("Normalizer", 1, I64, &[-1, 4], F, &[("norm", string("L2"))]),
        0,
        "float32 only",
    );
    declined(
        &one(
            "Normalizer",
            1,
            F,
            &[2, 2, 2],
            F,
            &[("norm", string("MAX"))],
        ),
        0,
        "rank 3",
    );
    declined(
        &one("Normalizer", 1, F, &[2, 2], F, &[("norm", string("L3"))]),
        0,
        "'L3'",
    );
    declined(
        &one("Normalizer", 1, F, &[2, 600], F, &[("norm", string("L1"))]),
        0,
        "up to 512",
    );
    // L1 over 4 features: the row sum is 3 adds of column slices (ORT's order).
    let p = plan_of(&one("Normalizer", 1, F, &[-1, 4], F, &[("norm", string("L1"))]).build());
    assert_eq!(count(&p, |s| matches!(s, Step::Slice { .. })), 4);
    assert_eq!(count(&p, |s| matches!(s, Step::Reduce { .. })), 0);
}

#[test]
fn binarizer_and_imputer() {
    claim(
        &one("Binarizer", 1, F, &[-1, 3], F, &[("threshold", float(0.5))]),
        0,
    )
    .unwrap();
    declined(&one("Binarizer", 1, I64, &[3], I64, &[]), 0, "int64");
    let imp = [("imputed_value_floats", floats(&[1.0, 2.0, 3.0]))];
    claim(&one("Imputer", 1, F, &[-1, 3], F, &imp), 0).unwrap();
    declined(
        &one("Imputer", 1, F, &[-1, 2], F, &imp),
        0,
        "3 imputed values for 2 features",
    );
    declined(
        &one("Imputer", 1, I64, &[-1, 3], I64, &imp),
        0,
        "imputed_value_floats",
    );
    let imp = [
        ("imputed_value_int64s", ints(&[7])),
        ("replaced_value_int64", int(-1)),
    ];
    claim(&one("Imputer", 1, I64, &[-1, 3, 2], I64, &imp), 0).unwrap();
    declined(
        &one("Imputer", 1, DataType::Int32, &[3], DataType::Int32, &imp),
        0,
        "int32",
    );
}

#[test]
fn one_hot_encoder() {
    let cats = [("cats_int64s", ints(&[1, 5]))];
    claim(&one("OneHotEncoder", 1, I64, &[-1, 2], F, &cats), 0).unwrap();
    claim(&one("OneHotEncoder", 1, F, &[-1], F, &cats), 0).unwrap();
    let p = plan_of(
        &one(
            "OneHotEncoder",
            1,
            I64,
            &[2],
            F,
            &[("cats_int64s", ints(&[1])), ("zeros", int(0))],
        )
        .build(),
    );
    assert_eq!(count(&p, |s| matches!(s, Step::Require { .. })), 1);
    declined(
        &one(
            "OneHotEncoder",
            1,
            DataType::String,
            &[2],
            F,
            &[("cats_strings", strings(&["a"]))],
        ),
        0,
        "string",
    );
    declined(
        &one(
            "OneHotEncoder",
            1,
            I64,
            &[2],
            F,
            &[("cats_strings", strings(&["a"]))],
        ),
        0,
        "MLX has no strings",
    );
}

#[test]
fn label_encoder_numeric_forms() {
    let ii = [
        ("keys_int64s", ints(&[1, 2])),
        ("values_int64s", ints(&[10, 20])),
    ];
    claim(&one("LabelEncoder", 2, I64, &[-1], I64, &ii), 0).unwrap();
    claim(&one("LabelEncoder", 4, I64, &[-1], I64, &ii), 0).unwrap();
    claim(&one("LabelEncoder", 5, I64, &[-1], I64, &ii), 0).unwrap();
    declined(
        &one("LabelEncoder", 1, I64, &[-1], I64, &ii),
        0,
        "classes_strings is required",
    );
    let ff = [
        ("keys_floats", floats(&[1.0])),
        ("values_floats", floats(&[2.0])),
    ];
    claim(&one("LabelEncoder", 2, F, &[3], F, &ff), 0).unwrap();
    declined(
        &one("LabelEncoder", 2, I64, &[3], F, &ff),
        0,
        "keys are float",
    );
    let tensors = [
        (
            "keys_tensor",
            Attribute::Tensor(TensorData::from_i64(vec![2], &[1, 2])),
        ),
        (
            "values_tensor",
            Attribute::Tensor(TensorData::from_f32(vec![2], &[0.5, 1.5])),
        ),
    ];
    claim(&one("LabelEncoder", 4, I64, &[3], F, &tensors), 0).unwrap();
    declined(
        &one("LabelEncoder", 2, I64, &[3], F, &tensors),
        0,
        "no keys",
    );
    let s = [
        ("keys_int64s", ints(&[1])),
        ("values_strings", strings(&["a"])),
    ];
    // strings on either side: the host kernel
    claim(&one("LabelEncoder", 2, I64, &[3], DataType::String, &s), 0).unwrap();
    let i32s = [
        ("keys_int64s", ints(&[1])),
        (
            "values_tensor",
            Attribute::Tensor(TensorData::new(DataType::Int32, vec![1], vec![7, 0, 0, 0]).unwrap()),
        ),
    ];
    declined(
        &one("LabelEncoder", 4, I64, &[3], DataType::Int32, &i32s),
        0,
        "values of type int32 are not claimed",
    );
    let uneven = [
        ("keys_int64s", ints(&[1, 2])),
        ("values_int64s", ints(&[10])),
    ];
    declined(
        &one("LabelEncoder", 2, I64, &[3], I64, &uneven),
        0,
        "2 keys and 1 values",
    );
}

fn classifier(rows: usize, labels: &[i64], post: &str) -> G {
    let mut g = one(
        "LinearClassifier",
        1,
        F,
        &[-1, 3],
        I64,
        &[
            ("coefficients", floats(&vec![0.5; rows * 3])),
            ("intercepts", floats(&vec![0.0; rows])),
            ("classlabels_ints", ints(labels)),
            ("post_transform", string(post)),
        ],
    );
    g.output_any("scores", F);
    g.g.nodes[0].outputs.push("scores".into());
    g
}

#[test]
fn linear_models() {
    let reg = |post: &str, t: usize| {
        one(
            "LinearRegressor",
            1,
            F,
            &[-1, 2],
            F,
            &[
                ("coefficients", floats(&vec![1.0; 2 * t])),
                ("targets", int(t as i64)),
                ("post_transform", string(post)),
            ],
        )
    };
    claim(&reg("NONE", 1), 0).unwrap();
    claim(&reg("SOFTMAX_ZERO", 3), 0).unwrap();
    declined(&reg("PROBIT", 1), 0, "PROBIT");
    declined(
        &reg("NONE", 1).clone_with_features(5),
        0,
        "2 coefficients for 1 rows of 5 features",
    );

    for post in ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"] {
        claim(&classifier(1, &[3, 7], post), 0).unwrap();
        claim(&classifier(3, &[1, 2, 3], post), 0).unwrap();
    }
    declined(&classifier(3, &[1, 2, 3], "PROBIT"), 0, "PROBIT");
    declined(&classifier(1, &[3], "NONE"), 0, "two class labels");
    declined(&classifier(3, &[1, 2], "NONE"), 0, "2 class labels for 3");
    let mut g = classifier(2, &[1, 2], "NONE");
    g.g.nodes[0].attributes.remove("classlabels_ints");
    g.g.nodes[0].attr("classlabels_strings", strings(&["a", "b"]));
    declined(&g, 0, "MLX has no strings");
}

trait Features {
    fn clone_with_features(&self, c: i64) -> G;
}

impl Features for G {
    /// The same graph with input `x` as `[N, c]`.
    fn clone_with_features(&self, c: i64) -> G {
        let mut g = G { g: self.build() };
        g.g.inputs[0] = onnx_ir::ValueInfo::new("x", F, dims(&[-1, c]));
        g
    }
}

#[test]
fn svm_regressor() {
    let svm = |kernel: &str, post: &str, supports: i64, svs: usize| {
        one(
            "SVMRegressor",
            1,
            F,
            &[-1, 2],
            F,
            &[
                ("kernel_type", string(kernel)),
                ("post_transform", string(post)),
                ("n_supports", int(supports)),
                ("support_vectors", floats(&vec![0.5; svs])),
                ("coefficients", floats(&vec![1.0; supports.max(2) as usize])),
                ("rho", floats(&[0.1])),
                ("kernel_params", floats(&[0.3, 0.0, 2.0])),
            ],
        )
    };
    for kernel in ["LINEAR", "POLY", "RBF", "SIGMOID"] {
        plan_of(&svm(kernel, "NONE", 3, 6).build());
    }
    claim(&svm("LINEAR", "NONE", 0, 0), 0).unwrap();
    declined(&svm("RBF", "LOGISTIC", 3, 6), 0, "NONE only");
    declined(&svm("CUBIC", "NONE", 3, 6), 0, "kernel_type 'CUBIC'");
    declined(&svm("RBF", "NONE", 3, 5), 0, "5 support-vector values");
    let mut g = svm("RBF", "NONE", 3, 6);
    g.g.nodes[0].attr("kernel_params", floats(&[0.3]));
    declined(&g, 0, "1 kernel_params");
}

/// A two-tree regressor over 3 features: tree 0 `x[f0] <= 0.5 ? 1 : (x[2] < 2 ? 2 : 3)`,
/// tree 1 a stump on feature 1. `extra` replaces or adds attributes.
fn trees(op: &str, ml: i64, extra: &[(&str, Attribute)]) -> G {
    let classifier = op == "TreeEnsembleClassifier";
    let prefix = if classifier { "class" } else { "target" };
    let mut attrs: Vec<(String, Attribute)> = vec![
        ("nodes_treeids".into(), ints(&[0, 0, 0, 0, 0, 1, 1, 1])),
        ("nodes_nodeids".into(), ints(&[0, 1, 2, 3, 4, 0, 1, 2])),
        ("nodes_featureids".into(), ints(&[0, 0, 2, 0, 0, 1, 0, 0])),
        (
            "nodes_values".into(),
            floats(&[0.5, 0.0, 2.0, 0.0, 0.0, -1.0, 0.0, 0.0]),
        ),
        (
            "nodes_modes".into(),
            strings(&[
                "BRANCH_LEQ",
                "LEAF",
                "BRANCH_LT",
                "LEAF",
                "LEAF",
                "BRANCH_GT",
                "LEAF",
                "LEAF",
            ]),
        ),
        ("nodes_truenodeids".into(), ints(&[1, 0, 3, 0, 0, 1, 0, 0])),
        ("nodes_falsenodeids".into(), ints(&[2, 0, 4, 0, 0, 2, 0, 0])),
        (format!("{prefix}_treeids"), ints(&[0, 0, 0, 1, 1])),
        (format!("{prefix}_nodeids"), ints(&[1, 3, 4, 1, 2])),
        (format!("{prefix}_ids"), ints(&[0, 0, 0, 0, 0])),
        (
            format!("{prefix}_weights"),
            floats(&[1.0, 2.0, 3.0, 0.5, -0.5]),
        ),
    ];
    if classifier {
        attrs.push(("classlabels_int64s".into(), ints(&[4, 9])));
    } else {
        attrs.push(("n_targets".into(), int(1)));
    }
    for (k, v) in extra {
        attrs.retain(|(n, _)| n != k);
        attrs.push((k.to_string(), v.clone()));
    }
    let attrs: Vec<(&str, Attribute)> =
        attrs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut g = one(op, ml, F, &[-1, 3], F, &attrs);
    if classifier {
        let n = g.g.nodes.last_mut().unwrap();
        n.outputs = vec!["label".into(), "y".into()];
        g.output_any("label", I64);
    }
    g
}

#[test]
fn tree_regressor_lowers_to_a_loop_of_gathers() {
    let g = trees("TreeEnsembleRegressor", 3, &[]);
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    // Depth 2: two levels, the first reading the roots' features with one take of X.
    assert_eq!(count(&p, |s| matches!(s, Step::TakeAlongAxis { .. })), 1);
    // Per level: the child pick, and two mode picks (three comparisons are mixed).
    assert_eq!(count(&p, |s| matches!(s, Step::Where { .. })), 2 * 3);
    // Two trees summed tree by tree: one add, plus the base value.
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Binary {
                op: plan::BinaryOp::Add,
                ..
            }
        )),
        2
    );
    for agg in ["AVERAGE", "MIN", "MAX"] {
        claim(
            &trees(
                "TreeEnsembleRegressor",
                1,
                &[("aggregate_function", string(agg))],
            ),
            0,
        )
        .unwrap();
    }
    claim(&trees("TreeEnsembleClassifier", 3, &[]), 0).unwrap();
}

#[test]
fn tree_ensembles_decline_what_ort_rejects_or_computes_otherwise() {
    let r = "TreeEnsembleRegressor";
    declined(
        &trees(r, 3, &[("post_transform", string("PROBIT"))]),
        0,
        "PROBIT",
    );
    declined(&trees(r, 3, &[("n_targets", int(0))]), 0, "n_targets");
    declined(
        &trees(
            r,
            3,
            &[("nodes_truenodeids", ints(&[1, 0, 7, 0, 0, 1, 0, 0]))],
        ),
        0,
        "missing node",
    );
    declined(
        &trees(
            r,
            3,
            &[("nodes_truenodeids", ints(&[0, 0, 3, 0, 0, 1, 0, 0]))],
        ),
        0,
        "itself",
    );
    declined(
        &trees(
            r,
            3,
            &[("nodes_featureids", ints(&[0, 0, 3, 0, 0, 1, 0, 0]))],
        ),
        0,
        "feature 3 of 3",
    );
    declined(
        &trees(r, 3, &[("target_ids", ints(&[0, 0, 0, 1, 0]))]),
        0,
        "outside [0, 1)",
    );
    declined(
        &trees(r, 3, &[("target_nodeids", ints(&[1, 3, 3, 1, 2]))]),
        0,
        "no weight",
    );
    declined(
        &trees(
            r,
            3,
            &[(
                "nodes_modes",
                strings(&[
                    "BRANCH_LEQ",
                    "LEAF",
                    "BRANCH_XX",
                    "LEAF",
                    "LEAF",
                    "BRANCH_GT",
                    "LEAF",
                    "LEAF",
                ]),
            )],
        ),
        0,
        "BRANCH_XX",
    );
    // A cycle: node 2's false child is node 0.
    declined(
        &trees(
            r,
            3,
            &[("nodes_falsenodeids", ints(&[2, 0, 0, 0, 0, 2, 0, 0]))],
        ),
        0,
        "cycle",
    );
    let dbl = TensorData::new(DataType::Double, vec![8], vec![0u8; 64]).unwrap();
    declined(
        &trees(
            r,
            3,
            &[
                ("nodes_values", floats(&[])),
                ("nodes_values_as_tensor", Attribute::Tensor(dbl)),
            ],
        ),
        0,
        "fails to read",
    );
    // A float64 input compares and sums in float64 (on MLX's CPU stream).
    let mut g = trees(r, 3, &[]);
    g.g.inputs[0].dtype = Some(DataType::Double);
    let p = plan_of(&g.build());
    assert!(p.slots.iter().any(|s| s.dtype == DataType::Double));
    declined(
        &trees(r, 3, &[("base_values", floats(&[1.0, 2.0]))]),
        0,
        "2 base_values",
    );
    let mut g = trees(r, 3, &[]);
    g.g.inputs[0].dtype = Some(I64);
    declined(&g, 0, "int64");
    let c = "TreeEnsembleClassifier";
    declined(
        &trees(
            c,
            3,
            &[
                ("classlabels_int64s", ints(&[])),
                ("classlabels_strings", strings(&["a", "b"])),
            ],
        ),
        0,
        "strings",
    );
    declined(
        &trees(c, 3, &[("base_values", floats(&[0.1, 0.2]))]),
        0,
        "two base_values",
    );
}

#[test]
fn tree_ensemble_v5_member_sets() {
    let t = |dt: DataType, v: Vec<u8>, n: i64| {
        Attribute::Tensor(TensorData::new(dt, vec![n], v).unwrap())
    };
    let f32s = |v: &[f32]| {
        t(
            F,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            v.len() as i64,
        )
    };
    let g = |members: &[f32]| {
        let mut mv = members.to_vec();
        mv.push(f32::NAN);
        one(
            "TreeEnsemble",
            5,
            F,
            &[-1, 2],
            F,
            &[
                ("n_targets", int(1)),
                ("tree_roots", ints(&[0])),
                ("nodes_featureids", ints(&[1])),
                ("nodes_splits", f32s(&[0.0])),
                ("nodes_modes", t(DataType::Uint8, vec![6], 1)),
                ("nodes_truenodeids", ints(&[0])),
                ("nodes_trueleafs", ints(&[1])),
                ("nodes_falsenodeids", ints(&[1])),
                ("nodes_falseleafs", ints(&[1])),
                ("membership_values", f32s(&mv)),
                ("leaf_targetids", ints(&[0, 0])),
                ("leaf_weights", f32s(&[1.0, -1.0])),
            ],
        )
    };
    // {1, 2, 5}: a chain of three BRANCH_EQ nodes, three loop levels.
    let p = plan_of(&g(&[1.0, 2.0, 5.0]).build());
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Binary {
                op: plan::BinaryOp::Equal,
                ..
            }
        )),
        3
    );
    declined(&g(&[1.0, 40.0]), 0, "BRANCH_MEMBER set");
    let big: Vec<f32> = (0..31).map(|v| v as f32 / 2.0).collect();
    declined(&g(&big), 0, "31 values");
}

#[test]
fn svm_classifier() {
    // Three classes with 1, 2, 1 support vectors of 2 features.
    let svc = |extra: &[(&str, Attribute)]| {
        let mut attrs: Vec<(&str, Attribute)> = vec![
            ("kernel_type", string("RBF")),
            ("kernel_params", floats(&[0.3, 0.0, 2.0])),
            ("vectors_per_class", ints(&[1, 2, 1])),
            ("support_vectors", floats(&[0.5; 8])),
            ("coefficients", floats(&[1.0; 8])),
            ("rho", floats(&[0.1, 0.2, 0.3])),
            ("classlabels_ints", ints(&[7, 8, 9])),
        ];
        for (k, v) in extra {
            attrs.retain(|(n, _)| n != k);
            attrs.push((k, v.clone()));
        }
        let mut g = one("SVMClassifier", 1, F, &[-1, 2], F, &attrs);
        g.g.nodes[0].outputs = vec!["label".into(), "y".into()];
        g.output_any("label", I64);
        g
    };
    let p = plan_of(&svc(&[]).build());
    // Kernels, pair scores, and the two vote products.
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 3);
    claim(&svc(&[("post_transform", string("SOFTMAX"))]), 0).unwrap();
    // The linear form: 3 x 2 coefficients.
    let linear = svc(&[
        ("vectors_per_class", ints(&[])),
        ("support_vectors", floats(&[])),
        ("coefficients", floats(&[1.0; 6])),
    ]);
    claim(&linear, 0).unwrap();
    declined(&svc(&[("post_transform", string("PROBIT"))]), 0, "PROBIT");
    declined(
        &svc(&[("prob_a", floats(&[0.1; 3])), ("prob_b", floats(&[0.1; 3]))]),
        0,
        "prob_a",
    );
    declined(
        &svc(&[("vectors_per_class", ints(&[1, 3]))]),
        0,
        "2 vectors_per_class",
    );
    declined(
        &svc(&[("support_vectors", floats(&[0.5; 12]))]),
        0,
        "2 features, the model 3",
    );
    declined(&svc(&[("rho", floats(&[0.1]))]), 0, "1 rho");
    declined(
        &svc(&[
            ("classlabels_ints", ints(&[])),
            ("classlabels_strings", strings(&["a", "b", "c"])),
        ]),
        0,
        "strings",
    );
    declined(
        &svc(&[("kernel_params", floats(&[]))]),
        0,
        "0 kernel_params",
    );
}
