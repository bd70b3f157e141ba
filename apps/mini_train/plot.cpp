// `mini_train plot`: --log-json files drawn as one SVG (see plot.h).
#include "apps/mini_train/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/mini_train/options.h"
#include "apps/mini_train/outputs.h"
#include "tensor/check.h"
#include "tensor/output_file.h"

namespace mt::app {

namespace {

struct Point {
  double x, y;  // step, value
};
using Series = std::vector<Point>;

// What one log draws: a series per panel, against the step.
struct LogCurves {
  std::string name;  // the file's name, for the legend
  Series loss, metric, lr;
  std::string metric_name;  // "test accuracy": the first eval record's split and metric
};

// A record's number, or NaN when it is absent or not a number (a non-finite loss is written as null).
double number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
}

Series finite(const Series& s) {
  Series out;
  std::copy_if(s.begin(), s.end(), std::back_inserter(out), [](const Point& p) { return std::isfinite(p.y); });
  return out;
}

// The records of one log (Note [Log records]); anything else is one line naming the file and line.
LogCurves read_log(const std::string& path) {
  std::error_code ec;
  MT_CHECK(std::filesystem::exists(path, ec), path, ": no such file");
  MT_CHECK(std::filesystem::is_regular_file(path, ec), path, ": not a regular file");
  std::ifstream in(path);
  MT_CHECK(in.good(), path, ": cannot read it");
  LogCurves c{.name = std::filesystem::path(path).filename().string(), .loss = {}, .metric = {}, .lr = {},
              .metric_name = {}};
  Series step_loss, step_lr, epoch_loss, epoch_lr;
  int64_t line_number = 0, records = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    MT_CHECK(j.is_object() && j.contains("type") && j["type"].is_string() && j.contains("step") &&
                 j["step"].is_number(),
             path, ":", line_number, ": not a --log-json record (a JSON object with \"type\" "
             "and \"step\")");
    const std::string type = j["type"].get<std::string>();
    const double step = j["step"].get<double>();
    if (type == "step") {
      step_loss.push_back({step, number(j, "loss")}), step_lr.push_back({step, number(j, "lr")});
    } else if (type == "epoch") {
      epoch_loss.push_back({step, number(j, "loss")}), epoch_lr.push_back({step, number(j, "lr")});
    } else if (type == "eval") {
      c.metric.push_back({step, number(j, "value")});
      if (c.metric_name.empty()) c.metric_name = j.value("split", "") + " " + j.value("metric", "");
    } else {
      MT_FAIL(path, ":", line_number, ": record type '", type, "' is not step, epoch or eval");
    }
    ++records;
  }
  MT_CHECK(records > 0, path, ": no records (mini_train --log-json FILE writes them)");
  // The step records when --log-every wrote them; else one point per epoch.
  c.loss = finite(step_loss.empty() ? epoch_loss : step_loss);
  c.lr = finite(step_lr.empty() ? epoch_lr : step_lr);
  c.metric = finite(c.metric);
  return c;
}

// ---- drawing ----

constexpr double kWidth = 760, kLeft = 80, kRight = 24, kTop = 48, kPanel = 190, kGap = 56;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"};

std::string escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '&') out += "&amp;";
    else if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '"') out += "&quot;";
    else out += ch;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(const Series& s) {
    for (const Point& p : s) lo = std::min(lo, p.y), hi = std::max(hi, p.y);
  }
  bool empty() const { return lo > hi; }
  // Never zero wide: a flat curve sits in the middle of a band.
  Range padded() const {
    const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(std::abs(lo) * 0.1, 1e-3);
    return {lo - pad, hi + pad};
  }
};

