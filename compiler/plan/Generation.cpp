//===- Generation.cpp - Finding the KV caches of generation graphs -------===//

#include "compiler/plan/Generation.h"

#include "dialects/moe/MoeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace moec::plan {

std::string getArgName(func::FuncOp func, unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, "moe.name"))
    return name.str();
  return "arg" + std::to_string(index);
}

std::string getResultName(func::FuncOp func, unsigned index) {
  if (auto name = func.getResultAttrOfType<StringAttr>(index, "moe.name"))
    return name.str();
  return "result" + std::to_string(index);
}

namespace {

/// Reports errors located at one model file.
struct FileDiag {
  MLIRContext *context;
  StringRef path;
  InFlightDiagnostic error() const {
    return emitError(FileLineColLoc::get(context, path, 0, 0));
  }
};

std::string getDimParam(ArrayAttr params, int64_t dim) {
  if (params && dim < static_cast<int64_t>(params.size()))
    if (auto param = dyn_cast<StringAttr>(params[dim]))
      return param.str();
  return "";
}

/// "[1, 2, ?, 16]".
std::string describe(Type type) {
  auto shaped = cast<RankedTensorType>(type);
  std::string out = "[";
  for (auto [i, size] : llvm::enumerate(shaped.getShape()))
    out += (i ? ", " : "") +
           (ShapedType::isDynamic(size) ? "?" : std::to_string(size));
  return out + "]";
}

/// The name without the prefixes exporters put on a cache's input and
/// output names, so that the decode's "input.cache.layers.0.keys" and the
/// prefill's "cache.layers.0.keys" meet.
StringRef getCacheStem(StringRef name) {
  for (StringRef prefix : {"input.", "output.", "past_key_values.", "present.",
                           "past.", "past_", "present_"})
    if (name.consume_front(prefix))
      break;
  return name;
}

/// The first decimal number of `name` ("layers.3.keys" -> 3), or -1.
int getLayerHint(StringRef name) {
  size_t start = name.find_first_of("0123456789");
  if (start == StringRef::npos)
    return -1;
  unsigned value = 0;
  StringRef digits = name.drop_front(start).take_while(llvm::isDigit);
  if (digits.size() > 6 || digits.getAsInteger(10, value))
    return -1;
  return static_cast<int>(value);
}

/// Whether `a` and `b` have one rank and agree on every dimension but
/// `axis` that both know.
bool sameApartFrom(RankedTensorType a, RankedTensorType b, int64_t axis) {
  if (a.getRank() != b.getRank() || a.getElementType() != b.getElementType())
    return false;
  for (int64_t d = 0; d < a.getRank(); ++d)
    if (d != axis && !a.isDynamicDim(d) && !b.isDynamicDim(d) &&
        a.getDimSize(d) != b.getDimSize(d))
      return false;
  return true;
}

/// The inputs the generator sets besides the caches.
struct TokenInputs {
  std::string ids;
  /// Empty where the graph has none.
  std::string positions;
  std::string mask;
  /// The ONNX dim_param of the mask's length ("" if unnamed).
  std::string maskDimParam;
};

FailureOr<func::FuncOp> getMain(ModuleOp module, const FileDiag &diag) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main || main.getBody().empty())
    return diag.error() << "the graph has no main function", failure();
  return main;
}

