#include "common/gpu/gpu_probe.hpp"

#include <filesystem>
#include <string>

namespace xtrain {

int count_nvidia_gpus() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto gpus = std::distance(fs::directory_iterator("/proc/driver/nvidia/gpus", ec), fs::directory_iterator());
  if (gpus > 0) return static_cast<int>(gpus);
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++count;
    }
  }
  return count;
}

}  // namespace xtrain
