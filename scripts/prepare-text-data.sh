#!/usr/bin/env bash
# Prepares the natural-text data directories the configs in configs/text/ read, from the King James Bible that
# Debian's bible-kjv installs (public domain; scripts/install-deps.sh installs it): runs/data/kjv.txt (4.2 MB, one
# chapter per paragraph, 1,189 chapters) and runs/data/kjv-bpe4096 (BPE with 4096 pieces, byte fallback; chapters
# are the documents, about 10% held out). Skips a data directory that is already complete.
#   scripts/prepare-text-data.sh [CANONLAB_BINARY]        (default: build/canonlab)
# Any other corpus: canonlab data prepare --input FILE|DIR|GLOB... (docs/text-data.md), then
# --set task.text.path=DATA_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/canonlab}
[[ -x "$bin" ]] || { echo "error: $bin is not an executable; build first (scripts/build.sh) or name the binary" >&2; exit 1; }
command -v bible > /dev/null || { echo "error: the 'bible' program is missing; apt-get install bible-kjv (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p runs/data
# One preparer at a time (tests run in parallel may all ask for the data): the others wait, then find it complete.
exec 9> runs/data/.prepare.lock
flock 9
if [[ ! -s runs/data/kjv.txt ]]; then
  # bible prints a header line, then per chapter a reference line and the verses indented by two spaces; keep the
  # verses, one chapter per paragraph (the documents: --doc-delimiter '\n\n').
  bible -l 100000 Gen1:1-Rev22:21 | sed -e 1d -e '/^[^ ]/{n;d}' -e 's/^  //' > runs/data/kjv.txt.tmp
  mv runs/data/kjv.txt.tmp runs/data/kjv.txt
fi
if [[ -f runs/data/kjv-bpe4096/manifest.json ]]; then
  echo "runs/data/kjv-bpe4096 exists"
else
  "$bin" data prepare --input runs/data/kjv.txt --doc-delimiter '\n\n' --tokenizer bpe:4096 --seed 0 \
    --out runs/data/kjv-bpe4096 --force
fi
