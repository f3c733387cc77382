#!/usr/bin/env python3
"""Runs a command and succeeds only if it exits with the given status.

    expect_exit.py STATUS COMMAND...

The command's output passes through. A command killed by a signal (a crash)
never matches, so `%expect_exit 1 moec ...` checks both the exit status and
that there was no crash; lit's `not` only checks that it is non-zero.
"""

import subprocess
import sys


def main():
    expected = int(sys.argv[1])
    status = subprocess.call(sys.argv[2:])
    if status != expected:
        print(f"expect_exit: expected exit status {expected}, got {status}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
