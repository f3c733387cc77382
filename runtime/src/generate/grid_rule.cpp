//===- grid_rule.cpp - Vision inputs from the images' patch grids ---------===//
//
// The grid rule of docs/multimodal.md ("Vision inputs from the grid"): what
// transformers' exporters compute in Python from `grid_thw` for the Qwen2-VL
// family's encoders (its shared vision_utils helpers), keyed by plan fields
// (the spatial merge, the position table's side, its interpolation) and
// each image's grid, not by any one model's code:
//
// * segment bounds: every frame of every image is one attention segment of
//   h * w patches; the bounds are their running sums from 0;
// * patch positions: an image's patches come in merge-block order (block
//   row, block column, row in block, column in block), each frame alike;
//   patch k of a frame takes its (row, column) in the h x w grid;
// * interpolation taps: a patch at (row, column) of an h x w grid samples the
//   learned side x side position table as F.interpolate would resize the
//   table to h x w (bilinear 2 x 2 or bicubic 4 x 4 taps, A = -0.75,
//   border clamping, align_corners as the plan says), in f32.
//
//===----------------------------------------------------------------------===//

#include "generate/grid_rule.h"
#include "moert/vision.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace moert {
namespace detail {
namespace {

/// More patches than this in one prompt are refused (i32 segment bounds).
constexpr int64_t kMaxPatches = int64_t{1} << 31;

/// One axis's taps and weights for `index` of an axis of `size` patches.
void axisTaps(int64_t index, int64_t size, const GridRuleDesc &rule,
              int64_t taps[4], float weights[4]) {
  int64_t side = rule.tableSide;
  float src;
  if (rule.alignCorners)
    src = static_cast<float>(index) * static_cast<float>(side - 1) /
          static_cast<float>(std::max<int64_t>(size - 1, 1));
  else
    src = (static_cast<float>(index) + 0.5f) * static_cast<float>(side) /
              static_cast<float>(size) -
          0.5f;
  float floor = std::floor(src);
  int n = rule.bicubic ? 4 : 2;
  int first = rule.bicubic ? -1 : 0;
  for (int k = 0; k < n; ++k) {
    int64_t offset = first + k;
    taps[k] =
        std::clamp<int64_t>(static_cast<int64_t>(floor) + offset, 0, side - 1);
    float d = std::fabs(src - floor - static_cast<float>(offset));
    if (!rule.bicubic) {
      weights[k] = std::max(1.0f - d, 0.0f);
      continue;
    }
    const float a = -0.75f;
    float near = ((a + 2) * d - (a + 3)) * d * d + 1;
    float far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
    weights[k] = d <= 1 ? near : far;
  }
}

} // namespace

absl::StatusOr<GridTensors>
computeGridTensors(const GridRuleDesc &rule, int64_t merge,
                   const std::vector<ImageGrid> &grids) {
  GridTensors out;
  out.segments.push_back(0);
  int64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const ImageGrid &g = grids[i];
    if (g.t < 1 || g.h < 1 || g.w < 1 || g.h % merge || g.w % merge)
      return absl::InvalidArgumentError(absl::StrCat(
          "image ", i, " has grid ", g.t, " x ", g.h, " x ", g.w,
          "; the grid rule needs t, h, w >= 1 and h, w multiples of the "
          "spatial merge ",
          merge));
    if (g.h > kMaxPatches / g.w || g.h * g.w > (kMaxPatches - total) / g.t)
      return absl::InvalidArgumentError(
          absl::StrCat("image ", i, " has grid ", g.t, " x ", g.h, " x ", g.w,
                       ": more patches than ", kMaxPatches));
    total += g.t * g.h * g.w;
    for (int64_t f = 0; f < g.t; ++f)
      out.segments.push_back(out.segments.back() + g.h * g.w);
  }
  out.patches = total;
  int taps = rule.tableSide ? (rule.bicubic ? 16 : 4) : 0;
  out.taps = taps;
  out.positions.reserve(2 * total);
  out.indices.reserve(taps * total);
  out.weights.reserve(taps * total);
  for (const ImageGrid &g : grids)
    for (int64_t f = 0; f < g.t; ++f)
      for (int64_t br = 0; br < g.h / merge; ++br)
        for (int64_t bc = 0; bc < g.w / merge; ++bc)
          for (int64_t ir = 0; ir < merge; ++ir)
            for (int64_t ic = 0; ic < merge; ++ic) {
              int64_t row = br * merge + ir, col = bc * merge + ic;
              out.positions.push_back(row);
              out.positions.push_back(col);
              if (!taps)
                continue;
              int64_t rowTaps[4], colTaps[4];
              float rowWeights[4], colWeights[4];
              axisTaps(row, g.h, rule, rowTaps, rowWeights);
              axisTaps(col, g.w, rule, colTaps, colWeights);
              int n = rule.bicubic ? 4 : 2;
              for (int a = 0; a < n; ++a)
                for (int b = 0; b < n; ++b) {
                  out.indices.push_back(rowTaps[a] * rule.tableSide +
                                        colTaps[b]);
                  out.weights.push_back(rowWeights[a] * colWeights[b]);
                }
            }
  return out;
}

