//===- report_sections.cpp - moe-run --report-html: the run as a whole ----===//
//
// The report's sections about the run as a whole (report_html.h): latency
// percentiles with a line of the recorded runs' times, a generation's time
// to first token and tokens per second, memory, and provenance. Times of
// single runs come from the recorded trace (the last
// moert::TraceRecorder::kDefaultMaxRuns runs); a generation's headline
// figures are the generator's own, which moe-run prints and --stats writes.
// Every figure is also a data-* attribute, so that tests compare the page
// with --stats and `moec inspect --json`.
//
//===----------------------------------------------------------------------===//

#include "report_html.h"

#include "bench_stats.h"
#include "format/version.h"
#include "observe/inspect.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <cctype>

namespace moe_run {

namespace {

/// Whether `name` is a symbol the compiler made up ("s53",
/// "prefill.s70") rather than the model's ("batch").
bool compilerSymbol(std::string_view name) {
  if (name.rfind("prefill.", 0) == 0)
    name.remove_prefix(8);
  return name.size() > 1 && name[0] == 's' &&
         std::all_of(name.begin() + 1, name.end(),
                     [](char c) { return std::isdigit((unsigned char)c); });
}

/// The first input of `inputs` with a dimension of symbol `name`: "INPUT
/// axis K", or "" when none has.
std::string inputAxis(const std::vector<moert::TensorDesc> &inputs,
                      const std::string &name) {
  for (const moert::TensorDesc &input : inputs)
    for (size_t k = 0; k < input.dims.size(); ++k)
      if (input.dims[k].kind == moert::DimDesc::Kind::Symbolic &&
          input.dims[k].symbol == name)
        return absl::StrCat(input.name, " axis ", k);
  return "";
}

/// Whether input `input` of `inputs` has symbol `name` at `axis` (any axis
/// when negative).
bool sizes(const std::vector<moert::TensorDesc> &inputs,
           const std::string &input, const std::string &name, int axis) {
  for (const moert::TensorDesc &desc : inputs) {
    if (desc.name != input)
      continue;
    for (size_t k = 0; k < desc.dims.size(); ++k)
      if ((axis < 0 || size_t(axis) == k) &&
          desc.dims[k].kind == moert::DimDesc::Kind::Symbolic &&
          desc.dims[k].symbol == name)
        return true;
  }
  return false;
}

} // namespace

std::string symbolLabel(const moert::Plan &plan, size_t index) {
  const std::string &name = plan.symbols()[index].name;
  if (const moert::GenerationDesc *gen = plan.generation()) {
    const std::vector<moert::TensorDesc> &decode = plan.inputs(0);
    if (gen->hasPrefill &&
        sizes(plan.prefillInputs(0), gen->inputIds, name, -1))
      return "prompt tokens";
    for (const moert::CachePairDesc &pair : gen->cache)
      if (sizes(decode, pair.input, name, pair.axis))
        return "past length";
    // Without a prefill schedule the decode schedule runs the prompt too.
    if (!gen->hasPrefill && sizes(decode, gen->inputIds, name, -1))
      return "tokens per step";
  }
  if (!compilerSymbol(name))
    return name;
  std::string axis = inputAxis(plan.inputs(0), name);
  if (axis.empty() && plan.generation() && plan.generation()->hasPrefill)
    axis = inputAxis(plan.prefillInputs(0), name);
  return axis.empty() ? name : axis;
}

namespace report {

namespace {

/// "362,976 bytes (354.5 KiB)".
std::string bytes(uint64_t count) {
  std::string digits = absl::StrCat(count), grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      grouped.push_back(',');
    grouped.push_back(digits[i]);
  }
  const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(count);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return unit < 0 ? absl::StrCat(grouped, " bytes")
                  : absl::StrFormat("%s bytes (%.1f %s)", grouped, value,
                                    units[unit]);
}

/// The run times (ms) of `track`'s recorded runs, oldest first, and their
/// indices.
void runTimes(const Track &track, std::vector<double> &ms,
              std::vector<uint64_t> &indices) {
  for (const moert::TraceRun &run : track.recorder.runs())
    if (run.endNs > run.beginNs) {
      ms.push_back((run.endNs - run.beginNs) * 1e-6);
      indices.push_back(run.index);
    }
}

/// A table of `s` (milliseconds): count, mean, p50, p90, p99, min, max,
/// each cell with its value in data-ms.
std::string summaryTable(const std::string &id, const Summary &s) {
  std::string html = absl::StrCat(
      "<table class=\"latency\" id=\"", escape(id), "\" data-count=\"", s.count,
      "\">\n<tr><th>recorded</th><th>mean</th><th>p50</th>"
      "<th>p90</th><th>p99</th><th>min</th><th>max</th></tr>\n"
      "<tr><td>",
      s.count, "</td>");
  for (auto [key, value] : {std::pair<const char *, double>{"mean", s.mean},
                            {"p50", s.p50},
                            {"p90", s.p90},
                            {"p99", s.p99},
                            {"min", s.min},
                            {"max", s.max}})
    absl::StrAppend(&html, "<td data-stat=\"", key, "\" data-ms=\"",
                    absl::StrFormat("%.6f", value), "\">",
                    absl::StrFormat("%.3f ms", value), "</td>");
  return html + "</tr>\n</table>\n";
}

/// A line chart of `values` (ms), one point per recorded run labelled
/// `columnName` and its index, with the p50 as a dashed line.
std::string seriesChart(const std::string &id, const std::vector<double> &ms,
                        const std::vector<uint64_t> &indices,
                        const std::string &columnName, double p50) {
  const int left = 70, top = 10, width = 640, height = 150;
  double most = 0;
  for (double v : ms)
    most = std::max(most, v);
  double scale = most > 0 ? most * 1.1 : 1;
  auto xAt = [&](size_t i) {
    return ms.size() > 1 ? left + width * double(i) / (ms.size() - 1)
                         : left + width / 2.0;
  };
  auto yAt = [&](double v) { return top + height * (1 - v / scale); };
  std::string svg = absl::StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"series\" id=\"",
      escape(id), "\" data-points=\"", ms.size(), "\" width=\"",
      left + width + 30, "\" height=\"", top + height + 34, "\">\n");
  // Axes: 0 and the top of the scale, the first and last index.
  absl::StrAppend(&svg, "<line x1=\"", left, "\" y1=\"", top, "\" x2=\"", left,
                  "\" y2=\"", top + height, "\" stroke=\"#888\"/><line x1=\"",
                  left, "\" y1=\"", top + height, "\" x2=\"", left + width,
                  "\" y2=\"", top + height, "\" stroke=\"#888\"/>\n<text x=\"",
                  left - 6, "\" y=\"", top + 10,
                  "\" text-anchor=\"end\" class=\"small\">",
                  absl::StrFormat("%.3f ms", scale), "</text><text x=\"",
                  left - 6, "\" y=\"", top + height,
                  "\" text-anchor=\"end\" class=\"small\">0</text>\n");
  if (!indices.empty())
    absl::StrAppend(&svg, "<text x=\"", left, "\" y=\"", top + height + 16,
                    "\" class=\"small\">", escape(columnName), " ",
                    indices.front(), "</text><text x=\"", left + width,
                    "\" y=\"", top + height + 16,
                    "\" text-anchor=\"end\" class=\"small\">",
                    escape(columnName), " ", indices.back(), "</text>\n");
  absl::StrAppend(&svg, "<line class=\"p50\" x1=\"", left, "\" y1=\"",
                  absl::StrFormat("%.2f", yAt(p50)), "\" x2=\"", left + width,
                  "\" y2=\"", absl::StrFormat("%.2f", yAt(p50)),
                  "\" stroke=\"#e15759\" stroke-dasharray=\"4 3\"><title>p50 ",
                  absl::StrFormat("%.3f ms", p50), "</title></line>\n");
  std::vector<std::string> points;
  for (size_t i = 0; i < ms.size(); ++i)
    points.push_back(absl::StrFormat("%.2f,%.2f", xAt(i), yAt(ms[i])));
  absl::StrAppend(&svg,
                  "<polyline fill=\"none\" stroke=\"#4e79a7\" "
                  "stroke-width=\"1.5\" points=\"",
                  absl::StrJoin(points, " "), "\"/>\n");
  for (size_t i = 0; i < ms.size(); ++i)
    absl::StrAppend(&svg, "<circle class=\"point\" data-index=\"", indices[i],
                    "\" data-ms=\"", absl::StrFormat("%.6f", ms[i]), "\" cx=\"",
                    absl::StrFormat("%.2f", xAt(i)), "\" cy=\"",
                    absl::StrFormat("%.2f", yAt(ms[i])),
                    "\" r=\"2.5\" fill=\"#4e79a7\"><title>", escape(columnName),
                    " ", indices[i], ": ", absl::StrFormat("%.3f ms", ms[i]),
                    "</title></circle>\n");
  return svg + "</svg>\n";
}

} // namespace

