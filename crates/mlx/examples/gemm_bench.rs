//! Times a float32 GEMM through MLX and through the system's optimized BLAS in one run.
//!
//! `cargo xtask bench gemm` runs this; it writes a JSON result to the path given as the
//! first argument and prints `gemm: mlx/blas=<ratio>` (MLX's throughput over the BLAS's) last.

use std::time::Instant;

use mlx::{Array, Stream, ops};

const CBLAS_ROW_MAJOR: i32 = 101;
const CBLAS_NO_TRANS: i32 = 111;

type Sgemm = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    f32,
    *const f32,
    i32,
    *const f32,
    i32,
    f32,
    *mut f32,
    i32,
);

fn time(f: &mut impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds of each of two functions, timed alternately (so background load hits
/// both alike) after two warm-up calls each.
fn median_seconds_interleaved(runs: usize, mut f: impl FnMut(), mut g: impl FnMut()) -> (f64, f64) {
    for _ in 0..2 {
        f();
        g();
    }
    let (mut tf, mut tg) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        tf.push(time(&mut f));
        tg.push(time(&mut g));
    }
    (median(tf), median(tg))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/bench/gemm.json".into());
    let n = 1024usize;
    let a: Vec<f32> = (0..n * n)
        .map(|i| ((i % 97) as f32 - 48.0) / 97.0)
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i % 89) as f32 - 44.0) / 89.0)
        .collect();

    let blas_name =
        std::env::var("ORTMLX_BENCH_BLAS").unwrap_or_else(|_| "libopenblas.so.0".into());
    // SAFETY: loading a BLAS library runs its initialisers, which are benign.
    let lib = unsafe { libloading::Library::new(&blas_name) }.map_err(|e| {
        format!(
            "cannot load the system BLAS {blas_name} ({e}); install Debian's libopenblas0-pthread"
        )
    })?;
    // SAFETY: cblas_sgemm has this C signature.
    let sgemm: libloading::Symbol<Sgemm> = unsafe { lib.get(b"cblas_sgemm\0") }?;
    let mut c_blas = vec![0f32; n * n];
    let ni = n as i32;
    let blas = || unsafe {
        sgemm(
            CBLAS_ROW_MAJOR,
            CBLAS_NO_TRANS,
            CBLAS_NO_TRANS,
            ni,
            ni,
            ni,
            1.0,
            a.as_ptr(),
            ni,
            b.as_ptr(),
            ni,
            0.0,
            c_blas.as_mut_ptr(),
            ni,
        );
    };

    let s = Stream::default_cpu();
    let am = Array::from_slice(&a, &[ni, ni])?;
    let bm = Array::from_slice(&b, &[ni, ni])?;
    let mut c_mlx = None;
    let mlx_run = || {
        let c = ops::matmul(&am, &bm, &s).expect("matmul");
        c.eval().expect("eval");
        c_mlx = Some(c);
    };
    let (mlx_s, blas_s) = median_seconds_interleaved(15, mlx_run, blas);
    let c_mlx = c_mlx.expect("ran").to_vec::<f32>()?;
    let max_diff = c_mlx
        .iter()
        .zip(&c_blas)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    if max_diff > 1e-2 {
        return Err(format!("MLX and BLAS products differ by {max_diff}").into());
    }

    let flops = 2.0 * (n as f64).powi(3);
    let (mlx_gflops, blas_gflops) = (flops / mlx_s / 1e9, flops / blas_s / 1e9);
    let ratio = mlx_gflops / blas_gflops;
    let json = format!(
        "{{\n  \"m\": {n}, \"n\": {n}, \"k\": {n}, \"dtype\": \"float32\",\n  \"mlx_seconds\": {mlx_s:.6}, \"blas_seconds\": {blas_s:.6},\n  \"mlx_gflops\": {mlx_gflops:.2}, \"blas_gflops\": {blas_gflops:.2},\n  \"blas\": \"{blas_name}\", \"mlx_version\": \"{}\", \"max_abs_diff\": {max_diff:e},\n  \"ratio_mlx_over_blas\": {ratio:.3}\n}}\n",
        mlx::version()
    );
    if let Some(dir) = std::path::Path::new(&out_path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out_path, json)?;
    println!("mlx:  {:.3} ms  {mlx_gflops:.1} GFLOP/s", mlx_s * 1e3);
    println!(
        "blas: {:.3} ms  {blas_gflops:.1} GFLOP/s ({blas_name})",
        blas_s * 1e3
    );
    println!("results: {out_path}");
    println!("gemm: mlx/blas={ratio:.2}");
    Ok(())
}
