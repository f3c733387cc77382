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


def llama4_canvases(max_tiles, tile):
    """Llama 4's candidate canvases (height, width) in its processor's
    order: tile counts from max_tiles down, each count's factor pairs by
    ascending height, grouped by aspect ratio in first-seen order."""
    groups = {}
    for count in range(max_tiles, 0, -1):
        for rows in range(1, count + 1):
            if count % rows == 0:
                g = math.gcd(rows, count // rows)
                groups.setdefault((rows // g, count // rows // g), []).append((rows, count // rows))
    return [(r * tile, c * tile) for pairs in groups.values() for r, c in pairs]


def llama4_size(height, width, tile, max_tiles, to_max_canvas=False):
    """(canvas (h, w), resized (h, w)) of a height x width image: the
    canvas that needs the least upscaling (or, without one, the least
    downscaling; ties: the smallest area, then the first), the image
    resized into it without distortion, upscaled at most to `tile`."""
    f = np.float32
    canvases = llama4_canvases(max_tiles, tile)
    scales = [min(f(ch) / f(height), f(cw) / f(width)) for ch, cw in canvases]
    up = [s for s in scales if s >= 1]
    pick = (max(up) if to_max_canvas else min(up)) if up else max(scales)
    chosen = [c for c, s in zip(canvases, scales) if s == pick]
    canvas = min(chosen, key=lambda c: c[0] * c[1])
    # torch arithmetic where a side is the canvas's (an int64 tensor: f32
    # scales and products), Python's (double) where it is the image's.
    th, tw = canvas
    f32h = f32w = True
    if not to_max_canvas:
        f32h, f32w = th < max(height, tile), tw < max(width, tile)
        th, tw = min(max(height, tile), th), min(max(width, tile), tw)
    sw = f(tw) / f(width) if f32w else tw / width
    sh = f(th) / f(height) if f32h else th / height
    if (f(sw) < f(sh)) if (f32w or f32h) else (sw < sh):
        size = (min(math.floor(f(height) * sw if f32w else height * sw), th), tw)
    else:
        size = (th, min(math.floor(f(width) * sh if f32h else width * sh), tw))
    return canvas, (max(size[0], 1), max(size[1], 1))


def _torch_linear_axis(size_in, size_out):
    """torch's uint8 antialiased bilinear weights of one axis: (first tap,
    int16 weights) per output and the precision they are scaled to."""
    scale = size_in / size_out
    support = scale if scale >= 1 else 1.0
    inv = 1.0 / scale if scale >= 1 else 1.0
    rows, wmax = [], 0.0
    for i in range(size_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), size_in)
        w = [max(0.0, 1.0 - abs((j + lo - center + 0.5) * inv)) for j in range(hi - lo)]
        total = sum(w)
        if total != 0:
            w = [v / total for v in w]
            wmax = max([wmax] + w)
        rows.append((lo, w))
    precision = 0
    while precision < 22 and int(0.5 + wmax * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    fixed = [(lo, [int(v * (1 << precision) + (0.5 if v >= 0 else -0.5)) for v in w]) for lo, w in rows]
    return fixed, precision


def _torch_linear_pass(image, size_out, axis):
    if image.shape[axis] == size_out:
        return image
    taps, precision = _torch_linear_axis(image.shape[axis], size_out)
    src = np.moveaxis(image.astype(np.int64), axis, 0)
    out = np.empty((size_out,) + src.shape[1:], np.int64)
    for i, (lo, w) in enumerate(taps):
        acc = np.full(src.shape[1:], 1 << (precision - 1), np.int64)
        for j, v in enumerate(w):
            acc += src[lo + j] * v
        out[i] = np.clip(acc >> precision, 0, 255)
    return np.moveaxis(out, 0, axis).astype(np.uint8)


def torch_bilinear(rgb, height, width):
    """torchvision's antialiased bilinear resize of an 8-bit [H, W, 3]
    image (torch's int16 fixed-point passes, width first)."""
    return _torch_linear_pass(_torch_linear_pass(rgb, width, 1), height, 0)


def _bf16(x):
    """f32 values rounded to bfloat16 (to nearest, ties to even), as f32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def llama4_preprocess(rgb, config):
    """Llama4ImageProcessor's pixel values [tiles, 3, S, S] of an 8-bit
    [H, W, 3] image: resized into its canvas, padded with zeros, rescaled
    and normalised in bfloat16, split into S x S tiles in raster order, and
    the whole image resized to S x S as a last tile where there are several."""
    tile = config["size"]["height"]
    (ch, cw), (h, w) = llama4_size(rgb.shape[0], rgb.shape[1], tile, config["max_patches"],
                                   config.get("resize_to_max_canvas", False))
    canvas = np.zeros([ch, cw, 3], np.uint8)
    canvas[:h, :w] = torch_bilinear(rgb, h, w)

    def normalise(image):
        x = _bf16(image.astype(np.float32) * np.float32(config["rescale_factor"]))
        x = _bf16(x - _bf16(np.array(config["image_mean"], np.float32)))
        return _bf16(x / _bf16(np.array(config["image_std"], np.float32))).transpose(2, 0, 1)

    x = normalise(canvas).reshape(3, ch // tile, tile, cw // tile, tile).transpose(1, 3, 0, 2, 4)
    tiles = x.reshape(-1, 3, tile, tile)
    if len(tiles) > 1:
        tiles = np.concatenate([tiles, normalise(torch_bilinear(rgb, tile, tile))[None]])
    return np.ascontiguousarray(tiles, np.float32)
