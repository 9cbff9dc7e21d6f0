// Numbers for people (common/number_format.hpp): thousands separators, durations, and the progress
// text of long work (eval's scoring).
#include <catch2/catch.hpp>

#include "common/number_format.hpp"

using namespace xtrain;

TEST_CASE("counts carry thousands separators, durations read h:mm:ss, settings as they are written", "[format]") {
  CHECK(with_thousands(0) == "0");
  CHECK(with_thousands(999) == "999");
  CHECK(with_thousands(1000) == "1,000");
  CHECK(with_thousands(1234567) == "1,234,567");
  CHECK(with_thousands(-45678) == "-45,678");
  CHECK(format_duration(0) == "0:00:00");
  CHECK(format_duration(59.6) == "0:01:00");  // rounded to the second
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(-5) == "0:00:00");
  CHECK(format_number(0.3) == "0.3");
  CHECK(format_number(-1) == "-1");
  CHECK(format_number(1e-9) == "1e-09");
  CHECK(format_number(1.5) == "1.5");
}

TEST_CASE("progress says how much of the work is done, how fast, and how long the rest takes", "[format]") {
  CHECK(progress_text(1288096, 2576192, 50.0, "tokens") ==
        "1,288,096 of 2,576,192 tokens (50%) | 25,762 tokens/s | ETA 0:00:50");
  CHECK(progress_text(1, 3, 1.0, "examples") == "1 of 3 examples (33%) | 1 examples/s | ETA 0:00:02");
  // Nothing done yet, or no time passed: no rate to project from.
  CHECK(progress_text(0, 40, 10.0, "examples") == "0 of 40 examples (0%)");
  CHECK(progress_text(5, 40, 0.0, "examples") == "5 of 40 examples (12%)");
  CHECK(progress_text(40, 40, 8.0, "examples") == "40 of 40 examples (100%) | 5 examples/s | ETA 0:00:00");
}