/// The token inputs of `func` besides the `skip` arguments: the ids, and
/// the positions and the attention mask where the graph has them (by name:
/// "position", "mask"); of two inputs named neither, the ids are the one
/// read by an embedding gather and the other the positions.
LogicalResult findTokenInputs(func::FuncOp func,
                              const llvm::DenseSet<unsigned> &skip,
                              const FileDiag &diag, TokenInputs &found) {
  SmallVector<unsigned> unnamed, positions, masks;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    if (skip.contains(i))
      continue;
    auto type = cast<RankedTensorType>(func.getArgument(i).getType());
    // M-RoPE's positions: [r, batch, n].
    bool positionRows =
        type.getRank() == 3 && !type.isDynamicDim(0) &&
        type.getDimSize(0) <= 8 &&
        StringRef(getArgName(func, i)).contains_insensitive("position");
    if (!type.getElementType().isInteger(64) ||
        (type.getRank() != 2 && !positionRows)) {
      diag.error() << "input '" << getArgName(func, i) << "' " << describe(type)
                   << " is neither the token ids, the positions, the "
                      "attention mask (i64 [1, n]) nor a KV cache; a "
                      "generation plan feeds only those";
      return failure();
    }
    StringRef name = getArgName(func, i);
    if (name.contains_insensitive("position"))
      positions.push_back(i);
    else if (name.contains_insensitive("mask"))
      masks.push_back(i);
    else
      unnamed.push_back(i);
  }
  auto isEmbedded = [&](unsigned i) {
    return llvm::any_of(func.getArgument(i).getUsers(), [&](Operation *user) {
      auto gather = dyn_cast<moe::GatherOp>(user);
      return gather && gather->getOperand(1) == func.getArgument(i);
    });
  };
  if (unnamed.size() == 2 && positions.empty()) {
    if (isEmbedded(unnamed[0]) == isEmbedded(unnamed[1])) {
      diag.error() << "cannot tell the token ids from the positions among "
                   << "inputs '" << getArgName(func, unnamed[0]) << "' and '"
                   << getArgName(func, unnamed[1])
                   << "' (neither name says 'position' and neither alone is "
                      "read by an embedding Gather)";
      return failure();
    }
    if (isEmbedded(unnamed[1]))
      std::swap(unnamed[0], unnamed[1]);
    positions.push_back(unnamed.pop_back_val());
  }
  if (unnamed.size() != 1 || positions.size() > 1 || masks.size() > 1) {
    InFlightDiagnostic error = diag.error();
    error << "a generation graph takes the token ids, and optionally their "
             "positions and an attention mask (i64 [1, n]), besides its "
             "caches; this one has "
          << unnamed.size() + positions.size() + masks.size() << " such inputs";
    return failure();
  }
  found.ids = getArgName(func, unnamed.front());
  if (!positions.empty())
    found.positions = getArgName(func, positions.front());
  if (!masks.empty()) {
    found.mask = getArgName(func, masks.front());
    found.maskDimParam = getDimParam(
        func.getArgAttrOfType<ArrayAttr>(masks.front(), "moe.dim_params"), 1);
  }
  return success();
}

/// The logits: the one f32 rank-3 output among those not in `skip`,
/// preferring one named "logits".
FailureOr<std::string> findLogits(func::FuncOp func,
                                  const llvm::DenseSet<unsigned> &skip,
                                  const FileDiag &diag) {
  SmallVector<std::string> candidates;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto type = cast<RankedTensorType>(func.getResultTypes()[i]);
    if (skip.contains(i) || !type.getElementType().isF32() ||
        type.getRank() != 3 || type.isDynamicDim(2))
      continue;
    candidates.push_back(getResultName(func, i));
  }
  if (candidates.size() == 1)
    return candidates.front();
  if (llvm::is_contained(candidates, "logits"))
    return std::string("logits");
  InFlightDiagnostic error = diag.error();
  error << "found " << candidates.size()
        << " outputs that may be the logits (f32 [1, n, vocab] besides the "
           "caches); a generation graph has one, or one named 'logits'";
  return failure();
}

} // namespace

std::vector<std::string> dropPassThroughStates(ModuleOp module) {
  std::vector<std::string> dropped;
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func || func.getBody().empty())
    return dropped;
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  llvm::BitVector args(func.getNumArguments()), results(func.getNumResults());
  for (BlockArgument arg : body.getArguments()) {
    std::string name = getArgName(func, arg.getArgNumber());
    if (getCacheStem(name) == name ||
        llvm::any_of(arg.getUsers(), [&](Operation *op) { return op != ret; }))
      continue;
    llvm::BitVector mine(func.getNumResults());
    bool other = false;
    for (OpOperand &use : arg.getUses()) {
      unsigned index = use.getOperandNumber();
      std::string result = getResultName(func, index);
      if (getCacheStem(result) == result ||
          getCacheStem(result) != getCacheStem(name))
        other = true;
      mine.set(index);
    }
    if (other || mine.none())
      continue;
    args.set(arg.getArgNumber());
    results |= mine;
    dropped.push_back(name);
  }
  if (args.none())
    return dropped;
  SmallVector<Value> kept;
  for (auto [index, value] : llvm::enumerate(ret.getOperands()))
    if (!results.test(index))
      kept.push_back(value);
  ret->setOperands(kept);
  (void)func.eraseResults(results);
  (void)func.eraseArguments(args);
  return dropped;
}