DeviceZero deviceZero(const moert::Plan &plan,
                      const std::vector<Track> &tracks) {
  DeviceZero zero;
  for (const Track &track : tracks) {
    if (track.device != 0)
      continue;
    if (track.prefill && !zero.prefill)
      zero.prefill = &track;
    else if (!track.prefill && !zero.forward &&
             track.steps.size() == plan.numSteps(0))
      zero.forward = &track;
  }
  return zero;
}

std::string latencySection(const DeviceZero &zero, const RunConfig &config) {
  std::string html =
      absl::StrCat("<h2 id=\"latency\">",
                   config.generation ? "Decode latency" : "Latency", "</h2>\n");
  std::vector<double> times;
  std::vector<uint64_t> indices;
  if (zero.forward)
    runTimes(*zero.forward, times, indices);
  if (times.empty())
    return html + "<p>No run was recorded.</p>\n";
  Summary s = summarize(times);
  // A generation's forward track is its decode session: one run per token
  // after the first (or, without a prefill schedule, the prompt's run too).
  std::string what = !config.generation ? "run"
                     : zero.prefill     ? "decode step"
                                        : "generation step";
  uint64_t seen = zero.forward->recorder.runsSeen();
  absl::StrAppend(
      &html, "<p class=\"note\">The time of each recorded ", what,
      " of device 0 as the session measured it",
      seen > times.size()
          ? absl::StrCat(" (the last ", times.size(), " of ", seen, ")")
          : "",
      config.generation
          ? "; a decode step's time is the inter-token latency less sampling"
          : "",
      ".</p>\n",
      summaryTable(config.generation ? "decode-latency" : "run-latency", s));
  if (!config.generation && s.mean > 0)
    absl::StrAppend(&html, "<p>", absl::StrFormat("%.1f", 1e3 / s.mean),
                    " runs/s at the mean.</p>\n");
  absl::StrAppend(
      &html, "<h3>Per ", what, "</h3>\n",
      seriesChart(config.generation ? "decode-series" : "run-series", times,
                  indices, what, s.p50));
  return html;
}

