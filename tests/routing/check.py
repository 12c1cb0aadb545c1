"""Validate questions.json and print its counts: python3 tests/routing/check.py"""
import collections, json, os, sys

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "questions.json")
data = json.load(open(path, encoding="utf-8"))
V = {"label": {"simple", "deep", "web"},
     "form": {"definition", "fact", "how-to", "explanation", "trade-off", "comparison", "list", "new"},
     "corpus": {"rust-book", "python", "cargo", "rustc", "nomicon", "honeybees", "general"}}
MIN_FORM = {"definition": 12, "fact": 12, "how-to": 12, "explanation": 14,
            "trade-off": 10, "comparison": 12, "list": 10, "new": 8}
errors = []
if not isinstance(data, list) or len(data) < 96:
    errors.append("need a JSON array of at least 96 entries")
for i, e in enumerate(data):
    if set(e) != {"question", "label", "form", "corpus", "language"}:
        errors.append(f"#{i}: fields {sorted(e)}")
        continue
    if not isinstance(e["question"], str) or not e["question"].strip():
        errors.append(f"#{i}: empty question")
    for k, ok in V.items():
        if e[k] not in ok:
            errors.append(f"#{i}: bad {k} {e[k]!r}")
    if not (isinstance(e["language"], str) and len(e["language"]) == 2 and e["language"].isalpha() and e["language"].islower()):
        errors.append(f"#{i}: bad language {e['language']!r}")
    if (e["form"] == "new") != (e["label"] == "web"):
        errors.append(f"#{i}: form new <=> label web violated")
qs = [e.get("question") for e in data]
if len(qs) != len(set(qs)):
    errors.append("duplicate questions")
count = lambda k: collections.Counter(e[k] for e in data)
forms, lang, n = count("form"), count("language"), len(data)
for f, m in MIN_FORM.items():
    if forms[f] < m:
        errors.append(f"form {f}: {forms[f]} < {m}")
if lang["en"] / n < 0.70:
    errors.append("English share below 70%")
for l in ("de", "fr", "es", "zh"):
    if lang[l] < 4:
        errors.append(f"language {l}: {lang[l]} < 4")
other = sum(v for k, v in lang.items() if k not in ("en", "de", "fr", "es", "zh"))
if not 2 <= other <= 3:
    errors.append(f"other languages: {other}, want 2-3")

print(f"total: {n}")
for k in ("label", "form", "corpus", "language"):
    print(f"{k}: " + ", ".join(f"{a} {b}" for a, b in count(k).most_common()))
print(f"English share: {lang['en'] / n:.1%}")
print("label x form:")
print(" " * 8 + "".join(f"{f:>12}" for f in MIN_FORM))
for l in ("simple", "deep", "web"):
    print(f"{l:<8}" + "".join(f"{sum(e['label'] == l and e['form'] == f for e in data):>12}" for f in MIN_FORM))
if errors:
    print("\n".join(["ERRORS:"] + errors))
    sys.exit(1)
print("OK")
