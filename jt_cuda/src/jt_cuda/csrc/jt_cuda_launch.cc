// jt-cuda's XLA FFI handler: launches Triton-compiled cubins on XLA's CUDA stream.
//
// Built at first use against the XLA FFI headers of the installed jaxlib (jax.ffi.include_dir()). The CUDA
// driver is loaded with dlopen, so neither the CUDA toolkit nor its headers are needed to build this file: the
// few driver types and entry points used are declared below, with the values of the driver API.
//
// Stages:
//   instantiate  parses the attributes (kernels, launch shapes, parameter layout) into a KernelState;
//   initialize   loads the module for the stream's CUDA context and, for several configurations, times each
//                on the real buffers and keeps the fastest (never under graph capture);
//   execute      zeroes the requested outputs and launches; it is cheap and safe to capture into a CUDA graph,
//                which is why the handler is registered as command-buffer compatible.

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// ---- CUDA driver API declarations (values as in the driver API) ----------------------------------------------

extern "C" {
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef unsigned long long CUdeviceptr;

enum {
  JT_CUDA_SUCCESS = 0,
  JT_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  JT_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  JT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  JT_CU_FUNC_CACHE_PREFER_SHARED = 1,
  JT_CU_STREAM_CAPTURE_STATUS_NONE = 0,
  JT_CU_EVENT_DEFAULT = 0,
  JT_CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
  JT_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  JT_CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
  JT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
  JT_CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1,
};

typedef union JtLaunchAttributeValue {
  char pad[64];
  struct {
    unsigned int x;
    unsigned int y;
    unsigned int z;
  } clusterDim;
  int clusterSchedulingPolicyPreference;
  int cooperative;
  int programmaticStreamSerializationAllowed;
} JtLaunchAttributeValue;

typedef struct JtLaunchAttribute {
  int id;
  char pad[8 - sizeof(int)];
  JtLaunchAttributeValue value;
} JtLaunchAttribute;

typedef struct JtLaunchConfig {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  JtLaunchAttribute* attrs;
  unsigned int numAttrs;
} JtLaunchConfig;
}  // extern "C"

namespace {

struct Driver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext*);
  CUresult (*cuStreamIsCapturing)(CUstream, int*);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuFuncSetCacheConfig)(CUfunction, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuLaunchKernelEx)(const JtLaunchConfig*, CUfunction, void**, void**);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  std::string error;  // why loading failed; empty when every entry point was found
};

template <typename T>
bool Resolve(void* handle, const char* const* names, T* out, std::string* error) {
  for (const char* const* name = names; *name != nullptr; ++name) {
    if (void* symbol = dlsym(handle, *name)) {
      *out = reinterpret_cast<T>(symbol);
      return true;
    }
  }
  *error = std::string("libcuda has no entry point ") + names[0];
  return false;
}

#define JT_RESOLVE(field, ...)                                               \
  do {                                                                       \
    static const char* const names[] = {__VA_ARGS__, nullptr};               \
    if (!Resolve(handle, names, &d->field, &d->error)) return d;             \
  } while (0)

