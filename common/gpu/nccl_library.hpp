// Which libnccl a process loads: one rule for xlaunch (ncclGetUniqueId) and xtrain-worker (the
// CUDA plugin's communicators), so that the id and the communicators that use it come from the
// same library. The first candidate that loads wins:
//   1. $XTRAIN_NCCL_LIBRARY: that file and nothing else (an explicit choice that fails is an error)
//   2. libnccl.so.2 in each directory of LD_LIBRARY_PATH, in order
//   3. libnccl.so.2 in each directory of the CUDA plugin's RUNPATH: where the build found NCCL
//      and the CUDA libraries
//   4. "libnccl.so.2" by name: the system's search (ld.so.cache, then /lib and /usr/lib)
// Steps 2-4 are the dynamic loader's own order for the plugin's NEEDED libnccl.so.2. The worker
// loads the resolved file before the plugin, and the loader then reuses that library for the
// plugin (it matches loaded libraries by their SONAME), so step 1 holds for the worker too.
// xlaunch resolves with the environment its ranks get (its own plus worker.env).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace xtrain {

inline constexpr char kNcclLibraryVariable[] = "XTRAIN_NCCL_LIBRARY";
inline constexpr char kNcclSoname[] = "libnccl.so.2";

// What the rule looks at.
struct NcclSearch {
  std::string override_path;    // XTRAIN_NCCL_LIBRARY; empty when unset
  std::string ld_library_path;  // LD_LIBRARY_PATH
  std::string plugin_runpath;   // ':'-separated, fixed when this program was built

  static NcclSearch from_environment();  // this process's
  static NcclSearch from_environment(const std::map<std::string, std::string>& env);
};

struct NcclCandidate {
  std::string file;      // a path, or kNcclSoname alone for the system's search
  std::string found_by;  // "XTRAIN_NCCL_LIBRARY", "LD_LIBRARY_PATH", ...
};

// The candidates in order: steps 2 and 3 list only the files that exist (an empty entry of
// LD_LIBRARY_PATH is the current directory, as for the loader); a set XTRAIN_NCCL_LIBRARY is the
// only candidate. Reads nothing but the file system's directory entries.
std::vector<NcclCandidate> nccl_candidates(const NcclSearch& search);

struct NcclLibrary {
  void* handle = nullptr;  // from dlopen; stays open for the life of the process
  std::string path;        // the file loaded (for step 4, the one the system chose)
  std::string found_by;
  int version = 0;         // ncclGetVersion's code: 22809 is 2.28.9

  std::string version_string() const;  // "2.28.9"
  std::string describe() const;        // "NCCL 2.28.9 at /usr/lib/libnccl.so.2 (LD_LIBRARY_PATH)"
};

// Loads the first candidate that dlopens. Throws std::runtime_error naming XTRAIN_NCCL_LIBRARY,
// or every file tried with the loader's words for each.
NcclLibrary load_nccl_library(const NcclSearch& search);

}  // namespace xtrain
