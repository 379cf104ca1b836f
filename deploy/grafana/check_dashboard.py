#!/usr/bin/env python3
"""Checks that a Grafana dashboard only queries metrics a server actually exports.

    check_dashboard.py DASHBOARD.json METRICS.txt [METRICS.txt ...]
    check_dashboard.py DASHBOARD.json --names-file NAMES.txt [--names-file ...]

Every PromQL expression of the dashboard is read: panel targets (`expr`), panels
nested in rows (new and old layouts), annotation queries and templating variables
(`label_values(metric, label)`, `query_result(expr)`, plain expressions). From each,
the metric names are extracted: identifiers that are not functions, aggregation
operators, keywords, label names (in `{...}`, `by (...)`, `without (...)`, `on (...)`,
`ignoring (...)`, `group_left/right (...)`), Grafana variables, numbers or durations.

METRICS.txt files are Prometheus text exposition (e.g. `curl host:8000/metrics`): a
name is present when a sample with exactly that name appears, or when a `# TYPE` line
declares it (a histogram family X declares X_bucket, X_sum and X_count; a summary X
declares X, X_sum and X_count) — a labelled family with no child yet has no samples.
NAMES.txt files hold one name per line (blank lines and `#` comments ignored).

Prints the missing names with the panels that use them and exits 1; otherwise prints
a summary and exits 0. Exit 2: bad usage or unreadable input. Python 3 standard
library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Iterable, Iterator

IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

# PromQL words that are never metric names where they appear as bare identifiers.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "offset", "and", "or", "unless", "atan2", "inf", "nan", "start", "end",
}
# Functions and aggregation operators: recognised by the `(` that follows them (or, for
# aggregations, a `by`/`without` clause), but listed too so that `sum by (le) (...)`
# style and Grafana macros are safe even if written unusually.
FUNCTIONS = {
    # aggregation operators
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    # functions
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max",
    "clamp_min", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta",
    "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum",
    "double_exponential_smoothing", "holt_winters", "hour", "idelta", "increase",
    "irate", "label_join", "label_replace", "ln", "log2", "log10", "minute", "month",
    "predict_linear", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc",
    "sort_by_label", "sort_by_label_desc", "sqrt", "time", "timestamp", "vector", "year",
    "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
    "count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time",
    "last_over_time", "present_over_time", "mad_over_time", "acos", "acosh", "asin",
    "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh", "deg", "rad",
    "pi", "info",
}
LABEL_LIST_CLAUSE = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
GRAFANA_VARIABLE = re.compile(
    r"\$\{[^}]*\}"                       # ${var}, ${var:regex}
    r"|\[\[[^\]]*\]\]"                   # [[var]] (deprecated syntax)
    r"|\$[a-zA-Z_][a-zA-Z0-9_]*")        # $var, $__rate_interval, $__interval
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
NUMBER = re.compile(
    r"(?<![a-zA-Z0-9_:])(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"(?:ms|[smhdwy])?(?![a-zA-Z0-9_:])")
OFFSET = re.compile(r"\boffset\s+-?(?:\d+(?:ms|[smhdwy]))+")
AT_MODIFIER = re.compile(r"@\s*(?:-?[\d.]+|start\s*\(\s*\)|end\s*\(\s*\))")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (with Grafana variables) selects."""
    text = STRING.sub(" ", expr)                  # label values, label_replace args
    text = re.sub(r"#[^\n]*", " ", text)          # PromQL comments
    text = GRAFANA_VARIABLE.sub(" 1 ", text)      # may stand for a number or a duration
    text = re.sub(r"\{[^{}]*\}", " ", text)       # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)     # ranges, subqueries
    text = OFFSET.sub(" ", text)
    text = AT_MODIFIER.sub(" ", text)
    text = LABEL_LIST_CLAUSE.sub(" ", text)       # by (le), on (pod) group_left (...)
    text = NUMBER.sub(" ", text)
    names = set()
    for m in IDENT.finditer(text):
        word = m.group(0)
        rest = text[m.end():].lstrip()
        if rest.startswith("("):
            continue                              # a function or an aggregation
        if word.lower() in KEYWORDS or word in FUNCTIONS:
            continue
        names.add(word)
    return names