const Driver* LoadDriver() {
  static const Driver* driver = [] {
    auto* d = new Driver();
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) handle = dlopen("libcuda.so", RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      d->error = std::string("cannot load the CUDA driver (libcuda.so.1): ") + (why ? why : "unknown error");
      return d;
    }
    JT_RESOLVE(cuInit, "cuInit");
    JT_RESOLVE(cuDeviceGetCount, "cuDeviceGetCount");
    JT_RESOLVE(cuDeviceGet, "cuDeviceGet");
    JT_RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    JT_RESOLVE(cuGetErrorName, "cuGetErrorName");
    JT_RESOLVE(cuGetErrorString, "cuGetErrorString");
    JT_RESOLVE(cuCtxGetCurrent, "cuCtxGetCurrent");
    JT_RESOLVE(cuCtxPushCurrent, "cuCtxPushCurrent_v2", "cuCtxPushCurrent");
    JT_RESOLVE(cuCtxPopCurrent, "cuCtxPopCurrent_v2", "cuCtxPopCurrent");
    JT_RESOLVE(cuCtxGetDevice, "cuCtxGetDevice");
    JT_RESOLVE(cuStreamGetCtx, "cuStreamGetCtx");
    JT_RESOLVE(cuStreamIsCapturing, "cuStreamIsCapturing");
    JT_RESOLVE(cuStreamSynchronize, "cuStreamSynchronize");
    JT_RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute");
    JT_RESOLVE(cuModuleLoadData, "cuModuleLoadData");
    JT_RESOLVE(cuModuleGetFunction, "cuModuleGetFunction");
    JT_RESOLVE(cuFuncSetAttribute, "cuFuncSetAttribute");
    JT_RESOLVE(cuFuncGetAttribute, "cuFuncGetAttribute");
    JT_RESOLVE(cuFuncSetCacheConfig, "cuFuncSetCacheConfig");
    JT_RESOLVE(cuLaunchKernel, "cuLaunchKernel");
    JT_RESOLVE(cuLaunchKernelEx, "cuLaunchKernelEx");
    JT_RESOLVE(cuMemsetD8Async, "cuMemsetD8Async");
    JT_RESOLVE(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync");
    JT_RESOLVE(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync");
    JT_RESOLVE(cuEventCreate, "cuEventCreate");
    JT_RESOLVE(cuEventRecord, "cuEventRecord");
    JT_RESOLVE(cuEventSynchronize, "cuEventSynchronize");
    JT_RESOLVE(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
    JT_RESOLVE(cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
    return d;
  }();
  return driver;
}

#undef JT_RESOLVE

// ---- the handler's state ---------------------------------------------------------------------------------------

enum ParamKind : int64_t { kOperand = 0, kResult = 1, kScalar = 2 };

struct KernelConfig {
  std::string symbol;  // the kernel's name in the cubin
  std::string binary;  // the cubin
  std::string label;   // for messages
  uint32_t grid[3];
  uint32_t block_x;
  uint32_t shared_mem;
  uint32_t num_ctas;
  uint64_t scratch_per_program;  // global scratch bytes per program
  uint64_t scratch_align;
  bool cooperative;
  bool pdl;
  std::vector<int64_t> zeroed;  // result indices zeroed before each launch
};

struct ContextFunctions {
  CUcontext context;
  std::vector<CUfunction> functions;  // one per config
};

struct KernelState {
  static ffi::TypeId id;

  std::string name;
  std::vector<int64_t> param_kinds;
  std::vector<int64_t> param_indices;
  std::string scalars;  // packed scalar values, 8-byte slots
  std::vector<KernelConfig> configs;
  std::vector<int64_t> restore;  // result indices of aliased buffers that autotuning must restore
  int64_t scratch_result = -1;
  std::string tuning_file;  // where the winning config of this tuning problem is remembered ("": nowhere)

  std::mutex mutex;
  std::vector<std::unique_ptr<ContextFunctions>> contexts;
  std::atomic<ContextFunctions*> last{nullptr};
  std::atomic<int> chosen{-1};
};

ffi::TypeId KernelState::id = XLA_FFI_UNKNOWN_TYPE_ID;

std::string CudaErrorText(const Driver* d, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d->cuGetErrorName) d->cuGetErrorName(result, &name);
  if (d->cuGetErrorString) d->cuGetErrorString(result, &text);
  return std::string(name ? name : "CUDA error") + " (" + std::to_string(result) + "): " + (text ? text : "?");
}

ffi::Error CudaFailure(const Driver* d, const KernelState* s, const char* what, CUresult result,
                       const std::string& label = "") {
  std::string message = "jt_cuda: " + std::string(what) + " failed for triton_call '" + s->name + "'";
  if (!label.empty()) message += " config [" + label + "]";
  message += ": " + CudaErrorText(d, result);
  return ffi::Error(ffi::ErrorCode::kInternal, message);
}

#define JT_CU(expr, what, label)                                   \
  do {                                                             \
    CUresult jt_result_ = (expr);                                  \
    if (jt_result_ != JT_CUDA_SUCCESS) return CudaFailure(d, s, what, jt_result_, label); \
  } while (0)

template <typename T>
ffi::ErrorOr<T> GetAttr(const ffi::Dictionary& attrs, const std::string& key) {
  auto value = attrs.get<T>(key);
  if (!value.has_value()) {
    return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kInvalidArgument,
                                      "jt_cuda: attribute '" + key + "' is missing or has the wrong type: " +
                                          value.error().message()));
  }
  return *value;
}

