#include "common/command_line.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "common/did_you_mean.hpp"

namespace xtrain {

CommandLine::CommandLine(const char* usage, std::string help) : usage_(usage), help_(std::move(help)) {}

CommandLine& CommandLine::option(const std::string& name, std::function<void(const std::string&)> take) {
  handlers_[name] = Handler{std::move(take), {}};
  return *this;
}

CommandLine& CommandLine::option(const std::string& name, std::string& target) {
  return option(name, [&target](const std::string& value) { target = value; });
}

CommandLine& CommandLine::flag(const std::string& name, std::function<void()> set) {
  handlers_[name] = Handler{{}, std::move(set)};
  return *this;
}

std::vector<std::string> CommandLine::parse(int argc, char** argv) const {
  std::vector<std::string> positionals;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    if (arg.size() < 2 || arg[0] != '-') {  // "-" too: standard input
      positionals.push_back(std::move(arg));
      continue;
    }
    std::optional<std::string> inline_value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    const auto handler = handlers_.find(arg);
    if (handler == handlers_.end()) {
      std::vector<std::string> known = {"--help"};
      for (const auto& [name, unused] : handlers_) known.push_back(name);
      const std::string close = closest_name(arg, known, typo_edits(arg));
      throw BadInput("command line: unknown option \"" + arg + "\"" +
                     (close.empty() ? "" : " (did you mean \"" + close + "\"?)") + " (see " + help_ + ")");
    }
    if (!handler->second.take) {
      if (inline_value) throw BadInput("command line: " + arg + " takes no value (see " + help_ + ")");
      handler->second.set();
    } else if (inline_value) {
      handler->second.take(*inline_value);
    } else if (i + 1 < argc) {
      handler->second.take(argv[++i]);
    } else {
      throw BadInput("command line: " + arg + " needs a value (see " + help_ + ")");
    }
  }
  return positionals;
}

long long parse_integer(const std::string& flag, const std::string& text, long long min, long long max) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  // strtoll skips leading white space: an argument " 3" is a typo, not 3.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0' || errno != 0 || v < min ||
      v > max) {
    const std::string upper = max == std::numeric_limits<long long>::max() ? "" : " and <= " + std::to_string(max);
    throw BadInput(flag + ": expected an integer >= " + std::to_string(min) + upper + ", got \"" + text + "\"");
  }
  return v;
}

double parse_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0' || !std::isfinite(v)) {
    throw BadInput(flag + ": expected a number, got \"" + text + "\"");
  }
  return v;
}

}  // namespace xtrain
