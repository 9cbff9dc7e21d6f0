// What to add to "no such file" for a path that a shell or a download tool would have treated
// otherwise: nothing here fetches a URL or expands "~".
#pragma once

#include <string>

namespace xtrain {

// For a path that does not exist: "a URL: <what> ... not fetched" for one with "://"; for "~" or
// "~/...", that the shell alone expands it, and the path it stands for; "" otherwise. `what` names
// the thing read ("data", "models").
std::string missing_path_note(const std::string& path, const std::string& what);

}  // namespace xtrain
