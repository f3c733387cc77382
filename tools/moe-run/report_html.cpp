//===- report_html.cpp - moe-run --report-html: one self-contained page ---===//
//
// One HTML page with inline CSS and SVG, no script, font, image or link: the
// run's configuration, latency (report_sections.cpp), a generation's time to
// first token and tokens per second, where the time goes (per step kind,
// per MoE layer and part), the communication share per device, each MoE
// layer's imbalance, an expert-load heatmap per layer (experts x recorded
// runs; under expert parallelism also one per device) with its color
// scale, memory and provenance. Every text that comes from the plan or the
// command line is escaped, and the markup is well-formed XML, so that tests
// read it with an XML parser.
//
//===----------------------------------------------------------------------===//

#include "report_html.h"

#include "moert/stats.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <map>

namespace moe_run {
namespace report {

std::string escape(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      break;
    }
    if (c == '&' || c == '<' || c == '>' || c == '"' || c == '\'') {
      ++i;
      continue;
    }
    if (c < 0x80) {
      out.push_back(c < 0x20 && c != '\t' && c != '\n' ? '?' : char(c));
      ++i;
      continue;
    }
    // A UTF-8 sequence: its lead byte's length, continuation bytes, no
    // overlong forms, surrogates or values past U+10FFFF.
    size_t length = c >= 0xF0 && c <= 0xF4   ? 4
                    : c >= 0xE0              ? (c <= 0xEF ? 3 : 0)
                    : c >= 0xC2 && c <= 0xDF ? 2
                                             : 0;
    bool valid = length && i + length <= text.size();
    uint32_t code = length == 4 ? c & 0x07 : length == 3 ? c & 0x0F : c & 0x1F;
    for (size_t k = 1; valid && k < length; ++k) {
      unsigned char next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      code = (code << 6) | (next & 0x3F);
    }
    valid = valid &&
            !(length == 3 &&
              (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) &&
            !(length == 4 && (code < 0x10000 || code > 0x10FFFF));
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string ms(double seconds) {
  return absl::StrFormat("%.3f", seconds * 1e3);
}

std::string heat(double x) {
  x = std::clamp(x, 0.0, 1.0);
  auto mix = [&](int from, int to) {
    return static_cast<int>(from + (to - from) * x + 0.5);
  };
  return absl::StrFormat("#%02x%02x%02x", mix(0xf7, 0x08), mix(0xfb, 0x30),
                         mix(0xff, 0x6b));
}

void row(std::string &html, const std::string &key, const std::string &value) {
  absl::StrAppend(&html, "<tr><th>", escape(key), "</th><td>", escape(value),
                  "</td></tr>\n");
}

} // namespace report

namespace {

using report::escape;
using report::heat;
using report::ms;
using report::row;

/// The color scale of a heatmap whose darkest cell holds `most` tokens:
/// swatches from 0 to `most`, each with the tokens it stands for.
std::string heatScale(uint64_t most) {
  const int steps = 6, swatch = 28;
  std::string svg = absl::StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"scale\" "
      "data-max=\"",
      most, "\" width=\"", 80 + steps * swatch + 90,
      "\" height=\"34\">\n"
      "<text x=\"76\" y=\"14\" text-anchor=\"end\" class=\"small\">tokens"
      "</text>\n");
  for (int i = 0; i < steps; ++i) {
    double x = double(i) / (steps - 1);
    absl::StrAppend(&svg, "<rect class=\"swatch\" data-tokens=\"",
                    absl::StrFormat("%.1f", x * most), "\" x=\"",
                    80 + i * swatch, "\" y=\"4\" width=\"", swatch,
                    "\" height=\"12\" fill=\"", heat(x),
                    "\" stroke=\"#ccc\"/>\n");
  }
  absl::StrAppend(&svg,
                  "<text x=\"80\" y=\"30\" class=\"small\">0</text>"
                  "<text x=\"",
                  80 + steps * swatch,
                  "\" y=\"30\" text-anchor=\"end\" "
                  "class=\"small\">",
                  most, "</text>\n");
  return svg + "</svg>\n";
}

/// Colors of the parts of a layer (and of other bars), in order of use.
const char *kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                          "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                          "#9c755f", "#bab0ac"};

/// A horizontal bar chart: one row per (label, value), scaled to the
/// largest, values printed as `unit`.
std::string barChart(const std::string &id,
                     const std::vector<std::pair<std::string, double>> &bars,
                     const std::string &unit, const char *color) {
  double most = 0;
  for (const auto &bar : bars)
    most = std::max(most, bar.second);
  const int labelWidth = 300, barWidth = 420, row = 20;
  int height = row * static_cast<int>(bars.size()) + 10;
  std::string svg = absl::StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" id=\"",
      escape(id), "\" width=\"", labelWidth + barWidth + 110, "\" height=\"",
      height, "\">\n");
  for (size_t i = 0; i < bars.size(); ++i) {
    int y = static_cast<int>(i) * row + 5;
    double width = most > 0 ? barWidth * bars[i].second / most : 0;
    std::string value = absl::StrFormat("%.4g%s%s", bars[i].second,
                                        unit.empty() ? "" : " ", unit);
    absl::StrAppend(&svg, "<text x=\"", labelWidth - 6, "\" y=\"", y + 14,
                    "\" text-anchor=\"end\">", escape(bars[i].first),
                    "</text><rect class=\"bar\" x=\"", labelWidth, "\" y=\"", y,
                    "\" width=\"", absl::StrFormat("%.2f", width),
                    "\" height=\"", row - 4, "\" fill=\"", color, "\"><title>",
                    escape(bars[i].first), ": ", escape(value),
                    "</title></rect><text x=\"",
                    absl::StrFormat("%.2f", labelWidth + width + 4), "\" y=\"",
                    y + 14, "\">", escape(value), "</text>\n");
  }
  return svg + "</svg>\n";
}

/// A heatmap of `load[column][expert]`: experts as rows, the columns
/// (`columnName` 0, 1, ...) left to right.
std::string heatmap(const std::string &title, int layer,
                    const std::string &device,
                    const std::vector<uint64_t> &columnIds,
                    const std::vector<std::vector<uint64_t>> &load,
                    size_t experts, const std::string &columnName) {
  uint64_t most = 0;
  for (const std::vector<uint64_t> &column : load)
    for (uint64_t v : column)
      most = std::max(most, v);
  size_t columns = load.size();
  int cell = columns > 60 ? 6 : columns > 30 ? 10 : 16;
  int cellHeight = experts > 64 ? 6 : experts > 32 ? 10 : 16;
  const int left = 80, top = 4;
  int width = left + cell * static_cast<int>(columns) + 20;
  int height = top + cellHeight * static_cast<int>(experts) + 30;
  std::string svg = absl::StrCat(
      "<figure class=\"map\"><figcaption>", escape(title), "</figcaption>\n",
      heatScale(most),
      "<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "class=\"heatmap\" data-layer=\"",
      layer, "\" data-device=\"", escape(device), "\" data-experts=\"", experts,
      "\" data-columns=\"", columns, "\" width=\"", std::max(width, 200),
      "\" height=\"", height, "\">\n");
  for (size_t e = 0; e < experts; ++e)
    if (experts <= 32 || e % 8 == 0)
      absl::StrAppend(&svg, "<text x=\"", left - 6, "\" y=\"",
                      top + cellHeight * e + cellHeight - 3,
                      "\" text-anchor=\"end\" class=\"small\">expert ", e,
                      "</text>\n");
  for (size_t c = 0; c < columns; ++c)
    for (size_t e = 0; e < experts; ++e) {
      uint64_t v = e < load[c].size() ? load[c][e] : 0;
      absl::StrAppend(&svg, "<rect class=\"cell\" data-expert=\"", e,
                      "\" data-column=\"", c, "\" data-tokens=\"", v, "\" x=\"",
                      left + cell * c, "\" y=\"", top + cellHeight * e,
                      "\" width=\"", cell, "\" height=\"", cellHeight,
                      "\" fill=\"", heat(most ? double(v) / most : 0),
                      "\"><title>expert ", e, ", ", escape(columnName), " ",
                      columnIds[c], ": ", v, " tokens</title></rect>\n");
    }
  absl::StrAppend(
      &svg, "<text x=\"", left, "\" y=\"", top + cellHeight * experts + 18,
      "\" class=\"small\">", escape(columnName), "s ",
      columnIds.empty() ? 0 : columnIds.front(), " to ",
      columnIds.empty() ? 0 : columnIds.back(), " \xE2\x86\x92</text>\n");
  return svg + "</svg></figure>\n";
}

/// One run of `track` as step statistics of that run alone (calls 1 for the
/// steps it ran, their span's time, the run's routing), for moeLayerStats.
std::vector<moert::StepStats> runSteps(const Track &track,
                                       const moert::TraceRun &run) {
  std::vector<moert::StepStats> steps(track.steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i].name = track.steps[i].name;
    steps[i].op = track.steps[i].op;
  }
  std::vector<bool> onGpu(steps.size(), false);
  for (const moert::TraceSpan &span : run.spans)
    if (span.kind == moert::TraceKind::GpuStep && span.step >= 0 &&
        size_t(span.step) < steps.size())
      onGpu[span.step] = true;
  for (const moert::TraceSpan &span : run.spans) {
    if (span.step < 0 || size_t(span.step) >= steps.size())
      continue;
    bool gpu = span.kind == moert::TraceKind::GpuStep;
    if (gpu || (span.kind == moert::TraceKind::Step && !onGpu[span.step])) {
      steps[span.step].calls = 1;
      steps[span.step].totalSeconds = (span.endNs - span.beginNs) * 1e-9;
    }
  }
  for (const moert::TraceLoad &load : run.loads)
    if (load.step >= 0 && size_t(load.step) < steps.size()) {
      steps[load.step].expertLoad = load.expertLoad;
      steps[load.step].droppedAssignments = load.dropped;
    }
  return steps;
}

