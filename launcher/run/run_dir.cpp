#include "launcher/run/run_dir.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/atomic_file.hpp"
#include "common/checkpoint_dirs.hpp"
#include "common/job_spec.hpp"
#include "common/worker_env.hpp"
#include "launcher/run/launch_error.hpp"

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;

int open_directory(const std::string& dir) {
  return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

// A checkpoint's state.json (worker/train/checkpoint.hpp), read without trusting it.
std::optional<std::int64_t> checkpoint_state_step(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kCheckpointStateFile);
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object() || state.value("format", nlohmann::json()) != kCheckpointFormat) return std::nullopt;
  const nlohmann::json step = state.value("step", nlohmann::json());
  return step.is_number_unsigned() ? step.get<std::int64_t>() : -1;
}

}  // namespace

std::string existing_ancestor(const std::string& dir) {
  fs::path existing = dir;
  std::error_code ec;
  while (!fs::exists(fs::symlink_status(existing, ec)) && existing.has_parent_path() &&
         existing != existing.parent_path()) {
    existing = existing.parent_path();
  }
  return existing.string();
}

void check_run_dir_creatable(const std::string& dir) {
  const fs::path existing = existing_ancestor(dir);
  std::error_code ec;
  // "runs/x" is ... | cannot create "runs/x": "runs" is ...
  const std::string subject = existing == dir ? "\"" + dir + "\""
                                              : "cannot create \"" + dir + "\": \"" + existing.string() + "\"";
  if (!fs::is_directory(existing, ec)) throw SpecError("run_dir", subject + " is not a directory");
  if (existing == dir && checkpoint_state_step(dir)) {
    throw SpecError("run_dir", *why_not_a_run_dir(dir) + "; a run there would overwrite its state.json: give the run "
                               "a run_dir of its own (to continue from this checkpoint, set checkpoint.resume to it)");
  }
  struct statvfs vfs {};
  if (::statvfs(existing.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
    throw SpecError("run_dir", subject + " is on a read-only file system");
  }
  if (::access(existing.c_str(), W_OK | X_OK) != 0) {
    throw SpecError("run_dir", subject + " is not writable (" + std::strerror(errno) + ")");
  }
}

RunDir::RunDir(const std::string& dir, const nlohmann::json& job) : dir_(dir) {
  for (const std::string& sub : {run_files::logs(dir), run_files::ranks(dir)}) {
    std::error_code ec;
    fs::create_directories(sub, ec);
    if (ec) launch_failure("run dir: cannot create \"" + sub + "\": " + ec.message());
  }
  lock_fd_ = open_directory(dir);
  if (lock_fd_ < 0) launch_failure("run dir: cannot open \"" + dir + "\": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    fail_run_dir_in_use(dir);
  }
  try {
    fs::remove(run_files::summary(dir));
    write_file_atomic(run_files::job(dir), job.dump(2) + "\n", /*durable=*/false);  // rewritten every run
  } catch (const std::exception& e) {
    ::close(lock_fd_);
    launch_failure(std::string("run dir: ") + e.what());
  }
  keep_reserve();
}

// Allocates the reserve's blocks now, while there is room (a sparse file would free nothing).
void RunDir::keep_reserve() const {
  const std::string path = run_files::reserve(dir_);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = fd < 0 ? errno : ::posix_fallocate(fd, 0, kSummaryReserveBytes);
  if (fd >= 0) ::close(fd);
  if (err != 0) {
    ::unlink(path.c_str());
    spdlog::warn("run dir: cannot reserve {} KiB for the summary ({}); on a full disk it may not be written",
                 kSummaryReserveBytes / 1024, std::strerror(err));
  }
}

RunDir::~RunDir() { ::close(lock_fd_); }

void RunDir::write_state(const nlohmann::json& state) const {
  write_file_atomic(run_files::state(dir_), state.dump(2) + "\n", /*durable=*/false);
}

void RunDir::write_summary(const nlohmann::json& summary) const {
  ::unlink(run_files::reserve(dir_).c_str());
  write_file_atomic(run_files::summary(dir_), summary.dump(2) + "\n");
}

void RunDir::clear_rank_files(int world_size) const {
  for (int rank = 0; rank < world_size; ++rank) {
    ::unlink(result_file_path(dir_, rank).c_str());
    ::unlink(heartbeat_file_path(dir_, rank).c_str());
    ::unlink(backtrace_file_path(dir_, rank).c_str());
    ::unlink(elastic_error_file_path(dir_, rank).c_str());
  }
}

int RunDir::open_rank_log(int rank) const {
  const std::string path = run_files::rank_log(dir_, rank);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);  // read: see append_line
  if (fd < 0) launch_failure("run dir: cannot open \"" + path + "\": " + std::strerror(errno));
  return fd;
}

void fail_run_dir_in_use(const std::string& dir) {
  launch_failure("run dir \"" + dir + "\" is in use by another xlaunch; choose another run_dir or `xlaunch stop " +
                 dir + "`");
}

bool supervisor_running(const std::string& dir) {
  const int fd = open_directory(dir);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

void wait_for_supervisor_exit(const std::string& dir) {
  const int fd = open_directory(dir);
  if (fd < 0) return;
  while (::flock(fd, LOCK_SH) != 0 && errno == EINTR) {
  }
  ::close(fd);
}

std::optional<nlohmann::json> read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(path + ": malformed JSON: " + e.what());
  }
}

std::optional<std::string> why_not_a_run_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(run_files::summary(dir), ec)) return std::nullopt;
  if (!fs::exists(run_files::state(dir), ec)) {
    return "\"" + dir + "\" is not a run directory (no state.json or summary.json)";
  }
  const std::optional<std::int64_t> step = checkpoint_state_step(dir);
  if (!step) return std::nullopt;
  std::string why = "\"" + dir + "\" is a checkpoint" + (*step >= 0 ? " (step " + std::to_string(*step) + ")" : "") +
                    ", not a run directory";
  // RUN/checkpoints/step-N, or RUN/superseded/<time>/step-N.
  fs::path self = fs::absolute(dir, ec).lexically_normal();
  if (!self.has_filename()) self = self.parent_path();  // "DIR/"
  const fs::path checkpoints = self.parent_path();
  for (const fs::path& run : {checkpoints.parent_path(), checkpoints.parent_path().parent_path()}) {
    if (run.has_relative_path() && !why_not_a_run_dir(run.string())) {
      return why + ": it belongs to the run directory \"" + run.string() + "\"";
    }
  }
  return why;
}

}  // namespace xtrain::launcher
