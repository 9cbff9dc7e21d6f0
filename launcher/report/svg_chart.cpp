#include "launcher/report/svg_chart.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace xtrain::launcher {
namespace {

// The drawing, in viewBox units; the page scales it to the column's width.
constexpr double kWidth = 640;
constexpr double kHeight = 300;
constexpr double kLeft = 66;    // y tick labels and the y title
constexpr double kRight = 18;
constexpr double kTop = 44;     // title and legend
constexpr double kBottom = 48;  // x tick labels and the x title
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr double kPlotHeight = kHeight - kTop - kBottom;

// Distinct on white and for the common kinds of colour blindness (Okabe-Ito, then Tableau).
const char* const kPalette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00",
                                "#56b4e9", "#8c564b", "#7f7f7f", "#bcbd22", "#17becf"};

struct Range {
  double lo = 0;
  double hi = 1;
};

// Compact numbers for the data attributes (the tooltip shows them).
std::string compact(double v) { return fmt::format("{:.6g}", v); }

// The data's extent; a single value gets room around it.
Range extent(const std::vector<Points>& shown, bool of_y) {
  double lo = INFINITY, hi = -INFINITY;
  for (const Points& p : shown) {
    for (double v : of_y ? p.y : p.x) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (lo == hi) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    return {lo - pad, hi + pad};
  }
  if (of_y) {  // a margin so the line does not sit on the frame
    const double pad = (hi - lo) * 0.06;
    return {lo - pad, hi + pad};
  }
  return {lo, hi};
}

double to_px(double v, Range r, double p0, double p1) { return p0 + (v - r.lo) / (r.hi - r.lo) * (p1 - p0); }

void draw_axes(std::string& svg, const Chart& chart, Range xr, Range yr) {
  const double bottom = kTop + kPlotHeight;
  const auto yticks = nice_ticks(yr.lo, yr.hi, 5);
  const double ystep = yticks.size() > 1 ? yticks[1] - yticks[0] : yr.hi - yr.lo;
  for (double t : yticks) {
    const double y = to_px(t, yr, bottom, kTop);
    svg += fmt::format(R"(<line class="grid" x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}"/>)", kLeft, y,
                       kLeft + kPlotWidth, y);
    svg += fmt::format(R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="end">{}</text>)", kLeft - 6, y + 4,
                       tick_label(t, ystep));
  }
  const auto xticks = nice_ticks(xr.lo, xr.hi, 6);
  const double xstep = xticks.size() > 1 ? xticks[1] - xticks[0] : xr.hi - xr.lo;
  for (double t : xticks) {
    const double x = to_px(t, xr, kLeft, kLeft + kPlotWidth);
    svg += fmt::format(R"(<line class="grid" x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}"/>)", x, kTop, x, bottom);
    svg += fmt::format(R"(<text class="tick" x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)", x, bottom + 16,
                       tick_label(t, xstep));
  }
  svg += fmt::format(R"(<path class="axis" d="M{:.1f} {:.1f}V{:.1f}H{:.1f}"/>)", kLeft, kTop, bottom,
                     kLeft + kPlotWidth);
  svg += fmt::format(R"(<text class="axis-title" x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)",
                     kLeft + kPlotWidth / 2, kHeight - 8, html_escape(chart.x_label));
  svg += fmt::format(R"svg(<text class="axis-title" transform="translate(16 {:.1f}) rotate(-90)" )svg"
                     R"(text-anchor="middle">{}</text>)",
                     kTop + kPlotHeight / 2, html_escape(chart.y_label));
}

// Legend entries of the series that have points, from the right edge of the title line leftwards.
void draw_legend(std::string& svg, const Chart& chart, const std::vector<Points>& shown) {
  double right = kWidth - kRight;
  for (std::size_t i = chart.series.size(); i-- > 0;) {
    if (shown[i].x.empty()) continue;
    const std::string& name = chart.series[i].name;
    const double text_width = 6.6 * static_cast<double>(name.size());
    const double x = right - text_width;
    svg += fmt::format(R"(<rect x="{:.1f}" y="13" width="12" height="4" rx="1" fill="{}"/>)", x - 16,
                       kPalette[i % std::size(kPalette)]);
    svg += fmt::format(R"(<text class="legend" x="{:.1f}" y="20">{}</text>)", x, html_escape(name));
    right = x - 30;
  }
}

void draw_series(std::string& svg, const Series& series, const Points& shown, std::size_t records,
                 const char* color, Range xr, Range yr) {
  std::string points, xs, ys, markers;
  const bool with_markers = shown.x.size() <= kMaxMarkerPoints;
  for (std::size_t i = 0; i < shown.x.size(); ++i) {
    const double px = to_px(shown.x[i], xr, kLeft, kLeft + kPlotWidth);
    const double py = to_px(shown.y[i], yr, kTop + kPlotHeight, kTop);
    const char* sep = i == 0 ? "" : " ";
    points += fmt::format("{}{:.1f},{:.1f}", sep, px, py);
    xs += sep + compact(shown.x[i]);
    ys += sep + compact(shown.y[i]);
    if (with_markers) markers += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="2.4"/>)", px, py);
  }
  const std::string name = html_escape(series.name);
  svg += fmt::format(R"(<polyline class="line" stroke="{}" data-series="{}" data-count="{}" data-records="{}" )"
                     R"(data-xs="{}" data-ys="{}" points="{}"/>)",
                     color, name, shown.x.size(), records, xs, ys, points);
  if (with_markers) {
    svg += fmt::format(R"(<g class="markers" fill="{}" data-series="{}">{}</g>)", color, name, markers);
  }
}

}  // namespace

