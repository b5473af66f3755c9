"""Sum of PSS (/proc/PID/smaps_rollup) of K processes that each open bucketload.Loader over a
10^6-object files manifest, started by fork or spawn. Usage: pss.py fork|spawn K URI"""
import multiprocessing as mp
import os
import sys


def pss_kb() -> int:
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError("no Pss")


def catalog_pss_kb() -> int:
    """PSS of this process's mappings of shared catalog files (*.files)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                inside = line.rstrip().endswith(".files")
            elif inside and first == "Pss:":
                total += int(line.split()[1])
    return total


def worker(uri, opened, measured, results):
    import bucketload
    before = pss_kb()
    loader = bucketload.Loader(uri, decode=False)
    samples = len(loader)
    opened.wait()  # every process has opened: shared pages are shared by all
    results.put((os.getpid(), before, pss_kb(), samples, catalog_pss_kb()))
    measured.wait()  # stay alive until every process has measured


def main():
    how, k, uri = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ctx = mp.get_context(how)
    if how == "fork":
        import bucketload  # noqa: F401  (imported before the fork, as a DataLoader's parent has)
    opened, measured, results = ctx.Barrier(k), ctx.Barrier(k + 1), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(uri, opened, measured, results)) for _ in range(k)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in procs]
    measured.wait()
    for p in procs:
        p.join()
    before = sum(g[1] for g in got)
    after = sum(g[2] for g in got)
    print(f"{how} K={k}: sum PSS before open {before/1024:.1f} MB, after {after/1024:.1f} MB, "
          f"opening cost {(after-before)/1024:.1f} MB; per process after: "
          f"{sorted(round(g[2]/1024, 1) for g in got)}; batches {got[0][3]}; "
          f"sum PSS of the catalog maps {sum(g[4] for g in got)/1024:.1f} MB")


if __name__ == "__main__":
    main()
