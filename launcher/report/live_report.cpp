#include "launcher/report/live_report.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "launcher/report/html_report.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {

LiveReport::LiveReport(boost::asio::io_context& io, std::string run_dir)
    : timer_(io), run_dir_(std::move(run_dir)), metrics_(run_files::metrics(run_dir_)) {}

std::chrono::steady_clock::duration LiveReport::next_interval(std::chrono::steady_clock::duration spent) {
  return std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(kIntervalSeconds), spent * kIdleFactor);
}

void LiveReport::start() { arm(std::chrono::seconds(kIntervalSeconds)); }

void LiveReport::arm(std::chrono::steady_clock::duration after) {
  timer_.expires_after(after);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    const auto began = std::chrono::steady_clock::now();
    if (metrics_.update()) write();
    arm(next_interval(std::chrono::steady_clock::now() - began));
  });
}

void LiveReport::finish() {
  timer_.cancel();
  metrics_.update();
  write();
}

void LiveReport::write() {
  try {
    const auto run = read_run_info(run_dir_);
    if (run) write_report(*run, metrics_, run_files::report(run_dir_));
  } catch (const std::exception& e) {
    if (!error_reported_) spdlog::error("cannot write the report: {}", e.what());
    error_reported_ = true;
  }
}

}  // namespace xtrain::launcher
