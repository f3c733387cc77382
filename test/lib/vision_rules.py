"""numpy versions of the multimodal rules docs/multimodal.md documents, for
the tests (no torch): the grid rule ("Vision inputs from the grid"), the
Qwen2-VL family's image processor ("Images"), and a PNG writer (zlib and
struct) for images made at test time."""

import math
import struct
import zlib

import numpy as np


def grid_inputs(grids, merge, side, align_corners=True):
    """cu_seqlens (i32), position_ids, interp_indices and interp_weights
    (bilinear taps of a side x side table, border clamping) for the images'
    (t, h, w) grids, in f32 as transformers computes them."""
    cu, pos, idx, wts = [0], [], [], []
    for t, h, w in (tuple(int(v) for v in g) for g in grids):
        for _ in range(t):
            cu.append(cu[-1] + h * w)
            for br in range(h // merge):
                for bc in range(w // merge):
                    for ir in range(merge):
                        for ic in range(merge):
                            row, col = br * merge + ir, bc * merge + ic
                            pos.append((row, col))
                            rt, rw = _taps(row, h, side, align_corners)
                            ct, cw = _taps(col, w, side, align_corners)
                            idx.append([a * side + b for a in rt for b in ct])
                            wts.append([np.float32(x * y) for x in rw for y in cw])
    return {"cu_seqlens": np.array(cu, np.int32), "position_ids": np.array(pos, np.int64).reshape(-1, 2),
            "interp_indices": np.array(idx, np.int64).reshape(-1, 4),
            "interp_weights": np.array(wts, np.float32).reshape(-1, 4)}


def _taps(index, size, side, align_corners):
    f = np.float32
    if align_corners:
        src = f(index) * f(side - 1) / f(max(size - 1, 1))
    else:
        src = (f(index) + f(0.5)) * f(side) / f(size) - f(0.5)
    floor = np.floor(src)
    taps, weights = [], []
    for offset in (0, 1):
        taps.append(min(max(int(floor) + offset, 0), side - 1))
        weights.append(max(f(1) - abs(src - floor - f(offset)), f(0)))
    return taps, weights


def smart_resize(height, width, factor, min_pixels, max_pixels, frames=0):
    """The processor's output size (Python's round: ties to even): Qwen2-VL's
    (frames 0), or GLM-4V's, which first scales a side under `factor` up to
    it and bounds the pixels of `frames` frames."""
    if frames and (height < factor or width < factor):
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    count = max(frames, 1)
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if count * h * w > max_pixels:
        beta = math.sqrt(count * height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif count * h * w < min_pixels:
        beta = math.sqrt(min_pixels / (count * height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


def _bicubic_matrix(size_in, size_out):
    """[out, in] weights of a bicubic (a = -0.5) resize, widened by the
    scale when shrinking (antialiased), each row summing to 1."""
    scale = size_in / size_out
    support = 2.0 * max(scale, 1.0)
    m = np.zeros([size_out, size_in])
    for i in range(size_out):
        center = (i + 0.5) * scale
        lo, hi = max(int(center - support + 0.5), 0), min(int(center + support + 0.5), size_in)
        for x in range(lo, hi):
            d = abs((x - center + 0.5) / max(scale, 1.0))
            m[i, x] = 1.5 * d**3 - 2.5 * d**2 + 1 if d < 1 else (-0.5 * d**3 + 2.5 * d**2 - 4 * d + 2 if d < 2 else 0)
        m[i] /= m[i].sum()
    return m


def preprocess(rgb, config, merge):
    """The processor's (pixel patches f32 [p, 3 * T * P * P], grid [1, 3])
    of an 8-bit [H, W, 3] image, resized in float (the runtime's resize is
    8-bit fixed point, as PIL's: they differ by at most one level)."""
    patch, temporal = config["patch_size"], config["temporal_patch_size"]
    image = rgb.astype(np.float64)
    height, width = rgb.shape[:2]
    if config.get("do_resize", True):
        size = config["size"]
        glm = config.get("image_processor_type", "").startswith("Glm4vImageProcessor")
        h, w = smart_resize(height, width, patch * merge, size["shortest_edge"], size["longest_edge"],
                            temporal if glm else 0)
        if (h, w) != (height, width):
            image = np.einsum("yh,hwc,xw->yxc", _bicubic_matrix(height, h), image, _bicubic_matrix(width, w))
            image = np.clip(np.round(image), 0, 255)
    h, w = image.shape[:2]
    x = (image * config["rescale_factor"]).astype(np.float32)
    x = (x - np.array(config["image_mean"], np.float32)) / np.array(config["image_std"], np.float32)
    x = x.transpose(2, 0, 1)  # C, H, W
    gh, gw = h // patch, w // patch
    x = x.reshape(3, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    x = np.broadcast_to(x[:, :, :, :, :, None], x.shape[:5] + (temporal,) + x.shape[5:])
    return x.reshape(gh * gw, 3 * temporal * patch * patch).astype(np.float32), np.array([[1, gh, gw]], np.int64)


def write_png(path, pixels):
    """An 8-bit PNG of [H, W] (gray), [H, W, 3] (RGB) or [H, W, 4] (RGBA)."""
    pixels = np.asarray(pixels, np.uint8)
    color = {2: 0, 3: 2, 4: 6}[pixels.ndim if pixels.ndim == 2 else pixels.shape[2]]
    height, width = pixels.shape[:2]
    raw = b"".join(b"\0" + pixels[y].tobytes() for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
