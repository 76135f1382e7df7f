"""Checks an SVG of `onnxdp plot` with standard tools: XML-parses it and rasterises it with
rsvg-convert (Debian: librsvg2-bin), then looks at the pixels.

Usage: svg_raster_check.py CURVES.svg [--eval]

The PNG is decoded here with zlib and numpy (no imaging library). Checks: the document is
well-formed SVG with three polylines; the image is 800 px wide and not blank; each of the three
panels (stacked, 230 px each below a 30 px header: train/plot.cpp's layout) holds a stroke of its
curve's colour; with --eval, the loss panel holds the red eval points too. Prints one line per
count and "ok"; exits 1 with a message when a check fails or a tool is missing (not a skip).
"""
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

import numpy as np

HEADER, PANEL = 30, 230
CURVES = {"loss": (0x1A, 0x3A, 0x8A), "learning rate": (0x1E, 0x7B, 0x34), "samples/s": (0x8A, 0x4B, 0x08)}
EVAL = (0xC0, 0x39, 0x2B)


def decode_png(data):
    """The image as an (h, w, channels) uint8 array; 8-bit RGB or RGBA, not interlaced."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("svg_raster_check: not a PNG")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color, _, _, interlace = ihdr
    if depth != 8 or color not in (2, 6) or interlace:
        sys.exit(f"svg_raster_check: unsupported PNG (depth {depth}, colour type {color}, interlace {interlace})")
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * bpp)
    out = np.zeros((h, w * bpp), dtype=np.uint8)
    prev = np.zeros(w * bpp, dtype=np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:  # None
            cur = line
        elif f == 1:  # Sub: a running sum per channel
            cur = np.cumsum(line.reshape(w, bpp), axis=0).reshape(-1) & 0xFF
        elif f == 2:  # Up
            cur = (line + prev) & 0xFF
        else:  # Average (3) and Paeth (4) depend on the byte to the left: byte by byte
            cur = np.zeros_like(line)
            for i in range(len(line)):
                a = int(cur[i - bpp]) if i >= bpp else 0
                b = int(prev[i])
                if f == 3:
                    cur[i] = (line[i] + (a + b) // 2) & 0xFF
                else:
                    c = int(prev[i - bpp]) if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                    cur[i] = (line[i] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return out.reshape(h, w, bpp)


def near(rgb, color, tol=40):
    """Mask of pixels within tol of color in every channel."""
    return np.all(np.abs(rgb.astype(np.int32) - np.array(color)) <= tol, axis=-1)


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--eval"):
        sys.exit("usage: svg_raster_check.py CURVES.svg [--eval]")
    svg, want_eval = sys.argv[1], len(sys.argv) == 3

    try:
        root = ET.parse(svg).getroot()
    except ET.ParseError as e:
        sys.exit(f"svg_raster_check: {svg} is not well-formed XML: {e}")
    ns = "{http://www.w3.org/2000/svg}"
    if root.tag != ns + "svg":
        sys.exit(f"svg_raster_check: root element is {root.tag}, not svg")
    polylines = root.findall(f".//{ns}polyline")
    print(f"polylines {len(polylines)}")
    if len(polylines) != 3:
        sys.exit("svg_raster_check: expected 3 polylines")

    with tempfile.NamedTemporaryFile(suffix=".png") as png:
        try:
            r = subprocess.run(["rsvg-convert", "-f", "png", "-o", png.name, svg], capture_output=True, text=True)
        except FileNotFoundError:
            sys.exit("svg_raster_check: rsvg-convert is missing (Debian: librsvg2-bin; scripts/setup installs it)")
        if r.returncode != 0:
            sys.exit(f"svg_raster_check: rsvg-convert failed: {r.stderr.strip()}")
        img = decode_png(open(png.name, "rb").read())
    h, w = img.shape[:2]
    rgb = img[..., :3]
    if img.shape[2] == 4:  # composite on white where transparent
        alpha = img[..., 3:4].astype(np.float32) / 255
        rgb = (rgb * alpha + 255 * (1 - alpha)).astype(np.uint8)
    print(f"size {w}x{h}")
    if w != 800 or h < HEADER + 3 * PANEL:
        sys.exit("svg_raster_check: unexpected image size")
    ink = float(np.mean(np.any(rgb < 240, axis=-1)))
    print(f"ink {ink:.3f}")
    if ink < 0.01:
        sys.exit("svg_raster_check: the image is blank")
    for i, (name, color) in enumerate(CURVES.items()):
        band = rgb[HEADER + i * PANEL:HEADER + (i + 1) * PANEL]
        n = int(near(band, color).sum())
        print(f"curve {name} {n}")
        if n < 200:
            sys.exit(f"svg_raster_check: the {name} panel has no curve")
    if want_eval:
        n = int(near(rgb[HEADER:HEADER + PANEL], EVAL).sum())
        print(f"eval points {n}")
        if n < 20:
            sys.exit("svg_raster_check: the loss panel has no eval points")
    print("ok")


if __name__ == "__main__":
    main()
