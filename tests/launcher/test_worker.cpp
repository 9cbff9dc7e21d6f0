// xtrain-test-worker: a stand-in rank for xlaunch's integration tests. Flags are read in order;
// `--rank R` (or `--rank all`, the default) selects which ranks the following flags apply to.
// Whatever applies runs in this order: pid file, ignore SIGTERM, grandchild, environment,
// output, metrics, result file, heartbeat, sleep, then the end: fail-until-restart, signal, exit, hang.
//
//   --pid-dir DIR              write DIR/rank-R.pid (and DIR/grandchild-R.pid)
//   --ignore-term | --ignore-int   ignore SIGTERM | SIGINT
//   --usr1-exit N              exit N when SIGUSR1 arrives
//   --grandchild               fork a child that sleeps forever in the rank's process group
//   --escaped-grandchild       fork a child that leaves the group (setsid), holding stdout open;
//                              writes DIR/escaped-R.pid
//   --print-env                print "ENV NAME=VALUE" for every variable, sorted
//   --print TEXT | --stderr TEXT | --print-partial TEXT (no newline)
//   --lines N [--line-bytes B] print N numbered lines as fast as possible, padded to B bytes
//   --metrics N                append steps 1..N to $XTRAIN_RUN_DIR/metrics.jsonl: loss 8/step,
//                              lr, grad_norm, tokens_per_s, and rank_step_ms (10 + r ms for rank r)
//   --result-error MESSAGE     write {"error": MESSAGE} to $XTRAIN_RESULT_FILE
//   --heartbeat S [--heartbeat-for T]  touch $XTRAIN_HEARTBEAT_FILE every S s (for T s only)
//   --sleep S                  sleep S seconds
//   --fail-until-restart K     exit 3 while XTRAIN_RESTART_COUNT < K
//   --signal N | --exit N | --hang   (the first that applies ends the rank)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

extern char** environ;

