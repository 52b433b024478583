// The state half of jt's GPU launch handler (XLA FFI): loading a runtime's entry points, the per-call state, the
// attribute schema below, and the remembered tuning winners. jt_launch_common.h includes it and adds the rest
// (module loading per context, launching, autotuning, the stages).
//
// Attributes (jt_core.gpu.attributes writes them):
//   name             the triton_call's name, for messages
//   param_kinds      per kernel parameter: 0 operand, 1 result, 2 scalar, 3 tensor map
//   param_indices    per kernel parameter: the operand index, the result index, the byte offset in `scalars`, or
//                    the record in `tensormaps_<c>`
//   scalars          by-value parameters, one little-endian 8-byte slot each
//   restore          result indices of buffers shared with an input, restored after autotuning trials
//   scratch_result   the result that provides global scratch memory (-1: none)
//   num_configs      how many configurations follow, each with the suffix _<c>:
//     symbol_<c>     the kernel's name in the binary
//     binary_<c>     the code object (cubin, HSACO)
//     label_<c>      the configuration, for messages
//     launch_<c>     grid x/y/z, threads per program, shared memory bytes, CTAs per cluster, global scratch bytes
//                    per program, its alignment, cooperative launch, programmatic dependent launch (the kernel
//                    waits for its prerequisite grids: Triton's launch_pdl, or jt's wait at entry), profile
//                    scratch bytes (refused at lowering)
//     zeroed_<c>     result indices zeroed before each launch
//     tensormaps_<c> optional: host-side tensor descriptors encoded at each launch (drivers with EncodeTensorMap),
//                    kTensorMapRecord int64s each: buffer kind (0 operand, 1 result) and index, then the driver's
//                    record (jt_cuda.tensormaps: data type, rank, swizzle, OOB fill, dims[5], byte strides[4],
//                    box[5], innermost first); the map is passed by value
//   tuning_file      optional: where the winning configuration is read from and written to
//   coverage         optional: result indices whose every element a configuration must write to be chosen (the
//                    configurations launch the same grid: jt_core.coverage); each is checked, less those the
//                    configuration zeroes, by running it into the result filled with two sentinels in turn
//   report_skipped   optional: 0 when the configurations tuning sets aside are reported by jt-core (which reads
//                    them from the record), not by a line on stderr
//
// Everything here has internal linkage (see jt_launch_common.h).

