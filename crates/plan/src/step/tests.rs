//! Unit tests of the step helpers.

use super::*;

struct NoHost;
impl HostReader for NoHost {
    fn ints(&mut self, slot: Slot) -> Result<Vec<i64>, String> {
        Err(format!("unexpected host read of {slot:?}"))
    }
    fn floats(&mut self, slot: Slot) -> Result<Vec<f64>, String> {
        Err(format!("unexpected host read of {slot:?}"))
    }
}

#[test]
fn reflect_and_wrap_pad_gather_like_numpy() {
    // np.pad([0, 1, 2, 3], (2, 3), mode="reflect") / mode="wrap"
    assert_eq!(
        PadMode::Reflect.source_indices(4, 2, 3).unwrap(),
        vec![2, 1, 0, 1, 2, 3, 2, 1, 0]
    );
    assert_eq!(
        PadMode::Wrap.source_indices(4, 2, 4).unwrap(),
        vec![2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    );
    // Wrap pads wider than the axis repeat it, as ORT's CPU EP does.
    assert_eq!(
        PadMode::Wrap.source_indices(3, 4, 0).unwrap(),
        vec![2, 0, 1, 2, 0, 1, 2]
    );
    assert_eq!(PadMode::Reflect.source_indices(1, 0, 0).unwrap(), vec![0]);
    for (mode, n, lo, hi) in [
        (PadMode::Reflect, 4, 4, 0),
        (PadMode::Reflect, 1, 0, 1),
        (PadMode::Wrap, 0, 0, 1),
        (PadMode::Wrap, 3, -1, 0),
        (PadMode::Constant, 3, 1, 1),
    ] {
        assert!(
            mode.source_indices(n, lo, hi).is_err(),
            "{mode:?} {n} {lo} {hi}"
        );
    }
}

#[test]
fn reshape_zero_minus_one_allowzero() {
    assert_eq!(
        reshape_target(&[2, 3, 4], &[0, -1], false).unwrap(),
        vec![2, 12]
    );
    assert_eq!(reshape_target(&[2, 3, 4], &[-1], false).unwrap(), vec![24]);
    assert_eq!(
        reshape_target(&[2, 3, 4], &[4, 0, 2], false).unwrap(),
        vec![4, 3, 2]
    );
    assert_eq!(reshape_target(&[0, 3], &[0, 3], true).unwrap(), vec![0, 3]);
    assert_eq!(reshape_target(&[0, 3], &[3, 0], true).unwrap(), vec![3, 0]);
    assert!(reshape_target(&[2, 3], &[-1, -1], false).is_err());
    assert!(reshape_target(&[2, 3], &[0, -1], true).is_err());
    assert!(reshape_target(&[2, 3], &[5, -1], false).is_err());
    assert!(reshape_target(&[2, 3], &[-2, 3], false).is_err());
    // Element count mismatch is caught by resolve.
    let t = ReshapeTarget::Onnx {
        shape: ShapeSource::Static(vec![7]),
        allowzero: false,
    };
    assert!(t.resolve(&[2, 3], None, &mut NoHost).is_err());
}

#[test]
fn reshape_reads_dynamic_shape() {
    struct H;
    impl HostReader for H {
        fn ints(&mut self, slot: Slot) -> Result<Vec<i64>, String> {
            assert_eq!(slot, Slot(5));
            Ok(vec![0, -1])
        }
        fn floats(&mut self, _: Slot) -> Result<Vec<f64>, String> {
            unreachable!()
        }
    }
    let t = ReshapeTarget::Onnx {
        shape: ShapeSource::Dynamic(Slot(5)),
        allowzero: false,
    };
    assert_eq!(t.resolve(&[2, 3, 4], None, &mut H).unwrap(), vec![2, 12]);
    assert_eq!(t.host_reads(), vec![Slot(5)]);
}

#[test]
fn flatten_squeeze_unsqueeze() {
    assert_eq!(flatten_shape(&[2, 3, 4], 1).unwrap(), vec![2, 12]);
    assert_eq!(flatten_shape(&[2, 3, 4], 0).unwrap(), vec![1, 24]);
    assert_eq!(flatten_shape(&[2, 3, 4], 3).unwrap(), vec![24, 1]);
    assert_eq!(flatten_shape(&[2, 3, 4], -1).unwrap(), vec![6, 4]);
    assert!(flatten_shape(&[2, 3, 4], 4).is_err());
    assert_eq!(squeeze_shape(&[1, 3, 1], None).unwrap(), vec![3]);
    assert_eq!(squeeze_shape(&[1, 3, 1], Some(&[-1])).unwrap(), vec![1, 3]);
    assert!(squeeze_shape(&[1, 3, 1], Some(&[1])).is_err());
    assert_eq!(unsqueeze_shape(&[3, 4], &[0, 3]).unwrap(), vec![1, 3, 4, 1]);
    assert_eq!(unsqueeze_shape(&[3, 4], &[-1]).unwrap(), vec![3, 4, 1]);
    assert_eq!(unsqueeze_shape(&[], &[0]).unwrap(), vec![1]);
    assert!(unsqueeze_shape(&[3], &[0, 0]).is_err());
}

#[test]
fn broadcasting() {
    assert_eq!(
        broadcast_shapes(&[2, 1, 4], &[3, 1]).unwrap(),
        vec![2, 3, 4]
    );
    assert_eq!(broadcast_shapes(&[], &[5]).unwrap(), vec![5]);
    assert_eq!(broadcast_shapes(&[0, 1], &[1, 3]).unwrap(), vec![0, 3]);
    assert!(broadcast_shapes(&[2], &[3]).is_err());
    assert_eq!(expand_shape(&[3, 1], &[2, 1, 6]).unwrap(), vec![2, 3, 6]);
    assert_eq!(expand_shape(&[3, 4], &[1]).unwrap(), vec![3, 4]);
    assert!(expand_shape(&[3], &[-1]).is_err());
}

fn sl(shape: &[i64], s: &[i64], e: &[i64], a: Option<&[i64]>, st: Option<&[i64]>) -> SliceBounds {
    slice_bounds(shape, s, e, a, st).unwrap()
}

/// What numpy would produce for one axis, to check MLX-convention outputs against.
fn mlx_len(n: i64, start: i32, stop: i32, stride: i32) -> i64 {
    // Mirror of MLX's documented normalisation (negative stop += n; clamp).
    let (s, mut e) = (start as i64, stop as i64);
    if e < 0 {
        e += n;
    }
    let str = stride as i64;
    if str < 0 {
        let st = s.min(n - 1);
        let ed = if e > -1 { e } else { -1 };
        let ed = ed.min(st);
        (st - ed + (-str) - 1) / (-str)
    } else {
        let st = s.clamp(0, n);
        let ed = e.clamp(0, n).max(st);
        (ed - st + str - 1) / str
    }
}

#[test]
fn slice_clamps_and_negative_steps() {
    let b = sl(&[10], &[2], &[i64::MAX], None, None);
    assert_eq!(
        (b.start.clone(), b.stop.clone(), b.out_shape.clone()),
        (vec![2], vec![10], vec![8])
    );
    let b = sl(&[10], &[-3], &[-1], None, None);
    assert_eq!(
        (b.start.clone(), b.stop.clone(), b.out_shape.clone()),
        (vec![7], vec![9], vec![2])
    );
    // Full reverse: start INT_MAX clamps to 9, end INT_MIN means before 0.
    let b = sl(&[10], &[i64::MAX], &[i64::MIN], None, Some(&[-1]));
    assert_eq!(b.out_shape, vec![10]);
    assert_eq!(b.start, vec![9]);
    assert_eq!(b.stop, vec![-11]);
    assert_eq!(mlx_len(10, b.start[0], b.stop[0], b.strides[0]), 10);
    // Reverse with step -2 from 8 down to (excluding) 1.
    let b = sl(&[10], &[8], &[1], None, Some(&[-2]));
    assert_eq!(b.out_shape, vec![4]); // 8, 6, 4, 2
    assert_eq!(mlx_len(10, b.start[0], b.stop[0], b.strides[0]), 4);
    // Empty slices.
    let b = sl(&[10], &[5], &[2], None, None);
    assert_eq!(b.out_shape, vec![0]);
    assert_eq!(mlx_len(10, b.start[0], b.stop[0], b.strides[0]), 0);
    let b = sl(&[10], &[2], &[5], None, Some(&[-1]));
    assert_eq!(b.out_shape, vec![0]);
    // Axes, negative axis, untouched axes keep the whole dim.
    let b = sl(&[4, 5, 6], &[1], &[3], Some(&[-2]), None);
    assert_eq!(b.out_shape, vec![4, 2, 6]);
    assert_eq!(b.start, vec![0, 1, 0]);
    assert_eq!(b.stop, vec![4, 3, 6]);
    // Step 3 with clamped end.
    let b = sl(&[10], &[1], &[100], None, Some(&[3]));
    assert_eq!(b.out_shape, vec![3]); // 1, 4, 7
    // Errors.
    assert!(slice_bounds(&[10], &[0], &[1], None, Some(&[0])).is_err());
    assert!(slice_bounds(&[10], &[0], &[1], Some(&[1]), None).is_err());
    assert!(slice_bounds(&[10], &[0, 1], &[1], None, None).is_err());
    // Cross-check against a brute-force reference for many cases.
    for n in 0..6i64 {
        for s in -8..8 {
            for e in -8..8 {
                for st in [-3, -2, -1, 1, 2, 3] {
                    let b = sl(&[n], &[s], &[e], None, Some(&[st]));
                    let expect = reference_slice_len(n, s, e, st);
                    assert_eq!(b.out_shape[0], expect, "n={n} s={s} e={e} st={st}");
                    assert_eq!(
                        mlx_len(n, b.start[0], b.stop[0], b.strides[0]),
                        expect,
                        "mlx n={n} s={s} e={e} st={st}"
                    );
                }
            }
        }
    }
}

/// ONNX reference: enumerate indices.
fn reference_slice_len(n: i64, s: i64, e: i64, st: i64) -> i64 {
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let (s, e) = if st > 0 {
        (norm(s).clamp(0, n), norm(e).clamp(0, n))
    } else {
        (norm(s).min(n - 1).max(0), norm(e).min(n - 1).max(-1))
    };
    if n == 0 {
        return 0;
    }
    let mut count = 0;
    let mut i = s;
    while (st > 0 && i < e) || (st < 0 && i > e) {
        count += 1;
        i += st;
    }
    count
}

#[test]
fn reduce_axes_resolution() {
    struct H(Vec<i64>);
    impl HostReader for H {
        fn ints(&mut self, _: Slot) -> Result<Vec<i64>, String> {
            Ok(self.0.clone())
        }
        fn floats(&mut self, _: Slot) -> Result<Vec<f64>, String> {
            unreachable!()
        }
    }
    assert_eq!(
        ReduceAxes::All.resolve(3, &mut NoHost).unwrap(),
        Some(vec![0, 1, 2])
    );
    assert_eq!(
        ReduceAxes::Static(vec![-1, 0])
            .resolve(3, &mut NoHost)
            .unwrap(),
        Some(vec![0, 2])
    );
    let d = |noop| ReduceAxes::Dynamic {
        axes: Slot(1),
        noop_with_empty_axes: noop,
    };
    assert_eq!(d(true).resolve(2, &mut H(vec![])).unwrap(), None);
    assert_eq!(
        d(false).resolve(2, &mut H(vec![])).unwrap(),
        Some(vec![0, 1])
    );
    assert_eq!(
        d(false).resolve(2, &mut H(vec![-1])).unwrap(),
        Some(vec![1])
    );
    assert!(d(false).resolve(2, &mut H(vec![2])).is_err());
}

#[test]
fn conv_same_padding() {
    // in 5, k 3, s 1: total 2 -> (1, 1).
    assert_eq!(same_pads(5, 3, 1, 1, true), (1, 1));
    // in 5, k 2, s 1: total 1 -> upper (0, 1), lower (1, 0).
    assert_eq!(same_pads(5, 2, 1, 1, true), (0, 1));
    assert_eq!(same_pads(5, 2, 1, 1, false), (1, 0));
    // in 7, k 3, s 2: out 4, total = 3*2+3-7 = 2.
    assert_eq!(same_pads(7, 3, 2, 1, true), (1, 1));
    // in 6, k 3, s 2: out 3, total = 2*2+3-6 = 1.
    assert_eq!(same_pads(6, 3, 2, 1, true), (0, 1));
    assert_eq!(same_pads(6, 3, 2, 1, false), (1, 0));
    // dilation 2: eff k 5, in 5, s 1: total 4.
    assert_eq!(same_pads(5, 3, 1, 2, true), (2, 2));
    let spec = ConvSpec {
        kernel: vec![3, 2],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        padding: AutoPad::SameLower,
        groups: 1,
        exact_integers: false,
    };
    let a = spec.resolve(&[1, 5, 5, 8]).unwrap();
    assert_eq!(a.padding_lo, vec![1, 1]);
    assert_eq!(a.padding_hi, vec![1, 0]);
    assert!(spec.resolve(&[5, 5, 8]).is_err());
}

fn pool(k: i64, s: i64, lo: i64, hi: i64, ceil: bool, include: bool) -> PoolSpec {
    PoolSpec {
        kernel: vec![k],
        strides: vec![s],
        dilations: vec![1],
        padding: AutoPad::Explicit {
            lo: vec![lo],
            hi: vec![hi],
        },
        ceil_mode: ceil,
        count_include_pad: include,
    }
}

#[test]
fn pool_geometry_and_divisors() {
    // in 5, k 2, s 2: floor -> 2, ceil -> 3 (tail 1).
    let g = pool(2, 2, 0, 0, false, false).geometry(&[5]).unwrap();
    assert_eq!((g.out, g.pad_hi), (vec![2], vec![0]));
    let p = pool(2, 2, 0, 0, true, false);
    let g = p.geometry(&[5]).unwrap();
    assert_eq!(
        (g.out.clone(), g.pad_hi.clone(), g.ceil_tail.clone()),
        (vec![3], vec![1], vec![1])
    );
    assert_eq!(
        p.divisor(&[1, 1, 5]).unwrap(),
        (vec![1, 1, 3], vec![2.0, 2.0, 1.0])
    );
    // The last window must start inside the input (+ left pad): in 4, k 2, s 2, pad 1/1,
    // ceil: span=4 -> ceil(4/2)+1 = 3; (3-1)*2 = 4 >= 4+1? no -> 3 windows.
    let g = pool(2, 2, 1, 1, true, true).geometry(&[4]).unwrap();
    assert_eq!(g.out, vec![3]);
    // in 3, k 2, s 2, pad 0/1 ceil: span = 2 -> 2 windows; (2-1)*2=2 >= 3? no.
    // count_include_pad: windows [0,1], [2,3(pad)] -> 2, 2.
    let p = pool(2, 2, 0, 1, true, true);
    assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![2.0, 2.0]);
    let p = pool(2, 2, 0, 1, true, false);
    assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![2.0, 1.0]);
    // Padding 1/1, k 3, s 1 over 3, exclude pad: [2, 3, 2].
    let p = pool(3, 1, 1, 1, false, false);
    assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![2.0, 3.0, 2.0]);
    let p = pool(3, 1, 1, 1, false, true);
    assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![3.0, 3.0, 3.0]);
    // ceil-mode window dropped when it would start in the right padding.
    // in 4, k 2, s 3, pad 0/1: padded 5, span 3 -> ceil(3/3)+1 = 2; (2-1)*3=3 >= 4? no.
    assert_eq!(
        pool(2, 3, 0, 1, true, true).geometry(&[4]).unwrap().out,
        vec![2]
    );
    // in 3, k 1, s 2, pad 0/1: padded 4, span 3 -> ceil(3/2)+1=3; (3-1)*2=4 >= 3 -> 2.
    assert_eq!(
        pool(1, 2, 0, 1, true, true).geometry(&[3]).unwrap().out,
        vec![2]
    );
}

