"""Line charts as SVG text, with the standard library only: the pictures table.py writes beside
BENCHMARKS.md. A generated picture has to be reviewable as text in a diff and render on any
markdown viewer, so it is plain SVG 1.1: a frame, ticks, labels, a legend, polylines.

Each series and each marker line carries a <title> naming it (a tooltip in a browser, and how
the tests find it); the plot area is the rect of class "frame", whose edges are the first and
last tick of each axis."""
import math
from xml.sax.saxutils import escape, quoteattr

WIDTH, HEIGHT = 720, 400
# Room outside the frame: tick labels and the y label on the left, the title and legend above,
# tick labels and the x label below.
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 56, 50
FONT = 'font-family="sans-serif" font-size="12"'
DASH = 'stroke-dasharray="6 4"'


def nice_step(span, count=5):
    """A step of 1, 2 or 5 × 10^k giving about `count` intervals over `span`: round tick labels."""
    raw = span / count if span > 0 else 1.0
    scale = 10 ** math.floor(math.log10(raw))
    return next(m * scale for m in (1, 2, 5, 10) if m * scale >= raw * 0.999)


def axis(lo, hi, inside=(), count=5):
    """The ticks of an axis that holds [lo, hi], from a multiple of the step below lo to one
    above hi: the frame ends on a labelled tick. The values `inside` (marks) fall strictly
    inside, as the frame's edge would hide a line drawn on it."""
    step = nice_step(hi - lo, count)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    if last == first:
        last += 1
    first -= any(abs(v - first * step) < step * 1e-6 for v in inside)
    last += any(abs(v - last * step) < step * 1e-6 for v in inside)
    digits = max(0, -math.floor(math.log10(step) + 1e-9))
    return [round(i * step, digits) for i in range(first, last + 1)]


def cdf_steps(values):
    """The step curve of the empirical distribution: at each value (ascending) it rises by
    1/n, from 0 before the smallest to 1 at the largest."""
    v = sorted(values)
    n = len(v)
    points = []
    for i, x in enumerate(v):
        points += [(x, i / n), (x, (i + 1) / n)]
    return points


def interval_steps(values, width):
    """One flat stretch per interval: value i from i·width to (i + 1)·width."""
    points = []
    for i, y in enumerate(values):
        points += [(i * width, y), ((i + 1) * width, y)]
    return points


def label(v):
    return f"{v:g}"


def chart(title, xlabel, ylabel, series, marks=(), ylo=None, yhi=None):
    """An SVG document: `series` are (name, colour, [(x, y), ...]) drawn as polylines through
    their points; `marks` are (name, "x" or "y", value) dashed lines across the frame (a
    nominal value, a limit). The axes hold every point and mark; ylo/yhi force the y range's
    ends (a fraction runs from 0 to 1 whatever the data)."""
    xs = [x for _, _, pts in series for x, _ in pts] + [v for _, a, v in marks if a == "x"]
    ys = [y for _, _, pts in series for _, y in pts] + [v for _, a, v in marks if a == "y"]
    xt = axis(min(xs), max(xs), [v for _, a, v in marks if a == "x"])
    yt = axis(min(ys) if ylo is None else ylo, max(ys) if yhi is None else yhi, [v for _, a, v in marks if a == "y"])
    x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP

    def px(x):
        return round(x0 + (x - xt[0]) / (xt[-1] - xt[0]) * (x1 - x0), 1)

    def py(y):
        return round(y0 - (y - yt[0]) / (yt[-1] - yt[0]) * (y0 - y1), 1)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" {FONT}>',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    for x in xt:
        out += [f'<line x1="{px(x)}" y1="{y0}" x2="{px(x)}" y2="{y1}" stroke="#e4e4e4"/>',
                f'<line x1="{px(x)}" y1="{y0}" x2="{px(x)}" y2="{y0 + 5}" stroke="black"/>',
                f'<text class="xtick" x="{px(x)}" y="{y0 + 18}" text-anchor="middle">{label(x)}</text>']
    for y in yt:
        out += [f'<line x1="{x0}" y1="{py(y)}" x2="{x1}" y2="{py(y)}" stroke="#e4e4e4"/>',
                f'<line x1="{x0 - 5}" y1="{py(y)}" x2="{x0}" y2="{py(y)}" stroke="black"/>',
                f'<text class="ytick" x="{x0 - 8}" y="{py(y) + 4}" text-anchor="end">{label(y)}</text>']
    out += [f'<rect class="frame" x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="black"/>',
            f'<text x="{(x0 + x1) / 2}" y="{HEIGHT - 10}" text-anchor="middle">{escape(xlabel)}</text>',
            f'<text transform="translate(16 {(y0 + y1) / 2}) rotate(-90)" text-anchor="middle">{escape(ylabel)}</text>']
    for name, axis_name, v in marks:
        ends = (px(v), y0, px(v), y1) if axis_name == "x" else (x0, py(v), x1, py(v))
        out.append(f'<line x1="{ends[0]}" y1="{ends[1]}" x2="{ends[2]}" y2="{ends[3]}" stroke="black" '
                   f'{DASH}><title>{escape(name)}</title></line>')
    # The legend names the marks too, in the margin above the frame, right-aligned: a label
    # on the chart would cross a curve somewhere.
    right = x1
    entries = [(name, colour, "") for name, colour, _ in series] + [(name, "black", DASH) for name, _, _ in marks]
    for name, colour, dash in reversed(entries):
        text_x = right - 7 * len(name)
        out.append(f'<g class="legend"><line x1="{text_x - 30}" y1="{TOP - 18}" x2="{text_x - 6}" y2="{TOP - 18}" '
                   f'stroke={quoteattr(colour)} stroke-width="2" {dash}/>'
                   f'<text x="{text_x}" y="{TOP - 14}">{escape(name)}</text></g>')
        right = text_x - 44
    for i, (name, colour, points) in enumerate(series):
        coords = " ".join(f"{px(x)},{py(y)}" for x, y in points)
        # Steps of two series often share an x: the first is drawn wide and pale beneath,
        # so where the second's line covers it, it still shows on both sides.
        style = 'stroke-width="4" stroke-opacity="0.45"' if i == 0 and len(series) > 1 else 'stroke-width="1.5"'
        out.append(f'<polyline points="{coords}" fill="none" stroke={quoteattr(colour)} {style}>'
                   f'<title>{escape(name)}</title></polyline>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