std::string generationSection(const DeviceZero &zero, const RunConfig &config) {
  std::string html = "<h2 id=\"generation\">Generation</h2>\n";
  const std::vector<moert::GenerationTimes> &all = config.generations;
  if (all.empty())
    return html + "<p>No generation finished.</p>\n";
  int64_t prompt = 0, decodeSteps = 0;
  double prefillSeconds = 0, decodeSeconds = 0;
  std::vector<double> firstToken;
  for (const moert::GenerationTimes &t : all) {
    prompt += t.promptTokens;
    decodeSteps += t.decodeSteps;
    prefillSeconds += t.prefillSeconds;
    decodeSeconds += t.decodeSeconds;
    firstToken.push_back(t.firstTokenSeconds * 1e3);
  }
  Summary ttft = summarize(firstToken);
  double prefillRate = prefillSeconds > 0 ? prompt / prefillSeconds : 0;
  double decodeRate = decodeSeconds > 0 ? decodeSteps / decodeSeconds : 0;
  uint64_t prompts = zero.prefill ? zero.prefill->recorder.runsSeen() : 0;
  std::string which =
      all.size() > 1 ? absl::StrCat("over ", all.size(), " generations")
      : config.lastGenerationOnly && prompts > 1
          ? absl::StrCat("the last of ", prompts, " generations")
          : "one generation";
  absl::StrAppend(
      &html, "<p class=\"note\">As the generator measured them (",
      escape(which),
      "): the time to first token runs the prompt and draws a token; "
      "decode tokens/s counts the tokens after the first, sampling "
      "included.</p>\n<table id=\"generation-times\" data-generations=\"",
      all.size(), "\">\n");
  absl::StrAppend(
      &html, "<tr><th>time to first token</th><td data-ttft-ms=\"",
      absl::StrFormat("%.6f", ttft.mean), "\">",
      absl::StrFormat("%.3f ms", ttft.mean),
      all.size() > 1 ? absl::StrFormat(" mean, p50 %.3f ms, p99 %.3f ms",
                                       ttft.p50, ttft.p99)
                     : "",
      "</td></tr>\n<tr><th>prefill</th><td data-prefill-tokens-per-s=\"",
      absl::StrFormat("%.3f", prefillRate), "\">",
      absl::StrFormat("%.1f tokens/s", prefillRate), " (", prompt,
      " prompt tokens in ", absl::StrFormat("%.3f ms", prefillSeconds * 1e3),
      ")</td></tr>\n<tr><th>decode</th><td data-decode-tokens-per-s=\"",
      absl::StrFormat("%.3f", decodeRate), "\">",
      absl::StrFormat("%.1f tokens/s", decodeRate), " (", decodeSteps,
      " tokens in ", absl::StrFormat("%.3f ms", decodeSeconds * 1e3),
      ")</td></tr>\n</table>\n");
  if (zero.prefill) {
    std::vector<double> times;
    std::vector<uint64_t> indices;
    runTimes(*zero.prefill, times, indices);
    if (!times.empty())
      absl::StrAppend(&html,
                      "<h3>Prefill runs</h3>\n<p class=\"note\">The prefill "
                      "schedule's recorded runs of device 0, one per "
                      "generation (the session's time, without drawing the "
                      "first token).</p>\n",
                      summaryTable("prefill-latency", summarize(times)));
  }
  return html;
}

