#!/usr/bin/env bash
# Device calls of `cargo xtask gpu-check` after device_stage.sh, on the same warm machine:
#   bash tests/gpu/device_run.sh core         the exit-abort reproducer, the cold and warm time to
#                                             first output, and the end-to-end suites on MLX's
#                                             GPU stream (with their exit status)
#   bash tests/gpu/device_run.sh reliability  hostile, threading and leak suites on the GPU, 20
#                                             GPU test processes in a row (exit status of each)
#   bash tests/gpu/device_run.sh bench        the GPU benchmarks
#   bash tests/gpu/device_run.sh perf         `bench overhead --device gpu` (EP vs raw MLX, per run and
#                                             per node) and the GQA decoders of `bench llm` on the GPU
#   bash tests/gpu/device_run.sh small        `bench small --device gpu`: the small models of
#                                             tests/python/small_graphs.py on ORT's CPU EP, with the
#                                             MLX EP on the GPU and as their plans run directly
#                                             (small_bench); small_gpu.json / small_gpu.md
#   bash tests/gpu/device_run.sh memory       the device-memory suite on the GPU stream, then the GQA
#                                             decoders with and without IOBinding
#   bash tests/gpu/device_run.sh profile      the CUDA kernels of one decode step (tests/gpu/
#                                             profile_decode.py: PyTorch's profiler, CUPTI)
#   bash tests/gpu/device_run.sh compiled     the LLM, model and contrib suites on the GPU stream with
#                                             compiling on (the GPU default: decode closures)
# The first call on a machine (any phase) assembles the CUDA build of MLX from the staged parts.
# Results go to $OUT. The kernel cache is the EP's default (under ~/.cache), as a user gets it.
set -uo pipefail
phase="${1:-core}"
stage=/tmp/ortmlx-stage
out="${OUT:-/tmp/ortmlx-out}"
mkdir -p "$out"
root=/tmp/ortmlx-site
lib="$root/ortmlx_gpu/lib"
if [ ! -f "$lib/libmlx.so" ]; then
  cp .gpu/libmlx.so.xz.part-ab "$stage/"
  site=$(python3 -c "import site; print(site.getsitepackages()[0])")
  # libmlx finds the CUDA libraries as MLX's own wheel does: $ORIGIN/../../nvidia/<package>/lib,
  # i.e. next to the pip CUDA packages of this Python, and its BLAS in $ORIGIN/../../mlx_cuda_13.libs.
  mkdir -p "$lib"
  ln -sfn "$site/nvidia" "$root/nvidia"
  cat "$stage"/libmlx.so.xz.part-* | xz -d -T0 > "$lib/libmlx.so"
  tar -xJf .gpu/bundle.tar.xz -C "$root"
  ldd "$lib/libmlx.so" | grep -E "not found|cudnn|cublas|nvrtc" | tee "$out/ldd.txt"
fi
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ORTMLX_EP_LIBRARY="$lib/libonnxruntime_mlx_ep.so"
unset MLX_PTX_CACHE_DIR
py="python3 -m pytest -q -s -p no:cacheprovider"

case "$phase" in
core)
  echo "== MLX exit abort reproducer (no ORT; stream modes: 0 main thread default, 1 thread-unsafe, 2 parked worker thread)"
  if gcc -O1 -pthread -o /tmp/mlx_exit_abort tests/gpu/mlx_exit_abort.c -I"$root/ortmlx_gpu/include" -L"$lib" -lmlxc -Wl,-rpath,"$lib"; then
    for mode in 0 1 2; do
      for op in reshape abs; do
        codes=""
        for run in 1 2; do
          /tmp/mlx_exit_abort "$mode" "$op" 3 > /tmp/abort.log 2>&1
          codes="$codes $?"
        done
        echo "mlx_exit_abort mode $mode $op: exit codes$codes ($(tail -n 1 /tmp/abort.log))"
      done
    done
  fi

  echo "== time to first output, a fresh kernel cache: cold process, then warm process"
  for run in cold warm; do
    ORTMLX_KERNEL_CACHE_DIR=/tmp/ortmlx-first-output-cache timeout 200 python3 tests/gpu/first_output.py gpu 2>> "$out/first_output.err" | sed "s/^/$run: /" | tee -a "$out/first_output.txt"
    echo "$run exit ${PIPESTATUS[0]}"
  done

  echo "== end-to-end suites on the GPU stream (ORT $(python3 -c 'import onnxruntime; print(onnxruntime.__version__)'))"
  ORTMLX_TEST_DEVICE=gpu ORTMLX_LOG=info ORTMLX_DISABLE_COMPILE="${ORTMLX_DISABLE_COMPILE:-1}" timeout 300 $py tests/python/test_ops.py tests/python/test_models.py \
    tests/python/test_gpu.py tests/python/test_contrib.py tests/python/test_ops_more.py tests/python/test_kernel_cache.py \
    2> "$out/ep.log" > "$out/pytest.log"
  echo "pytest exit $?"
  tail -n 4 "$out/pytest.log"
  echo "fused nodes compiled for the GPU stream: $(grep -c 'on the Gpu stream' "$out/ep.log")"
  echo "fused nodes compiled for the CPU stream: $(grep -c 'on the Cpu stream' "$out/ep.log")"
  grep -m1 "CUDA kernel cache" "$out/ep.log"
  ;;
