//! Claims, declines and lowerings of TfIdfVectorizer, MelWeightMatrix, BatchNormalization in
//! training mode and Dropout in training (a ratio of 0 exact, others drawn at random).

mod common;

use common::*;
use onnx_ir::{Attribute, DataType};
use plan::Step;

fn tfidf(g: &mut G) -> &mut onnx_ir::Node {
    g.node("TfIdfVectorizer", &["x"], &["y"])
        .attr("mode", string("TF"))
        .attr("min_gram_length", int(1))
        .attr("max_gram_length", int(2))
        .attr("max_skip_count", int(1))
        .attr("ngram_counts", ints(&[0, 2]))
        .attr("ngram_indexes", ints(&[0, 1, 2]))
        .attr("pool_int64s", ints(&[4, 5, 4, 5]))
}

#[test]
fn tfidf_is_a_host_kernel() {
    let mut g = G::new(9);
    g.input("x", DataType::Int32, &[2, 6]);
    g.output_any("y", DataType::Float);
    tfidf(&mut g);
    assert_eq!(claim(&g, 0), Ok(()));
    let p = plan_of(&g.build());
    let n = count(
        &p,
        |s| matches!(s, Step::HostKernel { kernel, attrs, .. } if kernel == "tfidf_vectorizer" && attrs.get_ints("ngram_indexes") == Ok(&[0, 1, 2][..])),
    );
    assert_eq!(n, 1);
}

#[test]
fn tfidf_declines_what_ort_refuses_or_strings() {
    let mut g = G::new(9);
    g.input("x", DataType::Int64, &[6]);
    g.output_any("y", DataType::Float);
    tfidf(&mut g).attr("pool_int64s", ints(&[4, 4, 4, 5]));
    declined(&g, 0, "duplicate 1-gram");
    let mut g = G::new(9);
    g.input("x", DataType::Int64, &[6]);
    g.output_any("y", DataType::Float);
    tfidf(&mut g).attr("pool_strings", Attribute::Strings(vec![b"a".to_vec()]));
    declined(&g, 0, "pool_strings");
    let mut g = G::new(9);
    g.input("x", DataType::Int64, &[2, 3, 6]);
    g.output_any("y", DataType::Float);
    tfidf(&mut g);
    declined(&g, 0, "rank-3");
}

#[test]
fn mel_weight_matrix_runs_on_the_host_or_folds() {
    let names = ["n", "d", "s", "lo", "hi"];
    let mut g = G::new(17);
    for (i, n) in names.iter().enumerate() {
        let dt = if i < 3 {
            DataType::Int64
        } else {
            DataType::Float
        };
        g.input(n, dt, &[]);
    }
    g.output_any("y", DataType::Float);
    g.node("MelWeightMatrix", &names, &["y"]);
    assert_eq!(claim(&g, 0), Ok(()));
    let p = plan_of(&g.build());
    let n = count(&p, |s| {
        matches!(
            s,
            Step::HostKernel { kernel, .. } if kernel == "mel_weight_matrix"
        )
    });
    assert_eq!(n, 1);
    g.g.nodes[0].attr("output_datatype", int(11));
    declined(&g, 0, "output_datatype double");
}

#[test]
fn batch_norm_training_mode() {
    let mut g = G::new(15);
    g.input("x", DataType::Float, &[2, 3, 4]);
    for p in ["s", "b", "m", "v"] {
        g.input(p, DataType::Float, &[3]);
    }
    g.output_any("y", DataType::Float);
    g.output_any("rm", DataType::Float);
    g.output_any("rv", DataType::Float);
    g.node(
        "BatchNormalization",
        &["x", "s", "b", "m", "v"],
        &["y", "rm", "rv"],
    )
    .attr("training_mode", int(1))
    .attr("momentum", float(0.8));
    assert_eq!(claim(&g, 0), Ok(()));
    let p = plan_of(&g.build());
    // Batch mean and variance over [0, 2].
    let n = count(&p, |s| matches!(s, Step::Reduce { .. }));
    assert_eq!(n, 2);
    assert_eq!(p.outputs.len(), 3);
}

#[test]
fn dropout_training_draws_unless_the_ratio_is_a_constant_zero() {
    let build = |ratio: Option<f32>| {
        let mut g = G::new(13);
        g.input("x", DataType::Float, &[2, 3]);
        g.input("t", DataType::Bool, &[]);
        match ratio {
            Some(r) => {
                g.init_f32("r", &[], &[r]);
            }
            None => {
                g.input("r", DataType::Float, &[]);
            }
        }
        g.output_any("y", DataType::Float);
        g.node("Dropout", &["x", "r", "t"], &["y"]);
        g
    };
    assert_eq!(claim(&build(Some(0.0)), 0), Ok(()));
    // a ratio of 0 passes x through: no random draw
    let p = plan_of(&build(Some(0.0)).build());
    assert_eq!(
        count(&p, |s| matches!(s, plan::Step::Random { .. })),
        0,
        "{p}"
    );
    // a nonzero or run-time ratio drops at random: uniform >= ratio, x / (1 - ratio)
    for g in [build(Some(0.5)), build(None)] {
        assert_eq!(claim(&g, 0), Ok(()));
        let p = plan_of(&g.build());
        assert_eq!(
            count(&p, |s| matches!(s, plan::Step::Random { .. })),
            1,
            "{p}"
        );
        assert_eq!(p.compile_class(), plan::CompileClass::Eager);
    }
    // float64 training is declined (the draws are float32)
    let mut g = G::new(13);
    g.input("x", DataType::Double, &[2]);
    g.input("t", DataType::Bool, &[]);
    g.output_any("y", DataType::Double);
    g.node("Dropout", &["x", "", "t"], &["y"]);
    declined(&g, 0, "float64 training");
}
