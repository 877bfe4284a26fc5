//! ONNX `Col2Im` geometry: where every column element of `[N, C*K, L]` lands in the image,
//! a pure function of `image_shape`, `block_shape`, `dilations`, `pads` and `strides`.

use super::HostReader;
use super::{ShapeSource, Slot};

/// The resolved geometry of a Col2Im node.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Col2ImGeometry {
    /// Output spatial dims.
    pub image: Vec<i64>,
    /// Kernel dims.
    pub block: Vec<i64>,
    /// Number of blocks per spatial dim.
    pub blocks: Vec<i64>,
    /// For each kernel offset `k` (row-major over `block`), for each image pixel (row-major over
    /// `image`): the column position `k * L + l` that lands there, or `K * L` when none does.
    pub sources: Vec<Vec<i32>>,
}

impl Col2ImGeometry {
    /// Resolves the geometry; `Err` with a reason on inconsistent shapes.
    pub fn new(
        image: &[i64],
        block: &[i64],
        dilations: &[i64],
        pads: &[i64],
        strides: &[i64],
    ) -> Result<Self, String> {
        let d = image.len();
        if d == 0 || block.len() != d {
            return Err(format!(
                "Col2Im: image_shape {image:?} and block_shape {block:?} must have the same \
                 non-zero length"
            ));
        }
        if dilations.len() != d || strides.len() != d || pads.len() != 2 * d {
            return Err("Col2Im: dilations / strides / pads do not match the spatial rank".into());
        }
        if image.iter().chain(block).any(|&v| v <= 0)
            || dilations.iter().chain(strides).any(|&v| v <= 0)
            || pads.iter().any(|&p| p < 0)
        {
            return Err("Col2Im: shapes, dilations and strides must be positive".into());
        }
        let mut blocks = Vec::with_capacity(d);
        for i in 0..d {
            let span = dilations[i] * (block[i] - 1) + 1;
            let padded = image[i] + pads[i] + pads[d + i];
            if padded < span {
                return Err(format!("Col2Im: the block does not fit axis {i}"));
            }
            blocks.push((padded - span) / strides[i] + 1);
        }
        let k_total: i64 = block.iter().product();
        let l_total: i64 = blocks.iter().product();
        let p_total: i64 = image.iter().product();
        if k_total * l_total >= i32::MAX as i64 || k_total * p_total > 1 << 28 {
            return Err("Col2Im: the index map would be too large".into());
        }
        let none = (k_total * l_total) as i32;
        let unravel = |mut flat: i64, dims: &[i64]| -> Vec<i64> {
            let mut idx = vec![0; dims.len()];
            for j in (0..dims.len()).rev() {
                idx[j] = flat % dims[j];
                flat /= dims[j];
            }
            idx
        };
        let mut sources = vec![vec![none; p_total as usize]; k_total as usize];
        for (k, row) in sources.iter_mut().enumerate() {
            let kk = unravel(k as i64, block);
            for l in 0..l_total {
                let ll = unravel(l, &blocks);
                let mut dest = 0i64;
                let mut inside = true;
                for i in 0..d {
                    let p = ll[i] * strides[i] - pads[i] + kk[i] * dilations[i];
                    if p < 0 || p >= image[i] {
                        inside = false;
                        break;
                    }
                    dest = dest * image[i] + p;
                }
                if inside {
                    row[dest as usize] = (k as i64 * l_total + l) as i32;
                }
            }
        }
        Ok(Col2ImGeometry {
            image: image.to_vec(),
            block: block.to_vec(),
            blocks,
            sources,
        })
    }
}

/// The attributes and shape inputs of ONNX `Col2Im`, lowered to a [`super::Step::TakeSum`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Col2ImSpec {
    /// `image_shape` (input 1).
    pub image: ShapeSource,
    /// `block_shape` (input 2).
    pub block: ShapeSource,
    /// `dilations`, or `None` for ones.
    pub dilations: Option<Vec<i64>>,
    /// `pads` (`[begins..., ends...]`), or `None` for zeros.
    pub pads: Option<Vec<i64>>,
    /// `strides`, or `None` for ones.
    pub strides: Option<Vec<i64>>,
}

