//===- ops.cpp - Step operation registry and shared checks ----------------===//

#include "exec/ops.h"

#include "absl/strings/str_join.h"

namespace moert {

namespace detail {

std::string Shape::str() const {
  return absl::StrCat("[", absl::StrJoin(dims, dims + rank, ", "), "]");
}

std::string dtypeSetName(DTypeSet set) {
  std::vector<const char *> names;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I64,
                      DType::I32, DType::Bool, DType::I8})
    if (set & bit(dtype))
      names.push_back(dtypeName(dtype));
  return absl::StrJoin(names, ", ");
}

std::string declaredShape(const TensorInfo &info) {
  std::vector<std::string> dims;
  for (int i = 0; i < info.rank; ++i) {
    const DimInfo &dim = info.dims[i];
    dims.push_back(dim.kind == fb::DimKind::Static
                       ? absl::StrCat(dim.bound)
                       : absl::StrCat("<=", dim.bound));
  }
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

absl::Status StepCheck::inType(int i, DTypeSet allowed) const {
  if (!has(i) || (allowed & bit(in(i).dtype)))
    return absl::OkStatus();
  return error("input ", i, " '", in(i).name, "' has dtype ",
               dtypeName(in(i).dtype), "; expected ", dtypeSetName(allowed));
}

absl::Status StepCheck::outType(int o, DTypeSet allowed) const {
  if (allowed & bit(out(o).dtype))
    return absl::OkStatus();
  return error("output ", o, " '", out(o).name, "' has dtype ",
               dtypeName(out(o).dtype), "; expected ", dtypeSetName(allowed));
}

absl::Status StepCheck::outMatchesIn(int o, int i) const {
  if (!has(i) || out(o).dtype == in(i).dtype)
    return absl::OkStatus();
  return error("output ", o, " '", out(o).name, "' has dtype ",
               dtypeName(out(o).dtype), " but input ", i, " '", in(i).name,
               "' has dtype ", dtypeName(in(i).dtype));
}

absl::Status StepCheck::sameInTypes(int a, int b) const {
  if (!has(a) || !has(b) || in(a).dtype == in(b).dtype)
    return absl::OkStatus();
  return error("input ", a, " '", in(a).name, "' has dtype ",
               dtypeName(in(a).dtype), " but input ", b, " '", in(b).name,
               "' has dtype ", dtypeName(in(b).dtype));
}

absl::Status StepCheck::inRank(int i, int rank) const {
  if (!has(i) || in(i).rank == rank)
    return absl::OkStatus();
  return error("input ", i, " '", in(i).name, "' has rank ", in(i).rank,
               "; expected ", rank);
}

absl::Status StepCheck::inScalar(int i) const {
  if (!has(i))
    return absl::OkStatus();
  const TensorInfo &info = in(i);
  if (info.rank == 0 || (info.rank == 1 && info.dims[0].bound <= 1))
    return absl::OkStatus();
  return error("input ", i, " '", info.name, "' must be a scalar or a ",
               "one-element vector; it is declared ", declaredShape(info));
}

absl::Status StepCheck::outRank(int o, int rank) const {
  if (out(o).rank == rank)
    return absl::OkStatus();
  return error("output ", o, " '", out(o).name, "' has rank ", out(o).rank,
               "; expected ", rank);
}

absl::StatusOr<Tensor *> KernelContext::allocate(int o, const Shape &shape) {
  const TensorInfo &info = schedule_.tensors[step_.outputs[o]];
  auto mismatch = [&](const auto &...why) {
    return error("output ", o, " '", info.name, "' has shape ", shape.str(),
                 ", which does not fit the planned ", declaredShape(info), ": ",
                 why...);
  };
  if (shape.rank != info.rank)
    return mismatch("rank differs");
  for (int d = 0; d < shape.rank; ++d) {
    const DimInfo &dim = info.dims[d];
    int64_t size = shape[d];
    if (size < 0)
      return mismatch("dim ", d, " is negative");
    switch (dim.kind) {
    case fb::DimKind::Static:
      if (size != dim.bound)
        return mismatch("dim ", d, " must be ", dim.bound);
      break;
    case fb::DimKind::Symbolic: {
      int64_t value = symbolValues_[dim.symbol];
      if (value >= 0 && size != value)
        return mismatch("dim ", d, " must equal symbol value ", value);
      if (size > dim.bound)
        return mismatch("dim ", d, " exceeds its bound ", dim.bound);
      break;
    }
    default:
      if (size > dim.bound)
        return mismatch("dim ", d, " exceeds its bound ", dim.bound);
      break;
    }
  }
  Tensor &tensor = tensors_[step_.outputs[o]];
  if (tensor.isCacheView()) {
    // A cache written in place (kv_cache_in_place.h): the Concat appending to
    // it keeps the past where it is, so only the pitch bounds the shape.
    if (tensor.cacheAxis >= shape.rank ||
        shape[tensor.cacheAxis] > tensor.cachePitch)
      return mismatch("the KV cache it is written into holds ",
                      tensor.cachePitch, " positions along axis ",
                      tensor.cacheAxis);
    tensor.shape = shape;
    return &tensor;
  }
  tensor.shape = shape;
  // An output sharing an input's arena slot (validated in-place) must match
  // it element for element: kernels read element i before writing it.
  for (int i = 0; i < numInputs(); ++i)
    if (has(i) && in(i).data == tensor.data && in(i).numel() > 0 &&
        shape.numel() > 0 &&
        (in(i).numel() != shape.numel() ||
         dtypeSize(in(i).dtype) != dtypeSize(info.dtype)))
      return error("output ", o, " '", info.name, "' is computed in place of ",
                   "input ", i, " but their element counts or sizes differ");
  return &tensor;
}

void OpRegistry::add(fb::OpKind kind, const OpDef &def) {
  defs_[static_cast<int>(kind)] = def;
}

const OpDef *OpRegistry::find(fb::OpKind kind) const {
  int index = static_cast<int>(kind);
  if (index <= 0 || index > static_cast<int>(fb::OpKind::MAX))
    return nullptr;
  return defs_[index].kernel ? &defs_[index] : nullptr;
}

const OpDef *findOp(fb::OpKind kind) {
  static const OpRegistry registry = [] {
    OpRegistry r;
    registerElementwiseOps(r);
    registerFusedOps(r);
    registerMatMulOps(r);
    registerConvOps(r);
    registerGridSampleOps(r);
    registerReductionOps(r);
    registerNormalizationOps(r);
    registerShapeOps(r);
    registerIndexingOps(r);
    registerMoeOps(r);
    registerCollectiveOps(r);
    registerAttentionOps(r);
    registerLinearAttentionOps(r);
    registerCausalConvOps(r);
    registerQuantOps(r);
    registerLinearOps(r);
    return r;
  }();
  return registry.find(kind);
}

} // namespace detail
} // namespace moert
