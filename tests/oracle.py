"""What a test does when the reference it checks against (its oracle:
Chromium, npm's gpt-3-encoder under node, pip) is missing here.

For a developer it is a skip (exit status 77, ctest's SKIP_RETURN_CODE):
a machine without Chromium still runs the rest. Under CI it is a failure,
or CI would pass without the check: when the environment variable CI is
set and not empty (CI services set CI=true) or MHA_REQUIRE_ORACLES=1;
MHA_REQUIRE_ORACLES=0 makes it a skip again, under CI too. The same rule,
for shell and CMake, is tests/oracle.sh; for node, missingOracle in
tests/tokenizer_npm_diff.js. A skip by design (no OpenMP in
test_threads, a sanitizer build in cli_oom) is not a missing oracle.
"""
import os

INSTALL = "scripts/deps.sh --test installs it"


def required():
    """The variable that makes a missing oracle a failure ("CI=true",
    "MHA_REQUIRE_ORACLES=1"), or None where it is a skip."""
    req = os.environ.get("MHA_REQUIRE_ORACLES", "")
    if req:
        return "MHA_REQUIRE_ORACLES=1" if req == "1" else None
    return "CI=%s" % os.environ["CI"] if os.environ.get("CI") else None


def message(test, what):
    """The line that says so: "TEST: skipped: WHAT; how to install it", or
    "TEST: FAIL: ..." naming the variable that requires it."""
    why = required()
    if why:
        return "%s: FAIL: %s; %s (%s: a missing oracle fails; MHA_REQUIRE_ORACLES=0 makes it a skip)" % (
            test, what, INSTALL, why)
    return "%s: skipped: %s; %s" % (test, what, INSTALL)


def missing(test, what):
    """Prints the line and returns the program's exit status: 1 where the
    oracle is required, else 77."""
    print(message(test, what), flush=True)
    return 1 if required() else 77


def pytest_missing(test, what):
    """Inside a pytest test: fails it where the oracle is required, else
    skips it."""
    import pytest
    if required():
        pytest.fail(message(test, what), pytrace=False)
    pytest.skip(message(test, what))
