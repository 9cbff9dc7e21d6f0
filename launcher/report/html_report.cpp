#include "launcher/report/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "common/build_info.hpp"
#include "common/exit_codes.hpp"
#include "launcher/report/svg_chart.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {
namespace {

using nlohmann::json;

// Past this many ranks the per-rank chart draws the fastest, median and slowest rank of each step.
constexpr std::size_t kMaxRankSeries = 8;

const char* const kStyle = R"(
:root{--fg:#1d2330;--muted:#5b6472;--line:#e3e6eb;--bg:#f5f6f8;--card:#fff;--ok:#1a7f37;--bad:#c62828;
--warn:#8a5a00;--run:#0a58ca}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","DejaVu Sans",sans-serif;
color:var(--fg);background:var(--bg)}
main{max-width:1360px;margin:0 auto;padding:22px 28px 36px}
h1{font-size:22px;margin:0 10px 0 0;display:inline}
h2{font-size:15px;margin:0 0 8px}
.badge{display:inline-block;padding:2px 11px;border-radius:999px;font-weight:600;font-size:13px;vertical-align:3px}
.badge.completed{background:#dafbe1;color:var(--ok)}.badge.failed,.badge.lost{background:#ffebe9;color:var(--bad)}
.badge.stopped,.badge.preempted{background:#fff4c2;color:var(--warn)}.badge.running{background:#ddf4ff;color:var(--run)}
.meta{color:var(--muted);margin:6px 0 16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 16px;margin-bottom:14px}
.cause{border-left:4px solid var(--bad)}.cause.stopped{border-left-color:#d4a72c}
.cause p{margin:4px 0}
dl.spec{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:3px 14px;margin:0}
dl.spec dt{color:var(--muted)}dl.spec dd{margin:0;overflow-wrap:anywhere}dl.spec dt.wide{grid-column:1}dl.spec dd.wide{grid-column:2/-1}
dl.spec code{font-size:12.5px}
.kpis{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:14px}
.kpi{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 16px;min-width:130px}
.kpi .v{font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}
.kpi .k{color:var(--muted);font-size:11.5px;text-transform:uppercase;letter-spacing:.04em}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:14px;margin-bottom:14px}
figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:6px 6px 2px}
svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:#eceef1}svg .axis{stroke:#98a1ad;fill:none}svg .tick{font-size:11px;fill:var(--muted)}
svg .axis-title{font-size:12px;fill:var(--fg)}svg .title{font-size:14px;font-weight:600;fill:var(--fg)}
svg .legend{font-size:12px;fill:var(--fg)}svg .line{fill:none;stroke-width:1.7;stroke-linejoin:round}
svg .empty{fill:var(--muted);font-size:14px}svg .frame{fill:#fafbfc;stroke:var(--line)}
svg .note{font-size:10.5px;fill:var(--muted);font-style:italic}svg .cursor{stroke:#98a1ad;stroke-dasharray:3 3}
pre{background:#111820;color:#e6edf3;padding:9px 12px;border-radius:6px;overflow:auto;max-height:320px;
font:12px/1.4 ui-monospace,"DejaVu Sans Mono",monospace;margin:8px 0 0}
table{border-collapse:collapse;width:100%}
td,th{text-align:left;padding:4px 14px 4px 0;vertical-align:top;border-bottom:1px solid var(--line)}
th{color:var(--muted);font-weight:500}
.row{display:grid;grid-template-columns:1fr 1fr;gap:14px}
#tip{position:absolute;pointer-events:none;background:#1d2330;color:#fff;padding:6px 9px;border-radius:6px;
font-size:12px;display:none;white-space:nowrap;box-shadow:0 2px 8px rgba(0,0,0,.25)}
footer{color:var(--muted);font-size:12px;margin-top:18px}
)";

// Tooltips: the nearest point of every series to the pointer's x, read from data-xs/data-ys.
const char* const kScript = R"(
(function(){const tip=document.getElementById('tip');
function nearest(xs,x){let lo=0,hi=xs.length-1;while(hi-lo>1){const m=(lo+hi)>>1;if(xs[m]<x)lo=m;else hi=m;}
return Math.abs(xs[lo]-x)<=Math.abs(xs[hi]-x)?lo:hi;}
function num(v){return Math.abs(v)>=1e4?v.toLocaleString('en',{maximumFractionDigits:0}):+v.toPrecision(5);}
document.querySelectorAll('svg.chart[data-x0]').forEach(function(svg){
const d=svg.dataset,x0=+d.x0,x1=+d.x1,p0=+d.px0,p1=+d.px1,cursor=svg.querySelector('line.cursor');
const lines=[...svg.querySelectorAll('polyline.line')].map(function(l){return{name:l.dataset.series,
color:l.getAttribute('stroke'),xs:l.dataset.xs.split(' ').map(Number),ys:l.dataset.ys.split(' ').map(Number)};});
svg.addEventListener('mousemove',function(e){const pt=svg.createSVGPoint();pt.x=e.clientX;pt.y=e.clientY;
const p=pt.matrixTransform(svg.getScreenCTM().inverse());
if(p.x<p0||p.x>p1){tip.style.display='none';cursor.setAttribute('visibility','hidden');return;}
const x=x0+(p.x-p0)/(p1-p0)*(x1-x0);let html='',at=null;
lines.forEach(function(l){const i=nearest(l.xs,x);if(at===null)at=l.xs[i];
html+='<div><span style="color:'+l.color+'">&#9632;</span> '+l.name+': '+num(l.ys[i])+' <small>('+d.xlabel+' '+num(l.xs[i])+')</small></div>';});
tip.innerHTML=html;tip.style.display='block';tip.style.left=(e.pageX+14)+'px';tip.style.top=(e.pageY+12)+'px';
const px=p0+(at-x0)/(x1-x0)*(p1-p0);cursor.setAttribute('x1',px);cursor.setAttribute('x2',px);
cursor.setAttribute('visibility','visible');});
svg.addEventListener('mouseleave',function(){tip.style.display='none';cursor.setAttribute('visibility','hidden');});
});})();
)";

std::string text_of(const json& object, const char* key, const std::string& fallback = "-") {
  if (!object.is_object() || !object.contains(key) || object.at(key).is_null()) return fallback;
  const json& v = object.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string number_text(double v, const char* format = "{:.4f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : "-";
}

// 63.2k, 1.25M: throughputs at a glance.
std::string rate_text(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string seconds_or(const json& object, const char* key, const char* when_zero) {
  return object.value(key, 0.0) > 0 ? text_of(object, key) + " s" : when_zero;
}

// The newest of summary.json and state.json (the summary wins once the run is over).
const json& latest(const RunInfo& run) { return run.summary.is_object() ? run.summary : run.state; }

const char* badge_class(RunState state) {
  switch (state) {
    case RunState::kRunning: return "running";
    case RunState::kCompleted: return "completed";
    case RunState::kPreempted: return "preempted";
    case RunState::kFailed: return "failed";
    case RunState::kStopped: return "stopped";
    case RunState::kLost: return "lost";
  }
  return "";
}

void header(std::string& html, const RunInfo& run) {
  const json& now = latest(run);
  html += fmt::format(R"(<header><h1>{}</h1><span class="badge {}">{}</span>)", html_escape(run.name),
                      badge_class(run.run_state), html_escape(state_label(run)));
  std::string meta = "run dir <code>" + html_escape(run.dir) + "</code>";
  if (now.is_object() && now.contains("run_id")) meta += " · run " + html_escape(text_of(now, "run_id"));
  if (run.started) meta += " · started " + format_local_time(*run.started);
  if (run.duration_s) meta += " · " + std::string(run.run_state == RunState::kRunning ? "running for " : "took ") +
                              duration_text(*run.duration_s);
  meta += " · report written " + format_local_time(static_cast<double>(std::time(nullptr)));
  html += R"(<p class="meta">)" + meta + "</p></header>\n";
}

// One entry of the spec's grid; a wide one takes the whole row.
void definition(std::string& html, const std::string& term, const std::string& value, bool wide = false) {
  const char* attribute = wide ? R"( class="wide")" : "";
  html += fmt::format("<dt{}>{}</dt><dd{}>{}</dd>", attribute, html_escape(term), attribute, html_escape(value));
}

// An ISO time of state.json or summary.json in local time, as the rest of the page shows times.
std::string local_time_of(const json& object, const char* key) {
  const auto t = parse_iso_time(text_of(object, key, ""));
  return t ? format_local_time(*t) : text_of(object, key);
}

void spec_summary(std::string& html, const RunInfo& run) {
  const json& job = run.job;
  const json& now = latest(run);
  html += R"(<section class="card"><h2>Spec</h2><dl class="spec">)";
  std::string program = "xtrain-worker";
  if (job.is_object() && job.value("worker", json::object()).value("command", json()).is_array()) {
    program.clear();
    for (const json& arg : job.at("worker").at("command")) program += (program.empty() ? "" : " ") + arg.get<std::string>();
  }
  definition(html, "program", program, true);
  const json nodes = job.is_object() ? job.value("nodes", json::object()) : json::object();
  definition(html, "world", fmt::format("{} ranks ({} node(s) × {}), {}, {}", text_of(now, "world_size"),
                                        text_of(nodes, "nnodes", "1"), text_of(job, "nproc_per_node"),
                                        text_of(now, "device"), text_of(now, "backend")));
  if (run.total_steps) {  // our own worker: its training sections mean something
    const json& m = job.at("model");
    const json& t = job.at("train");
    const json& c = job.at("checkpoint");
    definition(html, "model", fmt::format("{} layers, {} heads, {} channels, context {}, vocabulary {}",
                                          text_of(m, "n_layer"), text_of(m, "n_head"), text_of(m, "n_embd"),
                                          text_of(m, "seq_len"), text_of(m, "vocab_size")));
    definition(html, "batch", fmt::format("{} sequences per step ({} per rank per micro-step), {} steps",
                                          text_of(t, "batch_size"), text_of(t, "micro_batch_size"), text_of(t, "steps")));
    definition(html, "optimizer", fmt::format("AdamW, lr {} to {} (warmup {} steps, cosine), weight decay {}, clip {}",
                                              text_of(t, "lr"), text_of(t, "min_lr"), text_of(t, "warmup_steps"),
                                              text_of(t, "weight_decay"), text_of(t, "grad_clip")));
    definition(html, "data", text_of(job.at("data"), "train") +
                                 (text_of(job.at("data"), "val", "").empty() ? "" : ", validation " + text_of(job.at("data"), "val")));
    const std::string choices = text_of(t, "eval_multiple_choice", "");
    definition(html, "validation",
               text_of(t, "eval_every") == "0"
                   ? "off"
                   : fmt::format("every {} steps, {} batches{}", text_of(t, "eval_every"), text_of(t, "eval_batches"),
                                 choices.empty() ? "" : ", multiple choice " + choices));
    definition(html, "checkpoints", fmt::format("{}, keep {}, resume {}",
                                                text_of(c, "every") == "0" ? "at the end"
                                                                           : "every " + text_of(c, "every") + " steps",
                                                text_of(c, "keep"), text_of(c, "resume")));
  }
  const json launcher = job.is_object() ? job.value("launcher", json::object()) : json::object();
  definition(html, "launcher", fmt::format("max restarts {}, heartbeat timeout {}, job timeout {}, console {}",
                                           text_of(launcher, "max_restarts"),
                                           seconds_or(launcher, "heartbeat_timeout_s", "off"),
                                           seconds_or(launcher, "timeout_s", "none"), text_of(launcher, "tee")),
             true);
  html += "</dl></section>\n";
}

std::string failure_text(const json& cause) {
  const std::string kind = text_of(cause, "kind");
  if (cause.value("signal", json()).is_number_integer()) return exit_code::killed_by(cause.at("signal").get<int>());
  if (cause.value("exit_code", json()).is_number_integer()) return "exited with code " + text_of(cause, "exit_code");
  if (kind == "hung") return "hung (no heartbeat)";
  if (kind == "spawn_failed") return "could not be started";
  return kind;
}

// Why the run ended, when it did not succeed: the root cause with its message and log tail.
void outcome(std::string& html, const RunInfo& run) {
  if (run.run_state == RunState::kRunning || run.run_state == RunState::kCompleted) return;
  const bool stopped = run.run_state == RunState::kStopped || run.run_state == RunState::kPreempted;
  html += fmt::format(R"(<section class="card cause{}" id="root-cause"><h2>{}</h2>)", stopped ? " stopped" : "",
                      stopped ? "Why it stopped" : "Why it failed");
  if (run.run_state == RunState::kLost) {
    html += fmt::format("<p>The supervisor (pid {}) is gone and left no summary.json; its last update was {}.</p>",
                        html_escape(text_of(run.state, "supervisor_pid")), local_time_of(run.state, "updated_at"));
  } else {
    html += fmt::format("<p><b>{}</b>; xlaunch exited with code {}.</p>", html_escape(text_of(run.summary, "exit_reason")),
                        html_escape(text_of(run.summary, "exit_code")));
  }
  const json cause = run.summary.is_object() ? run.summary.value("root_cause", json()) : json();
  if (cause.is_object()) {
    std::string who = cause.value("rank", json()).is_null() ? "node " + text_of(cause, "node")
                                                            : "rank " + text_of(cause, "rank") + " on node " +
                                                                  text_of(cause, "node", "0");
    if (text_of(cause, "pid") != "-") who += " (pid " + text_of(cause, "pid") + ")";
    html += fmt::format("<p>Root cause: <b>{}</b> {} at {}</p>", html_escape(who), html_escape(failure_text(cause)),
                        html_escape(local_time_of(cause, "time")));
    if (text_of(cause, "message") != "-") {
      html += "<p>Message: <b>" + html_escape(text_of(cause, "message")) + "</b></p>";
    }
    const json tail = cause.value("log_tail", json::array());
    if (tail.is_array() && !tail.empty()) {
      html += "<p>Its last lines:</p><pre>";
      for (const json& line : tail) html += html_escape(line.is_string() ? line.get<std::string>() : line.dump()) + "\n";
      html += "</pre>";
    } else {
      html += "<p>It printed nothing.</p>";
    }
  }
  html += "</section>\n";
}

void kpi(std::string& html, const std::string& key, const std::string& value) {
  html += R"(<div class="kpi"><div class="k">)" + html_escape(key) + R"(</div><div class="v">)" + html_escape(value) +
          "</div></div>";
}

void progress(std::string& html, const RunInfo& run, const MetricsLog& metrics) {
  html += R"(<section class="kpis">)";
  const auto& total = run.total_steps;
  if (metrics.steps().empty()) {
    if (total) kpi(html, "step", fmt::format("0 / {}", *total));
  } else {
    const StepRecord& last = metrics.steps().rbegin()->second;
    kpi(html, "step", total ? fmt::format("{} / {}", last.step, *total) : std::to_string(last.step));
    kpi(html, "loss", number_text(last.loss));
    if (!metrics.validations().empty()) {
      const ValRecord& val = metrics.validations().rbegin()->second;
      kpi(html, "val loss (step " + std::to_string(val.step) + ")", number_text(val.val_loss));
      if (std::isfinite(val.mc_accuracy)) {
        kpi(html, "multiple-choice acc (step " + std::to_string(val.step) + ")", fmt::format("{:.4f}", val.mc_accuracy));
      }
    }
    if (std::isfinite(last.tokens_per_s)) kpi(html, "tokens/s", rate_text(last.tokens_per_s));
    if (std::isfinite(last.ms_per_step)) kpi(html, "step time", fmt::format("{:.1f} ms", last.ms_per_step));
    if (std::isfinite(last.elapsed_s)) kpi(html, "training time", duration_text(last.elapsed_s));
    if (run.run_state == RunState::kRunning && total && std::isfinite(last.ms_per_step) && *total > last.step) {
      kpi(html, "ETA", duration_text(static_cast<double>(*total - last.step) * last.ms_per_step / 1000));
    }
  }
  const json& now = latest(run);
  if (now.is_object() && now.contains("attempt") && now.contains("max_restarts")) {
    kpi(html, "attempt", fmt::format("{} of {}", text_of(now, "attempt"), now.value("max_restarts", 0) + 1));
  } else if (now.is_object() && now.contains("attempts")) {
    kpi(html, "attempts", text_of(now, "attempts"));
  }
  html += "</section>\n";
}

// Per-rank step times: every rank when there are few, else the fastest, median and slowest.
Chart rank_chart(const MetricsLog& metrics) {
  Chart chart{"rank-step-ms", "Step time per rank", "step", "step time (ms)", {},
              "not recorded: the step records have no rank_step_ms"};
  std::size_t ranks = 0;
  for (const auto& [step, r] : metrics.steps()) ranks = std::max(ranks, r.rank_step_ms.size());
  if (ranks == 0) return chart;
  const bool every_rank = ranks <= kMaxRankSeries;
  const std::size_t count = every_rank ? ranks : 3;
  for (std::size_t i = 0; i < count; ++i) {
    static const char* const kSummaries[] = {"fastest rank", "median rank", "slowest rank"};
    chart.series.push_back({every_rank ? "rank " + std::to_string(i) : kSummaries[i], {}, {}});
  }
  for (const auto& [step, r] : metrics.steps()) {
    if (r.rank_step_ms.empty()) continue;
    std::vector<double> ms = r.rank_step_ms;
    if (!every_rank) {
      std::sort(ms.begin(), ms.end());
      ms = {ms.front(), ms[ms.size() / 2], ms.back()};
    }
    for (std::size_t i = 0; i < count; ++i) {
      chart.series[i].x.push_back(static_cast<double>(step));
      chart.series[i].y.push_back(i < ms.size() ? ms[i] : NAN);
    }
  }
  return chart;
}

std::vector<Chart> charts(const RunInfo& run, const MetricsLog& metrics) {
  const auto& per_step = run.tokens_per_step;
  Series loss{"train loss", {}, {}}, val{"val loss", {}, {}}, loss_t{"train loss", {}, {}}, val_t{"val loss", {}, {}};
  Series lr{"learning rate", {}, {}}, norm{"gradient norm", {}, {}}, speed{"tokens/s", {}, {}};
  Series accuracy{"multiple-choice accuracy", {}, {}};
  for (const auto& [step, r] : metrics.steps()) {
    const double x = static_cast<double>(step);
    loss.x.push_back(x), loss.y.push_back(r.loss);
    lr.x.push_back(x), lr.y.push_back(r.lr);
    norm.x.push_back(x), norm.y.push_back(r.grad_norm);
    speed.x.push_back(x), speed.y.push_back(r.tokens_per_s);
    const double tokens = std::isfinite(r.tokens) ? r.tokens : per_step ? x * *per_step : NAN;
    if (std::isfinite(tokens)) loss_t.x.push_back(tokens), loss_t.y.push_back(r.loss);
  }
  for (const auto& [step, v] : metrics.validations()) {
    const double x = static_cast<double>(step);
    val.x.push_back(x), val.y.push_back(v.val_loss);
    if (per_step) val_t.x.push_back(x * *per_step), val_t.y.push_back(v.val_loss);
    if (std::isfinite(v.mc_accuracy)) accuracy.x.push_back(x), accuracy.y.push_back(v.mc_accuracy);
  }
  const std::string none = "not recorded";
  std::vector<Chart> out = {
      {"loss-step", "Loss by step", "step", "loss (nats per token)", {loss, val}, none},
      {"loss-tokens", "Loss by tokens seen", "tokens", "loss (nats per token)", {loss_t, val_t},
       "not recorded: no token counts"},
      {"lr", "Learning rate", "step", "learning rate", {lr}, none},
      {"grad-norm", "Gradient norm (before clipping)", "step", "global L2 norm", {norm}, none},
      {"tokens-per-s", "Throughput", "step", "tokens/s (all ranks)", {speed}, none},
      rank_chart(metrics),
  };
  // Only for runs that name a multiple-choice file (train.eval_multiple_choice).
  if (!accuracy.x.empty()) {
    out.insert(out.begin() + 2, {"mc-accuracy", "Multiple-choice accuracy at each validation", "step",
                                 "accuracy (share of examples answered right)", {accuracy}, none});
  }
  return out;
}

void restarts(std::string& html, const RunInfo& run) {
  html += R"(<section class="card" id="restarts"><h2>Attempts and restarts</h2>)";
  const json history = run.summary.is_object() ? run.summary.value("attempt_history", json::array()) : json::array();
  if (history.is_array() && !history.empty()) {
    html += "<table><tr><th>attempt</th><th>duration</th><th>outcome</th><th>exit code</th><th>cause</th></tr>";
    for (const json& a : history) {
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", text_of(a, "attempt"),
                          duration_text(a.value("duration_s", -1.0)), html_escape(text_of(a, "status")),
                          text_of(a, "exit_code"), html_escape(text_of(a, "reason")));
    }
    html += "</table>";
  } else if (run.state.is_object()) {
    html += fmt::format("<p>Attempt {} of {} is under way.</p>", text_of(run.state, "attempt"),
                        run.state.value("max_restarts", 0) + 1);
  } else {
    html += "<p>Not recorded.</p>";
  }
  html += "</section>";
}

void stragglers(std::string& html, const RunInfo& run) {
  html += R"(<section class="card" id="stragglers"><h2>Stragglers</h2>)";
  json list = run.summary.is_object() ? run.summary.value("stragglers", json()) : json();
  if (!list.is_array() && run.state.is_object()) list = run.state.value("stragglers", json());
  if (list.is_array() && !list.empty()) {
    html += "<table><tr><th>rank</th><th>from step</th><th>reported at step</th><th>slower than the other ranks by"
            "</th><th>recovered at step</th></tr>";
    for (const json& s : list) {
      const double by = s.value("slower_by", NAN);
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", text_of(s, "rank"),
                          text_of(s, "first_step"), text_of(s, "warned_step"),
                          std::isfinite(by) ? fmt::format("{:.0f}%", by * 100) : "-",
                          text_of(s, "recovered_step", "not yet"));
    }
    html += "</table>";
  } else {
    html += list.is_array() ? "<p>None: every rank kept up with the others.</p>" : "<p>None reported.</p>";
  }
  html += "</section>";
}

}  // namespace

