//===- generated_inputs.cpp - moe-run's inputs: given or generated --------===//

#include "generated_inputs.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <random>
#include <set>
#include <system_error>

namespace moe_run {
namespace {

const moert::SymbolDesc *findSymbol(const moert::Plan &plan,
                                    const std::string &name) {
  for (const moert::SymbolDesc &symbol : plan.symbols())
    if (symbol.name == name)
      return &symbol;
  return nullptr;
}

/// Whether `dtype` is one of the integer dtypes token ids come in.
bool isInteger(moert::DType dtype) {
  return dtype == moert::DType::I64 || dtype == moert::DType::I32;
}

/// The compile flag that widens `symbol`'s range to `value`: its own
/// `--bound` when moec was given one, else the default bound of the plan's
/// kind (--max-seq for generation plans, --max-tokens for the others).
std::string compileFix(const moert::Plan &plan, const std::string &symbol,
                       int64_t value) {
  std::string defaultFlag = "max-tokens";
  for (const auto &[flag, setting] : plan.provenance().flags) {
    if (flag == "max-seq")
      defaultFlag = flag;
    if (flag != "bound")
      continue;
    for (absl::string_view bound : absl::StrSplit(setting, ','))
      if (bound.substr(0, bound.find('=')) == symbol)
        return absl::StrCat("--bound ", symbol, "=", value);
  }
  return absl::StrCat("--", defaultFlag, " ", value);
}

/// The size a generated input takes for one declared dim: --dim, else the
/// token axis --tokens (default 16, clamped into its range with a note),
/// else the symbol's fixed size or 1 (clamped into its range). An explicit
/// size outside the symbol's range is an error naming the flags that fix it.
absl::StatusOr<int64_t>
generatedDim(const moert::Plan &plan, const moert::DimDesc &dim,
             const InputOptions &options, const std::string &tokenAxis,
             std::set<std::string> &clamped, std::vector<std::string> &notes) {
  if (dim.kind != moert::DimDesc::Kind::Symbolic)
    return dim.bound;
  const moert::SymbolDesc *symbol = findSymbol(plan, dim.symbol);
  int64_t lo = symbol ? symbol->min : 0, hi = symbol ? symbol->max : 0;
  std::string flag;
  int64_t value = 0;
  if (auto it = options.dims.find(dim.symbol); it != options.dims.end()) {
    value = it->second;
    flag = absl::StrCat("--dim ", dim.symbol, "=");
  } else if (dim.symbol != tokenAxis) {
    // Not the token axis: one sequence (or what the plan fixes), whatever
    // --tokens says, so that --tokens N runs N tokens.
    return symbol ? std::clamp<int64_t>(1, lo, std::max(lo, hi)) : 1;
  } else if (options.tokens >= 0) {
    value = options.tokens;
    flag = "--tokens ";
  } else {
    value = std::clamp(kDefaultTokens, lo, std::max(lo, hi));
    if (value != kDefaultTokens && clamped.insert(dim.symbol).second)
      notes.push_back(absl::StrCat(
          "symbol '", dim.symbol, "' of the generated inputs is ", value,
          ", the plan's ", value < kDefaultTokens ? "largest" : "smallest",
          " (range [", lo, ", ", hi, "]), not the default ", kDefaultTokens,
          "; --tokens N sets it"));
    return value;
  }
  if (symbol && (value < lo || value > hi))
    return absl::InvalidArgumentError(absl::StrCat(
        flag, value, " sets symbol '", dim.symbol, "' to ", value,
        ", outside the plan's range [", lo, ", ", hi, "]; ",
        value > hi ? absl::StrCat("compile with ",
                                  compileFix(plan, dim.symbol, value), " or ")
                   : "",
        "pass ", flag, value > hi ? hi : lo));
  return value;
}

template <typename T>
void fillIntegers(std::vector<uint8_t> &bytes, int64_t count, int64_t lo,
                  int64_t hi, std::mt19937_64 &rng) {
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  bytes.resize(count * sizeof(T));
  T *p = reinterpret_cast<T *>(bytes.data());
  for (int64_t i = 0; i < count; ++i)
    p[i] = static_cast<T>(dist(rng));
}

/// Generates the value of input `desc` from `rng` (the stream of --seed).
absl::StatusOr<RunInput>
generateInput(const moert::Plan &plan, const moert::TensorDesc &desc,
              const InputOptions &options, const std::string &tokenAxis,
              std::mt19937_64 &rng, std::set<std::string> &clamped,
              std::vector<std::string> &notes) {
  RunInput input;
  input.name = desc.name;
  moert::npy::Array &array = input.array;
  array.dtype = desc.dtype;
  int64_t count = 1;
  for (const moert::DimDesc &dim : desc.dims) {
    absl::StatusOr<int64_t> size =
        generatedDim(plan, dim, options, tokenAxis, clamped, notes);
    if (!size.ok())
      return size.status();
    array.shape.push_back(*size);
    count *= *size;
  }
  std::string range;
  switch (desc.dtype) {
  case moert::DType::F32: {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    array.data.resize(count * sizeof(float));
    float *p = reinterpret_cast<float *>(array.data.data());
    for (int64_t i = 0; i < count; ++i)
      p[i] = dist(rng);
    range = "uniform in [-1, 1)";
    break;
  }
  case moert::DType::I64:
  case moert::DType::I32: {
    int64_t lo = desc.hasValueRange ? desc.valueLo : 0;
    int64_t hi = desc.hasValueRange ? desc.valueHi : 2;
    if (desc.dtype == moert::DType::I64)
      fillIntegers<int64_t>(array.data, count, lo, hi, rng);
    else
      fillIntegers<int32_t>(array.data, count, lo, hi, rng);
    range = absl::StrCat("uniform in [", lo, ", ", hi, ")",
                         desc.hasValueRange ? " (the plan's value range)"
                                            : " (the plan records no range)");
    break;
  }
  case moert::DType::Bool:
    fillIntegers<uint8_t>(array.data, count, 0, 2, rng);
    range = "uniform in {0, 1}";
    break;
  default:
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot generate values for input '", desc.name, "' of dtype ",
        moert::dtypeName(desc.dtype), "; pass it with --input"));
  }
  input.description = absl::StrCat(
      "input '", desc.name, "': generated ", moert::dtypeName(desc.dtype), " [",
      absl::StrJoin(array.shape, ", "), "], ", range, ", seed ", options.seed);
  return input;
}

} // namespace

