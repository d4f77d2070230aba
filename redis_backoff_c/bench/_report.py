"""Turning measured sides into rows, and rows into a table, JSON and a chart."""

import json
import math
import statistics
import textwrap

from ._timing import quartiles

SECTIONS = [
    # name, column headers (operation, A, B, value)
    ("compute", ("operation", "redis-py", "C", "ratio")),
    ("floor", ("operation", "floor", "C", "C/floor")),
    ("construction", ("operation", "redis-py", "C", "ratio")),
    ("eq", ("operation", "redis-py", "C", "ratio")),
    ("hash", ("operation", "redis-py", "C", "ratio")),
    ("copy", ("operation", "redis-py", "C", "ratio")),
    ("sync Retry", ("operation", "redis-py", "C", "ratio")),
    ("asyncio Retry", ("operation", "redis-py", "C", "ratio")),
    ("memory", ("object", "redis-py", "C", "ratio")),
    ("peers", ("library", "library", "ours", "lib/ours")),
    ("end-to-end", ("operation", "redis-py", "C", "ratio")),
]
HIGHER_IS_BETTER = {"ratio", "overhead", "memory", "peer"}


def evaluate(row, case, stats, reasons):
    """The figures of one row from the sides' Stats; a dict for the JSON."""
    section = "floor" if row.kind in ("floor", "above") else case.section
    out = {
        "name": row.name,
        "case": case.name,
        "section": section,
        "kind": row.kind,
        "unit": "B" if case.kind == "memory" else "ns",
        "target": row.target,
        "judged_by": "median" if row.target is None else row.judge,
        "target_op": None
        if row.target is None
        else (">=" if row.kind in HIGHER_IS_BETTER else "<="),
        "a": None,
        "b": None,
        "a_spread": None,
        "b_spread": None,
        "value": None,
        "value_q1": None,
        "value_q3": None,
        "verdict": None,
        "available": True,
        "reason": None,
    }
    missing = [s for s in required_sides(row) if s not in stats]
    if missing:
        why = [reasons[s] for s in missing if s in reasons] or ["not run"]
        out.update(available=False, reason=why[0], verdict="n/a")
        return out

    scale = 1.0 if case.kind == "memory" else 1e9
    med = {label: s.median * scale for label, s in stats.items()}
    per = {label: [x * scale for x in s.samples] for label, s in stats.items()}

    def spread(label):
        q1, q3 = quartiles(per[label])
        return (q3 - q1) / 2 / med[label] if med[label] else None

    if row.kind == "single":
        out.update(a=med[row.num], a_spread=spread(row.num))
        return out

    if row.kind == "delta":  # the extra cost of den above num, in ns
        out.update(
            a=med[row.num], b=med[row.den], a_spread=spread(row.num), b_spread=spread(row.den)
        )
        values = [y - x for x, y in zip(per[row.num], per[row.den])]
        out["value"] = statistics.median(values)
    elif row.kind in ("ratio", "memory", "floor"):
        a, b = (row.den, row.num) if row.kind == "floor" else (row.num, row.den)
        out.update(a=med[a], b=med[b], a_spread=spread(a), b_spread=spread(b))
        # The sides of one repeat ran back to back: their ratio is the
        # paired estimate; the row's value is the median of those.
        values = [x / y for x, y in zip(per[row.num], per[row.den]) if y > 0]
        out["value"] = statistics.median(values)
    elif row.kind == "above":  # the cost above a base, against a floor
        out.update(a=med[row.den], a_spread=spread(row.den), b=med[row.num] - med[row.base])
        values = [
            (x - z) / y for x, y, z in zip(per[row.num], per[row.den], per[row.base]) if y > 0
        ]
        out["value"] = statistics.median(values)
    else:  # "overhead", "peer": costs above the base side
        base = med[row.base]
        out["a"] = med[row.num] - base
        if row.den not in stats:
            out["reason"] = reasons.get(row.den, "not run")
            return out
        out["b"] = med[row.den] - base
        if row.num == row.den:  # our own line in the peers table
            return out
        values = [
            (x - z) / (y - z)
            for x, y, z in zip(per[row.num], per[row.den], per[row.base])
            if y - z > 0
        ]
        if len(values) == len(per[row.base]):  # paired, as for ratio rows
            out["value"] = statistics.median(values)
        else:  # some repeat saw no cost above do() at all: medians only
            out["value"] = out["a"] / out["b"] if out["b"] > 0 else math.inf
    if values:
        out["value_q1"], out["value_q3"] = quartiles(values)
    if row.target is not None:
        # The parity rule judges the lower quartile: a row passes only if
        # three quarters of its paired repeats are at or above it.
        judged = (
            out["value_q1"] if row.judge == "q1" and out["value_q1"] is not None else out["value"]
        )
        ok = judged >= row.target if out["target_op"] == ">=" else judged <= row.target
        verdict = "PASS" if ok else "MISS"
        q1, q3 = out["value_q1"], out["value_q3"]
        if row.judge != "q1" and values and q1 < q3 and q1 <= row.target <= q3:
            verdict += "~"
        out["verdict"] = verdict
    return out