NamedTensor gridFeedTensor(const GridTensors &grid, const FeedDesc &feed) {
  NamedTensor t;
  t.name = feed.input;
  auto fill = [&](DType dtype, std::vector<int64_t> shape, const void *data,
                  size_t bytes) {
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.bytes.assign(static_cast<const uint8_t *>(data),
                   static_cast<const uint8_t *>(data) + bytes);
  };
  int64_t p = grid.patches;
  switch (feed.kind) {
  case FeedKind::GridSegments:
    if (feed.dtype == DType::I32) {
      std::vector<int32_t> narrow(grid.segments.begin(), grid.segments.end());
      fill(DType::I32, {static_cast<int64_t>(narrow.size())}, narrow.data(),
           narrow.size() * 4);
    } else {
      fill(DType::I64, {static_cast<int64_t>(grid.segments.size())},
           grid.segments.data(), grid.segments.size() * 8);
    }
    break;
  case FeedKind::GridPatchPositions:
    fill(DType::I64, {p, 2}, grid.positions.data(), grid.positions.size() * 8);
    break;
  case FeedKind::GridInterpIndices:
    fill(DType::I64, {p, grid.taps}, grid.indices.data(),
         grid.indices.size() * 8);
    break;
  case FeedKind::GridInterpWeights:
    fill(DType::F32, {p, grid.taps}, grid.weights.data(),
         grid.weights.size() * 4);
    break;
  default:
    break;
  }
  return t;
}

bool isGridFeed(FeedKind kind) {
  return kind == FeedKind::GridSegments ||
         kind == FeedKind::GridPatchPositions ||
         kind == FeedKind::GridInterpIndices ||
         kind == FeedKind::GridInterpWeights;
}

absl::StatusOr<std::vector<ImageGrid>> readImageGrids(const MultimodalDesc &mm,
                                                      const TensorData &grid) {
  if (grid.dtype != DType::I64 || grid.shape.size() != 2 ||
      grid.shape[1] != 3 || grid.shape[0] < 1 ||
      grid.bytes != static_cast<size_t>(grid.shape[0]) * 3 * 8)
    return absl::InvalidArgumentError(absl::StrCat(
        "vision input '", mm.imageGrid, "' is ", dtypeName(grid.dtype), " [",
        absl::StrJoin(grid.shape, ", "),
        "]; it holds each image's (t, h, w) patch grid, i64 [images, 3]"));
  int64_t images = grid.shape[0];
  std::vector<ImageGrid> grids(images);
  const int64_t *values = static_cast<const int64_t *>(grid.data);
  for (int64_t i = 0; i < images; ++i)
    grids[i] = {values[3 * i], values[3 * i + 1], values[3 * i + 2]};
  return grids;
}

} // namespace detail

absl::StatusOr<std::vector<NamedTensor>>
computeGridInputs(const MultimodalDesc &mm, const TensorData &grid) {
  MOERT_ASSIGN_OR_RETURN(std::vector<detail::ImageGrid> grids,
                         detail::readImageGrids(mm, grid));
  MOERT_ASSIGN_OR_RETURN(
      detail::GridTensors tensors,
      detail::computeGridTensors(mm.gridRule, mm.spatialMergeSize, grids));
  std::vector<NamedTensor> out;
  for (const StageDesc &stage : mm.stages)
    for (const FeedDesc &feed : stage.feeds)
      if (detail::isGridFeed(feed.kind))
        out.push_back(detail::gridFeedTensor(tensors, feed));
  return out;
}

VisionInputs asVisionInputs(const std::vector<NamedTensor> &tensors) {
  VisionInputs inputs;
  for (const NamedTensor &t : tensors)
    inputs.emplace_back(t.name, t.view());
  return inputs;
}

} // namespace moert
