#include "worker/data/multiple_choice.hpp"

#include <cstring>

#include "worker/data/token_source.hpp"
#include "worker/formats/file_io.hpp"

namespace xtrain {
namespace {

constexpr std::uint16_t kExampleStart = 65535;
constexpr size_t kHeaderBytes = 256 * sizeof(std::int32_t);

}  // namespace

std::vector<ChoiceExample> read_multiple_choice(const std::string& path, int vocab_size, const std::string& field) {
  const auto bad = [&](const std::string& file_path, const std::string& what) {
    return DataError(field, file_path + ": " + what);
  };
  const MappedFile file = [&] {
    try {
      return MappedFile(path);
    } catch (const FileError& e) {
      throw DataError(field, e.what());
    }
  }();
  if (file.size() < kHeaderBytes) {
    throw bad(path, "truncated header: " + std::to_string(file.size()) + " bytes, less than 1024");
  }
  std::int32_t header[4];
  std::memcpy(header, file.data(), sizeof header);
  if (header[0] != kMultipleChoiceMagic) {
    throw bad(path, "header: magic is " + std::to_string(header[0]) + ", expected " +
                        std::to_string(kMultipleChoiceMagic) + " (llm.c's multiple-choice eval file)");
  }
  if (header[1] != 1) throw bad(path, "header: version is " + std::to_string(header[1]) + ", expected 1");
  if (header[2] < 1) throw bad(path, "header: " + std::to_string(header[2]) + " examples, expected at least 1");
  const size_t words = (file.size() - kHeaderBytes) / 2;
  std::vector<std::uint16_t> stream(words);
  std::memcpy(stream.data(), file.data() + kHeaderBytes, words * 2);

  std::vector<ChoiceExample> examples;
  size_t at = 0;
  for (int e = 0; e < header[2]; ++e) {
    const std::string where = "example " + std::to_string(e) + " (at byte " + std::to_string(kHeaderBytes + 2 * at) + ")";
    const auto next = [&]() -> std::uint16_t {
      if (at >= words) throw bad(path, where + " is truncated: the file ends inside it");
      return stream[at++];
    };
    const size_t start = at;
    if (next() != kExampleStart) throw bad(path, where + ": no start mark 65535 (a damaged or misaligned file)");
    const size_t bytes = next();
    ChoiceExample x;
    x.index = next();
    x.label = next();
    const int completions = next();
    if (completions < 1 || x.label >= completions) {
      throw bad(path, where + ": label " + std::to_string(x.label) + " is not one of its " +
                          std::to_string(completions) + " completions");
    }
    const auto tokens = [&](const std::string& what) {
      const int n = next();
      if (n < 1) throw bad(path, where + ": " + what + " has no tokens");
      std::vector<std::int32_t> out(static_cast<size_t>(n));
      for (auto& t : out) {
        t = next();
        if (t >= vocab_size) {
          throw bad(path, where + ": " + what + " has token " + std::to_string(t) + ", outside the model's vocabulary of " +
                              std::to_string(vocab_size));
        }
      }
      return out;
    };
    x.context = tokens("the context");
    for (int c = 0; c < completions; ++c) x.completions.push_back(tokens("completion " + std::to_string(c)));
    if (bytes != 2 * (at - start)) {
      throw bad(path, where + ": its size field says " + std::to_string(bytes) + " bytes but its fields take " +
                          std::to_string(2 * (at - start)));
    }
    examples.push_back(std::move(x));
  }
  if (at != words || file.size() % 2 != 0) {
    throw bad(path, std::to_string(file.size() - kHeaderBytes - 2 * at) + " bytes after the last of the header's " +
                        std::to_string(header[2]) + " examples");
  }
  return examples;
}

}  // namespace xtrain
