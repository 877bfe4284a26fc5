#!/usr/bin/env bash
# First of the two device calls of `cargo xtask gpu-check`: keeps the first half of the CUDA
# libmlx outside the work tree (the machine stays warm for the second call) and reports the
# machine. Run from the repository root on the device machine.
set -euo pipefail
stage=/tmp/ortmlx-stage
mkdir -p "$stage"
cp .gpu/libmlx.so.xz.part-aa "$stage/"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import onnxruntime, onnx, numpy, torch; print('onnxruntime', onnxruntime.__version__, 'onnx', onnx.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
ldd --version 2>&1 | sed -n 1p
echo "staged: $(ls -la "$stage")"
