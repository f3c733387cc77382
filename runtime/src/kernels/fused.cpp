//===- fused.cpp - Fused elementwise expression programs ------------------===//
//
// A FusedElementwise step evaluates a small register program over the
// broadcast of its f32 inputs. The output is processed in chunks of
// kChunk elements: each instruction runs a tight loop over a whole chunk, so
// the interpretation cost is per chunk, not per element. Contiguous inputs
// are read in place (a register is a pointer), broadcast ones are expanded
// into the register's scratch.
//
//===----------------------------------------------------------------------===//

#include "kernels/common.h"

#include <vector>

namespace moert::detail {
namespace {

constexpr int kChunk = 512;
/// Register indices are bytes; a compiler may use one register per value.
constexpr int kMaxRegisters = 256;

bool isBinary(fb::ExprOp op) {
  return op >= fb::ExprOp::Add && op <= fb::ExprOp::Min;
}
bool isUnary(fb::ExprOp op) {
  return op >= fb::ExprOp::Neg && op <= fb::ExprOp::Softplus;
}

absl::Status validateFused(const StepCheck &check) {
  const auto *attrs = check.attrs<fb::FusedElementwiseAttrs>();
  int numRegisters = attrs->num_registers();
  if (numRegisters < 1)
    return check.error("num_registers must be at least 1");
  if (check.numInputs() > BroadcastLoop::kMaxOperands)
    return check.error("has ", check.numInputs(), " inputs; at most ",
                       BroadcastLoop::kMaxOperands, " are supported");
  for (int i = 0; i < check.numInputs(); ++i)
    MOERT_RETURN_IF_ERROR(check.inType(i, kFloatTypes));
  for (int o = 0; o < check.numOutputs(); ++o)
    MOERT_RETURN_IF_ERROR(check.outType(o, kFloatTypes));
  MOERT_RETURN_IF_ERROR(checkBroadcastRank(check));

  bool defined[kMaxRegisters] = {};
  const auto *program = attrs->program();
  if (program->size() == 0)
    return check.error("the program is empty");
  for (size_t k = 0; k < program->size(); ++k) {
    const fb::Instr *instr = program->Get(k);
    fb::ExprOp op = instr->op();
    auto bad = [&](const auto &...why) {
      return check.error("instruction ", k, " (", fb::EnumNameExprOp(op),
                         "): ", why...);
    };
    if (instr->dst() >= numRegisters)
      return bad("destination r", int(instr->dst()), " is not a register");
    auto readable = [&](uint8_t reg) {
      return reg < numRegisters && defined[reg];
    };
    if (op == fb::ExprOp::Input) {
      if (instr->a() >= check.numInputs())
        return bad("input ", int(instr->a()), " does not exist");
    } else if (op == fb::ExprOp::Const) {
    } else if (isBinary(op)) {
      if (!readable(instr->a()) || !readable(instr->b()))
        return bad("reads a register before it is written");
    } else if (isUnary(op)) {
      if (!readable(instr->a()))
        return bad("reads a register before it is written");
    } else {
      return bad("unknown operation ", static_cast<int>(op));
    }
    defined[instr->dst()] = true;
  }
  const auto *results = attrs->results();
  if (static_cast<int>(results->size()) != check.numOutputs())
    return check.error("has ", results->size(), " results for ",
                       check.numOutputs(), " outputs");
  for (size_t k = 0; k < results->size(); ++k)
    if (results->Get(k) >= numRegisters || !defined[results->Get(k)])
      return check.error("result ", k, " names register r",
                         int(results->Get(k)), ", which is never written");
  return absl::OkStatus();
}

template <typename Fn>
void binaryChunk(float *dst, const float *a, const float *b, int n, Fn fn) {
  for (int i = 0; i < n; ++i)
    dst[i] = fn(a[i], b[i]);
}

template <typename Fn>
void unaryChunk(float *dst, const float *a, int n, Fn fn) {
  for (int i = 0; i < n; ++i)
    dst[i] = fn(a[i]);
}

/// Runs the program over one chunk of `n` elements; `ptr[r]` ends up
/// pointing at register r's values.
void runChunk(const flatbuffers::Vector<const fb::Instr *> &program,
              const float *const *inputs, const int64_t *offsets,
              const int64_t *strides, int n, float *scratch,
              const float **ptr) {
  for (const fb::Instr *instr : program) {
    float *dst = scratch + instr->dst() * kChunk;
    // Operands are registers only for unary and binary operations (the
    // validator checked that they are written before).
    fb::ExprOp op = instr->op();
    const float *a = isUnary(op) || isBinary(op) ? ptr[instr->a()] : nullptr;
    const float *b = isBinary(op) ? ptr[instr->b()] : nullptr;
    switch (op) {
    case fb::ExprOp::Input: {
      int in = instr->a();
      const float *src = inputs[in] + offsets[in];
      if (strides[in] == 1) {
        ptr[instr->dst()] = src;
        continue;
      }
      std::fill(dst, dst + n, *src);
      break;
    }
    case fb::ExprOp::Const:
      std::fill(dst, dst + n, instr->imm());
      break;
    case fb::ExprOp::Add:
      binaryChunk(dst, a, b, n, [](float x, float y) { return x + y; });
      break;
    case fb::ExprOp::Sub:
      binaryChunk(dst, a, b, n, [](float x, float y) { return x - y; });
      break;
    case fb::ExprOp::Mul:
      binaryChunk(dst, a, b, n, [](float x, float y) { return x * y; });
      break;
    case fb::ExprOp::Div:
      binaryChunk(dst, a, b, n, [](float x, float y) { return x / y; });
      break;
    case fb::ExprOp::Pow:
      binaryChunk(dst, a, b, n,
                  [](float x, float y) { return std::pow(x, y); });
      break;
    case fb::ExprOp::Max:
      binaryChunk(dst, a, b, n, nanMax<float>);
      break;
    case fb::ExprOp::Min:
      binaryChunk(dst, a, b, n, nanMin<float>);
      break;
    case fb::ExprOp::Neg:
      unaryChunk(dst, a, n, [](float x) { return -x; });
      break;
    case fb::ExprOp::Abs:
      unaryChunk(dst, a, n, [](float x) { return std::fabs(x); });
      break;
    case fb::ExprOp::Exp:
      unaryChunk(dst, a, n, fastExp);
      break;
    case fb::ExprOp::Log:
      unaryChunk(dst, a, n, [](float x) { return std::log(x); });
      break;
    case fb::ExprOp::Sqrt:
      unaryChunk(dst, a, n, [](float x) { return std::sqrt(x); });
      break;
    case fb::ExprOp::Reciprocal:
      unaryChunk(dst, a, n, [](float x) { return 1.0f / x; });
      break;
    case fb::ExprOp::Tanh:
      unaryChunk(dst, a, n, [](float x) { return std::tanh(x); });
      break;
    case fb::ExprOp::Erf:
      unaryChunk(dst, a, n, fastErf);
      break;
    case fb::ExprOp::Sigmoid:
      unaryChunk(dst, a, n, sigmoid);
      break;
    case fb::ExprOp::Relu:
      unaryChunk(dst, a, n, [](float x) { return x < 0 ? 0.0f : x; });
      break;
    case fb::ExprOp::Gelu:
      unaryChunk(dst, a, n, gelu);
      break;
    case fb::ExprOp::GeluTanh:
      unaryChunk(dst, a, n, geluTanh);
      break;
    case fb::ExprOp::Sin:
      unaryChunk(dst, a, n, [](float x) { return std::sin(x); });
      break;
    case fb::ExprOp::Cos:
      unaryChunk(dst, a, n, [](float x) { return std::cos(x); });
      break;
    case fb::ExprOp::Floor:
      unaryChunk(dst, a, n, [](float x) { return std::floor(x); });
      break;
    case fb::ExprOp::Ceil:
      unaryChunk(dst, a, n, [](float x) { return std::ceil(x); });
      break;
    case fb::ExprOp::Softplus:
      unaryChunk(dst, a, n, softplus);
      break;
    }
    ptr[instr->dst()] = dst;
  }
}

absl::Status fusedKernel(KernelContext &ctx) {
  const auto *attrs = ctx.attrs<fb::FusedElementwiseAttrs>();
  int numInputs = ctx.numInputs();
  const Shape *shapes[BroadcastLoop::kMaxOperands];
  const float *inputs[BroadcastLoop::kMaxOperands];
  for (int i = 0; i < numInputs; ++i) {
    shapes[i] = &ctx.in(i).shape;
    inputs[i] = ctx.in(i).as<const float>();
  }
  Shape shape;
  MOERT_RETURN_IF_ERROR(broadcastOrError(ctx, shapes, numInputs, shape));
  std::vector<float *> outputs(ctx.numOutputs());
  for (int o = 0; o < ctx.numOutputs(); ++o) {
    MOERT_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate(o, shape));
    outputs[o] = out->as<float>();
  }
  BroadcastLoop loop(shape, shapes, numInputs);
  int64_t strides[BroadcastLoop::kMaxOperands];
  for (int i = 0; i < numInputs; ++i)
    strides[i] = loop.innerStride(i);
  const auto &program = *attrs->program();
  const auto &results = *attrs->results();
  int numRegisters = attrs->num_registers();

