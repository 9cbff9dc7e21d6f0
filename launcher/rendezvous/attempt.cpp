#include "launcher/rendezvous/attempt.hpp"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launcher/plan/nccl.hpp"
#include "launcher/run/launch_error.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {

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
