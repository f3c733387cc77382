/*===- moert_c.h - The C API of the moec runtime ------------------*- C -*-===*\
|*                                                                            *|
|* A C interface to the runtime (library `moert`, docs/embedding.md): load a  *|
|* plan, describe its inputs and outputs, create a session, run it on the     *|
|* caller's buffers, read the outputs and the statistics. Plain C99; no C++   *|
|* exception or Abseil type crosses it. Typical use:                          *|
|*                                                                            *|
|*   moert_plan *plan;                                                        *|
|*   moert_session *session;                                                  *|
|*   if (moert_plan_load("plan.bin", &plan) != MOERT_OK ||                    *|
|*       moert_session_create(plan, NULL, &session) != MOERT_OK) {            *|
|*     fprintf(stderr, "%s\n", moert_last_error());                           *|
|*     return 1;                                                              *|
|*   }                                                                        *|
|*   int64_t shape[2] = {1, 16};                                              *|
|*   moert_session_set_input(session, "input_ids", MOERT_DTYPE_I64, shape, 2, *|
|*                           ids, sizeof ids);                                *|
|*   moert_session_run(session);                                              *|
|*   moert_tensor logits;                                                     *|
|*   moert_session_output(session, "logits", &logits);                        *|
|*   moert_session_free(session);                                             *|
|*   moert_plan_free(plan);                                                   *|
|*                                                                            *|
|* Errors: every function that can fail returns a moert_status; on anything  *|
|* but MOERT_OK it records a message (naming the file, input or output at     *|
|* fault) that moert_last_error() returns on the same thread. A successful    *|
|* call leaves the last message as it was.                                    *|
|*                                                                            *|
|* Threads: a plan is immutable and may be shared by sessions on several      *|
|* threads; one session must be used by one thread at a time. A session must *|
|* be freed before its plan.                                                  *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef MOERT_MOERT_C_H
#define MOERT_MOERT_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The result of every fallible call. The values are stable.
typedef enum moert_status {
  MOERT_OK = 0,
  /// A malformed argument: a null pointer, an index out of range, a value
  /// of the wrong dtype, rank, shape or size.
  MOERT_ERROR_INVALID_ARGUMENT = 1,
  /// An unknown input or output name, or a file that does not exist.
  MOERT_ERROR_NOT_FOUND = 2,
  /// A call out of order: running before every input is set, reading an
  /// output before a successful run.
  MOERT_ERROR_FAILED_PRECONDITION = 3,
  /// A plan file that cannot be read or fails validation (corrupted,
  /// truncated, an unsupported format version).
  MOERT_ERROR_INVALID_PLAN = 4,
  /// Not enough memory for the session, or a value beyond a limit.
  MOERT_ERROR_RESOURCE_EXHAUSTED = 5,
  /// The plan needs what this build lacks (another backend, a communicator).
  MOERT_ERROR_UNSUPPORTED = 6,
  /// Anything else (a bug in the runtime).
  MOERT_ERROR_INTERNAL = 7,
} moert_status;

/// Element types; the values match moert::DType and the plan schema.
typedef enum moert_dtype {
  MOERT_DTYPE_F32 = 1,
  MOERT_DTYPE_F16 = 2,
  MOERT_DTYPE_BF16 = 3,
  MOERT_DTYPE_I64 = 4,
  MOERT_DTYPE_I32 = 5,
  /// One byte per element, 0 or 1.
  MOERT_DTYPE_BOOL = 6,
  MOERT_DTYPE_I8 = 7,
} moert_dtype;

/// How a declared dimension is sized.
typedef enum moert_dim_kind {
  /// Always `bound`.
  MOERT_DIM_STATIC = 0,
  /// A named graph-input size (`symbol`), in [symbol min, `bound`]; every
  /// dimension of the same symbol has the same size in one run.
  MOERT_DIM_SYMBOLIC = 1,
  /// Computed by the run (data-dependent), at most `bound`.
  MOERT_DIM_DYNAMIC = 2,
} moert_dim_kind;

/// One dimension of a declared input or output.
typedef struct moert_dim {
  moert_dim_kind kind;
  /// The size (static) or the largest size (symbolic, dynamic).
  int64_t bound;
  /// The symbol's name (symbolic only; NULL otherwise).
  const char *symbol;
  /// The symbol's smallest size (symbolic only; 0 otherwise).
  int64_t symbol_min;
} moert_dim;

/// A graph input or output as the plan declares it. The pointers stay valid
/// as long as the plan.
typedef struct moert_tensor_desc {
  const char *name;
  moert_dtype dtype;
  int32_t rank;
  /// `rank` entries.
  const moert_dim *dims;
  /// Bytes of the value at the bounds of every dimension (for an output a
  /// step computes, its planned size if that is more): what a buffer bound
  /// to the output with moert_session_bind_output needs.
  uint64_t max_bytes;
} moert_tensor_desc;

/// A value of a session: an output after a run. `shape` and `data` stay
/// valid until the session's next run (or until it is freed).
typedef struct moert_tensor {
  moert_dtype dtype;
  int32_t rank;
  /// `rank` entries.
  const int64_t *shape;
  const void *data;
  size_t bytes;
} moert_tensor;

/// Options of moert_session_create; moert_session_options_default() gives
/// the defaults.
typedef struct moert_session_options {
  /// Worker threads of the kernels; 0 picks the hardware concurrency.
  int32_t threads;
  /// Nonzero: time every step (moert_session_step_stats).
  int32_t collect_stats;
} moert_session_options;

/// The accumulated timing of one step over the runs since the session was
/// created or its statistics reset. The strings stay valid until the
/// session's next run, reset or free.
typedef struct moert_step_stats {
  const char *name;
  /// The step's kind ("MatMul", "Experts", ...).
  const char *op;
  uint64_t calls;
  double total_seconds;
} moert_step_stats;

/// A loaded and validated plan (opaque).
typedef struct moert_plan moert_plan;
/// An execution context of one plan (opaque).
typedef struct moert_session moert_session;
/// Token generation over a generation plan (opaque).
typedef struct moert_generator moert_generator;

/// Options of moert_generator_generate; moert_generate_options_default()
/// gives the defaults (docs/cli.md, "Sampling", gives the algorithm).
typedef struct moert_generate_options {
  /// New tokens to produce (default 16); prompt plus new tokens must fit in
  /// the plan's max_seq.
  int64_t max_new_tokens;
  /// 0 (default): greedy, the first id of the largest logit; above 0:
  /// sampled, reproducibly for `seed`.
  double temperature;
  /// Keep the k most likely ids (0, default: all).
  int64_t top_k;
  /// Keep the fewest most likely ids whose probability reaches top_p (1,
  /// default: all).
  double top_p;
  uint64_t seed;
  /// Generation stops after producing one of these `num_stop_ids` ids (kept).
  const int64_t *stop_ids;
  size_t num_stop_ids;
  /// Called with each new id as soon as it is drawn, with `user_data`
  /// (NULL: not called).
  void (*on_token)(int64_t token, void *user_data);
  void *user_data;
  /// Called with `user_data` after each new id that does not end the
  /// generation anyway (after on_token): nonzero ends it there, with the ids
  /// drawn so far (a client that went away). NULL: never called.
  int (*should_stop)(void *user_data);
} moert_generate_options;

/// The times of a generator's last moert_generator_generate.
typedef struct moert_generation_times {
  int64_t prompt_tokens;
  int64_t new_tokens;
  /// The prefill run, and from the start to the first new token.
  double prefill_seconds;
  double first_token_seconds;
  /// The decode steps (new_tokens - 1 of them), sampling included.
  int64_t decode_steps;
  double decode_seconds;
  /// 1 when should_stop ended the generation, else 0.
  int32_t stopped_early;
} moert_generation_times;

/// The runtime's version, "MAJOR.MINOR.PATCH".
const char *moert_version(void);

/// The message of the last failed call on this thread ("" when none has
/// failed). Valid until the next failing call on this thread.
const char *moert_last_error(void);

/// "f32", "f16", "bf16", "i64", "i32", "bool", "i8", or "invalid".
const char *moert_dtype_name(moert_dtype dtype);

/// Bytes per element of `dtype` (0 for an invalid value).
size_t moert_dtype_size(moert_dtype dtype);

/// Maps the plan file at `path` and validates it (checksums included). On
/// success stores a plan that the caller frees with moert_plan_free.
moert_status moert_plan_load(const char *path, moert_plan **plan);

/// Frees a plan (NULL is ignored). Its sessions must be freed first.
void moert_plan_free(moert_plan *plan);

/// The number of graph inputs of the plan's (first) device schedule.
size_t moert_plan_num_inputs(const moert_plan *plan);

/// The number of graph outputs of the plan's (first) device schedule.
size_t moert_plan_num_outputs(const moert_plan *plan);

/// Describes input `index` (in [0, moert_plan_num_inputs)) into `desc`.
moert_status moert_plan_input(const moert_plan *plan, size_t index,
                              moert_tensor_desc *desc);

/// Describes output `index` (in [0, moert_plan_num_outputs)) into `desc`.
moert_status moert_plan_output(const moert_plan *plan, size_t index,
                               moert_tensor_desc *desc);

/// The number of device schedules; a plan of more than one needs a device
/// group, which this API does not create (moe-run --devices does).
int32_t moert_plan_num_devices(const moert_plan *plan);

/// The default session options: hardware threads, statistics on.
moert_session_options moert_session_options_default(void);

/// Creates a CPU session over `plan` (`options` NULL: the defaults). The
/// caller frees it with moert_session_free before the plan.
moert_status moert_session_create(const moert_plan *plan,
                                  const moert_session_options *options,
                                  moert_session **session);

/// Frees a session (NULL is ignored).
void moert_session_free(moert_session *session);

/// Copies the value of input `name`: `rank` sizes at `shape`, `bytes` bytes
/// of `dtype` elements at `data`. Checks the dtype, the rank, the static
/// sizes, the bounds and that `bytes` matches the shape. The value stays
/// set across runs.
moert_status moert_session_set_input(moert_session *session, const char *name,
                                     moert_dtype dtype, const int64_t *shape,
                                     int32_t rank, const void *data,
                                     size_t bytes);

/// Like moert_session_set_input, but without a copy: the runs read input
/// `name` from `data` until the next set or bind of it. `data` must stay
/// valid and unchanged while a run that reads it executes.
moert_status moert_session_bind_input(moert_session *session, const char *name,
                                      moert_dtype dtype, const int64_t *shape,
                                      int32_t rank, const void *data,
                                      size_t bytes);

/// Makes the runs write output `name` into `data` (`capacity` bytes, at
/// least the output's max_bytes) instead of the session's memory; NULL
/// restores the session's memory. moert_session_output then points into
/// `data`. Fails for an output that no step computes (an input or a
/// constant passed through), which moert_session_output always reads.
moert_status moert_session_bind_output(moert_session *session, const char *name,
                                       void *data, size_t capacity);

/// Runs every step of the plan on the inputs set or bound.
moert_status moert_session_run(moert_session *session);

/// The value of output `name` after a successful run (in the session's
/// memory, or in the bound buffer).
moert_status moert_session_output(moert_session *session, const char *name,
                                  moert_tensor *tensor);

/// The number of successful runs and the wall time of the last one in
/// seconds (either pointer may be NULL).
moert_status moert_session_run_time(const moert_session *session,
                                    uint64_t *runs, double *last_seconds);

/// The number of steps of the session's schedule.
size_t moert_session_num_steps(const moert_session *session);

/// The accumulated timing of step `index` (schedule order) into `stats`.
moert_status moert_session_step_stats(moert_session *session, size_t index,
                                      moert_step_stats *stats);

/// Clears the step statistics and the run count.
moert_status moert_session_reset_stats(moert_session *session);

/// The default generation options: 16 new tokens, greedy, no stop ids.
moert_generate_options moert_generate_options_default(void);

/// Creates a generator over a generation plan (`moec compile DECODE.onnx
/// [--prefill PREFILL.onnx] --max-seq S`) on the CPU; an expert-parallel
/// one (`--devices N`) runs its N devices in this process. Of `options`
/// (NULL: the defaults) only `threads` applies: per device, 0 dividing the
/// hardware concurrency among them. Fails with MOERT_ERROR_FAILED_PRECONDITION
/// for a plan that is no generation plan. The caller frees it with
/// moert_generator_free before the plan.
moert_status moert_generator_create(const moert_plan *plan,
                                    const moert_session_options *options,
                                    moert_generator **generator);

/// Frees a generator (NULL is ignored).
void moert_generator_free(moert_generator *generator);

/// Runs the prompt's `prompt_length` ids from a clear cache, then draws up
/// to `options->max_new_tokens` new ids (`options` NULL: the defaults) into
/// `tokens`, which must have room for that many (`capacity`); stores their
/// count in `num_tokens`. Ids must be in [0, vocab).
moert_status moert_generator_generate(moert_generator *generator,
                                      const int64_t *prompt,
                                      size_t prompt_length,
                                      const moert_generate_options *options,
                                      int64_t *tokens, size_t capacity,
                                      size_t *num_tokens);

/// One vision input of a multimodal plan's prompt (format 1.17,
/// docs/multimodal.md): the vision graph's input `name` (or the image grid),
/// as the model's processor gives it; `rank` dims in `shape`, `bytes` of
/// `data`.
typedef struct moert_vision_input {
  const char *name;
  moert_dtype dtype;
  const int64_t *shape;
  int32_t rank;
  const void *data;
  size_t bytes;
} moert_vision_input;

/// moert_generator_generate with a multimodal plan's `num_vision` vision
/// inputs, for a prompt with image tokens (0 inputs: as
/// moert_generator_generate). An input the plan does not take, a missing
/// one, one of another dtype or shape than the plan's input, or image
/// tokens the images do not match fail with MOERT_ERROR_INVALID_ARGUMENT
/// naming it.
moert_status moert_generator_generate_vision(
    moert_generator *generator, const int64_t *prompt, size_t prompt_length,
    const moert_vision_input *vision, size_t num_vision,
    const moert_generate_options *options, int64_t *tokens, size_t capacity,
    size_t *num_tokens);

/// One image of a multimodal plan's prompt for
/// moert_generator_generate_images: the PNG or JPEG file at `path`, or,
/// with `path` NULL, the file's encoded bytes: `bytes` of `data`, valid for
/// the call.
typedef struct moert_image {
  const char *path;
  const void *data;
  size_t bytes;
} moert_image;

/// moert_generator_generate_vision with the prompt's `num_images` images,
/// in its image order, decoded and preprocessed by the plan's image
/// processor (moert::loadImages, docs/multimodal.md "Images") into the
/// pixel patches and grids; every image is a path, or every one bytes.
/// A plan that is not multimodal or has no image
/// processor, an unreadable, truncated or unsupported image (a file is
/// named by its path, bytes as "image K"), or image tokens the images do
/// not match fail with MOERT_ERROR_INVALID_ARGUMENT naming it.
moert_status moert_generator_generate_images(
    moert_generator *generator, const int64_t *prompt, size_t prompt_length,
    const moert_image *images, size_t num_images,
    const moert_generate_options *options, int64_t *tokens, size_t capacity,
    size_t *num_tokens);

/// One step at a time: moert_generator_prefill runs the prompt from a clear
/// cache; moert_generator_decode runs `token` at the next position. Each
/// leaves the logits of its last position (moert_generator_logits).
moert_status moert_generator_prefill(moert_generator *generator,
                                     const int64_t *prompt,
                                     size_t prompt_length);
moert_status moert_generator_decode(moert_generator *generator, int64_t token);

/// The `vocab` logits of the last position of the last step (device 0's),
/// valid until the next step.
moert_status moert_generator_logits(const moert_generator *generator,
                                    const float **logits, int64_t *vocab);

/// The positions the caches hold, the plan's max_seq (either pointer may be
/// NULL).
moert_status moert_generator_length(const moert_generator *generator,
                                    int64_t *length, int64_t *max_seq);

/// The times of the last moert_generator_generate.
moert_status moert_generator_times(const moert_generator *generator,
                                   moert_generation_times *times);

/// Continuous batching over a generation plan (opaque): many sequences share
/// each step (moert::BatchGenerator, docs/embedding.md).
typedef struct moert_batch moert_batch;

/// Why a sequence ended (moert_batch_event.finish).
typedef enum moert_finish {
  MOERT_FINISH_NONE = 0,
  /// It drew one of its stop ids (kept).
  MOERT_FINISH_STOP = 1,
  /// It drew its max_new_tokens.
  MOERT_FINISH_LENGTH = 2,
  /// moert_batch_cancel removed it.
  MOERT_FINISH_CANCELLED = 3,
} moert_finish;

/// What one step did for one sequence: its new token (-1: none, a sequence
/// cancelled while it ran) and whether it ended with it.
typedef struct moert_batch_event {
  int64_t sequence;
  int64_t token;
  moert_finish finish;
} moert_batch_event;

/// Creates a batch over a generation plan with `slots` sequences at once
/// (a KV pool of slots × max_seq positions). Of `options` (NULL: the
/// defaults) only `threads` applies. A plan the compiler did not prove
/// batchable is served one sequence at a time (moert_batch_blocker says
/// why). Fails with MOERT_ERROR_FAILED_PRECONDITION for a plan that is no
/// generation plan or has several devices. Free it before the plan.
moert_status moert_batch_create(const moert_plan *plan,
                                const moert_session_options *options,
                                int32_t slots, moert_batch **batch);

/// Frees a batch (NULL is ignored).
void moert_batch_free(moert_batch *batch);

/// Queues a sequence; stores its id (from 1) in `sequence`. Of `options`
/// (NULL: the defaults) every field but on_token, should_stop and user_data
/// applies.
/// May be called from another thread while moert_batch_step runs.
moert_status moert_batch_add(moert_batch *batch, const int64_t *prompt,
                             size_t prompt_length,
                             const moert_generate_options *options,
                             int64_t *sequence);

/// Removes a queued or running sequence; `found` (may be NULL) says
/// whether there was one. May be called from another thread.
moert_status moert_batch_cancel(moert_batch *batch, int64_t sequence,
                                int *found);

/// Runs one step over every running sequence (and prompt rows of new
/// ones); `events` points at `num_events` events, valid until the next
/// step. No events when there is nothing to run.
moert_status moert_batch_step(moert_batch *batch,
                              const moert_batch_event **events,
                              size_t *num_events);

/// The slots, those in use and the sequences waiting for one (any pointer
/// may be NULL).
moert_status moert_batch_counts(const moert_batch *batch, int32_t *slots,
                                int32_t *slots_in_use, int32_t *waiting);

/// "" when steps batch several sequences; else why the plan is served one
/// sequence at a time. Valid while `batch` lives.
const char *moert_batch_blocker(const moert_batch *batch);

/// Per MoE layer the rows routed to each expert since creation: the
/// number of layers in `num_layers`; `counts` points at the `num_experts`
/// counts of layer `layer` (which must be below that when either is asked
/// for), valid until the next call on `batch`. Any output pointer may be
/// NULL.
moert_status moert_batch_expert_selections(moert_batch *batch, size_t layer,
                                           const uint64_t **counts,
                                           size_t *num_experts,
                                           size_t *num_layers);

#ifdef __cplusplus
} // extern "C"
#endif

#endif /* MOERT_MOERT_C_H */
