//===- generator.h - Token generation over a generation plan ----*- C++ -*-===//
//
// A Generator runs a generation plan (`moec compile DECODE.onnx --prefill
// PREFILL.onnx --max-seq S`, docs/plan-format.md "Generation plans"): the
// prefill schedule once over the prompt, then the decode schedule once per
// new token, feeding each step's present cache back as the next step's
// past. Typical use:
//
//   MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Generator> gen,
//                          moert::Generator::create(*plan, {/*threads=*/4}));
//   moert::GenerateOptions options;
//   options.maxNewTokens = 32;
//   MOERT_ASSIGN_OR_RETURN(std::vector<int64_t> ids,
//                          gen->generate({3, 14, 15}, options,
//                                        [](int64_t id) { print(id); }));
//
// The caches live in buffers allocated once, at max_seq positions, when the
// generator is created; no step allocates. Each cache has two buffers: a
// decode step reads the past from one and its Concat writes the present,
// one position longer, into the other (docs/architecture.md, "Generation").
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_GENERATOR_H
#define MOERT_GENERATOR_H

#include "moert/moert.h"

#include <functional>

namespace moert {

/// How the next token is chosen from the logits of the last position
/// (docs/cli.md, "Sampling", gives the exact algorithm).
struct SamplingOptions {
  /// 0: greedy (the first id of the largest logit).
  double temperature = 0;
  /// Keep the k most likely ids; 0 keeps all.
  int64_t topK = 0;
  /// Keep the fewest most likely ids whose probability reaches topP; 1 keeps
  /// all.
  double topP = 1;
  uint64_t seed = 0;
};

/// Draws tokens from logits; reproducible for a seed.
class Sampler {
public:
  explicit Sampler(const SamplingOptions &options);
  /// Fails for options outside their ranges (temperature < 0, topK < 0,
  /// topP not in (0, 1]).
  static absl::Status validate(const SamplingOptions &options);
  /// The next token from `vocab` logits.
  int64_t sample(const float *logits, int64_t vocab);
  /// The next value of the generator's splitmix64 stream in [0, 1).
  double uniform();

private:
  SamplingOptions options_;
  uint64_t state_;
  std::vector<int64_t> order_;
  std::vector<double> weights_;
};

struct GenerateOptions {
  /// New tokens to produce; prompt plus new tokens must fit in max_seq.
  int64_t maxNewTokens = 16;
  /// Generation stops after producing one of these ids (which is kept).
  std::vector<int64_t> stopIds;
  SamplingOptions sampling;
  /// Asked after each new token that does not end the generation anyway
  /// (after onToken, before the next decode step): true ends it there, with
  /// the tokens drawn so far, so that a caller whose client went away does
  /// not run to maxNewTokens. Empty: never asked. Under MPI, rank 0's answer
  /// is broadcast to the other ranks each step, so every rank passes one or
  /// none (checked).
  std::function<bool()> stopRequested;
};

/// Time spent by the last generate().
struct GenerationTimes {
  int64_t promptTokens = 0;
  int64_t newTokens = 0;
  /// The prefill run, and from the start to the first new token.
  double prefillSeconds = 0;
  /// Multimodal plans: the vision stages' runs, part of the prefill's.
  double visionSeconds = 0;
  double firstTokenSeconds = 0;
  /// The decode steps (newTokens - 1 of them), sampling included.
  int64_t decodeSteps = 0;
  double decodeSeconds = 0;
  /// Whether GenerateOptions::stopRequested ended the generation.
  bool stoppedEarly = false;
};

/// The vision inputs of a multimodal prompt (format 1.17): each a vision
/// stage's graph input, or the image grid, by name, as the model's
/// processor gives them (MultimodalDesc::givenInputs). The data must stay
/// valid during the call that takes them.
using VisionInputs = std::vector<std::pair<std::string, TensorData>>;

/// Generates tokens with one device's schedules of a generation plan on the
/// CPU backend. Not thread-safe; must not outlive its plan.
class Generator {
public:
  /// Fails when `plan` is not a generation plan or needs another backend or
  /// several devices.
  static absl::StatusOr<std::unique_ptr<Generator>>
  create(const Plan &plan, const SessionOptions &options = {});
  ~Generator();

  /// Clears the caches and runs the prompt (positions 0..n-1). Ids must be
  /// in [0, vocab); the prompt must leave room for one new token.
  absl::Status prefill(const std::vector<int64_t> &prompt);
  /// A multimodal plan's prompt (docs/multimodal.md): the vision stages over
  /// `vision` when the prompt holds image tokens, the embeddings with the
  /// image features at those tokens, the positions by the plan's rule, the
  /// language model and its head. Fails, naming the input, for vision inputs
  /// that are missing, unknown, of the wrong type or shape, for image tokens
  /// the images do not match, or for more images than the plan takes.
  absl::Status prefill(const std::vector<int64_t> &prompt,
                       const VisionInputs &vision);
  /// Checks `prompt` and its vision inputs as prefill does, running no
  /// stage: the errors prefill would give for the arguments themselves.
  absl::Status checkPrompt(const std::vector<int64_t> &prompt,
                           const VisionInputs &vision);
  /// Runs `token` at the next position, growing every cache by one.
  absl::Status decode(int64_t token);
  /// The logits of the last position of the last prefill or decode.
  const std::vector<float> &logits() const { return logits_; }
  /// Positions the caches hold.
  int64_t length() const { return length_; }
  int64_t vocabSize() const;
  int64_t maxSeq() const;
  /// Bytes of the cache buffers at max_seq positions: one per cache written
  /// in place, two per other cache.
  uint64_t cacheBytes() const;
  /// The plan's caches, and how many of them a decode step appends to in
  /// place (SessionOptions::kvCacheInPlace) instead of copying the past.
  int numCaches() const;
  int cachesInPlace() const;

  /// prefill, then up to maxNewTokens tokens drawn by a Sampler, calling
  /// `onToken` with each as soon as it is drawn; returns the new tokens
  /// (fewer after a stop id or when options.stopRequested says so).
  absl::StatusOr<std::vector<int64_t>>
  generate(const std::vector<int64_t> &prompt, const GenerateOptions &options,
           const std::function<void(int64_t)> &onToken = {});
  /// The same with a multimodal prompt's vision inputs (prefill above).
  absl::StatusOr<std::vector<int64_t>>
  generate(const std::vector<int64_t> &prompt, const VisionInputs &vision,
           const GenerateOptions &options,
           const std::function<void(int64_t)> &onToken = {});
  const GenerationTimes &times() const { return times_; }

  /// The sessions, for their step statistics. prefillSession() is a
  /// multimodal plan's Prefill stage, and the decode session in any other
  /// plan without prefill schedules.
  Session &decodeSession();
  Session &prefillSession();

  struct Impl;

private:
  explicit Generator(std::unique_ptr<Impl> impl);
  absl::Status readLogits(Session &session);
  std::unique_ptr<Impl> impl_;
  std::vector<float> logits_;
  int64_t length_ = 0;
  GenerationTimes times_;
};

} // namespace moert

#endif // MOERT_GENERATOR_H
