//! Claims, declines and the lowering of RoiAlign.

mod common;

use common::*;
use onnx_ir::DataType;
use plan::{CompileClass, Step};

fn roi_graph(opset: i64, dt: DataType) -> G {
    let mut g = G::new(opset);
    g.input("x", dt, &[2, 3, 6, 8]);
    g.input("rois", dt, &[4, 4]);
    g.input("bi", DataType::Int64, &[4]);
    g.output_any("y", dt);
    g
}

fn half_pixel(p: &plan::Plan) -> bool {
    p.steps
        .iter()
        .find_map(|s| match s {
            Step::RoiAlign { spec, .. } => Some(spec.half_pixel),
            _ => None,
        })
        .expect("a RoiAlign step")
}

#[test]
fn roi_align_is_one_eager_step_with_opset_coordinates() {
    let mut g = roi_graph(16, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"])
        .attr("mode", string("MAX"))
        .attr("output_height", int(3));
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::Eager);
    assert!(half_pixel(&p), "opset 16 defaults to half_pixel");
    let step = p
        .steps
        .iter()
        .find(|s| matches!(s, Step::RoiAlign { .. }))
        .unwrap();
    assert_eq!(step.host_reads().len(), 2);
    let inputs = step.inputs();
    assert!(step.host_reads().iter().all(|r| inputs.contains(r)));

    let mut g = roi_graph(16, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"]).attr(
        "coordinate_transformation_mode",
        string("output_half_pixel"),
    );
    assert!(!half_pixel(&plan_of(&g.build())));

    let mut g = roi_graph(10, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"]);
    assert!(
        !half_pixel(&plan_of(&g.build())),
        "opset 10 is output_half_pixel"
    );
}

#[test]
fn roi_align_declines() {
    let mut g = roi_graph(16, DataType::Double);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"]);
    declined(&g, 0, "element type");
    let mut g = roi_graph(22, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"]);
    declined(&g, 0, "opset range");
    let mut g = roi_graph(16, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"])
        .attr("mode", string("median"));
    declined(&g, 0, "not avg or max");
    let mut g = roi_graph(16, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"])
        .attr("sampling_ratio", int(-1));
    declined(&g, 0, "negative");
}
