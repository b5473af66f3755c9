"""Writes a files manifest (format 1, as `bucketload manifest` writes it: key, size, etag,
crc32c) of N objects `train/class_XXX/sample_NNNNNNN.jpg` in 1,000 classes to stdout path."""
import hashlib, json, random, sys
n, out = int(sys.argv[1]), sys.argv[2]
rng = random.Random(7)
per = n // 1000
files, total = [], 0
for i in range(n):
    key = f"train/class_{i // per:03d}/sample_{i:07d}.jpg"
    size = rng.randint(80_000, 140_000)
    total += size
    files.append({"key": key, "size": size,
                  "etag": hashlib.md5(key.encode()).hexdigest(),
                  "crc32c": f"{rng.getrandbits(32):08x}"})
classes = [{"name": f"class_{c:03d}", "count": per} for c in range(1000)]
m = {"format_version": 1, "kind": "files",
     "parameters": {"source": "s3://bench/x", "label_policy": "folder", "tool_version": "0.1.0",
                    "created": "2026-11-28T00:00:00Z"},
     "samples": n, "bytes": total, "classes": classes, "files": files}
with open(out, "w") as f:
    json.dump(m, f)
