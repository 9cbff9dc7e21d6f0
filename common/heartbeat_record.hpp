// The progress record in a rank's heartbeat file ($XTRAIN_HEARTBEAT_FILE, ranks/rank-R.heartbeat):
// where the rank is (step, micro-step, phase, layer or all-reduce bucket) and how it goes (last
// loss, tokens/s, busy time of its last step, ETA). xtrain-worker maps the file shared and keeps
// the record current with plain memory stores, so a phase change costs no system call; its one
// system call per step is the touch (futimens) that xlaunch's watchdog sees through inotify.
// xlaunch reads the record when a beat arrives, when a rank hangs, and for `xlaunch status`.
//
// Other worker programs only touch the file: an empty, short or foreign file reads as "no record",
// and everything that uses records works without them.
//
// Layout, version 1: 128 bytes, little-endian, every field naturally aligned (offsets below),
// then `rank_busy_count` floats: in rank 0's file, every rank's busy_ms of step last_step, by rank
// (the end-of-step all-reduce brings them), so node 0's xlaunch sees the whole job's; elsewhere none.
// A writer bumps `sequence` to odd before an update and to even after it (a seqlock, over the
// floats too). A reader takes two copies one after the other and keeps them only when both are
// identical with an even sequence: a copy torn by an update in flight always differs from the next.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtrain {

// What a rank is doing. The values are part of the file format: append, never renumber.
enum class WorkerPhase : std::uint16_t {
  kStartup = 0,       // reading the spec and the data, building the model, loading a checkpoint
  kConnecting = 1,    // meeting its peers, agreeing on the start (broadcasts)
  kData = 2,          // gathering a micro-batch
  kForward = 3,       // detail: the layer (-1 the embeddings, n_layer the output layer)
  kBackward = 4,      // detail: the layer, as for kForward
  kGradientWait = 5,  // waiting for the gradient all-reduces; which bucket is in comm_bucket
  kStepSync = 6,      // the end-of-step all-reduce (loss, stop request, busy times)
  kOptimizer = 7,
  kValidation = 8,
  kCheckpoint = 9,      // rank 0 writing the checkpoint of the step
  kCheckpointWait = 10, // the replicas' check before a checkpoint, the barrier until it is written
  kSampling = 11,
  kDone = 12,
};

// Why a rank failed, stored in the record as it fails. Part of the file format.
enum class RecordedFailure : std::int32_t {
  kNone = 0,
  kPrimary = 1,   // its own failure
  kPeerLost = 2,  // a collective failed because a peer died: the echo of a failure elsewhere
  kDiverged = 3,  // the loss or the gradient norm stopped being finite (every rank sees it alike)
};

inline constexpr std::uint32_t kHeartbeatMagic = 0x42485458;  // "XTHB" as little-endian bytes
inline constexpr std::uint16_t kHeartbeatVersion = 1;

struct HeartbeatRecord {
  std::uint32_t magic;             //   0  kHeartbeatMagic
  std::uint16_t version;           //   4  kHeartbeatVersion; later versions only append fields
  std::uint16_t size;              //   6  bytes of the record
  std::uint32_t sequence;          //   8  seqlock: odd while an update is under way
  std::int32_t pid;                //  12
  std::int64_t step;               //  16  the optimizer step in progress (1-based); 0 before the first
  std::int64_t total_steps;        //  24  train.steps
  std::int32_t micro_step;         //  32  0-based, within the step
  std::int32_t micro_steps;        //  36  per optimizer step
  std::uint16_t phase;             //  40  WorkerPhase
  std::uint16_t backtrace_signal;  //  42  the signal that makes the rank append each signalled
                                   //      thread's backtrace to ranks/rank-R.backtrace (0: none)
  std::int32_t detail;             //  44  kForward, kBackward: the layer; else -1
  std::int32_t comm_bucket;        //  48  the gradient bucket whose all-reduce runs now (-1: none);
                                   //      stored by the communication thread outside the seqlock
  std::int32_t n_layer;            //  52  model.n_layer: bucket n_layer is the embeddings'
  float last_loss;                 //  56  mean loss over all ranks of step last_step
  float tokens_per_s;              //  60  over the recent steps, all ranks together
  float busy_ms;                   //  64  step last_step, minus the time blocked in collectives
  float step_ms;                   //  68  wall time of step last_step
  float eta_s;                     //  72  to train.steps, at the recent pace
  std::int32_t rank_busy_count;    //  76  floats after the record (world size in rank 0's; else 0)
  std::int64_t last_step;          //  80  the last step completed (0: none yet)
  std::int64_t phase_since_ns;     //  88  CLOCK_REALTIME when the phase began
  std::int64_t updated_ns;         //  96  CLOCK_REALTIME of the last update
  std::int32_t failure;            // 104  RecordedFailure, stored as the rank fails (0 before; a
                                   //      reserved word in older workers). It reaches xlaunch when
                                   //      the result file cannot be written (a full disk): the
                                   //      record's page is allocated since startup, so the store
                                   //      needs no free space
  std::int32_t reserved0;          // 108
  std::int64_t reserved[2];        // 112
};
static_assert(sizeof(HeartbeatRecord) == 128, "the heartbeat record is 128 bytes on every platform");

// The record in the file at `path`, or nullopt when the file is missing, shorter than a record,
// not a record (another program just touches it), of an unknown layout, or being rewritten so
// fast that no two consecutive copies agree.
std::optional<HeartbeatRecord> read_heartbeat_record(const std::string& path);

// Every rank's busy time of step `last_step`, from the floats after rank 0's record; nullopt when
// the file has no record or none of them, or no two consecutive copies agree.
struct RankBusyTimes {
  std::int64_t last_step = 0;
  std::vector<float> busy_ms;  // by rank
};
std::optional<RankBusyTimes> read_rank_busy_times(const std::string& path);

// "backward", "gradient_wait", ...: the JSON name of a phase ("phase_N" for an unknown value).
std::string phase_name(std::uint16_t phase);

// Whether the rank is blocked on its peers (a collective, a barrier, the rendezvous) rather than
// working on its own.
bool waits_on_peers(const HeartbeatRecord& record);

// Where the rank is, as a verb phrase for a sentence about one rank or several ("rank 3 ...",
// "ranks 0-2 ..."): "is in backward layer 7 of step 1042" / "are in backward layer 7 of step 1042",
// "waits on all-reduce bucket 7 of step 1042" / "wait on all-reduce bucket 7 of step 1042".
std::string describe_phase(const HeartbeatRecord& record, bool plural = false);

// The record for state files and `xlaunch status --json`: {"step", "total_steps", "micro_step",
// "micro_steps", "phase", "layer", "bucket", "text", "last_step", "loss", "busy_ms", "step_ms",
// "tokens_per_s", "eta_s", "phase_age_s", "updated_age_s"}, ages against `now_ns`.
nlohmann::json to_json(const HeartbeatRecord& record, std::int64_t now_ns);

// Seconds since the heartbeat file at `path` was last touched, at `now_ns`; nullopt without a file.
std::optional<double> heartbeat_age_s(const std::string& path, std::int64_t now_ns);

// CLOCK_REALTIME in nanoseconds: the records' time base (a vDSO call, no system call).
std::int64_t realtime_ns();

}  // namespace xtrain
