#include "launcher/report/live_report.hpp"

#include <spdlog/spdlog.h>

#include "launcher/report/html_report.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {

LiveReport::LiveReport(boost::asio::io_context& io, std::string run_dir)
    : timer_(io), run_dir_(std::move(run_dir)), metrics_(run_files::metrics(run_dir_)) {}

void LiveReport::start() { arm(); }

void LiveReport::arm() {
  timer_.expires_after(std::chrono::seconds(kIntervalSeconds));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (metrics_.update()) write();
    arm();
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
