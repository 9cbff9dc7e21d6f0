#include "harness.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace xtrain::test {
namespace {

namespace fs = std::filesystem;

void drain(int& fd, std::string& into) {
  char buffer[65536];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer));
  if (n > 0) {
    into.append(buffer, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    ::close(fd);
    fd = -1;
  }
}

}  // namespace

// $XTRAIN_BIN_DIR, where set, names a relocated bundle (scripts/device-check.sh runs the [gpu]
// cases from one); otherwise the build's bin/.
std::string bin_path(const std::string& name) {
  const char* dir = std::getenv("XTRAIN_BIN_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : XTRAIN_BIN_DIR) + "/" + name;
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "xlaunch-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

nlohmann::json test_spec(const TempDir& dir, int nproc, const std::vector<std::string>& worker_args) {
  std::vector<std::string> command = {bin_path("xtrain-test-worker")};
  command.insert(command.end(), worker_args.begin(), worker_args.end());
  return {{"name", "test"},
          {"run_dir", dir / "run"},
          {"nproc_per_node", nproc},
          {"device", "cpu"},
          {"worker", {{"command", command}}},
          {"launcher", {{"term_timeout_s", 2}}}};
}

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::string write_spec(const TempDir& dir, const nlohmann::json& spec, const std::string& name) {
  return write_file(dir / name, spec.dump(2));
}

Process::Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>* env,
                 bool own_group) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> env_entries;
  if (env) {
    for (const auto& [k, v] : *env) env_entries.push_back(k + "=" + v);
  }
  std::vector<char*> c_argv, c_env;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (auto& e : env_entries) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  started_ = now_s();
  pid_ = ::fork();
  if (pid_ == 0) {
    if (own_group) ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(c_argv[0], c_argv.data(), env ? c_env.data() : environ);
    ::_exit(127);
  }
  if (own_group) ::setpgid(pid_, pid_);  // whichever runs first: the group exists before the test signals it
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

Process::~Process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Process::signal(int sig) const { ::kill(pid_, sig); }

std::optional<Finished> Process::wait(double timeout_s, const std::function<bool()>& read_stdout_when) {
  Finished result;
  const double deadline = started_ + timeout_s;
  int status = 0;
  bool exited = false;
  while (now_s() < deadline) {
    const bool read_out = !read_stdout_when || read_stdout_when();
    pollfd fds[2] = {{read_out ? out_fd_ : -1, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (out_fd_ < 0 && err_fd_ < 0) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    ::poll(fds, 2, 10);
    if (fds[0].revents && out_fd_ >= 0) drain(out_fd_, result.out);
    if (fds[1].revents && err_fd_ >= 0) drain(err_fd_, result.err);
  }
  if (!exited) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return std::nullopt;
  }
  result.exit_time = now_s();
  result.seconds = result.exit_time - started_;
  pid_ = -1;
  if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  } else {
    result.exit_code = WEXITSTATUS(status);
  }
  return result;
}

std::optional<Finished> run_xlaunch(const std::vector<std::string>& args, double timeout_s,
                                    const std::map<std::string, std::string>* env) {
  std::vector<std::string> argv = {bin_path("xlaunch")};
  argv.insert(argv.end(), args.begin(), args.end());
  Process process(argv, env);
  return process.wait(timeout_s);
}

JobRun run_job(const TempDir& dir, const nlohmann::json& spec, const std::vector<std::string>& args,
               double timeout_s, const std::map<std::string, std::string>* env) {
  std::vector<std::string> all = {write_spec(dir, spec)};
  all.insert(all.end(), args.begin(), args.end());
  auto finished = run_xlaunch(all, timeout_s, env);
  REQUIRE(finished);
  const std::string summary = dir / "run/summary.json";
  return {*finished, exists(summary) ? read_json(summary) : nlohmann::json()};
}

bool wait_until(const std::function<bool()>& condition, double timeout_s) {
  const double deadline = now_s() + timeout_s;
  while (!condition()) {
    if (now_s() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && line.size() > close + 2 && line[close + 2] == 'Z';
}

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = -1;
  in >> pid;
  return in ? pid : -1;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

bool exists(const std::string& path) { return fs::exists(path); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double parse_iso_time(const std::string& text) {
  std::tm parts{};
  const char* rest = ::strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &parts);
  if (!rest) throw std::runtime_error("not an ISO time: " + text);
  return static_cast<double>(::timegm(&parts)) + std::atof(rest);  // rest: ".345Z"
}

std::map<std::string, std::string> environment_with(const std::map<std::string, std::string>& changes) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : changes) env[name] = value;
  return env;
}

std::map<std::string, std::string> printed_env(const std::string& log_text) {
  std::map<std::string, std::string> env;
  for (const std::string& line : split_lines(log_text)) {
    if (line.rfind("ENV ", 0) != 0) continue;
    const auto eq = line.find('=');
    env[line.substr(4, eq - 4)] = line.substr(eq + 1);
  }
  return env;
}

}  // namespace xtrain::test
