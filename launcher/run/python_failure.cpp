#include "launcher/run/python_failure.hpp"

#include <algorithm>
#include <exception>

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

std::string python_exception(const std::vector<std::string>& lines) {
  constexpr const char* kTraceback = "Traceback (most recent call last):";
  const auto last = std::find(lines.rbegin(), lines.rend(), kTraceback);
  if (last == lines.rend()) return "";
  const auto frames_end = std::find_if(last.base(), lines.end(), [](const std::string& line) {
    return !line.empty() && line.front() != ' ';
  });
  return frames_end == lines.end() ? "" : *frames_end;
}

}  // namespace xtrain::launcher
