#include "launcher/process/heartbeat.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <sys/inotify.h>
#include <unistd.h>

namespace xtrain::launcher {
namespace {

constexpr uint32_t kBeatEvents = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO;
constexpr size_t kEventBufferBytes = 64 * 1024;

}  // namespace

int heartbeat_rank_from_name(const std::string& name) {
  static const std::string kPrefix = "rank-", kSuffix = ".heartbeat";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(digits);
}

HeartbeatWatch::HeartbeatWatch(boost::asio::io_context& io, const std::string& ranks_dir, int world_size,
                               double timeout_s, std::function<void(int)> on_hung, std::function<void(int)> on_beat)
    : timeout_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
      on_hung_(std::move(on_hung)), on_beat_(std::move(on_beat)), inotify_(io), buffer_(kEventBufferBytes) {
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("heartbeat watchdog: inotify_init1: ") + std::strerror(errno));
  inotify_.assign(fd);
  if (::inotify_add_watch(fd, ranks_dir.c_str(), kBeatEvents) < 0) {
    throw std::runtime_error("heartbeat watchdog: cannot watch \"" + ranks_dir + "\": " + std::strerror(errno));
  }
  for (int rank = 0; rank < world_size; ++rank) clocks_.push_back(std::make_unique<RankClock>(io));
  read_events();
}

HeartbeatWatch::~HeartbeatWatch() = default;

void HeartbeatWatch::start(int rank) {
  RankClock& clock = *clocks_.at(rank);
  clock.last_beat = Clock::now();
  clock.active = timeout_ > Clock::duration::zero();
  if (clock.active) arm(rank, clock.last_beat + timeout_);
}

void HeartbeatWatch::stop(int rank) {
  RankClock& clock = *clocks_.at(rank);
  clock.active = false;
  clock.timer.cancel();
}

void HeartbeatWatch::beat(int rank) {
  if (rank < 0 || rank >= static_cast<int>(clocks_.size())) return;
  clocks_[rank]->last_beat = Clock::now();  // the armed timer re-arms itself when it fires
  on_beat_(rank);
}

// Fires at the deadline of the beat known when it was armed; a later beat moves the deadline.
void HeartbeatWatch::arm(int rank, Clock::time_point deadline) {
  RankClock& clock = *clocks_[rank];
  clock.timer.expires_at(deadline);
  clock.timer.async_wait([this, rank](const boost::system::error_code& ec) {
    RankClock& c = *clocks_[rank];
    if (ec || !c.active) return;
    const Clock::time_point due = c.last_beat + timeout_;
    if (Clock::now() < due) return arm(rank, due);
    c.active = false;
    on_hung_(rank);
  });
}

void HeartbeatWatch::read_events() {
  inotify_.async_read_some(boost::asio::buffer(buffer_), [this](const boost::system::error_code& ec, size_t bytes) {
    if (ec) return;  // closed: the supervisor is finishing
    on_events(bytes);
    read_events();
  });
}

void HeartbeatWatch::on_events(size_t bytes) {
  for (size_t offset = 0; offset + sizeof(inotify_event) <= bytes;) {
    inotify_event event;
    std::memcpy(&event, buffer_.data() + offset, sizeof(event));
    if (event.mask & IN_Q_OVERFLOW) {
      for (int rank = 0; rank < static_cast<int>(clocks_.size()); ++rank) beat(rank);  // events lost: assume alive
    } else if (event.len > 0) {
      beat(heartbeat_rank_from_name(buffer_.data() + offset + sizeof(inotify_event)));
    }
    offset += sizeof(inotify_event) + event.len;
  }
}

}  // namespace xtrain::launcher