std::string memorySection(const moert::Plan &plan, const RunConfig &config) {
  std::string html = "<h2 id=\"memory\">Memory</h2>\n";
  const moert::GenerationDesc *gen = plan.generation();
  const RunMemory &memory = config.memory;
  int devices = plan.numDevices();
  absl::StrAppend(&html, "<table id=\"memory-table\">\n<tr><th></th>");
  for (int d = 0; d < devices; ++d)
    absl::StrAppend(&html, "<th>device ", d, "</th>");
  absl::StrAppend(&html, "</tr>\n");
  auto perDevice = [&](const std::string &key, const std::string &label,
                       auto value) {
    absl::StrAppend(&html, "<tr><th>", escape(label), "</th>");
    for (int d = 0; d < devices; ++d) {
      uint64_t v = value(d);
      absl::StrAppend(&html, "<td data-memory=\"", key, "\" data-device=\"", d,
                      "\" data-bytes=\"", v, "\">", escape(bytes(v)), "</td>");
    }
    absl::StrAppend(&html, "</tr>\n");
  };
  perDevice("weights", "weights (mapped from the plan file)",
            [&](int d) { return moert::planWeightBytes(plan, d); });
  perDevice("arena",
            gen && gen->hasPrefill ? "activation arena (decode)"
                                   : "activation arena",
            [&](int d) { return plan.arenaSize(d); });
  if (gen && gen->hasPrefill)
    perDevice("prefill-arena", "activation arena (prefill)",
              [&](int d) { return plan.prefillArenaSize(d); });
  absl::StrAppend(&html, "</table>\n<table id=\"memory-run\">\n");
  auto single = [&](const std::string &key, const std::string &label,
                    uint64_t value, const std::string &note) {
    absl::StrAppend(&html, "<tr><th>", escape(label), "</th><td data-memory=\"",
                    key, "\" data-bytes=\"", value, "\">", escape(bytes(value)),
                    note.empty() ? "" : " ", escape(note), "</td></tr>\n");
  };
  if (gen) {
    single("kv-cache", "KV caches held", memory.kvCacheBytes,
           devices > 1 ? "per device" : "");
    single("kv-cache-max-seq", "KV caches at max_seq, one copy",
           gen->cacheBytes, absl::StrCat("(", gen->maxSeq, " positions)"));
  }
  const moert::ExpertCacheStats &cache = memory.expertCache;
  if (cache.tiered) {
    single("expert-budget", "expert memory budget", cache.budget, "");
    single("expert-resident", "resident weights", cache.residentBytes, "");
    single("expert-cache", "expert cache capacity", cache.capacityBytes,
           absl::StrCat("(", cache.hotExperts, " hot experts, ",
                        bytes(cache.hotBytes), ")"));
  }
  single("peak-rss", "peak resident set of moe-run", memory.peakRssBytes,
         devices > 1 && config.exchange == "mpi"
             ? "(rank 0's process)"
             : "(the whole process: every device it ran)");
  return html + "</table>\n";
}

