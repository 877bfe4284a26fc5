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
    kernel_attrs(p, "roi_align").get_bool("half_pixel").unwrap()
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
    let step = kernel_steps(&p, "roi_align")[0];
    assert!(matches!(step, Step::HostKernel { outputs, .. } if outputs.len() == 1));
    assert!(kernel_attrs(&p, "roi_align").get_bool("max_mode").unwrap());
    assert_eq!(step.host_reads().len(), 3);
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
    let mut g = roi_graph(22, DataType::Float16);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"]);
    declined(&g, 0, "element type");
    let mut g = roi_graph(16, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"])
        .attr("mode", string("median"));
    declined(&g, 0, "not avg or max");
    let mut g = roi_graph(16, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"])
        .attr("sampling_ratio", int(-1));
    declined(&g, 0, "negative");
}

#[test]
fn roi_align_opset_22_is_claimed() {
    let mut g = roi_graph(22, DataType::Float);
    g.node("RoiAlign", &["x", "rois", "bi"], &["y"]);
    let p = plan_of(&g.build());
    assert!(half_pixel(&p), "opset 22 defaults to half_pixel");
}

#[test]
fn max_roi_pool_claims_and_declines() {
    let mut g = G::new(1);
    g.input("x", DataType::Float, &[1, 2, 6, 6]);
    g.input("rois", DataType::Float, &[3, 5]);
    g.output_any("y", DataType::Float);
    g.node("MaxRoiPool", &["x", "rois"], &["y"])
        .attr("pooled_shape", ints(&[2, 3]))
        .attr("spatial_scale", float(0.5));
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::Eager);
    let a = kernel_attrs(&p, "max_roi_pool");
    assert_eq!(a.get_ints("pooled_shape").unwrap(), &[2, 3]);
    assert_eq!(a.get_float("spatial_scale").unwrap(), 0.5);
    g.node("MaxRoiPool", &["x", "rois"], &["y2"]);
    declined(&g, 1, "pooled_shape is required");
    g.node("MaxRoiPool", &["x", "rois"], &["y3"])
        .attr("pooled_shape", ints(&[2]));
    declined(&g, 2, "must have 2 values");
    g.node("MaxRoiPool", &["x", "rois"], &["y4"])
        .attr("pooled_shape", ints(&[2, 2]))
        .attr("spatial_scale", float(0.0));
    declined(&g, 3, "must be positive");
    let mut g = G::new(1);
    g.input("x", DataType::Double, &[1, 2, 6, 6]);
    g.input("rois", DataType::Double, &[3, 5]);
    g.node("MaxRoiPool", &["x", "rois"], &["y"])
        .attr("pooled_shape", ints(&[2, 2]));
    declined(&g, 0, "element type");
}