std::string tokenAxis(const moert::Plan &plan) {
  auto lastSymbol = [](const moert::TensorDesc &desc) {
    for (auto dim = desc.dims.rbegin(); dim != desc.dims.rend(); ++dim)
      if (dim->kind == moert::DimDesc::Kind::Symbolic)
        return dim->symbol;
    return std::string();
  };
  // The token ids say it best: a generation plan names them, and moec gives
  // ids that index an embedding table a value range. Their last symbolic
  // dim is the sequence of a [batch, seq] input, or the only one of [T].
  if (const moert::GenerationDesc *generation = plan.generation())
    for (const moert::TensorDesc &desc : plan.inputs())
      if (desc.name == generation->inputIds && !lastSymbol(desc).empty())
        return lastSymbol(desc);
  for (const moert::TensorDesc &desc : plan.inputs())
    if (isInteger(desc.dtype) && desc.hasValueRange &&
        !lastSymbol(desc).empty())
      return lastSymbol(desc);
  // Else the first input's: the sequence of [batch, seq, hidden] hidden
  // states, the tokens of [T, hidden].
  for (const moert::TensorDesc &desc : plan.inputs())
    if (std::string symbol = lastSymbol(desc); !symbol.empty())
      return symbol;
  return "";
}

absl::StatusOr<std::vector<RunInput>>
prepareInputs(const moert::Plan &plan, const InputOptions &options,
              std::vector<std::string> &notes) {
  std::map<std::string, RunInput> given;
  for (const auto &[name, path] : options.given) {
    if (given.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "' is given twice"));
    // Named before its file is read, which may be large.
    if (std::none_of(
            plan.inputs().begin(), plan.inputs().end(),
            [&](const moert::TensorDesc &desc) { return desc.name == name; }))
      return absl::NotFoundError(absl::StrCat(
          "unknown input '", name, "'; the plan's inputs are: ",
          absl::StrJoin(plan.inputs(), ", ",
                        [](std::string *out, const moert::TensorDesc &desc) {
                          absl::StrAppend(out, "'", desc.name, "'");
                        })));
    absl::StatusOr<moert::npy::Array> array = moert::npy::read(path);
    if (!array.ok())
      return array.status();
    RunInput &input = given[name];
    input.name = name;
    input.array = std::move(*array);
    input.path = path;
  }
  std::vector<RunInput> inputs;
  std::mt19937_64 rng(options.seed);
  std::set<std::string> clamped;
  std::string tokens = tokenAxis(plan);
  for (const moert::TensorDesc &desc : plan.inputs()) {
    if (auto it = given.find(desc.name); it != given.end()) {
      inputs.push_back(std::move(it->second));
      continue;
    }
    absl::StatusOr<RunInput> input =
        generateInput(plan, desc, options, tokens, rng, clamped, notes);
    if (!input.ok())
      return input.status();
    inputs.push_back(std::move(*input));
  }
  return inputs;
}

std::map<std::string, int64_t>
symbolSizes(const moert::Plan &plan, const std::vector<RunInput> &inputs) {
  std::map<std::string, int64_t> sizes;
  for (const moert::TensorDesc &desc : plan.inputs())
    for (const RunInput &input : inputs) {
      if (input.name != desc.name ||
          input.array.shape.size() != desc.dims.size())
        continue;
      for (size_t d = 0; d < desc.dims.size(); ++d)
        if (desc.dims[d].kind == moert::DimDesc::Kind::Symbolic)
          sizes.emplace(desc.dims[d].symbol, input.array.shape[d]);
    }
  return sizes;
}

std::string fileNameFor(const std::string &name) {
  std::string out = name;
  for (char &c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-')
      c = '_';
  if (out.empty() || out == "." || out == "..")
    out = "_" + out;
  return out + ".npy";
}

absl::Status makeDirectory(const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::NotFoundError(
        absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  return absl::OkStatus();
}

absl::Status saveInputs(const std::string &dir,
                        const std::vector<RunInput> &inputs) {
  MOERT_RETURN_IF_ERROR(makeDirectory(dir));
  std::set<std::string> files;
  for (const RunInput &input : inputs) {
    std::string file = fileNameFor(input.name);
    if (!files.insert(file).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs '", input.name, "' and another map to the file ", file));
    MOERT_RETURN_IF_ERROR(moert::npy::write(
        (std::filesystem::path(dir) / file).string(), input.array.dtype,
        input.array.shape, input.array.data.data(), input.array.data.size()));
  }
  return absl::OkStatus();
}

} // namespace moe_run
