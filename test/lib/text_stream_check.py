#!/usr/bin/env python3
"""Checks moe-serve's streamed detokenization (moe_serve.text.TextStream) on
a byte-level BPE tokenizer trained here with the `tokenizers` library,
whose vocabulary keeps characters of several UTF-8 bytes (é, 日本, an emoji)
split over several tokens:

  text_stream_check.py     # PYTHONPATH: tools/moe-serve

Fed one id at a time, the stream never sends half a character, sends the
text that decoding all ids gives, holds back text that may begin a stop
string, and cuts at a stop string that spans tokens. Exit 0 when all hold.
"""

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from moe_serve.text import TextModel, TextStream


def byte_level_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the river runs to the sea"] * 50, trainer)
    tok.save(path)


def main():
    import os
    import tempfile
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "tokenizer.json")
    byte_level_tokenizer(path)
    model = TextModel(path)
    text = "the river café runs to 日本 and the sea 🌊 the end"
    ids = model.encode(text)
    ok = True

    def check(cond, what):
        nonlocal ok
        ok &= cond
        print(("ok " if cond else "FAIL ") + what, flush=True)

    multi = [c for c in set(text) if len(c.encode()) > 1]
    pieces = [model.tokenizer.id_to_token(i) for i in ids]
    check(len(ids) > len(text.split()) + len(multi),
          f"{len(ids)} ids for {len(text)} characters, {len(multi)} of "
          "several bytes")
    prompt = ids[:3]
    stream = TextStream(model, prompt)
    sent = [stream.add(i) for i in ids[3:]]
    sent.append(stream.finish())
    want = model.decode(ids)[len(model.decode(prompt)):]
    check("".join(sent) == want, f"streamed text = decoded text: {want!r}")
    check(all("\ufffd" not in s for s in sent),
          "no chunk holds half a character")
    held = sum(1 for s in sent[:-1] if s == "")
    check(held >= len(multi), f"{held} ids waited for the rest of their "
          f"character ({' '.join(pieces[:4])} ...)")

    for stop in ("日本", "🌊 the", "sea 🌊"):
        stream = TextStream(model, prompt, [stop])
        out = ""
        for i in ids[3:]:
            out += stream.add(i)
            if stream.stopped:
                break
        out += stream.finish()
        check(stream.stopped and out == want[:want.index(stop)],
              f"stop string {stop!r} across ids: {out!r}")
    stream = TextStream(model, prompt, ["the sky"])
    out = "".join(stream.add(i) for i in ids[3:]) + stream.finish()
    check(not stream.stopped and out == want,
          "a stop string's beginning ('the') is held, then sent")
    print("text stream: " + ("ok" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