Points downsample_min_max(const std::vector<double>& x, const std::vector<double>& y, std::size_t max_points) {
  const std::size_t n = x.size();
  if (n <= max_points) return {x, y};
  const std::size_t buckets = std::max<std::size_t>(1, max_points / 2);
  Points out;
  for (std::size_t b = 0; b < buckets; ++b) {
    const std::size_t begin = b * n / buckets;
    const std::size_t end = (b + 1) * n / buckets;
    std::size_t lo = begin, hi = begin;
    for (std::size_t i = begin; i < end; ++i) {
      if (y[i] < y[lo]) lo = i;
      if (y[i] > y[hi]) hi = i;
    }
    for (std::size_t i : {std::min(lo, hi), std::max(lo, hi)}) {
      if (!out.x.empty() && out.x.back() == x[i] && out.y.back() == y[i]) continue;
      out.x.push_back(x[i]);
      out.y.push_back(y[i]);
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || target < 1) return {lo};
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double nice = norm < 1.5 ? 1 : norm < 2.25 ? 2 : norm < 3.5 ? 2.5 : norm < 7.5 ? 5 : 10;
  const double step = nice * magnitude;
  std::vector<double> ticks;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1) {
    const double t = k * step;
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string tick_label(double value, double step) {
  if (value == 0) return "0";
  const double magnitude = std::max(std::fabs(value), std::fabs(step));
  if (magnitude < 1e-2) {  // learning rates: 3e-4, 2.5e-5
    const int exponent = static_cast<int>(std::floor(std::log10(std::fabs(value))));
    return fmt::format("{:.3g}e{}", value / std::pow(10.0, exponent), exponent);
  }
  static const struct {
    double scale;
    const char* suffix;
  } kSi[] = {{1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  double scale = 1;
  const char* suffix = "";
  for (const auto& si : kSi) {
    if (magnitude >= 1e4 && magnitude >= si.scale) {
      scale = si.scale, suffix = si.suffix;
      break;
    }
  }
  const double scaled_step = step / scale;
  int decimals = 0;
  if (scaled_step > 0) {  // as many as the spacing needs: 0.25 -> 2, 2.5 -> 1, 25 -> 0
    const int exponent = static_cast<int>(std::floor(std::log10(scaled_step) + 1e-9));
    const bool quarter = std::fabs(scaled_step / std::pow(10.0, exponent) - 2.5) < 1e-6;
    decimals = std::max(0, -exponent) + (quarter && exponent <= 0 ? 1 : 0);
  }
  return fmt::format("{:.{}f}{}", value / scale, decimals, suffix);
}

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_chart(const Chart& chart) {
  std::vector<Points> shown;
  std::vector<std::size_t> records;
  std::size_t total_records = 0, total_shown = 0;
  for (const Series& s : chart.series) {
    Points kept;
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i]) || !std::isfinite(s.x[i])) continue;
      kept.x.push_back(s.x[i]);
      kept.y.push_back(s.y[i]);
    }
    records.push_back(kept.x.size());
    total_records += kept.x.size();
    shown.push_back(downsample_min_max(kept.x, kept.y, kMaxPoints));
    total_shown += shown.back().x.size();
  }
  std::string svg = fmt::format(R"(<svg class="chart" data-chart="{}" viewBox="0 0 {} {}" role="img" aria-label="{}")",
                                html_escape(chart.id), kWidth, kHeight, html_escape(chart.title));
  const std::string title = fmt::format(R"(<text class="title" x="{}" y="20">{}</text>)", kLeft, html_escape(chart.title));
  if (total_records == 0) {
    svg += fmt::format(R"( data-empty="true">{}<rect class="frame" x="{}" y="{}" width="{}" height="{}"/>)"
                       R"(<text class="empty" x="{}" y="{}" text-anchor="middle">{}</text></svg>)",
                       title, kLeft, kTop, kPlotWidth, kPlotHeight, kLeft + kPlotWidth / 2, kTop + kPlotHeight / 2 + 5,
                       html_escape(chart.empty_text));
    return svg;
  }
  const Range xr = extent(shown, false);
  const Range yr = extent(shown, true);
  svg += fmt::format(R"( data-x0="{}" data-x1="{}" data-px0="{}" data-px1="{}" data-xlabel="{}">)", compact(xr.lo),
                     compact(xr.hi), kLeft, kLeft + kPlotWidth, html_escape(chart.x_label));
  svg += title;
  draw_legend(svg, chart, shown);
  draw_axes(svg, chart, xr, yr);
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    if (shown[i].x.empty()) continue;
    draw_series(svg, chart.series[i], shown[i], records[i], kPalette[i % std::size(kPalette)], xr, yr);
  }
  if (total_shown < total_records) {
    svg += fmt::format(R"(<text class="note" x="{}" y="{}" text-anchor="end">{} of {} records drawn )"
                       R"((lowest and highest of each bucket)</text>)",
                       kWidth - kRight, kTop - 6, total_shown, total_records);
  }
  svg += fmt::format(R"(<line class="cursor" x1="0" y1="{}" x2="0" y2="{}" visibility="hidden"/></svg>)", kTop,
                     kTop + kPlotHeight);
  return svg;
}

}  // namespace xtrain::launcher
