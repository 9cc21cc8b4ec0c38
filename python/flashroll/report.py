"""A training run as one self-contained HTML page: inline SVG line plots
(reward, success and reasoning tokens per effort, train-inference mismatch,
tokens/s) per step, the per-step table, and the job's before/after
evaluation when given.

  python3 -m flashroll.report --log TRAINER_LOG.jsonl [--eval EVAL.json] --out REPORT.html

TRAINER_LOG.jsonl is a trainer's --log (one JSON object per step, see
trainers/loop.py); EVAL.json, written by the job, is {"before": {...},
"after": {...}}, shown as a table of whatever keys it has.
"""
import argparse
import html
import json
import math
import sys

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
WIDTH, HEIGHT, MARGIN = 560, 220, 48


def read_log(path):
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: not JSON: {e}") from None
    return records


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def line_plot(title, series):
    """series: {name: [(x, y), ...]} -> an <svg> element; points whose y is
    missing (None) are left out."""
    series = {k: [(x, y) for x, y in pts if _number(y)] for k, pts in series.items()}
    series = {k: pts for k, pts in series.items() if pts}
    out = [f'<figure><figcaption>{html.escape(title)}</figcaption>']
    if not series:
        return "".join(out) + "<p>no data</p></figure>"
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    w, h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN

    def px(x, y):
        return MARGIN + (x - x0) / (x1 - x0) * w, MARGIN + (1 - (y - y0) / (y1 - y0)) * h

    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
               f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">')
    out.append(f'<rect x="{MARGIN}" y="{MARGIN}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    for frac in (0, 0.5, 1):
        y = y0 + frac * (y1 - y0)
        _, py = px(x0, y)
        out.append(f'<text x="{MARGIN - 4}" y="{py + 4:.1f}" text-anchor="end">{y:.3g}</text>')
    for x in (x0, x1):
        pxx, _ = px(x, y0)
        out.append(f'<text x="{pxx:.1f}" y="{HEIGHT - MARGIN + 14}" text-anchor="middle">{x:g}</text>')
    out.append(f'<text x="{MARGIN + w / 2}" y="{HEIGHT - 8}" text-anchor="middle">step</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in (px(x, y) for x, y in pts))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>')
        if len(pts) == 1:
            a, b = px(*pts[0])
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{colour}"/>')
        out.append(f'<text x="{MARGIN + 6 + 90 * i}" y="{MARGIN - 8}" fill="{colour}">{html.escape(name)}</text>')
    out.append("</svg></figure>")
    return "".join(out)


def per_effort(records, key):
    """{"effort E": [(step, value)]} from each record's {effort: value} map under key."""
    series = {}
    for r in records:
        for effort, v in (r.get(key) or {}).items():
            series.setdefault(f"effort {effort}", []).append((r["step"], v))
    return series


def scalar(records, key, name=None):
    return {name or key: [(r["step"], r.get(key)) for r in records]}


TABLE_COLUMNS = ("step", "version", "success", "loss", "grad_norm", "entropy", "clip_fraction", "kl",
                 "reverse_kl", "mismatch_abs", "mismatch_kl", "mismatch_tokens", "samples", "trained_samples", "tokens",
                 "seconds", "tokens_per_s")


def step_table(records):
    columns = [c for c in TABLE_COLUMNS if any(c in r for r in records)]
    rows = ["<tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"]
    for r in records:
        rows.append("<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in columns) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def eval_table(evaluation):
    """{"before": {...}, "after": {...}} (any nesting) -> rows of flattened keys,
    one column per top-level key."""
    columns = list(evaluation)
    flat = {c: _flatten(evaluation[c]) for c in columns}
    keys = list(dict.fromkeys(k for c in columns for k in flat[c]))
    rows = ["<tr><th></th>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>"]
    for k in keys:
        rows.append(f"<tr><th>{html.escape(k)}</th>" +
                    "".join(f"<td>{_fmt(flat[c].get(k, ''))}</td>" for c in columns) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


def render(records, evaluation=None, title="Flashroll training report"):
    success = per_effort(records, "success_by_effort")
    success.update(scalar(records, "success", "all"))
    mismatch = scalar(records, "mismatch_abs", "mean |logp trainer - logp engine|")
    mismatch.update(scalar(records, "mismatch_kl", "KL estimate"))
    plots = [line_plot("mean reward per effort", per_effort(records, "reward_by_effort")),
             line_plot("success rate", success),
             line_plot("reasoning tokens per effort", per_effort(records, "reasoning_tokens_by_effort")),
             line_plot("train-inference mismatch (tokens of the held version)", mismatch),
             line_plot("tokens/s", scalar(records, "tokens_per_s"))]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}figure{display:inline-block;margin:0 1em 1em 0}"
             "figcaption{font-weight:bold}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
             f"<h1>{html.escape(title)}</h1><p>{len(records)} steps</p>", *plots]
    if evaluation is not None:
        parts += ["<h2>Evaluation</h2>", eval_table(evaluation)]
    parts += ["<h2>Steps</h2>", step_table(records), "</body></html>"]
    return "\n".join(parts)


def main(argv=None):
    p = argparse.ArgumentParser(description="Render a trainer log as one self-contained HTML report")
    p.add_argument("--log", required=True, help="the trainer's JSON Lines log")
    p.add_argument("--eval", help="the job's EVAL.json ({before, after}); optional")
    p.add_argument("--out", required=True, help="the HTML file to write")
    args = p.parse_args(argv)
    records = read_log(args.log)
    evaluation = None
    if args.eval:
        with open(args.eval) as f:
            evaluation = json.load(f)
        if not isinstance(evaluation, dict):
            raise SystemExit(f"--eval {args.eval}: expected a JSON object, got {type(evaluation).__name__}")
    with open(args.out, "w") as f:
        f.write(render(records, evaluation))
    print(f"wrote {args.out}: {len(records)} steps", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
