// Runs a plan through the installed C++ API (moert/moert.h), the same
// command line as app.c:
//
//   app_cxx PLAN OUTDIR NAME=FILE:D0xD1... ...

#include <moert/moert.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

absl::Status run(int argc, char **argv) {
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Plan> plan,
                         moert::Plan::load(argv[1]));
  moert::SessionOptions options;
  options.threads = 2;
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<moert::Session> session,
                         moert::Session::create(*plan, options));
  std::vector<std::vector<char>> values;
  for (int a = 3; a < argc; ++a) {
    std::string spec = argv[a];
    size_t eq = spec.find('='), colon = spec.rfind(':');
    if (eq == std::string::npos || colon == std::string::npos || colon < eq)
      return absl::InvalidArgumentError("bad input '" + spec + "'");
    std::string name = spec.substr(0, eq);
    std::ifstream in(spec.substr(eq + 1, colon - eq - 1), std::ios::binary);
    values.emplace_back(std::istreambuf_iterator<char>(in),
                        std::istreambuf_iterator<char>());
    std::vector<int64_t> shape;
    for (size_t at = colon + 1; at < spec.size();) {
      size_t end = spec.find('x', at);
      shape.push_back(std::stoll(spec.substr(at, end - at)));
      at = end == std::string::npos ? spec.size() : end + 1;
    }
    moert::DType dtype = moert::DType::F32;
    for (const moert::TensorDesc &desc : plan->inputs())
      if (desc.name == name)
        dtype = desc.dtype;
    MOERT_RETURN_IF_ERROR(session->setInput(
        name, dtype, shape, values.back().data(), values.back().size()));
  }
  MOERT_RETURN_IF_ERROR(session->run());
  for (const moert::TensorDesc &desc : plan->outputs()) {
    MOERT_ASSIGN_OR_RETURN(moert::TensorData value, session->output(desc.name));
    std::cout << "result " << desc.name << ": " << moert::dtypeName(value.dtype)
              << " [";
    for (size_t d = 0; d < value.shape.size(); ++d)
      std::cout << (d ? ", " : "") << value.shape[d];
    std::cout << "]\n";
    std::ofstream out(std::string(argv[2]) + "/" + desc.name + ".bin",
                      std::ios::binary);
    out.write(static_cast<const char *>(value.data),
              static_cast<std::streamsize>(value.bytes));
    if (!out)
      return absl::InternalError("cannot write output '" + desc.name + "'");
  }
  return absl::OkStatus();
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    std::cerr << "usage: app_cxx PLAN OUTDIR NAME=FILE:D0xD1... ...\n";
    return 2;
  }
  absl::Status status = run(argc, argv);
  if (!status.ok()) {
    std::cerr << "app_cxx: error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
