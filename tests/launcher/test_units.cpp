#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "common/exit_codes.hpp"
#include "launcher/process/heartbeat.hpp"
#include "launcher/process/log_stream.hpp"
#include "launcher/process/rank_process.hpp"
#include "launcher/run/outcome.hpp"
#include "launcher/run/python_failure.hpp"
#include "launcher/run/superseded_checkpoints.hpp"

using namespace xtrain;
using namespace xtrain::launcher;

namespace {

std::vector<std::string> split_all(const std::vector<std::string>& chunks) {
  LineSplitter splitter;
  std::vector<std::string> lines;
  auto keep = [&](std::string_view line) { lines.emplace_back(line); };
  for (const auto& chunk : chunks) splitter.feed(chunk, keep);
  splitter.finish(keep);
  return lines;
}

}  // namespace

TEST_CASE("launcher/exit codes: a wait status becomes the shell's code", "[exit_codes]") {
  const ExitStatus exited = exit_status_from_wait(W_EXITCODE(3, 0));
  CHECK(exited.exit_code == 3);
  CHECK(exited.signal == 0);
  CHECK_FALSE(exited.ok());
  const ExitStatus killed = exit_status_from_wait(W_EXITCODE(0, SIGSEGV));
  CHECK(killed.signal == SIGSEGV);
  CHECK(exit_code::from_outcome(killed.exit_code, killed.signal) == 139);
  CHECK(exit_code::from_outcome(exited.exit_code, exited.signal) == 3);
  CHECK(exit_status_from_wait(W_EXITCODE(0, 0)).ok());
  CHECK(describe(killed) == "killed by signal 11 (SIGSEGV)");
  CHECK(describe(exited) == "exit code 3");
}

TEST_CASE("launcher/log stream: lines are whole whatever the chunks", "[log_stream]") {
  CHECK(split_all({"a\nb", "c\n", "\nd"}) == std::vector<std::string>{"a", "bc", "", "d"});
  CHECK(split_all({"x\n"}) == std::vector<std::string>{"x"});
  CHECK(split_all({"", "\n\n"}) == std::vector<std::string>{"", ""});
  CHECK(split_all({"no newline at all"}) == std::vector<std::string>{"no newline at all"});
  CHECK(split_all({"tab\there\r\n"}) == std::vector<std::string>{"tab\there\r"});
}

TEST_CASE("launcher/log stream: an endless line is cut at kMaxLineBytes", "[log_stream]") {
  const size_t max = LineSplitter::kMaxLineBytes;
  const std::string big(max + 10, 'x');
  const auto lines = split_all({big.substr(0, 100), big.substr(100), "\nz\n"});
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].size() == max);
  CHECK(lines[1].size() == 10);
  CHECK(lines[2] == "z");
}

TEST_CASE("launcher/heartbeat: file names map to ranks", "[heartbeat]") {
  CHECK(heartbeat_rank_from_name("rank-0.heartbeat") == 0);
  CHECK(heartbeat_rank_from_name("rank-17.heartbeat") == 17);
  CHECK(heartbeat_rank_from_name("rank-1.json") == -1);
  CHECK(heartbeat_rank_from_name("rank-.heartbeat") == -1);
  CHECK(heartbeat_rank_from_name("rank-x.heartbeat") == -1);
  CHECK(heartbeat_rank_from_name("rank-1.heartbeat.tmp") == -1);
}

TEST_CASE("launcher/report: the root cause reads as one actionable paragraph", "[report]") {
  RankFailure failure;
  failure.rank = 1;
  failure.pid = 1234;
  failure.exit = ExitStatus{3, 0};
  failure.message = "CUDA out of memory";
  failure.log_tail = {"step 10", "boom"};
  const auto lines = report_lines(failure);
  REQUIRE(lines.size() == 3);
  CHECK_THAT(lines[0], Catch::Matchers::StartsWith("rank 1 (pid 1234) failed: exit code 3 at "));
  CHECK_THAT(lines[0], Catch::Matchers::EndsWith("; message: CUDA out of memory; last lines:"));
  CHECK(lines[2] == "  | boom");
  const auto json = to_json(failure);
  CHECK(json["exit_code"] == 3);
  CHECK(json["signal"].is_null());
  CHECK(json["message"] == "CUDA out of memory");
  CHECK(json["log_tail"].size() == 2);
}

