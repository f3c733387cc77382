#!/usr/bin/env python3
"""Checks text generation on the command line: `moe-run PLAN --tokenizer DIR
--prompt TEXT` (which runs `moe-serve generate`) against `moe-run PLAN
--prompt-ids IDS` and the `tokenizers` library's encoding and decoding.

  text_generate_check.py PLAN TOKENIZER_DIR

The text prompt's new text is the decoded new ids of its ids; --chat renders
the messages as the chat template says; --stop ends the text before the
string; sampling is seeded. Prints "ok ..." per check, exit 1 on a mismatch.
"""

import os
import subprocess
import sys

from tokenizers import Tokenizer


def run(*args):
    out = subprocess.run(["moe-run", *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL moe-run {' '.join(args)}: exit {out.returncode}\n"
                 f"{out.stderr}")
    return out.stdout


def main():
    plan, folder = sys.argv[1:3]
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    ok = True

    def check(cond, what):
        nonlocal ok
        ok &= cond
        print(("ok " if cond else "FAIL ") + what, flush=True)

    def via_ids(ids, n, *extra):
        new = [int(x) for x in run(plan, "--prompt-ids",
                                   ",".join(map(str, ids)),
                                   "--max-new-tokens", str(n),
                                   *extra).split()]
        return tok.decode(ids + new)[len(tok.decode(ids)):]

    text = "the city of light and the river"
    ids = tok.encode(text).ids
    got = run(plan, "--tokenizer", folder, "--prompt", text,
              "--max-new-tokens", "12")
    want = via_ids(ids, 12)
    check(got == want + "\n" and len(want.split()) > 5,
          f"--prompt {text!r}: {got.rstrip()!r}")

    rendered = "<|system|> water <|end|> <|user|> the sun <|end|> <|assistant|>"
    got = run(plan, "--tokenizer", folder, "--prompt", "the sun", "--chat",
              "--system", "water", "--max-new-tokens", "8")
    want = via_ids(tok.encode(rendered, add_special_tokens=False).ids, 8)
    check(got == want + "\n", f"--chat --system: {got.rstrip()!r}")

    full = via_ids(ids, 12)
    stop = " ".join(full.split()[2:4])
    got = run(plan, "--tokenizer", folder, "--prompt", text, "--stop", stop,
              "--max-new-tokens", "12")
    check(got == full[:full.index(stop)] + "\n", f"--stop {stop!r}: "
          f"{got.rstrip()!r}")

    sampled = ["--temperature", "0.8", "--top-k", "20", "--seed", "5"]
    got = run(plan, "--tokenizer", folder, "--prompt", text,
              "--max-new-tokens", "10", *sampled)
    want = via_ids(ids, 10, *sampled)
    check(got == want + "\n", f"seeded sampling: {got.rstrip()!r}")
    print("text generate: " + ("ok" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
