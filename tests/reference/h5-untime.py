#!/usr/bin/env python3
"""Print the SHA-256 of mt's HDF5 checkpoint files with what changes between two saves of
the same state zeroed, as sha256sum prints it.

Two saves of one state differ only in (1) the four times HDF5 stamps on each version-2
object header ("OHDR" with flag 0x20) and that header's checksum, (2) the `pid` attribute of
a sharded part (the save's tag, rank 0's process id) and the checksum of the fractal-heap
block ("FHDB") that holds it. This zeroes exactly those bytes, read from the headers by
the layout of the HDF5 file format specification (version 2 object headers, attribute
message version 3, fractal heaps), so anything else that differs changes the hash.
Usage: h5untime.py FILE..."""
import hashlib, sys

def u(b, p, n):
    return int.from_bytes(b[p:p + n], "little")

def untime(raw):
    b = bytearray(raw)
    i = b.find(b"OHDR")
    while i >= 0:
        if b[i + 4] == 2:
            flags, p = b[i + 5], i + 6
            if flags & 0x20:
                b[p:p + 16] = bytes(16)
                p += 16
            if flags & 0x10:
                p += 4
            w = 1 << (flags & 3)
            size = u(b, p, w)
            p += w
            b[p + size:p + size + 4] = bytes(4)
        i = b.find(b"OHDR", i + 4)
    # the pid attribute: message version 3, then flags, name/datatype/dataspace sizes, encoding
    i = b.find(b"pid\x00")
    while i >= 0:
        m = i - 9
        if b[m] == 3 and u(b, m + 2, 2) == 4:
            dt, ds = u(b, m + 4, 2), u(b, m + 6, 2)
            d = i + 4 + dt + ds
            b[d:d + 8] = bytes(8)
        i = b.find(b"pid\x00", i + 4)
    # fractal heap direct blocks: the checksum after the block offset (FRHP says its width)
    i = b.find(b"FHDB")
    while i >= 0:
        h = u(b, i + 5, 8)
        if b[h:h + 4] == b"FRHP" and b[h + 9] & 2:
            p = i + 13 + (u(b, h + 128, 2) + 7) // 8
            b[p:p + 4] = bytes(4)
        i = b.find(b"FHDB", i + 4)
    return bytes(b)

for f in sys.argv[1:]:
    print(hashlib.sha256(untime(open(f, "rb").read())).hexdigest() + "  " + f)
