#include "common/foreign_model.hpp"

#include "common/path_notes.hpp"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

namespace xtrain {
namespace {

namespace fs = std::filesystem;

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Hugging Face's hub cache, as huggingface_hub finds it.
fs::path hub_cache() {
  if (const std::string cache = env_or_empty("HF_HUB_CACHE"); !cache.empty()) return cache;
  if (const std::string home = env_or_empty("HF_HOME"); !home.empty()) return fs::path(home) / "hub";
  const std::string xdg = env_or_empty("XDG_CACHE_HOME");
  const fs::path cache = xdg.empty() ? fs::path(env_or_empty("HOME")) / ".cache" : fs::path(xdg);
  return cache / "huggingface" / "hub";
}

// The snapshot of repository `name` that the cache's refs/main names, when it holds a config.json.
std::string cached_snapshot(const std::string& name) {
  std::string folder = "models--" + name;
  for (std::size_t slash; (slash = folder.find('/')) != std::string::npos;) folder.replace(slash, 1, "--");
  const fs::path repo = hub_cache() / folder;
  std::ifstream ref(repo / "refs" / "main");
  std::string commit;
  if (!(ref >> commit)) return "";
  const fs::path snapshot = repo / "snapshots" / commit;
  std::error_code ec;
  return fs::exists(snapshot / "config.json", ec) ? snapshot.string() : "";
}

}  // namespace

std::string hub_name_note(const std::string& path) {
  static const std::regex hub_name(R"([A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?)");
  static const std::regex file_name(R"(.*\.(bin|pt|pth|ckpt|safetensors|json|txt))");
  std::error_code ec;
  if (fs::exists(path, ec)) return "";
  if (const std::string note = missing_path_note(path, "models"); !note.empty()) return "; " + note;
  if (!std::regex_match(path, hub_name) || std::regex_match(path, file_name)) return "";
  // The GPT-2 family moved under openai-community/; a cache may hold either name.
  std::vector<std::string> names = {path};
  if (path.find('/') == std::string::npos) names.push_back("openai-community/" + path);
  for (const std::string& name : names) {
    if (const std::string snapshot = cached_snapshot(name); !snapshot.empty()) {
      return "; Hugging Face's cache holds the hub's \"" + name + "\" at " + snapshot + ": give that directory";
    }
  }
  return "; if \"" + path + "\" is a Hugging Face hub name: models are not downloaded here, so fetch it first "
         "(e.g. huggingface-cli download " + path + " --local-dir models/" + fs::path(path).filename().string() +
         ") and give that directory";
}

bool is_pytorch_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 30> header{};
  if (!in.read(reinterpret_cast<char*>(header.data()), header.size())) return false;
  // Legacy torch.save: pickle protocol 2, then the long 0x1950a86a20f9469cfc6c (torch's magic number).
  if (header[0] == 0x80 && header[1] == 0x02 && header[2] == 0x8a && header[3] == 0x0a && header[4] == 0x6c &&
      header[5] == 0xfc && header[6] == 0x9c && header[7] == 0x46) {
    return true;
  }
  // A zip's first local file header: "PK\3\4", then the name's length at byte 26 and the name at 30.
  if (header[0] != 'P' || header[1] != 'K' || header[2] != 3 || header[3] != 4) return false;
  const std::size_t name_length = header[26] | (header[27] << 8);
  std::string name(name_length, '\0');
  if (!in.read(name.data(), static_cast<std::streamsize>(name_length))) return false;
  return name.size() >= 8 && name.compare(name.size() - 8, 8, "data.pkl") == 0;
}

std::string pytorch_checkpoint_message() {
  return "a PyTorch checkpoint (torch.save: nanoGPT's ckpt.pt, an older pytorch_model.bin), which is not read "
         "(unpickling runs code, and its layout is its writer's): load it in PyTorch and save the model as a Hugging "
         "Face GPT-2 directory (config.json + model.safetensors, e.g. GPT2LMHeadModel.save_pretrained(DIR)), then "
         "give that directory";
}

}  // namespace xtrain
