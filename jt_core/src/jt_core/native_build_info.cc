// Compiled into every library jt builds (jt_core/native.py adds it to the sources of each LibrarySpec): the
// version of the XLA FFI C API whose headers the library was compiled against, as the compiler saw them.
//
// A library prebuilt in a platform wheel is compiled against the headers of the oldest jaxlib jt supports; before
// it is loaded for another jaxlib, jt compares this version with the one that jaxlib's headers declare. XLA takes a
// handler whose API version is not newer than its own (same major version, minor version at most its own), which is
// the rule jt applies.
//
// A library built without the XLA FFI headers on its include path (a test's probe) reports -1.

#include <cstdint>

#if defined(__has_include)
#if __has_include("xla/ffi/api/c_api.h")
#include "xla/ffi/api/c_api.h"
#endif
#endif

extern "C" {

void jt_native_xla_ffi_api_version(int32_t* major, int32_t* minor) {
#if defined(XLA_FFI_API_MAJOR) && defined(XLA_FFI_API_MINOR)
  *major = XLA_FFI_API_MAJOR;
  *minor = XLA_FFI_API_MINOR;
#else
  *major = -1;
  *minor = -1;
#endif
}

}  // extern "C"
