"""Write generated instances (scaleacross_milp.generate) to a folder, one JSON file per seed.

    python benchmarks/generate.py OUT_DIR [--count 20] [--first-seed 0] [--size medium] [--force]

Each file (`gen-SIZE-SEED.json`, model inlined) solves from anywhere: `scaleacross-milp solve OUT_DIR/gen-...json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scaleacross_milp.generate import Size, generate
from scaleacross_milp.spec.instance import Instance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder to write the instances to (created if missing)")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--size", type=Size, default=Size.medium, choices=list(Size), metavar="{small,medium,large}")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    for seed in range(args.first_seed, args.first_seed + args.count):
        data = generate(seed, args.size)
        instance = Instance.model_validate(data)
        path = args.out / f"{instance.name}.json"
        if path.exists() and not args.force:
            raise SystemExit(f"{path} exists; not overwriting it (use --force)")
        path.write_text(json.dumps(data, indent=2) + "\n")
        gpus = sum(b.gpus for b in instance.topology.buildings)
        print(f"{path}: {instance.model_spec.name}, {gpus:,} GPUs in {len(instance.topology.buildings)} buildings")


if __name__ == "__main__":
    main()
