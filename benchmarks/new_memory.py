"""What writing new files costs in CPU on this machine, when the memory behind the page cache
is new to the guest and when it was freed a moment ago: 400 MB into 50 files (8 MB writes),
then the same right after deleting them, then again 5 s after deleting them.

On a virtual machine whose host takes freed guest memory back (free page reporting), memory
the guest has not touched lately costs a fault in the host on first use; a cold epoch with a
disk cache writes the dataset into new page cache and pays it (docs/BENCHMARKS.md, "Cold and
warm epochs through the loader").

    python3 benchmarks/new_memory.py DIR      # DIR on the cache's file system
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

FILES, SIZE = 50, 8 << 20


def write(root: str, tag: str) -> tuple[float, float]:
    """Seconds of wall time and of this process's CPU to write the files."""
    folder = os.path.join(root, tag)
    os.mkdir(folder)
    buf = os.urandom(SIZE)
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(FILES):
        fd = os.open(os.path.join(folder, f"f{i}"), os.O_CREAT | os.O_WRONLY)
        os.write(fd, buf)
        os.close(fd)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    root = tempfile.mkdtemp(dir=sys.argv[1])
    mb = FILES * SIZE / 1e6

    def report(what: str, took: tuple[float, float]) -> None:
        print(f"{what}: {mb:.0f} MB in {took[0]:.3f} s, {took[1]:.3f} s CPU")

    report("new files", write(root, "a"))
    shutil.rmtree(os.path.join(root, "a"))
    report("right after deleting them", write(root, "b"))
    shutil.rmtree(os.path.join(root, "b"))
    time.sleep(5)
    report("5 s after deleting them", write(root, "c"))
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
