// The driver-neutral part of jt's GPU launch handlers (XLA FFI): the per-call state, the attribute schema, the
// parameter layout, module loading per context, autotuning on the real buffers with aliased buffers restored, the
// remembered tuning winners, and the three handler stages. jt-cuda and jt-rocm each include it once, from a .cc
// file that supplies a driver (the runtime's entry points, loaded with dlopen) and defines the handler symbols
// with JT_LAUNCH_DEFINE_HANDLERS. jt_core.native puts this folder on the include path of every library it builds.
//
// The attributes a call carries are described in jt_launch_state.h.
//
// A driver is a struct, one per runtime, that provides:
//   types        Result, Stream, Context, Function, Event
//   constants    kSuccess; kLibrary (the library's name: prefix of messages, writer of tuning records);
//                kGraphCapture ("CUDA graph capture"); the entry points' names for messages: kMemsetD8Async,
//                kStreamSynchronize, kEventCreate, kEventRecord, kEventElapsedTime
//   static const Driver* Get()    loads the runtime once per process
//   std::string error             why the runtime cannot be used ("" when it can)
//   std::string ErrorText(Result) const
//   bool Capturing(Stream) const  whether the stream is being captured into a graph
//   ffi::ErrorOr<Context> CurrentContext(const KernelState<Driver>&, Stream) const
//   std::vector<Context> DeviceContexts() const    the contexts to load modules into when a call is instantiated
//   ffi::Error LoadFunctions(const KernelState<Driver>&, Context, std::vector<Function>*) const
//                                  loads every configuration's module into a context, in configuration order
//   ffi::Error LaunchKernel(const KernelState<Driver>&, const KernelConfig&, Function, Stream, void** params) const
//   Result MemsetD8Async(void*, size_t, Stream) const;  FillD8Async(void*, unsigned char, size_t, Stream) const;
//          CopyToHostAsync(void* host, const void* device, size_t,
//          Stream) const;  CopyToDeviceAsync(void* device, const void* host, size_t, Stream) const;
//          StreamSynchronize(Stream) const;  EventCreate(Event*) const;  EventRecord(Event, Stream) const;
//          EventSynchronize(Event) const;  EventElapsedTime(float* ms, Event, Event) const;  EventDestroy(Event) const
//   optional     ffi::Error EncodeTensorMap(const KernelState<Driver>&, const KernelConfig&, const int64_t* record,
//                                           void* address, void* map) const    fills a kTensorMapBytes map
//
// Stages:
//   instantiate  parses the attributes into a KernelState (and, for the preloaded variant, loads the modules into
//                every device's context, so that a single-config call needs no initialize stage);
//   initialize   loads the modules for the stream's context and, for several configurations, times each on the
//                real buffers and keeps the fastest that can launch and, for a call with `coverage`, writes every
//                element of the checked results (never under graph capture);
//   execute      zeroes the requested outputs and launches; cheap and safe to capture into a graph, which is why the
//                handlers are registered as command-buffer compatible.
//
// Everything here has internal linkage: each handler library holds its own copy, so two of them loaded into one
// process never bind to each other's symbols.

#ifndef JT_LAUNCH_COMMON_H_
#define JT_LAUNCH_COMMON_H_

#include "jt_launch_state.h"
#include "jt_launch_tune.h"

