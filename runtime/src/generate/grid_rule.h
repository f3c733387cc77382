//===- grid_rule.h - Vision inputs from the images' patch grids -*- C++ -*-===//
//
// The grid rule (docs/multimodal.md, "Vision inputs from the grid";
// grid_rule.cpp says it in full): the Grid* feeds of a multimodal plan's
// vision stages from each image's (t, h, w) patch grid.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_GENERATE_GRID_RULE_H
#define MOERT_SRC_GENERATE_GRID_RULE_H

#include "generate/mrope_positions.h"
#include "moert/vision.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"

#include <cstdint>
#include <vector>

namespace moert::detail {

/// The rule's values for all images of a prompt, p = `patches`.
struct GridTensors {
  int64_t patches = 0;
  /// Taps per patch (4 bilinear, 16 bicubic; 0 without a table).
  int64_t taps = 0;
  std::vector<int64_t> segments;  ///< [frames + 1]
  std::vector<int64_t> positions; ///< [p, 2]
  std::vector<int64_t> indices;   ///< [p, taps]
  std::vector<float> weights;     ///< [p, taps]
};

/// The rule over `grids` with spatial merge `merge`.
absl::StatusOr<GridTensors>
computeGridTensors(const GridRuleDesc &rule, int64_t merge,
                   const std::vector<ImageGrid> &grids);

/// The tensor `feed` (a Grid* feed) takes.
NamedTensor gridFeedTensor(const GridTensors &grid, const FeedDesc &feed);

/// Whether `kind` is one of the grid rule's.
bool isGridFeed(FeedKind kind);

/// The images' grids from the plan's grid input, i64 [images, 3] (any
/// count: the prefill runs more than the encoder takes one at a time).
absl::StatusOr<std::vector<ImageGrid>> readImageGrids(const MultimodalDesc &mm,
                                                      const TensorData &grid);

} // namespace moert::detail

#endif // MOERT_SRC_GENERATE_GRID_RULE_H