def required_sides(row):
    if row.kind == "single":
        return [row.num]
    if row.kind == "peer":
        return [row.num, row.base]
    if row.kind in ("overhead", "above"):
        return [row.num, row.den, row.base]
    return [row.num, row.den]


# ------------------------------------------------------------------ table


def fmt_quantity(value, unit):
    if value is None:
        return "-"
    if unit == "B":
        return f"{value:,.0f} B"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f} ms"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.1f} us"
    return f"{value:.1f} ns"


def fmt_cell(value, spread, unit):
    text = fmt_quantity(value, unit)
    if value is not None and spread is not None and unit != "B":
        text += f" ±{spread * 100:.0f}%"
    return text


def fmt_value(row):
    value = row["value"]
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    if row["kind"] == "delta":
        text = f"{value:+.1f} ns"
        if row["value_q1"] is not None:
            text += f" [{row['value_q1']:+.1f}..{row['value_q3']:+.1f}]"
        return text
    text = f"{value:.2f}x"
    if row["value_q1"] is not None and row["kind"] != "memory":
        text += f" [{row['value_q1']:.2f}-{row['value_q3']:.2f}]"
    return text


def fmt_target(row):
    if row["target"] is None:
        return ""
    op = "≥" if row["target_op"] == ">=" else "≤"
    if row["kind"] == "delta":
        return f"{op} {row['target']:.0f} ns"
    if row.get("judged_by") == "q1":
        return f"q1 {op} {row['target']:.2f}x"
    return f"{op} {row['target']:.2f}x"


def render_table(rows, cases, width=None):
    """The whole report as text."""
    notes = {c.name: c.note for c in cases if c.note}
    lines = []
    name_width = min(64, max((len(r["name"]) for r in rows), default=20))
    widths = (name_width, 16, 16, 21, 9)
    for section, headers in SECTIONS:
        in_section = [r for r in rows if r["section"] == section]
        if not in_section:
            continue
        lines.append("")
        lines.append(f"== {section} ==")
        seen = []
        for r in in_section:
            note = notes.get(r["case"])
            if note and note not in seen and section != "floor":
                seen.append(note)
                lines.extend(
                    textwrap.wrap(note, 100, initial_indent="  # ", subsequent_indent="  # ")
                )
        lines.append(_line([*headers, "target", "verdict"], widths))
        for r in in_section:
            if not r["available"]:
                lines.append(_line([r["name"], f"n/a: {r['reason']}"], widths))
                continue
            cells = [
                r["name"],
                fmt_cell(r["a"], r["a_spread"], r["unit"]),
                fmt_cell(r["b"], r["b_spread"], r["unit"]),
                fmt_value(r),
                fmt_target(r),
                r["verdict"] or "",
            ]
            if r["kind"] == "single" or (r["kind"] == "peer" and r["value"] is None):
                cells[2:] = ["", "", "", ""]
            if r["reason"]:  # a peer row without our side
                cells[2:] = [f"n/a: {r['reason']}"]
            lines.append(_line(cells, widths))
    return "\n".join(lines)


def _line(cells, widths):
    out = []
    for i, cell in enumerate(cells):
        if i < len(widths) and i < len(cells) - 1:
            align = "<" if i == 0 else ">"
            out.append(f"{cell:{align}{widths[i]}}")
        else:
            out.append(("  " if i else "") + cell if i else cell)
    return " ".join(out).rstrip()


