// usable_memory_bytes: the machine's memory, or the cgroup limit where smaller. The cgroup part
// on made-up cgroup trees: v2's memory.max on the process's cgroup or any above it ("max" is no
// limit), v1's memory.limit_in_bytes under the memory hierarchy, the root's own files (a
// container's view), and files that are missing or not numbers.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/usable_memory.hpp"

using namespace xtrain;
namespace fs = std::filesystem;

namespace {

struct CgroupTree {
  fs::path root = fs::temp_directory_path() / ("xtrain-cgroup-" + std::to_string(::getpid()));
  CgroupTree() { fs::create_directories(root); }
  ~CgroupTree() { fs::remove_all(root); }
  void write(const fs::path& file, const std::string& text) const {
    fs::create_directories((root / file).parent_path());
    std::ofstream(root / file) << text;
  }
};

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

}  // namespace

TEST_CASE("cgroup v2: the least memory.max of the process's cgroup and those above it", "[memory]") {
  CgroupTree t;
  t.write("memory.max", "max\n");
  t.write("kubepods/memory.max", std::to_string(8 * kGiB) + "\n");
  t.write("kubepods/pod1/memory.max", std::to_string(2 * kGiB) + "\n");
  t.write("kubepods/pod1/box/memory.max", "max\n");
  CHECK(cgroup_memory_limit("0::/kubepods/pod1/box\n", t.root) == 2 * kGiB);
  CHECK(cgroup_memory_limit("0::/kubepods\n", t.root) == 8 * kGiB);
  CHECK_FALSE(cgroup_memory_limit("0::/\n", t.root).has_value());  // "max": no limit
  // A container sees its own cgroup at the root, whatever path /proc names.
  t.write("memory.max", std::to_string(3 * kGiB));
  CHECK(cgroup_memory_limit("0::/elsewhere/not/mounted\n", t.root) == 3 * kGiB);
}

TEST_CASE("cgroup v1: memory.limit_in_bytes under the memory hierarchy, only for its line", "[memory]") {
  CgroupTree t;
  t.write("memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  t.write("memory/slurm/job7/memory.limit_in_bytes", std::to_string(kGiB) + "\n");
  t.write("cpu/slurm/job7/memory.limit_in_bytes", "1\n");  // not the memory controller's
  const std::string proc = "9:name=systemd:/\n4:memory:/slurm/job7\n1:cpu,cpuacct:/slurm/job7\n0::/\n";
  CHECK(cgroup_memory_limit(proc, t.root) == kGiB);
  CHECK(cgroup_memory_limit("4:cpuset,memory:/slurm/job7\n", t.root) == kGiB);  // controllers listed together
  CHECK(cgroup_memory_limit("4:memory:/\n", t.root) == std::uint64_t{9223372036854771712u});
}

TEST_CASE("cgroup memory limits: missing files, words and nonsense are no limit", "[memory]") {
  CgroupTree t;
  t.write("a/memory.max", "lots\n");
  t.write("b/memory.max", "");
  t.write("c/memory.max", "-5\n");
  t.write("d/memory.max", "99999999999999999999999\n");  // past 64 bits
  for (const char* proc : {"0::/a\n", "0::/b\n", "0::/c\n", "0::/d\n", "0::/missing\n", "", "garbage\n", "0::"}) {
    INFO(proc);
    CHECK_FALSE(cgroup_memory_limit(proc, t.root).has_value());
  }
}

TEST_CASE("usable_memory_bytes is the machine's memory at most, and some of it", "[memory]") {
  const std::uint64_t physical =
      static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  CHECK(usable_memory_bytes() <= physical);
  CHECK(usable_memory_bytes() > 0);
}
