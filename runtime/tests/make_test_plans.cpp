//===- make_test_plans.cpp - Plans for the moe-run CLI test ---------------===//
//
// Writes into DIR:
//   embed.plan   inputs x: f32 [T <= 8, 4] and ids: i64 [T] (values in
//                [0, 5)); output 'logits:0' = relu((x + E[ids]) W) with
//                E[i][j] = i + j / 10 and W[i][j] = (i - j) / 4.
//   cuda.plan    the same plan for the cuda backend.
//   multi.plan   a plan with two device schedules.
//   ep1.plan     one MoE layer on one device (ep_plans.h); input x [T <= 16,
//                8], output 'out'.
//   ep2.plan, ep4.plan  the same layer over 2 and 4 devices.
//   ep2r.plan    over 2 devices with expert 0 replicated and the dispatch
//                exchange overlapped (AllToAllStart/Wait).
//
//===----------------------------------------------------------------------===//

#include "ep_plans.h"
#include "format/plan_writer.h"

#include <cstdio>
#include <string>

namespace {

absl::Status writeEmbed(const std::string &path, moert::Backend backend) {
  using moert::DType;
  using moert::PlanDim;
  static float table[5 * 4], weight[4 * 3];
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j)
      table[i * 4 + j] = i + j / 10.0f;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      weight[i * 3 + j] = (i - j) / 4.0f;
  moert::PlanWriter writer({backend, 1, 0}, "make_test_plans");
  int t = writer.addSymbol("T", 1, 8);
  moert::ScheduleBuilder &s = writer.schedule();
  int32_t x = s.addTensor("x", DType::F32, {PlanDim::symbol(t), 4});
  int32_t ids = s.addTensor("ids", DType::I64, {PlanDim::symbol(t)});
  int32_t e = s.addWeightRef("E", DType::F32, {5, 4}, table, sizeof(table));
  int32_t w = s.addWeightRef("W", DType::F32, {4, 3}, weight, sizeof(weight));
  int32_t rows = s.addTensor("rows", DType::F32, {PlanDim::symbol(t), 4});
  int32_t sum = s.addTensor("sum", DType::F32, {PlanDim::symbol(t), 4});
  int32_t h = s.addTensor("h", DType::F32, {PlanDim::symbol(t), 3});
  int32_t y = s.addTensor("logits:0", DType::F32, {PlanDim::symbol(t), 3});
  s.addInput(x);
  s.addInput(ids);
  s.setValueRange(ids, 0, 5);
  s.addOutput(y);
  moert::fb::AxisAttrsT axis;
  s.addStep(moert::fb::OpKind::Gather, "embed", {e, ids}, {rows},
            moert::attrs(axis));
  s.addStep(moert::fb::OpKind::Add, "add", {x, rows}, {sum});
  s.addStep(moert::fb::OpKind::MatMul, "proj", {sum, w}, {h});
  s.addStep(moert::fb::OpKind::Relu, "relu", {h}, {y});
  return writer.write(path);
}

absl::Status writeLayer(const std::string &path,
                        const moert::testing::Placement *placement,
                        bool overlap = false) {
  MOERT_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                         moert::testing::writeMoeLayerPlan(placement, overlap));
  std::FILE *file = std::fopen(path.c_str(), "wb");
  bool ok =
      file && std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  if (file)
    ok &= std::fclose(file) == 0;
  return ok ? absl::OkStatus()
            : absl::InternalError(absl::StrCat(path, ": cannot write"));
}

absl::Status writeMulti(const std::string &path) {
  moert::PlanWriter writer({moert::Backend::Cpu, 2, 0});
  for (int d = 0; d < 2; ++d) {
    moert::ScheduleBuilder &s = writer.schedule(d);
    int32_t x = s.addTensor("x", moert::DType::F32, {2});
    int32_t y = s.addTensor("y", moert::DType::F32, {2});
    s.addInput(x);
    s.addOutput(y);
    s.addStep(moert::fb::OpKind::Neg, "neg", {x}, {y});
  }
  return writer.write(path);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  moert::testing::Placement twoDevices{{0, 2, 4}, {0, 1, 2, 3}};
  moert::testing::Placement fourDevices{{0, 1, 2, 3, 4}, {0, 1, 2, 3}};
  moert::testing::Placement replicated{{0, 1, 5}, {0, 1, 2, 3, 0}};
  for (absl::Status status :
       {writeEmbed(dir + "/embed.plan", moert::Backend::Cpu),
        writeEmbed(dir + "/cuda.plan", moert::Backend::Cuda),
        writeMulti(dir + "/multi.plan"), writeLayer(dir + "/ep1.plan", nullptr),
        writeLayer(dir + "/ep2.plan", &twoDevices),
        writeLayer(dir + "/ep4.plan", &fourDevices),
        writeLayer(dir + "/ep2r.plan", &replicated, /*overlap=*/true)}) {
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
      return 1;
    }
  }
  return 0;
}
