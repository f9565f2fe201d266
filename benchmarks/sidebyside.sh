#!/usr/bin/env bash
# The full server and Flight benchmarks of an older commit and of the working
# tree, alternated in one invocation, so that the machine's drift hits both:
#   benchmarks/sidebyside.sh OLD_COMMIT [ROUNDS]
# The old commit's pipeline benchmark lives in ./transport (before the split
# into feed/), the new one in ./feed.
set -euo pipefail
old=${1:?usage: benchmarks/sidebyside.sh OLD_COMMIT [ROUNDS]}
rounds=${2:-6}
top=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$top" worktree add -q --detach "$tmp/old" "$old"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./transport)
oldpipe=./transport
if [ -d "$tmp/old/feed" ]; then (cd "$tmp/old" && go test -c -o "$tmp/oldpipe.test" ./feed); oldpipe=./feed; else cp "$tmp/old.test" "$tmp/oldpipe.test"; fi
(cd "$top" && go test -c -o "$tmp/new.test" ./transport && go test -c -o "$tmp/newpipe.test" ./feed)
for i in $(seq "$rounds"); do
  (cd "$tmp/old/$oldpipe" && "$tmp/oldpipe.test" -test.run '^$' -test.bench ServePipeline -test.benchtime 100x) | grep '^Benchmark' | sed 's/^/old /'
  (cd "$top/feed" && "$tmp/newpipe.test" -test.run '^$' -test.bench ServePipeline -test.benchtime 100x) | grep '^Benchmark' | sed 's/^/new /'
  (cd "$tmp/old/transport" && "$tmp/old.test" -test.run '^$' -test.bench '^BenchmarkDoGet$/.*/8MiB/zerocopy$' -test.benchtime 100x) | grep '^Benchmark' | grep -v Pyarrow | sed 's/^/old /'
  (cd "$top/transport" && "$tmp/new.test" -test.run '^$' -test.bench '^BenchmarkDoGet$/.*/8MiB/zerocopy$' -test.benchtime 100x) | grep '^Benchmark' | grep -v Pyarrow | sed 's/^/new /'
done
