#!/usr/bin/env python3
"""Runs the README's first-session block line by line, as a new user would.

    run_readme_block.py README.md WORKDIR

The block is the indented code after the `<!-- first-session -->` marker.
WORKDIR gets the repository's examples/ (a link), so that the commands'
relative paths work; `export PATH=...build/bin...` is left to the caller
(lit puts the built tools on PATH). Each command runs in bash as typed,
without pipefail (`| head` ends its writer early, as in a terminal); a
failing one prints its output and ends the run with exit 1. Prints one
`readme: ok: COMMAND` line per command that succeeded.
"""

import os
import subprocess
import sys


def first_session_block(readme):
    lines = open(readme, encoding="utf-8").read().splitlines()
    try:
        start = lines.index("<!-- first-session -->") + 1
    except ValueError:
        sys.exit(f"readme: error: {readme}: no <!-- first-session --> marker")
    while start < len(lines) and not lines[start].strip():
        start += 1
    commands = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        commands.append(line.strip())
    if not commands:
        sys.exit(f"readme: error: {readme}: the first-session block is empty")
    return commands


def main():
    readme, workdir = sys.argv[1], sys.argv[2]
    root = os.path.dirname(os.path.abspath(readme))
    os.makedirs(workdir, exist_ok=True)
    examples = os.path.join(workdir, "examples")
    if not os.path.exists(examples):
        os.symlink(os.path.join(root, "examples"), examples)
    for command in first_session_block(readme):
        if command.startswith("export PATH="):
            continue
        result = subprocess.run(["bash", "-c", command],
                                cwd=workdir, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stdout.write(result.stdout)
            sys.stdout.write(result.stderr)
            print(f"readme: error: exit {result.returncode}: {command}")
            return 1
        print(f"readme: ok: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
