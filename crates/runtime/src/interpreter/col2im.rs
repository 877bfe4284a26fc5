//! ONNX `Col2Im` (see `plan::Step::Col2Im`): the index map comes from the host
//! (`plan::step::Col2ImSpec::resolve`), the accumulation runs on the device.

use mlx::{Array, Stream, ops};
use plan::HostReader;
use plan::step::Col2ImSpec;

use super::err;
use crate::RuntimeError;

fn i32_of(v: i64) -> Result<i32, RuntimeError> {
    i32::try_from(v).map_err(|_| RuntimeError("Col2Im: dim too large".into()))
}

/// `[N, C*K, L]` -> `[N, C, *image]`, each kernel offset's contribution added in order.
pub(super) fn col2im(
    x: &Array,
    spec: &Col2ImSpec,
    host: &mut dyn HostReader,
    s: &Stream,
) -> Result<Array, RuntimeError> {
    let g = spec.resolve(host).map_err(err)?;
    let shape = x.shape();
    let k: i64 = g.block.iter().product();
    let l: i64 = g.blocks.iter().product();
    if shape.len() != 3 || shape[1] as i64 % k != 0 || shape[2] as i64 != l {
        return Err(RuntimeError(format!(
            "Col2Im: input shape {shape:?} does not match {k} kernel positions and {l} blocks"
        )));
    }
    let c = shape[1] / i32_of(k)?;
    let flat = ops::reshape(x, &[shape[0], c, i32_of(k * l)?], s).map_err(err)?;
    let zero = Array::scalar_f32(0.0);
    let padded = ops::pad(&flat, &[2], &[0], &[1], &zero, "constant", s).map_err(err)?;
    let mut acc: Option<Array> = None;
    for row in &g.sources {
        let idx = Array::from_slice(row, &[i32_of(row.len() as i64)?]).map_err(err)?;
        let part = ops::take_axis(&padded, &idx, 2, s).map_err(err)?;
        acc = Some(match acc {
            None => part,
            Some(a) => ops::add(&a, &part, s).map_err(err)?,
        });
    }
    let sum = acc.ok_or_else(|| RuntimeError("Col2Im: empty block".into()))?;
    let mut out = vec![shape[0], c];
    for &d in &g.image {
        out.push(i32_of(d)?);
    }
    ops::reshape(&sum, &out, s).map_err(err)
}
