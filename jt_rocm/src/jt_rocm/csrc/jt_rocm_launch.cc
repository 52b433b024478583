// jt-rocm's XLA FFI handler: launches Triton-compiled HSACO code objects on XLA's ROCm stream.
//
// Built at first use against the XLA FFI headers of the installed jaxlib (jax.ffi.include_dir()). The HIP runtime
// is loaded with dlopen -- preferably the copy jaxlib's ROCm plugin already loaded, so that XLA's streams and ours
// belong to one runtime -- and the few types and entry points used are declared below, with the values of the HIP
// API, so neither ROCm nor its headers are needed to build this file.
//
// The handler itself (state, attributes, parameter layout, autotuning, the initialize/execute stages) is shared
// with jt-cuda and lives in jt_core's jt_launch_common.h; this file is the HIP driver it runs on. HIP has no
// user-visible contexts worth keying on, so a "context" here is a device ordinal: the stream's device, made
// current while modules are loaded into it. The code object comes from the call's attributes as bytes
// (hipModuleLoadData), never from a file.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "jt_launch_common.h"

namespace ffi = xla::ffi;

// ---- HIP runtime API declarations (values as in hip_runtime_api.h) --------------------------------------------

extern "C" {
typedef int hipError_t;  // an enum of int size in HIP
typedef struct ihipStream_t* hipStream_t;
typedef struct ihipModule_t* hipModule_t;
typedef struct ihipModuleSymbol_t* hipFunction_t;
typedef struct ihipEvent_t* hipEvent_t;
typedef void* hipDeviceptr_t;

enum {
  JT_HIP_SUCCESS = 0,
  JT_HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 74,
  JT_HIP_STREAM_CAPTURE_STATUS_NONE = 0,
};
}  // extern "C"

namespace {

// The HIP runtime libraries to look for, newest first; a bare soname last so that LD_LIBRARY_PATH can pick one.
const char* const kHipLibraries[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so",
                                     nullptr};

struct HipDriver {
  using Result = hipError_t;
  using Stream = hipStream_t;
  using Context = int;  // the device ordinal
  using Function = hipFunction_t;
  using Event = hipEvent_t;
  using State = jt_launch::KernelState<HipDriver>;

  static constexpr Result kSuccess = JT_HIP_SUCCESS;
  static constexpr const char* kLibrary = "jt_rocm";
  static constexpr const char* kGraphCapture = "HIP graph capture";
  static constexpr const char* kMemsetD8Async = "hipMemsetD8Async";
  static constexpr const char* kStreamSynchronize = "hipStreamSynchronize";
  static constexpr const char* kEventCreate = "hipEventCreate";
  static constexpr const char* kEventRecord = "hipEventRecord";
  static constexpr const char* kEventElapsedTime = "hipEventElapsedTime";

  hipError_t (*hipInit)(unsigned int);
  hipError_t (*hipGetDeviceCount)(int*);
  hipError_t (*hipGetDevice)(int*);
  hipError_t (*hipSetDevice)(int);
  hipError_t (*hipDeviceGetAttribute)(int*, int, int);
  const char* (*hipGetErrorName)(hipError_t);
  const char* (*hipGetErrorString)(hipError_t);
  int (*hipGetStreamDeviceId)(hipStream_t);  // optional: older runtimes lack it
  hipError_t (*hipStreamIsCapturing)(hipStream_t, int*);
  hipError_t (*hipStreamSynchronize)(hipStream_t);
  hipError_t (*hipModuleLoadData)(hipModule_t*, const void*);
  hipError_t (*hipModuleGetFunction)(hipFunction_t*, hipModule_t, const char*);
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, hipStream_t, void**, void**);
  hipError_t (*hipModuleLaunchCooperativeKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                 unsigned, unsigned, hipStream_t, void**);  // optional
  hipError_t (*hipMemsetD8Async)(hipDeviceptr_t, unsigned char, size_t, hipStream_t);
  hipError_t (*hipMemcpyDtoHAsync)(void*, hipDeviceptr_t, size_t, hipStream_t);
  hipError_t (*hipMemcpyHtoDAsync)(hipDeviceptr_t, const void*, size_t, hipStream_t);
  hipError_t (*hipEventCreate)(hipEvent_t*);
  hipError_t (*hipEventRecord)(hipEvent_t, hipStream_t);
  hipError_t (*hipEventSynchronize)(hipEvent_t);
  hipError_t (*hipEventElapsedTime)(float*, hipEvent_t, hipEvent_t);
  hipError_t (*hipEventDestroy)(hipEvent_t);
  std::string error;  // why loading failed; empty when every required entry point was found

  static const HipDriver* Get();

  std::string ErrorText(hipError_t result) const {
    const char* name = hipGetErrorName ? hipGetErrorName(result) : nullptr;
    const char* text = hipGetErrorString ? hipGetErrorString(result) : nullptr;
    return std::string(name ? name : "HIP error") + " (" + std::to_string(result) + "): " + (text ? text : "?");
  }

