# -*- Python -*-
# lit configuration of the moec test suite.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "MOEC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test", ".py"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs", "CMakeLists.txt", "lib"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moec_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

# Test-time Python (the project's .venv: onnx, onnxruntime, numpy). It
# replaces lit's default %python, the interpreter lit itself runs in.
config.substitutions = [s for s in config.substitutions if s[0] != "%python"]
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%moec_src", config.moec_src_root))
config.substitutions.append(("%moec_obj_root", config.moec_obj_root))
config.substitutions.append(
    ("%gen_onnx", config.python_executable + " " +
     os.path.join(config.moec_src_root, "test", "lib", "gen_onnx.py")))
config.substitutions.append(
    ("%gen_if", config.python_executable + " " +
     os.path.join(config.moec_src_root, "test", "lib", "gen_onnx_if.py")))
config.substitutions.append(
    ("%gen_vision", config.python_executable + " " +
     os.path.join(config.moec_src_root, "test", "lib", "gen_vision.py")))
# `%expect_exit N cmd...` succeeds only if cmd exits with status N.
config.substitutions.append(
    ("%expect_exit", config.python_executable + " " +
     os.path.join(config.moec_src_root, "test", "lib", "expect_exit.py")))

tools = ["moec-opt", "moec", "moe-run", "moe-layer-plan"]
llvm_config.add_tool_substitutions(
    [t for t in tools if os.path.exists(os.path.join(config.moec_tools_dir, t))],
    [config.moec_tools_dir])
llvm_config.with_environment("PATH", config.moec_tools_dir, append_path=True)

# AVX-512 (F, BW and VL), where the runtime's f32 products of a few rows
# take the register tiles, whose sums do not depend on the row count.
try:
    cpu_flags = set(open("/proc/cpuinfo").read().split())
except OSError:
    cpu_flags = set()
if {"avx512f", "avx512bw", "avx512vl"} <= cpu_flags:
    config.available_features.add("avx512")

# The tests under MPI (E2E, Serve, Cuda) need mpirun (Open MPI) on loopback:
# detected here, so that they run wherever it is installed and are reported
# unsupported elsewhere; Open MPI refuses root without both variables.
import shutil

if shutil.which("mpirun"):
    config.available_features.add("mpirun")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