namespace jt_launch {
namespace {

namespace ffi = xla::ffi;

// ---- modules per context ---------------------------------------------------------------------------------------

// How many code objects this library has loaded into a context (each once per context).
inline std::atomic<int64_t>& ModulesLoaded() {
  static std::atomic<int64_t> count{0};
  return count;
}

// The functions of `s`'s configurations in `context`: loaded once per process for each code object (binaries are
// interned), so that the calls of one kernel at many call sites share one module.
template <typename Driver>
ffi::Error SharedFunctions(const Driver* d, const KernelState<Driver>& s, typename Driver::Context context,
                           std::vector<typename Driver::Function>* functions) {
  using Key = std::tuple<typename Driver::Context, const std::string*, std::string>;
  static std::mutex mutex;
  static std::map<Key, typename Driver::Function> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  functions->clear();
  for (const KernelConfig& config : s.configs) {
    auto it = loaded.find(Key{context, config.binary.get(), config.symbol});
    if (it == loaded.end()) break;
    functions->push_back(it->second);
  }
  if (functions->size() == s.configs.size()) return ffi::Error::Success();
  functions->clear();
  if (ffi::Error error = d->LoadFunctions(s, context, functions); error.failure()) return error;
  ModulesLoaded().fetch_add(static_cast<int64_t>(s.configs.size()), std::memory_order_relaxed);
  for (size_t c = 0; c < s.configs.size(); ++c) {
    loaded.emplace(Key{context, s.configs[c].binary.get(), s.configs[c].symbol}, (*functions)[c]);
  }
  return ffi::Error::Success();
}

template <typename Driver>
ffi::Error LoadForContext(const Driver* d, KernelState<Driver>* s, typename Driver::Context context,
                          ContextFunctions<Driver>** out) {
  std::lock_guard<std::mutex> lock(s->mutex);
  for (auto& entry : s->contexts) {
    if (entry->context == context) {
      *out = entry.get();
      return ffi::Error::Success();
    }
  }
  auto entry = std::make_unique<ContextFunctions<Driver>>();
  entry->context = context;
  if (ffi::Error error = SharedFunctions(d, *s, context, &entry->functions); error.failure()) return error;
  *out = entry.get();
  s->contexts.push_back(std::move(entry));
  return ffi::Error::Success();
}

// The functions loaded for the current context; loads them unless the stream is being captured into a graph.
template <typename Driver>
ffi::ErrorOr<ContextFunctions<Driver>*> FunctionsFor(const Driver* d, KernelState<Driver>* s,
                                                     typename Driver::Stream stream) {
  JT_ASSIGN(context, d->CurrentContext(*s, stream));
  ContextFunctions<Driver>* last = s->last.load(std::memory_order_acquire);
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
  if (d->Capturing(stream)) {
    return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                                      std::string(Driver::kLibrary) + ": triton_call '" + s->name + "' runs under " +
                                          Driver::kGraphCapture +
                                          " in a context whose module was not loaded by the initialize stage"));
  }
  ContextFunctions<Driver>* entry = nullptr;
  if (ffi::Error error = LoadForContext(d, s, context, &entry); error.failure()) return ffi::Unexpected(error);
  s->last.store(entry, std::memory_order_release);
  return entry;
}

// Loads the modules into every device's context (the contexts XLA runs on), so that a call with a single config
// needs no initialize stage: XLA then makes one handler call per kernel per execution instead of two. Contexts
// that cannot be loaded now are loaded by the first execution outside graph capture.
template <typename Driver>
void PreloadContexts(const Driver* d, KernelState<Driver>* s) {
  if (!d->error.empty()) return;
  for (typename Driver::Context context : d->DeviceContexts()) {
    ContextFunctions<Driver>* entry = nullptr;
    if (LoadForContext(d, s, context, &entry).failure()) continue;
  }
}

// ---- launching -------------------------------------------------------------------------------------------------

constexpr size_t kMaxInlineParams = 64;

// A configuration's kernel parameters for one call: params[i] points at the i-th parameter's value (operands,
// results, scalars, then the global and profile scratch pointers Triton appends); values[i] is the device address
// behind a buffer parameter. Built in place (params point into it), so it is neither copied nor moved.
struct KernelParams {
  size_t count = 0;  // parameters, the two scratch pointers included
  void* inline_values[kMaxInlineParams + 2];
  void* inline_params[kMaxInlineParams + 2];
  std::vector<void*> heap_values, heap_params;
  std::vector<TensorMapStorage> maps;
  void** values = inline_values;
  void** params = inline_params;
  void* scratch = nullptr;
  void* profile_scratch = nullptr;

  KernelParams() = default;
  KernelParams(const KernelParams&) = delete;
  KernelParams& operator=(const KernelParams&) = delete;
};

