// Bad input to a command (exit 2: a command line, a file, a spec): what() is one line naming the
// argument or the file, and where in it.
#pragma once

#include <stdexcept>

namespace xtrain {

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace xtrain
