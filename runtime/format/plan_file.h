//===- plan_file.h - Encoding of the plan file header -----------*- C++ -*-===//
//
// Byte-level encoding of the fixed file header and the section table
// (docs/plan-format.md, "File layout"), shared by the writer and the loader.
// Every field is little-endian; nothing here trusts its input.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_SRC_PLAN_FILE_H
#define MOERT_SRC_PLAN_FILE_H

#include "format/format.h"

#include <cstddef>
#include <cstdint>

namespace moert::detail {

/// The decoded fixed file header.
struct FileHeader {
  char magic[8];
  uint16_t versionMajor;
  uint16_t versionMinor;
  uint32_t headerSize;
  uint64_t fileSize;
  uint32_t sectionCount;
  uint32_t sectionTableOffset;
  uint32_t backend;
  uint32_t deviceCount;
  uint32_t cudaArch;
  uint32_t flags;
  uint32_t checksum;
  /// True when the 12 reserved bytes at the end are all zero.
  bool reservedZero;
};

/// One decoded section table entry.
struct SectionEntry {
  uint32_t kind;
  uint32_t flags;
  uint64_t offset;
  uint64_t size;
  uint32_t checksum;
  uint32_t reserved;
};

/// Byte offset of the header checksum field, zeroed while checksumming.
inline constexpr size_t kHeaderChecksumOffset = 48;

/// The minor version that added generation plans (the one they are written
/// as, and the least a file with a `Generation` table may declare; see
/// kFormatVersionMinor in format/format.h).
inline constexpr uint16_t kFormatVersionMinorGeneration = 4;
/// The minor version that added tiered plans (`Schedule.tiers`, paged
/// weight sections): written for them, and the least a file with either may
/// declare.
inline constexpr uint16_t kFormatVersionMinorTiers = 5;
/// The minor version that added the Attention step: written for plans that
/// have one, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorAttention = 6;
/// The minor version that added tiered layers of several Experts steps
/// (`TierLayer.more_steps`): written for plans that have one, and the least
/// a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorMicroBatchTiers = 7;
/// The minor version that added the tiers' read-ahead policy
/// (`ExpertTiers.prefetch`): written for plans that set one, and the least a
/// file with one may declare.
inline constexpr uint16_t kFormatVersionMinorTierPrefetch = 8;
/// 1.9 added what onnxruntime-genai's exports need: the Attention step's
/// sinks input and softcap, the GatedDeltaRule step, and generation tables
/// with an attention_mask or without position_ids.
inline constexpr uint16_t kFormatVersionMinorGenai = 9;
/// 1.10 added the Router's renormalisation over the kept assignments
/// (`RouterAttrs.normalize_kept_epsilon`) and the `ReluSquared` expert
/// activation: written for plans that use either, and the least a file
/// with one may declare.
inline constexpr uint16_t kFormatVersionMinorKeptNormalize = 10;
/// 1.11 added block-quantized weights kept packed: the MatMulNBits step and
/// `FfnAttrs.block_quant` (Experts' int4/int8 matrices with block scales and
/// zero points as inputs 8 to 13): written for plans that have either, and
/// the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorBlockQuant = 11;
/// 1.12 added `BlockQuantAttrs.int8_activations` (MatMulNBits and
/// `FfnAttrs.block_quant`): written for plans that set it, and the least a
/// file with one may declare.
inline constexpr uint16_t kFormatVersionMinorInt8Activations = 12;
/// 1.13 added the generation table's batching verdict (`batchable`,
/// `batch_blocker`, moe-analyze-batch-rows): written for generation plans
/// that set either, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorBatchRows = 13;
/// 1.14 added the vision encoders' steps (Conv and ConvAttrs): written for
/// plans that have one, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorVision = 14;
/// 1.15 added the generation table's `batch_windows`: written for
/// batchable plans with a sliding-window attention, and the least a file
/// with one may declare.
inline constexpr uint16_t kFormatVersionMinorBatchWindows = 15;
/// 1.16 added the Linear step (`moec compile --weight-dtype` on dense
/// matrices) and SharedExpert's int8 scales (inputs 8 to 10): written for
/// plans that have either, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorLinear = 16;
/// 1.17 added multimodal generation plans (`Program.multimodal`: stages,
/// feeds and the position rule), which a 1.16 reader would ignore: written
/// for plans with the table, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorMultimodal = 17;
/// 1.18 added the GridSample step (GridSampleAttrs): written for plans that
/// have one, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorGridSample = 18;
/// 1.19 let Gather read a bf16 or f16 weight table into an f32 output (an
/// embedding narrowed by `moec compile --weight-dtype`): written for plans
/// with such a Gather, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorWideningGather = 19;
/// 1.21 let a multimodal plan's position rule be the token's index
/// (`Multimodal.position_rows` empty: i64 [1, n] positions, Llama 4's) and
/// its vision inputs hold no grid (`image_grid` empty where no row needs
/// one): written for multimodal plans with either, and the least a file
/// with one may declare.
inline constexpr uint16_t kFormatVersionMinorIndexPositions = 21;
/// 1.22 added the multimodal grid rule (the Grid* feeds, `GridRule`) and
/// the image processor (`ImageProcessor`): written for multimodal plans
/// with either, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorGridRule = 22;
/// 1.23 added the CausalConv step and generation plans whose state pairs
/// have a prefill schedule (its first prompt starts from zero states):
/// written for plans with either, and the least a file with one may
/// declare.
inline constexpr uint16_t kFormatVersionMinorStatePrefill = 23;
/// 1.24 added `ImageProcessor.resize` (GLM-4V's smart resize): written for
/// plans whose image processor sizes images by another rule than
/// Qwen2-VL's, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorImageResize = 24;
/// 1.25 added `ImageResize.Llama4Tiles` (Llama 4's tiles) and
/// `ImageProcessor.max_tiles`, `resize_to_max_canvas`: written for plans
/// with that rule, and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorImageTiles = 25;
/// 1.26 let a multimodal plan's Prefill stage start state pairs (its first
/// prompt from zero states: onnxruntime-genai's decoder) and a stage other
/// than a Vision or the Prefill one read a Vision stage's output (genai's
/// embedding, taking the image features; a prompt without images then runs
/// through the decode schedule): written for multimodal plans with either,
/// and the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorGenaiStages = 26;
/// 1.27 let a multimodal plan run on several devices (its Prefill stage's
/// `other_device_schedules`) and its Prefill stage page the decode
/// schedule's tiered experts: written for multimodal plans with either, and
/// the least a file with one may declare.
inline constexpr uint16_t kFormatVersionMinorMultimodalExperts = 27;

void encodeHeader(const FileHeader &header, uint8_t out[kFileHeaderSize]);
FileHeader decodeHeader(const uint8_t in[kFileHeaderSize]);
void encodeSection(const SectionEntry &entry, uint8_t out[kSectionEntrySize]);
SectionEntry decodeSection(const uint8_t in[kSectionEntrySize]);

/// CRC-32 (zlib polynomial) of `size` bytes, continuing from `crc` (0 to
/// start): libdeflate's, which uses PCLMULQDQ where the CPU has it, and
/// equals zlib's crc32_z, which wrote plans before it.
uint32_t crc32(uint32_t crc, const void *data, size_t size);
/// The CRC-32 of A followed by B from A's (`first`), B's (`second`) and B's
/// size.
uint32_t crc32Combine(uint32_t first, uint32_t second, uint64_t secondSize);

/// The header checksum: CRC-32 of the 64 header bytes with the checksum field
/// taken as zero, followed by the section table bytes.
uint32_t headerChecksum(const uint8_t header[kFileHeaderSize],
                        const uint8_t *sectionTable, size_t sectionTableSize);

/// Rounds `value` up to a multiple of `alignment` (a power of two).
constexpr uint64_t alignTo(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

} // namespace moert::detail

#endif // MOERT_SRC_PLAN_FILE_H
