// Numbers for people, the same in the worker's progress lines and in `xlaunch status`.
#pragma once

#include <cstdint>
#include <string>

namespace xtrain {

// "1,234,567"
std::string with_thousands(long long n);
// A number as a person writes it: "0.3", "-1", "1e-09", "6e+08" (C++'s default stream format, six
// significant digits), for the values of settings in messages.
std::string format_number(double x);
// "1.53 GiB", "474.8 MiB", "12.0 KiB", "96 B"
std::string format_bytes(std::uint64_t bytes);
// "1:02:03" (h:mm:ss)
std::string format_duration(double seconds);
// Work under way: `done` of `total` units after `seconds`, the rate so far and the time left at it:
// "1,234,567 of 2,576,192 tokens (48%) | 26,431 tokens/s | ETA 0:00:50". No rate or ETA before any
// time has passed or any unit is done ("0 of 40 examples (0%)").
std::string progress_text(std::uint64_t done, std::uint64_t total, double seconds, const std::string& unit);

}  // namespace xtrain
