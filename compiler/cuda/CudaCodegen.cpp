//===- CudaCodegen.cpp - Fused elementwise programs as CUDA kernels ------===//
//
// Translates a FusedElementwise step's register program into straight-line
// CUDA C++ (one local variable per instruction), then embeds the compiled
// module in the plan. The device functions mirror the CPU interpreter's
// (runtime/src/kernels/fused.cpp) semantics: NaN-propagating min/max, the
// exact-erf GELU, the overflow-safe softplus.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/CudaTarget.h"

#include "format/cuda_abi.h"
#include "format/plan_writer.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <bitset>
#include <cstring>

using namespace mlir;
namespace fb = moert::fb;

namespace moec::cuda {

llvm::Expected<uint32_t> parseCudaArch(llvm::StringRef arch) {
  uint32_t value = 0;
  llvm::StringRef digits = arch;
  if (!digits.consume_front("sm_") || digits.getAsInteger(10, value) ||
      value < 50 || value > 999)
    return llvm::createStringError(
        "--cuda-arch must be sm_<compute capability times ten> with a value "
        "of at least 50, e.g. sm_90, not '" +
        arch + "'");
  return value;
}

namespace {

/// Device helpers every generated module starts with. NVRTC compiles them
/// without any header; the math functions are CUDA built-ins.
constexpr const char *kPrelude = R"cuda(
static __device__ __forceinline__ float moert_nan() {
  return __int_as_float(0x7fc00000);
}
static __device__ __forceinline__ float moert_max(float a, float b) {
  return (a != a || b != b) ? moert_nan() : (a < b ? b : a);
}
static __device__ __forceinline__ float moert_min(float a, float b) {
  return (a != a || b != b) ? moert_nan() : (b < a ? b : a);
}
static __device__ __forceinline__ float moert_sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
static __device__ __forceinline__ float moert_gelu(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
static __device__ __forceinline__ float moert_gelu_tanh(float x) {
  return 0.5f * x *
         (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
static __device__ __forceinline__ float moert_softplus(float x) {
  return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}
)cuda";

bool isBinary(fb::ExprOp op) {
  return op >= fb::ExprOp::Add && op <= fb::ExprOp::Min;
}
bool isUnary(fb::ExprOp op) {
  return op >= fb::ExprOp::Neg && op <= fb::ExprOp::Softplus;
}

/// The expression for binary `op` on operands `a` and `b`.
std::string binaryExpr(fb::ExprOp op, const std::string &a,
                       const std::string &b) {
  switch (op) {
  case fb::ExprOp::Add:
    return a + " + " + b;
  case fb::ExprOp::Sub:
    return a + " - " + b;
  case fb::ExprOp::Mul:
    return a + " * " + b;
  case fb::ExprOp::Div:
    return a + " / " + b;
  case fb::ExprOp::Pow:
    return "powf(" + a + ", " + b + ")";
  case fb::ExprOp::Max:
    return "moert_max(" + a + ", " + b + ")";
  case fb::ExprOp::Min:
    return "moert_min(" + a + ", " + b + ")";
  default:
    return {};
  }
}

/// The expression for unary `op` on operand `a`.
std::string unaryExpr(fb::ExprOp op, const std::string &a) {
  auto call = [&](const char *fn) { return std::string(fn) + "(" + a + ")"; };
  switch (op) {
  case fb::ExprOp::Neg:
    return "-" + a;
  case fb::ExprOp::Abs:
    return call("fabsf");
  case fb::ExprOp::Exp:
    return call("expf");
  case fb::ExprOp::Log:
    return call("logf");
  case fb::ExprOp::Sqrt:
    return call("sqrtf");
  case fb::ExprOp::Reciprocal:
    return "1.0f / " + a;
  case fb::ExprOp::Tanh:
    return call("tanhf");
  case fb::ExprOp::Erf:
    return call("erff");
  case fb::ExprOp::Sigmoid:
    return call("moert_sigmoid");
  case fb::ExprOp::Relu:
    return a + " < 0.0f ? 0.0f : " + a;
  case fb::ExprOp::Gelu:
    return call("moert_gelu");
  case fb::ExprOp::GeluTanh:
    return call("moert_gelu_tanh");
  case fb::ExprOp::Sin:
    return call("sinf");
  case fb::ExprOp::Cos:
    return call("cosf");
  case fb::ExprOp::Floor:
    return call("floorf");
  case fb::ExprOp::Ceil:
    return call("ceilf");
  case fb::ExprOp::Softplus:
    return call("moert_softplus");
  default:
    return {};
  }
}

/// A float constant spelled by its bits: exact, and valid for NaN and
/// infinities.
std::string floatLiteral(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return llvm::formatv("__int_as_float({0:x8})", bits).str();
}

} // namespace

llvm::Expected<std::string>
generateFusedKernel(const fb::FusedElementwiseAttrsT &attrs, int numInputs,
                    int numOutputs, llvm::StringRef name) {
  auto fail = [&](const llvm::Twine &why) -> llvm::Error {
    return llvm::createStringError("cannot generate CUDA kernel '" + name +
                                   "': " + why);
  };
  int numRegisters = attrs.num_registers;
  if (numRegisters < 1)
    return fail("num_registers must be at least 1");
  if (numInputs < 1 || numInputs > moert::cuda::kFusedMaxOperands)
    return fail(llvm::Twine(numInputs) + " inputs; 1 to " +
                llvm::Twine(moert::cuda::kFusedMaxOperands) + " supported");
  if (numOutputs < 1 || numOutputs > moert::cuda::kFusedMaxOperands ||
      static_cast<size_t>(numOutputs) != attrs.results.size())
    return fail(llvm::Twine(attrs.results.size()) + " results for " +
                llvm::Twine(numOutputs) + " outputs");
  if (attrs.program.empty())
    return fail("the program is empty");

  std::string body;
  llvm::raw_string_ostream os(body);
  // Each instruction defines a fresh variable; `current[r]` is the variable
  // that holds register r at this point of the program.
  std::vector<std::string> current(numRegisters);
  std::bitset<256> inputUsed;
  for (size_t k = 0; k < attrs.program.size(); ++k) {
    const fb::Instr &instr = attrs.program[k];
    fb::ExprOp op = instr.op();
    auto bad = [&](const llvm::Twine &why) {
      return fail("instruction " + llvm::Twine(k) + " (" +
                  fb::EnumNameExprOp(op) + "): " + why);
    };
    if (instr.dst() >= numRegisters)
      return bad("destination is not a register");
    auto operand = [&](uint8_t reg) -> const std::string * {
      if (reg >= numRegisters || current[reg].empty())
        return nullptr;
      return &current[reg];
    };
    std::string value;
    if (op == fb::ExprOp::Input) {
      if (instr.a() >= numInputs)
        return bad("input " + llvm::Twine(instr.a()) + " does not exist");
      inputUsed.set(instr.a());
      value = "in" + std::to_string(instr.a());
    } else if (op == fb::ExprOp::Const) {
      value = floatLiteral(instr.imm());
    } else if (isBinary(op)) {
      const std::string *a = operand(instr.a()), *b = operand(instr.b());
      if (!a || !b)
        return bad("reads a register before it is written");
      value = binaryExpr(op, *a, *b);
    } else if (isUnary(op)) {
      const std::string *a = operand(instr.a());
      if (!a)
        return bad("reads a register before it is written");
      value = unaryExpr(op, *a);
    } else {
      return bad("unknown operation");
    }
    std::string var = "v" + std::to_string(k);
    os << "    const float " << var << " = " << value << ";\n";
    current[instr.dst()] = var;
  }
  for (uint8_t reg : attrs.results)
    if (reg >= numRegisters || current[reg].empty())
      return fail("a result names register r" + llvm::Twine(reg) +
                  ", which is never written");

  std::string source;
  llvm::raw_string_ostream out(source);
  out << "extern \"C\" __global__ void __launch_bounds__("
      << moert::cuda::kFusedBlockSize << ")\n"
      << name << "(const moert_fused_args args) {\n"
      << "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      << "  for (long long i = (long long)blockIdx.x * blockDim.x + "
         "threadIdx.x;\n"
      << "       i < args.numel; i += stride) {\n";
  // Broadcast addressing: the output index decomposed along the (collapsed)
  // output dims, each coordinate times the input's stride on that dim.
  for (int in = 0; in < numInputs; ++in)
    if (inputUsed.test(in))
      out << "    long long off" << in << " = 0;\n";
  out << "    {\n      long long rest = i;\n"
      << "      for (int d = args.rank - 1; d >= 0; --d) {\n"
      << "        const long long c = rest % args.shape[d];\n"
      << "        rest /= args.shape[d];\n";
  for (int in = 0; in < numInputs; ++in)
    if (inputUsed.test(in))
      out << "        off" << in << " += c * args.strides[" << in << "][d];\n";
  out << "      }\n    }\n";
  for (int in = 0; in < numInputs; ++in)
    if (inputUsed.test(in))
      out << "    const float in" << in << " = __ldg(args.inputs[" << in
          << "] + off" << in << ");\n";
  out << body;
  // Output 0 may share its buffer with an input (in place): every input of
  // element i was read above, and it is stored last like on the CPU.
  for (int o = numOutputs - 1; o >= 0; --o)
    out << "    args.outputs[" << o << "][i] = " << current[attrs.results[o]]
        << ";\n";
  out << "  }\n}\n";
  return source;
}

LogicalResult addCudaKernels(moert::PlanWriter &writer, uint32_t arch,
                             Location loc, CudaModuleInfo *info) {
  std::string source = std::string("// Generated by moec --target cuda.\n") +
                       moert::cuda::kFusedArgsSource + kPrelude;
  std::vector<std::string> kernels;
  // Which step each kernel belongs to, named only once the module compiled.
  std::vector<std::pair<int, int>> owners;
  for (int device = 0; device < writer.numSchedules(); ++device) {
    moert::ScheduleBuilder &schedule = writer.schedule(device);
    for (size_t index = 0; index < schedule.numSteps(); ++index) {
      fb::StepT &step = schedule.step(static_cast<int>(index));
      // The CUDA backend has no kernels for packed int4/int8 weights.
      const auto *ffn = step.attrs.AsFfnAttrs();
      if (step.op == fb::OpKind::MatMulNBits || (ffn && ffn->block_quant))
        return emitError(loc)
               << "step '" << step.name
               << "' reads block-quantized int4/int8 weights, which the CUDA "
                  "backend has no kernels for; compile for the CPU";
      if (step.op != fb::OpKind::FusedElementwise)
        continue;
      const auto *attrs = step.attrs.AsFusedElementwiseAttrs();
      if (!attrs)
        return emitError(loc)
               << "fused step '" << step.name << "' has no program";
      std::string name = llvm::formatv("moe_fused_d{0}_s{1}", device, index);
      llvm::Expected<std::string> kernel =
          generateFusedKernel(*attrs, static_cast<int>(step.inputs.size()),
                              static_cast<int>(step.outputs.size()), name);
      if (!kernel)
        return emitError(loc) << "step '" << step.name
                              << "': " << llvm::toString(kernel.takeError());
      source += "\n// step '" + step.name + "'\n" + *kernel;
      kernels.push_back(name);
      owners.emplace_back(device, static_cast<int>(index));
    }
  }
  // A plan without fused regions still gets a (kernel-free) module: the
  // runtime then needs nothing but its own kernels.
  llvm::Expected<std::string> ptx = compileToPtx(source, arch);
  if (!ptx)
    return emitError(loc) << llvm::toString(ptx.takeError());
  for (size_t k = 0; k < kernels.size(); ++k)
    writer.schedule(owners[k].first).step(owners[k].second).kernel = kernels[k];
  if (info) {
    info->source = source;
    info->ptx = *ptx;
    info->kernels = kernels;
  }
  writer.setCudaModule(arch, std::move(*ptx), std::move(kernels));
  return success();
}

} // namespace moec::cuda
