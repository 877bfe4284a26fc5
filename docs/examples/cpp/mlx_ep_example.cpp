// Runs an ONNX model on the MLX execution provider through ONNX Runtime's C API (>= 1.23).
//
//   g++ -std=c++17 mlx_ep_example.cpp -I<onnxruntime include dir> <libonnxruntime.so.1> -o mlx_ep_example
//   ./mlx_ep_example <libonnxruntime_mlx_ep.so> <model.onnx>
//
// docs/usage.md ("Building it with the pip wheels") has the complete recipe with the pip
// wheels: where the header comes from, and how to link against the onnxruntime wheel's
// libonnxruntime.so.1.N.M.
//
// The model must take one float32 input; the example feeds ones of the input's shape (symbolic
// dimensions become 1) and prints the first output's first values. `session.disable_cpu_ep_fallback`
// makes session creation fail when any node would run on ONNX Runtime's CPU EP instead of MLX.
// `cargo xtask test` runs that recipe against each onnxruntime wheel of its matrix, and compiles
// and runs the example against each pinned onnxruntime with the EP built from source.

#include <onnxruntime_c_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static const OrtApi* ort = nullptr;

// Exits with ORT's message when a call fails.
static void check(OrtStatus* status, const char* what) {
  if (status != nullptr) {
    std::fprintf(stderr, "%s failed: %s\n", what, ort->GetErrorMessage(status));
    ort->ReleaseStatus(status);
    std::exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <libonnxruntime_mlx_ep.so> <model.onnx>\n", argv[0]);
    return 2;
  }
  const char* ep_library = argv[1];
  const char* model_path = argv[2];
  // Request the API version this example was compiled against (23 = ONNX Runtime 1.23); newer
  // runtimes serve older versions.
  ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  if (ort == nullptr) {
    std::fprintf(stderr, "this ONNX Runtime does not provide API version %d\n", ORT_API_VERSION);
    return 1;
  }

  OrtEnv* env = nullptr;
  check(ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "mlx_ep_example", &env), "CreateEnv");

  // 1. Register the plugin EP library (any registration name).
  check(ort->RegisterExecutionProviderLibrary(env, "mlx", ep_library), "RegisterExecutionProviderLibrary");

  // 2. Pick the MLX EP's devices.
  const OrtEpDevice* const* all_devices = nullptr;
  size_t num_all = 0;
  check(ort->GetEpDevices(env, &all_devices, &num_all), "GetEpDevices");
  std::vector<const OrtEpDevice*> devices;
  for (size_t i = 0; i < num_all; ++i) {
    if (std::strcmp(ort->EpDevice_EpName(all_devices[i]), "MLXExecutionProvider") == 0) {
      devices.push_back(all_devices[i]);
    }
  }
  if (devices.empty()) {
    std::fprintf(stderr, "no MLXExecutionProvider device: did the library load?\n");
    return 1;
  }

  // 3. Session options: the MLX EP with its options, and no silent CPU fallback.
  OrtSessionOptions* options = nullptr;
  check(ort->CreateSessionOptions(&options), "CreateSessionOptions");
  const char* keys[] = {"device", "compile"};
  const char* values[] = {"cpu", "auto"};
  check(ort->SessionOptionsAppendExecutionProvider_V2(options, env, devices.data(), devices.size(), keys, values, 2),
        "SessionOptionsAppendExecutionProvider_V2");
  check(ort->AddSessionConfigEntry(options, "session.disable_cpu_ep_fallback", "1"), "AddSessionConfigEntry");

  OrtSession* session = nullptr;
  check(ort->CreateSession(env, model_path, options, &session), "CreateSession");

  // 4. One input of ones, shaped like the model's first input.
  OrtAllocator* allocator = nullptr;
  check(ort->GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions");
  char* input_name = nullptr;
  char* output_name = nullptr;
  check(ort->SessionGetInputName(session, 0, allocator, &input_name), "SessionGetInputName");
  check(ort->SessionGetOutputName(session, 0, allocator, &output_name), "SessionGetOutputName");
  OrtTypeInfo* type_info = nullptr;
  check(ort->SessionGetInputTypeInfo(session, 0, &type_info), "SessionGetInputTypeInfo");
  const OrtTensorTypeAndShapeInfo* tensor_info = nullptr;
  check(ort->CastTypeInfoToTensorInfo(type_info, &tensor_info), "CastTypeInfoToTensorInfo");
  size_t rank = 0;
  check(ort->GetDimensionsCount(tensor_info, &rank), "GetDimensionsCount");
  std::vector<int64_t> dims(rank);
  check(ort->GetDimensions(tensor_info, dims.data(), rank), "GetDimensions");
  ort->ReleaseTypeInfo(type_info);
  size_t count = 1;
  for (auto& d : dims) {
    if (d < 1) d = 1;  // symbolic dimension
    count *= static_cast<size_t>(d);
  }
  std::vector<float> data(count, 1.0f);
  OrtMemoryInfo* memory = nullptr;
  check(ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &memory), "CreateCpuMemoryInfo");
  OrtValue* input = nullptr;
  check(ort->CreateTensorWithDataAsOrtValue(memory, data.data(), data.size() * sizeof(float), dims.data(), dims.size(),
                                            ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &input),
        "CreateTensorWithDataAsOrtValue");

  // 5. Run and print.
  OrtValue* output = nullptr;
  const char* input_names[] = {input_name};
  const char* output_names[] = {output_name};
  check(ort->Run(session, nullptr, input_names, &input, 1, output_names, 1, &output), "Run");
  float* out = nullptr;
  check(ort->GetTensorMutableData(output, reinterpret_cast<void**>(&out)), "GetTensorMutableData");
  OrtTensorTypeAndShapeInfo* out_info = nullptr;
  check(ort->GetTensorTypeAndShape(output, &out_info), "GetTensorTypeAndShape");
  size_t out_count = 0;
  check(ort->GetTensorShapeElementCount(out_info, &out_count), "GetTensorShapeElementCount");
  ort->ReleaseTensorTypeAndShapeInfo(out_info);
  std::printf("ran %s on MLXExecutionProvider: %s =", model_path, output_name);
  for (size_t i = 0; i < out_count && i < 8; ++i) std::printf(" %g", out[i]);
  std::printf("%s\n", out_count > 8 ? " ..." : "");

  // 6. Release everything; unregister the library only after its sessions are gone.
  ort->ReleaseValue(output);
  ort->ReleaseValue(input);
  ort->ReleaseMemoryInfo(memory);
  check(ort->AllocatorFree(allocator, input_name), "AllocatorFree");
  check(ort->AllocatorFree(allocator, output_name), "AllocatorFree");
  ort->ReleaseSession(session);
  ort->ReleaseSessionOptions(options);
  check(ort->UnregisterExecutionProviderLibrary(env, "mlx"), "UnregisterExecutionProviderLibrary");
  ort->ReleaseEnv(env);
  return 0;
}
