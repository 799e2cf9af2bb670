# Sourced by the checks that forbid a call outside the one place allowed to make it.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# Lists the lines of the C++ sources of src/ and apps/ that match PATTERN (an extended regular
# expression) in files whose path does not start as ALLOWED (one too), comment lines left out,
# under HEADLINE, and exits 1; returns when there are none.
forbid_outside() {
  local headline=$1 pattern=$2 allowed=$3 found
  found=$(grep -rnE "$pattern" --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
            src apps |
          grep -vE "^($allowed)" |
          grep -vE '^[^:]+:[0-9]+:[[:space:]]*//')
  [ -z "$found" ] && return
  echo "$headline"
  echo "$found"
  exit 1
}