#[test]
fn windows_as_strided() {
    let w = WindowSpec {
        kernel: vec![2, 2],
        strides: vec![2, 2],
        dilations: vec![1, 1],
    };
    let a = w.resolve(&[1, 3, 4, 6]).unwrap();
    assert_eq!(a.shape, vec![1, 3, 2, 3, 2, 2]);
    assert_eq!(a.strides, vec![72, 24, 12, 2, 6, 1]);
}

#[test]
fn nearest_resize_indices() {
    use CoordinateTransform::*;
    use NearestMode::*;
    // 2x upsample, asymmetric/floor: 0 0 1 1 2 2.
    assert_eq!(
        nearest_indices(3, 6, 2.0, Asymmetric, Floor),
        vec![0, 0, 1, 1, 2, 2]
    );
    // half_pixel + round_prefer_floor, 2x: x = (o+0.5)/2-0.5 -> -0.25, 0.25, 0.75, 1.25...
    assert_eq!(
        nearest_indices(2, 4, 2.0, HalfPixel, RoundPreferFloor),
        vec![0, 0, 1, 1]
    );
    // downsample by 2, asymmetric: 0 2.
    assert_eq!(
        nearest_indices(4, 2, 0.5, Asymmetric, RoundPreferFloor),
        vec![0, 2]
    );
    // align_corners 3 -> 5: 0, 0.5, 1, 1.5, 2 -> prefer ceil: 0 1 1 2 2.
    assert_eq!(
        nearest_indices(3, 5, 5.0 / 3.0, AlignCorners, RoundPreferCeil),
        vec![0, 1, 1, 2, 2]
    );
}

#[test]
fn split_and_shape_ranges() {
    assert_eq!(split_points(10, 3, None).unwrap(), vec![4, 8]);
    assert_eq!(split_points(9, 3, None).unwrap(), vec![3, 6]);
    assert_eq!(split_points(10, 2, Some(&[3, 7])).unwrap(), vec![3]);
    assert!(split_points(10, 2, Some(&[3, 6])).is_err());
    assert_eq!(shape_range(4, 0, None), 0..4);
    assert_eq!(shape_range(4, -1, None), 3..4);
    assert_eq!(shape_range(4, 1, Some(-1)), 1..3);
    assert_eq!(shape_range(4, 10, None), 4..4);
    assert_eq!(shape_range(4, 3, Some(1)), 3..3);
}
