// Integration: every line of every rank reaches its file, whole and in order, however slow the
// console; the console gets whole, prefixed lines.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include "harness.hpp"

using namespace xtrain::test;
using Catch::Matchers::Contains;

namespace {

constexpr long kLines = 100000;

std::string log_path(const TempDir& dir, int rank) { return dir / ("run/logs/rank-" + std::to_string(rank) + ".log"); }

// The file is the separator, then exactly "rank R line 0..N-1" (padded), in order.
void check_file_complete(const TempDir& dir, int rank, long lines, size_t line_bytes) {
  const auto all = split_lines(read_file(log_path(dir, rank)));
  REQUIRE(all.size() == static_cast<size_t>(lines) + 1);
  CHECK(all[0].rfind("==== xlaunch: attempt 1 of 1", 0) == 0);
  long bad = 0;
  for (long i = 0; i < lines; ++i) {
    const std::string& line = all[static_cast<size_t>(i) + 1];
    const std::string head = "rank " + std::to_string(rank) + " line " + std::to_string(i) + " ";
    if (line.rfind(head, 0) != 0 || (line_bytes > 0 && line.size() != line_bytes)) ++bad;
  }
  CHECK(bad == 0);
}

// The console lines of each rank, as the numbers they carry; checks that they only go up.
std::vector<long> console_line_counts(const std::string& out, int nproc) {
  std::vector<long> count(nproc, 0), last(nproc, -1);
  long out_of_order = 0, malformed = 0;
  for (const std::string& line : split_lines(out)) {
    int rank = -1;
    long number = -1;
    if (std::sscanf(line.c_str(), "[rank %d] rank %*d line %ld", &rank, &number) != 2 || rank < 0 || rank >= nproc) {
      ++malformed;
      continue;
    }
    if (number <= last[rank]) ++out_of_order;
    last[rank] = number;
    ++count[rank];
  }
  CHECK(malformed == 0);
  CHECK(out_of_order == 0);
  return count;
}

}  // namespace

TEST_CASE("launcher/output: 4 ranks x 100000 lines arrive complete and in order", "[integration][output]") {
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 4, {"--lines", std::to_string(kLines)}), {}, 60);
  CHECK(r.run.exit_code == 0);
  for (int rank = 0; rank < 4; ++rank) check_file_complete(dir, rank, kLines, 0);
  CHECK(console_line_counts(r.run.out, 4) == std::vector<long>(4, kLines));
}

TEST_CASE("launcher/output: a stalled console never stalls the ranks and files lose nothing",
          "[integration][output]") {
  // 4 x 100,000 lines of 200 bytes: 80 MB, more than the console's 64 MiB backlog. The test
  // reads nothing from xlaunch's stdout until every rank's file is complete.
  constexpr size_t kBytes = 200;
  TempDir dir;
  Process xlaunch({bin_path("xlaunch"),
                   write_spec(dir, test_spec(dir, 4, {"--lines", std::to_string(kLines), "--line-bytes",
                                                      std::to_string(kBytes)}))});
  const auto files_complete = [&] {
    for (int rank = 0; rank < 4; ++rank) {
      std::error_code ec;
      if (std::filesystem::file_size(log_path(dir, rank), ec) < kLines * (kBytes + 1) || ec) return false;
    }
    return true;
  };
  const auto r = xlaunch.wait(90, files_complete);
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  for (int rank = 0; rank < 4; ++rank) check_file_complete(dir, rank, kLines, kBytes);
  const std::regex notice(R"(\[xlaunch\] console fell behind: (\d+) lines dropped \(all are in logs/\))");
  long dropped = 0;
  for (auto it = std::sregex_iterator(r->err.begin(), r->err.end(), notice); it != std::sregex_iterator(); ++it) {
    dropped += std::stol((*it)[1]);
  }
  CHECK(dropped > 0);
  long shown = 0;
  for (long n : console_line_counts(r->out, 4)) shown += n;
  CHECK(shown + dropped == 4 * kLines);
}

TEST_CASE("launcher/output: stdout and stderr keep their order and a last line without newline is kept",
          "[integration][output]") {
  TempDir dir;
  const auto spec = test_spec(dir, 1, {"--print", "one", "--stderr", "two", "--print", "three", "--print-partial", "four"});
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 0);
  const std::string file = read_file(log_path(dir, 0));
  CHECK(file.substr(file.find('\n') + 1) == "one\ntwo\nthree\nfour");
  CHECK_THAT(r.run.out, Contains("[rank 0] one\n[rank 0] two\n[rank 0] three\n[rank 0] four\n"));
  run_job(dir, spec);  // the next run's separator starts a line of its own
  CHECK_THAT(read_file(log_path(dir, 0)), Contains("\nthree\nfour\n==== xlaunch: attempt 1 of 1 at "));
}
