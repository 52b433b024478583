// jt-cuda's XLA FFI handler: launches Triton-compiled cubins on XLA's CUDA stream.
//
// Built at first use against the XLA FFI headers of the installed jaxlib (jax.ffi.include_dir()). The CUDA
// driver is loaded with dlopen, so neither the CUDA toolkit nor its headers are needed to build this file: the
// few driver types and entry points used are declared below, with the values of the driver API.
//
// The handler itself (state, attributes, parameter layout, autotuning, the initialize/execute stages) is shared
// with jt-rocm and lives in jt_core's jt_launch_common.h; this file is the CUDA driver it runs on: how to load the
// driver, find the current context, load a cubin into it and launch (clusters, cooperative and programmatic
// dependent launches through cuLaunchKernelEx), and how to encode the TMA descriptor (CUtensorMap) of a host-side
// tensor descriptor from its buffer's address at launch (cuTensorMapEncodeTiled, CUDA 12 drivers and later).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jt_launch_common.h"
#include "jt_launch_record.h"

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
  // CUtensorMapInterleave, CUtensorMapL2promotion
  JT_CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
  JT_CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
};

// cuTensorMapEncodeTiled(CUtensorMap*, CUtensorMapDataType, cuuint32_t rank, void* globalAddress,
//   const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
//   const cuuint32_t* elementStrides, CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
//   CUtensorMapFloatOOBfill); the enums are int-sized and the map is 128 bytes, 64-byte aligned.
typedef CUresult (*JtTensorMapEncodeTiled)(void*, int, unsigned int, void*, const uint64_t*, const uint64_t*,
                                           const unsigned int*, const unsigned int*, int, int, int, int);

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

struct CudaDriver {
  using Result = CUresult;
  using Stream = CUstream;
  using Context = CUcontext;
  using Function = CUfunction;
  using Event = CUevent;
  using State = jt_launch::KernelState<CudaDriver>;

  static constexpr Result kSuccess = JT_CUDA_SUCCESS;
  static constexpr const char* kLibrary = "jt_cuda";
  static constexpr const char* kGraphCapture = "CUDA graph capture";
  static constexpr const char* kMemsetD8Async = "cuMemsetD8Async";
  static constexpr const char* kStreamSynchronize = "cuStreamSynchronize";
  static constexpr const char* kEventCreate = "cuEventCreate";
  static constexpr const char* kEventRecord = "cuEventRecord";
  static constexpr const char* kEventElapsedTime = "cuEventElapsedTime";
#ifdef JT_LAUNCH_HAS_RECORD
  static constexpr ffi::SourceFormat kRecordFormat = ffi::SourceFormat::kCubin;
#endif

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
  JtTensorMapEncodeTiled cuTensorMapEncodeTiled = nullptr;  // optional: absent before CUDA 12
  std::string error;  // why loading failed; empty when every entry point was found

  static const CudaDriver* Get();

  std::string ErrorText(CUresult result) const {
    const char* name = nullptr;
    const char* text = nullptr;
    if (cuGetErrorName) cuGetErrorName(result, &name);
    if (cuGetErrorString) cuGetErrorString(result, &text);
    return std::string(name ? name : "CUDA error") + " (" + std::to_string(result) + "): " + (text ? text : "?");
  }

  bool Capturing(CUstream stream) const {
    int status = JT_CU_STREAM_CAPTURE_STATUS_NONE;
    if (cuStreamIsCapturing(stream, &status) != JT_CUDA_SUCCESS) return false;
    return status != JT_CU_STREAM_CAPTURE_STATUS_NONE;
  }

  ffi::ErrorOr<CUcontext> CurrentContext(const State& state, CUstream stream) const;
  std::vector<CUcontext> DeviceContexts() const;
  ffi::Error LoadFunctions(const State& state, CUcontext context, std::vector<CUfunction>* functions) const;
  ffi::Error LaunchKernel(const State& state, const jt_launch::KernelConfig& config, CUfunction function,
                          CUstream stream, void** params) const;
  ffi::Error EncodeTensorMap(const State& state, const jt_launch::KernelConfig& config, const int64_t* record,
                             void* address, void* map) const;