#define JT_ASSIGN(lhs, expr)                                   \
  auto lhs##_or = (expr);                                      \
  if (!lhs##_or.has_value()) return ffi::Unexpected(lhs##_or.error()); \
  auto lhs = *lhs##_or

// The same, in functions that return a plain ffi::Error.
#define JT_ASSIGN_OR_FAIL(lhs, expr)                           \
  auto lhs##_or = (expr);                                      \
  if (!lhs##_or.has_value()) return lhs##_or.error();          \
  auto lhs = *lhs##_or

// The remembered winner of a tuning problem: the "index" of the JSON record jt writes (-1 when there is none).
// C stdio only: the library may carry its own C++ runtime, whose iostreams are not set up when XLA loads it.
int ReadRememberedConfig(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return -1;
  char data[4096];
  const size_t size = std::fread(data, 1, sizeof(data) - 1, file);
  std::fclose(file);
  data[size] = '\0';
  const char* key = std::strstr(data, "\"index\"");
  if (key == nullptr) return -1;
  const char* colon = std::strchr(key, ':');
  if (colon == nullptr) return -1;
  char* end = nullptr;
  const long value = std::strtol(colon + 1, &end, 10);
  if (end == colon + 1) return -1;
  return static_cast<int>(value);
}

// Remembers the winner for later processes: written to a private temporary file, then renamed into place.
void RememberConfig(const std::string& path, int best, const std::vector<float>& milliseconds) {
  if (path.empty()) return;
  std::string json = "{\"index\": " + std::to_string(best) + ", \"seconds\": [";
  for (size_t i = 0; i < milliseconds.size(); ++i) {
    char number[64];
    std::snprintf(number, sizeof(number), "%s%.9g", i ? ", " : "", milliseconds[i] / 1000.0);
    json += number;
  }
  json += "], \"tuned_by\": \"jt_cuda\"}";
  const std::string temporary = path + ".tmp-" + std::to_string(getpid());
  FILE* out = std::fopen(temporary.c_str(), "wb");
  if (out == nullptr) return;
  const bool written = std::fwrite(json.data(), 1, json.size(), out) == json.size();
  if (std::fclose(out) != 0 || !written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
  }
}

ffi::ErrorOr<std::unique_ptr<KernelState>> Instantiate(ffi::Dictionary attrs) {
  auto state = std::make_unique<KernelState>();
  JT_ASSIGN(name, GetAttr<std::string_view>(attrs, "name"));
  state->name = std::string(name);
  JT_ASSIGN(kinds, GetAttr<ffi::Span<const int64_t>>(attrs, "param_kinds"));
  JT_ASSIGN(indices, GetAttr<ffi::Span<const int64_t>>(attrs, "param_indices"));
  JT_ASSIGN(scalars, GetAttr<std::string_view>(attrs, "scalars"));
  JT_ASSIGN(restore, GetAttr<ffi::Span<const int64_t>>(attrs, "restore"));
  JT_ASSIGN(scratch_result, GetAttr<int64_t>(attrs, "scratch_result"));
  JT_ASSIGN(num_configs, GetAttr<int64_t>(attrs, "num_configs"));
  if (kinds.size() != indices.size()) {
    return ffi::Unexpected(ffi::Error::InvalidArgument("jt_cuda: param_kinds and param_indices differ in length"));
  }
  state->param_kinds.assign(kinds.begin(), kinds.end());
  state->param_indices.assign(indices.begin(), indices.end());
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == kScalar && indices[i] + 8 > static_cast<int64_t>(scalars.size())) {
      return ffi::Unexpected(ffi::Error::InvalidArgument("jt_cuda: scalar offset out of range"));
    }
  }
  // Copy with 8-byte alignment kept: std::string storage is at least 8-byte aligned.
  state->scalars.assign(scalars.data(), scalars.size());
  state->restore.assign(restore.begin(), restore.end());
  state->scratch_result = scratch_result;
  if (num_configs < 1) {
    return ffi::Unexpected(ffi::Error::InvalidArgument("jt_cuda: num_configs must be at least 1"));
  }
  for (int64_t c = 0; c < num_configs; ++c) {
    const std::string suffix = "_" + std::to_string(c);
    KernelConfig config;
    JT_ASSIGN(symbol, GetAttr<std::string_view>(attrs, "symbol" + suffix));
    JT_ASSIGN(binary, GetAttr<std::string_view>(attrs, "binary" + suffix));
    JT_ASSIGN(label, GetAttr<std::string_view>(attrs, "label" + suffix));
    JT_ASSIGN(launch, GetAttr<ffi::Span<const int64_t>>(attrs, "launch" + suffix));
    JT_ASSIGN(zeroed, GetAttr<ffi::Span<const int64_t>>(attrs, "zeroed" + suffix));
    if (launch.size() != 11) {
      return ffi::Unexpected(ffi::Error::InvalidArgument("jt_cuda: launch" + suffix + " must have 11 entries"));
    }
    config.symbol = std::string(symbol);
    config.binary = std::string(binary);
    config.label = std::string(label);
    for (int i = 0; i < 3; ++i) config.grid[i] = static_cast<uint32_t>(launch[i]);
    config.block_x = static_cast<uint32_t>(launch[3]);
    config.shared_mem = static_cast<uint32_t>(launch[4]);
    config.num_ctas = static_cast<uint32_t>(launch[5]);
    config.scratch_per_program = static_cast<uint64_t>(launch[6]);
    config.scratch_align = static_cast<uint64_t>(std::max<int64_t>(launch[7], 1));
    config.cooperative = launch[8] != 0;
    config.pdl = launch[9] != 0;
    // launch[10] is the profile scratch size; instrumentation is not supported and the compile refuses it.
    config.zeroed.assign(zeroed.begin(), zeroed.end());
    state->configs.push_back(std::move(config));
  }
  if (num_configs == 1) state->chosen.store(0);
  if (auto tuning_file = attrs.get<std::string_view>("tuning_file"); tuning_file.has_value()) {
    state->tuning_file = std::string(*tuning_file);
  }
  if (num_configs > 1 && !state->tuning_file.empty()) {
    const int remembered = ReadRememberedConfig(state->tuning_file);
    if (remembered >= 0 && remembered < num_configs) state->chosen.store(remembered);
  }
  return state;
}

