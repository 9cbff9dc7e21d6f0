#include "launcher/plan/nccl.hpp"

#include "common/cuda_interpret.hpp"
#include "common/gpu/nccl_id.hpp"
#include "launcher/run/launch_error.hpp"

#ifdef XTRAIN_HAVE_NCCL
#include <cstring>
#include <optional>

#include <dlfcn.h>
#include <nccl.h>
#endif

namespace xtrain::launcher {
namespace {

std::string library_unique_id_hex();

}  // namespace

std::string nccl_unique_id_hex() {
  return cuda_interpret_requested() ? encode_nccl_id(random_nccl_id()) : library_unique_id_hex();
}

#ifdef XTRAIN_HAVE_NCCL
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL's unique id size changed");

struct NcclApi {
  NcclLibrary library;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

// Loaded once, on first use; the library stays open for the life of the process.
const NcclApi& nccl_api(const NcclSearch& search) {
  static std::optional<NcclApi> api;
  if (api) return *api;
  NcclApi loaded;
  try {
    loaded.library = load_nccl_library(search);
  } catch (const std::exception& e) {
    launch_failure(std::string("backend \"nccl\": ") + e.what());
  }
  void* lib = loaded.library.handle;
  loaded.get_unique_id = reinterpret_cast<decltype(&ncclGetUniqueId)>(dlsym(lib, "ncclGetUniqueId"));
  loaded.error_string = reinterpret_cast<decltype(&ncclGetErrorString)>(dlsym(lib, "ncclGetErrorString"));
  if (!loaded.get_unique_id || !loaded.error_string) {
    launch_failure("backend \"nccl\": " + loaded.library.path + " lacks ncclGetUniqueId/ncclGetErrorString");
  }
  api = std::move(loaded);
  return *api;
}

}  // namespace

const NcclLibrary& require_nccl(const std::map<std::string, std::string>& rank_env) {
  return nccl_api(NcclSearch::from_environment(rank_env)).library;
}

namespace {
std::string library_unique_id_hex() {
  const NcclApi& api = nccl_api(NcclSearch::from_environment());
  ncclUniqueId id;
  const ncclResult_t result = api.get_unique_id(&id);
  if (result != ncclSuccess) launch_failure(std::string("ncclGetUniqueId failed: ") + api.error_string(result));
  NcclIdBytes bytes;
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return encode_nccl_id(bytes);
}
}  // namespace
#else
constexpr const char* kNoNccl = "backend \"nccl\": this xlaunch was built without NCCL (CMake found no nccl.h/libnccl)";

const NcclLibrary& require_nccl(const std::map<std::string, std::string>&) { launch_failure(kNoNccl); }

namespace {
std::string library_unique_id_hex() { launch_failure(kNoNccl); }
}  // namespace
#endif

}  // namespace xtrain::launcher
