#!/usr/bin/env python3
"""Renders `canonlab report`'s HTML in headless Chromium and checks the screenshot shows the plots.

A fixture sweep (4 layers x 4 seeds, one failed and one pending run) is written as JSON files, the report is
generated, and Chromium takes a 1200x2400 screenshot. The PNG is decoded here (zlib + struct, no PIL) and must
show: a drawn page, the strip plot's red mean line spanning the categories below the tables, the learning
curves beside it, and both heatmap extremes (viridis purple and yellow) as cell-sized blocks below the plots. Then the same checks run on a copy of the page whose inline SVGs are broken, and must fail there:
a check that cannot fail proves nothing.

Usage: test_report_screenshot.py --canonlab BUILD/canonlab --workdir DIR
Exit 0 = pass. The screenshot is kept as DIR/report.png.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib

WIDTH, HEIGHT = 1200, 2400
CHROMIUM = "chromium-headless-shell"

# Colours from src/report/svg.h.
MEAN_RED = (0xD6, 0x27, 0x28)     # strip plot: mean line and markers
POINT_BLUE = (0x1F, 0x77, 0xB4)   # strip plot dots; also the first learning-curve series
CURVE_ORANGE = (0xFF, 0x7F, 0x0E)  # second learning-curve series
HEAT_LOW = (0x44, 0x01, 0x54)     # viridis at 0
HEAT_HIGH = (0xFD, 0xE7, 0x25)    # viridis at 1

SEEDS = ["0", "1", "2", "3"]
LAYERS = ["L0", "L1", "L2", "L3"]
HEATMAP_RUNS = ["layer=L0__seed=0", "layer=L3__seed=1"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


# ---------------------------------------------------------------- fixture


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f)


def write_fixture(sweep_dir):
    shutil.rmtree(sweep_dir, ignore_errors=True)
    runs = []
    for li, layer in enumerate(LAYERS):
        for si, seed in enumerate(SEEDS):
            name = "layer=%s__seed=%s" % (layer, seed)
            rel = "runs/" + name
            runs.append({"name": name, "dir": rel, "axes": {"layer": layer, "seed": seed}, "config": {}})
            run_dir = os.path.join(sweep_dir, rel)
            os.makedirs(run_dir, exist_ok=True)
            if (layer, seed) == ("L2", "1"):
                write_json(os.path.join(run_dir, "status.json"),
                           {"state": "failed", "error": "non-finite loss at step 40", "exit_code": 2})
                continue
            if (layer, seed) == ("L1", "3"):
                continue  # pending: no status.json
            write_json(os.path.join(run_dir, "status.json"), {"state": "done", "exit_code": 0, "wall_s": 1.0})
            g = min(1.0, 0.15 + 0.25 * li + 0.05 * si)
            # Every matrix holds an exact 0 and an exact 1, so both heatmap extremes are drawn.
            per_head = [[(4 * l + h) / 15.0 for h in range(4)] for l in range(4)]
            write_json(os.path.join(run_dir, "summary.json"), {
                "steps": 200, "final_train_loss": 2.2 + 0.1 * li, "eval": {"copy_acc": 0.6 + 0.1 * li, "loss": 2.3},
                "ipmr": {"chance_head": 0.08, "chance_global": 0.72,
                         "delta_1": {"global": g, "mean": g / 3, "per_head": per_head}}})
            with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
                for step in range(10, 201, 10):
                    loss = 2.2 + 0.1 * li + 2.0 * (1 - step / 200.0) ** 2 + 0.02 * si
                    f.write(json.dumps({"step": step, "split": "train", "loss": loss, "lr": 1e-3}) + "\n")
                for step in (50, 100, 150, 200):
                    acc = (0.3 + 0.1 * li) + (0.3 * step / 200.0) + 0.01 * si
                    f.write(json.dumps({"step": step, "split": "eval", "copy_acc": acc, "loss": 2.5}) + "\n")
    write_json(os.path.join(sweep_dir, "sweep.json"), {
        "format": "canonlab-sweep/1", "name": "screenshot-fixture", "description": "browser test fixture",
        "axes": [{"name": "layer", "keys": ["model.attention.key_shift.layers"], "labels": LAYERS},
                 {"name": "seed", "keys": ["train.seed"], "labels": SEEDS}],
        "runs": runs})


# ---------------------------------------------------------------- PNG decoding


def decode_png(path):
    """Returns (width, height, rows) with rows[y] a bytes object of R,G,B triples."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG" % path)
    pos, idat = 8, []
    width = height = depth = colour = interlace = None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        fail("unsupported PNG (depth %s, colour type %s, interlace %s)" % (depth, colour, interlace))
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        ftype = raw[start]
        line = bytearray(raw[start + 1:start + 1 + stride])
        if ftype == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif ftype == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif ftype == 3:  # Average
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif ftype != 0:
            fail("bad PNG filter type %d in row %d" % (ftype, y))
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
    return width, height, rows


# ---------------------------------------------------------------- checks


class Region:
    """Where pixels of one colour are: count and bounding box."""

    def __init__(self):
        self.count, self.x0, self.x1, self.y0, self.y1 = 0, None, None, None, None

    def add(self, x, y):
        self.count += 1
        self.x0 = x if self.x0 is None else min(self.x0, x)
        self.x1 = x if self.x1 is None else max(self.x1, x)
        self.y0 = y if self.y0 is None else min(self.y0, y)
        self.y1 = y if self.y1 is None else max(self.y1, y)

    def __repr__(self):
        return "%d px in x %s..%s, y %s..%s" % (self.count, self.x0, self.x1, self.y0, self.y1)


