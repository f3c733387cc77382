"""Images in chat messages: OpenAI's `image_url` content parts as data URIs,
and the image tokens placed as the model's processor places them
(docs/serving.md, "Images").

A message's `{"type": "image_url", "image_url": {"url": "data:image/png;
base64,..."}}` part becomes a `{"type": "image"}` part for the chat template
(which writes the model's image placeholder, e.g. Qwen's `<|vision_start|>
<|image_pad|><|vision_end|>`), and its bytes are decoded by the plan's image
processor (moert.load_images). Each image's one image token in the rendered
prompt then becomes as many as the image has merged patches: t * h * w /
merge^2 of its grid, as transformers' Qwen2-VL processor expands it.
A plan of Llama 4's tiles instead replaces each image's placeholder
(`<|image|>`) with Llama4Processor's layout of the image's canvas of tiles
(TileLayout). The server fetches nothing: an http(s) URL is refused.
"""

import base64
import binascii
import json
import os
import re
from typing import Optional

#: The default of --max-image-bytes: the largest decoded image of a request.
DEFAULT_MAX_IMAGE_BYTES = 16 << 20

_MEDIA_TYPES = ("image/png", "image/jpeg", "image/jpg")
_DATA_URI = re.compile(r"data:([^,;]*)((?:;[^,;]*)*),", re.ASCII)


class ImageError(ValueError):
    """A request's image that cannot be used; the message names it."""


def decode_data_uri(url, where: str, max_bytes: int) -> bytes:
    """The bytes of a PNG or JPEG data URI; ImageError names `where`."""
    if not isinstance(url, str):
        raise ImageError(f"{where}: the image URL must be a string")
    if re.match(r"(?i)(https?|ftp|file)://", url):
        raise ImageError(
            f"{where}: the server does not fetch image URLs; give the image "
            "as a data URI (data:image/png;base64,... or data:image/jpeg;"
            "base64,...)")
    m = _DATA_URI.match(url)
    if not m:
        raise ImageError(
            f"{where}: not a data URI (data:image/png;base64,... or "
            "data:image/jpeg;base64,...)")
    media = m.group(1).strip().lower()
    params = [p.strip().lower() for p in m.group(2).split(";") if p]
    if media not in _MEDIA_TYPES:
        raise ImageError(f"{where}: the data URI's media type is "
                         f"'{media or 'text/plain'}'; the server takes "
                         "image/png and image/jpeg")
    if "base64" not in params:
        raise ImageError(f"{where}: the data URI is not base64 "
                         "(data:image/png;base64,...)")
    data = url[m.end():]
    # 4 characters per 3 bytes: refuse before decoding what is too large.
    if len(data) > (max_bytes + 2) // 3 * 4 + 4:
        raise ImageError(f"{where}: the image is larger than the server's "
                         f"limit of {max_bytes} bytes (--max-image-bytes)")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ImageError(f"{where}: the data URI is not valid base64 ({e})"
                         ) from e
    if len(raw) > max_bytes:
        raise ImageError(f"{where}: the image of {len(raw)} bytes is larger "
                         f"than the server's limit of {max_bytes} bytes "
                         "(--max-image-bytes)")
    if not raw:
        raise ImageError(f"{where}: the data URI holds no image")
    return raw


def split_images(messages: list, max_bytes: int) -> tuple:
    """The messages for the chat template and the images' bytes in order.
    A message whose content is a list of parts keeps them as a list where it
    has images (text parts as they are, each image part `{"type":
    "image"}`), else its text parts become one string joined by newlines.
    """
    out, images = [], []
    for i, m in enumerate(messages):
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):
            parts, has_image = [], False
            for j, part in enumerate(content):
                where = f"messages[{i}].content[{j}]"
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    parts.append({"type": "text",
                                  "text": str(part.get("text", ""))})
                elif kind == "image_url":
                    url = part.get("image_url")
                    if isinstance(url, dict):
                        url = url.get("url")
                    images.append(decode_data_uri(url, where, max_bytes))
                    parts.append({"type": "image"})
                    has_image = True
                else:
                    raise ImageError(
                        f"{where}: content parts are text or image_url, not "
                        f"{kind!r}")
            m["content"] = parts if has_image else "\n".join(
                p["text"] for p in parts)
        out.append(m)
    return out, images


