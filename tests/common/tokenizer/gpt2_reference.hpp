// Test support for the GPT-2 tokenizer: the released vocabulary and the reference tokenizer
// (js-tiktoken), fetched once into a cache outside the repository by
// scripts/fetch-gpt2-reference.sh, and a way to run the reference (scripts/gpt2-reference.cjs).
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>

namespace xtrain::test {

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command; returns its stdout, or throws with its exit status.
inline std::string run_command(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run: " + command);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) throw std::runtime_error("failed (status " + std::to_string(status) + "): " + command);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The cache directory (fetched on first use; a fetch that fails fails the test).
inline const std::string& gpt2_reference_dir() {
  static const std::string dir =
      run_command(shell_quote(std::string(XTRAIN_SOURCE_DIR) + "/scripts/fetch-gpt2-reference.sh"));
  return dir;
}

inline std::string gpt2_openai_dir() { return gpt2_reference_dir() + "/gpt2"; }    // encoder.json + vocab.bpe
inline std::string gpt2_hf_dir() { return gpt2_reference_dir() + "/gpt2-hf"; }    // vocab.json + merges.txt

// `node scripts/gpt2-reference.cjs CACHE ARGS`; returns its stdout.
inline std::string run_reference(const std::string& args) {
  return run_command("node " + shell_quote(std::string(XTRAIN_SOURCE_DIR) + "/scripts/gpt2-reference.cjs") + " " +
                     shell_quote(gpt2_reference_dir()) + " " + args);
}

}  // namespace xtrain::test
