// The NCCL rule (common/gpu/nccl_library.hpp) on directories made here: which files are candidates
// and in what order, and the errors of a library that cannot be loaded or is not NCCL. Loading
// the real NCCL is tested where the launcher prints it (tests/launcher/test_plan.cpp).
#include <dlfcn.h>

#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/gpu/nccl_library.hpp"
#include "tests/worker/test_files.hpp"

using namespace xtrain;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

std::vector<std::string> files(const std::vector<NcclCandidate>& candidates) {
  std::vector<std::string> out;
  for (const auto& c : candidates) out.push_back(c.file + " <- " + c.found_by);
  return out;
}

}  // namespace

TEST_CASE("nccl rule: the files that exist in LD_LIBRARY_PATH, then in the plugin's RUNPATH, then the system's search",
          "[nccl_library]") {
  test::ScratchDir dir;
  for (const char* d : {"a", "b", "c", "run1", "run2"}) std::filesystem::create_directories(dir / d);
  for (const char* d : {"b", "c", "run2"}) test::write_bytes(dir / d + "/libnccl.so.2", "");
  NcclSearch search;
  search.ld_library_path = dir / "a" + ":" + dir / "c" + ":" + dir / "b";
  search.plugin_runpath = dir / "run1" + ":" + dir / "run2";
  CHECK(files(nccl_candidates(search)) == std::vector<std::string>{
                                              dir / "c/libnccl.so.2 <- LD_LIBRARY_PATH",
                                              dir / "b/libnccl.so.2 <- LD_LIBRARY_PATH",
                                              dir / "run2/libnccl.so.2 <- the CUDA plugin's RUNPATH",
                                              "libnccl.so.2 <- the system's library search",
                                          });
  search.ld_library_path.clear();
  search.plugin_runpath.clear();
  CHECK(files(nccl_candidates(search)) == std::vector<std::string>{"libnccl.so.2 <- the system's library search"});
}

TEST_CASE("nccl rule: an empty LD_LIBRARY_PATH entry is the current directory, as for the loader", "[nccl_library]") {
  test::ScratchDir dir;
  test::write_bytes(dir / "libnccl.so.2", "");
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  NcclSearch search;
  for (const char* list : {":/nonexistent", "/nonexistent::/nonexistent", "/nonexistent:"}) {
    search.ld_library_path = list;
    CHECK(files(nccl_candidates(search)).front() == "./libnccl.so.2 <- LD_LIBRARY_PATH");
  }
  std::filesystem::current_path(cwd);
}

TEST_CASE("nccl rule: XTRAIN_NCCL_LIBRARY is the only candidate, and its failure is an error naming it",
          "[nccl_library]") {
  test::ScratchDir dir;
  test::write_bytes(dir / "libnccl.so.2", "");
  NcclSearch search;
  search.override_path = dir / "missing.so";
  search.ld_library_path = dir.path();
  REQUIRE(nccl_candidates(search).size() == 1);
  CHECK(nccl_candidates(search).front().found_by == "XTRAIN_NCCL_LIBRARY");
  const std::string missing = test::error_message<std::runtime_error>([&] { load_nccl_library(search); });
  CHECK_THAT(missing, StartsWith("XTRAIN_NCCL_LIBRARY: cannot load " + dir / "missing.so" + ": ") &&
                          Contains("No such file"));

  Dl_info info{};  // a library that loads but is not NCCL: the C++ runtime this test runs on
  REQUIRE(dladdr(reinterpret_cast<void*>(&std::terminate), &info) != 0);
  search.override_path = info.dli_fname;
  CHECK(test::error_message<std::runtime_error>([&] { load_nccl_library(search); }) ==
        std::string("XTRAIN_NCCL_LIBRARY: ") + info.dli_fname + " has no working ncclGetVersion: it is not NCCL");
}

TEST_CASE("nccl rule: a candidate that does not load is skipped, and the error lists each", "[nccl_library]") {
  test::ScratchDir dir;
  test::write_bytes(dir / "libnccl.so.2", "not a library");
  NcclSearch search;
  search.ld_library_path = dir.path();
#ifdef XTRAIN_NCCL_FILE  // this build found NCCL: put its directory where the plugin's RUNPATH goes
  const std::filesystem::path nccl_dir = std::filesystem::path(XTRAIN_NCCL_FILE).parent_path();
  search.plugin_runpath = nccl_dir.string();
  const NcclLibrary lib = load_nccl_library(search);
  CHECK(lib.found_by == "the CUDA plugin's RUNPATH");
  CHECK(lib.path == (nccl_dir / "libnccl.so.2").string());
  CHECK_THAT(lib.version_string(), StartsWith("2."));
#else  // no NCCL here, so the system's search fails too
  const std::string error = test::error_message<std::runtime_error>([&] { load_nccl_library(search); });
  CHECK_THAT(error, Contains(dir / "libnccl.so.2") && Contains("libnccl.so.2: cannot open shared object file"));
#endif
}

TEST_CASE("nccl rule: NCCL's version codes, old and new", "[nccl_library]") {
  NcclLibrary lib;
  lib.version = 22809;
  lib.path = "/usr/lib/libnccl.so.2";
  lib.found_by = "LD_LIBRARY_PATH";
  CHECK(lib.version_string() == "2.28.9");
  CHECK(lib.describe() == "NCCL 2.28.9 at /usr/lib/libnccl.so.2 (LD_LIBRARY_PATH)");
  lib.version = 2708;  // before 2.9: major*1000 + minor*100 + patch
  CHECK(lib.version_string() == "2.7.8");
}
