// Numbers for people, the same in the worker's progress lines and in `xlaunch status`.
#pragma once

#include <string>

namespace xtrain {

// "1,234,567"
std::string with_thousands(long long n);
// "1:02:03" (h:mm:ss)
std::string format_duration(double seconds);

}  // namespace xtrain