/// The resolved arguments of a [`super::Step::TakeSum`]: `x` reshaped to `rows`, its last axis
/// padded with one zero, `sources[k]` gathered from that axis and summed, reshaped to `out`.
#[derive(Debug, Clone, PartialEq)]
pub struct TakeSumArgs {
    /// The shape `x` is viewed as before the gathers.
    pub rows: Vec<i32>,
    /// One index vector into the padded last axis per summed gather (the padding zero sits at
    /// index `rows.last()`).
    pub sources: Vec<Vec<i32>>,
    /// The output shape.
    pub out: Vec<i32>,
}

fn i32_of(v: i64) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| "Col2Im: dim too large".to_string())
}

impl Col2ImSpec {
    /// The [`TakeSumArgs`] of a Col2Im of an `x` of shape `x_shape` (`[N, C*K, L]` ->
    /// `[N, C, K*L]`, gathered into `[N, C, *image]`); `Err` when `x` does not match the
    /// geometry.
    pub fn resolve(
        &self,
        x_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<TakeSumArgs, String> {
        let g = self.geometry(host)?;
        let k: i64 = g.block.iter().product();
        let l: i64 = g.blocks.iter().product();
        if x_shape.len() != 3 || x_shape[1] % k != 0 || x_shape[2] != l {
            return Err(format!(
                "Col2Im: input shape {x_shape:?} does not match {k} kernel positions and {l} \
                 blocks"
            ));
        }
        let (n, c) = (i32_of(x_shape[0])?, i32_of(x_shape[1] / k)?);
        let mut out = vec![n, c];
        for &d in &g.image {
            out.push(i32_of(d)?);
        }
        if g.sources.is_empty() {
            return Err("Col2Im: empty block".into());
        }
        Ok(TakeSumArgs {
            rows: vec![n, c, i32_of(k * l)?],
            sources: g.sources,
            out,
        })
    }

    /// Reads the shapes (on the host when they are dynamic) and resolves the geometry; only
    /// 2-D images may have non-default dilations / pads / strides (see [`check_ort_rank`]).
    pub fn geometry(&self, host: &mut dyn HostReader) -> Result<Col2ImGeometry, String> {
        let image = self.image.get(host)?;
        let block = self.block.get(host)?;
        let d = image.len();
        let dilations = self.dilations.clone().unwrap_or_else(|| vec![1; d]);
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; d]);
        let pads = self.pads.clone().unwrap_or_else(|| vec![0; 2 * d]);
        check_ort_rank(d, &dilations, &pads, &strides)?;
        Col2ImGeometry::new(&image, &block, &dilations, &pads, &strides)
    }

    /// Slots read on the host.
    pub fn host_reads(&self) -> Vec<Slot> {
        self.image
            .dynamic_slot()
            .into_iter()
            .chain(self.block.dynamic_slot())
            .collect()
    }

    /// Applies `f` to every slot the spec reads.
    pub fn map_slots(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        if let ShapeSource::Dynamic(s) = &mut self.image {
            f(s);
        }
        if let ShapeSource::Dynamic(s) = &mut self.block {
            f(s);
        }
    }
}

/// ONNX Runtime's CPU EP runs spatial ranks other than 2 through its N-D im2col with the
/// dilated kernel and `image - kernel + 1` blocks, which ignores pads and strides (and can read
/// past the input): it agrees with the ONNX definition only without dilations, pads and strides.
pub fn check_ort_rank(
    d: usize,
    dilations: &[i64],
    pads: &[i64],
    strides: &[i64],
) -> Result<(), String> {
    if d != 2 && (dilations.iter().chain(strides).any(|&v| v != 1) || pads.iter().any(|&p| p != 0))
    {
        return Err(format!(
            "Col2Im: {d}-D with dilations / pads / strides differs on ONNX Runtime's CPU EP \
             (only 2-D honours them)"
        ));
    }
    Ok(())
}
