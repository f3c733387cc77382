//===- report_html.h - The parts of moe-run's --report-html page -*- C++ -*-=//
//
// report_html.cpp writes the page: the run, where the time goes, the MoE
// layers and their expert-load heatmaps. report_sections.cpp writes the
// sections about the run as a whole: latency (percentiles and the per-run
// series), generation (time to first token, tokens per second), memory and
// provenance. Both write well-formed XHTML with inline SVG, nothing fetched.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_RUN_REPORT_HTML_H
#define MOE_RUN_REPORT_HTML_H

#include "recording.h"

#include <string>
#include <string_view>
#include <vector>

namespace moe_run::report {

/// `text` for HTML and SVG text and attribute values: the five markup
/// characters as entities, control characters (which XML forbids) as '?',
/// and bytes that are not UTF-8 as U+FFFD.
std::string escape(std::string_view text);

/// Seconds as milliseconds with three decimals.
std::string ms(double seconds);

/// Appends a table row of a key (a header cell) and a value, both escaped.
void row(std::string &html, const std::string &key, const std::string &value);

/// The heatmaps' color of `x` in [0, 1]: from white (0) to dark blue (1).
std::string heat(double x);

/// The tracks of device 0 that the sections read: its forward-pass track
/// (a generation's decode track), and a generation's prefill track (null
/// when the decode schedule runs the prompt too).
struct DeviceZero {
  const Track *forward = nullptr;
  const Track *prefill = nullptr;
};
DeviceZero deviceZero(const moert::Plan &plan,
                      const std::vector<Track> &tracks);

/// "Latency": the recorded runs' mean, percentiles and extremes, and a line
/// of every recorded run's time (a forward run; for a generation the
/// decode steps').
std::string latencySection(const DeviceZero &zero, const RunConfig &config);

/// "Generation": time to first token, prefill and decode tokens per second
/// as the generator measured them, and the prefill runs' times.
std::string generationSection(const DeviceZero &zero, const RunConfig &config);

/// "Memory": per device the weights, the activation arena(s), a
/// generation's KV caches and a tiered plan's expert cache; the process's
/// peak resident set.
std::string memorySection(const moert::Plan &plan, const RunConfig &config);

/// "Provenance": what compiled the plan, from which model(s), with which
/// options, and what ran it.
std::string provenanceSection(const moert::Plan &plan);

} // namespace moe_run::report

#endif // MOE_RUN_REPORT_HTML_H