// The CUDA context of the executing thread (XLA makes it current), else the stream's.
ffi::ErrorOr<CUcontext> CurrentContext(const Driver* d, const KernelState* s, CUstream stream) {
  CUcontext context = nullptr;
  CUresult result = d->cuCtxGetCurrent(&context);
  if (result == JT_CUDA_SUCCESS && context != nullptr) return context;
  result = d->cuStreamGetCtx(stream, &context);
  if (result != JT_CUDA_SUCCESS) return ffi::Unexpected(CudaFailure(d, s, "cuStreamGetCtx", result));
  return context;
}

ffi::Error LoadForContext(const Driver* d, KernelState* s, CUcontext context, ContextFunctions** out) {
  std::lock_guard<std::mutex> lock(s->mutex);
  for (auto& entry : s->contexts) {
    if (entry->context == context) {
      *out = entry.get();
      return ffi::Error::Success();
    }
  }
  auto entry = std::make_unique<ContextFunctions>();
  entry->context = context;
  JT_CU(d->cuCtxPushCurrent(context), "cuCtxPushCurrent", "");
  struct Pop {
    const Driver* d;
    ~Pop() {
      CUcontext ignored;
      d->cuCtxPopCurrent(&ignored);
    }
  } pop{d};
  CUdevice device;
  JT_CU(d->cuCtxGetDevice(&device), "cuCtxGetDevice", "");
  int optin = 0;
  JT_CU(d->cuDeviceGetAttribute(&optin, JT_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
        "cuDeviceGetAttribute", "");
  for (const KernelConfig& config : s->configs) {
    CUmodule module;
    JT_CU(d->cuModuleLoadData(&module, config.binary.data()), "cuModuleLoadData (loading the cubin)", config.label);
    CUfunction function;
    JT_CU(d->cuModuleGetFunction(&function, module, config.symbol.c_str()), "cuModuleGetFunction", config.label);
    if (config.shared_mem > static_cast<uint32_t>(optin)) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        "jt_cuda: triton_call '" + s->name + "' config [" + config.label + "] needs " +
                            std::to_string(config.shared_mem) + " bytes of shared memory; the device allows " +
                            std::to_string(optin));
    }
    if (config.shared_mem > 49152) {
      int static_shared = 0;
      JT_CU(d->cuFuncGetAttribute(&static_shared, JT_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
            "cuFuncGetAttribute", config.label);
      JT_CU(d->cuFuncSetCacheConfig(function, JT_CU_FUNC_CACHE_PREFER_SHARED), "cuFuncSetCacheConfig", config.label);
      JT_CU(d->cuFuncSetAttribute(function, JT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - static_shared),
            "cuFuncSetAttribute", config.label);
    }
    entry->functions.push_back(function);
  }
  *out = entry.get();
  s->contexts.push_back(std::move(entry));
  return ffi::Error::Success();
}

