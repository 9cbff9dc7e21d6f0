#include "cuda/interp/nccl_exchange.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <system_error>

#include <unistd.h>

#include "common/atomic_file.hpp"
#include "common/gpu/nccl_id.hpp"

namespace xtrain::interp {
namespace {

namespace fs = std::filesystem;

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// An exited process whose parent has not collected it yet is a zombie: it runs no more.
bool process_exited(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = read_whole("/proc/" + std::to_string(pid) + "/stat");
  const size_t name_end = stat.rfind(')');  // the state follows the parenthesised command name
  return name_end != std::string::npos && name_end + 2 < stat.size() &&
         (stat[name_end + 2] == 'Z' || stat[name_end + 2] == 'X');
}

}  // namespace

PeerExchange::PeerExchange(const std::string& id_hex, int rank, int nranks)
    : dir_(interpret_nccl_meeting_dir(id_hex, std::getenv("TMPDIR"))),
      rank_(rank),
      nranks_(nranks),
      pids_(static_cast<size_t>(nranks), 0) {
  fs::create_directories(dir_);
  publish("joined", std::to_string(::getpid()), nullptr, 0);
  pids_[static_cast<size_t>(rank)] = ::getpid();
}

PeerExchange::~PeerExchange() {
  std::error_code ignored;
  for (const std::string& name : parts_) fs::remove(file(name, rank_), ignored);  // its markers stay for the peers
  try {
    write_file_atomic(file("left", rank_).string(), "", false);
    all_joined();  // learns the process of every rank that has joined since
  } catch (const std::exception&) {
    return;  // the directory is gone or unwritable, or a rank's file damaged: leave it to the others
  }
  for (int r = 0; r < nranks_; ++r) {
    // A rank that never joined finds no communicator to join now: it times out as without this one.
    const bool gone = fs::exists(file("left", r)) || pids_[static_cast<size_t>(r)] == 0 || exited(r);
    if (r != rank_ && !gone) return;
  }
  fs::remove_all(dir_, ignored);  // the last one out
}

fs::path PeerExchange::file(const std::string& name, int rank) const {
  return dir_ / (name + ".rank" + std::to_string(rank));
}

bool PeerExchange::exited(int rank) const { return process_exited(pids_[static_cast<size_t>(rank)]); }

bool PeerExchange::all_joined() {
  bool all = true;
  for (int r = 0; r < nranks_; ++r) {
    pid_t& pid = pids_[static_cast<size_t>(r)];
    if (pid != 0) continue;
    const fs::path joined = file("joined", r);
    if (!fs::exists(joined)) {
      all = false;
      continue;
    }
    const std::string text = read_whole(joined);
    pid = static_cast<pid_t>(std::atol(text.c_str()));
    if (pid <= 0) throw std::runtime_error(joined.string() + " does not hold a process id: \"" + text + "\"");
  }
  return all;
}

PeerExchange::Arrival PeerExchange::arrival(const std::string& name, std::string& why) {
  Arrival seen = Arrival::all;
  for (int r = 0; r < nranks_; ++r) {
    if (fs::exists(file(name, r))) continue;
    seen = Arrival::waiting;
    // A rank writes its parts, then "finished", then "left", then exits: whichever of those is
    // seen, the file is asked for again after it, since it may have been written just before.
    const std::string rank = "rank " + std::to_string(r);
    const pid_t pid = pids_[static_cast<size_t>(r)];
    std::string gone;
    if (fs::exists(file("left", r))) {
      gone = rank + " left the communicator (destroyed or aborted it)";
    } else if (name != "finished" && fs::exists(file("finished", r))) {
      gone = rank + " finished (ncclCommFinalize)";
    } else if (pid != 0 && exited(r)) {
      gone = rank + " (process " + std::to_string(pid) + ") exited";
    }
    if (!gone.empty() && !fs::exists(file(name, r))) {
      why = gone + " without its " + name;
      return Arrival::lost;
    }
  }
  return seen;
}

void PeerExchange::publish(const std::string& name, const std::string& what, const void* data, size_t bytes) {
  std::string contents = what + "\n";
  contents.append(static_cast<const char*>(data), bytes);
  write_file_atomic(file(name, rank_).string(), contents, false);  // between processes: no fsync needed
  if (name.starts_with("part-") && std::find(parts_.begin(), parts_.end(), name) == parts_.end()) {
    parts_.push_back(name);
  }
}

std::vector<std::uint8_t> PeerExchange::read(const std::string& name, int rank, const std::string& what) const {
  const fs::path path = file(name, rank);
  if (!fs::exists(path)) throw std::runtime_error(path.string() + " is not there");
  const std::string contents = read_whole(path);
  const size_t line_end = contents.find('\n');
  if (line_end == std::string::npos) throw std::runtime_error(path.string() + " is damaged: no header line");
  const std::string theirs = contents.substr(0, line_end);
  if (theirs != what) {
    throw std::runtime_error("rank " + std::to_string(rank) + "'s " + name + " is " + theirs + ", but this rank's is " +
                             what + " (every rank must issue the same collectives in the same order; on a GPU "
                             "NCCL would hang or mix the data)");
  }
  return {contents.begin() + static_cast<std::ptrdiff_t>(line_end) + 1, contents.end()};
}

void PeerExchange::forget(const std::string& name) {
  std::error_code ignored;
  fs::remove(file(name, rank_), ignored);
  std::erase(parts_, name);
}

}  // namespace xtrain::interp
