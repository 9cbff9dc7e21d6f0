// RUN_DIR/report.html while a run goes: a timer on the supervisor's loop looks at metrics.jsonl
// every kIntervalSeconds and rewrites the report when records were added (reading only what was
// appended); finish() writes the last one after summary.json, whatever the outcome. Drawing the
// charts takes time in the number of records (about 2 s for a million, measured): the next look
// waits kIdleFactor times as long as the last one took, when that is longer, so the report never
// takes more than a twentieth of the loop that watches the ranks.
#pragma once

#include <chrono>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launcher/report/run_reader.hpp"

namespace xtrain::launcher {

class LiveReport {
 public:
  static constexpr int kIntervalSeconds = 10;
  static constexpr int kIdleFactor = 20;

  // How long to wait before the next look, after one that took `spent`.
  static std::chrono::steady_clock::duration next_interval(std::chrono::steady_clock::duration spent);

  LiveReport(boost::asio::io_context& io, std::string run_dir);
  void start();   // arms the timer
  void finish();  // the final report; stops the timer

 private:
  void arm(std::chrono::steady_clock::duration after);
  void write();

  boost::asio::steady_timer timer_;
  std::string run_dir_;
  MetricsLog metrics_;
  bool error_reported_ = false;
};

}  // namespace xtrain::launcher
