// Training runs through the real xlaunch and xtrain-worker (XTRAIN_BIN_DIR) for the end-to-end
// tests: a job on a generated text corpus in a fresh directory, launched on CPU ranks with
// --set overrides, its output captured, its results, losses and checkpoints read back.
#pragma once

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/worker/run_metrics.hpp"

namespace xtrain::test {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

struct Outcome {
  int exit_code = -1;
  std::string output;  // xlaunch's stdout and stderr, in order
};

// Starts argv in its own process group with stdout+stderr to `log`; returns its pid. A
// `pending_signal` is blocked and raised before the exec (a pending signal survives execve): the
// program starts with it already delivered, as by a signal in its very first moments.
inline pid_t spawn(const std::vector<std::string>& argv, const fs::path& log,
                   const std::map<std::string, std::string>& env, int pending_signal = 0) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    if (pending_signal != 0) {
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, pending_signal);
      ::sigprocmask(SIG_BLOCK, &one, nullptr);
      ::raise(pending_signal);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(127);
  }
  return pid;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits for pid; kills its whole group after `limit` (a hung test must not hang CI).
inline int wait_for(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::killpg(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("timed out after " << limit.count() << " s");
    }
    std::this_thread::sleep_for(20ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A text corpus of English-like lines, made here so the test needs no data files.
inline void write_corpus(const fs::path& path, size_t bytes) {
  static const char* const words[] = {"the", "model", "learns", "a", "simple", "pattern", "of", "words", "and",
                                      "every", "rank", "sees", "same", "batch", "while", "loss", "falls", "slowly",
                                      "gloo", "averages", "gradients", "in", "order"};
  std::ofstream out(path, std::ios::binary);
  std::uint64_t x = 88172645463325252ull;
  size_t n = 0;
  while (n < bytes) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::string w = words[x % (sizeof words / sizeof *words)];
    w += (x >> 20) % 9 == 0 ? ".\n" : " ";
    out << w;
    n += w.size();
  }
}

// A TCP port that was free a moment ago on 127.0.0.1.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class Job {
 public:
  explicit Job(const std::string& name) {
    for (const char* program : {"xlaunch", "xtrain-worker"}) {
      INFO("build the " << program << " target first");
      REQUIRE(fs::exists(fs::path(XTRAIN_BIN_DIR) / program));
    }
    dir_ = fs::temp_directory_path() /
           ("xtrain-e2e-" + name + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(dir_);
    corpus_ = dir_ / "corpus.txt";
    write_corpus(corpus_, 60'000);
    spec_ = {
        {"name", name},
        {"device", "cpu"},
        {"backend", "auto"},
        {"launcher", {{"term_timeout_s", 2}, {"timeout_s", 120}}},
        {"nodes", {{"rdzv_timeout_s", 20}}},
        {"model", {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"seq_len", 16}, {"vocab_size", 256}, {"init_seed", 5}}},
        {"data", {{"train", corpus_.string()}}},
        {"train",
         {{"steps", 20}, {"batch_size", 8}, {"micro_batch_size", 2}, {"lr", 3e-3}, {"min_lr", 3e-4},
          {"warmup_steps", 3}, {"log_every", 1}, {"seed", 11}}},
        {"checkpoint", {{"every", 0}, {"keep", 3}, {"resume", "auto"}}},
    };
  }
  ~Job() { fs::remove_all(dir_); }

  json& spec() { return spec_; }
  const fs::path& dir() const { return dir_; }
  fs::path run_dir(const std::string& run) const { return dir_ / "runs" / run; }

  // xlaunch SPEC --run-dir RUN --nproc-per-node N --tee rank0 [--set ...]
  Outcome launch(const std::string& run, int nproc, const std::vector<std::string>& sets = {},
                 const std::map<std::string, std::string>& env = {}) {
    return finish(start(run, nproc, sets, env), run);
  }

  // xlaunch SPEC --check with the same settings: the exit code and the output of the check.
  Outcome check(const std::string& run, int nproc, const std::vector<std::string>& sets = {}) {
    return finish(start(run, nproc, sets, {}, {"--check"}), run);
  }

  // xlaunch with `args` (a subcommand: status RUN_DIR --json, ...), its output under `name`.
  Outcome command(const std::vector<std::string>& args, const std::string& name) {
    std::vector<std::string> argv = {std::string(XTRAIN_BIN_DIR) + "/xlaunch"};
    argv.insert(argv.end(), args.begin(), args.end());
    return finish(spawn(argv, dir_ / (name + ".out"), {}), name);
  }

  Outcome finish(pid_t pid, const std::string& name) {
    Outcome o;
    o.exit_code = wait_for(pid, 150s);
    o.output = read_text(dir_ / (name + ".out"));
    return o;
  }

  pid_t start(const std::string& run, int nproc, const std::vector<std::string>& sets = {},
              const std::map<std::string, std::string>& env = {}, const std::vector<std::string>& flags = {}) {
    // One spec file per run: the two nodes of launch_two_nodes start at once, and rewriting a
    // shared file while the first xlaunch reads it would hand that one an empty spec.
    const fs::path spec_path = dir_ / (run + ".json");
    std::ofstream(spec_path) << spec_.dump(2);
    std::vector<std::string> argv = {std::string(XTRAIN_BIN_DIR) + "/xlaunch", spec_path.string(),
                                     "--run-dir",  run_dir(run).string(),
                                     "--nproc-per-node", std::to_string(nproc),
                                     "--tee", "rank0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return spawn(argv, dir_ / (run + ".out"), env);
  }

  // The same job as two nodes of one rank each, on this machine: one xlaunch per node, run dirs
  // RUN-n0 and RUN-n1 (not shared), meeting through node 0's store on a free port.
  std::pair<Outcome, Outcome> launch_two_nodes(const std::string& run, std::vector<std::string> sets,
                                               std::map<std::string, std::string> env = {}) {
    sets.push_back("nodes.nnodes=2");
    sets.push_back("nodes.rdzv_endpoint=127.0.0.1:" + std::to_string(free_port()));
    sets.push_back("nodes.rdzv_timeout_s=20");
    env["XTRAIN_JOB_TOKEN"] = "e2e-token";
    pid_t pids[2];
    for (int node = 0; node < 2; ++node) {
      auto node_sets = sets;
      node_sets.push_back("nodes.node_rank=" + std::to_string(node));
      pids[node] = start(run + "-n" + std::to_string(node), 1, node_sets, env);
    }
    std::pair<Outcome, Outcome> out;
    out.first.exit_code = wait_for(pids[0], 150s);
    out.second.exit_code = wait_for(pids[1], 150s);
    out.first.output = read_text(dir_ / (run + "-n0.out"));
    out.second.output = read_text(dir_ / (run + "-n1.out"));
    return out;
  }

  std::map<long, double> losses(const std::string& run) const { return xtrain::test::read_losses(run_dir(run)); }

  json result(const std::string& run, int rank) const {
    return json::parse(read_text(run_dir(run) / "ranks" / ("rank-" + std::to_string(rank) + ".json")));
  }

  // Every rank's result, checking they agree on the step and the parameter digest.
  std::string common_digest(const std::string& run, int nproc) const {
    const json r0 = result(run, 0);
    for (int r = 1; r < nproc; ++r) {
      const json rr = result(run, r);
      INFO("run " << run << " rank " << r);
      CHECK(rr.at("param_digest") == r0.at("param_digest"));
      CHECK(rr.at("step") == r0.at("step"));
    }
    return r0.at("param_digest").get<std::string>();
  }

  std::vector<std::string> checkpoints(const std::string& run) const {
    std::vector<std::string> names;
    const fs::path d = run_dir(run) / "checkpoints";
    if (!fs::exists(d)) return names;
    for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path dir_;
  fs::path corpus_;
  json spec_;
};

// Waits until metrics.jsonl of `run_dir` records step `step` (at most 120 s).
inline void wait_for_step(const fs::path& run_dir, long step) {
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  for (;;) {
    const auto losses = read_losses(run_dir);
    if (!losses.empty() && losses.rbegin()->first >= step) return;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(20ms);
  }
}

// A small tmpfs mounted at `dir` while it lives (root only; `mounted` says whether it worked).
class Tmpfs {
 public:
  Tmpfs(const fs::path& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    mounted = ::geteuid() == 0 && ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~Tmpfs() {
    if (mounted) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  bool mounted = false;

 private:
  fs::path dir_;
};

inline void require_ok(const Outcome& o) {
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
}

// The line of `output` that contains "error: ", for messages checked by content.
inline std::string error_line(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("error: ") != std::string::npos) return line;
  }
  return "";
}

}  // namespace xtrain::test
