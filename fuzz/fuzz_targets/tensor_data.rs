//! Byte-level tensor parsing: `onnx_ir::TensorData::new` on arbitrary element types, dims and
//! bytes, then its readers (`numel`, `to_i64_vec`, `to_f64_vec`) and the half-precision
//! encoders of `plan`. Nothing may panic; an accepted tensor's readers see exactly `numel`
//! values.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use onnx_ir::{DataType, TensorData};

#[derive(Arbitrary, Debug)]
struct Input {
    dtype: i32,
    dims: Vec<i64>,
    small_dims: Vec<u8>,
    bytes: Vec<u8>,
    floats: Vec<f32>,
}

fn check(t: &TensorData) {
    let n = t.numel();
    if let Some(v) = t.to_i64_vec() {
        assert_eq!(v.len() as u64, n, "to_i64_vec of {t:?}");
    }
    if let Some(v) = t.to_f64_vec() {
        assert_eq!(v.len() as u64, n, "to_f64_vec of {t:?}");
    }
    let _ = format!("{t:?}");
}

fuzz_target!(|input: Input| {
    let dtype = DataType::from_onnx(input.dtype);
    if let Some(dt) = dtype {
        // Arbitrary dims (most are refused: negative, or a byte count that disagrees).
        if let Ok(t) = TensorData::new(
            dt,
            input.dims.iter().take(8).copied().collect(),
            input.bytes.clone(),
        ) {
            check(&t);
        }
        // Small dims with bytes cut or padded to the right length.
        let dims: Vec<i64> = input
            .small_dims
            .iter()
            .take(5)
            .map(|&d| (d % 7) as i64)
            .collect();
        if let Some(size) = dt.size_in_bytes() {
            let numel: usize = dims.iter().map(|&d| d as usize).product();
            let mut bytes = input.bytes.clone();
            bytes.resize(numel * size, 0xA5);
            let t = TensorData::new(dt, dims.clone(), bytes).expect("consistent tensor refused");
            check(&t);
            let _ = dt.to_onnx();
        }
    }
    for &f in input.floats.iter().take(64) {
        let h = plan::f32_to_f16_bits(f);
        let b = plan::f32_to_bf16_bits(f);
        if f.is_nan() {
            assert!(
                h & 0x7c00 == 0x7c00 && h & 0x03ff != 0,
                "f16 NaN lost: {f} -> {h:#x}"
            );
            assert!(
                b & 0x7f80 == 0x7f80 && b & 0x007f != 0,
                "bf16 NaN lost: {f} -> {b:#x}"
            );
        }
        // Decoding through TensorData must give a value of the same sign and class.
        let t = TensorData::new(DataType::Float16, vec![], h.to_le_bytes().to_vec()).unwrap();
        let back = t.to_f64_vec().unwrap()[0];
        if f.is_finite() && f.abs() < 65504.0 {
            assert!(
                (back - f as f64).abs() <= (f.abs() as f64) * 1e-3 + 6e-8,
                "f16 {f} -> {back}"
            );
        }
    }
});
