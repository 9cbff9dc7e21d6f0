// Interpret mode's view of every memory access kernel code makes. The translation units that hold
// kernels are compiled with the compiler's thread-sanitizer instrumentation
// (-fsanitize=thread), which puts a call before each load and store: __tsan_read4(address) and
// the like. We link no sanitizer runtime; these are its entry points, implemented here, and they
// hand each access to the executor, which checks it only while a kernel runs (host code in the
// same files costs one test of a thread-local).
#include <cstddef>
#include <cstdint>

#include "cuda/interp/executor.hpp"

namespace {

inline void read(const void* p, size_t n) {
  if (xtrain::interp::kernel_running()) xtrain::interp::check_access(p, n, false);
}
inline void write(const void* p, size_t n) {
  if (xtrain::interp::kernel_running()) xtrain::interp::check_access(p, n, true);
}

}  // namespace

#define XTRAIN_ACCESS_HOOKS(n)                                                                   \
  extern "C" void __tsan_read##n(void* p) { read(p, n); }                                        \
  extern "C" void __tsan_write##n(void* p) { write(p, n); }                                      \
  extern "C" void __tsan_unaligned_read##n(void* p) { read(p, n); }                              \
  extern "C" void __tsan_unaligned_write##n(void* p) { write(p, n); }                            \
  extern "C" void __tsan_volatile_read##n(void* p) { read(p, n); }                               \
  extern "C" void __tsan_volatile_write##n(void* p) { write(p, n); }

XTRAIN_ACCESS_HOOKS(1)
XTRAIN_ACCESS_HOOKS(2)
XTRAIN_ACCESS_HOOKS(4)
XTRAIN_ACCESS_HOOKS(8)
XTRAIN_ACCESS_HOOKS(16)

extern "C" void __tsan_read_range(void* p, size_t n) { read(p, n); }
extern "C" void __tsan_write_range(void* p, size_t n) { write(p, n); }
// Function entry and exit are not instrumented (--param=tsan-instrument-func-entry-exit=0); the
// module constructor the instrumentation adds calls this.
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}
