"""Golden JSON Schema verdicts from an independent validator, for tandem's schema grammars.

Produces
    tests/data/json_schema_golden.json:
        [{"schema": "<the schema's JSON text>",
          "texts": [["<a JSON text>", true | false], ...]}, ...]
    where the verdict is the Python `jsonschema` package's (Draft 2020-12) on the text, under
    the schema with `additionalProperties: false` added wherever it is absent (tandem's
    documented reading: absent means none, as OpenAI's strict mode) and oneOf read as anyOf
    (also documented: a value valid for two branches is possible). grammar_test checks
    that the grammar JsonSchemaToGbnf makes from the schema accepts exactly the texts
    marked true.

The texts are spelled the way the grammar spells JSON (json.dumps with ", " and ": ",
non-ASCII unescaped, properties in the schema's order), so a verdict can only differ for
a reason of validity, never of spelling: random instances of random schemas from the
subset tandem supports (types, properties, required, additionalProperties, items,
prefixItems, minItems / maxItems, enum, const, anyOf, oneOf, $ref into $defs, pattern,
minLength / maxLength, integer bounds, number bounds that are integers), each written
valid and then mutated (a value of the wrong type, out of range, too long or too short,
a property dropped or added, an item added or removed), so about half fail.

How to run (from the repository root)
    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install jsonschema==4.23.0
    /tmp/refvenv/bin/python tests/reference/make_schema_golden.py
"""

import copy
import json
import os
import random

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "json_schema_golden.json")

WORDS = ["a", "b", "zz", "héllo", "日本", "x y", "q\"t", "b\\s", "7", "ok", "🙂"]
PATTERNS = ["^[a-z]+$", "[0-9]{3}", "^ab(c|d)*$", "^[A-Z][a-z]{0,4}$", "x"]
NAMES = ["id", "name", "tags", "size", "ok", "meta", "items", "kind"]


def gen_schema(rng, depth):
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const"]
    if depth < 3:
        kinds += ["object", "object", "array", "array", "anyOf"]
    kind = rng.choice(kinds)
    if kind == "string":
        s = {"type": "string"}
        r = rng.random()
        if r < 0.3:
            s["pattern"] = rng.choice(PATTERNS)
        elif r < 0.6:
            lo = rng.randint(0, 3)
            s["minLength"] = lo
            if rng.random() < 0.7:
                s["maxLength"] = lo + rng.randint(0, 4)
        return s
    if kind in ("integer", "number"):
        s = {"type": kind}
        if rng.random() < 0.7:
            lo = rng.randint(-50, 50)
            s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
            if rng.random() < 0.7:
                s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = lo + rng.randint(1, 120)
        return s
    if kind in ("boolean", "null"):
        return {"type": kind}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", 3, None, True, "日"], rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False, None])}
    if kind == "object":
        names = rng.sample(NAMES, rng.randint(1, 4))
        props = {n: gen_schema(rng, depth + 1) for n in names}
        s = {"type": "object", "properties": props}
        req = [n for n in names if rng.random() < 0.6]
        if req:
            s["required"] = req
        r = rng.random()
        if r < 0.2:
            s["additionalProperties"] = False
        elif r < 0.3:
            s["additionalProperties"] = {"type": "integer"}
        return s
    if kind == "array":
        s = {"type": "array", "items": gen_schema(rng, depth + 1)}
        if rng.random() < 0.3:
            s["prefixItems"] = [gen_schema(rng, depth + 1)]
        if rng.random() < 0.6:
            lo = rng.randint(0, 2)
            s["minItems"] = lo
            if rng.random() < 0.7:
                s["maxItems"] = lo + rng.randint(0, 3)
        return s
    branches = [gen_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]
    return {rng.choice(["anyOf", "oneOf"]): branches}


def strict(schema):
    """The schema as tandem reads it: no properties beyond `properties` unless allowed, and
    oneOf as anyOf (docs/api.md)."""
    if isinstance(schema, dict):
        out = {("anyOf" if k == "oneOf" else k): strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def resolve(schema, root):
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].split("/")[-1]]
    return schema


def gen_string(rng, s):
    if "pattern" in s:
        p = s["pattern"]
        return {"^[a-z]+$": lambda: "".join(rng.choice("abcxyz") for _ in range(rng.randint(1, 5))),
                "[0-9]{3}": lambda: rng.choice(["", "a", "é"]) + "%03d" % rng.randint(0, 999) +
                rng.choice(["", "z"]),
                "^ab(c|d)*$": lambda: "ab" + "".join(rng.choice("cd") for _ in range(rng.randint(0, 3))),
                "^[A-Z][a-z]{0,4}$": lambda: rng.choice("ABQ") + "".join(
                    rng.choice("abc") for _ in range(rng.randint(0, 4))),
                "x": lambda: rng.choice(["x", "axb", "xx", "日x"])}[p]()
    lo = s.get("minLength", 0)
    hi = s.get("maxLength", lo + 4)
    n = rng.randint(lo, hi)
    out = ""
    while len(out) < n:
        out += rng.choice(WORDS)
    return out[:n]