/// The part of a layer a trace step name "layer L PART (micro-batch M)"
/// names, or "" for another step.
std::string partOf(const std::string &name) {
  if (name.rfind("layer ", 0) != 0)
    return "";
  size_t space = name.find(' ', 6);
  if (space == std::string::npos)
    return "";
  std::string part = name.substr(space + 1);
  size_t micro = part.find(" (micro-batch");
  return micro == std::string::npos ? part : part.substr(0, micro);
}

} // namespace

std::string reportHtml(const moert::Plan &plan,
                       const std::vector<Track> &tracks,
                       const RunConfig &config) {
  // The tracks of forward passes of the plan's device schedules (a
  // generation's decode session included; its prefill has other steps).
  std::vector<const Track *> devices;
  for (const Track &track : tracks)
    if (!track.prefill && track.steps.size() == plan.numSteps(track.device))
      devices.push_back(&track);
  std::sort(devices.begin(), devices.end(), [](const Track *a, const Track *b) {
    return a->device < b->device;
  });
  bool multi = devices.size() > 1;

  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" "
      "lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>moe-run "
      "report: ",
      escape(config.plan),
      "</title>\n<style>\n"
      "body { font-family: sans-serif; margin: 24px; color: #222; }\n"
      "h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }\n"
      "h3 { font-size: 15px; }\n"
      "table { border-collapse: collapse; }\n"
      "th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; "
      "font-size: 13px; }\n"
      "th { background: #f2f2f2; }\n"
      "svg text { font-size: 12px; font-family: sans-serif; }\n"
      "svg text.small { font-size: 10px; }\n"
      ".note { color: #666; font-size: 13px; }\n"
      "figure.map { display: inline-block; vertical-align: top; "
      "margin: 0 28px 12px 0; }\n"
      "figcaption { font-size: 13px; margin-bottom: 4px; }\n"
      "svg.scale { display: block; }\n"
      "table + table { margin-top: 8px; }\n"
      "</style>\n</head>\n<body>\n<h1>moe-run report</h1>\n");

  // ---- The configuration. ----
  uint64_t seen = 0, kept = 0;
  for (const Track &track : tracks) {
    seen = std::max(seen, track.recorder.runsSeen());
    kept = std::max<uint64_t>(kept, track.recorder.runs().size());
  }
  absl::StrAppend(&html, "<h2 id=\"config\">Run</h2>\n<table>\n");
  row(html, "plan", config.plan);
  row(html, "backend", config.backend);
  row(html, "devices",
      absl::StrCat(config.devices, config.exchange.empty() ? "" : " (",
                   config.exchange, config.exchange.empty() ? "" : ")"));
  row(html, "threads",
      absl::StrCat(config.threads, multi ? " per device" : ""));
  if (config.generation)
    row(html, "generation",
        absl::StrCat(config.promptTokens, " prompt tokens, ", config.newTokens,
                     " new tokens"));
  else
    row(html, "runs",
        absl::StrCat(seen, config.bench || config.duration > 0 ? " timed" : "",
                     config.duration > 0
                         ? absl::StrCat(" for ", config.duration, " s")
                         : "",
                     " (", config.warmup, " warm-up); ", kept,
                     " recorded (the last ones)"));
  // The sizes the last runs had, by the names a user knows them by.
  auto sizesOf = [&](const Track *track) -> std::string {
    if (!track || track->recorder.runs().empty())
      return "";
    const moert::TraceRun &last = track->recorder.runs().back();
    std::vector<std::string> sizes;
    for (size_t i = 0; i < last.symbols.size() && i < plan.symbols().size();
         ++i)
      if (last.symbols[i] >= 0) // Symbols of the other schedule are unbound.
        sizes.push_back(
            absl::StrCat(symbolLabel(plan, i), " = ", last.symbols[i]));
    return absl::StrJoin(sizes, ", ");
  };
  report::DeviceZero zero = report::deviceZero(plan, tracks);
  if (!config.generation) {
    row(html, "sizes", sizesOf(zero.forward));
  } else {
    if (zero.prefill)
      row(html, "last prefill", sizesOf(zero.prefill));
    row(html, zero.prefill ? "last decode step" : "last step",
        sizesOf(zero.forward));
  }
  if (!tracks.empty() && !tracks[0].recorder.runs().empty()) {
    const moert::TraceRun &last = tracks[0].recorder.runs().back();
    for (const moert::TraceSpan &span : last.spans) {
      if (span.kind != moert::TraceKind::StageInputs)
        continue;
      std::vector<std::string> shapes = spanShapes(last, span);
      const std::vector<moert::TensorDesc> &inputs =
          tracks[0].prefill ? plan.prefillInputs(tracks[0].device)
                            : plan.inputs(tracks[0].device);
      for (size_t i = 0; i < inputs.size() && i < shapes.size(); ++i) {
        std::string source =
            config.generation ? "the prompt"
                              : absl::StrCat("generated, seed ", config.seed);
        for (const auto &[name, file] : config.inputFiles)
          if (name == inputs[i].name)
            source = file;
        row(html, absl::StrCat("input ", inputs[i].name),
            absl::StrCat(moert::dtypeName(inputs[i].dtype), " ", shapes[i],
                         multi ? " (device 0's share)" : "", ": ", source));
      }
      break;
    }
  }
  absl::StrAppend(&html, "</table>\n");

  // A generation's headline figures first, then its decode steps'.
  if (config.generation)
    absl::StrAppend(&html, report::generationSection(zero, config));
  absl::StrAppend(&html, report::latencySection(zero, config));

  // ---- Where the time goes. ----
  absl::StrAppend(&html, "<h2 id=\"time\">Where the time goes</h2>\n");
  // Per step kind: the mean time per run, over the devices.
  std::map<std::string, double> byKind;
  for (const Track *track : devices)
    for (const moert::StepStats &step : track->steps)
      if (step.calls)
        byKind[step.op] += step.totalSeconds / step.calls / devices.size();
  std::vector<std::pair<std::string, double>> kinds;
  for (const auto &[op, seconds] : byKind)
    kinds.push_back({op, seconds * 1e3});
  std::sort(kinds.begin(), kinds.end(),
            [](const auto &a, const auto &b) { return a.second > b.second; });
  absl::StrAppend(&html,
                  "<h3>Per step kind</h3>\n<p class=\"note\">Mean time per "
                  "run of all steps of each kind",
                  multi ? ", averaged over the devices" : "", ".</p>\n",
                  barChart("step-kinds", kinds, "ms", kPalette[0]));

  // Per MoE layer: stacked bars of its parts, one per layer and device.
  std::vector<std::string> parts;
  struct LayerBar {
    std::string label;
    std::map<std::string, double> parts;
    double total = 0;
  };
  std::vector<LayerBar> layerBars;
  std::vector<std::vector<moert::MoeLayerStats>> totals;
  for (const Track *track : devices) {
    std::vector<std::string> names = trackStepNames(plan, *track);
    std::vector<moert::MoeLayerStats> layers =
        moert::moeLayerStats(plan, track->steps, track->device);
    for (size_t l = 0; l < layers.size(); ++l) {
      LayerBar bar;
      bar.label = multi ? absl::StrCat("layer ", l, ", device ", track->device)
                        : absl::StrCat("layer ", l);
      for (int index : layers[l].steps) {
        const moert::StepStats &step = track->steps[index];
        std::string part = partOf(names[index]);
        if (part.empty() || !step.calls)
          continue;
        if (std::find(parts.begin(), parts.end(), part) == parts.end())
          parts.push_back(part);
        double milli = step.totalSeconds / step.calls * 1e3;
        bar.parts[part] += milli;
        bar.total += milli;
      }
      layerBars.push_back(std::move(bar));
    }
    totals.push_back(std::move(layers));
  }
  if (!layerBars.empty()) {
    double most = 0;
    for (const LayerBar &bar : layerBars)
      most = std::max(most, bar.total);
    const int labelWidth = 160, barWidth = 520, rowHeight = 22;
    int legend = 20 * static_cast<int>((parts.size() + 3) / 4);
    std::string svg =
        absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" "
                     "id=\"layer-parts\" width=\"",
                     labelWidth + barWidth + 110, "\" height=\"",
                     rowHeight * layerBars.size() + legend + 16, "\">\n");
    for (size_t i = 0; i < layerBars.size(); ++i) {
      const LayerBar &bar = layerBars[i];
      int y = static_cast<int>(i) * rowHeight + 5;
      absl::StrAppend(&svg, "<text x=\"", labelWidth - 6, "\" y=\"", y + 14,
                      "\" text-anchor=\"end\">", escape(bar.label),
                      "</text>\n");
      double x = labelWidth;
      for (size_t p = 0; p < parts.size(); ++p) {
        auto found = bar.parts.find(parts[p]);
        if (found == bar.parts.end())
          continue;
        double width = most > 0 ? barWidth * found->second / most : 0;
        absl::StrAppend(
            &svg, "<rect class=\"part\" x=\"", absl::StrFormat("%.2f", x),
            "\" y=\"", y, "\" width=\"", absl::StrFormat("%.2f", width),
            "\" height=\"", rowHeight - 6, "\" fill=\"",
            kPalette[p % std::size(kPalette)], "\"><title>", escape(bar.label),
            " ", escape(parts[p]), ": ", absl::StrFormat("%.4g", found->second),
            " ms</title></rect>\n");
        x += width;
      }
      absl::StrAppend(&svg, "<text x=\"", absl::StrFormat("%.2f", x + 4),
                      "\" y=\"", y + 14, "\">",
                      absl::StrFormat("%.4g ms", bar.total), "</text>\n");
    }
    int legendTop = rowHeight * static_cast<int>(layerBars.size()) + 12;
    for (size_t p = 0; p < parts.size(); ++p) {
      int x = 10 + 190 * static_cast<int>(p % 4);
      int y = legendTop + 20 * static_cast<int>(p / 4);
      absl::StrAppend(&svg, "<rect x=\"", x, "\" y=\"", y,
                      "\" width=\"12\" height=\"12\" fill=\"",
                      kPalette[p % std::size(kPalette)], "\"/><text x=\"",
                      x + 16, "\" y=\"", y + 11, "\">", escape(parts[p]),
                      "</text>\n");
    }
    absl::StrAppend(&html,
                    "<h3>Per MoE layer</h3>\n<p class=\"note\">Mean time "
                    "per run of each part of each MoE layer.</p>\n",
                    svg, "</svg>\n");
  }

  // Communication: the exchange steps' share of the step time per device.
  if (multi) {
    std::vector<std::pair<std::string, double>> shares;
    double comm = 0, all = 0;
    for (const Track *track : devices) {
      double mine = 0, sum = 0;
      for (const moert::StepStats &step : track->steps) {
        sum += step.totalSeconds;
        if (isExchangeOp(step.op))
          mine += step.totalSeconds;
      }
      comm += mine;
      all += sum;
      shares.push_back({absl::StrCat("device ", track->device),
                        sum > 0 ? 100 * mine / sum : 0});
    }
    absl::StrAppend(
        &html, "<h3 id=\"comm\">Communication</h3>\n<p>Exchanges take ",
        absl::StrFormat("%.1f", all > 0 ? 100 * comm / all : 0),
        "% of the step time over all devices (waiting for slower devices "
        "included).</p>\n",
        barChart("comm-share", shares, "%", kPalette[1]));
  }

  // ---- The MoE layers: imbalance and load. ----
  std::vector<moert::MoeLayerStats> merged;
  if (multi) {
    absl::StatusOr<std::vector<moert::MoeLayerStats>> all =
        moert::mergeDeviceLayerStats(totals);
    if (all.ok())
      merged = std::move(*all);
  } else if (!totals.empty()) {
    merged = totals[0];
  }
  absl::StrAppend(&html, "<h2 id=\"layers\">MoE layers</h2>\n");
  if (merged.empty())
    absl::StrAppend(&html, "<p>The plan has no MoE layer.</p>\n");
  if (!merged.empty()) {
    // A tiered plan's layers: their expert cache's lookups that hit.
    bool tiered = std::any_of(
        merged.begin(), merged.end(),
        [](const moert::MoeLayerStats &layer) { return layer.tiered; });
    absl::StrAppend(&html,
                    "<table>\n<tr><th>layer</th><th>name</th>"
                    "<th>experts</th><th>assignments</th>"
                    "<th>imbalance (max / mean)</th>",
                    multi ? "<th>device imbalance</th><th>comm ms</th>" : "",
                    "<th>experts ms</th><th>layer ms</th>",
                    tiered ? "<th>cache hit rate</th><th>wait ms</th>" : "",
                    "</tr>\n");
    std::vector<std::pair<std::string, double>> imbalance;
    for (size_t l = 0; l < merged.size(); ++l) {
      const moert::MoeLayerStats &layer = merged[l];
      double runs = layer.runs ? double(layer.runs) : 1.0;
      absl::StrAppend(
          &html, "<tr><td>", l, "</td><td>", escape(layer.name), "</td><td>",
          layer.tokensPerExpert.size(), "</td><td>", layer.keptAssignments(),
          "</td><td>", absl::StrFormat("%.3f", layer.imbalance()), "</td>",
          multi ? absl::StrCat(
                      "<td>", absl::StrFormat("%.3f", layer.deviceImbalance()),
                      "</td><td>", ms(layer.commSeconds / runs), "</td>")
                : "",
          "<td>", ms(layer.expertsSeconds / runs), "</td><td>",
          ms(layer.layerSeconds / runs), "</td>");
      if (tiered) {
        uint64_t lookups = layer.cache.hits + layer.cache.misses;
        absl::StrAppend(
            &html, "<td data-hit-rate=\"", l, "\">",
            layer.tiered && lookups
                ? absl::StrFormat("%.3f", double(layer.cache.hits) / lookups)
                : "-",
            "</td><td>", ms(layer.cache.waitSeconds / runs), "</td>");
      }
      absl::StrAppend(&html, "</tr>\n");
      imbalance.push_back({absl::StrCat("layer ", l), layer.imbalance()});
    }
    absl::StrAppend(&html,
                    "</table>\n<h3>Imbalance</h3>\n<p "
                    "class=\"note\">The most loaded expert's tokens "
                    "over the mean (1: even), over the timed runs.</p>\n",
                    barChart("imbalance", imbalance, "", kPalette[2]));
  }

  // Heatmaps: per recorded run, the model's load (merged over the devices)
  // and, under expert parallelism, each device's.
  std::vector<uint64_t> runIds;
  std::vector<std::vector<std::vector<moert::MoeLayerStats>>> perRun;
  if (!devices.empty())
    for (const moert::TraceRun &run : devices.front()->recorder.runs()) {
      std::vector<std::vector<moert::MoeLayerStats>> perDevice;
      for (const Track *track : devices) {
        for (const moert::TraceRun &mine : track->recorder.runs())
          if (mine.index == run.index)
            perDevice.push_back(moert::moeLayerStats(
                plan, runSteps(*track, mine), track->device));
      }
      if (perDevice.size() != devices.size())
        continue;
      runIds.push_back(run.index);
      perRun.push_back(std::move(perDevice));
    }
  std::string columnName = config.generation ? "step" : "run";
  for (size_t l = 0; l < merged.size() && !perRun.empty(); ++l) {
    size_t experts = merged[l].tokensPerExpert.size();
    if (!experts)
      continue;
    std::vector<std::vector<uint64_t>> load;
    for (const auto &perDevice : perRun) {
      std::vector<moert::MoeLayerStats> model = perDevice[0];
      if (multi) {
        absl::StatusOr<std::vector<moert::MoeLayerStats>> all =
            moert::mergeDeviceLayerStats(perDevice);
        model = all.ok() ? *all : std::vector<moert::MoeLayerStats>();
      }
      load.push_back(l < model.size() ? model[l].tokensPerExpert
                                      : std::vector<uint64_t>());
    }
    absl::StrAppend(
        &html, "<h3>Layer ", l, ": ", escape(merged[l].name), "</h3>\n",
        heatmap(absl::StrCat("tokens per expert and ", columnName,
                             multi ? ", all devices" : ""),
                static_cast<int>(l), "all", runIds, load, experts, columnName));
    if (!multi)
      continue;
    for (size_t d = 0; d < devices.size(); ++d) {
      std::vector<std::vector<uint64_t>> mine;
      for (const auto &perDevice : perRun)
        mine.push_back(l < perDevice[d].size() ? perDevice[d][l].tokensPerExpert
                                               : std::vector<uint64_t>());
      absl::StrAppend(&html, heatmap(absl::StrCat("device ", devices[d]->device,
                                                  ": rows its slots computed"),
                                     static_cast<int>(l),
                                     absl::StrCat(devices[d]->device), runIds,
                                     mine, experts, columnName));
    }
  }
  absl::StrAppend(&html, report::memorySection(plan, config),
                  report::provenanceSection(plan), "</body>\n</html>\n");
  return html;
}

} // namespace moe_run
