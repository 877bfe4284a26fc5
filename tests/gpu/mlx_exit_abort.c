/* Reproduces an abort at process exit with MLX 0.32.2's CUDA backend, without ONNX Runtime or
 * the EP: an array made from host data, reshaped (or abs'd) on a GPU stream, evaluated, read
 * back and freed; then `main` returns and the process aborts in the CUDA runtime's exit handler
 * ("malloc_consolidate(): invalid chunk size") or in MLX's stream teardown ("... driver shutting
 * down"), depending on the run. Built and run by tests/gpu/device_run.sh against the staged
 * libmlxc/libmlx.
 *
 * usage: mlx_exit_abort <thread-unsafe stream: 0|1> <reshape|abs> <iterations>
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/c/mlx.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s <0|1> <reshape|abs> <iterations>\n", argv[0]);
    return 2;
  }
  int thread_unsafe = atoi(argv[1]);
  const char* op = argv[2];
  int iterations = atoi(argv[3]);
  mlx_device gpu = mlx_device_new_type(MLX_GPU, 0);
  mlx_stream s = thread_unsafe ? mlx_stream_new_thread_unsafe(gpu)
                               : mlx_default_gpu_stream_new();
  float host[120];
  for (int i = 0; i < 120; i++) host[i] = (float)i;
  int shape[4] = {2, 3, 4, 5};
  int flat[2] = {2, 60};
  for (int it = 0; it < iterations; it++) {
    mlx_array x = mlx_array_new_data(host, shape, 4, MLX_FLOAT32);
    mlx_array y = mlx_array_new();
    if (strcmp(op, "reshape") == 0) {
      mlx_reshape(&y, x, flat, 2, s);
    } else {
      mlx_abs(&y, x, s);
    }
    mlx_array_eval(y);
    float out[120];
    memcpy(out, mlx_array_data_float32(y), sizeof out);
    if (out[119] != 119.0f) {
      printf("wrong value %f\n", out[119]);
      return 1;
    }
    mlx_array_free(y);
    mlx_array_free(x);
  }
  mlx_stream_free(s);
  mlx_device_free(gpu);
  printf("%s, thread-unsafe stream %d: %d iteration(s) correct; exiting\n", op, thread_unsafe,
         iterations);
  fflush(stdout);
  return 0;
}