  bool Capturing(hipStream_t stream) const {
    int status = JT_HIP_STREAM_CAPTURE_STATUS_NONE;
    if (hipStreamIsCapturing(stream, &status) != JT_HIP_SUCCESS) return false;
    return status != JT_HIP_STREAM_CAPTURE_STATUS_NONE;
  }

  ffi::ErrorOr<int> CurrentContext(const State& state, hipStream_t stream) const;
  std::vector<int> DeviceContexts() const;
  ffi::Error LoadFunctions(const State& state, int device, std::vector<hipFunction_t>* functions) const;
  ffi::Error LaunchKernel(const State& state, const jt_launch::KernelConfig& config, hipFunction_t function,
                          hipStream_t stream, void** params) const;

  hipError_t MemsetD8Async(void* pointer, size_t bytes, hipStream_t stream) const {
    return hipMemsetD8Async(pointer, 0, bytes, stream);
  }
  hipError_t FillD8Async(void* pointer, unsigned char value, size_t bytes, hipStream_t stream) const {
    return hipMemsetD8Async(pointer, value, bytes, stream);
  }
  hipError_t CopyToHostAsync(void* host, const void* device, size_t bytes, hipStream_t stream) const {
    return hipMemcpyDtoHAsync(host, const_cast<void*>(device), bytes, stream);
  }
  hipError_t CopyToDeviceAsync(void* device, const void* host, size_t bytes, hipStream_t stream) const {
    return hipMemcpyHtoDAsync(device, host, bytes, stream);
  }
  hipError_t StreamSynchronize(hipStream_t stream) const { return hipStreamSynchronize(stream); }
  hipError_t EventCreate(hipEvent_t* event) const { return hipEventCreate(event); }
  hipError_t EventRecord(hipEvent_t event, hipStream_t stream) const { return hipEventRecord(event, stream); }
  hipError_t EventSynchronize(hipEvent_t event) const { return hipEventSynchronize(event); }
  hipError_t EventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) const {
    return hipEventElapsedTime(ms, start, stop);
  }
  hipError_t EventDestroy(hipEvent_t event) const { return hipEventDestroy(event); }
};

#define JT_RESOLVE(field, ...) JT_LAUNCH_RESOLVE("libamdhip64", field, __VA_ARGS__)

// A HIP runtime already in the process (jaxlib's ROCm plugin loads one) is used as is; otherwise the newest found.
void* OpenHipRuntime(std::string* error) {
  for (const char* const* name = kHipLibraries; *name != nullptr; ++name) {
    if (void* handle = dlopen(*name, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) return handle;
  }
  for (const char* const* name = kHipLibraries; *name != nullptr; ++name) {
    if (void* handle = dlopen(*name, RTLD_NOW | RTLD_GLOBAL)) return handle;
  }
  const char* why = dlerror();
  *error = std::string("cannot load the HIP runtime (libamdhip64.so): ") + (why ? why : "unknown error");
  return nullptr;
}

const HipDriver* HipDriver::Get() {
  static const HipDriver* driver = [] {
    auto* d = new HipDriver();
    void* handle = OpenHipRuntime(&d->error);
    if (handle == nullptr) return d;
    JT_RESOLVE(hipInit, "hipInit");
    JT_RESOLVE(hipGetDeviceCount, "hipGetDeviceCount");
    JT_RESOLVE(hipGetDevice, "hipGetDevice");
    JT_RESOLVE(hipSetDevice, "hipSetDevice");
    JT_RESOLVE(hipDeviceGetAttribute, "hipDeviceGetAttribute");
    JT_RESOLVE(hipGetErrorName, "hipGetErrorName");
    JT_RESOLVE(hipGetErrorString, "hipGetErrorString");
    JT_RESOLVE(hipStreamIsCapturing, "hipStreamIsCapturing");
    JT_RESOLVE(hipStreamSynchronize, "hipStreamSynchronize");
    JT_RESOLVE(hipModuleLoadData, "hipModuleLoadData");
    JT_RESOLVE(hipModuleGetFunction, "hipModuleGetFunction");
    JT_RESOLVE(hipModuleLaunchKernel, "hipModuleLaunchKernel");
    JT_RESOLVE(hipMemsetD8Async, "hipMemsetD8Async");
    JT_RESOLVE(hipMemcpyDtoHAsync, "hipMemcpyDtoHAsync");
    JT_RESOLVE(hipMemcpyHtoDAsync, "hipMemcpyHtoDAsync");
    JT_RESOLVE(hipEventCreate, "hipEventCreate");
    JT_RESOLVE(hipEventRecord, "hipEventRecord");
    JT_RESOLVE(hipEventSynchronize, "hipEventSynchronize");
    JT_RESOLVE(hipEventElapsedTime, "hipEventElapsedTime");
    JT_RESOLVE(hipEventDestroy, "hipEventDestroy");
    d->hipGetStreamDeviceId = reinterpret_cast<int (*)(hipStream_t)>(dlsym(handle, "hipGetStreamDeviceId"));
    d->hipModuleLaunchCooperativeKernel = reinterpret_cast<decltype(d->hipModuleLaunchCooperativeKernel)>(
        dlsym(handle, "hipModuleLaunchCooperativeKernel"));
    return d;
  }();
  return driver;
}

#undef JT_RESOLVE

// The stream's device, else the executing thread's current device.
ffi::ErrorOr<int> HipDriver::CurrentContext(const State& state, hipStream_t stream) const {
  const HipDriver* d = this;
  const State* s = &state;
  if (hipGetStreamDeviceId != nullptr) {
    const int device = hipGetStreamDeviceId(stream);
    if (device >= 0) return device;
  }
  int device = 0;
  const hipError_t result = hipGetDevice(&device);
  if (result != JT_HIP_SUCCESS) return ffi::Unexpected(jt_launch::Failure(d, s, "hipGetDevice", result));
  return device;
}

// Every device ordinal: modules are loaded into each when a single-config call is instantiated.
std::vector<int> HipDriver::DeviceContexts() const {
  std::vector<int> devices;
  if (hipInit(0) != JT_HIP_SUCCESS) return devices;
  int count = 0;
  if (hipGetDeviceCount(&count) != JT_HIP_SUCCESS) return devices;
  for (int i = 0; i < count; ++i) devices.push_back(i);
  return devices;
}

ffi::Error HipDriver::LoadFunctions(const State& state, int device, std::vector<hipFunction_t>* functions) const {
  const HipDriver* d = this;
  const State* s = &state;
  // Modules load into the current device: make the target device current, and restore the caller's afterwards.
  int previous = -1;
  JT_LAUNCH_CHECK(hipGetDevice(&previous), "hipGetDevice", "");
  if (previous != device) JT_LAUNCH_CHECK(hipSetDevice(device), "hipSetDevice", "");
  struct Restore {
    const HipDriver* d;
    int previous, device;
    ~Restore() {
      if (previous != device) d->hipSetDevice(previous);
    }
  } restore{d, previous, device};
  int max_shared = 0;
  JT_LAUNCH_CHECK(hipDeviceGetAttribute(&max_shared, JT_HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, device),
                  "hipDeviceGetAttribute", "");
  for (const jt_launch::KernelConfig& config : s->configs) {
    if (config.shared_mem > static_cast<uint32_t>(max_shared)) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        "jt_rocm: triton_call '" + s->name + "' config [" + config.label + "] needs " +
                            std::to_string(config.shared_mem) + " bytes of shared memory (LDS); device " +
                            std::to_string(device) + " allows " + std::to_string(max_shared));
    }
    hipModule_t module;
    JT_LAUNCH_CHECK(hipModuleLoadData(&module, config.binary->data()), "hipModuleLoadData (loading the HSACO)",
                    config.label);
    hipFunction_t function;
    JT_LAUNCH_CHECK(hipModuleGetFunction(&function, module, config.symbol.c_str()), "hipModuleGetFunction",
                    config.label);
    functions->push_back(function);
  }
  return ffi::Error::Success();
}

