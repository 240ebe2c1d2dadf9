#!/usr/bin/env bash
# The README's test command on a machine that other dsh programs use too (docs/dsh-subprocess.md,
# "The leak guard").
#
# 1. Leaves a SIGKILLed dsh host's leftovers from before the suite: a `dsh demo` killed mid-run
#    (its Claude Code run dir in the shared temp dir names a dead owner).
# 2. Runs `dsh demo` in a loop beside the suite; every demo start reaps dead owners' trees and
#    sweeps their run dirs, which is what races the suite's crash tests and leak guards.
# 3. Runs the README's test command, stops the loop, and prints both outcomes.
# Exit status: the suite's, or 1 if a demo failed or no leftover could be made.
set -uo pipefail
cd "$(dirname "$0")/.."
tmp=${TMPDIR:-/tmp}
state=$(mktemp -d)
trap 'touch "$state/stop"; wait; rm -rf "$state"' EXIT

# Sync the environment once; the killed host is the venv's own `dsh`, not uv's wrapper.
dsh="$(uv run python -c 'import sys; print(sys.prefix)')/bin/dsh"

leftover=""
for delay in 1.0 1.5 2.0 2.5; do
  "$dsh" demo >/dev/null 2>&1 &
  host=$!
  sleep "$delay"
  kill -KILL "$host"
  wait
  leftover=$(find "$tmp" -maxdepth 1 -name "dsh-claude-$host-*" -print -quit)
  [ -n "$leftover" ] && break
done
if [ -z "$leftover" ]; then
  echo "could not leave a killed host's run dir behind" >&2
  exit 1
fi
echo "leftover of a SIGKILLed host (pid $host): $leftover"

(
  ok=0 failed=0
  while [ ! -e "$state/stop" ]; do
    if "$dsh" demo >"$state/last" 2>&1; then
      ok=$((ok + 1))
    else
      failed=$((failed + 1))
      cp "$state/last" "$state/failed-$failed"
    fi
    echo "$ok $failed" >"$state/count"
  done
) &

uv run pytest "$@"
status=$?
touch "$state/stop"
wait
read -r ok failed <"$state/count"
echo "beside the suite: $ok demos passed, $failed failed"
for log in "$state"/failed-*; do [ -e "$log" ] && echo "-- a failed demo:" && cat "$log"; done
[ -e "$leftover" ] && echo "the killed host's run dir is still there: $leftover"
[ "$failed" -eq 0 ] || exit 1
exit "$status"