bool Capturing(const Driver* d, CUstream stream) {
  int status = JT_CU_STREAM_CAPTURE_STATUS_NONE;
  if (d->cuStreamIsCapturing(stream, &status) != JT_CUDA_SUCCESS) return false;
  return status != JT_CU_STREAM_CAPTURE_STATUS_NONE;
}

// The functions loaded for the current context; loads them unless the stream is being captured into a graph.
ffi::ErrorOr<ContextFunctions*> FunctionsFor(const Driver* d, KernelState* s, CUstream stream) {
  JT_ASSIGN(context, CurrentContext(d, s, stream));
  ContextFunctions* last = s->last.load(std::memory_order_acquire);
  if (last != nullptr && last->context == context) return last;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    for (auto& entry : s->contexts) {
      if (entry->context == context) {
        s->last.store(entry.get(), std::memory_order_release);
        return entry.get();
      }
    }
  }
  if (Capturing(d, stream)) {
    return ffi::Unexpected(ffi::Error(
        ffi::ErrorCode::kFailedPrecondition,
        "jt_cuda: triton_call '" + s->name + "' runs under CUDA graph capture in a context whose module was not "
        "loaded by the initialize stage"));
  }
  ContextFunctions* entry = nullptr;
  if (ffi::Error error = LoadForContext(d, s, context, &entry); error.failure()) return ffi::Unexpected(error);
  s->last.store(entry, std::memory_order_release);
  return entry;
}

constexpr size_t kMaxInlineParams = 64;

