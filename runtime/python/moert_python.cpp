//===- moert_python.cpp - `import moert`: the runtime from Python ---------===//
//
// pybind11 bindings of the C++ API (docs/embedding.md):
//
//   plan = moert.Plan("plan.bin")
//   session = moert.Session(plan, threads=4)
//   outputs = session.run({"input_ids": ids})   # {name: numpy.ndarray}
//   ids = moert.Generator(moert.Plan("gen.plan")).generate([3, 14, 15])
//
// Zero copy both ways: an input array whose dtype is the plan's and whose
// memory is C-contiguous and aligned is read in place (the session keeps a
// reference to it, and a later run() without inputs reads it again, as it is
// then); any other array is refused with a TypeError (dtype) or ValueError
// (layout) naming the input, never converted silently. Every output the
// steps compute is written straight into a numpy buffer allocated for the
// run (or into the caller's, with run(outputs=...)), and the returned array
// is a view of it that keeps it alive.
//
//===----------------------------------------------------------------------===//

#include "generate/plan_generator.h"
#include "moert/batch_generator.h"
#include "moert/generator.h"
#include "moert/group_generator.h"
#include "moert/moert.h"
#include "moert/vision.h"
#include "mpi_bindings.h"
#include "numpy_interop.h"
#include "vision_bindings.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

/// A loaded plan; sessions share it (and keep it alive).
struct PyPlan {
  std::unique_ptr<moert::Plan> plan;
  std::string path;
};

/// The description of one graph input or output, for Python.
struct PyTensorInfo {
  std::string name;
  moert::DType dtype;
  /// Per dim: an int (static), the symbol's name (symbolic) or None
  /// (dynamic: computed by the run).
  py::tuple shape;
  /// Per dim: the largest size.
  std::vector<int64_t> maxShape;
};

PyTensorInfo infoOf(const moert::TensorDesc &desc) {
  PyTensorInfo info;
  info.name = desc.name;
  info.dtype = desc.dtype;
  info.shape = py::tuple(desc.dims.size());
  for (size_t d = 0; d < desc.dims.size(); ++d) {
    const moert::DimDesc &dim = desc.dims[d];
    switch (dim.kind) {
    case moert::DimDesc::Kind::Static:
      info.shape[d] = py::int_(dim.bound);
      break;
    case moert::DimDesc::Kind::Symbolic:
      info.shape[d] = py::str(dim.symbol);
      break;
    case moert::DimDesc::Kind::Dynamic:
      info.shape[d] = py::none();
      break;
    }
    info.maxShape.push_back(dim.bound);
  }
  return info;
}

std::string dtypeText(moert::DType dtype) {
  switch (dtype) {
  case moert::DType::F32:
    return "float32";
  case moert::DType::F16:
    return "float16";
  case moert::DType::BF16:
    return "bfloat16";
  case moert::DType::I64:
    return "int64";
  case moert::DType::I32:
    return "int32";
  case moert::DType::Bool:
    return "bool";
  case moert::DType::I8:
    return "int8";
  }
  return "invalid";
}

/// "'a', 'b'": the names of `descs`.
std::string names(const std::vector<moert::TensorDesc> &descs) {
  return absl::StrJoin(descs, ", ",
                       [](std::string *out, const moert::TensorDesc &d) {
                         absl::StrAppend(out, "'", d.name, "'");
                       });
}

class PySession {
public:
  PySession(std::shared_ptr<PyPlan> plan, int threads, bool collectStats)
      : plan_(std::move(plan)) {
    if (threads < 0)
      raise(PyExc_ValueError,
            absl::StrCat("threads is ", threads,
                         "; it must be 0 (the hardware concurrency) or more"));
    moert::SessionOptions options;
    options.threads = threads;
    options.collectStats = collectStats;
    absl::StatusOr<std::unique_ptr<moert::Session>> session =
        moert::Session::create(*plan_->plan, options);
    if (!session.ok())
      raise(errorType(), std::string(session.status().message()));
    session_ = *std::move(session);
  }

