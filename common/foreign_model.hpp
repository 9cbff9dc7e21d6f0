// What someone coming from PyTorch or Hugging Face may give where a model is expected, and what to
// say about it: a hub name (models are never downloaded) and a PyTorch checkpoint file (never
// read: unpickling runs code, and its layout is the writer's own).
#pragma once

#include <string>

namespace xtrain {

// For a path that does not exist but reads like a Hugging Face hub name ("gpt2",
// "openai-community/gpt2"): "; ..." naming the directory of Hugging Face's local cache that holds
// it (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub), or how to fetch it; for a URL or
// "~/...", missing_path_note's (common/path_notes.hpp). "" otherwise.
std::string hub_name_note(const std::string& path);

// Whether `path` is a file torch.save wrote: its zip archive (PyTorch 1.6 on, first entry
// ".../data.pkl") or its older pickle (protocol 2 and torch's magic number).
bool is_pytorch_checkpoint(const std::string& path);

// The error text for such a file, nanoGPT's ckpt.pt and pytorch_model.bin among them.
std::string pytorch_checkpoint_message();

}  // namespace xtrain
