// jt's CPU handlers: an XLA FFI custom call that runs a Triton kernel with Triton's interpreter, and one that checks
// a compiled CPU kernel's accesses after it ran (naming a stray one through the interpreter).
//
// The handler holds no kernel state of its own. Each custom call carries an integer attribute `call_id` naming
// a call registered in a process-wide Python registry when the call was lowered; at run time the handler hands
// that id and the addresses and byte sizes of XLA's operand and result buffers to a dispatcher function that
// Python installed when it loaded this library (a ctypes callback, which takes the GIL itself). The dispatcher
// runs the interpreter writing straight into the result buffers and returns a status code with a message, which
// becomes an ffi::Error: a failing kernel is a clean XLA runtime error, never an exception crossing C++ frames.
//
// Built at first use against the XLA FFI headers of the installed jaxlib (jax.ffi.include_dir()); it needs no
// Python headers, so one build serves every Python ABI.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

extern "C" {
// Returns 0 on success, otherwise an XLA_FFI_Error_Code value with a NUL-terminated message in `message`.
typedef int32_t (*JtCpuDispatcher)(int64_t call_id, int64_t num_inputs, void* const* inputs,
                                   const int64_t* input_bytes, int64_t num_outputs, void* const* outputs,
                                   const int64_t* output_bytes, char* message, int64_t message_capacity);
}

namespace {

constexpr int32_t kAbiVersion = 3;
constexpr int64_t kMessageCapacity = 16384;

std::atomic<JtCpuDispatcher> g_dispatcher{nullptr};

ffi::ErrorCode ToErrorCode(int32_t code) {
  if (code <= 0 || code > static_cast<int32_t>(ffi::ErrorCode::kUnauthenticated)) {
    return ffi::ErrorCode::kInternal;
  }
  return static_cast<ffi::ErrorCode>(code);
}

// Runs the call registered under `call_id` through the dispatcher: its operands are `args` from `first_input` on,
// its results `rets`. Returns the dispatcher's status code, with its message in `text`.
ffi::ErrorOr<int32_t> Dispatch(JtCpuDispatcher dispatcher, int64_t call_id, ffi::RemainingArgs args,
                               size_t first_input, ffi::RemainingRets rets, std::string* text) {
  const size_t num_inputs = args.size() - first_input;
  const size_t num_outputs = rets.size();
  std::vector<void*> pointers(num_inputs + num_outputs);
  std::vector<int64_t> sizes(num_inputs + num_outputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> buffer = args.get<ffi::AnyBuffer>(first_input + i);
    if (buffer.has_error()) return ffi::Unexpected<ffi::Error>(buffer.error());
    pointers[i] = buffer->untyped_data();
    sizes[i] = static_cast<int64_t>(buffer->size_bytes());
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> buffer = rets.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return ffi::Unexpected<ffi::Error>(buffer.error());
    pointers[num_inputs + i] = (*buffer)->untyped_data();
    sizes[num_inputs + i] = static_cast<int64_t>((*buffer)->size_bytes());
  }
  char message[kMessageCapacity];
  message[0] = '\0';
  int32_t code = dispatcher(call_id, static_cast<int64_t>(num_inputs), pointers.data(), sizes.data(),
                            static_cast<int64_t>(num_outputs), pointers.data() + num_inputs,
                            sizes.data() + num_inputs, message, kMessageCapacity);
  message[kMessageCapacity - 1] = '\0';
  text->assign(message, strnlen(message, kMessageCapacity));
  return code;
}

ffi::Error Execute(int64_t call_id, std::string_view name, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  JtCpuDispatcher dispatcher = g_dispatcher.load(std::memory_order_acquire);
  if (dispatcher == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jt CPU launcher: triton_call '" + std::string(name) +
                          "' ran after the Python dispatcher was removed (interpreter shutting down)");
  }
  std::string text;
  ffi::ErrorOr<int32_t> code = Dispatch(dispatcher, call_id, args, 0, rets, &text);
  if (code.has_error()) return code.error();
  if (*code == 0) return ffi::Error::Success();
  if (text.empty()) text = "jt CPU launcher: triton_call '" + std::string(name) + "' failed";
  return ffi::Error(ToErrorCode(*code), text);
}