ffi::Error Launch(const Driver* d, KernelState* s, int c, CUfunction function, CUstream stream,
                  ffi::RemainingArgs& args, ffi::RemainingRets& rets) {
  const KernelConfig& config = s->configs[c];
  const size_t n = s->param_kinds.size();
  void* inline_values[kMaxInlineParams];
  void* inline_params[kMaxInlineParams + 2];
  std::vector<void*> heap_values, heap_params;
  void** values = inline_values;
  void** params = inline_params;
  if (n + 2 > kMaxInlineParams) {
    heap_values.resize(n + 2);
    heap_params.resize(n + 2);
    values = heap_values.data();
    params = heap_params.data();
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t index = s->param_indices[i];
    switch (s->param_kinds[i]) {
      case kOperand: {
        auto buffer = args.get<ffi::AnyBuffer>(index);
        if (!buffer.has_value()) return buffer.error();
        values[i] = buffer->untyped_data();
        params[i] = &values[i];
        break;
      }
      case kResult: {
        auto buffer = rets.get<ffi::AnyBuffer>(index);
        if (!buffer.has_value()) return buffer.error();
        values[i] = (*buffer)->untyped_data();
        params[i] = &values[i];
        break;
      }
      default:
        params[i] = const_cast<char*>(s->scalars.data() + index);
        break;
    }
  }
  const uint64_t programs = uint64_t{config.grid[0]} * config.grid[1] * config.grid[2];
  void* scratch = nullptr;
  if (config.scratch_per_program > 0 && s->scratch_result >= 0) {
    auto buffer = rets.get<ffi::AnyBuffer>(s->scratch_result);
    if (!buffer.has_value()) return buffer.error();
    uintptr_t base = reinterpret_cast<uintptr_t>((*buffer)->untyped_data());
    const uintptr_t align = config.scratch_align;
    scratch = reinterpret_cast<void*>((base + align - 1) / align * align);
  }
  void* profile_scratch = nullptr;
  params[n] = &scratch;
  params[n + 1] = &profile_scratch;

  for (int64_t index : config.zeroed) {
    auto buffer = rets.get<ffi::AnyBuffer>(index);
    if (!buffer.has_value()) return buffer.error();
    const size_t bytes = (*buffer)->size_bytes();
    if (bytes > 0) {
      JT_CU(d->cuMemsetD8Async(reinterpret_cast<CUdeviceptr>((*buffer)->untyped_data()), 0, bytes, stream),
            "cuMemsetD8Async (zeroed_outputs)", config.label);
    }
  }
  if (programs == 0) return ffi::Error::Success();
  if (config.num_ctas == 1 && !config.cooperative && !config.pdl) {
    JT_CU(d->cuLaunchKernel(function, config.grid[0], config.grid[1], config.grid[2], config.block_x, 1, 1,
                            config.shared_mem, stream, params, nullptr),
          "cuLaunchKernel", config.label);
    return ffi::Error::Success();
  }
  JtLaunchAttribute attributes[4];
  std::memset(attributes, 0, sizeof(attributes));
  unsigned int count = 0;
  if (config.num_ctas > 1) {
    attributes[count].id = JT_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = config.num_ctas;
    attributes[count].value.clusterDim.y = 1;
    attributes[count].value.clusterDim.z = 1;
    ++count;
    attributes[count].id = JT_CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attributes[count].value.clusterSchedulingPolicyPreference = JT_CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    ++count;
  }
  if (config.cooperative) {
    attributes[count].id = JT_CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attributes[count].value.cooperative = 1;
    ++count;
  }
  if (config.pdl) {
    attributes[count].id = JT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count].value.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  JtLaunchConfig launch;
  std::memset(&launch, 0, sizeof(launch));
  launch.gridDimX = config.grid[0] * config.num_ctas;
  launch.gridDimY = config.grid[1];
  launch.gridDimZ = config.grid[2];
  launch.blockDimX = config.block_x;
  launch.blockDimY = 1;
  launch.blockDimZ = 1;
  launch.sharedMemBytes = config.shared_mem;
  launch.hStream = stream;
  launch.attrs = attributes;
  launch.numAttrs = count;
  JT_CU(d->cuLaunchKernelEx(&launch, function, params, nullptr), "cuLaunchKernelEx", config.label);
  return ffi::Error::Success();
}

ffi::ErrorOr<float> TimeConfig(const Driver* d, KernelState* s, int c, CUfunction function, CUstream stream,
                               ffi::RemainingArgs& args, ffi::RemainingRets& rets, int iterations) {
  CUevent start, stop;
  CUresult result = d->cuEventCreate(&start, JT_CU_EVENT_DEFAULT);
  if (result != JT_CUDA_SUCCESS) return ffi::Unexpected(CudaFailure(d, s, "cuEventCreate", result));
  result = d->cuEventCreate(&stop, JT_CU_EVENT_DEFAULT);
  if (result != JT_CUDA_SUCCESS) {
    d->cuEventDestroy(start);
    return ffi::Unexpected(CudaFailure(d, s, "cuEventCreate", result));
  }
  struct Destroy {
    const Driver* d;
    CUevent a, b;
    ~Destroy() {
      d->cuEventDestroy(a);
      d->cuEventDestroy(b);
    }
  } destroy{d, start, stop};
  if (ffi::Error e = Launch(d, s, c, function, stream, args, rets); e.failure()) return ffi::Unexpected(e);
  result = d->cuEventRecord(start, stream);
  if (result != JT_CUDA_SUCCESS) return ffi::Unexpected(CudaFailure(d, s, "cuEventRecord", result));
  for (int i = 0; i < iterations; ++i) {
    if (ffi::Error e = Launch(d, s, c, function, stream, args, rets); e.failure()) return ffi::Unexpected(e);
  }
  result = d->cuEventRecord(stop, stream);
  if (result != JT_CUDA_SUCCESS) return ffi::Unexpected(CudaFailure(d, s, "cuEventRecord", result));
  result = d->cuEventSynchronize(stop);
  if (result != JT_CUDA_SUCCESS) {
    return ffi::Unexpected(CudaFailure(d, s, "running an autotuning trial", result, s->configs[c].label));
  }
  float ms = 0.0f;
  result = d->cuEventElapsedTime(&ms, start, stop);
  if (result != JT_CUDA_SUCCESS) return ffi::Unexpected(CudaFailure(d, s, "cuEventElapsedTime", result));
  return ms / static_cast<float>(iterations);
}