def summary(rows):
    counts = {}
    for r in rows:
        if r["target"] is None and r["available"]:
            continue
        key = (r["verdict"] or "n/a").rstrip("~")
        counts[key] = counts.get(key, 0) + 1
    border = sum(1 for r in rows if (r["verdict"] or "").endswith("~"))
    parts = [f"{counts.get(k, 0)} {k}" for k in ("PASS", "MISS", "n/a")]
    text = "targets: " + ", ".join(parts)
    if border:
        text += f" ({border} borderline, marked ~)"
    return text


LEGEND = """\
Times are per operation (clock as stated above; end-to-end rows: wall
clock), median over interleaved repeats, ±half the
interquartile range relative to the median.  ratio = redis-py / C (higher:
C faster or smaller), the median over repeats of the ratio of the two sides
timed back to back in one repeat; [..] = interquartile range of those.
Overhead rows: t(side) - t(do()) for each side, medians; ratio paired
as above.  Extras rows: t(C Retry with extras) - t(plain C Retry), in ns,
the median over repeats of the paired difference (lower is better).
~ after PASS/MISS: the target lies inside that range, so the verdict is
within this machine's noise; rerun (without --quick) to confirm."""


# ------------------------------------------------------------------ JSON


def write_json(path, payload):
    with open(path, "w") as f:
        json.dump(_finite(payload), f, indent=1)
        f.write("\n")


def _finite(obj):
    """inf/nan are not JSON: write them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


# ------------------------------------------------------------------ chart


def write_plot(path, rows, meta):
    """A PNG: ratio per row with its target, and the fast/floor rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def finite(r):
        return r["value"] is not None and math.isfinite(r["value"])

    ratios = [r for r in rows if r["kind"] in ("ratio", "overhead", "memory") and finite(r)]
    floors = [r for r in rows if r["kind"] == "floor" and finite(r)]
    peers = [r for r in rows if r["kind"] == "peer" and r["a"] is not None]
    panels = [p for p in (ratios, floors, peers) if p]
    heights = [max(1.5, 0.22 * len(p) + 0.8) for p in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(10, sum(heights) + 1),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    axes = iter(axes[:, 0])
    colours = {"PASS": "tab:green", "MISS": "tab:red"}

    def bars(ax, group, label):
        names = [f"{r['name'].strip()}" for r in group][::-1]
        values = [r["value"] for r in group][::-1]
        colors = [colours.get((r["verdict"] or "").rstrip("~"), "tab:gray") for r in group][::-1]
        ax.barh(names, values, color=colors)
        for y, value in enumerate(values):
            ax.text(value, y, f" {value:.2f}", va="center", fontsize=6)
        for y, r in enumerate(group[::-1]):
            if r["target"] is not None:
                ax.plot([r["target"]] * 2, [y - 0.45, y + 0.45], color="black", linewidth=2)
        ax.set_xlabel(label)
        ax.tick_params(axis="y", labelsize=7)

    if ratios:
        ax = next(axes)
        bars(
            ax,
            ratios,
            "redis-py / redis_backoff_c (higher is better); "
            "black tick: target; green PASS, red MISS, grey no target",
        )
        ax.axvline(1.0, color="gray", linestyle=":")
    if floors:
        ax = next(axes)
        bars(ax, floors, "C compute / floor (lower is better); black tick: target")
    if peers:
        ax = next(axes)
        peers = [r for r in peers if r["kind"] == "peer" and r["a"] > 0]
        names = [r["name"] for r in peers][::-1]
        values = [r["a"] for r in peers][::-1]
        ax.barh(names, values, color="tab:blue")
        for y, value in enumerate(values):
            ax.text(value, y, f" {value:,.0f} ns", va="center", fontsize=6)
        ax.set_xscale("log")
        ax.set_xlabel("overhead of a successful call above do(), ns, log scale (lower is better)")
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(
        f"redis_backoff_c {meta['packages'].get('redis_backoff_c')} vs redis "
        f"{meta['packages'].get('redis')}; Python {meta['python']} "
        f"on {meta['cpu']}; {meta['settings']['profile']} run, "
        f"{meta['settings']['clock']} clock",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)
