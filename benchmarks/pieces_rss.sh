#!/usr/bin/env bash
# pieces_rss.sh: the server's peak RSS against its budget, for row groups of
# 16 MiB to 1 GiB (memory that follows the budget, not the row groups).
#
# For each row-group size it generates (with `meshfeed gen`) an images-like
# dataset: one column image uint8[128,128,3] (49,152 bytes per row decoded,
# 196,608 in the file: Parquet stores uint8 as INT32), uncompressed, in
# row groups of SIZE / 196,608 rows, at least 2 row groups and 2,048 rows.
# Then benchmarks/serverrss starts `meshfeed serve --read-ahead BUDGET
# --memory-budget QUEUE`, reads one epoch of all SLICES slices with B=BATCH
# over Flight as one client, and reports the server's peak RssAnon and
# RssFile (/proc/PID/status, sampled every 2 ms) apart. With BEFORE set to
# another meshfeed binary (for example one built from the commit before this
# change) it measures that one too, side by side. Each dataset is deleted
# after its row (KEEP=1 keeps them); disk use is at most one dataset (2.1 GB
# for 1 GiB row groups).
#
# Settings (environment variables):
#   SIZES     row-group sizes in MiB    default "16 64 256 1024"
#   BUDGET    --read-ahead bytes        default 134217728 (128 MiB, the Loader's)
#   QUEUE     --memory-budget bytes     default 268435456 (256 MiB)
#   BATCH     global batch size         default 256
#   SLICES    slices, one client        default 8
#   WINDOW    shuffle window, rows      default 0 (file order)
#   DIR       where datasets go         default ${TMPDIR:-/tmp}/meshfeed-pieces-rss
#   MESHFEED  meshfeed binary           default: `make build`, then bin/meshfeed
#   BEFORE    a second binary to compare (optional)
#
# Example (what BENCHMARKS.md quotes): BEFORE=/tmp/meshfeed-before benchmarks/pieces_rss.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZES="${SIZES:-16 64 256 1024}"
BUDGET="${BUDGET:-134217728}"
QUEUE="${QUEUE:-268435456}"
BATCH="${BATCH:-256}"
SLICES="${SLICES:-8}"
WINDOW="${WINDOW:-0}"
DIR="${DIR:-${TMPDIR:-/tmp}/meshfeed-pieces-rss}"
BEFORE="${BEFORE:-}"
ROW_FILE=196608 # bytes per row in the file

if [[ -z "${MESHFEED:-}" ]]; then
	make -C "$ROOT" -s build
	MESHFEED="$ROOT/bin/meshfeed"
fi
RSS="$(mktemp -d)/serverrss"
(cd "$ROOT" && go build -o "$RSS" ./benchmarks/serverrss)

mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2"; }
row() { # binary label size rows
	local out
	if ! out="$("$RSS" --meshfeed "$1" --data "$DATA" --read-ahead "$BUDGET" --memory-budget "$QUEUE" \
		--batch "$BATCH" --slices "$SLICES" --window "$WINDOW" --columns image)"; then
		echo "| $3 MiB | $4 | $2 | $(mib "$BUDGET") / $(mib "$QUEUE") MiB | $WINDOW | refused: $(sed -n 's/.*desc = //p' <<<"$out" | cut -c1-160)... | | | |"
		return
	fi
	echo "| $3 MiB | $4 | $2 | $(mib "$BUDGET") / $(mib "$QUEUE") MiB | $WINDOW | $(mib "$(field peak_rss_anon "$out")") | $(mib "$(field peak_rss_file "$out")") | $(mib "$(field peak_rss "$out")") | $(field steps "$out") in $(field seconds "$out" | cut -c1-5) s |"
}

echo "| row group (file) | rows per row group | server | read-ahead / queue | window | peak RssAnon MiB | peak RssFile MiB | peak RSS MiB | steps |"
echo "|---|---|---|---|---|---|---|---|---|"
for size in $SIZES; do
	rows=$(( size * 1048576 / ROW_FILE ))
	total=$(( rows * 2 ))
	if (( total < 2048 )); then total=$(( (2048 + rows - 1) / rows * rows )); fi
	DATA="$DIR/rg${size}mib"
	"$MESHFEED" gen --out "$DATA" --rows "$total" --files 1 --row-group-rows "$rows" --features 0 \
		--image 128x128x3 --compression none --if-absent >/dev/null
	sync
	if [[ -n "$BEFORE" ]]; then
		row "$BEFORE" before "$size" "$rows"
	fi
	row "$MESHFEED" pieces "$size" "$rows"
	if [[ -z "${KEEP:-}" ]]; then
		rm -rf "$DATA"
	fi
done
