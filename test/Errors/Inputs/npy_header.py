#!/usr/bin/env python3
"""Writes a .npy file whose header claims SHAPE but which holds BYTES data bytes.

    npy_header.py OUT SHAPE BYTES      e.g. npy_header.py x.npy "(2, 4)" 32

numpy itself cannot write a header that disagrees with the data; the runtime
must refuse such a file from its size before it allocates for the shape.
"""

import sys


def main():
    out, shape, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"
              % shape).encode()
    # Magic (6), version (2), header length (2): the data starts at a
    # multiple of 64.
    header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    with open(out, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") +
                header + bytes(size))


if __name__ == "__main__":
    main()
