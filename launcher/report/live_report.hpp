// RUN_DIR/report.html while a run goes: a timer on the supervisor's loop looks at metrics.jsonl
// every kIntervalSeconds and rewrites the report when records were added (reading only what was
// appended); finish() writes the last one after summary.json, whatever the outcome.
#pragma once

#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launcher/report/run_reader.hpp"

namespace xtrain::launcher {

class LiveReport {
 public:
  static constexpr int kIntervalSeconds = 10;

  LiveReport(boost::asio::io_context& io, std::string run_dir);
  void start();   // arms the timer
  void finish();  // the final report; stops the timer

 private:
  void arm();
  void write();

  boost::asio::steady_timer timer_;
  std::string run_dir_;
  MetricsLog metrics_;
  bool error_reported_ = false;
};

}  // namespace xtrain::launcher