def place_images(ids: list, image_token: int, grids, merge: int) -> list:
    """`ids` with the k-th image token repeated as many times as image k
    has merged patches (its grid's t * h * w / merge^2). The caller checked
    that the prompt has one image token per image."""
    counts = [int(t) * int(h) * int(w) // (merge * merge)
              for t, h, w in grids]
    out, k = [], 0
    for t in ids:
        if t == image_token:
            out += [t] * counts[k]
            k += 1
        else:
            out.append(t)
    return out


class TileLayout:
    """Llama4Processor's prompt layout of an image of tiles (transformers'
    `_prompt_split_image`): `<|image_start|>`; where the canvas has several
    tiles, row by row each tile's `<|patch|>` tokens with
    `<|tile_x_separator|>` between a row's tiles and `<|tile_y_separator|>`
    after each row; then `<|image|>`, the global tile's (or the one tile's)
    `<|patch|>` tokens and `<|image_end|>`. The chat template writes the
    placeholder (`<|image|>`) once per image, which this replaces."""

    def __init__(self, ids: dict, per_tile: int):
        #: The tokens' ids, by Llama4Processor's names (TILE_TOKENS).
        self.ids = ids
        #: `<|patch|>` tokens per tile: (S / patch)^2 / round(1 / ratio^2).
        self.per_tile = per_tile
        self.placeholder = ids["fake_image_token"]

    def expand(self, rows: int, cols: int) -> list:
        """An image's tokens for its canvas of rows x cols tiles."""
        t, patches = self.ids, [self.ids["patch_token"]] * self.per_tile
        out = [t["start_of_image_token"]]
        if rows * cols > 1:
            for _ in range(rows):
                for x in range(cols):
                    out += patches
                    if x < cols - 1:
                        out.append(t["tile_x_separator_token"])
                out.append(t["tile_y_separator_token"])
        return out + [t["image_token"]] + patches + [t["end_of_image_token"]]


#: Llama4Processor's tokens: the placeholder it replaces (its
#: processor_config.json may name another) and those its layout writes.
TILE_TOKENS = {"fake_image_token": "<|image|>", "image_token": "<|image|>",
               "start_of_image_token": "<|image_start|>",
               "end_of_image_token": "<|image_end|>",
               "patch_token": "<|patch|>",
               "tile_x_separator_token": "<|tile_x_separator|>",
               "tile_y_separator_token": "<|tile_y_separator|>"}


def _folder_json(folder: Optional[str], name: str) -> Optional[dict]:
    if not folder or not os.path.isfile(os.path.join(folder, name)):
        return None
    try:
        with open(os.path.join(folder, name)) as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise ImageError(f"{os.path.join(folder, name)}: {e}") from e
    return value if isinstance(value, dict) else {}


def tile_layout(tokenizer, folder: Optional[str], multimodal: dict
                ) -> TileLayout:
    """The layout of a plan of Llama 4's tiles (multimodal["tile_size"],
    the tile's side S), from the model's folder as transformers saves it
    (the tokenizer's folder): the tokens' ids from the tokenizer (a
    `tokenizers.Tokenizer`), the placeholder from processor_config.json
    (Llama4Processor's `fake_image_token`, default `<|image|>`), and the
    patch size and pixel shuffle ratio from processor_config.json
    (`patch_size`, `pixel_shuffle_ratio`) or config.json's `vision_config`.
    ImageError says what is missing or does not match the plan."""
    processor = _folder_json(folder, "processor_config.json") or {}
    config = _folder_json(folder, "config.json") or {}
    vision = config.get("vision_config")
    vision = vision if isinstance(vision, dict) else {}
    where = "the tokenizer's folder" if folder else "--tokenizer"
    values = {}
    for key in ("patch_size", "pixel_shuffle_ratio"):
        value = processor.get(key, vision.get(key))
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or value <= 0:
            raise ImageError(
                "the plan takes images as Llama 4's tiles, whose prompt "
                f"layout needs the vision {key}: {where} has no "
                f"processor_config.json or config.json (vision_config) "
                f"with a positive {key}; give --tokenizer the model's "
                "folder")
        values[key] = value
    tile, patch = multimodal["tile_size"], int(values["patch_size"])
    per_tile = (tile // patch) ** 2 // max(
        1, round(1 / values["pixel_shuffle_ratio"] ** 2))
    if per_tile < 1:
        raise ImageError(f"the vision patch_size {patch} and "
                         f"pixel_shuffle_ratio "
                         f"{values['pixel_shuffle_ratio']} leave no image "
                         f"token for the plan's tiles of {tile} pixels")
    names = dict(TILE_TOKENS)
    if isinstance(processor.get("fake_image_token"), str):
        names["fake_image_token"] = processor["fake_image_token"]
    ids, missing = {}, []
    for role, name in names.items():
        ids[role] = tokenizer.token_to_id(name)
        if ids[role] is None:
            missing.append(name)
    if missing:
        raise ImageError("the plan takes images as Llama 4's tiles, but the "
                         "tokenizer has no " + ", ".join(missing) +
                         " (Llama4Processor's layout)")
    if ids["patch_token"] != multimodal["image_token_id"]:
        raise ImageError(
            f"the tokenizer's {names['patch_token']} is id "
            f"{ids['patch_token']}, but the plan's image token is id "
            f"{multimodal['image_token_id']} (config.json's "
            "image_token_index): the tokenizer is not the plan's model's")
    return TileLayout(ids, per_tile)