template <typename Driver>
ffi::Error BuildParams(const Driver* d, KernelState<Driver>* s, const KernelConfig& config, ffi::RemainingArgs& args,
                       ffi::RemainingRets& rets, KernelParams* out) {
  const size_t n = s->param_kinds.size();
  out->count = n + 2;
  if (n + 2 > kMaxInlineParams) {
    out->heap_values.resize(n + 2);
    out->heap_params.resize(n + 2);
    out->values = out->heap_values.data();
    out->params = out->heap_params.data();
  }
  void** values = out->values;
  void** params = out->params;
  out->maps.resize(s->num_tensor_maps);
  size_t next_map = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t index = s->param_indices[i];
    values[i] = nullptr;
    switch (s->param_kinds[i]) {
      case kTensorMap: {
        const int64_t* record = config.tensor_maps.data() + index * kTensorMapRecord;
        void* address = nullptr;
        if (record[0] == kResult) {
          auto buffer = rets.get<ffi::AnyBuffer>(record[1]);
          if (!buffer.has_value()) return buffer.error();
          address = (*buffer)->untyped_data();
        } else {
          auto buffer = args.get<ffi::AnyBuffer>(record[1]);
          if (!buffer.has_value()) return buffer.error();
          address = buffer->untyped_data();
        }
        if constexpr (EncodesTensorMaps<Driver>::value) {
          void* map = out->maps[next_map++].bytes;
          if (ffi::Error error = d->EncodeTensorMap(*s, config, record + 2, address, map); error.failure()) {
            return error;
          }
          params[i] = map;
        } else {
          return ffi::Error(ffi::ErrorCode::kUnimplemented, std::string(Driver::kLibrary) + ": triton_call '" +
                                                                s->name + "' passes a host-side tensor descriptor, "
                                                                "which this runtime's handler cannot encode");
        }
        break;
      }
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
  if (config.scratch_per_program > 0 && s->scratch_result >= 0) {
    auto buffer = rets.get<ffi::AnyBuffer>(s->scratch_result);
    if (!buffer.has_value()) return buffer.error();
    uintptr_t base = reinterpret_cast<uintptr_t>((*buffer)->untyped_data());
    const uintptr_t align = config.scratch_align;
    out->scratch = reinterpret_cast<void*>((base + align - 1) / align * align);
  }
  values[n] = out->scratch;
  values[n + 1] = out->profile_scratch;
  params[n] = &out->scratch;
  params[n + 1] = &out->profile_scratch;
  return ffi::Error::Success();
}

inline uint64_t Programs(const KernelConfig& config) {
  return uint64_t{config.grid[0]} * config.grid[1] * config.grid[2];
}

// Builds configuration c's parameters, zeroes the requested outputs and launches it.
template <typename Driver>
ffi::Error Launch(const Driver* d, KernelState<Driver>* s, int c, typename Driver::Function function,
                  typename Driver::Stream stream, ffi::RemainingArgs& args, ffi::RemainingRets& rets) {
  const KernelConfig& config = s->configs[c];
  KernelParams kernel_params;
  if (ffi::Error error = BuildParams(d, s, config, args, rets, &kernel_params); error.failure()) return error;
  for (int64_t index : config.zeroed) {
    auto buffer = rets.get<ffi::AnyBuffer>(index);
    if (!buffer.has_value()) return buffer.error();
    const size_t bytes = (*buffer)->size_bytes();
    if (bytes > 0) {
      JT_LAUNCH_CHECK(d->MemsetD8Async((*buffer)->untyped_data(), bytes, stream),
                      std::string(Driver::kMemsetD8Async) + " (zeroed_outputs)", config.label);
    }
  }
  if (Programs(config) == 0) return ffi::Error::Success();
  return d->LaunchKernel(*s, config, function, stream, kernel_params.params);
}

// ---- autotuning (the choice itself: jt_launch_tune.h) ---------------------------------------------------------

// The trials of a call XLA runs: its configurations launched on XLA's buffers.
template <typename Driver>
class FrameTrials : public TrialRunner {
 public:
  FrameTrials(const Driver* d, KernelState<Driver>* s, ContextFunctions<Driver>* functions,
              typename Driver::Stream stream, ffi::RemainingArgs& args, ffi::RemainingRets& rets)
      : d_(d), s_(s), functions_(functions), stream_(stream), args_(args), rets_(rets) {}

  ffi::Error Launch(int c) override {
    return jt_launch::Launch(d_, s_, c, functions_->functions[c], stream_, args_, rets_);
  }

  std::vector<CheckedBuffer> Checked(int c) override {
    std::vector<CheckedBuffer> buffers;
    const std::vector<int64_t>& zeroed = s_->configs[c].zeroed;
    for (int64_t index : s_->coverage) {
      if (std::find(zeroed.begin(), zeroed.end(), index) != zeroed.end()) continue;
      auto buffer = rets_.get<ffi::AnyBuffer>(index);
      if (!buffer.has_value()) continue;
      const size_t count = (*buffer)->element_count();
      const size_t bytes = (*buffer)->size_bytes();
      buffers.push_back({index, (*buffer)->untyped_data(), bytes, count ? bytes / count : 1});
    }
    return buffers;
  }

 private:
  const Driver* d_;
  KernelState<Driver>* s_;
  ContextFunctions<Driver>* functions_;
  typename Driver::Stream stream_;
  ffi::RemainingArgs& args_;
  ffi::RemainingRets& rets_;
};

// Tunes on the real buffers and keeps the winner. Buffers shared by an input and an output are saved first and
// restored afterwards, since the trials overwrite them.
template <typename Driver>
ffi::Error Autotune(const Driver* d, KernelState<Driver>* s, ContextFunctions<Driver>* functions,
                    typename Driver::Stream stream, ffi::RemainingArgs& args, ffi::RemainingRets& rets) {
  static std::mutex tuning;
  std::lock_guard<std::mutex> lock(tuning);
  if (s->chosen.load() >= 0) return ffi::Error::Success();
  std::vector<std::pair<void*, std::vector<char>>> saved;
  for (int64_t index : s->restore) {
    auto buffer = rets.get<ffi::AnyBuffer>(index);
    if (!buffer.has_value()) return buffer.error();
    std::vector<char> copy((*buffer)->size_bytes());
    if (!copy.empty()) {
      JT_LAUNCH_CHECK(d->CopyToHostAsync(copy.data(), (*buffer)->untyped_data(), copy.size(), stream),
                      "saving an aliased buffer before autotuning", "");
    }
    saved.emplace_back((*buffer)->untyped_data(), std::move(copy));
  }
  JT_LAUNCH_CHECK(d->StreamSynchronize(stream), Driver::kStreamSynchronize, "");
  FrameTrials<Driver> trials(d, s, functions, stream, args, rets);
  std::vector<float> timings;
  std::vector<std::string> skipped;
  auto best = Tune(d, s, stream, trials, &timings, &skipped);
  for (auto& [pointer, copy] : saved) {
    if (!copy.empty()) {
      JT_LAUNCH_CHECK(d->CopyToDeviceAsync(pointer, copy.data(), copy.size(), stream),
                      "restoring an aliased buffer after autotuning", "");
    }
  }
  JT_LAUNCH_CHECK(d->StreamSynchronize(stream), Driver::kStreamSynchronize, "");
  if (!best.has_value()) return best.error();
  s->chosen.store(*best);
  RememberConfig(Driver::kLibrary, s->tuning_file, *best, timings, skipped);
  return ffi::Error::Success();
}

// ---- the stages ------------------------------------------------------------------------------------------------

template <typename Driver>
ffi::ErrorOr<std::unique_ptr<KernelState<Driver>>> InstantiatePreloaded(ffi::Dictionary attrs) {
  auto state = Instantiate<Driver>(attrs);
  if (!state.has_value()) return state;
  PreloadContexts(Driver::Get(), state->get());
  return state;
}

template <typename Driver>
ffi::Error Initialize(typename Driver::Stream stream, KernelState<Driver>* s, ffi::RemainingArgs args,
                      ffi::RemainingRets rets, ffi::Dictionary) {
  const Driver* d = Driver::Get();
  if (!d->error.empty()) {
    return ffi::Error(ffi::ErrorCode::kUnavailable, std::string(Driver::kLibrary) + ": " + d->error);
  }
  JT_ASSIGN_OR_FAIL(functions, FunctionsFor(d, s, stream));
  if (s->chosen.load(std::memory_order_acquire) < 0 && !d->Capturing(stream)) {
    return Autotune(d, s, functions, stream, args, rets);
  }
  return ffi::Error::Success();
}

template <typename Driver>
ffi::Error Execute(typename Driver::Stream stream, KernelState<Driver>* s, ffi::RemainingArgs args,
                   ffi::RemainingRets rets, ffi::Dictionary) {
  const Driver* d = Driver::Get();
  if (!d->error.empty()) {
    return ffi::Error(ffi::ErrorCode::kUnavailable, std::string(Driver::kLibrary) + ": " + d->error);
  }
  JT_ASSIGN_OR_FAIL(functions, FunctionsFor(d, s, stream));
  int chosen = s->chosen.load(std::memory_order_acquire);
  if (chosen < 0) {
    if (d->Capturing(stream)) {
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                        std::string(Driver::kLibrary) + ": triton_call '" + s->name +
                            "' has several autotuning configs and was not tuned before " + Driver::kGraphCapture +
                            "; its initialize stage did not run");
    }
    if (ffi::Error e = Autotune(d, s, functions, stream, args, rets); e.failure()) return e;
    chosen = s->chosen.load();
  }
  return Launch(d, s, chosen, functions->functions[chosen], stream, args, rets);
}

