// Interpret mode's kernel executor: runs a launch's blocks one after another, each block's threads
// as fibers (Boost.Context) on this OS thread. A thread runs until it reaches a switch point (a
// __syncthreads, a __syncwarp, any warp collective) or returns; then the next ready thread runs,
// in the order the schedule gives. When every live thread waits, the waits that can complete do
// (a barrier when every thread of the block is there, a collective when every lane of its mask
// is); when none can, the block is stuck and that is a fault, never a hang.
//
// Every memory access of kernel code comes through access_hooks.cpp (the kernels' translation
// units are compiled with the compiler's thread-sanitizer instrumentation, whose calls we
// implement ourselves): shared memory is checked for bounds, uninitialised reads and races
// (shared_memory.hpp), global memory for bounds against the live allocations
// (device_memory.hpp), and anything else must be the thread's own stack, the launch's
// parameters or the program's static data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "vector_types.h"

namespace xtrain::interp {

// One thread's run of the kernel on a copy of the launch's parameters (launch_kernel in
// device_builtins.hpp makes it).
class KernelBody {
 public:
  virtual ~KernelBody() = default;
  virtual void run_thread() const = 0;
  // The parameters' storage, which the kernel's threads read when they copy their arguments.
  virtual const void* storage() const = 0;
  virtual size_t storage_bytes() const = 0;
  // Whether the kernel's file was compiled with the access hooks (an interpret-mode kernel
  // unit): a kernel without them would run unchecked, so it is refused.
  virtual bool instrumented() const = 0;
};

struct LaunchConfig {
  std::string kernel;  // its name, for every report
  const void* kernel_address = nullptr;
  dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
};

// In order (block 0 first, thread 0 first at every switch), reversed, or a seeded random
// permutation of blocks and, at every switch, of threads.
enum class Schedule { in_order, reversed, random };
const char* schedule_name(Schedule s);

// The kernel's name from its address ("xtrain::cuda::map_kernel<float, 1, ...>"), or its address;
// from its (mangled) symbol, which the dynamic symbol table gives (nullptr if it has none).
std::string kernel_name(const void* address);
const char* kernel_symbol(const void* address);
std::string readable_kernel_name(const char* symbol);

class WriteJournal;
// Runs every block; throws KernelFault (kernel_fault.hpp) at the first fault, leaving the blocks
// before it done and the faulting one partly done, as a GPU would. With a journal, every device
// page the kernel writes is kept first (device_memory.hpp).
void execute(const LaunchConfig& config, const KernelBody& body, Schedule schedule, uint64_t seed,
             WriteJournal* journal);

// Runs the launch under `schedules` schedules (1: in order; 2: and reversed; 3 or more: and
// seeded random ones), undoing its writes between runs, and throws KernelFault naming the
// schedules when the device memory it leaves differs between them: a race the direct checks
// did not see, or a result that depends on the order of blocks.
void execute_under_schedules(const LaunchConfig& config, const KernelBody& body, int schedules);

// ---- what device code calls (device_builtins.hpp) ---------------------------------------------

struct ThreadPosition {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
// The running thread's position (a copy: the kernel reads it from its own stack); throws
// std::logic_error outside a kernel.
ThreadPosition this_thread();

void sync_threads();
void sync_warp(unsigned mask);

// A warp collective: every lane of `mask` contributes `in` (at most kCollectiveBytes) and an
// argument; once all have, `combine` computes each lane's `out` (at most kCollectiveBytes) from all
// of them. Lanes that must meet here have to name the same collective and the same mask.
constexpr size_t kCollectiveBytes = 48;
struct WarpLanes {
  alignas(16) unsigned char in[32][kCollectiveBytes];
  alignas(16) unsigned char out[32][kCollectiveBytes];
  int arg[32];
  int width[32];
  size_t in_bytes = 0;
  unsigned mask = 0;
  unsigned present = 0;  // lanes that exist in this block (a partial last warp has fewer)
};
// Returns what is wrong (a lane read that is not taking part), or an empty string.
using WarpCombine = std::string (*)(WarpLanes& lanes);
void warp_collective(const char* name, WarpCombine combine, unsigned mask, const void* in, size_t in_bytes, int arg,
                     int width, void* out, size_t out_bytes);
// The running thread's lane (%laneid: its linear index in the block, mod 32).
int this_lane();
// A warp matrix load's row (ldmatrix): `bytes` at `row` must be in shared memory, 16-byte
// aligned, and are checked as the running thread's read (bounds, initialisation, races); a fault
// naming `op` otherwise. (Here rather than in the caller: the message is built inside the
// executor, where the access hooks ignore the library code that builds it.)
void check_matrix_row(const char* op, const void* row, size_t bytes);

// cp.async, one thread's asynchronous copies (PTX ISA, "cp.async"): `copy` checks the source
// (read now, `src_bytes` of the 16, the rest zero) and marks the 16 destination bytes of shared
// memory as written by this thread and in flight: any access to them before the thread's
// wait_group that covers the copy is a fault, and only that wait lets the bytes arrive, as this
// thread's write at that moment (so another thread's read needs a __syncthreads after it).
// `commit` closes the open group; `wait(n)` completes every committed group but the n newest.
// A thread that returns with copies not yet waited for is a fault.
void async_copy_16(void* dst, const void* src, int src_bytes);
void async_commit();
void async_wait(int n);

// A fault in the running thread (kernel, block and thread are added to `what`).
[[noreturn]] void fault_here(int code, const std::string& what);

// Shared memory of the running block: the calling thread's next static declaration (the same
// storage for every thread of the block), and the launch's dynamic shared memory.
void* static_shared(const char* name, size_t bytes, size_t align);
void* dynamic_shared();

// Called by access_hooks.cpp for every instrumented access while a kernel runs.
void check_access(const void* p, size_t bytes, bool write);
// An atomic read-modify-write: bounds and initialisation are checked, races are not (atomics do
// not race).
void check_atomic_access(const void* p, size_t bytes);
// atomicAdd on a float: checked as check_atomic_access, applied, and recorded for the race check
// (the order of float adds is free: device_memory.hpp). Returns the value before.
float float_atomic_add(float* p, float v);

}  // namespace xtrain::interp