def find_colours(rows, width, colours, tolerance=8):
    found = {name: Region() for name in colours}
    non_white = 0
    for y, row in enumerate(rows):
        for x in range(width):
            r, g, b = row[3 * x], row[3 * x + 1], row[3 * x + 2]
            if r > 240 and g > 240 and b > 240:
                continue
            non_white += 1
            for name, (cr, cg, cb) in colours.items():
                if abs(r - cr) <= tolerance and abs(g - cg) <= tolerance and abs(b - cb) <= tolerance:
                    found[name].add(x, y)
    return non_white, found


def check_screenshot(png):
    """Returns a list of problems (empty = the page rendered the plots where they belong)."""
    width, height, rows = decode_png(png)
    if (width, height) != (WIDTH, HEIGHT):
        return ["screenshot is %dx%d, expected %dx%d" % (width, height, WIDTH, HEIGHT)]
    colours = {"mean_red": MEAN_RED, "point_blue": POINT_BLUE, "curve_orange": CURVE_ORANGE,
               "heat_low": HEAT_LOW, "heat_high": HEAT_HIGH}
    non_white, f = find_colours(rows, width, colours)
    print("non-white pixels: %.1f%%" % (100.0 * non_white / (width * height)))
    for name, region in f.items():
        print("  %-12s %s" % (name, region))
    problems = []
    if non_white < 0.04 * width * height:
        problems.append("only %.1f%% of the page is drawn" % (100.0 * non_white / (width * height)))
    red, blue, orange, low, high = f["mean_red"], f["point_blue"], f["curve_orange"], f["heat_low"], f["heat_high"]
    # Strip plot: the mean line joins 4 categories about 72 px apart, so it spans >= 200 px.
    if red.count < 300 or red.x1 - red.x0 < 200:
        problems.append("no strip-plot mean line (%s)" % red)
    if blue.count < 150:
        problems.append("no strip-plot dots (%s)" % blue)
    if orange.count < 150:
        problems.append("no learning curve in the second series colour (%s)" % orange)
    # Each heatmap draws one cell (54 x 34 px) at each extreme.
    for name, region in (("low", low), ("high", high)):
        if region.count < 2 * 1000:
            problems.append("heatmap %s colour missing (%s)" % (name, region))
    if not problems:
        # Vertical order of the page: header and tables, then the plots (strip plot and learning curves side
        # by side), then the heatmaps.
        if not 250 < red.y0 < 0.75 * HEIGHT:
            problems.append("strip plot not where expected: mean line at y %d..%d" % (red.y0, red.y1))
        plots_bottom = max(red.y1, orange.y1)
        if not (red.y0 - 150 < orange.y0 and orange.y1 < red.y1 + 150 and orange.x1 > red.x1):
            problems.append("learning curves (%s) not beside the strip plot (%s)" % (orange, red))
        if not (low.y0 > plots_bottom and high.y0 > plots_bottom):
            problems.append("heatmaps (y from %d) are not below the plots (y to %d)" % (min(low.y0, high.y0), plots_bottom))
    return problems


def check_svg_files(report_dir):
    problems = []
    svgs = [n for n in sorted(os.listdir(report_dir)) if n.endswith(".svg")]
    if len(svgs) < 4:
        problems.append("expected at least 4 .svg files, found %s" % svgs)
    for name in svgs:
        try:
            root = ET.parse(os.path.join(report_dir, name)).getroot()
        except ET.ParseError as e:
            problems.append("%s is not well-formed XML: %s" % (name, e))
            continue
        if root.tag != "{http://www.w3.org/2000/svg}svg" or "viewBox" not in root.attrib:
            problems.append("%s: root is %s with %s" % (name, root.tag, sorted(root.attrib)))
    return problems


def screenshot(html, png):
    if os.path.exists(png):
        os.remove(png)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--force-device-scale-factor=1", "--window-size=%d,%d" % (WIDTH, HEIGHT), "--screenshot=" + png,
           "file://" + os.path.abspath(html)]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    if r.returncode != 0 or not os.path.exists(png):
        fail("chromium failed (exit %d):\n%s" % (r.returncode, r.stdout.decode(errors="replace")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--canonlab", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    if shutil.which(CHROMIUM) is None:
        fail(CHROMIUM + " not found: run scripts/install-deps.sh (Debian package chromium-headless-shell)")

    sweep = os.path.join(args.workdir, "sweep")
    report_dir = os.path.join(args.workdir, "report")
    write_fixture(sweep)
    cmd = [args.canonlab, "report", sweep, "--out", report_dir]
    for run in HEATMAP_RUNS:
        cmd += ["--heatmap", run]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(r.stdout.decode(errors="replace"))
    if r.returncode != 0:
        fail("canonlab report exited %d" % r.returncode)

    problems = check_svg_files(report_dir)
    png = os.path.join(args.workdir, "report.png")
    screenshot(os.path.join(report_dir, "report.html"), png)
    problems += check_screenshot(png)
    if problems:
        fail("the rendered report is wrong (screenshot: %s):\n  " % png + "\n  ".join(problems))

    # The same checks on a page whose inline SVGs the browser cannot render must fail.
    with open(os.path.join(report_dir, "report.html")) as f:
        html = f.read()
    broken = os.path.join(args.workdir, "broken.html")
    with open(broken, "w") as f:
        f.write(html.replace("<svg ", "<svg-broken ").replace("</svg>", "</svg-broken>"))
    broken_png = os.path.join(args.workdir, "broken.png")
    screenshot(broken, broken_png)
    print("self-check on a page with broken SVGs:")
    if not check_screenshot(broken_png):
        fail("the checks also pass on a page without working SVGs, so they test nothing")
    print("PASS: report renders (screenshot %s)" % png)


if __name__ == "__main__":
    main()
