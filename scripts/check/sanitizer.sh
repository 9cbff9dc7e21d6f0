#!/usr/bin/env bash
# compute-sanitizer's memcheck, then racecheck, over test_cuda's cases, one case per run (so that
# a limit that stops one leaves every earlier verdict whole), within LIMIT seconds: memcheck gets
# the first half, racecheck what is left. Cases run in the order the SPECs list them (each once);
# those the time does not reach are named.
# Usage: sanitizer.sh BIN LIMIT_S LOGS SPEC...
#   BIN: the directory with test_cuda; LOGS: where sanitizer-TOOL.log go; SPEC: Catch2 test specs.
# The runtime comes first (scripts/check/runtime-kind.sh; XTRAIN_RUNTIME_ROOT is its ROOT): under
# gVisor compute-sanitizer cannot attach to the GPU, and nothing runs.
# Prints Markdown lines. Exit 0: every case that ran was clean (some may have timed out or not
# been reached: said); 1: a case had errors, or failed under the tool; 3: not run (why is said).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 limit=$2 logs=$3
shift 3

kind_line=$("$here/runtime-kind.sh" "${XTRAIN_RUNTIME_ROOT:-/}")
kind=${kind_line%% *}
echo "runtime: $kind (${kind_line#* })"
if [[ "$kind" == gvisor ]]; then
  echo "not run: under gVisor compute-sanitizer cannot attach to the GPU (its GPU proxy forwards CUDA's calls to the" \
       "driver, not the debugger interface the sanitizer needs); a VM with the GPU passed through, or bare metal, can"
  exit 3
fi
sanitizer=$(command -v compute-sanitizer)
for candidate in ${CUDA_HOME:+$CUDA_HOME/bin/compute-sanitizer} /usr/local/cuda/bin/compute-sanitizer \
                 /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z "$sanitizer" && -x "$candidate" ]] && sanitizer=$candidate
done
if [[ -z "$sanitizer" ]]; then
  echo "not run: no compute-sanitizer (looked on PATH, in \$CUDA_HOME/bin and /usr/local/cuda)"
  exit 3
fi
if [[ ! -x "$bin/test_cuda" ]]; then
  echo "not run: no test_cuda in $bin"
  exit 3
fi

mapfile -t cases < <(for spec in "$@"; do timeout 30 "$bin/test_cuda" --list-test-names-only "$spec"; done |
                     awk 'NF && !seen[$0]++')
if (( ${#cases[@]} == 0 )); then
  echo "not run: test_cuda lists no case for $*"
  exit 3
fi
echo "$sanitizer; ${#cases[@]} cases ($*), one run each, ${limit} s in all"

# A test name as a Catch2 spec that matches it alone: its special characters escaped.
spec_of() {
  local s=${1//\\/\\\\}
  s=${s//,/\\,}
  s=${s//\[/\\[}
  echo "${s//\]/\\]}"
}

status=0
start=$SECONDS
for tool in memcheck racecheck; do
  if [[ $tool == memcheck ]]; then
    deadline=$(( start + limit / 2 ))
  else
    deadline=$(( start + limit ))
  fi
  log="$logs/sanitizer-$tool.log"
  : >"$log"
  clean=0 dirty=0 failed=0 slow=0 unreached=()
  for name in "${cases[@]}"; do
    left=$(( deadline - SECONDS ))
    if (( left < 5 )); then
      unreached+=("$name")
      continue
    fi
    echo "### $name" >>"$log"
    timeout -k 5 "$left" "$sanitizer" --tool "$tool" --error-exitcode 9 "$bin/test_cuda" "$(spec_of "$name")" \
      >>"$log" 2>&1
    rc=$?
    case $rc in
      0) clean=$((clean + 1)) ;;
      9) dirty=$((dirty + 1)); echo "- $tool found errors in: $name" ;;
      124|137) slow=$((slow + 1)); echo "- $tool: not judged, still running after the $left s left: $name" ;;
      *) failed=$((failed + 1)); echo "- $tool: the case failed (exit $rc) under the tool: $name" ;;
    esac
  done
  (( dirty + failed > 0 )) && status=1
  echo "$tool: $clean clean, $dirty with errors, $failed failed, $slow timed out, ${#unreached[@]} not reached" \
       "of ${#cases[@]} cases"
  (( ${#unreached[@]} > 0 )) && echo "  not reached (time): $(printf '%s; ' "${unreached[@]}")"
  if (( dirty > 0 )); then
    echo '```'
    grep -E '^========= (Invalid|Error|Race|.*[Hh]azard|Program hit|Uninitialized|Leaked)' "$log" | head -20
    echo '```'
  fi
done
exit $status
