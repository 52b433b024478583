// The record stage of jt's GPU launch handler: inside XLA's command buffers (CUDA graphs), the call becomes one
// kernel node that XLA adds itself, through the XLA FFI record extension (xla/ffi/api/record_api.h), instead of a
// child graph that XLA records by capturing the execute stage on a stream.
//
// Without a record stage XLA records a custom call by capturing its execute stage on a stream, again whenever the
// call's buffers move, and puts the captured graph into the command buffer as a child graph node. With it, XLA adds
// and updates a kernel node itself, as for its own kernels. Replaying either costs the same on an H200 (measured:
// benchmarks/RESULTS.md); a kernel node is also what a programmatic dependent launch needs, since a kernel captured
// alone into a child graph has no predecessor inside its graph to overlap with.
//
// A driver that includes this header adds to the interface of jt_launch_common.h:
//   constants    kRecordFormat (the code objects' xla::ffi::SourceFormat, e.g. kCubin)
// and its .cc file defines the exported symbols with JT_LAUNCH_DEFINE_RECORD_HANDLERS after
// JT_LAUNCH_DEFINE_HANDLERS.
//
// A programmatic-dependent configuration (a kernel that waits for its prerequisite grids: KernelConfig::pdl) is
// recorded as a kernel node that uses PDL, so that XLA may start it while the kernel before it drains, as it does
// for its own kernels. Calls the record stage cannot express as one kernel node (cooperative launches, clusters,
// zeroed outputs, host-side tensor descriptors, an empty grid, an untuned call) ask XLA to fall back to stream
// capture of the execute stage, as for a handler without a record stage.
//
// XLA's GPU plugin registers handlers through PJRT with four stages (no record stage), so the targets with a
// record stage are registered through the XLA FFI API itself: the API of the runtime that called this library
// (jt_launch::SeenApi, noted by every stage; XLA calls a handler with a metadata frame when it registers it).
//
// Builds without the record extension (XLA FFI headers without record_api.h, or with a version of it this file
// was not written against) define no record symbols; jt then keeps to the targets without a record stage.

#ifndef JT_LAUNCH_RECORD_H_
#define JT_LAUNCH_RECORD_H_

#include "jt_launch_common.h"

// The record extension is still changing: only the versions this header was written against are used.
#if defined(__has_include)
#if __has_include("xla/ffi/api/record_api.h")
#include "xla/ffi/api/record_api.h"
#if XLA_FFI_Extension_Record_MajorVersion == 0 && \
    (XLA_FFI_Extension_Record_MinorVersion == 1 || XLA_FFI_Extension_Record_MinorVersion == 2)
#define JT_LAUNCH_HAS_RECORD 1
#endif
#endif
#endif

#ifdef JT_LAUNCH_HAS_RECORD

