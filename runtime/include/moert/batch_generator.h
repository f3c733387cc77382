//===- batch_generator.h - Continuous batching over a generation plan -*- C++
//-*-===//
//
// A BatchGenerator serves many sequences of one generation plan at once
// (continuous batching, docs/serving.md). Each step() runs the rows of every
// active sequence together through the plan's prefill schedule, whose token
// axis the compiler proved row-independent but for attention and the cache
// writes (the plan's batching verdict, docs/plan-format.md "Generation
// plans"): a row is a running sequence's next token, or one token of a new
// sequence's prompt (prompts are fed in chunks after the decode rows), each
// with its sequence's slot and its position. The attention steps read and
// write that slot of a KV pool of `slots` sequences × max_seq positions,
// allocated once; the MoE layers route all rows of the step together, so
// each expert's weights are read once per step. A plan the verdict refuses
// (or whose caches are not all keys and values of attention steps) is served
// one sequence at a time with a Generator; batchBlocker() says why.
//
//   auto batch = moert::BatchGenerator::create(*plan, {/*threads=*/4},
//                                              {/*slots=*/16}).value();
//   int64_t a = batch->add({3, 14, 15}, options).value();
//   while (batch->hasWork())
//     for (const moert::SequenceEvent &e : batch->step().value())
//       print(e.sequence, e.token);
//
// add(), cancel() and the counters may be called from any thread while
// another runs step(); step() itself runs on one thread at a time.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_BATCH_GENERATOR_H
#define MOERT_BATCH_GENERATOR_H

#include "moert/generator.h"

#include <memory>
#include <string>
#include <vector>

namespace moert {

struct BatchOptions {
  /// Sequences held at once: slots of the KV pool.
  int slots = 8;
  /// Rows one step runs at most (decode rows first, then prompt rows); 0:
  /// the prefill schedule's bound on its token count.
  int64_t maxStepRows = 0;
  /// Keeps each sequence's logits of its last new token (lastLogits()).
  bool keepLogits = false;
};

/// Why a sequence ended.
enum class FinishReason {
  /// Still running.
  None,
  /// It produced one of its stop ids (which it kept).
  Stop,
  /// It produced its maxNewTokens.
  Length,
  /// cancel() removed it.
  Cancelled,
};

/// What one step did for one sequence: a new token (token >= 0), and
/// whether the sequence ended with it. A sequence cancelled while it ran
/// reports once with token -1 and FinishReason::Cancelled.
struct SequenceEvent {
  int64_t sequence = 0;
  int64_t token = -1;
  FinishReason finish = FinishReason::None;
};

/// Counters since the generator was created.
struct BatchStats {
  int64_t steps = 0;
  /// Rows run, of them prompt rows.
  int64_t rows = 0;
  int64_t promptRows = 0;
  int64_t newTokens = 0;
  double stepSeconds = 0;
};

class BatchGenerator {
public:
  /// Fails when `plan` is not a generation plan, needs another backend or
  /// several devices, or `options` are out of range (slots in [1, 4096]).
  static absl::StatusOr<std::unique_ptr<BatchGenerator>>
  create(const Plan &plan, const SessionOptions &session = {},
         const BatchOptions &options = {});
  ~BatchGenerator();

  /// Queues a sequence; it gets a slot at a later step() when one is free.
  /// Fails as Generator::generate does for a prompt or options it would
  /// refuse (ids outside the vocabulary, prompt plus maxNewTokens beyond
  /// max_seq, bad sampling options). Returns the sequence's id (from 1).
  absl::StatusOr<int64_t> add(const std::vector<int64_t> &prompt,
                              const GenerateOptions &options);
  /// Removes a queued or running sequence and frees its slot; false when
  /// no such sequence is queued or running.
  bool cancel(int64_t sequence);
  /// One step over every running sequence (and prompt rows of new ones):
  /// the tokens it produced, and the sequences that ended. Empty when
  /// there is nothing to run.
  absl::StatusOr<std::vector<SequenceEvent>> step();

  /// Whether a sequence is queued or running.
  bool hasWork() const;
  int slots() const;
  /// Slots held by running sequences (prompt fed or being fed).
  int slotsInUse() const;
  /// Sequences queued for a slot.
  int waiting() const;

  /// Empty when steps batch the rows of several sequences; else why the
  /// plan is served one sequence at a time.
  const std::string &batchBlocker() const;
  /// Per MoE layer (Router step, in schedule order), per expert: the
  /// rows routed to it since creation (each of a row's top-k choices).
  std::vector<std::vector<uint64_t>> expertSelections() const;
  BatchStats stats() const;
  /// With BatchOptions::keepLogits: the logits that drew the sequence's
  /// last token (vocab floats), until it is removed; else empty.
  std::vector<float> lastLogits(int64_t sequence) const;

  int64_t vocabSize() const;
  int64_t maxSeq() const;
  /// Rows one step runs at most.
  int64_t maxStepRows() const;
  /// The pools' bytes: the KV pool (slots × max_seq positions of every
  /// cache) and the state pool (slots × every state pair's state).
  uint64_t poolBytes() const;

  struct Impl;

private:
  explicit BatchGenerator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace moert

#endif // MOERT_BATCH_GENERATOR_H