  ctx.pool().parallelFor(
      shape.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
        std::vector<float> scratch(static_cast<size_t>(numRegisters) * kChunk);
        const float *ptr[kMaxRegisters] = {};
        loop.forEachRun(
            begin, end, [&](int64_t o, const int64_t *offs, int64_t n) {
              int64_t offsets[BroadcastLoop::kMaxOperands];
              for (int64_t c = 0; c < n; c += kChunk) {
                int len = static_cast<int>(std::min<int64_t>(kChunk, n - c));
                for (int i = 0; i < numInputs; ++i)
                  offsets[i] = offs[i] + c * strides[i];
                runChunk(program, inputs, offsets, strides, len, scratch.data(),
                         ptr);
                // Output 0 may overwrite an input in place: it is stored last,
                // after every other result has been read.
                for (int k = static_cast<int>(results.size()) - 1; k >= 0; --k)
                  std::copy(ptr[results[k]], ptr[results[k]] + len,
                            outputs[k] + o + c);
              }
            });
      });
  return absl::OkStatus();
}

} // namespace

void registerFusedOps(OpRegistry &r) {
  OpDef def =
      makeOp("FusedElementwise", 1, BroadcastLoop::kMaxOperands, validateFused,
             fusedKernel, fb::Attrs::FusedElementwiseAttrs);
  def.maxOutputs = kVariadic;
  def.inPlaceInputs = kInPlaceAny;
  r.add(fb::OpKind::FusedElementwise, def);
}

} // namespace moert::detail
