#include "common/path_notes.hpp"

#include <cstdlib>
#include <filesystem>

namespace xtrain {

std::string missing_path_note(const std::string& path, const std::string& what) {
  if (path.find("://") != std::string::npos) {
    return "a URL: " + what + " are read from local files only, never downloaded: fetch it first";
  }
  if (path == "~" || path.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    const std::string meant = home ? (std::filesystem::path(home) / path.substr(std::min<std::size_t>(2, path.size())))
                                         .lexically_normal()
                                         .string()
                                   : std::string("your home directory");
    return "\"~\" is expanded by shells, not in a spec or a quoted argument: write " + meant;
  }
  return "";
}

}  // namespace xtrain
