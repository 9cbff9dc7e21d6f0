#include "launcher/attempt.hpp"

#include <cerrno>
#include <cstring>
#include <optional>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef XTRAIN_HAVE_NCCL
#include <nccl.h>
#endif

#include "common/exit_codes.hpp"
#include "common/gpu/nccl_id.hpp"
#include "launcher/launch_error.hpp"
#include "launcher/run_dir.hpp"

namespace xtrain::launcher {
namespace {

[[noreturn]] void launch_failure(const std::string& message) {
  throw LaunchError(exit_code::kLaunchFailure, message);
}

#ifdef XTRAIN_HAVE_NCCL
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
#endif

}  // namespace

int pick_free_port(const std::string& address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    launch_failure("MASTER_ADDR \"" + address + "\" is not an IPv4 address");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) launch_failure(std::string("cannot pick a free port: socket: ") + std::strerror(errno));
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) launch_failure("cannot pick a free port on " + address + ": " + std::strerror(err));
  return ntohs(addr.sin_port);
}

#ifdef XTRAIN_HAVE_NCCL
const NcclLibrary& require_nccl(const std::map<std::string, std::string>& rank_env) {
  return nccl_api(NcclSearch::from_environment(rank_env)).library;
}

std::string nccl_unique_id_hex() {
  const NcclApi& api = nccl_api(NcclSearch::from_environment());
  ncclUniqueId id;
  const ncclResult_t result = api.get_unique_id(&id);
  if (result != ncclSuccess) launch_failure(std::string("ncclGetUniqueId failed: ") + api.error_string(result));
  NcclIdBytes bytes;
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return encode_nccl_id(bytes);
}
#else
constexpr const char* kNoNccl = "backend \"nccl\": this xlaunch was built without NCCL (CMake found no nccl.h/libnccl)";

const NcclLibrary& require_nccl(const std::map<std::string, std::string>&) { launch_failure(kNoNccl); }

std::string nccl_unique_id_hex() { launch_failure(kNoNccl); }
#endif

AttemptEnv make_attempt_env(const Plan& plan, const std::string& run_id, int restart_count,
                            const RoundResult* round) {
  AttemptEnv attempt;
  if (round) {
    attempt.master_addr = round->master_addr;
    attempt.master_port = plan.spec.launcher.master_port > 0 ? plan.spec.launcher.master_port : round->master_port;
    attempt.nccl_id_hex = round->nccl_id_hex;
    attempt.store_endpoint = round->store_endpoint;
    attempt.job_token = round->job_token;
    attempt.node_addr = round->node_addr;
  } else {
    attempt.master_addr = "127.0.0.1";
    attempt.master_port = plan.spec.launcher.master_port > 0 ? plan.spec.launcher.master_port
                                                             : pick_free_port(attempt.master_addr);
    if (plan.backend == "nccl") attempt.nccl_id_hex = nccl_unique_id_hex();
  }
  attempt.run_id = run_id + "-a" + std::to_string(restart_count + 1);
  attempt.elastic_run_id = plan.rdzv_id.empty() ? run_id : plan.rdzv_id;
  attempt.role_name = plan.role;
  attempt.run_dir = plan.run_dir;
  attempt.job_path = run_files::job(plan.run_dir);
  attempt.restart_count = restart_count;
  attempt.max_restarts = plan.spec.launcher.max_restarts;
  return attempt;
}

}  // namespace xtrain::launcher