void specializeForGeneration(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func || func.getBody().empty())
    return;
  dropPassThroughStates(module);
  Block &body = func.getBody().front();
  SmallVector<SmallVector<int64_t>> shapes;
  for (BlockArgument arg : body.getArguments())
    shapes.emplace_back(cast<RankedTensorType>(arg.getType()).getShape());

  // The batch: the named dimension 0 of the token inputs (i64, rank 2).
  llvm::StringSet<> batchParams;
  for (BlockArgument arg : body.getArguments()) {
    auto type = cast<RankedTensorType>(arg.getType());
    auto params =
        func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "moe.dim_params");
    if (type.getElementType().isInteger(64) && type.getRank() == 2 &&
        type.isDynamicDim(0) && !getDimParam(params, 0).empty())
      batchParams.insert(getDimParam(params, 0));
  }
  for (BlockArgument arg : body.getArguments()) {
    auto params =
        func.getArgAttrOfType<ArrayAttr>(arg.getArgNumber(), "moe.dim_params");
    for (auto [d, size] : llvm::enumerate(shapes[arg.getArgNumber()]))
      if (ShapedType::isDynamic(size) &&
          batchParams.contains(getDimParam(params, d)))
        size = 1;
  }
  // A past concatenated into a present: its other dimensions are those of
  // what is appended to it.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (Value value : ret.getOperands()) {
    auto concat = value.getDefiningOp<moe::ConcatOp>();
    auto past = concat && concat.getInputs().size() > 1
                    ? dyn_cast<BlockArgument>(concat.getInputs().front())
                    : BlockArgument();
    if (!past || past.getOwner() != &body)
      continue;
    SmallVector<int64_t> &shape = shapes[past.getArgNumber()];
    // The axis attribute reads as uint64_t: a negative axis wraps.
    int64_t axis = static_cast<int64_t>(concat.getAxis());
    if (axis < 0)
      axis += static_cast<int64_t>(shape.size());
    for (Value appended : concat.getInputs().drop_front()) {
      auto type = cast<RankedTensorType>(appended.getType());
      if (type.getRank() != int64_t(shape.size()))
        continue;
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (d != axis && ShapedType::isDynamic(shape[d]))
          shape[d] = type.getDimSize(d);
    }
  }
  // A state: an input that an output of its name replaces takes that
  // output's static sizes (a window-sized cache, whose size is a symbol).
  for (BlockArgument arg : body.getArguments()) {
    std::string name = getArgName(func, arg.getArgNumber());
    SmallVector<int64_t> &shape = shapes[arg.getArgNumber()];
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      auto type = cast<RankedTensorType>(value.getType());
      if (getCacheStem(getResultName(func, index)) != getCacheStem(name) ||
          type.getRank() != int64_t(shape.size()))
        continue;
      for (int64_t d = 0; d < type.getRank(); ++d)
        if (ShapedType::isDynamic(shape[d]))
          shape[d] = type.getDimSize(d);
    }
  }
  SmallVector<Type> types;
  for (BlockArgument arg : body.getArguments()) {
    auto type = cast<RankedTensorType>(arg.getType());
    auto specialized = RankedTensorType::get(shapes[arg.getArgNumber()],
                                             type.getElementType());
    arg.setType(specialized);
    types.push_back(specialized);
  }
  func.setFunctionType(
      FunctionType::get(module.getContext(), types, func.getResultTypes()));
}