namespace {

struct Actions {
  std::string pid_dir;
  bool ignore_term = false;
  bool ignore_int = false;
  int usr1_exit = -1;
  bool grandchild = false;
  bool escaped_grandchild = false;
  bool print_env = false;
  std::vector<std::pair<int, std::string>> texts;  // fd (1 or 2, or -1 = stdout without '\n'), text
  long lines = 0;
  size_t line_bytes = 0;
  long metrics = 0;
  std::string result_error;
  double heartbeat_every = 0;
  double heartbeat_for = -1;
  double sleep_s = 0;
  int fail_until_restart = 0;
  int signal = 0;
  int exit_code = -1;  // -1: not given
  bool hang = false;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

Actions parse(int argc, char** argv, int rank) {
  Actions a;
  bool selected = true;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "test worker: %s needs a value\n", flag.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (flag == "--rank") {
      const std::string which = next();
      selected = which == "all" || std::atoi(which.c_str()) == rank;
      continue;
    }
    if (flag == "--pid-dir") {
      a.pid_dir = next();  // for every rank
      continue;
    }
    const bool takes_value = flag != "--ignore-term" && flag != "--ignore-int" && flag != "--grandchild" &&
                             flag != "--escaped-grandchild" && flag != "--print-env" && flag != "--hang";
    const std::string value = takes_value ? next() : "";
    if (!selected) continue;
    if (flag == "--ignore-term") a.ignore_term = true;
    else if (flag == "--ignore-int") a.ignore_int = true;
    else if (flag == "--usr1-exit") a.usr1_exit = std::atoi(value.c_str());
    else if (flag == "--grandchild") a.grandchild = true;
    else if (flag == "--escaped-grandchild") a.escaped_grandchild = true;
    else if (flag == "--print-env") a.print_env = true;
    else if (flag == "--print") a.texts.emplace_back(1, value);
    else if (flag == "--stderr") a.texts.emplace_back(2, value);
    else if (flag == "--print-partial") a.texts.emplace_back(-1, value);
    else if (flag == "--lines") a.lines = std::atol(value.c_str());
    else if (flag == "--line-bytes") a.line_bytes = std::strtoul(value.c_str(), nullptr, 10);
    else if (flag == "--metrics") a.metrics = std::atol(value.c_str());
    else if (flag == "--result-error") a.result_error = value;
    else if (flag == "--heartbeat") a.heartbeat_every = std::atof(value.c_str());
    else if (flag == "--heartbeat-for") a.heartbeat_for = std::atof(value.c_str());
    else if (flag == "--sleep") a.sleep_s = std::atof(value.c_str());
    else if (flag == "--fail-until-restart") a.fail_until_restart = std::atoi(value.c_str());
    else if (flag == "--signal") a.signal = std::atoi(value.c_str());
    else if (flag == "--exit") a.exit_code = std::atoi(value.c_str());
    else if (flag == "--hang") a.hang = true;
    else {
      std::fprintf(stderr, "test worker: unknown flag %s\n", flag.c_str());
      std::exit(64);
    }
  }
  return a;
}

void write_pid(const std::string& dir, const std::string& name, pid_t pid) {
  std::ofstream(dir + "/" + name) << pid << "\n";
}

// A child that sleeps forever, in this process group or (escaped) in a session of its own;
// returns once the child is where it belongs.
void fork_sleeper(const std::string& pid_dir, const std::string& pid_file, bool escape) {
  int ready[2];
  if (::pipe(ready) != 0) std::exit(70);
  const pid_t child = ::fork();
  if (child == 0) {
    if (escape) ::setsid();
    ::close(ready[0]);
    ::close(ready[1]);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char byte;
  (void)!::read(ready[0], &byte, 1);  // end of file: the child has left the group if it should
  ::close(ready[0]);
  if (!pid_dir.empty()) write_pid(pid_dir, pid_file, child);
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void print_environment() {
  std::vector<std::string> entries;
  for (char** e = environ; *e; ++e) entries.emplace_back(*e);
  std::sort(entries.begin(), entries.end());
  std::string out;
  for (const auto& entry : entries) out += "ENV " + entry + "\n";
  write_all(1, out);
}

// "rank R line I " padded with '.' to `bytes` (without the newline), in 64 KiB writes.
void print_lines(int rank, long count, size_t bytes) {
  std::string batch;
  for (long i = 0; i < count; ++i) {
    std::string line = "rank " + std::to_string(rank) + " line " + std::to_string(i) + " ";
    if (line.size() < bytes) line.append(bytes - line.size(), '.');
    batch += line + "\n";
    if (batch.size() >= 64 * 1024) write_all(1, batch), batch.clear();
  }
  write_all(1, batch);
}

void append_metrics(long steps) {
  const char* dir = std::getenv("XTRAIN_RUN_DIR");
  if (!dir) return;
  const int world = env_int("WORLD_SIZE", 1);
  std::ofstream out(std::string(dir) + "/metrics.jsonl", std::ios::app);
  for (long step = 1; step <= steps; ++step) {
    std::string ranks;
    for (int r = 0; r < world; ++r) ranks += (r ? "," : "") + std::to_string(10 + r);
    out << "{\"step\": " << step << ", \"loss\": " << 8.0 / static_cast<double>(step)
        << ", \"lr\": 0.001, \"grad_norm\": 1.5, \"tokens_per_s\": 1000, \"ms_per_step\": 10, \"rank_step_ms\": ["
        << ranks << "]}\n";
  }
}

void heartbeat_loop(std::string path, double every, double for_s) {
  const auto start = std::chrono::steady_clock::now();
  for (long beat = 0;; ++beat) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (for_s >= 0 && elapsed > for_s) return;
    std::ofstream(path, std::ios::trunc) << beat << "\n";
    std::this_thread::sleep_for(std::chrono::duration<double>(every));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int("RANK", 0);
  const Actions a = parse(argc, argv, rank);
  if (!a.pid_dir.empty()) write_pid(a.pid_dir, "rank-" + std::to_string(rank) + ".pid", ::getpid());
  if (a.ignore_term) std::signal(SIGTERM, SIG_IGN);
  if (a.ignore_int) std::signal(SIGINT, SIG_IGN);
  static int usr1_exit = a.usr1_exit;
  if (usr1_exit >= 0) std::signal(SIGUSR1, [](int) { ::_exit(usr1_exit); });
  if (a.grandchild) fork_sleeper(a.pid_dir, "grandchild-" + std::to_string(rank) + ".pid", false);
  if (a.escaped_grandchild) fork_sleeper(a.pid_dir, "escaped-" + std::to_string(rank) + ".pid", true);
  if (a.print_env) print_environment();
  for (const auto& [fd, text] : a.texts) write_all(fd < 0 ? 1 : fd, fd < 0 ? text : text + "\n");
  if (a.lines > 0) print_lines(rank, a.lines, a.line_bytes);
  if (a.metrics > 0) append_metrics(a.metrics);
  if (!a.result_error.empty()) {
    const char* path = std::getenv("XTRAIN_RESULT_FILE");
    if (path) std::ofstream(path) << "{\"error\": \"" << a.result_error << "\"}\n";
  }
  if (a.heartbeat_every > 0) {
    const char* path = std::getenv("XTRAIN_HEARTBEAT_FILE");
    if (path) std::thread(heartbeat_loop, std::string(path), a.heartbeat_every, a.heartbeat_for).detach();
  }
  if (a.sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(a.sleep_s));
  if (env_int("XTRAIN_RESTART_COUNT", 0) < a.fail_until_restart) return 3;
  if (a.signal > 0) {
    std::signal(a.signal, SIG_DFL);
    std::raise(a.signal);
  }
  if (a.exit_code >= 0) return a.exit_code;
  if (a.hang) {
    for (;;) ::pause();
  }
  return 0;
}