// Times every configuration on the real buffers and keeps the fastest. Buffers shared by an input and an output
// are saved first and restored afterwards, since the trials overwrite them.
ffi::Error Autotune(const Driver* d, KernelState* s, ContextFunctions* functions, CUstream stream,
                    ffi::RemainingArgs& args, ffi::RemainingRets& rets) {
  static std::mutex tuning;
  std::lock_guard<std::mutex> lock(tuning);
  if (s->chosen.load() >= 0) return ffi::Error::Success();
  std::vector<std::pair<void*, std::vector<char>>> saved;
  for (int64_t index : s->restore) {
    auto buffer = rets.get<ffi::AnyBuffer>(index);
    if (!buffer.has_value()) return buffer.error();
    std::vector<char> copy((*buffer)->size_bytes());
    if (!copy.empty()) {
      JT_CU(d->cuMemcpyDtoHAsync(copy.data(), reinterpret_cast<CUdeviceptr>((*buffer)->untyped_data()), copy.size(),
                                 stream),
            "saving an aliased buffer before autotuning", "");
    }
    saved.emplace_back((*buffer)->untyped_data(), std::move(copy));
  }
  JT_CU(d->cuStreamSynchronize(stream), "cuStreamSynchronize", "");
  const int n = static_cast<int>(s->configs.size());
  std::vector<float> first(n, std::numeric_limits<float>::infinity());
  float best_first = std::numeric_limits<float>::infinity();
  for (int c = 0; c < n; ++c) {
    auto t = TimeConfig(d, s, c, functions->functions[c], stream, args, rets, 1);
    if (!t.has_value()) return t.error();
    first[c] = *t;
    best_first = std::min(best_first, *t);
  }
  // About 10 ms for the fastest candidate, between 1 and 100 launches.
  int iterations = best_first > 0 ? static_cast<int>(10.0f / best_first) : 100;
  iterations = std::clamp(iterations, 1, 100);
  int best = 0;
  float best_time = std::numeric_limits<float>::infinity();
  std::vector<float> timings(n, std::numeric_limits<float>::infinity());
  for (int c = 0; c < n; ++c) {
    auto t = TimeConfig(d, s, c, functions->functions[c], stream, args, rets, iterations);
    if (!t.has_value()) return t.error();
    timings[c] = *t;
    if (*t < best_time) {
      best_time = *t;
      best = c;
    }
  }
  for (auto& [pointer, copy] : saved) {
    if (!copy.empty()) {
      JT_CU(d->cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(pointer), copy.data(), copy.size(), stream),
            "restoring an aliased buffer after autotuning", "");
    }
  }
  JT_CU(d->cuStreamSynchronize(stream), "cuStreamSynchronize", "");
  s->chosen.store(best);
  RememberConfig(s->tuning_file, best, timings);
  return ffi::Error::Success();
}

// Loads the module into every device's primary context (the contexts XLA runs on), so that a call with a single
// config needs no initialize stage: XLA then makes one handler call per kernel per execution instead of two.
// Contexts that cannot be loaded now are loaded by the first execution outside graph capture.
void PreloadPrimaryContexts(const Driver* d, KernelState* s) {
  if (!d->error.empty() || d->cuInit(0) != JT_CUDA_SUCCESS) return;
  int count = 0;
  if (d->cuDeviceGetCount(&count) != JT_CUDA_SUCCESS) return;
  for (int i = 0; i < count; ++i) {
    CUdevice device;
    CUcontext context = nullptr;
    if (d->cuDeviceGet(&device, i) != JT_CUDA_SUCCESS) continue;
    if (d->cuDevicePrimaryCtxRetain(&context, device) != JT_CUDA_SUCCESS || context == nullptr) continue;
    ContextFunctions* entry = nullptr;
    if (LoadForContext(d, s, context, &entry).failure()) continue;
  }
}