  /// Binds `inputs` (kept alive here), binds each output to a fresh buffer
  /// (or `outputs`' array of its name), runs, and returns the outputs.
  py::dict run(py::object inputs, py::object outputs) {
    if (!inputs.is_none())
      bindInputs(inputs.cast<py::dict>());
    py::dict given = outputs.is_none() ? py::dict() : outputs.cast<py::dict>();
    for (auto item : given) {
      std::string name = py::str(item.first);
      if (findOutput(name) < 0)
        raise(PyExc_KeyError, absl::StrCat("unknown output '", name,
                                           "'; the plan's outputs "
                                           "are: ",
                                           names(plan_->plan->outputs())));
    }
    const std::vector<moert::TensorDesc> &descs = plan_->plan->outputs();
    std::vector<py::object> buffers(descs.size(), py::none());
    for (size_t k = 0; k < descs.size(); ++k)
      buffers[k] = bindOutput(descs[k], given);

    absl::Status status;
    auto start = std::chrono::steady_clock::now();
    {
      py::gil_scoped_release release;
      status = session_->run();
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    py::dict result;
    if (status.ok()) {
      for (size_t k = 0; k < descs.size(); ++k)
        result[py::str(descs[k].name)] = outputArray(descs[k], buffers[k]);
    }
    // The buffers belong to the returned arrays now: a later run must not
    // write into them.
    for (size_t k = 0; k < descs.size(); ++k)
      if (!buffers[k].is_none())
        check(session_->bindOutput(descs[k].name, nullptr, 0));
    check(status);
    ++runs_;
    lastSeconds_ = seconds;
    return result;
  }

  py::dict stats() const {
    py::list steps;
    for (const moert::StepStats &step : session_->stepStats()) {
      py::dict entry;
      entry["name"] = step.name;
      entry["op"] = step.op;
      entry["calls"] = step.calls;
      entry["total_seconds"] = step.totalSeconds;
      if (!step.expertLoad.empty())
        entry["expert_load"] = step.expertLoad;
      steps.append(entry);
    }
    py::dict out;
    out["runs"] = runs_;
    out["last_run_seconds"] = lastSeconds_;
    out["steps"] = steps;
    return out;
  }

  void resetStats() {
    session_->resetStats();
    runs_ = 0;
    lastSeconds_ = 0;
  }

  int threads() const { return session_->threads(); }
  std::shared_ptr<PyPlan> plan() const { return plan_; }

private:
  int findOutput(const std::string &name) const {
    const std::vector<moert::TensorDesc> &descs = plan_->plan->outputs();
    for (size_t k = 0; k < descs.size(); ++k)
      if (descs[k].name == name)
        return static_cast<int>(k);
    return -1;
  }

  void bindInputs(const py::dict &inputs) {
    const std::vector<moert::TensorDesc> &descs = plan_->plan->inputs();
    for (auto item : inputs) {
      std::string name = py::str(item.first);
      const moert::TensorDesc *desc = nullptr;
      for (const moert::TensorDesc &d : descs)
        if (d.name == name)
          desc = &d;
      if (!desc)
        raise(PyExc_KeyError,
              absl::StrCat("unknown input '", name,
                           "'; the plan's inputs are: ", names(descs)));
      std::string what = absl::StrCat("input '", name, "'");
      if (!py::isinstance<py::array>(item.second))
        raise(PyExc_TypeError,
              absl::StrCat(
                  what, " is a ",
                  std::string(py::str(item.second.get_type().attr("__name__"))),
                  ", not a numpy.ndarray"));
      py::array array = py::reinterpret_borrow<py::array>(item.second);
      py::dtype want = numpyDtype(desc->dtype, what);
      if (!array.dtype().equal(want))
        raise(PyExc_TypeError,
              absl::StrCat(what, " has dtype ",
                           std::string(py::str(array.dtype())),
                           "; the plan expects ", dtypeText(desc->dtype),
                           " (convert it with .astype)"));
      if (!isPlain(array, desc->dtype))
        raise(PyExc_ValueError,
              absl::StrCat(what, " is not a C-contiguous, aligned array; "
                                 "pass numpy.ascontiguousarray() of it"));
      std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
      check(session_->bindInput(name, desc->dtype, shape, array.data(),
                                bytesOf(array, desc->dtype)));
      bound_[name] = array;
    }
  }

  /// Binds output `desc` to the caller's array in `given` or a new buffer
  /// of its planned size; None when no step computes it (it is copied).
  py::object bindOutput(const moert::TensorDesc &desc, const py::dict &given) {
    std::string what = absl::StrCat("output '", desc.name, "'");
    absl::StatusOr<size_t> capacity = session_->outputCapacity(desc.name);
    check(capacity.status());
    py::dtype dtype = numpyDtype(desc.dtype, what);
    py::str key(desc.name);
    if (given.contains(key)) {
      py::object value = given[key];
      if (!py::isinstance<py::array>(value))
        raise(PyExc_TypeError, absl::StrCat(what, " buffer is not a "
                                                  "numpy.ndarray"));
      py::array array = py::reinterpret_borrow<py::array>(value);
      if (!array.dtype().equal(dtype))
        raise(PyExc_TypeError,
              absl::StrCat(what, " buffer has dtype ",
                           std::string(py::str(array.dtype())),
                           "; the plan computes ", dtypeText(desc.dtype)));
      if (!isPlain(array, desc.dtype) || !array.writeable())
        raise(PyExc_ValueError,
              absl::StrCat(what, " buffer is not a writeable, C-contiguous, "
                                 "aligned array"));
      if (*capacity == 0)
        raise(PyExc_ValueError,
              absl::StrCat(what, " is not computed by a step (it passes an "
                                 "input or a constant through); it cannot "
                                 "take a buffer"));
      size_t bytes = bytesOf(array, desc.dtype);
      if (bytes < *capacity)
        raise(PyExc_ValueError,
              absl::StrCat(what, " buffer has ", bytes,
                           " bytes; the plan needs up to ", *capacity));
      check(session_->bindOutput(desc.name, array.mutable_data(), bytes));
      return std::move(array);
    }
    if (*capacity == 0)
      return py::none();
    // Pages of the unused tail of the bound are never touched.
    size_t itemsize = moert::dtypeSize(desc.dtype);
    std::vector<py::ssize_t> elements = {
        static_cast<py::ssize_t>((*capacity + itemsize - 1) / itemsize)};
    py::array buffer(dtype, elements, stridesOf(elements, desc.dtype));
    check(session_->bindOutput(desc.name, buffer.mutable_data(),
                               elements[0] * itemsize));
    return std::move(buffer);
  }

  /// The output's value: a view of `buffer` (its memory, kept alive by the
  /// view) or, for an output no step computes, a copy.
  py::array outputArray(const moert::TensorDesc &desc, py::object buffer) {
    absl::StatusOr<moert::TensorData> value = session_->output(desc.name);
    check(value.status());
    py::dtype dtype =
        numpyDtype(value->dtype, absl::StrCat("output '", desc.name, "'"));
    std::vector<py::ssize_t> shape(value->shape.begin(), value->shape.end());
    std::vector<py::ssize_t> strides = stridesOf(shape, value->dtype);
    if (buffer.is_none())
      return py::array(dtype, shape, strides, value->data);
    return py::array(dtype, shape, strides, value->data, buffer);
  }

  std::shared_ptr<PyPlan> plan_;
  std::unique_ptr<moert::Session> session_;
  /// The input arrays the session reads in place, by name.
  std::map<std::string, py::array> bound_;
  uint64_t runs_ = 0;
  double lastSeconds_ = 0;
};

/// Token generation over a generation plan: moert::Generator on one
/// device, or for an expert-parallel plan moert::GroupGenerator over all of
/// its devices in this process.
class PyGenerator {
public:
  PyGenerator(std::shared_ptr<PyPlan> plan, int threads, bool mpi)
      : plan_(std::move(plan)) {
    if (threads < 0)
      raise(PyExc_ValueError,
            absl::StrCat("threads is ", threads,
                         "; it must be 0 (the hardware concurrency) or more"));
    auto generator =
        moert::detail::PlanGenerator::create(*plan_->plan, threads, mpi);
    check(generator.status());
    generator_ = *std::move(generator);
  }