  CUresult MemsetD8Async(void* pointer, size_t bytes, CUstream stream) const {
    return cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(pointer), 0, bytes, stream);
  }
  CUresult FillD8Async(void* pointer, unsigned char value, size_t bytes, CUstream stream) const {
    return cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(pointer), value, bytes, stream);
  }
  CUresult CopyToHostAsync(void* host, const void* device, size_t bytes, CUstream stream) const {
    return cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(device), bytes, stream);
  }
  CUresult CopyToDeviceAsync(void* device, const void* host, size_t bytes, CUstream stream) const {
    return cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(device), host, bytes, stream);
  }
  CUresult StreamSynchronize(CUstream stream) const { return cuStreamSynchronize(stream); }
  CUresult EventCreate(CUevent* event) const { return cuEventCreate(event, JT_CU_EVENT_DEFAULT); }
  CUresult EventRecord(CUevent event, CUstream stream) const { return cuEventRecord(event, stream); }
  CUresult EventSynchronize(CUevent event) const { return cuEventSynchronize(event); }
  CUresult EventElapsedTime(float* ms, CUevent start, CUevent stop) const {
    return cuEventElapsedTime(ms, start, stop);
  }
  CUresult EventDestroy(CUevent event) const { return cuEventDestroy(event); }
};

#define JT_RESOLVE(field, ...) JT_LAUNCH_RESOLVE("libcuda", field, __VA_ARGS__)

const CudaDriver* CudaDriver::Get() {
  static const CudaDriver* driver = [] {
    auto* d = new CudaDriver();
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
    d->cuTensorMapEncodeTiled = reinterpret_cast<JtTensorMapEncodeTiled>(dlsym(handle, "cuTensorMapEncodeTiled"));
    return d;
  }();
  return driver;
}

#undef JT_RESOLVE

// The CUDA context of the executing thread (XLA makes it current), else the stream's.
ffi::ErrorOr<CUcontext> CudaDriver::CurrentContext(const State& state, CUstream stream) const {
  const CudaDriver* d = this;
  const State* s = &state;
  CUcontext context = nullptr;
  CUresult result = cuCtxGetCurrent(&context);
  if (result == JT_CUDA_SUCCESS && context != nullptr) return context;
  result = cuStreamGetCtx(stream, &context);
  if (result != JT_CUDA_SUCCESS) return ffi::Unexpected(jt_launch::Failure(d, s, "cuStreamGetCtx", result));
  return context;
}

// Every device's primary context: the contexts XLA runs on.
std::vector<CUcontext> CudaDriver::DeviceContexts() const {
  std::vector<CUcontext> contexts;
  if (cuInit(0) != JT_CUDA_SUCCESS) return contexts;
  int count = 0;
  if (cuDeviceGetCount(&count) != JT_CUDA_SUCCESS) return contexts;
  for (int i = 0; i < count; ++i) {
    CUdevice device;
    CUcontext context = nullptr;
    if (cuDeviceGet(&device, i) != JT_CUDA_SUCCESS) continue;
    if (cuDevicePrimaryCtxRetain(&context, device) != JT_CUDA_SUCCESS || context == nullptr) continue;
    contexts.push_back(context);
  }
  return contexts;
}

ffi::Error CudaDriver::LoadFunctions(const State& state, CUcontext context,
                                     std::vector<CUfunction>* functions) const {
  const CudaDriver* d = this;
  const State* s = &state;
  JT_LAUNCH_CHECK(cuCtxPushCurrent(context), "cuCtxPushCurrent", "");
  struct Pop {
    const CudaDriver* d;
    ~Pop() {
      CUcontext ignored;
      d->cuCtxPopCurrent(&ignored);
    }
  } pop{d};
  CUdevice device;
  JT_LAUNCH_CHECK(cuCtxGetDevice(&device), "cuCtxGetDevice", "");
  int optin = 0;
  JT_LAUNCH_CHECK(cuDeviceGetAttribute(&optin, JT_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
                  "cuDeviceGetAttribute", "");
  for (const jt_launch::KernelConfig& config : s->configs) {
    CUmodule module;
    JT_LAUNCH_CHECK(cuModuleLoadData(&module, config.binary->data()), "cuModuleLoadData (loading the cubin)",
                    config.label);
    CUfunction function;
    JT_LAUNCH_CHECK(cuModuleGetFunction(&function, module, config.symbol.c_str()), "cuModuleGetFunction",
                    config.label);
    if (config.shared_mem > static_cast<uint32_t>(optin)) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        "jt_cuda: triton_call '" + s->name + "' config [" + config.label + "] needs " +
                            std::to_string(config.shared_mem) + " bytes of shared memory; the device allows " +
                            std::to_string(optin));
    }
    if (config.shared_mem > 49152) {
      int static_shared = 0;
      JT_LAUNCH_CHECK(cuFuncGetAttribute(&static_shared, JT_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
                      "cuFuncGetAttribute", config.label);
      JT_LAUNCH_CHECK(cuFuncSetCacheConfig(function, JT_CU_FUNC_CACHE_PREFER_SHARED), "cuFuncSetCacheConfig",
                      config.label);
      JT_LAUNCH_CHECK(
          cuFuncSetAttribute(function, JT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - static_shared),
          "cuFuncSetAttribute", config.label);
    }
    functions->push_back(function);
  }
  return ffi::Error::Success();
}

