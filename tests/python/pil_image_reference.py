#!/usr/bin/python3
"""Pillow's reading of test images, for walsh's image decoding and resizing to be held against.

Writes into OUT_DIR, for every case: the encoded file, Pillow's decode flattened to RGB the way
the model's image processor flattens it (transformers' convert_to_rgb: RGBA composited onto white),
and that RGB image resized with Image.resize(BICUBIC) to the case's size; manifest.json lists them.
The images are drawn here (gradients and seeded noise), so walsh's own code makes none of them.

usage: pil_image_reference.py OUT_DIR
"""
import json
import os
import random
import sys

from PIL import Image


def convert_to_rgb(image):
    # transformers.image_transforms.convert_to_rgb, as the Qwen2-VL image processor calls it.
    if image.mode == "RGB":
        return image
    image_rgba = image.convert("RGBA")
    background = Image.new("RGBA", image_rgba.size, (255, 255, 255))
    return Image.alpha_composite(background, image_rgba).convert("RGB")


def drawn(width, height, seed):
    """An RGBA image: smooth gradients, hard edges and seeded noise, alpha varying."""
    rng = random.Random(seed)
    pixels = []
    for y in range(height):
        for x in range(width):
            r = (x * 255) // max(1, width - 1)
            g = (y * 255) // max(1, height - 1)
            b = 255 if (x // 7 + y // 5) % 2 else rng.randrange(256)
            a = 255 if x < width // 3 else (x * 37 + y * 11 + rng.randrange(64)) % 256
            pixels.append((r, g, b, a))
    image = Image.new("RGBA", (width, height))
    image.putdata(pixels)
    return image


def palette_with_transparency(image):
    """A palette image whose first three entries are fully or partly transparent (a tRNS chunk)."""
    p = image.convert("RGB").convert("P", palette=Image.ADAPTIVE, colors=16)
    p.info["transparency"] = bytes([0, 64, 200] + [255] * 13)
    return p


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    base = drawn(61, 47, 1)
    wide = drawn(300, 200, 2)
    cases = [
        # name, image, format, save options, resize target (width, height)
        ("png_rgb", base.convert("RGB"), "PNG", {}, (64, 32)),
        ("png_rgba", base, "PNG", {}, (64, 64)),
        ("png_grey", base.convert("L"), "PNG", {}, (32, 96)),
        ("png_grey_alpha", base.convert("LA"), "PNG", {}, (32, 32)),
        ("png_palette", base.convert("RGB").convert("P", palette=Image.ADAPTIVE), "PNG", {},
         (64, 32)),
        ("png_bilevel", base.convert("1"), "PNG", {}, (64, 64)),
        ("jpeg_420", wide.convert("RGB"), "JPEG", {"quality": 90}, (96, 64)),
        ("jpeg_444", base.convert("RGB"), "JPEG", {"quality": 95, "subsampling": 0}, (64, 64)),
        ("jpeg_progressive", wide.convert("RGB"), "JPEG", {"quality": 80, "progressive": True},
         (320, 192)),
        ("jpeg_grey", base.convert("L"), "JPEG", {"quality": 85}, (32, 32)),
        ("webp_lossy", wide.convert("RGB"), "WEBP", {"quality": 80}, (96, 64)),
        ("webp_lossless_alpha", base, "WEBP", {"lossless": True}, (64, 32)),
        ("png_large_downscale", wide.convert("RGB"), "PNG", {}, (32, 32)),
        ("png_palette_transparent", palette_with_transparency(base), "PNG", {}, (64, 32)),
        ("webp_lossy_alpha", base, "WEBP", {"quality": 70}, (32, 64)),
    ]
    manifest = []
    for name, image, fmt, options, (width, height) in cases:
        path = os.path.join(out, name + "." + fmt.lower())
        if "transparency" in image.info:
            options = dict(options, transparency=image.info["transparency"])
        image.save(path, fmt, **options)
        with Image.open(path) as reread:
            decoded = convert_to_rgb(reread)
            decoded.load()
        resized = decoded.resize((width, height), resample=Image.BICUBIC)
        with open(os.path.join(out, name + ".decoded.rgb"), "wb") as f:
            f.write(decoded.tobytes())
        with open(os.path.join(out, name + ".resized.rgb"), "wb") as f:
            f.write(resized.tobytes())
        manifest.append({"name": name, "file": os.path.basename(path),
                         "width": decoded.width, "height": decoded.height,
                         "resized_width": width, "resized_height": height})
    # 16-bit grey, where walsh keeps each sample's high byte (Pillow would clip to 255).
    grey16 = Image.new("I;16", (40, 30))
    grey16.putdata([(x * 1637 + y * 911) % 65536 for y in range(30) for x in range(40)])
    grey16.save(os.path.join(out, "grey16.png"), "PNG")
    with open(os.path.join(out, "grey16.high.rgb"), "wb") as f:
        f.write(bytes(v >> 8 for v in Image.open(os.path.join(out, "grey16.png")).getdata()
                      for _ in range(3)))
    # Refusals: a CMYK JPEG and an animated WebP.
    Image.new("CMYK", (16, 16), (10, 20, 30, 40)).save(os.path.join(out, "cmyk.jpeg"), "JPEG")
    frames = [Image.new("RGB", (16, 16), (i * 60, 0, 0)) for i in range(3)]
    frames[0].save(os.path.join(out, "animated.webp"), "WEBP", save_all=True,
                   append_images=frames[1:], duration=100, loop=0)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
