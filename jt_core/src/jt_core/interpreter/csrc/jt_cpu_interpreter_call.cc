// jt's CPU handlers: an XLA FFI custom call that runs a Triton kernel with Triton's interpreter, and one that
// turns a compiled CPU kernel's error record into an XLA error.
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
// Writes the message of a compiled kernel's error record (`record`, described by the JSON text `description`)
// into `message` and returns its XLA_FFI_Error_Code value.
typedef int32_t (*JtCpuReporter)(const char* description, int64_t description_size, const int64_t* record,
                                 int64_t record_size, char* message, int64_t message_capacity);
}

namespace {

constexpr int32_t kAbiVersion = 2;
constexpr int64_t kMessageCapacity = 16384;

std::atomic<JtCpuDispatcher> g_dispatcher{nullptr};
std::atomic<JtCpuReporter> g_reporter{nullptr};

ffi::ErrorCode ToErrorCode(int32_t code) {
  if (code <= 0 || code > static_cast<int32_t>(ffi::ErrorCode::kUnauthenticated)) {
    return ffi::ErrorCode::kInternal;
  }
  return static_cast<ffi::ErrorCode>(code);
}

ffi::Error Execute(int64_t call_id, std::string_view name, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  JtCpuDispatcher dispatcher = g_dispatcher.load(std::memory_order_acquire);
  if (dispatcher == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jt CPU launcher: triton_call '" + std::string(name) +
                          "' ran after the Python dispatcher was removed (interpreter shutting down)");
  }
  const size_t num_inputs = args.size();
  const size_t num_outputs = rets.size();
  std::vector<void*> pointers(num_inputs + num_outputs);
  std::vector<int64_t> sizes(num_inputs + num_outputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> buffer = args.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    pointers[i] = buffer->untyped_data();
    sizes[i] = static_cast<int64_t>(buffer->size_bytes());
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> buffer = rets.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    pointers[num_inputs + i] = (*buffer)->untyped_data();
    sizes[num_inputs + i] = static_cast<int64_t>((*buffer)->size_bytes());
  }
  char message[kMessageCapacity];
  message[0] = '\0';
  int32_t code = dispatcher(call_id, static_cast<int64_t>(num_inputs), pointers.data(), sizes.data(),
                            static_cast<int64_t>(num_outputs), pointers.data() + num_inputs,
                            sizes.data() + num_inputs, message, kMessageCapacity);
  if (code == 0) return ffi::Error::Success();
  message[kMessageCapacity - 1] = '\0';
  std::string text(message, strnlen(message, kMessageCapacity));
  if (text.empty()) text = "jt CPU launcher: triton_call '" + std::string(name) + "' failed";
  return ffi::Error(ToErrorCode(code), text);
}

// A compiled kernel's check: its outputs pass through untouched (they are aliased to the results), and a record
// whose first field is not zero becomes an error with the message Python's reporter writes.
ffi::Error Check(std::string_view name, std::string_view description, ffi::AnyBuffer record, ffi::RemainingArgs,
                 ffi::RemainingRets) {
  const size_t count = record.element_count();
  const int64_t* fields = static_cast<const int64_t*>(record.untyped_data());
  if (count == 0 || fields[0] == 0) return ffi::Error::Success();
  JtCpuReporter reporter = g_reporter.load(std::memory_order_acquire);
  std::string fallback = "jt CPU backend: kernel '" + std::string(name) + "' made an invalid memory access (record";
  for (size_t i = 0; i < count; ++i) fallback += " " + std::to_string(fields[i]);
  fallback += ")";
  if (reporter == nullptr) return ffi::Error(ffi::ErrorCode::kOutOfRange, fallback);
  char message[kMessageCapacity];
  message[0] = '\0';
  int32_t code = reporter(description.data(), static_cast<int64_t>(description.size()), fields,
                          static_cast<int64_t>(count), message, kMessageCapacity);
  message[kMessageCapacity - 1] = '\0';
  std::string text(message, strnlen(message, kMessageCapacity));
  return ffi::Error(ToErrorCode(code), text.empty() ? fallback : text);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jt_cpu_kernel_check, Check,
                              ffi::Ffi::Bind()
                                  .Attr<std::string_view>("name")
                                  .Attr<std::string_view>("description")
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

// Installs (or, with NULL, removes) the Python reporter of compiled kernels' errors.
void jt_cpu_kernel_check_set_reporter(JtCpuReporter reporter) {
  g_reporter.store(reporter, std::memory_order_release);
}

// The calling convention this file implements; Python refuses a library reporting another.
int32_t jt_cpu_interpreter_abi_version() { return kAbiVersion; }

}  // extern "C"