  /// The new ids; `onToken(id)` is called with each as soon as it is drawn.
  /// An exception it raises ends the generation after that id (no further
  /// step runs) and is raised here.
  std::vector<int64_t> generate(const std::vector<int64_t> &prompt,
                                int64_t maxNewTokens, double temperature,
                                int64_t topK, double topP, uint64_t seed,
                                const std::vector<int64_t> &stopIds,
                                py::object onToken, py::object vision,
                                py::object images) {
    // Kept alive, with the arrays and images they view, until the end.
    PyVisionInputs inputs = collectVisionInputs(*plan_->plan, vision, images);
    moert::GenerateOptions options;
    options.maxNewTokens = maxNewTokens;
    options.stopIds = stopIds;
    options.sampling.temperature = temperature;
    options.sampling.topK = topK;
    options.sampling.topP = topP;
    options.sampling.seed = seed;
    std::optional<py::error_already_set> raised;
    std::function<void(int64_t)> callback;
    if (!onToken.is_none())
      callback = [&](int64_t token) {
        if (raised)
          return;
        py::gil_scoped_acquire acquire;
        try {
          onToken(token);
        } catch (py::error_already_set &error) {
          raised = std::move(error);
        }
      };
    // Asked on this thread after onToken, which sets `raised`.
    options.stopRequested = [&raised] { return raised.has_value(); };
    absl::StatusOr<std::vector<int64_t>> ids;
    {
      py::gil_scoped_release release;
      ids = generator_->generate(prompt, inputs.inputs, options, callback);
    }
    if (raised)
      throw *raised;
    check(ids.status());
    return *std::move(ids);
  }

