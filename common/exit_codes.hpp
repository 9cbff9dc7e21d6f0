// Exit codes of xlaunch (the contract's table), the mapping from a rank's wait status, and the names of signals.
#pragma once

#include <string>

namespace xtrain::exit_code {

inline constexpr int kSuccess = 0;
inline constexpr int kInvalidSpec = 2;        // bad command line or job spec: nothing started
inline constexpr int kTimeout = 124;          // job wall-clock limit passed, or a rank stopped heartbeating
inline constexpr int kLaunchFailure = 125;    // run dir failed as it was made, or held; spawn or rendezvous failure
inline constexpr int kNotExecutable = 126;    // worker command exists but cannot be executed
inline constexpr int kNotFound = 127;         // worker command not found
inline constexpr int kSignalBase = 128;       // 128+N: killed (or xlaunch stopped) by signal N

// The worker's programs (xtrain-worker's commands, xtrain-data): 0 done, 1 a failure while running
// (I/O, a peer, the device), 2 bad input (command line, spec, an input file), as above; 3 training
// diverged (its loss or gradient norm stopped being finite), which a restart would only repeat.
inline constexpr int kRuntimeFailure = 1;
inline constexpr int kBadInput = kInvalidSpec;
inline constexpr int kDiverged = 3;

// A process's outcome as a shell reports it: its exit status, or 128+N for death by signal N.
inline int from_outcome(int exit_status, int signal) { return signal > 0 ? kSignalBase + signal : exit_status; }

// "SIGTERM" for 15 ("signal 99" for a number without a name), as the logs name signals.
std::string signal_name(int sig);
// "killed by signal 15 (SIGTERM)" ("killed by signal 99" without a name).
std::string killed_by(int sig);

}  // namespace xtrain::exit_code
