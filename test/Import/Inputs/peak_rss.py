"""Runs a command and checks its peak resident memory.

    peak_rss.py LIMIT_BYTES COMMAND...

Prints the command's peak RSS (getrusage of the child) and exits 1 if the
command failed or its peak reached LIMIT_BYTES.
"""

import resource
import subprocess
import sys


def main():
    limit = int(sys.argv[1])
    status = subprocess.call(sys.argv[2:])
    # ru_maxrss is in KiB on Linux: the largest child's peak.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(f"exit status {status}, peak RSS {peak >> 20} MiB, "
          f"limit {limit >> 20} MiB")
    return 0 if status == 0 and peak < limit else 1


if __name__ == "__main__":
    sys.exit(main())
