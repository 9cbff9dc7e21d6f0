// Line charts as inline SVG for the run report (launcher/report/html_report.hpp): axes with ticks at
// round numbers and units in their titles, one polyline per series with one point per record
// (min/max buckets past kMaxPoints, said on the chart), markers when a series has few points,
// and data attributes that a tooltip script and a DOM check read:
//   <svg class="chart" data-chart=ID data-x0 data-x1 data-px0 data-px1 ...>
//     <polyline class="line" data-series=NAME data-count=POINTS data-records=RECORDS
//               data-xs="..." data-ys="..." points="..."/>
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace xtrain::launcher {

inline constexpr std::size_t kMaxPoints = 2000;     // per series, after downsampling
inline constexpr std::size_t kMaxMarkerPoints = 200;  // series with more points get no markers

struct Series {
  std::string name;         // legend entry and data-series
  std::vector<double> x;    // increasing
  std::vector<double> y;    // NaN: no value at this x (skipped)
};

struct Chart {
  std::string id;           // data-chart, unique in the page
  std::string title;
  std::string x_label;      // with units: "step", "tokens"
  std::string y_label;      // "loss (nats)", "ms"
  std::vector<Series> series;
  std::string empty_text;   // shown instead of axes when no series has a point
};

// The <svg> element.
std::string render_chart(const Chart& chart);

// At most `max_points` points of (x, y) in x order: for each of max_points / 2 buckets of
// consecutive points, its lowest and its highest (so spikes survive).
struct Points {
  std::vector<double> x;
  std::vector<double> y;
};
Points downsample_min_max(const std::vector<double>& x, const std::vector<double>& y, std::size_t max_points);

// Tick positions at round numbers (1, 2, 2.5 or 5 x 10^k apart) inside [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target);
// A tick's text: 1.5k, 2M, 3e-4, 0.25; `step` (the tick spacing) sets the decimals.
std::string tick_label(double value, double step);

// Text for HTML and SVG: & < > " ' escaped.
std::string html_escape(const std::string& text);

}  // namespace xtrain::launcher
