#!/usr/bin/env python3
"""Writes a word-level tokenizer folder for a tiny vision-language plan's
vocabulary, with a chat template that places images as Qwen-VL's does
(`<|vision_start|><|image_pad|><|vision_end|>` for each image part):

  make_vlm_tokenizer.py OUT_DIR --vocab V --image-token I
                        [--llama4 [--config CONFIG.json]]

Ids I - 1, I and I + 1 are <|vision_start|>, <|image_pad|> (the plan's
image token) and <|vision_end|>; 0 <|endoftext|> (the end of sequence),
1 <|im_start|>, 2 <|im_end|>, 3 <unk>; the other ids are words. Words split
on whitespace and decode joined by spaces; the model's weights are random,
so its text is words, not sense.

--llama4: Llama4Processor's tokens instead, at the ids the multimodal zoo's
tiny Llama 4 gives them (examples/zoo/vlm/image_references.py): I - 3
<|tile_x_separator|>, I - 2 <|tile_y_separator|>, I - 1 <|image|>, I
<|patch|> (the plan's image token), I + 2 <|image_start|>, I + 3
<|image_end|>; 0 <|eot|> (the end of sequence), 1 <|begin_of_text|> (bos),
2 <|header_start|>, 3 <unk>. Its chat template writes bos, then per
message <|header_start|> and the content, an image part as <|image|>
(Llama 4's placeholder), so that a user message [image, word 5] is the
zoo's reference prompt [1, 2, <image>, 5]. --config copies the model's
config.json beside the tokenizer, as a model's folder has it.
"""

import argparse
import json
import os
import shutil

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

SPECIAL = {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>", 3: "<unk>"}
WORDS = """user assistant system describe this image the a red blue sky sea
what is in it and of to at on""".split()
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}")
LLAMA4_SPECIAL = {0: "<|eot|>", 1: "<|begin_of_text|>", 2: "<|header_start|>",
                  3: "<unk>"}
LLAMA4_IMAGE = {-3: "<|tile_x_separator|>", -2: "<|tile_y_separator|>",
                -1: "<|image|>", 0: "<|patch|>", 2: "<|image_start|>",
                3: "<|image_end|>"}
LLAMA4_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}{{ '<|header_start|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|image|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{% endfor %}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--image-token", type=int, required=True)
    p.add_argument("--llama4", action="store_true")
    p.add_argument("--config")
    args = p.parse_args()
    if args.llama4:
        special = dict(LLAMA4_SPECIAL)
        special.update({args.image_token + d: t
                        for d, t in LLAMA4_IMAGE.items()})
        assert len(special) == 10 and max(special) < args.vocab, special
    else:
        special = dict(SPECIAL)
        special.update({args.image_token - 1: "<|vision_start|>",
                        args.image_token: "<|image_pad|>",
                        args.image_token + 1: "<|vision_end|>"})
        assert len(special) == 7 and max(special) < args.vocab, special
    words = iter(WORDS + [f"w{i}" for i in range(args.vocab)])
    vocab = {}
    for i in range(args.vocab):
        vocab[special.get(i) or next(words)] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder joins words with spaces ("##" never occurs).
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for _, t in sorted(special.items())])
    os.makedirs(args.out, exist_ok=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast",
              "eos_token": "<|endoftext|>", "unk_token": "<unk>",
              "chat_template": CHAT_TEMPLATE}
    if args.llama4:
        config.update(eos_token="<|eot|>", bos_token="<|begin_of_text|>",
                      chat_template=LLAMA4_TEMPLATE)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    if args.config:
        shutil.copyfile(args.config, os.path.join(args.out, "config.json"))


if __name__ == "__main__":
    main()