// Encodes the TMA descriptor of a host-side tensor descriptor over `address`. The record (jt_cuda.tensormaps) is
// data type, rank, swizzle, OOB fill, dims[5], byte strides[4], box[5], innermost dimension first.
ffi::Error CudaDriver::EncodeTensorMap(const State& state, const jt_launch::KernelConfig& config,
                                       const int64_t* record, void* address, void* map) const {
  const CudaDriver* d = this;
  const State* s = &state;
  const std::string where = "triton_call '" + state.name + "' config [" + config.label + "]";
  if (cuTensorMapEncodeTiled == nullptr) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented,
                      std::string(kLibrary) + ": " + where + " passes a host-side tensor descriptor, but this CUDA "
                      "driver has no cuTensorMapEncodeTiled (it needs a CUDA 12 driver or later)");
  }
  const unsigned int rank = static_cast<unsigned int>(record[1]);
  if (rank < 1 || rank > 5) {
    return ffi::Error::InvalidArgument(std::string(kLibrary) + ": " + where + ": tensor map of rank " +
                                       std::to_string(rank));
  }
  if (reinterpret_cast<uintptr_t>(address) % 16 != 0) {
    return ffi::Error::InvalidArgument(std::string(kLibrary) + ": " + where + ": a tensor descriptor's buffer is not "
                                       "16-byte aligned, which TMA needs");
  }
  uint64_t dims[5];
  uint64_t strides[4];
  unsigned int box[5];
  const unsigned int element_strides[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < 5; ++i) dims[i] = static_cast<uint64_t>(record[4 + i]);
  for (int i = 0; i < 4; ++i) strides[i] = static_cast<uint64_t>(record[9 + i]);
  for (int i = 0; i < 5; ++i) box[i] = static_cast<unsigned int>(record[13 + i]);
  JT_LAUNCH_CHECK(cuTensorMapEncodeTiled(map, static_cast<int>(record[0]), rank, address, dims, strides, box,
                                         element_strides, JT_CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         static_cast<int>(record[2]), JT_CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                         static_cast<int>(record[3])),
                  "cuTensorMapEncodeTiled (host-side tensor descriptor)", config.label);
  return ffi::Error::Success();
}

ffi::Error CudaDriver::LaunchKernel(const State& state, const jt_launch::KernelConfig& config, CUfunction function,
                                    CUstream stream, void** params) const {
  const CudaDriver* d = this;
  const State* s = &state;
  // A programmatic dependent may start while the previous kernel on the stream drains, and waits for it at entry
  // (griddepcontrol.wait). With outputs zeroed first, the memset is what precedes it: launched plainly then.
  const bool pdl = config.pdl && config.zeroed.empty();
  if (config.num_ctas == 1 && !config.cooperative && !pdl) {
    JT_LAUNCH_CHECK(cuLaunchKernel(function, config.grid[0], config.grid[1], config.grid[2], config.block_x, 1, 1,
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
  if (pdl) {
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
  JT_LAUNCH_CHECK(cuLaunchKernelEx(&launch, function, params, nullptr), "cuLaunchKernelEx", config.label);
  return ffi::Error::Success();
}

}  // namespace

// jt_cuda_launch_{instantiate,instantiate_preloaded,initialize,execute,state_type_id,state_type_info,driver_error}
JT_LAUNCH_DEFINE_HANDLERS(jt_cuda_launch, CudaDriver)
// jt_cuda_launch_{record,register_record,record_counts}: kernel nodes in XLA's command buffers (jt_launch_record.h)
JT_LAUNCH_DEFINE_RECORD_HANDLERS(jt_cuda_launch, CudaDriver)

extern "C" {

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
