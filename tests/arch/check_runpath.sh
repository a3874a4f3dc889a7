#!/usr/bin/env bash
# Every binary given has a RUNPATH (or RPATH) with no empty entry: the dynamic loader reads
# an empty entry (a leading, trailing or doubled ':') as the current directory, and would
# look for the binary's libraries there first. Usage: check_runpath.sh BINARY...
# A binary without either passes: it searches no directory of its own.
set -euo pipefail
command -v readelf >/dev/null || { echo "check_runpath: readelf (binutils) is not installed"; exit 1; }
status=0
for bin in "$@"; do
  dynamic=$(readelf -d "$bin") || { echo "$bin: readelf cannot read it"; exit 1; }
  while IFS= read -r p; do
    case ":$p:" in
      *::*) echo "$bin: runpath \"$p\" has an empty entry (the current directory)"; status=1 ;;
    esac
  done < <(sed -nE 's/.*\((RUNPATH|RPATH)\).*\[(.*)\]$/\2/p' <<<"$dynamic")
done
exit $status