  /// The logits the last id was drawn from (device 0's), a copy.
  py::array_t<float> logits() const {
    const std::vector<float> &row = generator_->logits();
    py::array_t<float> out(static_cast<py::ssize_t>(row.size()));
    std::copy(row.begin(), row.end(), out.mutable_data());
    return out;
  }

  py::dict times() const {
    const moert::GenerationTimes &t = generator_->times();
    py::dict out;
    out["prompt_tokens"] = t.promptTokens;
    out["new_tokens"] = t.newTokens;
    out["prefill_seconds"] = t.prefillSeconds;
    out["first_token_seconds"] = t.firstTokenSeconds;
    out["decode_steps"] = t.decodeSteps;
    out["decode_seconds"] = t.decodeSeconds;
    out["stopped_early"] = t.stoppedEarly;
    return out;
  }

  int numDevices() const { return plan_->plan->numDevices(); }
  int64_t vocabSize() const { return generator_->vocabSize(); }
  int64_t maxSeq() const { return generator_->maxSeq(); }

private:
  std::shared_ptr<PyPlan> plan_;
  std::unique_ptr<moert::detail::PlanGenerator> generator_;
};

/// Continuous batching over a generation plan: moert::BatchGenerator.
/// add() and cancel() may be called from other threads while step() runs
/// (it releases the GIL).
class PyBatchGenerator {
public:
  PyBatchGenerator(std::shared_ptr<PyPlan> plan, int slots, int threads,
                   int64_t maxStepRows, bool keepLogits)
      : plan_(std::move(plan)) {
    if (threads < 0)
      raise(PyExc_ValueError,
            absl::StrCat("threads is ", threads,
                         "; it must be 0 (the hardware concurrency) or more"));
    moert::SessionOptions session;
    session.threads = threads;
    session.collectStats = false;
    moert::BatchOptions options;
    options.slots = slots;
    options.maxStepRows = maxStepRows;
    options.keepLogits = keepLogits;
    auto batch = moert::BatchGenerator::create(*plan_->plan, session, options);
    check(batch.status());
    batch_ = *std::move(batch);
  }

