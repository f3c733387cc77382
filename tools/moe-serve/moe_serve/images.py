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
The server fetches nothing: an http(s) URL is refused.
"""

import base64
import binascii
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


def image_prompt(ids: list, images: list, multimodal: Optional[dict],
                 load_images, model: str) -> tuple:
    """The prompt's ids with the images' tokens placed, and the vision
    inputs to generate with (None without images). ImageError says what
    does not fit: images for a plan without an image processor, a prompt whose image tokens are not one per image, an image
    the processor cannot decode."""
    if multimodal is None:  # the caller refused images already
        return ids, None
    token = multimodal["image_token_id"]
    if images and not multimodal["image_processor"]:
        raise ImageError(f"the model '{model}' takes no image files: its "
                         "plan was compiled without the model's "
                         "preprocessor_config.json")
    if images and not multimodal["image_grid"]:
        raise ImageError(f"the model '{model}' takes images as tiles (Llama "
                         "4's processor), whose prompt layout (tile "
                         "separators, a global tile) the server does not "
                         "place yet: use moe-run --image, or the C or "
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
