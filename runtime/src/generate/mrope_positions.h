//===- mrope_positions.h - M-RoPE positions by a config rule ----*- C++ -*-===//
//
// The positions of a multimodal prompt by the rule docs/multimodal.md
// ("Positions") documents, keyed by a plan's fields (the image token id, the
// spatial merge size, each row's meaning) and each image's patch grid, not
// by any one model's code:
//
// * text tokens take, in every Time/Height/Width row, the next position:
//   0 for the first token, else the largest position so far plus one;
// * the tokens of an image of grid (t, h, w) patches are its
//   t * (h / s) * (w / s) merged patches in (t, h, w) order; patch (i, j, k)
//   takes start + i, start + j and start + k in the Time, Height and Width
//   rows, where start is the next position as for a text token;
// * a Sequence row holds the token's index in the sequence;
// * each decode step advances every row by one from the last token's.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_GENERATE_MROPE_POSITIONS_H
#define MOERT_SRC_GENERATE_MROPE_POSITIONS_H

#include "moert/moert.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <vector>

namespace moert::detail {

/// One image's patch grid: t frames of h x w patches.
struct ImageGrid {
  int64_t t = 0, h = 0, w = 0;
};

/// A prompt's positions: `rows` rows of `n` positions, row-major.
struct PromptPositions {
  std::vector<int64_t> values;
  /// The position the first decode step takes in the Time/Height/Width
  /// rows (the largest position plus one), minus the prompt's length: what
  /// the rows add to a token's sequence index from then on.
  int64_t delta = 0;
};

/// The positions of `ids` by the rule above, with `grids` the images in
/// prompt order. Fails, saying why, when the image tokens do not match the
/// grids (too few or too many images, a run of image tokens of another
/// length than its image's) or when the rule is not exact for an image
/// (t != 1: video-like grids take time positions the rule does not give;
/// h or w not a multiple of `merge`).
absl::StatusOr<PromptPositions>
computePromptPositions(const std::vector<int64_t> &ids, int64_t imageTokenId,
                       const std::vector<ImageGrid> &grids, int64_t merge,
                       const std::vector<PositionRow> &rows);

/// Fills `out` (rows x n) with the positions of the n tokens at sequence
/// indices [start, start + n) after the prompt: index + delta in the
/// Time/Height/Width rows, the index itself in a Sequence row.
void fillDecodePositions(int64_t start, int64_t n, int64_t delta,
                         const std::vector<PositionRow> &rows,
                         std::vector<int64_t> &out);

} // namespace moert::detail

#endif // MOERT_SRC_GENERATE_MROPE_POSITIONS_H
