#include "launcher/run/python_failure.hpp"

#include <algorithm>
#include <exception>
#include <optional>
#include <string_view>

#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {

using nlohmann::json;

json read_elastic_error_file(const std::string& path) {
  std::optional<json> doc;
  try {
    doc = read_json_file(path);
  } catch (const std::exception& e) {
    return {{"unreadable", e.what()}};
  }
  if (!doc) return nullptr;
  const json message = doc->is_object() ? doc->value("message", json()) : json();
  if (message.is_string()) return {{"error", message}, {"error_file", path}};
  const json text = message.is_object() ? message.value("message", json()) : json();
  if (!text.is_string()) {
    return {{"unreadable", path + ": expected torch.distributed.elastic's error file, {\"message\": {\"message\": "
                                  "TEXT, ...}}, got " + doc->dump().substr(0, 200)}};
  }
  json result = {{"error", text}, {"error_file", path}};
  const json extra = message.value("extraInfo", json());
  const json callstack = extra.is_object() ? extra.value("py_callstack", json()) : json();
  if (callstack.is_string()) result["traceback"] = callstack;
  return result;
}

namespace {

constexpr std::string_view kTraceback = "Traceback (most recent call last):";
constexpr std::string_view kGroupTraceback = "+ Exception Group Traceback (most recent call last):";

// The prefix of an exception group's lines ("  | ") when `line` starts a top-level one (Python 3.11:
// "  + Exception Group Traceback ..."; a nested group's header is itself behind a "|"), else nullopt.
std::optional<std::string> group_prefix(const std::string& line) {
  const size_t indent = line.find_first_not_of(' ');
  if (indent == std::string::npos || std::string_view(line).substr(indent) != kGroupTraceback) return std::nullopt;
  return line.substr(0, indent) + "| ";
}

}  // namespace

std::string python_exception(const std::vector<std::string>& lines) {
  const auto last = std::find_if(lines.rbegin(), lines.rend(), [](const std::string& line) {
    return line == kTraceback || group_prefix(line);
  });
  if (last == lines.rend()) return "";
  // A traceback's frames are indented; the exception is the first line that is not. A group's lines
  // all carry its prefix, and its own exception ("ExceptionGroup: ... (2 sub-exceptions)", what
  // @record's error file says of it) is the first of them not indented past it.
  const std::string prefix = group_prefix(*last).value_or("");
  for (auto line = last.base(); line != lines.end(); ++line) {
    if (!line->starts_with(prefix)) return "";
    const std::string_view text = std::string_view(*line).substr(prefix.size());
    if (!text.empty() && text.front() != ' ') return std::string(text);
  }
  return "";
}

}  // namespace xtrain::launcher