// Tick values in [lo, hi] at a step of 1, 2 or 5 times a power of ten, about `count` of them.
std::vector<double> ticks(double lo, double hi, int count) {
  const double raw = (hi - lo) / count, power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

// One panel: frame, ticks, a curve per log (with dots where the points are few, as eval records are).
void draw_panel(std::ostringstream& svg, const std::string& id, const std::string& title, double top,
                const Range& xs, const std::vector<LogCurves>& logs, Series LogCurves::*series) {
  const double plot_w = kWidth - kLeft - kRight;
  svg << "<g class=\"panel\" id=\"" << id << "\">\n";
  svg << "<text x=\"" << kLeft << "\" y=\"" << top - 8 << "\" font-weight=\"bold\">" << escaped(title) << "</text>\n";
  svg << "<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << kPanel
      << "\" fill=\"none\" stroke=\"#888\"/>\n";
  Range ys;
  for (const LogCurves& log : logs) ys.add(log.*series);
  if (ys.empty()) {
    svg << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << top + kPanel / 2
        << "\" text-anchor=\"middle\" fill=\"#888\">no records</text>\n</g>\n";
    return;
  }
  const Range y = ys.padded();
  const auto px = [&](double v) { return kLeft + (v - xs.lo) / (xs.hi - xs.lo) * plot_w; };
  const auto py = [&](double v) { return top + kPanel - (v - y.lo) / (y.hi - y.lo) * kPanel; };
  for (double t : ticks(y.lo, y.hi, 4))
    svg << "<line x1=\"" << kLeft - 4 << "\" x2=\"" << kLeft + plot_w << "\" y1=\"" << py(t) << "\" y2=\"" << py(t)
        << "\" stroke=\"#eee\"/><text x=\"" << kLeft - 6 << "\" y=\"" << py(t) + 4
        << "\" text-anchor=\"end\" font-size=\"11\">" << num(t) << "</text>\n";
  for (double t : ticks(xs.lo, xs.hi, 6))
    svg << "<text x=\"" << px(t) << "\" y=\"" << top + kPanel + 14 << "\" text-anchor=\"middle\" font-size=\"11\">"
        << num(t) << "</text>\n";
  for (size_t i = 0; i < logs.size(); ++i) {
    const Series& s = logs[i].*series;
    const char* color = kColors[i % std::size(kColors)];
    svg << "<polyline class=\"curve\" data-log=\"" << escaped(logs[i].name) << "\" fill=\"none\" stroke=\"" << color
        << "\" stroke-width=\"1.5\" points=\"";
    for (const Point& p : s) svg << px(p.x) << ',' << py(p.y) << ' ';
    svg << "\"/>\n";
    if (s.size() <= 60)
      for (const Point& p : s)
        svg << "<circle cx=\"" << px(p.x) << "\" cy=\"" << py(p.y) << "\" r=\"2.5\" fill=\"" << color << "\"/>\n";
  }
  svg << "</g>\n";
}

std::string draw(const std::vector<LogCurves>& logs, const std::string& title) {
  Range xs;  // the steps of every series of every log
  for (const LogCurves& log : logs)
    for (const Series* s : {&log.loss, &log.metric, &log.lr})
      for (const Point& p : *s) xs.lo = std::min(xs.lo, p.x), xs.hi = std::max(xs.hi, p.x);
  if (xs.empty()) xs = {0, 1};
  if (xs.hi == xs.lo) xs.hi = xs.lo + 1;
  std::string metric = "eval";
  for (const LogCurves& log : logs)
    if (!log.metric_name.empty()) {
      metric = "eval: " + log.metric_name;
      break;
    }
  const double legend_top = kTop + 3 * (kPanel + kGap) - 20, height = legend_top + 20.0 * logs.size() + 16;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"" << kWidth << "\" height=\"" << height
      << "\" fill=\"#fff\"/>\n<text x=\"" << kLeft << "\" y=\"24\" font-size=\"16\">" << escaped(title) << "</text>\n";
  draw_panel(svg, "loss", "training loss", kTop, xs, logs, &LogCurves::loss);
  draw_panel(svg, "metric", metric, kTop + kPanel + kGap, xs, logs, &LogCurves::metric);
  draw_panel(svg, "lr", "learning rate", kTop + 2 * (kPanel + kGap), xs, logs, &LogCurves::lr);
  svg << "<text x=\"" << kWidth - kRight << "\" y=\"" << legend_top - 8 << "\" text-anchor=\"end\">step</text>\n";
  svg << "<g class=\"legend\">\n";
  for (size_t i = 0; i < logs.size(); ++i) {
    const double y = legend_top + 20.0 * i + 12;
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + 24 << "\" y1=\"" << y - 4 << "\" y2=\"" << y - 4
        << "\" stroke=\"" << kColors[i % std::size(kColors)] << "\" stroke-width=\"3\"/><text x=\"" << kLeft + 32
        << "\" y=\"" << y << "\">" << escaped(logs[i].name) << "</text>\n";
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace

int run_plot(int argc, char** argv) {
  PlotOptions p;
  int exit_code = 0;
  if (!parse_plot_options(argc, argv, p, &exit_code)) return exit_code;  // options.h
  std::vector<FlagPath> logs_read;
  for (const std::string& path : p.logs) logs_read.push_back({"the log", path});
  check_distinct({{"-o", p.output}}, logs_read);  // Note [An output is never an input]
  check_output_file("-o", p.output, 1 << 20);  // a device, a missing folder: refused before reading
  std::vector<LogCurves> logs;
  for (const std::string& path : p.logs) logs.push_back(read_log(path));
  const std::string svg = draw(logs, p.title.empty() ? "mini_train" : p.title);
  write_file_atomically(p.output, svg, "-o");
  std::printf("wrote %s: %zu log%s\n", p.output.c_str(), logs.size(), logs.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace mt::app
