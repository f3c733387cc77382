/* Runs a plan through the installed C API (moert/moert_c.h):
 *
 *   app PLAN OUTDIR NAME=FILE:D0xD1... ...
 *
 * Each input is the raw bytes of FILE with shape D0 x D1 ..., of the dtype
 * the plan declares; each output is written raw to OUTDIR/NAME.bin. Prints
 * the plan's inputs and outputs, the outputs' shapes and the run's timing,
 * then checks that an unknown input name and a missing plan file fail with
 * their codes and messages. Exit 0 when all of it worked. */

#include <moert/moert_c.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what) {
  fprintf(stderr, "app: error: %s: %s\n", what, moert_last_error());
  return 1;
}

static void printDesc(const char *kind, const moert_tensor_desc *d) {
  printf("%s %s: %s [", kind, d->name, moert_dtype_name(d->dtype));
  for (int32_t i = 0; i < d->rank; ++i) {
    const moert_dim *dim = &d->dims[i];
    if (i)
      printf(", ");
    if (dim->kind == MOERT_DIM_STATIC)
      printf("%lld", (long long)dim->bound);
    else if (dim->kind == MOERT_DIM_SYMBOLIC)
      printf("%s in [%lld, %lld]", dim->symbol, (long long)dim->symbol_min,
             (long long)dim->bound);
    else
      printf("<=%lld", (long long)dim->bound);
  }
  printf("]\n");
}

/* Reads all of `path` into a malloc'd buffer; its size in *size. */
static void *readFile(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *data = malloc(n > 0 ? (size_t)n : 1);
  *size = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: app PLAN OUTDIR NAME=FILE:D0xD1... ...\n");
    return 2;
  }
  printf("moert %s\n", moert_version());
  moert_plan *plan = NULL;
  if (moert_plan_load(argv[1], &plan) != MOERT_OK)
    return fail("loading the plan");
  moert_tensor_desc desc;
  for (size_t i = 0; i < moert_plan_num_inputs(plan); ++i)
    if (moert_plan_input(plan, i, &desc) == MOERT_OK)
      printDesc("input", &desc);
  for (size_t i = 0; i < moert_plan_num_outputs(plan); ++i)
    if (moert_plan_output(plan, i, &desc) == MOERT_OK)
      printDesc("output", &desc);

  moert_session_options options = moert_session_options_default();
  options.threads = 2;
  moert_session *session = NULL;
  if (moert_session_create(plan, &options, &session) != MOERT_OK)
    return fail("creating the session");

  void *buffers[16];
  int numBuffers = 0;
  for (int a = 3; a < argc && numBuffers < 16; ++a) {
    char *spec = argv[a], *eq = strchr(spec, '='), *colon = strrchr(spec, ':');
    if (!eq || !colon || colon < eq) {
      fprintf(stderr, "app: error: bad input '%s'\n", spec);
      return 2;
    }
    *eq = *colon = '\0';
    int64_t shape[8];
    int32_t rank = 0;
    for (char *d = colon + 1; *d && rank < 8; ++rank) {
      shape[rank] = strtoll(d, &d, 10);
      if (*d == 'x')
        ++d;
    }
    moert_dtype dtype = MOERT_DTYPE_F32;
    for (size_t i = 0; i < moert_plan_num_inputs(plan); ++i)
      if (moert_plan_input(plan, i, &desc) == MOERT_OK &&
          strcmp(desc.name, spec) == 0)
        dtype = desc.dtype;
    size_t bytes = 0;
    void *data = readFile(eq + 1, &bytes);
    if (!data) {
      fprintf(stderr, "app: error: cannot read '%s'\n", eq + 1);
      return 1;
    }
    buffers[numBuffers++] = data;
    /* The session reads the buffer in place on every run. */
    if (moert_session_bind_input(session, spec, dtype, shape, rank, data,
                                 bytes) != MOERT_OK)
      return fail("binding an input");
  }
  if (moert_session_run(session) != MOERT_OK)
    return fail("running");

  for (size_t i = 0; i < moert_plan_num_outputs(plan); ++i) {
    moert_tensor value;
    if (moert_plan_output(plan, i, &desc) != MOERT_OK ||
        moert_session_output(session, desc.name, &value) != MOERT_OK)
      return fail("reading an output");
    printf("result %s: %s [", desc.name, moert_dtype_name(value.dtype));
    for (int32_t d = 0; d < value.rank; ++d)
      printf(d ? ", %lld" : "%lld", (long long)value.shape[d]);
    printf("]\n");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", argv[2], desc.name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(value.data, 1, value.bytes, f) != value.bytes) {
      fprintf(stderr, "app: error: cannot write '%s'\n", path);
      return 1;
    }
    fclose(f);
  }
  uint64_t runs = 0;
  double seconds = 0;
  moert_step_stats step;
  if (moert_session_run_time(session, &runs, &seconds) != MOERT_OK ||
      moert_session_step_stats(session, 0, &step) != MOERT_OK)
    return fail("reading the statistics");
  printf("stats: %llu run(s), %zu steps, first step %s (%s) %llu call(s)\n",
         (unsigned long long)runs, moert_session_num_steps(session), step.name,
         step.op, (unsigned long long)step.calls);
  if (!(seconds > 0)) {
    fprintf(stderr, "app: error: the run took %g s\n", seconds);
    return 1;
  }

  /* The error paths: codes and messages naming the culprit. */
  int64_t one = 1;
  if (moert_session_set_input(session, "no_such_input", MOERT_DTYPE_F32, &one,
                              1, &seconds, 4) != MOERT_ERROR_NOT_FOUND ||
      !strstr(moert_last_error(), "no_such_input")) {
    fprintf(stderr, "app: error: an unknown input gave '%s'\n",
            moert_last_error());
    return 1;
  }
  printf("unknown input: %s\n", moert_last_error());
  moert_plan *missing = NULL;
  if (moert_plan_load("/nonexistent/plan.bin", &missing) !=
          MOERT_ERROR_NOT_FOUND ||
      missing || !strstr(moert_last_error(), "/nonexistent/plan.bin")) {
    fprintf(stderr, "app: error: a missing plan gave '%s'\n",
            moert_last_error());
    return 1;
  }
  printf("missing plan: %s\n", moert_last_error());

  moert_session_free(session);
  moert_plan_free(plan);
  for (int b = 0; b < numBuffers; ++b)
    free(buffers[b]);
  return 0;
}