ffi::Error HipDriver::LaunchKernel(const State& state, const jt_launch::KernelConfig& config, hipFunction_t function,
                                   hipStream_t stream, void** params) const {
  const HipDriver* d = this;
  const State* s = &state;
  if (config.num_ctas != 1 || config.pdl) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented,
                      "jt_rocm: triton_call '" + s->name + "' config [" + config.label +
                          "] asks for thread-block clusters or a programmatic dependent launch, which the ROCm "
                          "handler does not perform");
  }
  if (config.cooperative) {
    if (hipModuleLaunchCooperativeKernel == nullptr) {
      return ffi::Error(ffi::ErrorCode::kUnavailable,
                        "jt_rocm: triton_call '" + s->name + "' config [" + config.label +
                            "] needs a cooperative launch, and this HIP runtime has no "
                            "hipModuleLaunchCooperativeKernel");
    }
    JT_LAUNCH_CHECK(hipModuleLaunchCooperativeKernel(function, config.grid[0], config.grid[1], config.grid[2],
                                                     config.block_x, 1, 1, config.shared_mem, stream, params),
                    "hipModuleLaunchCooperativeKernel", config.label);
    return ffi::Error::Success();
  }
  JT_LAUNCH_CHECK(hipModuleLaunchKernel(function, config.grid[0], config.grid[1], config.grid[2], config.block_x, 1,
                                        1, config.shared_mem, stream, params, nullptr),
                  "hipModuleLaunchKernel", config.label);
  return ffi::Error::Success();
}

}  // namespace

// jt_rocm_launch_{instantiate,instantiate_preloaded,initialize,execute,state_type_id,state_type_info,driver_error}
JT_LAUNCH_DEFINE_HANDLERS(jt_rocm_launch, HipDriver)

extern "C" {

// The declared HIP constants, for tests against the real hip_runtime_api.h.
int jt_rocm_launch_abi(int64_t* out, int capacity) {
  const int64_t values[] = {
      static_cast<int64_t>(sizeof(hipError_t)),
      JT_HIP_SUCCESS,
      JT_HIP_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
      JT_HIP_STREAM_CAPTURE_STATUS_NONE,
  };
  const int n = static_cast<int>(sizeof(values) / sizeof(values[0]));
  for (int i = 0; i < n && i < capacity; ++i) out[i] = values[i];
  return n;
}

}  // extern "C"
