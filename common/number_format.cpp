#include "common/number_format.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace xtrain {

std::string with_thousands(long long n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= kMiB * 1024.0) {
    std::snprintf(text, sizeof text, "%.2f GiB", b / (kMiB * 1024.0));
  } else if (b >= kMiB) {
    std::snprintf(text, sizeof text, "%.1f MiB", b / kMiB);
  } else if (b >= 1024.0) {
    std::snprintf(text, sizeof text, "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return text;
}

std::string format_number(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

std::string format_duration(double seconds) {
  const long long s = seconds > 0 ? static_cast<long long>(seconds + 0.5) : 0;
  char out[32];
  std::snprintf(out, sizeof out, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return out;
}

std::string progress_text(std::uint64_t done, std::uint64_t total, double seconds, const std::string& unit) {
  const auto as_count = [](std::uint64_t n) { return with_thousands(static_cast<long long>(n)); };
  const double share = total > 0 ? static_cast<double>(std::min(done, total)) / static_cast<double>(total) : 1.0;
  std::string out = as_count(done) + " of " + as_count(total) + " " + unit + " (" +
                    std::to_string(static_cast<int>(100.0 * share)) + "%)";
  if (done == 0 || seconds <= 0) return out;
  const double rate = static_cast<double>(done) / seconds;
  const double left = static_cast<double>(total - std::min(done, total)) / rate;
  return out + " | " + with_thousands(static_cast<long long>(rate + 0.5)) + " " + unit + "/s | ETA " +
         format_duration(left);
}

}  // namespace xtrain
