#include "launcher/cli/host.hpp"

#include <filesystem>
#include <set>
#include <sstream>

#include "common/gpu/gpu_probe.hpp"
#include "common/usable_cpus.hpp"
#include "common/usable_memory.hpp"

extern char** environ;

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

}  // namespace

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq != std::string::npos && eq > 0) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

int visible_gpus(int physical_gpus, const std::optional<std::string>& cuda_visible_devices) {
  if (!cuda_visible_devices) return physical_gpus;
  std::istringstream list(*cuda_visible_devices);
  std::string item;
  std::set<int> seen;
  int count = 0;
  while (std::getline(list, item, ',')) {
    item = trim(item);
    if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) {
      ++count;
      continue;
    }
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) break;
    if (item.size() > 6) break;
    const int index = std::stoi(item);
    if (index >= physical_gpus || !seen.insert(index).second) break;
    ++count;
  }
  return count;
}

HostInfo probe_host() {
  HostInfo host;
  host.physical_gpus = count_nvidia_gpus();
  host.environment = process_environment();
  if (auto it = host.environment.find("CUDA_VISIBLE_DEVICES"); it != host.environment.end()) {
    host.cuda_visible_devices = it->second;
  }
  host.cores = usable_cpus();
  host.memory_bytes = usable_memory_bytes();
  std::error_code ec;
  host.exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path().string();
  return host;
}

}  // namespace xtrain::launcher
