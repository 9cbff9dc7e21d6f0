#include "common/gpu/nccl_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>

// Set by CMake for this file: the directories the CUDA plugin's RUNPATH names ("" without CUDA).
#ifndef XTRAIN_CUDA_PLUGIN_RUNPATH
#define XTRAIN_CUDA_PLUGIN_RUNPATH ""
#endif

namespace xtrain {
namespace {

std::vector<std::string> split_path_list(const std::string& list) {
  std::vector<std::string> dirs;
  if (list.empty()) return dirs;
  std::stringstream in(list);
  std::string dir;
  while (std::getline(in, dir, ':')) dirs.push_back(dir.empty() ? "." : dir);
  if (list.back() == ':') dirs.push_back(".");
  return dirs;
}

void add_existing(std::vector<NcclCandidate>& out, const std::string& dirs, const char* found_by) {
  for (const std::string& dir : split_path_list(dirs)) {
    const std::string file = (std::filesystem::path(dir) / kNcclSoname).string();
    std::error_code ec;
    if (std::filesystem::exists(file, ec)) out.push_back({file, found_by});
  }
}

using GetVersionFn = int (*)(int*);  // ncclResult_t ncclGetVersion(int*); ncclResult_t is an int enum

}  // namespace

NcclSearch NcclSearch::from_environment() {
  const char* override_path = std::getenv(kNcclLibraryVariable);
  const char* ld_library_path = std::getenv("LD_LIBRARY_PATH");
  return {override_path ? override_path : "", ld_library_path ? ld_library_path : "", XTRAIN_CUDA_PLUGIN_RUNPATH};
}

NcclSearch NcclSearch::from_environment(const std::map<std::string, std::string>& env) {
  auto value = [&](const std::string& name) {
    const auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  return {value(kNcclLibraryVariable), value("LD_LIBRARY_PATH"), XTRAIN_CUDA_PLUGIN_RUNPATH};
}

std::vector<NcclCandidate> nccl_candidates(const NcclSearch& search) {
  if (!search.override_path.empty()) return {{search.override_path, kNcclLibraryVariable}};
  std::vector<NcclCandidate> out;
  add_existing(out, search.ld_library_path, "LD_LIBRARY_PATH");
  add_existing(out, search.plugin_runpath, "the CUDA plugin's RUNPATH");
  out.push_back({kNcclSoname, "the system's library search"});
  return out;
}

std::string NcclLibrary::version_string() const {
  // NCCL 2.9 and later: major*10000 + minor*100 + patch; before: major*1000 + minor*100 + patch.
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100);
}

std::string NcclLibrary::describe() const {
  return "NCCL " + version_string() + " at " + path + " (" + found_by + ")";
}

NcclLibrary load_nccl_library(const NcclSearch& search) {
  std::string tried;
  for (const NcclCandidate& candidate : nccl_candidates(search)) {
    void* handle = dlopen(candidate.file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const std::string why = dlerror();
      if (candidate.found_by == kNcclLibraryVariable) {
        throw std::runtime_error(std::string(kNcclLibraryVariable) + ": cannot load " + candidate.file + ": " + why);
      }
      tried += (tried.empty() ? "" : "; ") + why;
      continue;
    }
    NcclLibrary lib;
    lib.handle = handle;
    lib.found_by = candidate.found_by;
    const link_map* map = nullptr;
    lib.path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr ? map->l_name : candidate.file;
    const auto get_version = reinterpret_cast<GetVersionFn>(dlsym(handle, "ncclGetVersion"));
    if (get_version == nullptr || get_version(&lib.version) != 0) {
      dlclose(handle);
      throw std::runtime_error(lib.found_by + ": " + lib.path + " has no working ncclGetVersion: it is not NCCL");
    }
    return lib;
  }
  throw std::runtime_error("cannot load libnccl (" + std::string(kNcclLibraryVariable) +
                           " unset; tried LD_LIBRARY_PATH, the CUDA plugin's RUNPATH and the system's search): " +
                           tried);
}

}  // namespace xtrain
