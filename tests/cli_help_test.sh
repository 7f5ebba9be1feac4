#!/usr/bin/env bash
# Every command of the CLI and the daemon explains itself: `--help` (and -h) prints its
# usage on standard output and exits 0, whatever the command; an unknown option exits 2.
# usage: cli_help_test.sh BUILD_DIR
set -euo pipefail
bin=$1
fail=0
for cmd in replay gen-trace put get del exists stat ping bench cluster top; do
  for flag in --help -h; do
    if ! out=$("$bin/kvpool" $cmd $flag 2>/dev/null); then
      echo "kvpool $cmd $flag: exit status $?"; fail=1; continue
    fi
    if [ -z "$out" ]; then echo "kvpool $cmd $flag: nothing on stdout"; fail=1; fi
  done
done
for flag in --help -h; do
  # (captured first: grep -q stops reading early, and a pipe would fail with SIGPIPE)
  out=$("$bin/kvpoold" $flag) || { echo "kvpoold $flag: exit status $?"; fail=1; }
  grep -q -- "--dram" <<<"$out" || { echo "kvpoold $flag: no usage"; fail=1; }
done
set +e
"$bin/kvpool" stat --no-such-option >/dev/null 2>&1
[ $? -eq 2 ] || { echo "kvpool stat --no-such-option: want exit 2"; fail=1; }
set -e
exit $fail