// The faults a compiled kernel reports, bits of its flag (jt_core.translation.memory: STRAYED, SPINS).
constexpr uint8_t kStrayed = 1;
constexpr uint8_t kSpins = 2;

// A compiled kernel's check. Its arguments are a flag (the kernel's faults: kStrayed when one of its accesses strayed
// outside its buffer, kSpins when one of its programs waited in a loop that could never end), the kernel's outputs
// (aliased to the results: they pass through untouched) and its operands. A program that spins fails the check at
// once (Triton's interpreter would wait forever). When an access strayed, the call registered under `call_id` runs
// again in Triton's interpreter on the same operands, into the results, through the dispatcher; the interpreter
// stops at the first stray access and names it, and that error is the check's.
ffi::Error Check(int64_t call_id, std::string_view name, ffi::AnyBuffer flag, ffi::RemainingArgs args,
                 ffi::RemainingRets rets) {
  uint8_t faults = 0;
  const uint8_t* bytes = static_cast<const uint8_t*>(flag.untyped_data());
  for (size_t i = 0; i < flag.size_bytes(); ++i) faults |= bytes[i];
  if (faults & kSpins) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "KernelRuntimeError: triton_call '" + std::string(name) +
                          "' never finishes: a program waits in a while loop whose condition stores (a spin lock, "
                          "`while tl.atomic_cas(lock, 0, 1) == 1`) for a change that no program makes. The compiled "
                          "path runs the programs one after another, so a lock that a program still holds when it "
                          "ends (or that starts taken) is never released; release every lock before the program "
                          "ends (tl.atomic_xchg(lock, 0)) and pass the locks zeroed (zeroed_outputs=)");
  }
  if (!(faults & kStrayed)) return ffi::Error::Success();
  JtCpuDispatcher dispatcher = g_dispatcher.load(std::memory_order_acquire);
  if (dispatcher == nullptr) {
    return ffi::Error(ffi::ErrorCode::kOutOfRange, "jt CPU backend: kernel '" + std::string(name) +
                                                       "' made an out-of-bounds access (the interpreter that "
                                                       "would name it is gone: the interpreter is shutting down)");
  }
  if (args.size() < rets.size()) return ffi::Error::InvalidArgument("jt CPU check: fewer arguments than results");
  std::string text;
  ffi::ErrorOr<int32_t> code = Dispatch(dispatcher, call_id, args, rets.size(), rets, &text);
  if (code.has_error()) return code.error();
  if (*code == 0 || text.empty()) {
    return ffi::Error(ffi::ErrorCode::kInternal,
                      "jt CPU backend: the compiled kernel '" + std::string(name) +
                          "' made an out-of-bounds access that Triton's interpreter, run again on the same operands, "
                          "did not make");
  }
  return ffi::Error(ToErrorCode(*code), text);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jt_cpu_kernel_check, Check,
                              ffi::Ffi::Bind()
                                  .Attr<int64_t>("call_id")
                                  .Attr<std::string_view>("name")
                                  .Arg<ffi::AnyBuffer>()
                                  .RemainingArgs()
                                  .RemainingRets());

XLA_FFI_DEFINE_HANDLER_SYMBOL(jt_cpu_interpreter_callback, Execute,
                              ffi::Ffi::Bind()
                                  .Attr<int64_t>("call_id")
                                  .Attr<std::string_view>("name")
                                  .RemainingArgs()
                                  .RemainingRets());

extern "C" {

// Installs (or, with NULL, removes) the Python dispatcher.
void jt_cpu_interpreter_set_dispatcher(JtCpuDispatcher dispatcher) {
  g_dispatcher.store(dispatcher, std::memory_order_release);
}

// The calling convention this file implements; Python refuses a library reporting another.
int32_t jt_cpu_interpreter_abi_version() { return kAbiVersion; }

}  // extern "C"