TEST_CASE("superseded checkpoints: a second set-aside in the same second goes to a directory of its own", "[units]") {
  namespace fs = std::filesystem;
  std::string pattern = (fs::temp_directory_path() / "xlaunch-superseded-XXXXXX").string();
  const fs::path run = ::mkdtemp(pattern.data());
  for (int round = 0; round < 3; ++round) {  // faster than the clock's seconds: the names must differ anyway
    fs::create_directories(run / "checkpoints/step-00000010");
    fs::create_directories(run / "checkpoints/step-00000020");
    const auto found = find_superseded_checkpoints(run.string(), 0);
    REQUIRE(found);
    CHECK(found->dirs.size() == 2);
    CHECK_FALSE(fs::exists(found->destination));
    set_aside(*found);
    CHECK(fs::is_directory(fs::path(found->destination) / "step-00000020"));
    CHECK_FALSE(fs::exists(run / "checkpoints/step-00000010"));
  }
  CHECK(std::distance(fs::directory_iterator(run / "superseded"), fs::directory_iterator()) == 3);
  fs::remove_all(run);
}

TEST_CASE("launcher/python failure: the exception a traceback ends with, the last of a chain", "[units]") {
  const std::vector<std::string> chained = {
      "step 3",
      "Traceback (most recent call last):",
      "  File \"train.py\", line 5, in main",
      "KeyError: 'shape'",
      "",
      "During handling of the above exception, another exception occurred:",
      "",
      "Traceback (most recent call last):",
      "  File \"train.py\", line 7, in main",
      "    raise ValueError(\"bad\")",
      "ValueError: bad",
      "  (a message's second line)",
  };
  CHECK(python_exception(chained) == "ValueError: bad");
  // Python 3.11's exception groups (asyncio.TaskGroup raises them), as it prints one at the end of a chain.
  const std::vector<std::string> group = {
      "Traceback (most recent call last):",
      "  File \"train.py\", line 2, in <module>",
      "KeyError: 'shape'",
      "",
      "During handling of the above exception, another exception occurred:",
      "",
      "  + Exception Group Traceback (most recent call last):",
      "  |   File \"train.py\", line 4, in <module>",
      "  |     raise ExceptionGroup(\"two steps failed\", [ValueError(\"a\"), ExceptionGroup(\"inner\", [...])])",
      "  | ExceptionGroup: two steps failed (2 sub-exceptions)",
      "  +-+---------------- 1 ----------------",
      "    | ValueError: a",
      "    +---------------- 2 ----------------",
      "    | ExceptionGroup: inner (1 sub-exception)",
      "    +-+---------------- 1 ----------------",
      "      | Traceback (most recent call last):",
      "      |   File \"train.py\", line 9, in step",
      "      | TypeError: b",
      "      +------------------------------------",
  };
  CHECK(python_exception(group) == "ExceptionGroup: two steps failed (2 sub-exceptions)");
  CHECK(python_exception({"  + Exception Group Traceback (most recent call last):", "  |   File \"x.py\", line 1"})
            .empty());  // cut short
  CHECK(python_exception({"Traceback (most recent call last):", "  File \"x.py\", line 1"}).empty());  // cut short
  CHECK(python_exception({"error: no traceback here", "ValueError: not after a traceback"}).empty());
  CHECK(python_exception({}).empty());
}

TEST_CASE("launcher/python failure: @record's error file, in both of PyTorch's forms, verified before it is trusted",
          "[units]") {
  namespace fs = std::filesystem;
  std::string pattern = (fs::temp_directory_path() / "xlaunch-error-file-XXXXXX").string();
  const fs::path dir = ::mkdtemp(pattern.data());
  const std::string path = (dir / "rank-1.error.json").string();
  const auto write = [&](const std::string& text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  CHECK(read_elastic_error_file(path).is_null());  // no file: the script wrote none
  write(R"({"message": {"message": "ValueError: bad",)"
        R"( "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1"}}})");
  CHECK(read_elastic_error_file(path) ==
        nlohmann::json({{"error", "ValueError: bad"}, {"error_file", path}, {"traceback", "Traceback ..."}}));
  write(R"({"message": "RuntimeError: older form"})");
  CHECK(read_elastic_error_file(path) == nlohmann::json({{"error", "RuntimeError: older form"}, {"error_file", path}}));
  write(R"({"message": {"mess)");  // the rank was killed while writing it
  CHECK_THAT(read_elastic_error_file(path).at("unreadable").get<std::string>(),
             Catch::Matchers::Contains(path + ": malformed JSON"));
  write(R"({"message": {"text": "?"}})");
  CHECK_THAT(read_elastic_error_file(path).at("unreadable").get<std::string>(),
             Catch::Matchers::Contains(path + ": expected torch.distributed.elastic's error file"));
  fs::remove_all(dir);
}
