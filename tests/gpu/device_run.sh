#!/usr/bin/env bash
# Second device call of `cargo xtask gpu-check`: assembles the CUDA build of MLX next to the EP,
# runs the end-to-end tests on MLX's GPU stream, then the GPU benchmarks. Results go to $OUT.
set -uo pipefail
stage=/tmp/ortmlx-stage
out="${OUT:-/tmp/ortmlx-out}"
mkdir -p "$out"
cp .gpu/libmlx.so.xz.part-ab "$stage/"
site=$(python3 -c "import site; print(site.getsitepackages()[0])")
# libmlx finds the CUDA libraries as MLX's own wheel does: $ORIGIN/../../nvidia/<package>/lib,
# i.e. next to the pip CUDA packages of this Python, and its BLAS in $ORIGIN/../../mlx_cuda_13.libs.
root=/tmp/ortmlx-site
lib="$root/ortmlx_gpu/lib"
mkdir -p "$lib"
ln -sfn "$site/nvidia" "$root/nvidia"
cat "$stage"/libmlx.so.xz.part-* | xz -d -T0 > "$lib/libmlx.so"
tar -xJf .gpu/bundle.tar.xz -C "$root"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ORTMLX_EP_LIBRARY="$lib/libonnxruntime_mlx_ep.so"
export MLX_PTX_CACHE_DIR=/tmp/mlx-ptx-cache
ldd "$lib/libmlx.so" | grep -E "not found|cudnn|cublas|nvrtc" | tee "$out/ldd.txt"

echo "== end-to-end tests on the GPU stream (ORT $(python3 -c 'import onnxruntime; print(onnxruntime.__version__)'))"
ORTMLX_TEST_DEVICE=gpu ORTMLX_LOG=info ORTMLX_DISABLE_COMPILE="${ORTMLX_DISABLE_COMPILE:-1}" \
  timeout 330 python3 -m pytest -q -s -p no:cacheprovider tests/python/test_ops.py tests/python/test_models.py tests/python/test_gpu.py tests/python/test_contrib.py tests/python/test_ops_more.py \
  2> "$out/ep.log" > "$out/pytest.log"
echo "pytest exit $?"
tail -n 15 "$out/pytest.log"
echo "fused nodes compiled for the GPU stream: $(grep -c 'on the Gpu stream' "$out/ep.log")"
echo "fused nodes compiled for the CPU stream: $(grep -c 'on the Cpu stream' "$out/ep.log")"

echo "== benchmarks"
timeout 230 python3 tests/gpu/bench_gpu.py "$out/gpu_bench.json" "${ORTMLX_GPU_BENCH:-encoder,llama-tiny,llama-large}" 2> "$out/bench.err"
echo "bench exit $?"
tail -n 5 "$out/bench.err"

echo "== MLX exit abort reproducer (no ORT involved; see docs/usage.md)"
if gcc -O1 -o /tmp/mlx_exit_abort tests/gpu/mlx_exit_abort.c -I"$root/ortmlx_gpu/include" -L"$lib" -lmlxc -Wl,-rpath,"$lib"; then
  for args in "0 reshape 1" "0 abs 1" "1 reshape 1" "1 abs 1"; do
    /tmp/mlx_exit_abort $args > /tmp/abort.log 2>&1
    echo "mlx_exit_abort $args: exit $? $(tail -n 1 /tmp/abort.log)"
  done
fi
