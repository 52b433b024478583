// A driver for jt's shared launch handler that stands for a GPU runtime in jt-core's own tests: it runs nothing,
// needs no GPU and no runtime library, and records what the handler asks of it. jt-core's suite builds it over the
// shared headers (jt_launch_common.h, jt_launch_record.h) exactly as jt-cuda and jt-rocm build theirs, and runs
// the result on XLA's CPU client, where the instantiate stage parses a call's attributes.
//
// The runtime starts out missing (driver_error says why); jt_fake_launch_set_runtime(1) makes it present, and the
// preloaded instantiate stage then loads each call's modules "into" context 0: LoadFunctions writes the state the
// handler parsed from the attributes as JSON, which jt_fake_launch_state() returns.
//
// Its memory is the host's (fills and copies are memset and memcpy) and its clock a counter that the trials of
// jt_fake_launch_tune() advance: that entry point runs the handler's tuning (jt_launch::Tune) over configurations
// whose "kernels" write a given number of leading elements of one result and take a given time.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
#ifdef JT_LAUNCH_HAS_RECORD
  static constexpr ffi::SourceFormat kRecordFormat = ffi::SourceFormat::kCubin;
#endif

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
                       ", \"tuning_file\": " + Quoted(s.tuning_file) + ", \"coverage\": " + List(s.coverage) +
                       ", \"report_skipped\": " + (s.report_skipped ? "true" : "false") +
                       ", \"configs\": [";
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

  Result MemsetD8Async(void* pointer, size_t bytes, Stream) const {
    std::memset(pointer, 0, bytes);
    return 0;
  }
  Result FillD8Async(void* pointer, unsigned char value, size_t bytes, Stream) const {
    std::memset(pointer, value, bytes);
    return 0;
  }
  Result CopyToHostAsync(void* host, const void* device, size_t bytes, Stream) const {
    std::memcpy(host, device, bytes);
    return 0;
  }
  Result CopyToDeviceAsync(void* device, const void* host, size_t bytes, Stream) const {
    std::memcpy(device, host, bytes);
    return 0;
  }
  Result StreamSynchronize(Stream) const { return 0; }

  // Events read the fake clock (in microseconds) when recorded.
  static std::vector<double>& EventTimes() {
    static std::vector<double> times;
    return times;
  }
  static double& Clock() {
    static double clock = 0;
    return clock;
  }
  Result EventCreate(Event* event) const {
    EventTimes().push_back(0);
    *event = static_cast<Event>(EventTimes().size() - 1);
    return 0;
  }
  Result EventRecord(Event event, Stream) const {
    EventTimes()[event] = Clock();
    return 0;
  }
  Result EventSynchronize(Event) const { return 0; }
  Result EventElapsedTime(float* ms, Event start, Event stop) const {
    *ms = static_cast<float>((EventTimes()[stop] - EventTimes()[start]) / 1000.0);
    return 0;
  }
  Result EventDestroy(Event) const { return 0; }
};

// Trials whose "kernel" c writes the first writes[c] elements of one result (with bytes that are neither
// sentinel), takes micros[c] on the fake clock, or is refused at launch.
class FakeTrials : public jt_launch::TrialRunner {
 public:
  FakeTrials(std::vector<unsigned char>* result, size_t element_bytes, const int64_t* writes, const double* micros,
             const int64_t* refused)
      : result_(result), element_bytes_(element_bytes), writes_(writes), micros_(micros), refused_(refused) {}

  ffi::Error Launch(int c) override {
    if (refused_[c]) {
      return ffi::Error(ffi::ErrorCode::kResourceExhausted, "fakeLaunchKernel: too many resources requested");
    }
    const size_t bytes = std::min(result_->size(), static_cast<size_t>(writes_[c]) * element_bytes_);
    std::memset(result_->data(), 0x11, bytes);
    FakeDriver::Clock() += micros_[c];
    return ffi::Error::Success();
  }

  std::vector<jt_launch::CheckedBuffer> Checked(int) override {
    return {{0, result_->data(), result_->size(), element_bytes_}};
  }

 private:
  std::vector<unsigned char>* result_;
  size_t element_bytes_;
  const int64_t* writes_;
  const double* micros_;
  const int64_t* refused_;
};

}  // namespace

JT_LAUNCH_DEFINE_HANDLERS(jt_fake_launch, FakeDriver)
JT_LAUNCH_DEFINE_RECORD_HANDLERS(jt_fake_launch, FakeDriver)

extern "C" {

// Makes the fake runtime present (1) or missing (0).
void jt_fake_launch_set_runtime(int present) { FakeDriver::Mutable()->error = present ? "" : kMissing; }

// Runs the handler's tuning over `count` configurations of a call whose result 0 holds `elements` elements of
// `element_bytes` bytes (checked for coverage when `check` is set): configuration c writes its first writes[c]
// elements, takes micros[c] and is refused at launch when refused[c]. Returns the chosen index, or -1 with the
// error's message in `message`; `skipped` gets why each configuration was set aside, one line each.
int jt_fake_launch_tune(int count, int64_t elements, int element_bytes, int check, const int64_t* writes,
                        const double* micros, const int64_t* refused, char* message, int capacity, char* skipped,
                        int skipped_capacity) {
  FakeDriver::State state;
  state.name = "fake_tuned";
  for (int c = 0; c < count; ++c) {
    jt_launch::KernelConfig config{};
    config.label = "config " + std::to_string(c);
    config.grid[0] = 8;
    config.grid[1] = config.grid[2] = 1;
    state.configs.push_back(config);
  }
  if (check) state.coverage = {0};
  std::vector<unsigned char> result(static_cast<size_t>(elements) * element_bytes);
  FakeTrials trials(&result, element_bytes, writes, micros, refused);
  std::vector<float> timings;
  std::vector<std::string> reasons;
  auto best = jt_launch::Tune(FakeDriver::Get(), &state, nullptr, trials, &timings, &reasons);
  std::string lines;
  for (const std::string& reason : reasons) lines += reason + "\n";
  std::snprintf(skipped, skipped_capacity, "%s", lines.c_str());
  if (!best.has_value()) {
    std::snprintf(message, capacity, "%s", best.error().message().c_str());
    return -1;
  }
  message[0] = '\0';
  return *best;
}

// The state the handler parsed for the last call whose modules it loaded, as JSON ("" before the first).
const char* jt_fake_launch_state() {
  static std::string copy;
  std::lock_guard<std::mutex> lock(StateMutex());
  copy = LastState();
  return copy.c_str();
}

}  // extern "C"
