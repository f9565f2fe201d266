#!/usr/bin/env bash
# The loader's decode benchmarks of an older commit and of the working tree,
# alternated in one invocation so that the machine's drift hits both, with
# each benchmark's median ns/op and the ratio new/old:
#   benchmarks/decode_sidebyside.sh OLD_COMMIT [ROUNDS] [BENCH_REGEXP...]
# Defaults: 5 rounds; BenchmarkDecode (uncompressed, snappy, zstd; the pool
# allocator, one worker) and BenchmarkPieces, each run BENCHTIME (20x) per
# round (go test splits a -bench pattern at its slashes, one part per level:
# give one pattern per benchmark family). MESHFEED_BENCH_ROWS sets the
# dataset size (500000 here unless set); OLD_TEST names an old test binary
# already built (go test -c ./loader at OLD_COMMIT) to skip building it. The
# benchmark names are the same on both sides (the format move kept them in
# ./loader). BenchmarkPageEngine moved to ./format with the decoders: compare
# it with go test -bench PageEngine in ./loader of a tree before the move and
# ./format after.
set -euo pipefail
old=${1:?usage: benchmarks/decode_sidebyside.sh OLD_COMMIT [ROUNDS] [BENCH_REGEXP...]}
rounds=${2:-5}
shift $(($# < 2 ? $# : 2))
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=('Decode/.*/.*/^pool,workers=1$' 'Pieces/')
benchtime=${BENCHTIME:-20x}
export MESHFEED_BENCH_ROWS=${MESHFEED_BENCH_ROWS:-500000}
top=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$top" worktree add -q --detach "$tmp/old" "$old"
if [ -n "${OLD_TEST:-}" ]; then cp "$OLD_TEST" "$tmp/old.test"; else (cd "$tmp/old" && go test -c -o "$tmp/old.test" ./loader); fi
(cd "$top" && go test -c -o "$tmp/new.test" ./loader)
run() { # side binary dir
  for bench in "${benches[@]}"; do
    (cd "$3" && "$2" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime") | grep '^Benchmark' | sed "s/^/$1 /"
  done
}
for i in $(seq "$rounds"); do
  if [ $((i % 2)) = 1 ]; then
    run old "$tmp/old.test" "$tmp/old/loader"; run new "$tmp/new.test" "$top/loader"
  else
    run new "$tmp/new.test" "$top/loader"; run old "$tmp/old.test" "$tmp/old/loader"
  fi
done | tee "$tmp/runs.txt"
python3 - "$tmp/runs.txt" <<'PY'
import collections, re, statistics, sys
# Per benchmark: the old and new ns/op of each round, in the order run.
runs = collections.defaultdict(lambda: {'old': [], 'new': []})
for line in open(sys.argv[1]):
    m = re.match(r'(old|new) (\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op', line)
    if m:
        runs[m[2]][m[1]].append(float(m[4]))
print(f"\n{'benchmark':66s} {'old ms':>8s} {'new ms':>8s} {'new/old':>8s} {'paired':>8s}")
for name, s in runs.items():
    k = min(len(s['old']), len(s['new']))
    if k == 0:
        continue
    o, n = statistics.median(s['old']), statistics.median(s['new'])
    # paired: the median of each round's ratio (the two sides of a round ran
    # back to back, under the same load)
    paired = statistics.median(s['new'][i] / s['old'][i] for i in range(k))
    print(f"{name:66s} {o/1e6:8.2f} {n/1e6:8.2f} {n/o:8.3f} {paired:8.3f}")
PY
