// Native backtraces on demand, for xlaunch's hang reports: when a thread of this process receives
// kBacktraceSignal it appends its own call stack to a file (stderr when no file is given):
//
//   thread 12345
//   /path/xtrain-worker(_ZN6xtrain3GPT8backwardEf...+0x1a4)[0x55d0c0a1b2c4]
//   ...
//   end of thread 12345
//
// xlaunch sends the signal to each thread of a hung rank (tgkill), waits a moment for every
// "end of thread" line, and demangles the names. The handler is async-signal-safe: open, write
// and close are, and glibc's backtrace() is once it has run outside a handler (its first call
// loads libgcc_s, which allocates), so installing it makes that first call. Threads that receive
// the signal together take turns through a spin lock, so their stacks never interleave.
//
// Names come from the dynamic symbol table: xtrain-worker is linked with -rdynamic, so every
// function with external linkage has one; file-local functions show as addresses.
#pragma once

#include <csignal>
#include <string>

namespace xtrain {

inline constexpr int kBacktraceSignal = SIGUSR2;

// Installs the handler (SA_RESTART: interrupted system calls resume). `path` empty: stderr.
void install_backtrace_handler(const std::string& path);

}  // namespace xtrain
