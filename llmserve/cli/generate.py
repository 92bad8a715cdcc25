"""Render every config.pbtxt (and copy each model.py) of a model repository from one spec.

    python tools/generate.py --spec specs/default.yaml --out model_repository
    python tools/generate.py --spec specs/default.yaml --check   # CI: fail on drift
    python tools/generate.py --spec specs/tiny-trtllm.yaml --out /tmp/r --standin   # CI stand-in for TensorRT-LLM

(also the `llmserve-generate` command)
"""

import argparse
import sys
from pathlib import Path

from ..logs import configure
from ..repository.writer import check_repository, spec_label, write_repository
from ..spec import ROOT, SpecError, load_spec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(ROOT / "specs/default.yaml"))
    ap.add_argument("--out", help="model repository directory to write")
    ap.add_argument("--check", action="store_true", help="compare the committed model_repository/ with the spec")
    ap.add_argument(
        "--standin",
        action="store_true",
        help="engine.kind tensorrtllm: serve the C++ backend's model with the CI stand-in "
        "(llmserve/pipeline/standin.py); every other model exactly as for production",
    )
    args = ap.parse_args(argv)
    configure("info")  # the generator's notes (llmserve.trtllm.config) go to stderr
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    label = spec_label(Path(args.spec))
    if args.check:
        target = Path(args.out) if args.out else ROOT / "model_repository"
        problems = check_repository(spec, label, target)
        for p in problems:
            print(f"drift in {target}: {p}", file=sys.stderr)
        if problems:
            print(f"run: python tools/generate.py --spec {args.spec} --out {target}", file=sys.stderr)
            return 1
        print(f"{target} matches {label}")
        return 0
    if not args.out:
        ap.error("--out or --check is required")
    try:
        files = write_repository(spec, label, Path(args.out), standin=args.standin)
    except ValueError as e:  # a spec combination the generator refuses, with the reason
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files to {args.out} from {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
