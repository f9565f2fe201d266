#!/usr/bin/env bash
# Planning 1,000 local files (BenchmarkPlan1000Files/local: list, read every
# footer, project) on an older commit and on the working tree, alternated in
# one invocation, so that the machine's drift hits both:
#   benchmarks/plan_sidebyside.sh OLD_COMMIT [ROUNDS]
set -euo pipefail
old=${1:?usage: benchmarks/plan_sidebyside.sh OLD_COMMIT [ROUNDS]}
rounds=${2:-6}
top=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$top" worktree add -q --detach "$tmp/old" "$old"
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./loader)
(cd "$top" && go test -c -o "$tmp/new.test" ./loader)
for i in $(seq "$rounds"); do
  (cd "$tmp/old/loader" && "$tmp/old.test" -test.run '^$' -test.bench 'Plan1000Files/local$' -test.benchtime 5x) | grep '^Benchmark' | sed 's/^/old /'
  (cd "$top/loader" && "$tmp/new.test" -test.run '^$' -test.bench 'Plan1000Files/local$' -test.benchtime 5x) | grep '^Benchmark' | sed 's/^/new /'
done