namespace jt_launch {
namespace {

namespace ffi = xla::ffi;

using RecordContext = ffi::internal::RecordContextBase<ffi::internal::ErrorPolicy>;
using RecordExtension = ffi::internal::RecordExtensionBase<RecordContext>;

// What the record stage did, for tests and benchmarks: kernel nodes created, kernel nodes updated (new buffer
// addresses), fallbacks to stream capture.
struct RecordCounts {
  std::atomic<int64_t> created{0};
  std::atomic<int64_t> updated{0};
  std::atomic<int64_t> captured{0};
};

inline RecordCounts& Counts() {
  static RecordCounts counts;
  return counts;
}

// Whether configuration `config` of `s` is one kernel node: no launch attribute but PDL, nothing to do before the
// launch, parameters that are buffer addresses and scalars.
template <typename Driver>
bool Recordable(const KernelState<Driver>& s, const KernelConfig& config) {
  constexpr uint32_t kMaxDim = static_cast<uint32_t>(std::numeric_limits<int32_t>::max());
  return !config.cooperative && config.num_ctas == 1 && config.zeroed.empty() &&
         s.num_tensor_maps == 0 && Programs(config) > 0 && config.grid[0] <= kMaxDim && config.grid[1] <= kMaxDim &&
         config.grid[2] <= kMaxDim && config.block_x <= kMaxDim;
}

template <typename Driver>
ffi::Error Record(RecordContext record, KernelState<Driver>* s, ffi::RemainingArgs args, ffi::RemainingRets rets,
                  ffi::Dictionary) {
  const Driver* d = Driver::Get();
  if (!d->error.empty()) {
    return ffi::Error(ffi::ErrorCode::kUnavailable, std::string(Driver::kLibrary) + ": " + d->error);
  }
  const int chosen = s->chosen.load(std::memory_order_acquire);
  if (chosen < 0 || !Recordable(*s, s->configs[chosen])) {
    Counts().captured.fetch_add(1, std::memory_order_relaxed);
    return record.RequestStreamCapture();
  }
  const KernelConfig& config = s->configs[chosen];
  KernelParams kernel_params;
  if (ffi::Error error = BuildParams(d, s, config, args, rets, &kernel_params); error.failure()) return error;
  // Scalars travel in their 8-byte slots: XLA copies the slot and passes its address, and the driver reads the
  // parameter's own width from it (the slots are little-endian), as for the execute stage.
  const size_t n = s->param_kinds.size();
  std::vector<ffi::KernelArg> kernel_args;
  kernel_args.reserve(kernel_params.count);
  for (size_t i = 0; i < kernel_params.count; ++i) {
    if (i < n && s->param_kinds[i] == kScalar) {
      kernel_args.emplace_back(ffi::HostValue{kernel_params.params[i], 8});
    } else {
      kernel_args.emplace_back(ffi::DevicePointer{kernel_params.values[i]});
    }
  }
  if (record.action() == ffi::RecordAction::kCreate) {
    const XLA_FFI_LaunchDims dims{
        {static_cast<int32_t>(config.grid[0]), static_cast<int32_t>(config.grid[1]),
         static_cast<int32_t>(config.grid[2])},
        {static_cast<int32_t>(config.block_x), 1, 1},
        {0, 0, 0},
    };
    auto command = record.CreateLaunch(config.symbol.c_str(), config.binary->data(), config.binary->size(),
                                       Driver::kRecordFormat, dims, config.shared_mem, /*uses_pdl=*/config.pdl,
                                       kernel_args);
    if (!command.has_value()) return command.error();
    Counts().created.fetch_add(1, std::memory_order_relaxed);
    return ffi::Error::Success();
  }
  auto commands = record.commands();
  if (commands.size() != 1) {
    return ffi::Error(ffi::ErrorCode::kInternal, std::string(Driver::kLibrary) + ": triton_call '" + s->name +
                                                     "': expected the one kernel node recorded for it, found " +
                                                     std::to_string(commands.size()));
  }
  Counts().updated.fetch_add(1, std::memory_order_relaxed);
  return record.UpdateLaunch(commands[0], kernel_args);
}

// Registers `bundles` under `names` on `platform` through the XLA FFI API seen so far: returns "" when every
// target was registered, why not when XLA refused one, and nullptr when XLA has not called this library yet (its
// API is unknown until then).
inline const char* RegisterWithSeenApi(const char* const* names, const XLA_FFI_Handler_Bundle* bundles, int count,
                                       const char* platform) {
  static std::string message;
  const XLA_FFI_Api* api = SeenApi().load(std::memory_order_acquire);
  if (api == nullptr) return nullptr;
  for (int i = 0; i < count; ++i) {
    XLA_FFI_Error* error = ffi::Ffi::RegisterStaticHandler(api, names[i], platform, bundles[i],
                                                           XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE);
    if (error != nullptr) {
      message = std::string("registering ") + names[i] + ": " +
                ffi::internal::ErrorPolicy::TakeError(api, error).message();
      return message.c_str();
    }
  }
  message.clear();
  return message.c_str();
}

}  // namespace
}  // namespace jt_launch

// Defines, after JT_LAUNCH_DEFINE_HANDLERS:
//   <prefix>_record
//       the record stage;
//   <prefix>_register_record(target, preloaded_target, platform)
//       registers the two targets with a record stage (all stages, and no initialize stage) through the XLA FFI
//       API of the runtime that called this library; returns "" once registered, why not, or nullptr while XLA
//       has not called the library yet;
//   <prefix>_record_counts(out, capacity)
//       kernel nodes created, kernel nodes updated, fallbacks to stream capture; returns how many it wrote.
#define JT_LAUNCH_DEFINE_RECORD_HANDLERS(prefix, Driver)                                                        \
  JT_LAUNCH_DEFINE_STAGE(prefix##_record, ::jt_launch::Record<Driver>,                                        \
                         ::xla::ffi::Ffi::BindRecord()                                                        \
                             .Ctx<::xla::ffi::Extension<::jt_launch::RecordExtension>>()                      \
                             .Ctx<::xla::ffi::State<::jt_launch::KernelState<Driver>>>()                      \
                             .RemainingArgs()                                                                 \
                             .RemainingRets()                                                                 \
                             .Attrs<::xla::ffi::Dictionary>(),                                                \
                         {::xla::ffi::Traits::kCmdBufferCompatible});                                         \
  extern "C" const char* prefix##_register_record(const char* target, const char* preloaded_target,            \
                                                  const char* platform) {                                     \
    const char* const names[] = {target, preloaded_target};                                                   \
    const XLA_FFI_Handler_Bundle bundles[] = {                                                                \
        {prefix##_instantiate, nullptr, prefix##_initialize, prefix##_execute, prefix##_record},              \
        {prefix##_instantiate_preloaded, nullptr, nullptr, prefix##_execute, prefix##_record},                \
    };                                                                                                        \
    return ::jt_launch::RegisterWithSeenApi(names, bundles, 2, platform);                                     \
  }                                                                                                           \
  extern "C" int prefix##_record_counts(int64_t* out, int capacity) {                                         \
    const int64_t values[] = {::jt_launch::Counts().created.load(), ::jt_launch::Counts().updated.load(),      \
                              ::jt_launch::Counts().captured.load()};                                         \
    const int n = 3;                                                                                          \
    for (int i = 0; i < n && i < capacity; ++i) out[i] = values[i];                                           \
    return n;                                                                                                 \
  }

#else  // no record extension in these XLA FFI headers

#define JT_LAUNCH_DEFINE_RECORD_HANDLERS(prefix, Driver)

#endif  // JT_LAUNCH_HAS_RECORD

#endif  // JT_LAUNCH_RECORD_H_
