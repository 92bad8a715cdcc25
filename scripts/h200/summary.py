"""The table printed at the end of run.sh: every tools/bench.py result under WORK (one line per target and
load), the step profile and the Hugging Face peer. Usage: summary.py WORK"""

import json
import sys
from pathlib import Path

work = Path(sys.argv[1])
print("| run | target | load | output tok/s | TTFT p50 ms | ITL p50 ms | errors |")
print("|---|---|---|---|---|---|---|")
for f in sorted(work.glob("*/results.json")):
    if f.parent.name.startswith("smoke"):
        continue
    for run in json.loads(f.read_text())["runs"]:
        s = run["summary"]
        print(
            f"| {f.parent.name} | {run['target']} | {run['load']} | {s['output_tokens_per_s']:,.0f} | "
            f"{s['ttft_ms']['p50']} | {s['itl_ms']['p50']} | {s['errors']} |"
        )
for name in ("profile.json", "hf.json"):
    if (work / name).exists():
        print(f"\n{name}:")
        doc = json.loads((work / name).read_text())
        for section in doc.values() if isinstance(doc, dict) else [doc]:
            for row in section if isinstance(section, list) else []:
                print(" ", json.dumps(row))