def gen_value(rng, s, root):
    """A value valid under s (as tandem reads it)."""
    s = resolve(s, root)
    if "const" in s:
        return s["const"]
    if "enum" in s:
        return rng.choice(s["enum"])
    for key in ("anyOf", "oneOf"):
        if key in s:
            # oneOf: a value valid for exactly one branch; retry a few times.
            for _ in range(20):
                v = gen_value(rng, rng.choice(s[key]), root)
                n = sum(valid(v, b, root) for b in s[key])
                if n >= 1 and (key == "anyOf" or n == 1):
                    return v
            return v
    t = s.get("type")
    if t == "string":
        return gen_string(rng, s)
    if t in ("integer", "number"):
        lo = s.get("minimum", s.get("exclusiveMinimum", -1000) + (1 if "exclusiveMinimum" in s else 0))
        hi = s.get("maximum", s.get("exclusiveMaximum", 1000) - (1 if "exclusiveMaximum" in s else 0))
        v = rng.randint(lo, hi) if lo <= hi else lo
        if t == "number" and rng.random() < 0.5 and v < hi:
            v = v + rng.choice([0.5, 0.25, 0.125])
        return v
    if t == "boolean":
        return rng.random() < 0.5
    if t == "null":
        return None
    if t == "object":
        out = {}
        for name, sub in s["properties"].items():
            if name in s.get("required", []) or rng.random() < 0.5:
                out[name] = gen_value(rng, sub, root)
        extra = s.get("additionalProperties")
        if isinstance(extra, dict) and rng.random() < 0.5:
            out["extra"] = gen_value(rng, extra, root)
        return out
    if t == "array":
        prefix = s.get("prefixItems", [])
        lo = max(s.get("minItems", 0), 0)
        hi = s.get("maxItems", lo + 3)
        n = rng.randint(lo, hi)
        return [gen_value(rng, prefix[i] if i < len(prefix) else s["items"], root) for i in range(n)]
    return None


def valid(value, schema, root):
    try:
        full = dict(strict(schema))
        if "$defs" in root:
            full["$defs"] = strict(root["$defs"])
        jsonschema.Draft202012Validator(full).validate(value)
        return True
    except jsonschema.ValidationError:
        return False


def mutate(rng, v):
    """Something close to v, likely invalid."""
    if isinstance(v, dict):
        if v and rng.random() < 0.6:
            k = rng.choice(list(v))
            w = dict(v)
            if rng.random() < 0.4:
                del w[k]
            else:
                w[k] = mutate(rng, w[k])
            return w
        w = dict(v)
        w["unknown"] = 1
        return w
    if isinstance(v, list):
        r = rng.random()
        if v and r < 0.4:
            i = rng.randrange(len(v))
            return v[:i] + [mutate(rng, v[i])] + v[i + 1:]
        if v and r < 0.7:
            return v[:-1]
        return v + (v[-1:] if v else ["x"])
    if isinstance(v, bool) or v is None:
        return rng.choice([0, "true", "null", not v if isinstance(v, bool) else False])
    if isinstance(v, int):
        return rng.choice([v + 1, v - 1, v + 200, -v - 300, str(v), v + 0.5])
    if isinstance(v, float):
        return rng.choice([v + 100.5, -v - 100, str(v)])
    if isinstance(v, str):
        return rng.choice([v + "Q", v[:-1], "", v + v, 5, "9" + v])
    return v


def spell(v, schema, root):
    """JSON text as the grammar writes it: properties in the schema's order."""
    def order(v, s):
        s = resolve(s, root) if isinstance(s, dict) else {}
        if isinstance(v, dict):
            props = s.get("properties", {})
            keys = [k for k in props if k in v] + [k for k in v if k not in props]
            extra = s.get("additionalProperties")
            return {k: order(v[k], props.get(k, extra if isinstance(extra, dict) else {}))
                    for k in keys}
        if isinstance(v, list):
            prefix = s.get("prefixItems", [])
            return [order(x, prefix[i] if i < len(prefix) else s.get("items", {}))
                    for i, x in enumerate(v)]
        return v
    return json.dumps(order(v, schema), ensure_ascii=False, separators=(", ", ": "))


def main():
    rng = random.Random(20261205)
    cases = []
    for i in range(120):
        schema = gen_schema(rng, 0)
        if i % 6 == 0:  # a recursive $ref
            schema = {"$defs": {"node": {"type": "object", "properties": {
                "v": {"type": "integer", "minimum": 0, "maximum": 9},
                "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                "required": ["v", "next"]}}, "$ref": "#/$defs/node"}
        texts = {}
        for _ in range(12):
            v = gen_value(rng, schema, schema)
            for w in (v, mutate(rng, v), mutate(rng, mutate(rng, v))):
                text = spell(w, schema, schema)
                texts[text] = valid(w, schema, schema)
        cases.append({"schema": json.dumps(schema, ensure_ascii=False),
                      "texts": [[t, ok] for t, ok in texts.items()]})
    with open(OUT, "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
        f.write("\n")
    n = sum(len(c["texts"]) for c in cases)
    pos = sum(ok for c in cases for _, ok in c["texts"])
    print(f"wrote {len(cases)} schemas, {n} texts ({pos} valid) to {OUT}")


if __name__ == "__main__":
    main()
