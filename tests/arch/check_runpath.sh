#!/usr/bin/env bash
# Every binary given has a RUNPATH (or RPATH) with no empty entry: the dynamic loader reads
# an empty entry (a leading, trailing or doubled ':') as the current directory, and would
# look for the binary's libraries there first. Usage: check_runpath.sh BINARY...
set -euo pipefail
status=0
for bin in "$@"; do
  paths=$(readelf -d "$bin" | sed -nE 's/.*\((RUNPATH|RPATH)\).*\[(.*)\]$/\2/p')
  while IFS= read -r p; do
    [ -n "$p" ] || continue
    case ":$p:" in
      *::*) echo "$bin: runpath \"$p\" has an empty entry (the current directory)"; status=1 ;;
    esac
  done <<<"$paths"
done
exit $status