  int64_t add(const std::vector<int64_t> &prompt, int64_t maxNewTokens,
              double temperature, int64_t topK, double topP, uint64_t seed,
              const std::vector<int64_t> &stopIds) {
    moert::GenerateOptions options;
    options.maxNewTokens = maxNewTokens;
    options.stopIds = stopIds;
    options.sampling.temperature = temperature;
    options.sampling.topK = topK;
    options.sampling.topP = topP;
    options.sampling.seed = seed;
    absl::StatusOr<int64_t> id = batch_->add(prompt, options);
    check(id.status());
    return *id;
  }

  /// [(sequence, token, finish)]: token -1 when none; finish None, "stop",
  /// "length" or "cancelled".
  py::list step() {
    absl::StatusOr<std::vector<moert::SequenceEvent>> events;
    {
      py::gil_scoped_release release;
      events = batch_->step();
    }
    check(events.status());
    py::list out;
    for (const moert::SequenceEvent &e : *events) {
      py::object finish = py::none();
      switch (e.finish) {
      case moert::FinishReason::None:
        break;
      case moert::FinishReason::Stop:
        finish = py::str("stop");
        break;
      case moert::FinishReason::Length:
        finish = py::str("length");
        break;
      case moert::FinishReason::Cancelled:
        finish = py::str("cancelled");
        break;
      }
      out.append(py::make_tuple(e.sequence, e.token, finish));
    }
    return out;
  }

  py::dict stats() const {
    moert::BatchStats s = batch_->stats();
    py::dict out;
    out["steps"] = s.steps;
    out["rows"] = s.rows;
    out["prompt_rows"] = s.promptRows;
    out["new_tokens"] = s.newTokens;
    out["step_seconds"] = s.stepSeconds;
    return out;
  }

  py::array_t<float> lastLogits(int64_t sequence) const {
    std::vector<float> row = batch_->lastLogits(sequence);
    py::array_t<float> out(static_cast<py::ssize_t>(row.size()));
    std::copy(row.begin(), row.end(), out.mutable_data());
    return out;
  }

  moert::BatchGenerator &batch() { return *batch_; }

private:
  std::shared_ptr<PyPlan> plan_;
  std::unique_ptr<moert::BatchGenerator> batch_;
};

std::shared_ptr<PyPlan> loadPlan(const std::string &path) {
  absl::StatusOr<std::unique_ptr<moert::Plan>> plan = moert::Plan::load(path);
  if (!plan.ok())
    raise(absl::IsNotFound(plan.status()) ? PyExc_FileNotFoundError
                                          : errorType(),
          std::string(plan.status().message()));
  auto out = std::make_shared<PyPlan>();
  out->plan = *std::move(plan);
  out->path = path;
  return out;
}

py::list infos(const std::vector<moert::TensorDesc> &descs) {
  py::list out;
  for (const moert::TensorDesc &desc : descs)
    out.append(infoOf(desc));
  return out;
}

} // namespace

