// A driver for jt's shared launch handler that stands for a GPU runtime in jt-core's own tests: it runs nothing,
// needs no GPU and no runtime library, and records what the handler asks of it. jt-core's suite builds it over the
// shared headers (jt_launch_common.h, jt_launch_record.h) exactly as jt-cuda and jt-rocm build theirs, and runs
// the result on XLA's CPU client, where the instantiate stage parses a call's attributes.
//
// The runtime starts out missing (driver_error says why); jt_fake_launch_set_runtime(1) makes it present, and the
// preloaded instantiate stage then loads each call's modules "into" context 0: LoadFunctions writes the state the
// handler parsed from the attributes as JSON, which jt_fake_launch_state() returns.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "jt_launch_common.h"
#include "jt_launch_record.h"

namespace ffi = xla::ffi;

namespace {

const char kMissing[] = "cannot load the fake runtime (libjt_fake_runtime.so): it is never installed";

std::mutex& StateMutex() {
  static std::mutex mutex;
  return mutex;
}

std::string& LastState() {
  static std::string state;
  return state;
}

std::string Quoted(const std::string& text) {
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

std::string Hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out + "\"";
}

template <typename T>
std::string List(const T* values, size_t count) {
  std::string out = "[";
  for (size_t i = 0; i < count; ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::string List(const std::vector<int64_t>& values) { return List(values.data(), values.size()); }

struct FakeDriver {
  using Result = int;
  using Stream = void*;
  using Context = int;
  using Function = int;  // the configuration's index
  using Event = int;
  using State = jt_launch::KernelState<FakeDriver>;

  static constexpr Result kSuccess = 0;
  static constexpr const char* kLibrary = "jt_fake";
  static constexpr const char* kGraphCapture = "fake graph capture";
  static constexpr const char* kMemsetD8Async = "fakeMemsetD8Async";
  static constexpr const char* kStreamSynchronize = "fakeStreamSynchronize";
  static constexpr const char* kEventCreate = "fakeEventCreate";
  static constexpr const char* kEventRecord = "fakeEventRecord";
  static constexpr const char* kEventElapsedTime = "fakeEventElapsedTime";
  static constexpr ffi::SourceFormat kRecordFormat = ffi::SourceFormat::kCubin;

  std::string error = kMissing;

  static FakeDriver* Mutable() {
    static FakeDriver driver;
    return &driver;
  }
  static const FakeDriver* Get() { return Mutable(); }

  std::string ErrorText(Result result) const { return "fake error " + std::to_string(result); }
  bool Capturing(Stream) const { return false; }
  ffi::ErrorOr<Context> CurrentContext(const State&, Stream) const { return 0; }
  std::vector<Context> DeviceContexts() const { return {0}; }

  // Writes down the state the handler parsed, then "loads" every configuration.
  ffi::Error LoadFunctions(const State& s, Context, std::vector<Function>* functions) const {
    std::string json = "{\"name\": " + Quoted(s.name) + ", \"param_kinds\": " + List(s.param_kinds) +
                       ", \"param_indices\": " + List(s.param_indices) + ", \"scalars\": " + Hex(s.scalars) +
                       ", \"restore\": " + List(s.restore) + ", \"scratch_result\": " +
                       std::to_string(s.scratch_result) + ", \"chosen\": " + std::to_string(s.chosen.load()) +
                       ", \"tuning_file\": " + Quoted(s.tuning_file) + ", \"configs\": [";
    for (size_t c = 0; c < s.configs.size(); ++c) {
      const jt_launch::KernelConfig& config = s.configs[c];
      json += std::string(c ? ", " : "") + "{\"symbol\": " + Quoted(config.symbol) +
              ", \"binary\": " + Hex(*config.binary) + ", \"label\": " + Quoted(config.label) +
              ", \"grid\": " + List(config.grid, 3) + ", \"block_x\": " + std::to_string(config.block_x) +
              ", \"shared_mem\": " + std::to_string(config.shared_mem) +
              ", \"num_ctas\": " + std::to_string(config.num_ctas) +
              ", \"scratch_per_program\": " + std::to_string(config.scratch_per_program) +
              ", \"scratch_align\": " + std::to_string(config.scratch_align) +
              ", \"cooperative\": " + (config.cooperative ? "true" : "false") +
              ", \"pdl\": " + (config.pdl ? "true" : "false") + ", \"zeroed\": " + List(config.zeroed) +
              ", \"tensor_maps\": " + List(config.tensor_maps) + "}";
      functions->push_back(static_cast<Function>(c));
    }
    json += "]}";
    std::lock_guard<std::mutex> lock(StateMutex());
    LastState() = json;
    return ffi::Error::Success();
  }

  ffi::Error LaunchKernel(const State& s, const jt_launch::KernelConfig& config, Function, Stream, void**) const {
    return ffi::Error(ffi::ErrorCode::kUnimplemented,
                      "jt_fake: triton_call '" + s.name + "' config [" + config.label + "]: the fake runtime runs "
                      "nothing");
  }

  Result MemsetD8Async(void*, size_t, Stream) const { return 1; }
  Result CopyToHostAsync(void*, const void*, size_t, Stream) const { return 1; }
  Result CopyToDeviceAsync(void*, const void*, size_t, Stream) const { return 1; }
  Result StreamSynchronize(Stream) const { return 1; }
  Result EventCreate(Event*) const { return 1; }
  Result EventRecord(Event, Stream) const { return 1; }
  Result EventSynchronize(Event) const { return 1; }
  Result EventElapsedTime(float*, Event, Event) const { return 1; }
  Result EventDestroy(Event) const { return 1; }
};

}  // namespace

JT_LAUNCH_DEFINE_HANDLERS(jt_fake_launch, FakeDriver)
JT_LAUNCH_DEFINE_RECORD_HANDLERS(jt_fake_launch, FakeDriver)

extern "C" {

// Makes the fake runtime present (1) or missing (0).
void jt_fake_launch_set_runtime(int present) { FakeDriver::Mutable()->error = present ? "" : kMissing; }

// The state the handler parsed for the last call whose modules it loaded, as JSON ("" before the first).
const char* jt_fake_launch_state() {
  static std::string copy;
  std::lock_guard<std::mutex> lock(StateMutex());
  copy = LastState();
  return copy.c_str();
}

}  // extern "C"
