"""Text in and out: the tokenizer, the chat template and streamed text.

A tokenizer PATH is a tokenizer.json, or a folder as transformers and
onnxruntime-genai write it (tokenizer.json; tokenizer_config.json with its
chat_template, bos_token and eos_token; chat_template.jinja;
generation_config.json and genai_config.json with eos ids). Tokenization is
the `tokenizers` library's, streamed detokenization its DecodeStream, and
chat templates render as transformers renders them (a sandboxed jinja2
environment with trim_blocks and lstrip_blocks, raise_exception, tojson and
strftime_now).
"""

import datetime
import json
import os
from typing import Optional

import jinja2
import jinja2.ext
import jinja2.sandbox
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


class ChatTemplateError(ValueError):
    """The chat template refused the messages (raise_exception), or failed."""


def _token_text(value) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: a string, or an
    AddedToken dict with its content."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> list:
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []


class TextModel:
    """A tokenizer with what the folder says about chat and end of sequence."""

    def __init__(self, path: str):
        folder = None
        if os.path.isdir(path):
            folder = path
            path = os.path.join(folder, "tokenizer.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path}: no such file (--tokenizer takes a tokenizer.json "
                "or a folder with one)")
        self.path = path
        #: The folder given (where the model's other files may be), or None
        #: for a tokenizer.json.
        self.folder = folder
        self.tokenizer = Tokenizer.from_file(path)
        config = {}
        if folder:
            config = self._json(folder, "tokenizer_config.json")
        self.chat_template: Optional[str] = None
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": ..., "template": ...}]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()),
                                                    None)
        if folder and os.path.isfile(os.path.join(folder,
                                                  "chat_template.jinja")):
            with open(os.path.join(folder, "chat_template.jinja")) as f:
                template = f.read()
        if isinstance(template, str):
            self.chat_template = template
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        eos = set()
        if self.eos_token is not None:
            eos_id = self.tokenizer.token_to_id(self.eos_token)
            if eos_id is not None:
                eos.add(eos_id)
        if folder:
            eos.update(_ids(self._json(folder, "generation_config.json")
                            .get("eos_token_id")))
            genai = self._json(folder, "genai_config.json").get("model", {})
            eos.update(_ids(genai.get("eos_token_id")))
        self.eos_ids = sorted(eos)
        self._template = None
        if self.chat_template is not None:
            env = jinja2.sandbox.ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True,
                extensions=[jinja2.ext.loopcontrols])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise_exception
            env.globals["strftime_now"] = _strftime_now
            self._template = env.from_string(self.chat_template)

    @staticmethod
    def _json(folder, name) -> dict:
        p = os.path.join(folder, name)
        if not os.path.isfile(p):
            return {}
        with open(p) as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, special: bool = True) -> list:
        """`special`: add the post-processor's special tokens (bos); a
        rendered chat template already has them."""
        return self.tokenizer.encode(text, add_special_tokens=special).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def render_chat(self, messages: list, add_generation_prompt=True,
                    **extra) -> str:
        if self._template is None:
            raise ChatTemplateError(
                f"the tokenizer ({self.path}) has no chat template: give "
                "--tokenizer a folder whose tokenizer_config.json has a "
                "chat_template (or chat_template.jinja)")
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "",
                **extra)
        except ChatTemplateError:
            raise
        except (jinja2.TemplateError, TypeError) as e:
            # TypeError: e.g. a template that adds a list of content parts
            # to a string.
            raise ChatTemplateError(f"the chat template failed: {e}") from e


def _raise_exception(message):
    raise ChatTemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None,
            sort_keys=False):
    # transformers' tojson: json.dumps, non-ASCII kept as it is.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


class TextStream:
    """Turns new ids into text as they come: DecodeStream joins the bytes of
    characters split over several tokens, and text that may begin a stop
    string is held back until it is known not to. The ids in `stop_ids` end
    the text without adding their own."""

    def __init__(self, model: TextModel, prompt_ids: list, stop_strings=(),
                 stop_ids=()):
        self._model = model
        # A few prompt ids give the first new token its leading space.
        self._decode = DecodeStream(ids=list(prompt_ids[-8:]),
                                    skip_special_tokens=True)
        self._stops = [s for s in stop_strings if s]
        self._stop_ids = set(stop_ids)
        self._held = ""
        self.stopped = False
        self.text = ""

    def add(self, token: int) -> str:
        """The text that `token` makes final, to send now."""
        if self.stopped:
            return ""
        if token in self._stop_ids:
            self.stopped = True
            return self._emit(self._held, 0)
        piece = self._decode.step(self._model.tokenizer, token) or ""
        text = self._held + piece
        cuts = [text.find(s) for s in self._stops]
        cuts = [c for c in cuts if c >= 0]
        if cuts:
            self.stopped = True
            return self._emit(text[:min(cuts)], 0)
        keep = 0
        for s in self._stops:
            for n in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:n]):
                    keep = n
                    break
        return self._emit(text, keep)

    def finish(self) -> str:
        """The text held back, once no more ids come."""
        if self.stopped:
            return ""
        return self._emit(self._held, 0)

    def _emit(self, text, keep):
        out = text[:len(text) - keep]
        self._held = text[len(text) - keep:]
        self.text += out
        return out
