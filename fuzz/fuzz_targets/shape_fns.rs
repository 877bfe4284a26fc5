//! The shape arithmetic the runtime resolves from run-time values (`plan::step`'s pure
//! functions) on arbitrary integers: nothing may panic or overflow, and accepted results obey
//! their contracts (a reshape keeps the element count, a slice stays inside its input, ...).

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use plan::step;

#[derive(Arbitrary, Debug)]
struct Input {
    shape: Vec<i8>,
    big: Vec<i64>,
    a: Vec<i64>,
    b: Vec<i64>,
    c: Vec<i64>,
    d: Vec<i64>,
    axis: i64,
    flag: bool,
    parts: u8,
    scale: f32,
}

fn clip<T: Copy>(v: &[T], n: usize) -> Vec<T> {
    v.iter().take(n).copied().collect()
}

fuzz_target!(|input: Input| {
    let shape: Vec<i64> = clip(&input.shape, 6)
        .iter()
        .map(|&d| (d as i64).abs() % 9)
        .collect();
    let numel: i64 = shape.iter().product();
    let rank = shape.len();
    let (a, b, c, d) = (
        clip(&input.a, 6),
        clip(&input.b, 6),
        clip(&input.c, 6),
        clip(&input.d, 6),
    );
    let big = clip(&input.big, 6);

    let _ = step::normalize_axis(input.axis, rank);
    if let Ok(ax) = step::normalize_axes(&a, rank) {
        assert!(ax.iter().all(|&x| x < rank));
    }
    if let Ok(out) = step::broadcast_shapes(&shape, &big) {
        assert_eq!(out.len(), rank.max(big.len()));
    }
    let _ = step::broadcast_shapes(&big, &a);
    if let Ok(t) = step::reshape_target(&shape, &a, input.flag) {
        assert_eq!(
            t.iter().product::<i64>(),
            numel,
            "reshape {shape:?} by {a:?} -> {t:?}"
        );
    }
    let _ = step::reshape_target(&big, &b, input.flag);
    if let Ok(f) = step::flatten_shape(&shape, input.axis) {
        assert_eq!(f.len(), 2);
        assert_eq!(f[0] * f[1], numel);
    }
    if let Ok(s) = step::squeeze_shape(&shape, if input.flag { Some(&a[..]) } else { None }) {
        assert_eq!(s.iter().product::<i64>(), numel);
    }
    if let Ok(u) = step::unsqueeze_shape(&shape, &a) {
        assert_eq!(u.len(), rank + a.len());
    }
    let _ = step::expand_shape(&shape, &big);
    let _ = step::full_shape(&big);
    let r = step::shape_range(rank, input.axis, b.first().copied());
    assert!(
        r.start <= r.end && r.end <= rank,
        "shape_range {r:?} for rank {rank}"
    );
    let axes = if input.flag { Some(&c[..]) } else { None };
    let steps = if input.parts.is_multiple_of(2) {
        Some(&d[..])
    } else {
        None
    };
    if let Ok(sb) = step::slice_bounds(&shape, &a, &b, axes, steps) {
        for (k, &dim) in shape.iter().enumerate() {
            let len = sb.out_shape[k];
            assert!(len >= 0 && len <= dim, "slice of {shape:?}: {sb:?}");
        }
    }
    for (i, &k) in big.iter().enumerate() {
        let st = a.get(i).copied().unwrap_or(1);
        let dl = b.get(i).copied().unwrap_or(1);
        let (lo, hi) = step::same_pads(
            (k % 1000).abs(),
            (st % 17).abs().max(1),
            (dl % 5).abs().max(1),
            (st % 3).abs().max(1),
            input.flag,
        );
        assert!(lo >= 0 && hi >= 0);
    }
    let parts = (input.parts % 8) as usize;
    if let Some(&dim) = shape.first()
        && let Ok(points) =
            step::split_points(dim, parts, if input.flag { Some(&a[..]) } else { None })
    {
        assert!(
            points.windows(2).all(|w| w[0] <= w[1]),
            "split points {points:?}"
        );
    }
    if let (Some(&i), Some(&o)) = (shape.first(), shape.last()) {
        for ct in [
            step::CoordinateTransform::HalfPixel,
            step::CoordinateTransform::Asymmetric,
            step::CoordinateTransform::AlignCorners,
            step::CoordinateTransform::PytorchHalfPixel,
            step::CoordinateTransform::HalfPixelSymmetric,
            step::CoordinateTransform::TfHalfPixelForNearest,
        ] {
            for mode in [
                step::NearestMode::RoundPreferFloor,
                step::NearestMode::RoundPreferCeil,
                step::NearestMode::Floor,
                step::NearestMode::Ceil,
            ] {
                let idx = step::nearest_indices(i, o, input.scale, ct, mode);
                assert!(
                    idx.iter()
                        .all(|&x| (x as i64) >= 0 && (x as i64) < i.max(1)),
                    "nearest {i} -> {o} (scale {}): {idx:?}",
                    input.scale
                );
            }
        }
    }
});
