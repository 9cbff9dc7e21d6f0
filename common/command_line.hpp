// The arguments of xtrain-worker's commands (export, generate, eval) and of xtrain-data, walked one
// way: `--flag VALUE` or `--flag=VALUE`, flags that take no value, `--help` / `-h` (the usage on
// stdout, exit 0), positionals in order ("-" among them: standard input), and one error naming the
// argument for a value that is missing and for an option the command does not take.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/bad_input.hpp"

namespace xtrain {

class CommandLine {
 public:
  // `help`: where the errors send the user ("eval --help").
  CommandLine(const char* usage, std::string help);
  // `--name VALUE` (or `--name=VALUE`): `take` gets VALUE.
  CommandLine& option(const std::string& name, std::function<void(const std::string&)> take);
  // `--name VALUE` stored in `target` as it is.
  CommandLine& option(const std::string& name, std::string& target);
  // `--name` alone: `set` is called.
  CommandLine& flag(const std::string& name, std::function<void()> set);
  // Walks argv[1] to argv[argc - 1], calling the handlers in order; returns the positionals.
  // Throws BadInput ("command line: ..."), and whatever a handler throws.
  std::vector<std::string> parse(int argc, char** argv) const;

 private:
  struct Handler {
    std::function<void(const std::string&)> take;  // null for a flag
    std::function<void()> set;
  };
  const char* usage_;
  std::string help_;
  std::map<std::string, Handler> handlers_;
};

// `text` as an integer from `min` to `max`, or BadInput "FLAG: expected an integer >= MIN, got "TEXT""
// (and "<= MAX" where there is a bound).
long long parse_integer(const std::string& flag, const std::string& text, long long min,
                        long long max = std::numeric_limits<long long>::max());
// `text` as a finite number, or BadInput "FLAG: expected a number, got "TEXT"".
double parse_number(const std::string& flag, const std::string& text);

}  // namespace xtrain
