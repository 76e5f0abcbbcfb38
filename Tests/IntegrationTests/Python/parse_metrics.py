#!/usr/bin/env python3
"""Parses a Prometheus text exposition with prometheus_client's own parser and prints its
samples as JSON (one object: {"families": {name: type}, "samples": [[name, labels, value], ...]}).
Reads the text from a URL (http://...), a file, or stdin. Exits 1 when the text does not parse."""
import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    if len(sys.argv) > 1 and not sys.argv[1].startswith("http"):
        content_type = ""
        with open(sys.argv[1], encoding="utf-8") as file:
            text = file.read()
    elif len(sys.argv) > 1:
        with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
            content_type = response.headers.get("Content-Type", "")
            text = response.read().decode("utf-8")
    else:
        content_type = ""
        text = sys.stdin.read()
    families = {}
    samples = []
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for sample in family.samples:
            samples.append([sample.name, sample.labels, sample.value])
    print(json.dumps({"contentType": content_type, "families": families, "samples": samples}))


if __name__ == "__main__":
    try:
        main()
    except Exception as error:  # the parser's refusal, a failed fetch: one line, exit 1
        print(f"parse_metrics: {error}", file=sys.stderr)
        sys.exit(1)