PYBIND11_MODULE(moert, m) {
  m.doc() = "The moec runtime: load a plan (moec compile) and run it on numpy "
            "arrays without copies (docs/embedding.md).";
  m.attr("__version__") = MOERT_VERSION;
  errorType() = PyErr_NewException("moert.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(errorType());
  bindMpi(m, &check);

  py::class_<PyTensorInfo>(m, "TensorInfo",
                           "A graph input or output as the plan declares it.")
      .def_readonly("name", &PyTensorInfo::name)
      .def_property_readonly(
          "dtype",
          [](const PyTensorInfo &info) -> py::object {
            if (info.dtype == moert::DType::BF16)
              return py::str("bfloat16");
            return numpyDtype(info.dtype, info.name);
          },
          "The numpy dtype (the string 'bfloat16' for bf16).")
      .def_readonly("shape", &PyTensorInfo::shape,
                    "Per dim: its size (int), its symbol's name (str) or "
                    "None (computed by the run).")
      .def_readonly("max_shape", &PyTensorInfo::maxShape,
                    "Per dim: the largest size the plan allows.")
      .def("__repr__", [](const PyTensorInfo &info) {
        return absl::StrCat("TensorInfo(name='", info.name,
                            "', dtype=", dtypeText(info.dtype),
                            ", shape=", std::string(py::repr(info.shape)), ")");
      });

  py::class_<PyPlan, std::shared_ptr<PyPlan>>(
      m, "Plan", "A loaded and validated plan file; immutable.")
      .def(py::init(&loadPlan), py::arg("path"),
           "Maps and validates the plan at `path` (FileNotFoundError, or "
           "moert.Error naming the field at fault).")
      .def_readonly("path", &PyPlan::path)
      .def_property_readonly(
          "inputs", [](const PyPlan &p) { return infos(p.plan->inputs()); },
          "The graph inputs (list of TensorInfo).")
      .def_property_readonly(
          "outputs", [](const PyPlan &p) { return infos(p.plan->outputs()); },
          "The graph outputs (list of TensorInfo).")
      .def_property_readonly(
          "symbols",
          [](const PyPlan &p) {
            py::dict out;
            for (const moert::SymbolDesc &s : p.plan->symbols())
              out[py::str(s.name)] = py::make_tuple(s.min, s.max);
            return out;
          },
          "The symbolic sizes: {name: (min, max)}.")
      .def_property_readonly(
          "num_devices", [](const PyPlan &p) { return p.plan->numDevices(); })
      .def_property_readonly(
          "multimodal",
          [](const PyPlan &p) -> py::object {
            const moert::MultimodalDesc *mm = p.plan->multimodal();
            if (!mm)
              return py::none();
            return multimodalInfo(*mm);
          },
          "A multimodal plan's {image_token_id, spatial_merge_size, "
          "image_grid, max_images, vision_inputs, image_processor, "
          "tile_size}; None for other plans.")
      .def("__repr__", [](const PyPlan &p) {
        return absl::StrCat("Plan('", p.path, "')");
      });

  m.def(
      "load_images",
      [](const std::shared_ptr<PyPlan> &plan, py::object images,
         bool canvases) -> py::object {
        const moert::MultimodalDesc *mm = plan->plan->multimodal();
        if (!mm)
          raise(PyExc_ValueError,
                absl::StrCat(plan->path, ": images need a multimodal plan"));
        std::vector<moert::ImageTileCanvas> shapes;
        auto got = loadPyImages(*mm, images, &shapes);
        check(got.status());
        py::dict out;
        for (const moert::NamedTensor &t : *got)
          out[py::str(t.name)] = toNumpy(t);
        if (!canvases)
          return std::move(out);
        py::object layout = py::none();
        if (mm->imageProcessor.llama4Tiles) {
          py::list list;
          for (const moert::ImageTileCanvas &c : shapes)
            list.append(py::make_tuple(c.rows, c.cols));
          layout = std::move(list);
        }
        return py::make_tuple(out, layout);
      },
      py::arg("plan"), py::arg("images"), py::arg("canvases") = false,
      "The vision inputs {name: numpy array} (the pixel patches and the "
      "grids) of `images`, PNG or JPEG paths or their encoded bytes, by the "
      "plan's image processor (docs/multimodal.md, 'Images'), as "
      "Generator.generate(vision=) takes them; ValueError names a bad "
      "image. canvases=True: (vision, canvases), canvases each image's "
      "(rows, cols) of tiles for Llama 4's processor (a global tile "
      "follows where rows * cols > 1; its prompt's layout), None for "
      "other processors.");

  py::class_<PySession>(m, "Session",
                        "Runs a plan on the CPU; not thread-safe.")
      .def(py::init<std::shared_ptr<PyPlan>, int, bool>(), py::arg("plan"),
           py::arg("threads") = 0, py::arg("collect_stats") = true,
           "threads: kernel worker threads (0: the hardware concurrency).")
      .def("run", &PySession::run, py::arg("inputs") = py::none(),
           py::arg("outputs") = py::none(),
           "Runs the plan and returns {output name: numpy.ndarray}.\n\n"
           "inputs: {name: numpy.ndarray} of the plan's dtype, C-contiguous; "
           "read in place, and kept for later runs (run() with no inputs "
           "reads the same arrays again). Wrong names raise KeyError, wrong "
           "dtypes TypeError, wrong shapes or layouts ValueError.\n"
           "outputs: optional {name: numpy.ndarray} buffers of at least the "
           "output's planned size to write into; the returned arrays are "
           "views of them.")
      .def("stats", &PySession::stats,
           "{'runs', 'last_run_seconds', 'steps': [{'name', 'op', 'calls', "
           "'total_seconds'[, 'expert_load']}]} since creation or "
           "reset_stats().")
      .def("reset_stats", &PySession::resetStats)
      .def_property_readonly("threads", &PySession::threads)
      .def_property_readonly("plan", &PySession::plan);

  py::class_<PyGenerator>(
      m, "Generator",
      "Generates tokens with a generation plan (moec compile DECODE.onnx "
      "--prefill PREFILL.onnx --max-seq S [--devices N]): on one device, or "
      "on every device of an expert-parallel plan in this process; not "
      "thread-safe.")
      .def(py::init<std::shared_ptr<PyPlan>, int, bool>(), py::arg("plan"),
           py::arg("threads") = 0, py::arg("mpi") = false,
           "threads: kernel worker threads of each device (0: the hardware "
           "concurrency, divided by the devices). mpi: run this MPI rank's "
           "device of an expert-parallel plan (after mpi_init(), from its "
           "thread; every rank then calls generate() with the same "
           "arguments). A plan that is no generation plan raises "
           "ValueError.")
      .def("generate", &PyGenerator::generate, py::arg("prompt"),
           py::arg("max_new_tokens") = 16, py::arg("temperature") = 0.0,
           py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0,
           py::arg("stop_ids") = std::vector<int64_t>(),
           py::arg("on_token") = py::none(), py::arg("vision") = py::none(),
           py::arg("images") = py::none(),
           "Runs the prompt, then draws up to max_new_tokens ids (greedy at "
           "temperature 0, else seeded sampling, docs/cli.md 'Sampling') and "
           "returns them; on_token(id) is called with each as it is drawn. "
           "An exception on_token raises stops the generation after that id "
           "(no further step runs; times['stopped_early'] is True) and is "
           "raised. A prompt or options that do not fit raise ValueError. "
           "vision: a multimodal plan's vision inputs, {name: numpy array} "
           "(docs/multimodal.md), for a prompt with image tokens. images: "
           "PNG or JPEG paths, or their encoded bytes, instead of the pixel "
           "patches and grid, preprocessed by the plan's image processor.")
      .def_property_readonly("logits", &PyGenerator::logits,
                             "The logits the last id was drawn from.")
      .def_property_readonly("times", &PyGenerator::times,
                             "The last generate()'s times: prompt_tokens, "
                             "new_tokens, prefill_seconds, "
                             "first_token_seconds, decode_steps, "
                             "decode_seconds, stopped_early.")
      .def_property_readonly("num_devices", &PyGenerator::numDevices)
      .def_property_readonly("vocab_size", &PyGenerator::vocabSize)
      .def_property_readonly("max_seq", &PyGenerator::maxSeq);

  py::class_<PyBatchGenerator>(
      m, "BatchGenerator",
      "Continuous batching over a generation plan: each step() runs the "
      "rows of every active sequence together (decode rows, then prompt "
      "rows of new sequences), each sequence in its slot of a KV pool; a "
      "plan the compiler did not prove batchable is served one sequence at "
      "a time (batch_blocker says why). add() and cancel() may be called "
      "from other threads while step() runs; step() releases the GIL.")
      .def(py::init<std::shared_ptr<PyPlan>, int, int, int64_t, bool>(),
           py::arg("plan"), py::arg("slots") = 8, py::arg("threads") = 0,
           py::arg("max_step_rows") = 0, py::arg("keep_logits") = false,
           "slots: sequences held at once; threads: kernel worker threads "
           "(0: the hardware concurrency); max_step_rows: rows per step at "
           "most (0: the plan's bound); keep_logits: keep each sequence's "
           "logits of its last token (last_logits). A plan that is no "
           "generation plan, or bad options, raise ValueError.")
      .def("add", &PyBatchGenerator::add, py::arg("prompt"),
           py::arg("max_new_tokens") = 16, py::arg("temperature") = 0.0,
           py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("seed") = 0,
           py::arg("stop_ids") = std::vector<int64_t>(),
           "Queues a sequence and returns its id (from 1); it gets a slot at "
           "a later step(). Sampling as Generator.generate. A prompt or "
           "options that do not fit raise ValueError.")
      .def("step", &PyBatchGenerator::step,
           "Runs one step; returns [(sequence, token, finish)]: token -1 "
           "when none (a cancelled sequence), finish None (running), "
           "'stop', 'length' or 'cancelled'.")
      .def(
          "cancel",
          [](PyBatchGenerator &b, int64_t sequence) {
            return b.batch().cancel(sequence);
          },
          py::arg("sequence"),
          "Removes a queued or running sequence (a running one reports "
          "'cancelled' at the next step); False when there is none.")
      .def("stats", &PyBatchGenerator::stats,
           "{'steps', 'rows', 'prompt_rows', 'new_tokens', 'step_seconds'} "
           "since creation.")
      .def(
          "expert_selections",
          [](PyBatchGenerator &b) { return b.batch().expertSelections(); },
          "Per MoE layer, per expert: the rows routed to it since creation.")
      .def("last_logits", &PyBatchGenerator::lastLogits, py::arg("sequence"),
           "With keep_logits: the logits that drew the sequence's last "
           "token, until it ends; else empty.")
      .def_property_readonly(
          "has_work", [](PyBatchGenerator &b) { return b.batch().hasWork(); })
      .def_property_readonly(
          "slots", [](PyBatchGenerator &b) { return b.batch().slots(); })
      .def_property_readonly(
          "slots_in_use",
          [](PyBatchGenerator &b) { return b.batch().slotsInUse(); })
      .def_property_readonly(
          "waiting", [](PyBatchGenerator &b) { return b.batch().waiting(); })
      .def_property_readonly(
          "batch_blocker",
          [](PyBatchGenerator &b) { return b.batch().batchBlocker(); },
          "'' when steps batch several sequences; else why the plan is "
          "served one sequence at a time.")
      .def_property_readonly(
          "max_step_rows",
          [](PyBatchGenerator &b) { return b.batch().maxStepRows(); })
      .def_property_readonly(
          "pool_bytes",
          [](PyBatchGenerator &b) { return b.batch().poolBytes(); })
      .def_property_readonly(
          "vocab_size",
          [](PyBatchGenerator &b) { return b.batch().vocabSize(); })
      .def_property_readonly(
          "max_seq", [](PyBatchGenerator &b) { return b.batch().maxSeq(); });
}
