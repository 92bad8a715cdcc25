"""Build what a spec's engine needs.

  engine.kind = torch:        the local safetensors checkpoint (converted from the spec's source).
  engine.kind = tensorrtllm:  the checkpoint, then a TensorRT-LLM checkpoint and a trtllm-build engine.

    python scripts/build_engine.py --spec specs/default.yaml
    python scripts/build_engine.py --spec specs/trtllm-1gpu.yaml --dry-run

(also the `llmserve-build-engine` command)
"""

import argparse
import sys

from ..checkpoint import build_checkpoint
from ..logs import configure
from ..spec import ROOT, SpecError, load_spec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(ROOT / "specs/default.yaml"))
    ap.add_argument("--force", action="store_true", help="rebuild even if the output exists")
    ap.add_argument("--dry-run", action="store_true", help="tensorrtllm: print the commands, run nothing")
    args = ap.parse_args(argv)
    configure("info")  # the build's progress lines (llmserve.checkpoint, llmserve.trtllm.build)
    try:
        spec = load_spec(args.spec)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        if spec.engine.kind == "tensorrtllm":
            from ..trtllm.build import build_trtllm_engine

            return build_trtllm_engine(spec, args.spec, dry_run=args.dry_run, force=args.force)
        if args.dry_run:
            print(f"would build checkpoint {spec.checkpoint_path()} from {spec.model.source.kind}")
            return 0
        build_checkpoint(spec, force=args.force)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
