// torchrun's command line in xlaunch's terms. Parse time: the values of torchrun's flags
// (--nproc-per-node auto|cpu|gpu|N, --nnodes N|N:N, --redirects/--tee 0-3 or LOCAL_RANK:VALUE,
// endpoints with torchrun's default port). Plan time: the document a run starts from (the spec
// file, or torchrun's defaults for a program run), the program as worker.command, the
// rendezvous flags resolved against the spec's nodes, and spec errors named by the flag that
// caused them. The README's "Coming from torchrun" section is the user's view of this file.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/job_spec.hpp"
#include "launcher/cli/cli.hpp"
#include "launcher/cli/host.hpp"

namespace xtrain::launcher::torchrun {

// torchrun's default ports: c10d's store (--rdzv-endpoint without a port) and --master-port.
inline constexpr int kDefaultRdzvPort = 29400;
inline constexpr int kDefaultMasterPort = 29500;
// The interpreter for .py programs and -m: torchrun's own override variable, else python3 from PATH.
inline constexpr const char* kPythonVariable = "PYTHON_EXEC";
inline constexpr const char* kDefaultPython = "python3";
// A Kubernetes Indexed Job's (and JobSet's) pod index: the node rank of a job on several nodes
// when neither --node-rank, PET_NODE_RANK nor the spec gives one.
inline constexpr const char* kCompletionIndexVariable = "JOB_COMPLETION_INDEX";

// --nproc-per-node: a number, "auto" (the visible GPUs, else the CPU ranks), "gpu" (the
// visible GPUs; device cuda), "cpu" (the CPU ranks; device cpu). Appends overrides.
void apply_nproc_per_node(CliOptions& options, const std::string& value, const std::string& flag);

// --nnodes "N" or "N:N"; an elastic range (MIN < MAX) is refused.
int parse_nnodes(const std::string& value, const std::string& flag);

// host[:port] with torchrun's c10d default port; throws CliError naming `flag` when malformed.
std::string endpoint_with_default_port(const std::string& value, const std::string& flag);

// --rdzv-conf KEY=VALUE,...: join_timeout becomes nodes.rdzv_timeout_s; other keys are refused.
void apply_rdzv_conf(CliOptions& options, const std::string& value, const std::string& flag);

// --redirects and --tee in torchrun's forms (0 none, 1 stdout, 2 stderr, 3 both; one value for
// every local rank or LOCAL_RANK:VALUE,...) as launcher.tee: which ranks the console shows.
// Files always get everything, so only the console part of torchrun's meaning remains.
// Returns "all", "rank0" or "none"; adds a note where a single stream was asked for (one pipe
// carries both, to keep their order); throws CliError for a set of ranks launcher.tee cannot say.
std::string console_tee(const std::optional<std::string>& redirects, const std::optional<std::string>& tee,
                        std::vector<std::string>& notes);
bool is_stream_spec(const std::string& value);  // "3", "0:3,1:1": torchrun's --tee, not xlaunch's

// Why a torchrun flag that xlaunch does not take is refused; nullptr for any other name.
// `name` is normalised ("--local-addr").
const char* unsupported_reason(const std::string& name);

// Plan time. The JSON document a run starts from, with the command line applied in this order:
// --set and the shortcut flags as typed, the program, the rendezvous flags, the run dir.
nlohmann::json job_document(const CliOptions& options, const HostInfo& host);
// The run's name when the spec has none: the spec file's base name, or the program's.
std::string default_name(const CliOptions& options);
// A spec error on a key that a flag set, told in the flag's words: "--nnodes 2: nodes.nnodes: ...".
SpecError attributed(const SpecError& error, const CliOptions& options);

}  // namespace xtrain::launcher::torchrun