FailureOr<GenerationSignature>
findGenerationSignature(ModuleOp decode, StringRef decodePath, ModuleOp prefill,
                        StringRef prefillPath, int64_t maxSeq,
                        const GenerationSearch &search) {
  FileDiag decodeDiag{decode.getContext(), decodePath};
  FailureOr<func::FuncOp> main = getMain(decode, decodeDiag);
  if (failed(main))
    return failure();
  func::FuncOp func = *main;
  GenerationSignature sig;
  sig.maxSeq = maxSeq;

  // A cache pair: output i is a concat whose first input is graph input j,
  // along a dynamic dimension of j, the other dimensions kept.
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  llvm::DenseSet<unsigned> cacheArgs, cacheResults;
  for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
    auto concat = value.getDefiningOp<moe::ConcatOp>();
    if (!concat || concat.getInputs().size() < 2)
      continue;
    auto past = dyn_cast<BlockArgument>(concat.getInputs().front());
    if (!past || past.getOwner() != &func.getBody().front() ||
        cacheArgs.contains(past.getArgNumber()))
      continue;
    auto pastType = cast<RankedTensorType>(past.getType());
    auto presentType = cast<RankedTensorType>(value.getType());
    int64_t axis = concat.getAxis();
    if (axis < 0)
      axis += pastType.getRank();
    if (axis < 0 || axis >= pastType.getRank() ||
        !pastType.isDynamicDim(axis) ||
        !sameApartFrom(pastType, presentType, axis))
      continue;
    unsigned argIndex = past.getArgNumber();
    CachePairInfo pair;
    pair.input = getArgName(func, argIndex);
    pair.output = getResultName(func, index);
    pair.prefillOutput = pair.output;
    pair.axis = static_cast<int>(axis);
    pair.pastDimParam = getDimParam(
        func.getArgAttrOfType<ArrayAttr>(argIndex, "moe.dim_params"), axis);
    if (!pastType.getElementType().isF32()) {
      decodeDiag.error() << "cache input '" << pair.input << "' is "
                         << pastType.getElementType()
                         << "; the generator holds f32 caches only";
      return failure();
    }
    for (int64_t d = 0; d < pastType.getRank(); ++d)
      if (d != axis && pastType.isDynamicDim(d)) {
        decodeDiag.error()
            << "cache input '" << pair.input << "' " << describe(pastType)
            << " has a dynamic dimension " << d << " besides its sequence "
            << "axis " << axis
            << "; export the graph with a static batch, heads and head size";
        return failure();
      }
    int hint = getLayerHint(getCacheStem(pair.input));
    pair.layer = hint >= 0 ? hint : static_cast<int>(sig.cache.size());
    sig.cache.push_back(std::move(pair));
    cacheArgs.insert(argIndex);
    cacheResults.insert(index);
  }
  // A state pair: a float input that a same-named output (once the cache
  // prefixes are stripped) of its shape replaces each step.
  for (BlockArgument past : func.getArguments()) {
    auto pastType = cast<RankedTensorType>(past.getType());
    if (cacheArgs.contains(past.getArgNumber()) ||
        !pastType.getElementType().isF32())
      continue;
    std::string pastName = getArgName(func, past.getArgNumber());
    StringRef stem = getCacheStem(pastName);
    for (auto [index, value] : llvm::enumerate(ret.getOperands())) {
      if (cacheResults.contains(index) ||
          getCacheStem(getResultName(func, index)) != stem ||
          !sameApartFrom(pastType, cast<RankedTensorType>(value.getType()),
                         /*axis=*/-1))
        continue;
      CachePairInfo pair;
      pair.input = getArgName(func, past.getArgNumber());
      pair.output = getResultName(func, index);
      pair.prefillOutput = pair.output;
      pair.state = true;
      if (!pastType.hasStaticShape()) {
        decodeDiag.error() << "state input '" << pair.input << "' "
                           << describe(pastType)
                           << " has a dynamic dimension; a state the output "
                              "replaces each step has a static shape";
        return failure();
      }
      int hint = getLayerHint(stem);
      pair.layer = hint >= 0 ? hint : static_cast<int>(sig.cache.size());
      sig.cache.push_back(std::move(pair));
      cacheArgs.insert(past.getArgNumber());
      cacheResults.insert(index);
      break;
    }
  }
  if (llvm::any_of(sig.cache, [](const CachePairInfo &p) { return p.state; }) &&
      prefill && !search.firstPromptPrefill) {
    decodeDiag.error() << "the graph has state inputs (replaced each step, "
                          "not grown); such a graph runs the prompt itself: "
                          "drop --prefill";
    return failure();
  }
  if (sig.cache.empty()) {
    decodeDiag.error()
        << "no KV-cache pair: no graph input [b, h, past, d] is concatenated "
           "along its dynamic 'past' dimension into a graph output, so the "
           "graph cannot decode token by token (export it with its past "
           "key/value inputs)";
    return failure();
  }
  TokenInputs tokens;
  llvm::DenseSet<unsigned> notTokens = cacheArgs;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (llvm::is_contained(search.otherInputs, getArgName(func, i)))
      notTokens.insert(i);
  if (failed(findTokenInputs(func, notTokens, decodeDiag, tokens)))
    return failure();
  sig.inputIds = tokens.ids;
  sig.positionIds = tokens.positions;
  sig.attentionMask = tokens.mask;
  sig.attentionMaskDimParam = tokens.maskDimParam;
  FailureOr<std::string> logits = findLogits(func, cacheResults, decodeDiag);
  if (failed(logits))
    return failure();
  sig.logits = *logits;
  if (!prefill && search.stagedPrefill)
    return sig;
  if (!prefill) {
    // One graph runs the prompt too (with an empty past): its token inputs
    // take the prompt's length, and its pasts start empty.
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      if (getArgName(func, i) != sig.inputIds)
        continue;
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      if (!type.isDynamicDim(1)) {
        decodeDiag.error()
            << "input '" << sig.inputIds << "' is " << describe(type)
            << ": without --prefill the decode graph runs the prompt too, so "
               "its token dimension must be dynamic (give the prefill graph "
               "with --prefill)";
        return failure();
      }
      sig.prefillSeqDimParam =
          getDimParam(func.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params"), 1);
    }
    sig.singleGraph = true;
    return sig;
  }

  // The prefill: the same token inputs and logits by name, and one cache
  // output per pair, matched by name stem (else in order) and shape.
  FileDiag prefillDiag{prefill.getContext(), prefillPath};
  FailureOr<func::FuncOp> prefillMain = getMain(prefill, prefillDiag);
  if (failed(prefillMain))
    return failure();
  func::FuncOp pre = *prefillMain;
  TokenInputs preTokens;
  if (failed(findTokenInputs(pre, {}, prefillDiag, preTokens)))
    return failure();
  std::string ids = preTokens.ids;
  // A first prompt's attention may mask causally by itself.
  bool maskless = search.firstPromptPrefill && preTokens.mask.empty();
  if (ids != sig.inputIds || preTokens.positions != sig.positionIds ||
      (preTokens.mask != sig.attentionMask && !maskless)) {
    prefillDiag.error() << "the token inputs are '" << ids << "', '"
                        << preTokens.positions << "' and '" << preTokens.mask
                        << "' but the decode graph's are '" << sig.inputIds
                        << "', '" << sig.positionIds << "' and '"
                        << sig.attentionMask
                        << "'; the two graphs must name them alike";
    return failure();
  }
  for (unsigned i = 0; i < pre.getNumArguments(); ++i)
    if (getArgName(pre, i) == ids)
      sig.prefillSeqDimParam =
          getDimParam(pre.getArgAttrOfType<ArrayAttr>(i, "moe.dim_params"), 1);
  int logitsIndex = -1;
  for (unsigned i = 0; i < pre.getNumResults(); ++i)
    if (getResultName(pre, i) == sig.logits)
      logitsIndex = static_cast<int>(i);
  if (logitsIndex < 0) {
    prefillDiag.error() << "no output '" << sig.logits
                        << "' (the decode graph's logits)";
    return failure();
  }
  if (failed(
          matchPrefillCaches(decode, prefill, prefillPath, {sig.logits}, sig)))
    return failure();
  return sig;
}