#ifndef JT_LAUNCH_STATE_H_
#define JT_LAUNCH_STATE_H_

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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace jt_launch {
namespace {

namespace ffi = xla::ffi;

// ---- loading a runtime -----------------------------------------------------------------------------------------

// Resolves the first of `names` (a null-terminated list: versioned entry points first) that `handle` exports.
template <typename T>
bool Resolve(void* handle, const char* library, const char* const* names, T* out, std::string* error) {
  for (const char* const* name = names; *name != nullptr; ++name) {
    if (void* symbol = dlsym(handle, *name)) {
      *out = reinterpret_cast<T>(symbol);
      return true;
    }
  }
  *error = std::string(library) + " has no entry point " + names[0];
  return false;
}

// In a driver's loader, with `handle` and the driver `d` in scope: resolves d->field or returns d with d->error set.
#define JT_LAUNCH_RESOLVE(library, field, ...)                                   \
  do {                                                                           \
    static const char* const names[] = {__VA_ARGS__, nullptr};                   \
    if (!::jt_launch::Resolve(handle, library, names, &d->field, &d->error)) return d; \
  } while (0)

// ---- the handler's state ---------------------------------------------------------------------------------------

enum ParamKind : int64_t { kOperand = 0, kResult = 1, kScalar = 2, kTensorMap = 3 };

// A tensor map record's int64s (buffer kind and index, then the driver's fields), and the size of an encoded map.
constexpr size_t kTensorMapRecord = 20;
constexpr size_t kTensorMapBytes = 128;

struct alignas(64) TensorMapStorage {
  unsigned char bytes[kTensorMapBytes];
};

// Whether a driver encodes tensor maps (host-side tensor descriptors).
template <typename D, typename = void>
struct EncodesTensorMaps : std::false_type {};
template <typename D>
struct EncodesTensorMaps<D, std::void_t<decltype(&D::EncodeTensorMap)>> : std::true_type {};

// One copy per process of each code object, shared by every call (and configuration) that launches it: the
// runtime's modules and XLA's command buffers then load a kernel once, not once per call site.
inline std::shared_ptr<const std::string> InternBinary(std::string_view bytes) {
  static std::mutex mutex;
  static std::unordered_multimap<size_t, std::shared_ptr<const std::string>> binaries;
  const size_t hash = std::hash<std::string_view>{}(bytes);
  std::lock_guard<std::mutex> lock(mutex);
  auto [first, last] = binaries.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    if (*it->second == bytes) return it->second;
  }
  auto binary = std::make_shared<const std::string>(bytes);
  binaries.emplace(hash, binary);
  return binary;
}

struct KernelConfig {
  std::string symbol;  // the kernel's name in the binary
  std::shared_ptr<const std::string> binary;  // the code object (interned: InternBinary)
  std::string label;   // for messages
  uint32_t grid[3];
  uint32_t block_x;
  uint32_t shared_mem;
  uint32_t num_ctas;
  uint64_t scratch_per_program;  // global scratch bytes per program
  uint64_t scratch_align;
  bool cooperative;
  bool pdl;  // launched as a programmatic dependent: the kernel waits for its prerequisite grids itself
  std::vector<int64_t> zeroed;  // result indices zeroed before each launch
  std::vector<int64_t> tensor_maps;  // kTensorMapRecord int64s per host-side tensor descriptor
};

template <typename Driver>
struct ContextFunctions {
  typename Driver::Context context;
  std::vector<typename Driver::Function> functions;  // one per config
};

template <typename Driver>
struct KernelState {
  static ffi::TypeId id;

  std::string name;
  std::vector<int64_t> param_kinds;
  std::vector<int64_t> param_indices;
  std::string scalars;  // packed scalar values, 8-byte slots
  size_t num_tensor_maps = 0;  // parameters of kind kTensorMap
  std::vector<KernelConfig> configs;
  std::vector<int64_t> restore;  // result indices of aliased buffers that autotuning must restore
  int64_t scratch_result = -1;
  std::string tuning_file;  // where the winning config of this tuning problem is remembered ("": nowhere)
  std::vector<int64_t> coverage;  // result indices a chosen config must write entirely (jt_core.coverage)
  bool report_skipped = true;     // whether tuning says on stderr which configs it set aside

  std::mutex mutex;
  std::vector<std::unique_ptr<ContextFunctions<Driver>>> contexts;
  std::atomic<ContextFunctions<Driver>*> last{nullptr};
  std::atomic<int> chosen{-1};
};

template <typename Driver>
ffi::TypeId KernelState<Driver>::id = XLA_FFI_UNKNOWN_TYPE_ID;

template <typename Driver>
bool Succeeded(const Driver*, typename Driver::Result result) {
  return result == Driver::kSuccess;
}

template <typename Driver>
ffi::Error Failure(const Driver* d, const KernelState<Driver>* s, const std::string& what,
                   typename Driver::Result result, const std::string& label = "") {
  std::string message = std::string(Driver::kLibrary) + ": " + what + " failed for triton_call '" + s->name + "'";
  if (!label.empty()) message += " config [" + label + "]";
  message += ": " + d->ErrorText(result);
  return ffi::Error(ffi::ErrorCode::kInternal, message);
}

// With the driver `d` and the state `s` in scope: returns the failure of a runtime call that did not succeed.
#define JT_LAUNCH_CHECK(expr, what, label)                                                              \
  do {                                                                                                  \
    const auto jt_result_ = (expr);                                                                     \
    if (!::jt_launch::Succeeded(d, jt_result_)) return ::jt_launch::Failure(d, s, what, jt_result_, label); \
  } while (0)

template <typename T>
ffi::ErrorOr<T> GetAttr(const char* library, const ffi::Dictionary& attrs, const std::string& key) {
  auto value = attrs.get<T>(key);
  if (!value.has_value()) {
    return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kInvalidArgument,
                                      std::string(library) + ": attribute '" + key +
                                          "' is missing or has the wrong type: " + value.error().message()));
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

// ---- remembered tuning winners ---------------------------------------------------------------------------------

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

// Text as a JSON string.
inline std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Remembers the winner for later processes: written to a private temporary file, then renamed into place. A
// configuration set aside (skipped[c] not empty: it could not launch, or left part of an output unwritten) has no
// timing (null) and its reason under "skipped".
void RememberConfig(const char* library, const std::string& path, int best, const std::vector<float>& milliseconds,
                    const std::vector<std::string>& skipped) {
  if (path.empty()) return;
  std::string json = "{\"index\": " + std::to_string(best) + ", \"seconds\": [";
  for (size_t i = 0; i < milliseconds.size(); ++i) {
    if (i) json += ", ";
    if (i < skipped.size() && !skipped[i].empty()) {
      json += "null";
      continue;
    }
    char number[64];
    std::snprintf(number, sizeof(number), "%.9g", milliseconds[i] / 1000.0);
    json += number;
  }
  json += "], \"skipped\": [";
  bool first = true;
  for (size_t i = 0; i < skipped.size(); ++i) {
    if (skipped[i].empty()) continue;
    json += std::string(first ? "" : ", ") + "[" + std::to_string(i) + ", " + JsonString(skipped[i]) + "]";
    first = false;
  }
  json += "], \"tuned_by\": \"" + std::string(library) + "\"}";
  const std::string temporary = path + ".tmp-" + std::to_string(getpid());
  FILE* out = std::fopen(temporary.c_str(), "wb");
  if (out == nullptr) return;
  const bool written = std::fwrite(json.data(), 1, json.size(), out) == json.size();
  if (std::fclose(out) != 0 || !written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
  }
}

// ---- instantiate: the attributes -------------------------------------------------------------------------------

template <typename Driver>
ffi::ErrorOr<std::unique_ptr<KernelState<Driver>>> Instantiate(ffi::Dictionary attrs) {
  const char* lib = Driver::kLibrary;
  const std::string prefix = std::string(lib) + ": ";
  auto state = std::make_unique<KernelState<Driver>>();
  JT_ASSIGN(name, GetAttr<std::string_view>(lib, attrs, "name"));
  state->name = std::string(name);
  JT_ASSIGN(kinds, GetAttr<ffi::Span<const int64_t>>(lib, attrs, "param_kinds"));
  JT_ASSIGN(indices, GetAttr<ffi::Span<const int64_t>>(lib, attrs, "param_indices"));
  JT_ASSIGN(scalars, GetAttr<std::string_view>(lib, attrs, "scalars"));
  JT_ASSIGN(restore, GetAttr<ffi::Span<const int64_t>>(lib, attrs, "restore"));
  JT_ASSIGN(scratch_result, GetAttr<int64_t>(lib, attrs, "scratch_result"));
  JT_ASSIGN(num_configs, GetAttr<int64_t>(lib, attrs, "num_configs"));
  if (kinds.size() != indices.size()) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(prefix + "param_kinds and param_indices differ in length"));
  }
  state->param_kinds.assign(kinds.begin(), kinds.end());
  state->param_indices.assign(indices.begin(), indices.end());
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == kScalar && indices[i] + 8 > static_cast<int64_t>(scalars.size())) {
      return ffi::Unexpected(ffi::Error::InvalidArgument(prefix + "scalar offset out of range"));
    }
    if (kinds[i] == kTensorMap) ++state->num_tensor_maps;
  }
  // Copy with 8-byte alignment kept: std::string storage is at least 8-byte aligned.
  state->scalars.assign(scalars.data(), scalars.size());
  state->restore.assign(restore.begin(), restore.end());
  state->scratch_result = scratch_result;
  if (num_configs < 1) {
    return ffi::Unexpected(ffi::Error::InvalidArgument(prefix + "num_configs must be at least 1"));
  }
  for (int64_t c = 0; c < num_configs; ++c) {
    const std::string suffix = "_" + std::to_string(c);
    KernelConfig config;
    JT_ASSIGN(symbol, GetAttr<std::string_view>(lib, attrs, "symbol" + suffix));
    JT_ASSIGN(binary, GetAttr<std::string_view>(lib, attrs, "binary" + suffix));
    JT_ASSIGN(label, GetAttr<std::string_view>(lib, attrs, "label" + suffix));
    JT_ASSIGN(launch, GetAttr<ffi::Span<const int64_t>>(lib, attrs, "launch" + suffix));
    JT_ASSIGN(zeroed, GetAttr<ffi::Span<const int64_t>>(lib, attrs, "zeroed" + suffix));
    if (launch.size() != 11) {
      return ffi::Unexpected(ffi::Error::InvalidArgument(prefix + "launch" + suffix + " must have 11 entries"));
    }
    config.symbol = std::string(symbol);
    config.binary = InternBinary(binary);
    config.label = std::string(label);
    for (int i = 0; i < 3; ++i) config.grid[i] = static_cast<uint32_t>(launch[i]);
    config.block_x = static_cast<uint32_t>(launch[3]);
    config.shared_mem = static_cast<uint32_t>(launch[4]);
    config.num_ctas = static_cast<uint32_t>(launch[5]);
    config.scratch_per_program = static_cast<uint64_t>(launch[6]);
    config.scratch_align = static_cast<uint64_t>(std::max<int64_t>(launch[7], 1));
    config.cooperative = launch[8] != 0;
    config.pdl = launch[9] != 0;
    // launch[10] is the profile scratch size; instrumentation is not supported and the lowering refuses it.
    config.zeroed.assign(zeroed.begin(), zeroed.end());
    if (auto maps = attrs.get<ffi::Span<const int64_t>>("tensormaps" + suffix); maps.has_value()) {
      config.tensor_maps.assign(maps->begin(), maps->end());
    }
    const size_t records = config.tensor_maps.size() / kTensorMapRecord;
    if (config.tensor_maps.size() % kTensorMapRecord != 0) {
      return ffi::Unexpected(ffi::Error::InvalidArgument(prefix + "tensormaps" + suffix + " has a partial record"));
    }
    for (size_t i = 0; i < kinds.size(); ++i) {
      if (kinds[i] == kTensorMap && (indices[i] < 0 || static_cast<size_t>(indices[i]) >= records)) {
        return ffi::Unexpected(ffi::Error::InvalidArgument(prefix + "tensor map record out of range"));
      }
    }
    state->configs.push_back(std::move(config));
  }
  if (auto coverage = attrs.get<ffi::Span<const int64_t>>("coverage"); coverage.has_value()) {
    state->coverage.assign(coverage->begin(), coverage->end());
  }
  if (auto report = attrs.get<int64_t>("report_skipped"); report.has_value()) state->report_skipped = *report != 0;
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

}  // namespace
}  // namespace jt_launch

#endif  // JT_LAUNCH_STATE_H_
