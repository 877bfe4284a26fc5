#!/usr/bin/env bash
# The CUDA wheel on the device machine, after a first call that put
# .gpu/wheel/mlx-wheel.part-aa into /tmp/ortmlx-stage (`cargo xtask gpu-check --wheel` stages them):
# a virtual environment gets the pinned mlx-cuda-13 wheel and `cargo xtask package --cuda`'s
# wheel, with no LD_LIBRARY_PATH; the machine has no registry, so the packages the two wheels
# depend on (onnxruntime, numpy, NVIDIA's CUDA 13 wheels) come from the machine's own Python
# (a .pth file and an `nvidia` link stand in for pip installing them next to mlx). Then
# packaging/check_wheel.py --device gpu, and the GPU tests named in $@ through the wheel's EP.
set -uo pipefail
out="${OUT:-/tmp/ortmlx-out}"
mkdir -p "$out" /tmp/ortmlx-wheels
wheel=/tmp/ortmlx-wheels/mlx_cuda_13-0.32.2-py3-none-manylinux_2_35_x86_64.whl
cat /tmp/ortmlx-stage/mlx-wheel.part-aa .gpu/wheel/mlx-wheel.part-ab > "$wheel"
system_site=$(python3 -c "import site; print(site.getsitepackages()[0])")
python3 -m venv /tmp/ortmlx-venv
venv_site=$(/tmp/ortmlx-venv/bin/python -c "import site; print(site.getsitepackages()[0])")
echo "$system_site" > "$venv_site/machine_site.pth"
ln -sfn "$system_site/nvidia" "$venv_site/nvidia"
/tmp/ortmlx-venv/bin/python -m pip install -q --no-index --no-deps "$wheel" .gpu/wheel/onnxruntime_mlx_ep_cuda13-*.whl
echo "pip exit $?"
unset LD_LIBRARY_PATH MLX_PTX_CACHE_DIR
/tmp/ortmlx-venv/bin/python -I packaging/check_wheel.py --device gpu 2>&1 | tee "$out/check_wheel.txt" | tail -n 15
echo "check_wheel exit ${PIPESTATUS[0]}"
if [ $# -gt 0 ]; then
  export ORTMLX_EP_LIBRARY=$(/tmp/ortmlx-venv/bin/python -c "import onnxruntime_mlx_ep as m; print(m.get_library_path())")
  echo "EP library: $ORTMLX_EP_LIBRARY"
  ORTMLX_TEST_DEVICE=gpu /tmp/ortmlx-venv/bin/python -m pytest -q -p no:cacheprovider "$@" > "$out/wheel_pytest.log" 2>&1
  echo "pytest exit $?"
  tail -n 3 "$out/wheel_pytest.log"
fi
