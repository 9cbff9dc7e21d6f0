#include "launcher/process/live_status.hpp"

#include "common/heartbeat_record.hpp"
#include "common/worker_env.hpp"
#include "launcher/process/proc_info.hpp"

namespace xtrain::launcher {
namespace {

using nlohmann::json;

json progress_json(const HeartbeatRecord& r) {
  return {{"step", r.last_step},
          {"total_steps", r.total_steps},
          {"loss", r.last_step > 0 ? json(r.last_loss) : json(nullptr)},
          {"tokens_per_s", r.tokens_per_s},
          {"eta_s", r.eta_s}};
}

}  // namespace

json with_live_state(const std::string& run_dir, json run) {
  const std::int64_t now = realtime_ns();
  run["progress"] = nullptr;
  if (!run.contains("ranks") || !run["ranks"].is_array()) return run;
  for (json& rank : run["ranks"]) {
    if (!rank.is_object() || !rank.value("rank", json()).is_number_integer()) continue;
    const int id = rank["rank"].get<int>();
    const std::string beat_file = heartbeat_file_path(run_dir, id);
    const std::optional<HeartbeatRecord> record = read_heartbeat_record(beat_file);
    const std::optional<double> age = heartbeat_age_s(beat_file, now);
    rank["heartbeat_age_s"] = age ? json(*age) : json(nullptr);
    rank["phase"] = record ? to_json(*record, now) : json(nullptr);
    if (record && run["progress"].is_null()) run["progress"] = progress_json(*record);
    if (rank.value("status", "") != "running") continue;
    const json pid = rank.value("pid", json()), start = rank.value("start_time", json());
    const bool alive = pid.is_number_integer() &&
                       process_alive(pid.get<pid_t>(), start.is_number_unsigned() ? start.get<std::uint64_t>() : 0);
    rank["alive"] = alive;
    if (!alive) rank["status"] = "gone";
  }
  return run;
}

}  // namespace xtrain::launcher
