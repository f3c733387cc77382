/* Greedy ids of a llama.cpp model after given prompt ids (bench/llama_bench.py
 * compares them with moe-run's): llama_greedy MODEL.gguf N_NEW ID,ID,...
 * prints the N_NEW new ids, comma-separated, on stdout, and llama.cpp's
 * system_info line (the ISA features of its CPU backend) on stderr. Argmax of
 * the logits, lowest id on ties (as moe-run's greedy sampling). */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *data) {
  (void)level, (void)text, (void)data;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL.gguf N_NEW ID,ID,...\n", argv[0]);
    return 2;
  }
  int n_new = atoi(argv[2]);
  llama_token prompt[4096];
  int n = 0;
  for (char *s = strtok(argv[3], ","); s && n < 4096; s = strtok(NULL, ","))
    prompt[n++] = atoi(s);
  if (n == 0 || n_new < 1) {
    fprintf(stderr, "%s: need prompt ids and N_NEW >= 1\n", argv[0]);
    return 2;
  }
  llama_log_set(quiet, NULL);
  llama_backend_init();
  fprintf(stderr, "system_info: %s\n", llama_print_system_info());
  struct llama_model *model =
      llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) {
    fprintf(stderr, "%s: cannot load %s\n", argv[0], argv[1]);
    return 1;
  }
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n + n_new + 8;
  cp.n_batch = n;
  cp.n_threads = cp.n_threads_batch = 1;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  struct llama_batch batch = llama_batch_get_one(prompt, n);
  llama_token token;
  for (int i = 0; i < n_new; ++i) {
    if (llama_decode(ctx, batch)) {
      fprintf(stderr, "%s: llama_decode failed\n", argv[0]);
      return 1;
    }
    const float *logits = llama_get_logits_ith(ctx, -1);
    token = 0;
    for (int v = 1; v < vocab; ++v)
      if (logits[v] > logits[token])
        token = v;
    printf(i ? ",%d" : "%d", token);
    batch = llama_batch_get_one(&token, 1);
  }
  printf("\n");
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