def place_tiles(ids: list, layout: TileLayout, canvases) -> list:
    """`ids` with the k-th placeholder replaced by image k's layout on its
    canvas (rows, cols). The caller checked that the prompt has one
    placeholder per image."""
    out, k = [], 0
    for t in ids:
        if t == layout.placeholder:
            out += layout.expand(*canvases[k])
            k += 1
        else:
            out.append(t)
    return out


def image_prompt(ids: list, images: list, multimodal: Optional[dict],
                 load_images, model: str, layout=None) -> tuple:
    """The prompt's ids with the images' tokens placed, and the vision
    inputs to generate with (None without images). `layout`: a plan of
    tiles' TileLayout, or the ImageError that says why there is none.
    ImageError says what does not fit: images for a plan without an image
    processor, a prompt whose image tokens (or placeholders) are not one
    per image, an image the processor cannot decode."""
    if multimodal is None:  # the caller refused images already
        return ids, None
    token = multimodal["image_token_id"]
    if images and not multimodal["image_processor"]:
        raise ImageError(f"the model '{model}' takes no image files: its "
                         "plan was compiled without the model's "
                         "preprocessor_config.json")
    if multimodal.get("tile_size"):
        return _tile_prompt(ids, images, token, load_images, layout)
    if images and not multimodal["image_grid"]:
        raise ImageError(f"the model '{model}' takes images without a grid "
                         "or tiles, whose prompt layout the server does "
                         "not know: use moe-run --image, or the C or "
                         "Python generator with the prompt's tokens")
    found = sum(1 for t in ids if t == token)
    if found != len(images):
        raise ImageError(
            f"the prompt has {found} image token(s) (id {token}) for "
            f"{len(images)} image(s): the chat template places one per "
            "image part, and text may not hold image tokens")
    if not images:
        return ids, None
    try:
        vision = load_images(images)
    except ValueError as e:
        raise ImageError(f"the request's images: {e}") from e
    grids = vision[multimodal["image_grid"]].tolist()
    return place_images(ids, token, grids,
                        multimodal["spatial_merge_size"]), vision


def _tile_prompt(ids, images, token, load_images, layout) -> tuple:
    """image_prompt for a plan of Llama 4's tiles."""
    found = sum(1 for t in ids if t == token)
    if found:
        raise ImageError(
            f"the prompt has {found} image token(s) (id {token}): the "
            "server lays out each image's tokens from its placeholder, and "
            "text may not hold image tokens")
    if not images:
        return ids, None
    if isinstance(layout, ImageError):
        raise layout
    if layout is None:
        raise ImageError("the server has no prompt layout for this plan's "
                         "tiles")
    found = sum(1 for t in ids if t == layout.placeholder)
    if found != len(images):
        raise ImageError(
            f"the prompt has {found} image placeholder(s) (id "
            f"{layout.placeholder}) for {len(images)} image(s): the chat "
            "template places one per image part, and text may not hold "
            "them")
    try:
        vision, canvases = load_images(images, canvases=True)
    except ValueError as e:
        raise ImageError(f"the request's images: {e}") from e
    return place_tiles(ids, layout, canvases), vision
