//===- mrope_positions.cpp - M-RoPE positions by a config rule ------------===//

#include "generate/mrope_positions.h"

#include "absl/strings/str_cat.h"

#include <algorithm>

namespace moert::detail {

absl::StatusOr<PromptPositions>
computePromptPositions(const std::vector<int64_t> &ids, int64_t imageTokenId,
                       const std::vector<ImageGrid> &grids, int64_t merge,
                       const std::vector<PositionRow> &rows) {
  int64_t n = static_cast<int64_t>(ids.size());
  // Per token: its time, height and width positions.
  std::vector<int64_t> thw[3];
  for (std::vector<int64_t> &row : thw)
    row.reserve(ids.size());
  int64_t next = 0;
  size_t image = 0;
  for (int64_t i = 0; i < n;) {
    if (ids[i] != imageTokenId) {
      for (std::vector<int64_t> &row : thw)
        row.push_back(next);
      ++next;
      ++i;
      continue;
    }
    int64_t run = 0;
    while (i + run < n && ids[i + run] == imageTokenId)
      ++run;
    // A run of image tokens holds whole images, in order.
    for (int64_t taken = 0; taken < run;) {
      if (image == grids.size())
        return absl::InvalidArgumentError(absl::StrCat(
            "the prompt's image tokens (id ", imageTokenId, ") at ", i + taken,
            ".. need one more image than the ", grids.size(), " given"));
      const ImageGrid &g = grids[image];
      if (g.t != 1)
        return absl::InvalidArgumentError(absl::StrCat(
            "image ", image, " has a grid of t = ", g.t,
            " frames; the position rule covers still images (t = 1) only"));
      if (g.h < 1 || g.w < 1 || g.h % merge || g.w % merge)
        return absl::InvalidArgumentError(
            absl::StrCat("image ", image, "'s grid (", g.t, ", ", g.h, ", ",
                         g.w, ") is not made of whole ", merge, " x ", merge,
                         " merged patches (spatial_merge_size ", merge, ")"));
      int64_t h = g.h / merge, w = g.w / merge, tokens = 0;
      // A grid of more tokens than int64 holds takes more than any run.
      bool overflow = __builtin_mul_overflow(h, w, &tokens);
      if (overflow || tokens > run - taken)
        return absl::InvalidArgumentError(absl::StrCat(
            "image ", image, " (grid ", g.t, " x ", g.h, " x ", g.w,
            ", spatial_merge_size ", merge, ") takes ",
            overflow ? std::string("more than 2^63") : absl::StrCat(tokens),
            " image tokens but the prompt's run at ", i + taken, " has ",
            run - taken, " left"));
      for (int64_t a = 0; a < g.t; ++a)
        for (int64_t b = 0; b < h; ++b)
          for (int64_t c = 0; c < w; ++c) {
            thw[0].push_back(next + a);
            thw[1].push_back(next + b);
            thw[2].push_back(next + c);
          }
      next += std::max({g.t, h, w});
      taken += tokens;
      ++image;
    }
    i += run;
  }
  if (image != grids.size())
    return absl::InvalidArgumentError(absl::StrCat(
        grids.size(), " images given but the prompt's image tokens (id ",
        imageTokenId, ") hold ", image));
  PromptPositions out;
  out.values.reserve(rows.size() * ids.size());
  for (PositionRow row : rows)
    for (int64_t i = 0; i < n; ++i)
      out.values.push_back(
          row == PositionRow::Sequence ? i : thw[static_cast<int>(row) - 1][i]);
  out.delta = next - n;
  return out;
}

void fillDecodePositions(int64_t start, int64_t n, int64_t delta,
                         const std::vector<PositionRow> &rows,
                         std::vector<int64_t> &out) {
  out.clear();
  for (PositionRow row : rows)
    for (int64_t i = start; i < start + n; ++i)
      out.push_back(row == PositionRow::Sequence ? i : i + delta);
}

} // namespace moert::detail
