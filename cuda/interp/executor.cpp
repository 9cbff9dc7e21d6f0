// Interpret mode's launches (executor.hpp): the blocks in the schedule's order, the schedules
// compared, and the device-side entry points through which kernel code calls into the running
// block (block_run.hpp).
#include "cuda/interp/executor.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "cuda/interp/block_run.hpp"
#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/kernel_fault.hpp"
#include "cuda/interp/shared_memory.hpp"

namespace xtrain::interp {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::in_order: return "in order";
    case Schedule::reversed: return "reversed";
    case Schedule::random: return "random";
  }
  return "?";
}

const char* kernel_symbol(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) != 0 && info.dli_sname != nullptr && info.dli_saddr == address) return info.dli_sname;
  return nullptr;
}

std::string readable_kernel_name(const char* symbol) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(abi::__cxa_demangle(symbol, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 ? text.get() : symbol;
  // "void ns::k<T>(T*, int)" -> "ns::k<T>": the parameters say nothing the template does not.
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  int depth = 0;
  for (size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) {
      name.erase(i);
      break;
    }
  }
  return name;
}

std::string kernel_name(const void* address) {
  if (const char* symbol = kernel_symbol(address)) return readable_kernel_name(symbol);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "kernel at %p", address);
  return buffer;
}

namespace {

// Device code has called into the executor: while the executor's own code runs (some of it
// library code that the linker may have taken from an instrumented file, e.g. std::string's),
// the access hooks must not take it for the kernel's.
class InExecutor {
 public:
  InExecutor() : thread_(t_thread), block_(t_block) {
    if (thread_ == nullptr || block_ == nullptr) throw std::logic_error("interpret mode: device code called outside a kernel");
    t_thread = nullptr;
  }
  ~InExecutor() { t_thread = thread_; }
  InExecutor(const InExecutor&) = delete;
  InExecutor& operator=(const InExecutor&) = delete;
  ThreadRecord& thread() { return *thread_; }
  BlockRun& block() { return *block_; }

 private:
  ThreadRecord* thread_;
  BlockRun* block_;
};

std::vector<uint3> block_order(const dim3& grid, Schedule schedule, std::mt19937_64& rng) {
  std::vector<uint3> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
  if (schedule == Schedule::reversed) std::reverse(blocks.begin(), blocks.end());
  if (schedule == Schedule::random) std::shuffle(blocks.begin(), blocks.end(), rng);
  return blocks;
}

}  // namespace

void execute(const LaunchConfig& config, const KernelBody& body, Schedule schedule, uint64_t seed,
             WriteJournal* journal) {
  static thread_local SharedArena arena;
  static thread_local StackPool stacks;
  const int threads = static_cast<int>(config.block.x * config.block.y * config.block.z);
  arena.begin_launch(config.dynamic_shared_bytes, threads);
  std::mt19937_64 rng(seed);
  BlockRun run(config, body, arena, stacks, journal);
  for (const uint3& b : block_order(config.grid, schedule, rng)) run.run(b, schedule, rng);
}

void execute_under_schedules(const LaunchConfig& config, const KernelBody& body, int schedules) {
  if (schedules <= 1) return execute(config, body, Schedule::in_order, 0, nullptr);
  WriteJournal journal;
  execute(config, body, Schedule::in_order, 0, &journal);
  const auto first = journal.current();
  for (int k = 1; k < schedules; ++k) {
    journal.restore();
    const Schedule s = k == 1 ? Schedule::reversed : Schedule::random;
    const uint64_t seed = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(k);
    execute(config, body, s, seed, &journal);
    const std::string difference = journal.first_difference(first);
    if (!difference.empty()) {
      throw KernelFault(cudaErrorLaunchFailure,
                        "kernel " + config.kernel + ": results differ between the in-order schedule and the " +
                            schedule_name(s) + " one (seed " + std::to_string(seed) + ") at " + difference +
                            ": a race between threads or blocks that no direct check saw");
    }
  }
}

