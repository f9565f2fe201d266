#!/usr/bin/env bash
# loader_rss.sh: the loader's memory bound, end to end.
#
# Generates (once) an uncompressed Parquet dataset of id, label, features[F]
# with `meshfeed gen`, reads it whole with `meshfeed read --read-ahead BUDGET`,
# and compares the reader's peak RSS with the bound
#
#     read-ahead budget + two row groups (decoded) + 64 MiB
#
# exiting 1 when the peak exceeds it. Peak RSS comes from /usr/bin/time -v, or,
# where that is missing, from VmHWM in /proc/PID/status polled until exit.
#
# Settings (environment variables):
#   ROWS      rows to generate          default 8000000 (~2 GB at F=64)
#   FEATURES  length of features        default 64
#   RG_ROWS   rows per row group        default 65536
#   FILES     files                     default 8
#   BUDGET    read-ahead bytes          default 268435456 (256 MiB)
#   WORKERS   decode workers            default: meshfeed read's default
#   DATA      dataset directory         default ${TMPDIR:-/tmp}/meshfeed-rss/<params>
#             (kept between runs; gen --if-absent reuses it)
#   MESHFEED  meshfeed binary           default: `make build`, then bin/meshfeed
#   PEAK_FROM time or proc              default: time when /usr/bin/time exists
#
# Example (what the README quotes):   benchmarks/loader_rss.sh
# Quick check:                        ROWS=1000000 BUDGET=67108864 benchmarks/loader_rss.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROWS="${ROWS:-8000000}"
FEATURES="${FEATURES:-64}"
RG_ROWS="${RG_ROWS:-65536}"
FILES="${FILES:-8}"
BUDGET="${BUDGET:-268435456}"
WORKERS="${WORKERS:-}"
DATA="${DATA:-${TMPDIR:-/tmp}/meshfeed-rss/rows${ROWS}-f${FEATURES}-rg${RG_ROWS}-files${FILES}}"

for v in ROWS FEATURES RG_ROWS FILES BUDGET; do
	if ! [[ "${!v}" =~ ^[0-9]+$ ]]; then
		echo "loader_rss.sh: $v=${!v}: want a non-negative integer" >&2
		exit 2
	fi
done
if [[ -n "$WORKERS" && ! "$WORKERS" =~ ^[1-9][0-9]*$ ]]; then
	echo "loader_rss.sh: WORKERS=$WORKERS: want a positive integer" >&2
	exit 2
fi

if [[ -z "${MESHFEED:-}" ]]; then
	make -C "$ROOT" -s build
	MESHFEED="$ROOT/bin/meshfeed"
fi
if [[ ! -x "$MESHFEED" ]]; then
	echo "loader_rss.sh: $MESHFEED is not an executable" >&2
	exit 2
fi

"$MESHFEED" gen --out "$DATA" --rows "$ROWS" --files "$FILES" --row-group-rows "$RG_ROWS" \
	--features "$FEATURES" --compression none --if-absent

# One full row group decoded: id int64 + label int32 + features float32[F].
ROW_BYTES=$((8 + 4 + 4 * FEATURES))
RG_BYTES=$((RG_ROWS * ROW_BYTES))
if ((RG_ROWS > ROWS)); then RG_BYTES=$((ROWS * ROW_BYTES)); fi
SLACK=$((64 << 20))
BOUND=$((BUDGET + 2 * RG_BYTES + SLACK))

args=(read --read-ahead "$BUDGET")
if [[ -n "$WORKERS" ]]; then args+=(--workers "$WORKERS"); fi
args+=("$DATA")

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

peak_kb=""
PEAK_FROM="${PEAK_FROM:-$([[ -x /usr/bin/time ]] && echo time || echo proc)}"
case "$PEAK_FROM" in
time | proc) ;;
*)
	echo "loader_rss.sh: PEAK_FROM=$PEAK_FROM: want time or proc" >&2
	exit 2
	;;
esac
if [[ "$PEAK_FROM" == time ]]; then
	how="/usr/bin/time -v"
	/usr/bin/time -v -o "$tmp/time" "$MESHFEED" "${args[@]}"
	peak_kb="$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$tmp/time")"
else
	how="VmHWM polling"
	"$MESHFEED" "${args[@]}" &
	pid=$!
	peak_kb=0
	while kill -0 "$pid" 2>/dev/null; do
		# Builtins only, so the poll is cheap enough to run every 5 ms.
		while read -r key val _; do
			if [[ "$key" == VmHWM: ]] && ((val > peak_kb)); then peak_kb=$val; fi
		done <"/proc/$pid/status" 2>/dev/null || true
		sleep 0.005
	done
	wait "$pid"
fi
if ! [[ "$peak_kb" =~ ^[0-9]+$ ]] || ((peak_kb == 0)); then
	echo "loader_rss.sh: could not measure peak RSS ($how gave '${peak_kb}')" >&2
	exit 2
fi
PEAK=$((peak_kb * 1024))

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
data_bytes="$(du -sb "$DATA" | awk '{print $1}')"
echo
echo "dataset        $DATA ($ROWS rows, $(mib "$data_bytes") on disk)"
echo "peak RSS       $(mib "$PEAK")   ($how)"
echo "bound          $(mib "$BOUND")   = read-ahead $(mib "$BUDGET") + 2 row groups x $(mib "$RG_BYTES") + $(mib "$SLACK")"
if ((PEAK > BOUND)); then
	echo "FAIL: peak RSS exceeds the bound by $(mib $((PEAK - BOUND)))"
	exit 1
fi
echo "OK: peak RSS is $(awk -v p="$PEAK" -v b="$BOUND" 'BEGIN { printf "%.0f%%", 100 * p / b }') of the bound"
