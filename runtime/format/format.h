//===- format.h - moec plan file layout constants ---------------*- C++ -*-===//
//
// The fixed binary layout around the program FlatBuffer: file header, section
// table, alignment rules. docs/plan-format.md is the specification; this header
// is shared by the plan writer and the loader so that both agree on it.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_FORMAT_H
#define MOERT_FORMAT_H

#include <cstdint>

namespace moert {

/// The eight magic bytes that open every plan file.
inline constexpr char kPlanMagic[8] = {'M', 'O', 'E', 'P', 'L', 'A', 'N', '\0'};

/// Format version written by this library. A reader accepts a file whose major
/// version equals its own and whose minor version is at most its own.
/// 1.1 appended the expert-parallel steps (AssignSlots .. Ungroup), their
/// attribute tables and the CudaModule table (docs/plan-format.md); 1.2 the
/// IsNaN step, the reductions ReduceProd .. ReduceLogSumExp and
/// `Tensor.replicated`, which a 1.1 reader would ignore and split the input;
/// 1.3 the I8 dtype and the scale inputs of Experts (int8 expert weights);
/// 1.4 the `Generation` table of generation plans (their cache pairs and
/// prefill schedules), which a 1.3 reader would ignore. Plans without it are
/// written as 1.3 (kFormatVersionMinorBase), so 1.3 runtimes keep reading
/// them. 1.5 added tiered plans: `Schedule.tiers` and paged weight sections
/// (kSectionFlagPaged), which a 1.4 reader refuses (nonzero section flags).
/// 1.6 appended the Attention step and AttentionAttrs; only plans with one
/// are written as 1.6. 1.7 added `TierLayer.more_steps` (a tiered layer of
/// several micro-batches' Experts steps), which a 1.6 reader would ignore
/// and then refuse the weights those steps share; only plans with such a
/// layer are written as 1.7. 1.8 added `ExpertTiers.prefetch` (the plan's
/// read-ahead policy); only plans that set one are written as 1.8. 1.9
/// added what onnxruntime-genai's exports need (the Attention step's sinks
/// and softcap; generation tables with an attention mask or without
/// positions); only plans that use them are written as 1.9. 1.10 added
/// `RouterAttrs.normalize_kept_epsilon` (GShard's renormalisation over the
/// assignments capacity kept), which a 1.9 reader would ignore, and the
/// `ReluSquared` expert activation; only plans with a Router that sets it
/// or an expert network with that activation are written as 1.10. 1.11
/// added block-quantized weights kept packed (the MatMulNBits step,
/// `FfnAttrs.block_quant`); only plans with them are written as 1.11.
/// 1.12 added `BlockQuantAttrs.int8_activations` (int8 activations for
/// block-quantized weights, onnxruntime's accuracy_level 4), which a 1.11
/// reader would ignore and compute in f32; only plans that set it are
/// written as 1.12. 1.13 added the generation table's batching verdict
/// (`batchable`, `batch_blocker`); only plans that set either are written
/// as 1.13. 1.14 appended the Conv step; only plans with one are written as
/// 1.14. 1.15 added `batch_windows` (sliding-window attention in a
/// batchable plan), which a 1.14 reader would ignore; only plans with a
/// window are written as 1.15. 1.16 appended the Linear step (a weight
/// stored narrowed and transposed); only plans with one are written as 1.16.
/// 1.17 added multimodal generation plans (`Program.multimodal`); only plans
/// with one are written as 1.17. 1.18 appended the GridSample step; only
/// plans with one are written as 1.18. 1.19 let Gather widen a bf16 or f16
/// table to an f32 output; only plans with such a Gather are written as
/// 1.19. 1.21 let a multimodal plan take index positions and no image grid
/// (Llama 4's); only such plans are written as 1.21. 1.22 added the
/// multimodal grid rule and image processor; only multimodal plans with
/// either are written as 1.22. 1.23 appended the
/// CausalConv step and let a generation plan with state pairs have prefill
/// schedules (a first prompt from zero states); only plans with either are
/// written as 1.23. 1.24 added `ImageProcessor.resize` (GLM-4V's smart
/// resize), which a 1.23 reader would ignore and size images by Qwen2-VL's
/// rule; only plans with another rule than Qwen2-VL's are written as 1.24.
/// 1.25 added Llama 4's tile rule (`ImageResize.Llama4Tiles`,
/// `ImageProcessor.max_tiles`, `resize_to_max_canvas`); only plans with it
/// are written as 1.25.
/// 1.26 let a multimodal plan's Prefill stage start state pairs and a stage
/// between the vision stages and the Prefill read a vision output
/// (onnxruntime-genai folders); only multimodal plans with either are
/// written as 1.26.
/// 1.27 let a multimodal plan run on several devices and its Prefill stage
/// page the decode schedule's tiered experts; only multimodal plans with
/// either are written as 1.27.
inline constexpr uint16_t kFormatVersionMajor = 1;
inline constexpr uint16_t kFormatVersionMinor = 27;
/// The minor version written for a plan without a generation table.
inline constexpr uint16_t kFormatVersionMinorBase = 3;

inline constexpr uint32_t kFileHeaderSize = 64;
inline constexpr uint32_t kSectionEntrySize = 32;
/// Upper bound on sections so that a corrupt count cannot make a reader loop.
inline constexpr uint32_t kMaxSections = 4096;
/// Weight sections start at multiples of this, so that they can be mmapped.
inline constexpr uint64_t kWeightSectionAlignment = 4096;
/// The program section starts at a multiple of this (FlatBuffers alignment).
inline constexpr uint64_t kProgramSectionAlignment = 16;
/// Arena tensors and weights are placed at multiples of this by the writer.
inline constexpr uint64_t kTensorAlignment = 64;
/// Largest tensor rank a plan may use.
inline constexpr int kMaxRank = 8;
/// Largest bound of a dimension (and of a symbol) the loader accepts.
inline constexpr uint64_t kMaxDimBound = uint64_t{1} << 40;
/// Largest activation arena the loader accepts.
inline constexpr uint64_t kMaxArenaSize = uint64_t{1} << 48;
/// Largest number of device schedules a plan may hold (the loader refuses
/// more; the compiler's `--devices` is bounded by it).
inline constexpr uint32_t kMaxDevices = 4096;
/// Largest product of devices and expert slots of one MoE layer (every
/// expert has a slot, replicas add more) that the compiler places: it sizes
/// the placement's arrays and the slot counts every device exchanges, so
/// that a model's expert count cannot make it allocate without bound.
inline constexpr uint64_t kMaxDeviceSlots = uint64_t{1} << 24;
/// Largest `--micro-batches`: each chunk of a layer's tokens adds its own
/// dispatch, exchanges and combine to every device's schedule.
inline constexpr uint64_t kMaxMicroBatches = 1024;

/// Section flag of a weight section whose bytes the runtime reads on demand
/// (the paged expert weights of a tiered plan, format 1.5) instead of
/// mapping them: such sections follow every other section in the file.
inline constexpr uint32_t kSectionFlagPaged = 1;

/// What a section holds.
enum class SectionKind : uint32_t {
  Program = 1, ///< The program FlatBuffer (format/plan.fbs); exactly one.
  Weights = 2, ///< Raw little-endian tensor data referenced by the program.
};

} // namespace moert

#endif // MOERT_FORMAT_H
