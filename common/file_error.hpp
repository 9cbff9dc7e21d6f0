// The error every file format (model files, checkpoints, data) reports: which file and what is
// wrong with it, one line.
#pragma once

#include <stdexcept>
#include <string>

namespace xtrain {

// A file that cannot be read, written or parsed. what() is "PATH: MESSAGE".
class FileError : public std::runtime_error {
 public:
  FileError(std::string path, std::string message)
      : std::runtime_error(path + ": " + message), path_(std::move(path)), message_(std::move(message)) {}
  const std::string& path() const { return path_; }
  const std::string& message() const { return message_; }  // without the path

 private:
  std::string path_;
  std::string message_;
};

}  // namespace xtrain