ffi::ErrorOr<std::unique_ptr<KernelState>> InstantiatePreloaded(ffi::Dictionary attrs) {
  auto state = Instantiate(attrs);
  if (!state.has_value()) return state;
  PreloadPrimaryContexts(LoadDriver(), state->get());
  return state;
}

ffi::Error Initialize(CUstream stream, KernelState* s, ffi::RemainingArgs args, ffi::RemainingRets rets,
                      ffi::Dictionary) {
  const Driver* d = LoadDriver();
  if (!d->error.empty()) return ffi::Error(ffi::ErrorCode::kUnavailable, "jt_cuda: " + d->error);
  JT_ASSIGN_OR_FAIL(functions, FunctionsFor(d, s, stream));
  if (s->chosen.load(std::memory_order_acquire) < 0 && !Capturing(d, stream)) {
    return Autotune(d, s, functions, stream, args, rets);
  }
  return ffi::Error::Success();
}

ffi::Error Execute(CUstream stream, KernelState* s, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   ffi::Dictionary) {
  const Driver* d = LoadDriver();
  if (!d->error.empty()) return ffi::Error(ffi::ErrorCode::kUnavailable, "jt_cuda: " + d->error);
  JT_ASSIGN_OR_FAIL(functions, FunctionsFor(d, s, stream));
  int chosen = s->chosen.load(std::memory_order_acquire);
  if (chosen < 0) {
    if (Capturing(d, stream)) {
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        "jt_cuda: triton_call '" + s->name + "' has several autotuning configs and was not tuned "
                        "before CUDA graph capture; its initialize stage did not run");
    }
    if (ffi::Error e = Autotune(d, s, functions, stream, args, rets); e.failure()) return e;
    chosen = s->chosen.load();
  }
  return Launch(d, s, chosen, functions->functions[chosen], stream, args, rets);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jt_cuda_launch_instantiate, Instantiate,
                              ffi::Ffi::BindInstantiate().Attrs<ffi::Dictionary>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jt_cuda_launch_instantiate_preloaded, InstantiatePreloaded,
                              ffi::Ffi::BindInstantiate().Attrs<ffi::Dictionary>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jt_cuda_launch_initialize, Initialize,
                              ffi::Ffi::BindInitialize()
                                  .Ctx<ffi::PlatformStream<CUstream>>()
                                  .Ctx<ffi::State<KernelState>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>(),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(jt_cuda_launch_execute, Execute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<CUstream>>()
                                  .Ctx<ffi::State<KernelState>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>(),
                              {ffi::Traits::kCmdBufferCompatible});

extern "C" {

// The state type's id and info, registered with XLA from Python (jax.ffi.register_ffi_type).
void* jt_cuda_launch_state_type_id() { return &KernelState::id; }

void* jt_cuda_launch_state_type_info() {
  static XLA_FFI_TypeInfo info = ffi::MakeTypeInfo<KernelState>();
  return &info;
}

// Why the CUDA driver cannot be used in this process, or an empty string when it can.
const char* jt_cuda_launch_driver_error() { return LoadDriver()->error.c_str(); }

// The ABI layout of the declared driver structs and constants, for tests against the real cuda.h.
int jt_cuda_launch_abi(int64_t* out, int capacity) {
  const int64_t values[] = {
      static_cast<int64_t>(sizeof(JtLaunchConfig)),
      static_cast<int64_t>(offsetof(JtLaunchConfig, hStream)),
      static_cast<int64_t>(offsetof(JtLaunchConfig, attrs)),
      static_cast<int64_t>(offsetof(JtLaunchConfig, numAttrs)),
      static_cast<int64_t>(sizeof(JtLaunchAttribute)),
      static_cast<int64_t>(offsetof(JtLaunchAttribute, value)),
      static_cast<int64_t>(sizeof(JtLaunchAttributeValue)),
      JT_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
      JT_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
      JT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
      JT_CU_FUNC_CACHE_PREFER_SHARED,
      JT_CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
      JT_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
      JT_CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
      JT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
      JT_CU_CLUSTER_SCHEDULING_POLICY_SPREAD,
  };
  const int n = static_cast<int>(sizeof(values) / sizeof(values[0]));
  for (int i = 0; i < n && i < capacity; ++i) out[i] = values[i];
  return n;
}

}  // extern "C"
