// Heartbeat watchdog. inotify on ranks/ (an asio stream_descriptor, no polling) sees every
// write, touch or rename of ranks/rank-R.heartbeat, and reports each beat (the supervisor then
// reads the rank's progress record). With a timeout, each rank's clock starts at its spawn and
// restarts at every beat; a rank whose clock reaches the timeout is reported hung, once. Without
// one (timeout 0) it only reports beats.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

namespace xtrain::launcher {

class HeartbeatWatch {
 public:
  // Throws std::runtime_error when inotify cannot watch `ranks_dir`.
  HeartbeatWatch(boost::asio::io_context& io, const std::string& ranks_dir, int world_size, double timeout_s,
                 std::function<void(int rank)> on_hung, std::function<void(int rank)> on_beat);
  ~HeartbeatWatch();
  HeartbeatWatch(const HeartbeatWatch&) = delete;
  HeartbeatWatch& operator=(const HeartbeatWatch&) = delete;

  void start(int rank);  // at spawn: the clock starts now
  void stop(int rank);   // the rank exited or is being stopped

 private:
  using Clock = std::chrono::steady_clock;
  struct RankClock {
    explicit RankClock(boost::asio::io_context& io) : timer(io) {}
    boost::asio::steady_timer timer;
    Clock::time_point last_beat;
    bool active = false;
  };

  void read_events();
  void on_events(size_t bytes);
  void beat(int rank);
  void arm(int rank, Clock::time_point deadline);

  const Clock::duration timeout_;
  std::function<void(int)> on_hung_;
  std::function<void(int)> on_beat_;
  boost::asio::posix::stream_descriptor inotify_;
  std::vector<std::unique_ptr<RankClock>> clocks_;  // by rank
  std::vector<char> buffer_;
};

// "rank-R.heartbeat" -> R; -1 for any other name.
int heartbeat_rank_from_name(const std::string& name);

}  // namespace xtrain::launcher