std::string provenanceSection(const moert::Plan &plan) {
  std::string html = "<h2 id=\"provenance\">Provenance</h2>\n";
  const moert::ProvenanceDesc &p = plan.provenance();
  absl::StrAppend(&html, "<table id=\"provenance-table\">\n");
  row(html, "plan format",
      absl::StrCat(plan.versionMajor(), ".", plan.versionMinor(),
                   ", written by ", plan.producer()));
  if (p.compilerVersion.empty() && p.modelFile.empty()) {
    row(html, "compiled by",
        "no provenance recorded (written by an older moec or by the plan "
        "writer directly)");
  } else {
    // compilerVersion names the tool: "moec 0.2.0".
    row(html, "compiled by",
        absl::StrCat(p.compilerVersion, " (git ", p.gitCommit, ")"));
    absl::StrAppend(&html, "<tr><th>model</th><td data-sha256=\"",
                    escape(p.modelSha256), "\">", escape(p.modelFile),
                    "<br/>sha256 ", escape(p.modelSha256), "</td></tr>\n");
    if (!p.prefillFile.empty())
      absl::StrAppend(&html, "<tr><th>prefill model</th><td data-sha256=\"",
                      escape(p.prefillSha256), "\">", escape(p.prefillFile),
                      "<br/>sha256 ", escape(p.prefillSha256), "</td></tr>\n");
  }
  row(html, "run by",
      absl::StrCat("moe-run ", moert::getVersion(), " (git ",
                   moert::getGitCommit(), ")"));
  absl::StrAppend(&html, "</table>\n");
  if (p.flags.empty())
    return html;
  absl::StrAppend(&html,
                  "<h3>Compile options</h3>\n<table id=\"compile-options\">\n"
                  "<tr><th>option</th><th>value</th></tr>\n");
  for (const auto &[name, value] : p.flags)
    absl::StrAppend(&html, "<tr><td data-option=\"", escape(name), "\">--",
                    escape(name), "</td><td data-value=\"", escape(value),
                    "\">", value.empty() ? "''" : escape(value),
                    "</td></tr>\n");
  return html + "</table>\n";
}

} // namespace report
} // namespace moe_run
