// Choosing among the configurations of an autotuned call: the part of jt's GPU launch handler that needs no XLA
// call frame. Each configuration runs once (for a call with `coverage`, twice, into results filled with two
// sentinels in turn: one that leaves an element unwritten is set aside, jt_core.coverage), then those left are timed
// between two events; a configuration the driver refuses to launch is set aside too, as Triton's autotuner skips a
// config whose launch raises OutOfResources. The trials reach the buffers through a TrialRunner, which
// jt_launch_common.h makes over XLA's call frame and jt-core's tests make over host memory.
//
// Everything here has internal linkage (see jt_launch_common.h).

#ifndef JT_LAUNCH_TUNE_H_
#define JT_LAUNCH_TUNE_H_

#include "jt_launch_state.h"

namespace jt_launch {
namespace {

namespace ffi = xla::ffi;

// The bytes the two coverage runs fill a checked result with (jt_core.coverage.SENTINELS): an element that holds
// the first after the first run and the second after the second was written by no program.
constexpr unsigned char kSentinels[2] = {0xA5, 0x5A};
// Host memory a coverage check copies a result through, at most.
constexpr size_t kCheckChunk = size_t{8} << 20;

// A result a configuration must write entirely to be chosen.
struct CheckedBuffer {
  int64_t index;  // the result's index
  void* data;
  size_t bytes;
  size_t element_bytes;
};

// What tuning asks of one call: to launch configuration c on the stream, and the results c must write entirely.
// Apart from XLA's call frame, so that the tuning logic runs without one (jt-core's tests drive it so).
class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  virtual ffi::Error Launch(int c) = 0;
  virtual std::vector<CheckedBuffer> Checked(int c) = 0;
};

// Copies `buffer` to the host in chunks and calls visit(element index, element bytes) for each element.
template <typename Driver, typename Visit>
ffi::Error VisitElements(const Driver* d, const KernelState<Driver>* s, typename Driver::Stream stream,
                         const CheckedBuffer& buffer, std::vector<unsigned char>* chunk, Visit visit) {
  const size_t element = std::max<size_t>(buffer.element_bytes, 1);
  const size_t step = std::max(element, kCheckChunk / element * element);
  for (size_t offset = 0; offset < buffer.bytes; offset += step) {
    const size_t bytes = std::min(step, buffer.bytes - offset);
    chunk->resize(bytes);
    JT_LAUNCH_CHECK(d->CopyToHostAsync(chunk->data(), static_cast<const char*>(buffer.data) + offset, bytes, stream),
                    "copying a result back for the coverage check", "");
    JT_LAUNCH_CHECK(d->StreamSynchronize(stream), Driver::kStreamSynchronize, "");
    for (size_t at = 0; at + element <= bytes; at += element) visit((offset + at) / element, chunk->data() + at);
  }
  return ffi::Error::Success();
}

inline bool AllBytes(const unsigned char* bytes, size_t count, unsigned char value) {
  for (size_t i = 0; i < count; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

// How many elements of each of `buffers` configuration c leaves unwritten: it runs twice, into the buffers filled
// with each sentinel in turn. `launch_failed` says whether an error came from launching c.
template <typename Driver>
ffi::ErrorOr<std::vector<int64_t>> UnwrittenElements(const Driver* d, const KernelState<Driver>* s, int c,
                                                     typename Driver::Stream stream, TrialRunner& runner,
                                                     const std::vector<CheckedBuffer>& buffers, bool* launch_failed) {
  std::vector<std::vector<bool>> first(buffers.size());
  std::vector<int64_t> counts(buffers.size(), 0);
  std::vector<unsigned char> chunk;
  for (int run = 0; run < 2; ++run) {
    for (const CheckedBuffer& buffer : buffers) {
      if (buffer.bytes == 0) continue;
      auto result = d->FillD8Async(buffer.data, kSentinels[run], buffer.bytes, stream);
      if (!Succeeded(d, result)) {
        return ffi::Unexpected(Failure(d, s, "filling a result for the coverage check", result, s->configs[c].label));
      }
    }
    if (ffi::Error error = runner.Launch(c); error.failure()) {
      *launch_failed = true;
      return ffi::Unexpected(error);
    }
    for (size_t b = 0; b < buffers.size(); ++b) {
      const size_t element = std::max<size_t>(buffers[b].element_bytes, 1);
      if (run == 0) first[b].assign(buffers[b].bytes / element, false);
      auto visit = [&](size_t index, const unsigned char* bytes) {
        if (run == 0) {
          first[b][index] = AllBytes(bytes, element, kSentinels[0]);
        } else if (first[b][index] && AllBytes(bytes, element, kSentinels[1])) {
          ++counts[b];
        }
      };
      if (ffi::Error error = VisitElements(d, s, stream, buffers[b], &chunk, visit); error.failure()) {
        return ffi::Unexpected(error);
      }
    }
  }
  return counts;
}

// Times configuration c: one launch, then `iterations` launches between two events. `launch_failed` says whether
// the first launch was refused (the driver would not start it: too many registers or too much shared memory for
// the device, what Triton's OutOfResources says), which sets the configuration aside instead of failing the call.
template <typename Driver>
ffi::ErrorOr<float> TimeConfig(const Driver* d, KernelState<Driver>* s, int c, typename Driver::Stream stream,
                               TrialRunner& runner, int iterations, bool* launch_failed) {
  using Event = typename Driver::Event;
  Event start, stop;
  auto result = d->EventCreate(&start);
  if (!Succeeded(d, result)) return ffi::Unexpected(Failure(d, s, Driver::kEventCreate, result));
  result = d->EventCreate(&stop);
  if (!Succeeded(d, result)) {
    d->EventDestroy(start);
    return ffi::Unexpected(Failure(d, s, Driver::kEventCreate, result));
  }
  struct Destroy {
    const Driver* d;
    Event a, b;
    ~Destroy() {
      d->EventDestroy(a);
      d->EventDestroy(b);
    }
  } destroy{d, start, stop};
  if (ffi::Error e = runner.Launch(c); e.failure()) {
    *launch_failed = true;
    return ffi::Unexpected(e);
  }
  result = d->EventRecord(start, stream);
  if (!Succeeded(d, result)) return ffi::Unexpected(Failure(d, s, Driver::kEventRecord, result));
  for (int i = 0; i < iterations; ++i) {
    if (ffi::Error e = runner.Launch(c); e.failure()) return ffi::Unexpected(e);
  }
  result = d->EventRecord(stop, stream);
  if (!Succeeded(d, result)) return ffi::Unexpected(Failure(d, s, Driver::kEventRecord, result));
  result = d->EventSynchronize(stop);
  if (!Succeeded(d, result)) {
    return ffi::Unexpected(Failure(d, s, "running an autotuning trial", result, s->configs[c].label));
  }
  float ms = 0.0f;
  result = d->EventElapsedTime(&ms, start, stop);
  if (!Succeeded(d, result)) return ffi::Unexpected(Failure(d, s, Driver::kEventElapsedTime, result));
  return ms / static_cast<float>(iterations);
}

// "(64, 2)": a grid as triton_call's caller wrote it, trailing axes of 1 left out.
inline std::string GridText(const KernelConfig& config) {
  int axes = 3;
  while (axes > 1 && config.grid[axes - 1] == 1) --axes;
  std::string text = "(";
  for (int i = 0; i < axes; ++i) text += std::to_string(config.grid[i]) + (axes == 1 ? "," : i + 1 < axes ? ", " : "");
  return text + ")";
}

// The error of a call none of whose configurations can run: each one and why.
template <typename Driver>
ffi::Error NoUsableConfig(const KernelState<Driver>* s, const std::vector<std::string>& skipped, bool unwritten_only) {
  std::string message = std::string(Driver::kLibrary) + ": triton_call '" + s->name +
                        "': no @triton.autotune config can run (";
  for (size_t c = 0; c < s->configs.size(); ++c) {
    message += std::string(c ? "; " : "") + "[" + s->configs[c].label + "]: " + skipped[c];
  }
  message += ")";
  if (unwritten_only) {
    message += ". grid=" + GridText(s->configs[0]) +
               " launches the same programs whichever config runs, and none of them writes every element of the "
               "outputs: pass grid as a callable of the metaparameters, so that each config launches the programs "
               "its block sizes need (grid=lambda meta: (triton.cdiv(n, meta['BLOCK']),)); if the kernel leaves "
               "part of an output unwritten by design, name it in zeroed_outputs= (or alias it to an input with "
               "input_output_aliases=)";
  }
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, message);
}

// Chooses the fastest configuration that can run: each is launched once (for a call with `coverage`, twice into
// sentinel-filled results, and set aside when it leaves an element unwritten), then those left are timed over about
// 10 ms. A configuration that cannot launch or leaves elements unwritten is set aside with one line on stderr;
// `skipped` holds why ("" for the others) and `timings` the milliseconds per launch.
template <typename Driver>
ffi::ErrorOr<int> Tune(const Driver* d, KernelState<Driver>* s, typename Driver::Stream stream, TrialRunner& runner,
                       std::vector<float>* timings, std::vector<std::string>* skipped) {
  const int n = static_cast<int>(s->configs.size());
  const float infinity = std::numeric_limits<float>::infinity();
  timings->assign(n, infinity);
  skipped->assign(n, "");
  bool unwritten_only = true;
  float best_first = infinity;
  for (int c = 0; c < n; ++c) {
    bool launch_failed = false;
    std::vector<CheckedBuffer> buffers = s->coverage.empty() ? std::vector<CheckedBuffer>{} : runner.Checked(c);
    if (!buffers.empty()) {
      auto counts = UnwrittenElements(d, s, c, stream, runner, buffers, &launch_failed);
      if (!counts.has_value()) {
        if (!launch_failed) return ffi::Unexpected(counts.error());
        (*skipped)[c] = "it cannot launch: " + counts.error().message();
        unwritten_only = false;
        continue;
      }
      std::string left;
      for (size_t b = 0; b < buffers.size(); ++b) {
        if ((*counts)[b] == 0) continue;
        const int64_t total = static_cast<int64_t>(buffers[b].bytes / std::max<size_t>(buffers[b].element_bytes, 1));
        left += std::string(left.empty() ? "" : " and ") + std::to_string((*counts)[b]) + " of " +
                std::to_string(total) + " elements of output " + std::to_string(buffers[b].index);
      }
      if (!left.empty()) {
        (*skipped)[c] = "it left " + left + " unwritten";
        continue;
      }
    }
    auto t = TimeConfig(d, s, c, stream, runner, 1, &launch_failed);
    if (!t.has_value()) {
      if (!launch_failed) return ffi::Unexpected(t.error());
      (*skipped)[c] = "it cannot launch: " + t.error().message();
      unwritten_only = false;
      continue;
    }
    best_first = std::min(best_first, *t);
  }
  for (int c = 0; c < n && s->report_skipped; ++c) {
    if (!(*skipped)[c].empty()) {
      std::fprintf(stderr, "%s: triton_call '%s': config [%s] is skipped: %s\n", Driver::kLibrary, s->name.c_str(),
                   s->configs[c].label.c_str(), (*skipped)[c].c_str());
    }
  }
  if (best_first == infinity) return ffi::Unexpected(NoUsableConfig(s, *skipped, unwritten_only));
  // About 10 ms for the fastest candidate, between 1 and 100 launches.
  int iterations = best_first > 0 ? static_cast<int>(10.0f / best_first) : 100;
  iterations = std::clamp(iterations, 1, 100);
  int best = -1;
  for (int c = 0; c < n; ++c) {
    if (!(*skipped)[c].empty()) continue;
    bool launch_failed = false;
    auto t = TimeConfig(d, s, c, stream, runner, iterations, &launch_failed);
    if (!t.has_value()) return ffi::Unexpected(t.error());
    (*timings)[c] = *t;
    if (best < 0 || *t < (*timings)[best]) best = c;
  }
  return best;
}

}  // namespace
}  // namespace jt_launch

#endif  // JT_LAUNCH_TUNE_H_