// The XLA FFI API of the XLA runtime that calls this library, seen in the call frames XLA passes: when it
// registers a handler, XLA calls it once with a metadata frame. jt_launch_record.h registers further targets
// through it.
inline std::atomic<const XLA_FFI_Api*>& SeenApi() {
  static std::atomic<const XLA_FFI_Api*> api{nullptr};
  return api;
}

inline void NoteApi(const XLA_FFI_CallFrame* frame) {
  if (frame != nullptr && frame->api != nullptr && SeenApi().load(std::memory_order_relaxed) == nullptr) {
    SeenApi().store(frame->api, std::memory_order_release);
  }
}

}  // namespace
}  // namespace jt_launch

// Defines the exported C symbol of one handler stage: notes the XLA FFI API of its caller, then runs the stage.
#define JT_LAUNCH_DEFINE_STAGE(symbol, impl, ...)                              \
  XLA_FFI_DEFINE_HANDLER(symbol##_stage, impl, __VA_ARGS__);                   \
  extern "C" XLA_FFI_Error* symbol(XLA_FFI_CallFrame* call_frame) {            \
    ::jt_launch::NoteApi(call_frame);                                          \
    return symbol##_stage(call_frame);                                         \
  }

// Defines a handler library's exported symbols for `Driver`, named after `prefix` (e.g. jt_cuda_launch):
//   <prefix>_instantiate, <prefix>_instantiate_preloaded, <prefix>_initialize, <prefix>_execute
//       the XLA FFI stage handlers (initialize and execute command-buffer compatible);
//   <prefix>_state_type_id(), <prefix>_state_type_info()
//       the state type's id and info, registered with XLA from Python (jax.ffi.register_ffi_type);
//   <prefix>_driver_error()
//       why the runtime cannot be used in this process, or an empty string when it can;
//   <prefix>_modules_loaded()
//       how many code objects the library has loaded into a context so far.
// What the initialize and execute stages take: the stream, the kernel's state, the buffers and the attributes.
#define JT_LAUNCH_KERNEL_BINDING(binding, Driver)                      \
  binding.Ctx<::xla::ffi::PlatformStream<Driver::Stream>>()            \
      .Ctx<::xla::ffi::State<::jt_launch::KernelState<Driver>>>()      \
      .RemainingArgs()                                                 \
      .RemainingRets()                                                 \
      .Attrs<::xla::ffi::Dictionary>()

#define JT_LAUNCH_DEFINE_HANDLERS(prefix, Driver)                                                               \
  JT_LAUNCH_DEFINE_STAGE(prefix##_instantiate, ::jt_launch::Instantiate<Driver>,                              \
                         ::xla::ffi::Ffi::BindInstantiate().Attrs<::xla::ffi::Dictionary>());                 \
  JT_LAUNCH_DEFINE_STAGE(prefix##_instantiate_preloaded, ::jt_launch::InstantiatePreloaded<Driver>,           \
                         ::xla::ffi::Ffi::BindInstantiate().Attrs<::xla::ffi::Dictionary>());                 \
  JT_LAUNCH_DEFINE_STAGE(prefix##_initialize, ::jt_launch::Initialize<Driver>,                                \
                         JT_LAUNCH_KERNEL_BINDING(::xla::ffi::Ffi::BindInitialize(), Driver),                 \
                         {::xla::ffi::Traits::kCmdBufferCompatible});                                         \
  JT_LAUNCH_DEFINE_STAGE(prefix##_execute, ::jt_launch::Execute<Driver>,                                      \
                         JT_LAUNCH_KERNEL_BINDING(::xla::ffi::Ffi::Bind(), Driver),                           \
                         {::xla::ffi::Traits::kCmdBufferCompatible});                                         \
  extern "C" void* prefix##_state_type_id() { return &::jt_launch::KernelState<Driver>::id; }                  \
  extern "C" void* prefix##_state_type_info() {                                                               \
    static XLA_FFI_TypeInfo info = ::xla::ffi::MakeTypeInfo<::jt_launch::KernelState<Driver>>();               \
    return &info;                                                                                             \
  }                                                                                                           \
  extern "C" const char* prefix##_driver_error() { return Driver::Get()->error.c_str(); }                     \
  extern "C" int64_t prefix##_modules_loaded() { return ::jt_launch::ModulesLoaded().load(); }

#endif  // JT_LAUNCH_COMMON_H_
