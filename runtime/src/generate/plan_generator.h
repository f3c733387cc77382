//===- plan_generator.h - A generator for any generation plan ---*- C++ -*-===//
//
// What the C API and the Python module hold for a generation plan:
// moert::Generator over a plan of one device schedule, or
// moert::GroupGenerator over every device of an expert-parallel plan in this
// process (or this MPI rank's device), behind one interface.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_PLAN_GENERATOR_H
#define MOERT_SRC_PLAN_GENERATOR_H

#include "moert/group_generator.h"

namespace moert::detail {

class PlanGenerator {
public:
  /// `threads`: per device (0: the hardware concurrency divided by the
  /// plan's devices). `mpi`: this MPI rank's device of an expert-parallel
  /// plan (GroupGenerator::createMpi, after mpiInit).
  static absl::StatusOr<std::unique_ptr<PlanGenerator>>
  create(const Plan &plan, int threads, bool mpi = false) {
    auto generator = std::unique_ptr<PlanGenerator>(new PlanGenerator());
    if (mpi && plan.numDevices() < 2)
      return absl::InvalidArgumentError(
          "mpi: the plan has one device; only an expert-parallel plan "
          "(moec compile --devices N) runs one device per MPI rank");
    if (plan.numDevices() > 1) {
      GroupGeneratorOptions options;
      options.threadsPerDevice = threads;
      MOERT_ASSIGN_OR_RETURN(generator->group_,
                             mpi ? GroupGenerator::createMpi(plan, options)
                                 : GroupGenerator::create(plan, options));
    } else {
      SessionOptions options;
      options.threads = threads;
      MOERT_ASSIGN_OR_RETURN(generator->single_,
                             Generator::create(plan, options));
    }
    return generator;
  }

  absl::StatusOr<std::vector<int64_t>>
  generate(const std::vector<int64_t> &prompt, const GenerateOptions &options,
           const std::function<void(int64_t)> &onToken = {}) {
    return single_ ? single_->generate(prompt, options, onToken)
                   : group_->generate(prompt, options, onToken);
  }
  /// With a multimodal plan's vision inputs.
  absl::StatusOr<std::vector<int64_t>>
  generate(const std::vector<int64_t> &prompt, const VisionInputs &vision,
           const GenerateOptions &options,
           const std::function<void(int64_t)> &onToken = {}) {
    return single_ ? single_->generate(prompt, vision, options, onToken)
                   : group_->generate(prompt, vision, options, onToken);
  }
  absl::Status prefill(const std::vector<int64_t> &prompt) {
    return single_ ? single_->prefill(prompt) : group_->prefill(prompt);
  }
  absl::Status decode(int64_t token) {
    return single_ ? single_->decode(token) : group_->decode(token);
  }
  /// Device 0's logits of the last position of the last step.
  const std::vector<float> &logits() const {
    return single_ ? single_->logits() : group_->logits();
  }
  const GenerationTimes &times() const {
    return single_ ? single_->times() : group_->times();
  }
  int64_t length() const {
    return single_ ? single_->length() : group_->length();
  }
  int64_t vocabSize() const {
    return single_ ? single_->vocabSize() : group_->vocabSize();
  }
  int64_t maxSeq() const {
    return single_ ? single_->maxSeq() : group_->maxSeq();
  }

private:
  PlanGenerator() = default;
  std::unique_ptr<Generator> single_;
  std::unique_ptr<GroupGenerator> group_;
};

} // namespace moert::detail

#endif // MOERT_SRC_PLAN_GENERATOR_H
