#!/usr/bin/env python3
"""Writes the word-level tokenizer of the zoo's Mixtral generation pair
(examples/zoo/v5/mixtral_generation_{prefill,decode}.onnx, vocabulary 128)
that the serving tests use, as transformers writes a tokenizer folder:

  make_tokenizer.py OUT_DIR   # OUT_DIR/tokenizer.json, tokenizer_config.json

Ids 0..6 are special (<unk>, <s>, </s> the end of sequence, and the chat
template's role and end markers), 7..127 one English word each; words split
on whitespace and decode joined by spaces. The model's weights are random,
so its text is a sequence of words, not sense. Id 2 (</s>) is none of
transformers' greedy ids of examples/zoo/v5/mixtral_generation_greedy.json,
so that those sequences run to their length.
"""

import json
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>",
           "<|end|>"]
WORDS = """the of and to in is was for on that with as by at from it his an
were are which this be has had not but have one their its first they new
two or after who her been all she time year more during other when world
over into city school only would later three most made there where between
some many can under part state long while team until people also game
music used second about war series before each through life well film him
government known way both name may found several river day since high last
small being area work north against around south light house red blue green
stone water fire wind tree sun star""".split()
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + ' <|end|> ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


def main():
    out = sys.argv[1]
    assert len(SPECIAL) + len(WORDS) == 128, len(WORDS)
    assert len(set(WORDS)) == len(WORDS)
    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder joins words with spaces ("##" never occurs).
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in SPECIAL])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 48,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