// ---- device-side entry points -------------------------------------------------------------------

ThreadPosition this_thread() {
  if (t_thread == nullptr) throw std::logic_error("interpret mode: threadIdx and friends outside a kernel");
  return t_thread->pos;
}

void check_access(const void* p, size_t bytes, bool write) {
  if (t_thread == nullptr || t_block == nullptr) return;  // no kernel, or a block being unwound
  InExecutor in;
  in.block().check_access(in.thread(), p, bytes, write, false);
}

void check_atomic_access(const void* p, size_t bytes) {
  InExecutor in;
  in.block().check_access(in.thread(), p, bytes, true, true);
}

float float_atomic_add(float* p, float v) {
  InExecutor in;
  in.block().check_access(in.thread(), p, sizeof(float), true, true);
  const float before = *p;
  *p = before + v;
  in.block().note_float_add(p, before, v);
  return before;
}

void sync_threads() {
  InExecutor in;
  in.block().wait(in.thread(), ThreadState::at_barrier, "__syncthreads", nullptr, 0);
}

namespace {
std::string no_exchange(WarpLanes&) { return {}; }
}  // namespace

void sync_warp(unsigned mask) {
  InExecutor in;
  if (!(mask >> (in.thread().linear % 32) & 1u)) {
    in.block().abandon(in.thread(), cudaErrorLaunchFailure, "__syncwarp with a mask without its own lane");
  }
  in.block().wait(in.thread(), ThreadState::at_warp, "__syncwarp", no_exchange, mask);
}


void warp_collective(const char* name, WarpCombine combine, unsigned mask, const void* in_bytes_p, size_t in_bytes,
                     int arg, int width, void* out, size_t out_bytes) {
  InExecutor in;
  ThreadRecord& t = in.thread();
  const int lane = t.linear % 32;
  if (!(mask >> lane & 1u)) {
    in.block().abandon(t, cudaErrorLaunchFailure, std::string(name) + " with a mask without its own lane");
  }
  WarpLanes& lanes = in.block().warp_of(t);
  std::memcpy(lanes.in[lane], in_bytes_p, in_bytes);
  lanes.in_bytes = in_bytes;
  lanes.arg[lane] = arg;
  lanes.width[lane] = width;
  in.block().wait(t, ThreadState::at_warp, name, combine, mask);
  std::memcpy(out, lanes.out[lane], out_bytes);
}

int this_lane() {
  InExecutor in;
  return in.thread().linear % 32;
}

void check_matrix_row(const char* op, const void* row, size_t bytes) {
  InExecutor in;
  char where[32];
  std::snprintf(where, sizeof where, "%p", row);
  if (!in.block().arena().contains(row)) {
    in.block().abandon(in.thread(), cudaErrorIllegalAddress,
                       std::string(op) + ": row address " + where + " is not in shared memory");
  }
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    in.block().abandon(in.thread(), cudaErrorMisalignedAddress,
                       std::string(op) + ": row address " + where + " is not 16-byte aligned");
  }
  in.block().check_access(in.thread(), row, bytes, false, false);
}

void async_copy_16(void* dst, const void* src, int src_bytes) {
  InExecutor in;
  in.block().async_copy(in.thread(), dst, src, src_bytes);
}

void async_commit() {
  InExecutor in;
  ++in.thread().commits;
}

void async_wait(int n) {
  InExecutor in;
  in.block().async_wait(in.thread(), n);
}

void fault_here(int code, const std::string& what) {
  InExecutor in;
  in.block().abandon(in.thread(), code, what);
}

void* static_shared(const char* name, size_t bytes, size_t align) {
  InExecutor in;
  try {
    return in.block().arena().declare(in.thread().linear, name, bytes, align);
  } catch (const std::runtime_error& e) {
    in.block().abandon(in.thread(), cudaErrorLaunchFailure, e.what());
  }
}

void* dynamic_shared() {
  InExecutor in;
  return in.block().arena().dynamic();
}

}  // namespace xtrain::interp
