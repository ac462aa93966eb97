#!/usr/bin/env bash
# tools/readme-check.sh: run every shell block of README.md after the Quick start, in order,
# as a new user would after `./run build` (or `./run demo`), from the repository root; each
# block runs with `set -e` in one shell that keeps its exports. Stops at the first failing
# block and names it. Leaves its outputs (heat2d, scr-run/, cairn-ckpt/, ~/cairn-venv, ...)
# where the README's commands put them.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 - README.md > target/readme-blocks.sh <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```sh\n(.*?)```", text, re.S)[1:]   # the Quick start itself is skipped
print("set -e")
for i, b in enumerate(blocks, 1):
    first = b.strip().splitlines()[0]
    print(f"echo '==> README block {i}: {first[:60].replace(chr(39), '')}'")
    print(b)
print("echo '==> every README block ran'")
PY
exec bash target/readme-blocks.sh
