// Interpret mode's view of every memory access kernel code makes. The translation units that hold
// kernels are compiled with the compiler's thread-sanitizer instrumentation
// (-fsanitize=thread), which puts a call before each load and store: __tsan_read4(address) and
// the like. We link no sanitizer runtime; these are its entry points, implemented here, and they
// hand each access to the executor, which checks it only while a kernel runs (host code in the
// same files costs a call and one test of a thread-local).
#include <cstddef>
#include <cstdint>

#include "cuda/interp/executor.hpp"

namespace {

inline void read(const void* p, size_t n) { xtrain::interp::check_access(p, n, false); }
inline void write(const void* p, size_t n) { xtrain::interp::check_access(p, n, true); }

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

// Atomics in the instrumented files (reference counts of the host code around the kernels): done
// as asked, sequentially consistent whatever order was asked for (stronger is always correct).
// XTRAIN_ATOMIC_FETCH and XTRAIN_ATOMIC_COMPARE_EXCHANGE make one entry point each.
#define XTRAIN_ATOMIC_FETCH(bits, T, op)                                    \
  extern "C" T __tsan_atomic##bits##_fetch_##op(volatile T* a, T v, int) { \
    return __atomic_fetch_##op(a, v, __ATOMIC_SEQ_CST);                     \
  }
#define XTRAIN_ATOMIC_COMPARE_EXCHANGE(bits, T, kind)                                                       \
  extern "C" int __tsan_atomic##bits##_compare_exchange_##kind(volatile T* a, T* expected, T v, int, int) { \
    return __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);          \
  }
#define XTRAIN_ATOMIC_HOOKS(bits, T)                                                                          \
  extern "C" T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  extern "C" void __tsan_atomic##bits##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
  extern "C" T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) {                                       \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                        \
  }                                                                                                            \
  XTRAIN_ATOMIC_FETCH(bits, T, add)                                                                            \
  XTRAIN_ATOMIC_FETCH(bits, T, sub)                                                                            \
  XTRAIN_ATOMIC_FETCH(bits, T, and)                                                                            \
  XTRAIN_ATOMIC_FETCH(bits, T, or)                                                                             \
  XTRAIN_ATOMIC_FETCH(bits, T, xor)                                                                            \
  XTRAIN_ATOMIC_COMPARE_EXCHANGE(bits, T, strong)                                                              \
  XTRAIN_ATOMIC_COMPARE_EXCHANGE(bits, T, weak)                                                                \
  extern "C" T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T expected, T v, int, int) {          \
    __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                   \
    return expected;                                                                                           \
  }

XTRAIN_ATOMIC_HOOKS(8, char)
XTRAIN_ATOMIC_HOOKS(16, short)
XTRAIN_ATOMIC_HOOKS(32, int)
XTRAIN_ATOMIC_HOOKS(64, long)

extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