std::string render_report(const RunInfo& run, const MetricsLog& metrics) {
  std::string html = R"(<!doctype html><html lang="en"><head><meta charset="utf-8">)"
                     R"(<meta name="viewport" content="width=device-width, initial-scale=1">)";
  if (run.run_state == RunState::kRunning) html += R"(<meta http-equiv="refresh" content="10">)";
  html += "<title>" + html_escape(run.name) + " · " + html_escape(state_label(run)) + " · xlaunch report</title>";
  html += "<style>" + std::string(kStyle) + "</style></head><body><main>\n";
  header(html, run);
  spec_summary(html, run);
  outcome(html, run);
  progress(html, run, metrics);
  if (metrics.steps().empty() && metrics.validations().empty()) {
    html += R"(<section class="card" id="no-metrics"><h2>No metrics</h2><p>The run has no step records in )"
            R"(metrics.jsonl (yet). xtrain-worker's rank 0 appends one per logged step; any program can append )"
            R"(lines such as <code>{"step": 10, "loss": 2.31, "lr": 3e-4, "tokens": 40960}</code> to )"
            R"(<code>$XTRAIN_RUN_DIR/metrics.jsonl</code> and get these charts.</p></section>)";
  } else {
    html += R"(<section class="charts">)";
    for (const Chart& chart : charts(run, metrics)) html += "<figure>" + render_chart(chart) + "</figure>\n";
    html += "</section>\n";
  }
  html += "<div class=\"row\">";
  restarts(html, run);
  stragglers(html, run);
  html += "</div>\n";
  html += fmt::format("<footer>Written by xlaunch {} from {}/metrics.jsonl: {} step and {} validation records",
                      html_escape(build_version()), html_escape(run.dir), metrics.steps().size(),
                      metrics.validations().size());
  if (metrics.superseded() > 0) {
    html += fmt::format(" ({} earlier records of repeated steps left out: the last record of a step wins)",
                        metrics.superseded());
  }
  if (metrics.malformed() > 0) html += fmt::format("; {} lines that are not step records skipped", metrics.malformed());
  html += ". While the run goes, the supervisor rewrites this file every 10 s when metrics change.</footer>";
  html += "</main><div id=\"tip\"></div><script>" + std::string(kScript) + "</script></body></html>\n";
  return html;
}

void write_report(const RunInfo& run, const MetricsLog& metrics, const std::string& path) {
  write_file_atomic(path, render_report(run, metrics), /*durable=*/false);
}

int report_command(const CliOptions& options) {
  if (const auto why = why_not_a_run_dir(options.run_dir)) throw CliError(*why);
  const auto run = read_run_info(options.run_dir);
  MetricsLog metrics(run_files::metrics(options.run_dir));
  metrics.update();
  const std::string path = options.out.empty() ? run_files::report(options.run_dir) : options.out;
  write_report(*run, metrics, path);
  std::cout << fmt::format("xlaunch: wrote {} ({}, {} step records)", path, state_label(*run), metrics.steps().size())
            << std::endl;
  return exit_code::kSuccess;
}

}  // namespace xtrain::launcher