LogicalResult matchPrefillCaches(ModuleOp decode, ModuleOp prefill,
                                 StringRef prefillPath,
                                 ArrayRef<std::string> skip,
                                 GenerationSignature &sig) {
  FileDiag prefillDiag{prefill.getContext(), prefillPath};
  FailureOr<func::FuncOp> prefillMain = getMain(prefill, prefillDiag);
  FailureOr<func::FuncOp> decodeMain =
      getMain(decode, FileDiag{decode.getContext(), prefillPath});
  if (failed(prefillMain) || failed(decodeMain))
    return failure();
  func::FuncOp pre = *prefillMain, func = *decodeMain;
  SmallVector<unsigned> caches;
  for (unsigned i = 0; i < pre.getNumResults(); ++i)
    if (!llvm::is_contained(skip, getResultName(pre, i)))
      caches.push_back(i);
  if (caches.size() != sig.cache.size()) {
    prefillDiag.error() << "has " << caches.size() << " outputs besides '"
                        << llvm::join(skip, "', '")
                        << "' but the decode graph has " << sig.cache.size()
                        << " KV-cache pairs";
    return failure();
  }
  llvm::DenseSet<unsigned> used;
  for (auto [k, pair] : llvm::enumerate(sig.cache)) {
    // By name stem first, else the k-th remaining output in order.
    std::optional<unsigned> match;
    for (unsigned i : caches)
      if (!used.contains(i) &&
          getCacheStem(getResultName(pre, i)) == getCacheStem(pair.output))
        match = i;
    if (!match)
      for (unsigned i : caches)
        if (!used.contains(i)) {
          match = i;
          break;
        }
    used.insert(*match);
    auto startType = cast<RankedTensorType>(pre.getResultTypes()[*match]);
    RankedTensorType pastType;
    for (unsigned a = 0; a < func.getNumArguments(); ++a)
      if (getArgName(func, a) == pair.input)
        pastType = cast<RankedTensorType>(func.getArgument(a).getType());
    pair.prefillOutput = getResultName(pre, *match);
    if (!pastType || !sameApartFrom(pastType, startType, pair.axis)) {
      prefillDiag.error() << "cache output '" << pair.prefillOutput << "' is "
                          << describe(startType) << " but the decode graph's '"
                          << pair.input << "' is "
                          << (pastType ? describe(pastType) : "missing")
                          << "; the shapes must agree but for axis "
                          << pair.axis;
      return failure();
    }
  }
  return success();
}

std::vector<std::string> getPastSymbols(const GenerationSignature &sig) {
  std::vector<std::string> symbols;
  for (const CachePairInfo &pair : sig.cache)
    if (!pair.state)
      symbols.push_back(pair.pastDimParam.empty()
                            ? pair.input + "." + std::to_string(pair.axis)
                            : pair.pastDimParam);
  return symbols;
}

std::vector<std::string> getGenerationBounds(const GenerationSignature &sig,
                                             bool prefill) {
  std::vector<std::string> bounds;
  auto add = [&](const std::string &param) {
    if (param.empty())
      return;
    std::string bound = param + "=" + std::to_string(sig.maxSeq - 1);
    if (!llvm::is_contained(bounds, bound))
      bounds.push_back(bound);
  };
  if (prefill || sig.singleGraph)
    add(sig.prefillSeqDimParam);
  if (!prefill)
    for (const CachePairInfo &pair : sig.cache)
      add(pair.pastDimParam);
  // The mask spans the past and the new tokens: max_seq at most.
  if (!sig.attentionMaskDimParam.empty())
    bounds.push_back(sig.attentionMaskDimParam + "=" +
                     std::to_string(sig.maxSeq));
  return bounds;
}

} // namespace moec::plan
