//! ONNX `RoiAlign`: sample rows and weights from the host (`plan::RoiAlignSpec::samples`),
//! X gathered and reduced on the device (X itself is never read back).

use mlx::{Array, Stream, ops};

use super::{Host, err, shape_i64};
use crate::RuntimeError;

fn dims(v: &[usize]) -> Result<Vec<i32>, RuntimeError> {
    v.iter()
        .map(|&d| i32::try_from(d).map_err(|_| RuntimeError("RoiAlign: dim too large".into())))
        .collect()
}

/// Runs a `Step::RoiAlign`: `[R, C, output_height, output_width]` float32.
pub(super) fn roi_align(
    step: &plan::Step,
    host: &mut Host,
    s: &Stream,
) -> Result<Array, RuntimeError> {
    use plan::HostReader;
    let plan::Step::RoiAlign {
        x,
        rois,
        batch_indices,
        spec,
        ..
    } = step
    else {
        return Err(RuntimeError("not a RoiAlign step".into()));
    };
    let xa = host.slots.get(*x)?.clone();
    let x_shape = shape_i64(&xa);
    let rois_shape = shape_i64(host.slots.get(*rois)?);
    let bi_shape = shape_i64(host.slots.get(*batch_indices)?);
    if rois_shape.len() != 2 || rois_shape[1] != 4 {
        return Err(RuntimeError(format!(
            "RoiAlign: rois {rois_shape:?} must be [num_rois, 4]"
        )));
    }
    if bi_shape.len() != 1 || bi_shape[0] != rois_shape[0] {
        return Err(RuntimeError(format!(
            "RoiAlign: batch_indices {bi_shape:?} must be [{}]",
            rois_shape[0]
        )));
    }
    let roi_values: Vec<f32> = host
        .floats(*rois)
        .map_err(err)?
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let bi = host.ints(*batch_indices).map_err(err)?;
    let smp = spec.samples(&x_shape, &roi_values, &bi).map_err(err)?;
    let c = x_shape[1] as usize;
    let (r, p, k) = (
        smp.rois,
        (spec.output_height * spec.output_width) as usize,
        smp.corners,
    );
    let (oh, ow) = (spec.output_height as usize, spec.output_width as usize);
    if r == 0 || c == 0 {
        return ops::zeros(&dims(&[r, c, oh, ow])?, mlx::Dtype::Float32, s).map_err(err);
    }
    // X [N, C, H, W] -> [N*H*W, C].
    let xt = ops::transpose_axes(&xa, &[0, 2, 3, 1], s).map_err(err)?;
    let xt = ops::reshape(&xt, &[-1, dims(&[c])?[0]], s).map_err(err)?;
    let rows = Array::from_slice(&smp.rows, &dims(&[r * p * k])?).map_err(err)?;
    let g = ops::take_axis(&xt, &rows, 0, s).map_err(err)?;
    let g = ops::reshape(&g, &dims(&[r, p, k, c])?, s).map_err(err)?;
    let entry = dims(&[r, p, k, 1])?;
    let w = Array::from_slice(&smp.weights, &entry).map_err(err)?;
    let valid = Array::from_slice(&smp.valid, &entry).map_err(err)?;
    let fill = Array::from_slice(&smp.fill, &entry).map_err(err)?;
    let v = ops::multiply(&g, &w, s).map_err(err)?;
    let v = ops::where_(&valid, &v, &fill, s).map_err(err)?;
    let y = if spec.max_mode {
        ops::max_axes(&v, &[2], false, s).map_err(err)?
    } else {
        let sum = ops::sum_axes(&v, &[2], false, s).map_err(err)?;
        let count = Array::from_slice(&smp.count, &dims(&[r, 1, 1])?).map_err(err)?;
        ops::divide(&sum, &count, s).map_err(err)?
    };
    // [R, P, C] -> [R, C, oh, ow].
    let y = ops::transpose_axes(&y, &[0, 2, 1], s).map_err(err)?;
    ops::reshape(&y, &dims(&[r, c, oh, ow])?, s).map_err(err)
}
