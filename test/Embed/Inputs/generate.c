/* Generates tokens through the installed C API (moert/moert_c.h):
 *
 *   generate PLAN MAX_NEW_TOKENS ID,ID,...
 *
 * Runs the prompt through a generation plan (greedy) and prints the new ids
 * on one line as they are drawn, then a "times:" line. Exit 0 when it
 * worked. */

#include <moert/moert_c.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ids on_token was called with. */
struct Streamed {
  int64_t ids[1024];
  size_t count;
};

static void printToken(int64_t token, void *user) {
  struct Streamed *streamed = user;
  printf("%s%lld", streamed->count ? " " : "", (long long)token);
  fflush(stdout);
  if (streamed->count < 1024)
    streamed->ids[streamed->count] = token;
  ++streamed->count;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: generate PLAN MAX_NEW_TOKENS ID,ID,...\n");
    return 2;
  }
  int64_t prompt[256];
  size_t length = 0;
  for (char *id = strtok(argv[3], ","); id && length < 256;
       id = strtok(NULL, ","))
    prompt[length++] = strtoll(id, NULL, 10);
  moert_generate_options options = moert_generate_options_default();
  options.max_new_tokens = strtoll(argv[2], NULL, 10);
  static struct Streamed streamed;
  options.on_token = printToken;
  options.user_data = &streamed;

  moert_plan *plan = NULL;
  moert_generator *generator = NULL;
  int64_t *tokens = malloc(sizeof(int64_t) * (size_t)options.max_new_tokens);
  size_t made = 0;
  moert_generation_times times;
  if (!tokens || moert_plan_load(argv[1], &plan) != MOERT_OK ||
      moert_generator_create(plan, NULL, &generator) != MOERT_OK ||
      moert_generator_generate(generator, prompt, length, &options, tokens,
                               (size_t)options.max_new_tokens,
                               &made) != MOERT_OK ||
      moert_generator_times(generator, &times) != MOERT_OK) {
    fprintf(stderr, "generate: error: %s\n", moert_last_error());
    return 1;
  }
  printf("\ntimes: %lld new tokens, %lld decode steps in %.3f ms\n",
         (long long)times.new_tokens, (long long)times.decode_steps,
         times.decode_seconds * 1e3);
  /* The ids returned are the ids streamed. */
  int same = streamed.count == made && made <= 1024 &&
             memcmp(streamed.ids, tokens, made * sizeof(int64_t)) == 0;
  if (!same)
    fprintf(stderr, "generate: the streamed ids differ from those returned\n");
  free(tokens);
  moert_generator_free(generator);
  moert_plan_free(plan);
  return same ? 0 : 1;
}