reliability)
  echo "== hostile, threading and leak suites on the GPU stream"
  ORTMLX_TEST_DEVICE=gpu ORTMLX_LEAK_GPU_MEMORY=1 ORTMLX_VALGRIND_CYCLES=0 timeout 420 $py -rA \
    tests/python/test_hostile.py tests/python/test_threads.py tests/python/test_leaks.py tests/python/test_llm.py \
    > "$out/reliability.log" 2> "$out/reliability.err"
  echo "pytest exit $?"
  grep -E "RSS over|GPU memory over|passed|failed" "$out/reliability.log" | tail -n 6
  echo "== 20 GPU test processes in a row"
  codes=""
  for run in $(seq 20); do
    ORTMLX_TEST_DEVICE=gpu timeout 60 $py tests/python/test_gpu.py tests/python/test_options.py > /tmp/short.log 2>&1
    codes="$codes $?"
  done
  echo "exit codes:$codes"
  tail -n 2 /tmp/short.log
  ;;
bench)
  echo "== benchmarks"
  timeout 500 python3 tests/gpu/bench_gpu.py "$out/gpu_bench.json" "${ORTMLX_GPU_BENCH:-encoder,llama-tiny,llama-large}" 2> "$out/bench.err"
  echo "bench exit $?"
  tail -n 5 "$out/bench.err"
  ;;
memory)
  echo "== device memory (allocator, data transfer, IOBinding) on the GPU stream"
  ORTMLX_TEST_DEVICE=gpu timeout 200 $py -rf tests/python/test_device_memory.py -k "${ORTMLX_MEMORY_TESTS:-decode or dtype or stress or outlive}" \
    > "$out/memory.log" 2> "$out/memory.err"
  echo "pytest exit $?"
  tail -n 6 "$out/memory.log"
  echo "== GQA decoders on the GPU, plain runs and IOBinding"
  ORTMLX_TRACE=/tmp/ortmlx-llm-trace.json timeout 330 python3 tests/python/llm.py --bench --ep-option device=gpu \
    --models "${ORTMLX_LLM_MODELS:-tiny,larger}" --repeats 2 --steps 48 --out "$out/llm_gpu.json" 2> "$out/llm.err" | tee "$out/llm.txt"
  echo "llm exit ${PIPESTATUS[0]}"
  tail -n 3 "$out/llm.err"
  ;;
compiled)
  echo "== LLM, model and contrib suites on the GPU stream, compile on (ORT $(python3 -c 'import onnxruntime; print(onnxruntime.__version__)'))"
  ORTMLX_TEST_DEVICE=gpu timeout 420 $py -rf tests/python/test_llm.py tests/python/test_models.py tests/python/test_contrib.py \
    tests/python/test_gpu.py > "$out/compiled.log" 2> "$out/compiled.err"
  echo "pytest exit $?"
  tail -n 8 "$out/compiled.log"
  ;;
perf)
  echo "== bench overhead --device gpu (EP vs the same MLX calls written directly)"
  ldd "$root/ortmlx_gpu/bin/overhead_bench" | grep -E "not found" | tee -a "$out/ldd.txt"
  MLX_PTX_CACHE_DIR="${MLX_PTX_CACHE_DIR:-$HOME/.cache/onnxruntime-mlx-ep/mlx-0.32.2/ptx}" timeout 300 "$root/ortmlx_gpu/bin/overhead_bench" --device gpu --budget-ms "${ORTMLX_BUDGET_MS:-1500}" --out "$out/overhead_gpu.json" 2>&1 | tee "$out/overhead_gpu.txt"
  echo "overhead exit ${PIPESTATUS[0]}"
  echo "== GQA decoders (tests/python/llm.py) on the GPU, with the EP's run counters"
  ORTMLX_TRACE=/tmp/ortmlx-llm-trace.json timeout 400 python3 tests/python/llm.py --bench --ep-option device=gpu \
    --models "${ORTMLX_LLM_MODELS:-tiny,larger,larger-int4}" --repeats 2 --out "$out/llm_gpu.json" 2> "$out/llm.err" | tee "$out/llm.txt"
  echo "llm exit ${PIPESTATUS[0]}"
  tail -n 5 "$out/llm.err"
  ;;
small)
  echo "== bench small --device gpu (ORT CPU EP, ORT + MLX EP on the GPU, the same plans through the runtime directly)"
  ldd "$root/ortmlx_gpu/bin/small_bench" | grep -E "not found" | tee -a "$out/ldd.txt"
  models=/tmp/ortmlx-small-models
  timeout 120 python3 tests/python/small_bench.py --prepare --dir "$models" 2>&1 | tee "$out/small_gpu.txt"
  echo "prepare exit ${PIPESTATUS[0]}"
  MLX_PTX_CACHE_DIR="${MLX_PTX_CACHE_DIR:-$HOME/.cache/onnxruntime-mlx-ep/mlx-0.32.2/ptx}" timeout 300 "$root/ortmlx_gpu/bin/small_bench" --device gpu --dir "$models" \
    --budget-ms "${ORTMLX_BUDGET_MS:-1500}" --out "$out/small_gpu.json" 2>&1 | tee -a "$out/small_gpu.txt"
  echo "small_bench exit ${PIPESTATUS[0]}"
  timeout 300 python3 tests/python/small_bench.py --json "$out/small_gpu.json" --budget-ms "${ORTMLX_BUDGET_MS:-1500}" \
    --markdown "$out/small_gpu.md" 2> "$out/small_gpu.err" | tee -a "$out/small_gpu.txt"
  echo "ort side exit ${PIPESTATUS[0]}"
  tail -n 3 "$out/small_gpu.err"
  ;;
profile)
  for m in ${ORTMLX_PROFILE_MODELS:-"tiny gqa" "tiny torch"}; do
    set -- $m
    echo "== CUDA kernels of a decode step: $1, $2"
    timeout 240 python3 tests/gpu/profile_decode.py --model "$1" --style "$2" --steps 16 2> "$out/profile_$1_$2.err" | tee "$out/profile_$1_$2.txt"
    echo "profile exit ${PIPESTATUS[0]}"
    tail -n 3 "$out/profile_$1_$2.err"
  done
  ;;
esac