def _split_top_level_comma(s: str) -> tuple[str, str] | None:
    """Splits `a, b` at the last comma outside (), {} and [] and quotes."""
    depth = 0
    quote = ""
    last = -1
    i = 0
    while i < len(s):
        c = s[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'`":
            quote = c
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            last = i
        i += 1
    if last < 0:
        return None
    return s[:last], s[last + 1:]


def variable_expressions(query: str) -> list[str]:
    """The PromQL inside a Grafana Prometheus variable query."""
    q = query.strip()
    m = re.fullmatch(r"label_values\s*\((.*)\)", q, re.S)
    if m:
        parts = _split_top_level_comma(m.group(1))
        return [parts[0]] if parts else []        # label_values(label): no metric
    m = re.fullmatch(r"query_result\s*\((.*)\)", q, re.S)
    if m:
        return [m.group(1)]
    if re.fullmatch(r"(?:metrics|label_names)\s*\(.*\)", q, re.S):
        return []                                 # name regexes, not selectors
    return [q] if q else []


def _panels(panels: Iterable) -> Iterator[dict]:
    for p in panels or []:
        if not isinstance(p, dict):
            continue
        yield p
        yield from _panels(p.get("panels"))       # rows (collapsed or not), libraries


def dashboard_expressions(dash: dict) -> list[tuple[str, str]]:
    """(where, expr) for every PromQL expression in the dashboard."""
    if isinstance(dash.get("dashboard"), dict):   # an API export wraps the model
        dash = dash["dashboard"]
    out: list[tuple[str, str]] = []
    panels = list(_panels(dash.get("panels")))
    for row in dash.get("rows") or []:            # pre-5.0 layout
        if isinstance(row, dict):
            panels.extend(_panels(row.get("panels")))
    for p in panels:
        title = p.get("title") or f"panel {p.get('id', '?')}"
        for t in p.get("targets") or []:
            if isinstance(t, dict) and isinstance(t.get("expr"), str) and t["expr"].strip():
                out.append((f'panel "{title}" ({t.get("refId", "?")})', t["expr"]))
    for v in (dash.get("templating") or {}).get("list") or []:
        if not isinstance(v, dict) or v.get("type") != "query":
            continue
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query") or q.get("expr") or ""
        if isinstance(q, str):
            for e in variable_expressions(q):
                out.append((f'variable "{v.get("name", "?")}"', e))
    for a in (dash.get("annotations") or {}).get("list") or []:
        if isinstance(a, dict):
            e = a.get("expr") or (a.get("target") or {}).get("expr")
            if isinstance(e, str) and e.strip():
                out.append((f'annotation "{a.get("name", "?")}"', e))
    return out


def exposition_names(text: str) -> set[str]:
    """Sample names and declared series names in Prometheus text exposition."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            f = line.split()
            if len(f) >= 4 and f[1] == "TYPE":
                name, kind = f[2], f[3]
                if kind == "histogram":
                    names.update({name + "_bucket", name + "_sum", name + "_count"})
                elif kind == "summary":
                    names.update({name, name + "_sum", name + "_count"})
                else:
                    names.add(name)
            continue
        m = IDENT.match(line)
        if m:
            names.add(m.group(0))
    return names


def names_file(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dashboard")
    ap.add_argument("metrics", nargs="*", help="Prometheus text exposition files")
    ap.add_argument("--names-file", action="append", default=[],
                    help="a file of metric names, one per line (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the names checked")
    args = ap.parse_args(argv)
    if not args.metrics and not args.names_file:
        ap.error("give at least one METRICS file or --names-file")

    try:
        with open(args.dashboard, encoding="utf-8") as f:
            dash = json.load(f)
        known: set[str] = set()
        for path in args.metrics:
            with open(path, encoding="utf-8") as f:
                known |= exposition_names(f.read())
        for path in args.names_file:
            with open(path, encoding="utf-8") as f:
                known |= names_file(f.read())
    except (OSError, ValueError) as e:
        print(f"check_dashboard: {e}", file=sys.stderr)
        return 2

    exprs = dashboard_expressions(dash)
    used: dict[str, list[str]] = {}
    empty = []
    for where, expr in exprs:
        found = metric_names(expr)
        if not found:
            empty.append(where)
        for name in found:
            used.setdefault(name, []).append(where)

    missing = sorted(n for n in used if n not in known)
    for where in empty:
        print(f"check_dashboard: note: no metric name in {where}", file=sys.stderr)
    if missing:
        print(f"check_dashboard: {len(missing)} metric name(s) used by {args.dashboard} "
              "are not exported:")
        for n in missing:
            places = sorted(set(used[n]))
            print(f"  {n}  (in {'; '.join(places)})")
        return 1
    print(f"check_dashboard: {len(exprs)} expressions in {args.dashboard} use "
          f"{len(used)} metric names, all exported")
    if args.verbose:
        for n in sorted(used):
            print(f"  {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
