/* Reproduces an abort at process exit with MLX 0.32.2's CUDA backend, without ONNX Runtime or
 * the EP: an array made from host data, reshaped (or abs'd) on a GPU stream, evaluated, read
 * back and freed; then `main` returns and the process aborts in the CUDA runtime's exit handler
 * ("malloc_consolidate(): invalid chunk size") or in MLX's stream teardown ("... driver shutting
 * down"), depending on the run. Built and run by tests/gpu/device_run.sh against the staged
 * libmlxc/libmlx.
 *
 * Stream modes: 0 the main thread's default GPU stream; 1 a thread-unsafe stream (what the EP
 * used before its GPU lanes got worker threads); 2 a stream made by a worker thread that does
 * the work and then stays parked until the process exits (what the EP's GPU lanes do now).
 *
 * usage: mlx_exit_abort <stream mode: 0|1|2> <reshape|abs> <iterations>
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlx/c/mlx.h"

static int work(int mode, const char* op, int iterations);

struct job {
  const char* op;
  int iterations;
  int result;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int done;
};

static void* worker(void* arg) {
  struct job* job = arg;
  int result = work(2, job->op, job->iterations);
  pthread_mutex_lock(&job->mutex);
  job->result = result;
  job->done = 1;
  pthread_cond_signal(&job->cond);
  pthread_mutex_unlock(&job->mutex);
  for (;;) pause();  /* parked: the thread, and its MLX state, outlive main */
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s <0|1|2> <reshape|abs> <iterations>\n", argv[0]);
    return 2;
  }
  int mode = atoi(argv[1]);
  const char* op = argv[2];
  int iterations = atoi(argv[3]);
  int result;
  if (mode == 2) {
    static struct job job = {.mutex = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    job.op = op;
    job.iterations = iterations;
    pthread_t thread;
    pthread_create(&thread, NULL, worker, &job);
    pthread_detach(thread);
    pthread_mutex_lock(&job.mutex);
    while (!job.done) pthread_cond_wait(&job.cond, &job.mutex);
    pthread_mutex_unlock(&job.mutex);
    result = job.result;
  } else {
    result = work(mode, op, iterations);
  }
  if (result == 0) {
    printf("%s, stream mode %d: %d iteration(s) correct; exiting\n", op, mode, iterations);
  }
  fflush(stdout);
  return result;
}

static int work(int mode, const char* op, int iterations) {
  mlx_device gpu = mlx_device_new_type(MLX_GPU, 0);
  mlx_stream s = mode == 1   ? mlx_stream_new_thread_unsafe(gpu)
                 : mode == 2 ? mlx_stream_new_device(gpu)
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
  return 0;
}
