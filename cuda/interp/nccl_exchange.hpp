// Interpret mode's NCCL between the processes of one machine (nccl.cpp): where the ranks of a
// communicator meet and how the parts of a collective travel. The ranks share a directory named
// by their unique id (interpret_nccl_meeting_dir, common/gpu/nccl_id.hpp); every entry there is
// one rank's file, written under a temporary name and renamed, so a reader sees all of it or
// nothing:
//   joined.rank<R>       the rank's process id: it has joined, and whether it still runs
//   part-<I>.rank<R>     its part of collective I (a text line naming the collective, then data)
//   finished.rank<R>     it has run all its collectives (ncclCommFinalize)
//   left.rank<R>         it has destroyed or aborted its communicator
// The last rank to leave (every other has left or exited) removes the directory; a rank that was
// killed leaves its files behind, and when every rank was, xlaunch removes them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <sys/types.h>
#include <vector>

namespace xtrain::interp {

class PeerExchange {
 public:
  // Joins: creates the directory if no rank has yet, and announces this rank's process.
  PeerExchange(const std::string& id_hex, int rank, int nranks);
  ~PeerExchange();  // leaves: removes this rank's parts (see above for the directory)
  PeerExchange(const PeerExchange&) = delete;
  PeerExchange& operator=(const PeerExchange&) = delete;

  // Whether every rank has announced itself, each asked until it has.
  bool all_joined();

  enum class Arrival { all, waiting, lost };
  // Whether every rank's file `name` (a part, or "finished") is there. `lost` when a rank that
  // has not written it never will: it has left, finished or exited (`why` says which rank, how).
  Arrival arrival(const std::string& name, std::string& why);

  // Writes this rank's file `name`: `what`, the line that names the collective, then the data.
  void publish(const std::string& name, const std::string& what, const void* data, size_t bytes);
  // Rank `rank`'s data in file `name`, after checking that its line names the same collective as
  // `what` (std::runtime_error naming both when not, and when the file is damaged).
  std::vector<std::uint8_t> read(const std::string& name, int rank, const std::string& what) const;
  // Removes this rank's file `name` (every peer has read it).
  void forget(const std::string& name);

  static std::string part_name(std::uint64_t index) { return "part-" + std::to_string(index); }

 private:
  std::filesystem::path file(const std::string& name, int rank) const;
  bool exited(int rank) const;

  std::filesystem::path dir_;
  int rank_ = 0;
  int nranks_ = 1;
  std::vector<pid_t> pids_;  // of the ranks that have joined (0: not yet)
  std::vector<std::string> parts_;  // this rank's part files not forgotten yet
};

}  // namespace xtrain::interp
