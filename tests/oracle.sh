#!/bin/sh
# oracle.sh — tests/oracle.py's rule for shell scripts and CMake: a missing
# oracle (the reference a test checks against) is a skip, status 77, for a
# developer, and a failure where the environment variable CI is set and not
# empty (CI services set CI=true) or MHA_REQUIRE_ORACLES=1, or CI would pass
# without the check; MHA_REQUIRE_ORACLES=0 makes it a skip again.
#   . tests/oracle.sh; oracle_missing TEST WHAT   prints the line; status 1
#                                                 where required, else 77
#   sh tests/oracle.sh TEST WHAT                  the same as a program
#                                                 (tests/CMakeLists.txt)
#   oracle_required                               status 0 where required,
#                                                 the variable on stdout

oracle_required() {
  if [ -n "${MHA_REQUIRE_ORACLES:-}" ]; then
    [ "$MHA_REQUIRE_ORACLES" = 1 ] || return 1
    echo "MHA_REQUIRE_ORACLES=1"
  elif [ -n "${CI:-}" ]; then
    echo "CI=$CI"
  else
    return 1
  fi
}

oracle_missing() { # TEST WHAT
  if why=$(oracle_required); then
    echo "$1: FAIL: $2; scripts/deps.sh --test installs it ($why: a missing oracle fails;" \
      "MHA_REQUIRE_ORACLES=0 makes it a skip)"
    return 1
  fi
  echo "$1: skipped: $2; scripts/deps.sh --test installs it"
  return 77
}

case $0 in
*oracle.sh) oracle_missing "$@"; exit $? ;;
esac
